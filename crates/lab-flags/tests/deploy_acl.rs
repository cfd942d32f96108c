//! The deployments' Redis users are `lab_flags::acl`'s (issue 28): docker-compose.yml and the kind
//! overlay's Redis (k8s/overlays/kind/redis.yaml) write each role's rules out as redis-server
//! arguments, `--user <name> on ><password> <rule>...`; here the words after the password must be
//! exactly `rules("lab", role)`, in order (a word missing, added or moved fails), the default user
//! must be `off`, and no other user may exist but the operator (labctl).
//!
//! Both files keep the arguments as a YAML block sequence, one word per item, starting at the item
//! `redis-server`; the reader below takes that shape only and says so when it does not find it.

use lab_flags::acl::{rules, user, Role};
use std::path::{Path, PathBuf};

/// Every deployment runs the lab in the namespace `lab`.
const NAMESPACE: &str = "lab";
/// labctl's user: every command, key and channel (it is not a `Role`: `labctl up` uses the
/// machine's default user natively).
const OPERATOR: &str = "lab-operator";

fn repo_file(rel: &str) -> (PathBuf, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    (path, text)
}

/// A YAML block-sequence item's scalar: `"..."` (with `\"` and `\\`), `'...'` (with `''`), or
/// plain (a ` #` starts a comment).
fn scalar(raw: &str, at: &str) -> String {
    let raw = raw.trim();
    if let Some(inner) = raw.strip_prefix('"') {
        let end = inner
            .rfind('"')
            .unwrap_or_else(|| panic!("{at}: unterminated \"...\": {raw}"));
        let (body, rest) = (&inner[..end], inner[end + 1..].trim());
        assert!(rest.is_empty() || rest.starts_with('#'), "{at}: {raw}");
        assert!(
            !body.replace("\\\\", "").replace("\\\"", "").contains('\\'),
            "{at}: an escape this reader does not know: {raw}"
        );
        body.replace("\\\"", "\"").replace("\\\\", "\\")
    } else if let Some(inner) = raw.strip_prefix('\'') {
        let end = inner
            .rfind('\'')
            .unwrap_or_else(|| panic!("{at}: unterminated '...': {raw}"));
        let (body, rest) = (&inner[..end], inner[end + 1..].trim());
        assert!(rest.is_empty() || rest.starts_with('#'), "{at}: {raw}");
        body.replace("''", "'")
    } else {
        let plain = raw.split(" #").next().unwrap_or("").trim_end();
        // A plain scalar cannot start with these: YAML would read an anchor, alias, tag...
        assert!(
            !plain.starts_with(['&', '*', '!', '%', '@', '`', '>', '|', '{', '[', '~', '+']),
            "{at}: quote {plain:?}: as a plain YAML scalar it is not that word"
        );
        plain.to_string()
    }
}

/// The redis-server arguments of `text`: the block sequence whose item is `redis-server`, every
/// following item at the same indentation (comment and blank lines skipped).
fn redis_server_args(path: &Path, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            let item = l.trim_start().strip_prefix("- ").unwrap_or("");
            let item = item.split(" #").next().unwrap_or("").trim();
            matches!(item, "redis-server" | "\"redis-server\"" | "'redis-server'")
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        starts.len(),
        1,
        "{}: want exactly one block-sequence item `- redis-server` (the arguments, one word per \
         item), found {} at lines {:?}",
        path.display(),
        starts.len(),
        starts.iter().map(|i| i + 1).collect::<Vec<_>>()
    );
    let first = lines[starts[0]];
    let indent = first.len() - first.trim_start().len();
    let mut args = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(starts[0]) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let item = (line.len() - trimmed.len() == indent)
            .then(|| {
                trimmed
                    .strip_prefix("- ")
                    .or((trimmed == "-").then_some(""))
            })
            .flatten();
        match item {
            Some(v) => args.push(scalar(v, &format!("{}:{}", path.display(), i + 1))),
            None => break,
        }
    }
    args
}

/// `--user NAME WORD...` directives, in order: (name, words), a word starting with `--` ends one.
fn user_directives(args: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_user = false;
    let mut iter = args.iter().peekable();
    while let Some(a) = iter.next() {
        if a.starts_with("--") {
            in_user = a == "--user";
            if in_user {
                let name = iter.next().expect("--user without a name").clone();
                out.push((name, Vec::new()));
            }
        } else if in_user {
            out.last_mut().expect("in a --user").1.push(a.clone());
        }
    }
    out
}

/// The checks, on one file's arguments; every problem, not the first.
fn problems(args: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    let users = user_directives(args);
    let mut names: Vec<&str> = users.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    if names.len() != before {
        bad.push(format!(
            "a user is named twice (a second --user adds to the first's rules): {users:?}"
        ));
    }
    let find = |name: &str| users.iter().find(|(n, _)| n == name).map(|(_, w)| w);
    match find("default") {
        Some(w) if w == &["off"] => {}
        other => bad.push(format!(
            "`--user default off` missing (anyone could log in as the default user): {other:?}"
        )),
    }
    let mut known = vec!["default".to_string(), OPERATOR.to_string()];
    for role in Role::ALL {
        let name = user(NAMESPACE, role);
        known.push(name.clone());
        let Some(words) = find(&name) else {
            bad.push(format!("no `--user {name}` ({role:?})"));
            continue;
        };
        let password_ok = words.len() >= 2 && words[1].starts_with('>') && words[1].len() > 1;
        if words.first().map(String::as_str) != Some("on") || !password_ok {
            bad.push(format!(
                "{name}: want `on >PASSWORD` first, got {:?}",
                &words[..words.len().min(2)]
            ));
            continue;
        }
        let want = rules(NAMESPACE, role);
        if words[2..] != want[..] {
            bad.push(format!(
                "{name}: the rules differ from lab_flags::acl::rules({NAMESPACE:?}, {role:?})\n  \
                 deployed: {:?}\n  want:     {want:?}",
                &words[2..]
            ));
        }
    }
    match find(OPERATOR) {
        Some(w) if w.first().map(String::as_str) == Some("on") && w.len() >= 2 => {}
        other => bad.push(format!(
            "{OPERATOR} (labctl): want `on >PASSWORD ...`, got {other:?}"
        )),
    }
    for (name, _) in &users {
        if !known.contains(name) {
            bad.push(format!(
                "{name}: a user nobody is meant to have (known: {known:?})"
            ));
        }
    }
    bad
}

fn check(rel: &str) {
    let (path, text) = repo_file(rel);
    let args = redis_server_args(&path, &text);
    let bad = problems(&args);
    assert!(
        bad.is_empty(),
        "{}: its Redis users are not lab_flags::acl's:\n- {}",
        path.display(),
        bad.join("\n- ")
    );
}

#[test]
fn docker_compose_redis_users_are_lab_flags_acl() {
    check("docker-compose.yml");
}

#[test]
fn kind_redis_users_are_lab_flags_acl() {
    check("k8s/overlays/kind/redis.yaml");
}

/// The checks themselves: each change a deployment could drift by is caught.
#[test]
fn a_word_missing_added_or_moved_is_caught() {
    let line = |role| {
        let mut v = vec![
            "--user".to_string(),
            user(NAMESPACE, role),
            "on".into(),
            ">pw".into(),
        ];
        v.extend(rules(NAMESPACE, role));
        v
    };
    let good: Vec<String> = ["redis-server", "--save", "", "--user", "default", "off"]
        .iter()
        .map(|s| s.to_string())
        .chain(["--user", OPERATOR, "on", ">op", "~*", "&*", "+@all"].map(String::from))
        .chain(line(Role::Gateway))
        .chain(line(Role::Service))
        .collect();
    assert_eq!(problems(&good), Vec::<String>::new());
    let pos = |w: &str| good.iter().rposition(|a| a == w).unwrap();
    let mut missing = good.clone();
    missing.remove(pos("+hgetall"));
    let mut added = good.clone();
    added.insert(pos("+unsubscribe"), "+hset".into());
    let mut moved = good.clone();
    moved.swap(pos("-@all"), pos("+@connection"));
    let mut default_on = good.clone();
    default_on[5] = "on".into();
    let mut extra_user = good.clone();
    extra_user.extend(["--user", "lab-admin", "on", ">x", "+@all"].map(String::from));
    for (what, args) in [
        ("missing", missing),
        ("added", added),
        ("moved", moved),
        ("default on", default_on),
        ("extra user", extra_user),
    ] {
        assert!(!problems(&args).is_empty(), "{what} passed: {args:?}");
    }
}

#[test]
fn quoted_words_read_as_yaml_does() {
    assert_eq!(scalar(r#""%R~lab:flags""#, ""), "%R~lab:flags");
    assert_eq!(scalar("'&lab:flags:changed' # c", ""), "&lab:flags:changed");
    assert_eq!(scalar(r#""""#, ""), "");
    assert_eq!(scalar("resetkeys  # comment", ""), "resetkeys");
}

/// The folded (`>-`) item that follows `- -c` in `text`: the Redis container's shell command,
/// its lines joined by spaces as YAML folds them.
fn shell_command(path: &Path, text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .windows(2)
        .position(|w| w[0].trim() == "- -c" && w[1].trim() == "- >-")
        .unwrap_or_else(|| panic!("{}: no `- -c` followed by `- >-`", path.display()));
    let indent = |l: &str| l.len() - l.trim_start().len();
    let item = indent(lines[at + 1]);
    lines[at + 2..]
        .iter()
        .take_while(|l| indent(l) > item && !l.trim().is_empty())
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The gateway's user may only call the operator's function, so both deployments' Redis must
/// load it (the library the code was built with) before it reports ready, with one loader text.
#[test]
fn both_deployments_load_the_gateways_function_before_redis_is_ready() {
    let library = lab_flags::acl::RATELIMIT_LIBRARY;
    assert!(library.starts_with("#!lua name=retry_storm_lab\n"));
    assert!(library.contains(&format!(
        "redis.register_function('{}', ",
        lab_flags::acl::RATELIMIT_FUNCTION
    )));
    let (_, kind_copy) = repo_file("k8s/overlays/kind/redis/ratelimit.lua");
    assert!(
        kind_copy == library,
        "k8s/overlays/kind/redis/ratelimit.lua differs from crates/lab-flags/redis/ratelimit.lua \
         (cp the second over the first)"
    );
    let (_, kustomization) = repo_file("k8s/overlays/kind/kustomization.yaml");
    assert!(
        kustomization.contains("- name: redis-functions\n    files:\n      - redis/ratelimit.lua")
    );

    let mut loaders = Vec::new();
    for (rel, mount) in [
        (
            "docker-compose.yml",
            "./crates/lab-flags/redis/ratelimit.lua:/etc/redis-functions/ratelimit.lua:ro",
        ),
        (
            "k8s/overlays/kind/redis.yaml",
            "{name: functions, mountPath: /etc/redis-functions, readOnly: true}",
        ),
    ] {
        let (path, text) = repo_file(rel);
        assert!(
            text.contains(mount),
            "{}: the library is not mounted",
            path.display()
        );
        let loader = shell_command(&path, &text);
        for part in [
            "until redis-cli --no-auth-warning --user lab-operator -x FUNCTION LOAD REPLACE < \
             /etc/redis-functions/ratelimit.lua",
            "grep -qx retry_storm_lab",
            "exec docker-entrypoint.sh \"$$@\"",
        ] {
            assert!(
                loader.contains(part),
                "{}: the loader lacks {part:?}",
                path.display()
            );
        }
        let probe = "redis-cli --no-auth-warning --user lab-operator FUNCTION LIST LIBRARYNAME \
                     retry_storm_lab | grep -qx retry_storm_lab";
        assert!(
            text.contains(probe),
            "{}: Redis is ready before the function is loaded",
            path.display()
        );
        loaders.push(loader);
    }
    assert_eq!(
        loaders[0], loaders[1],
        "compose's and kind's loaders differ"
    );
}
