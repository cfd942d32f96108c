//! Where every number in `docs/reports/` comes from (issue 24), checked.
//!
//! `docs/reports/provenance.yaml` lists every file there, each one of:
//! - `regenerate: replay` / `regenerate: repeats`: written again from its committed run data
//!   (`data`: a replay's `summary.json`, a repeat's `repeats.json`) by the code that wrote it,
//!   and compared byte for byte: a number typed in, or edited, fails;
//! - `regenerate: command`: `command` (run from the repository root) prints the file from its
//!   committed data, byte for byte;
//! - `shows: <file>`: a screenshot or page drawn from the run of that listed file;
//! - `commentary: <source>`: not checkable against committed run data (hand-written prose, or
//!   the printout of a run whose data was not committed). The file says so itself: a line
//!   `> Commentary: <source>` (in a page: `<p class=commentary>Commentary: <source></p>`) — a
//!   reader must not take it for a measured report.
//!
//! A file in `docs/reports/` the manifest does not list fails too. When the code that writes a
//! report changes, `UPDATE_REPORTS=1 cargo test -p labctl provenance` rewrites the regenerated
//! ones from their data (review the diff: the numbers must not move).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::repeats::Repeats;
use crate::replay;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    reports: BTreeMap<String, Entry>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    Replay,
    Repeats,
    Command,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(default)]
    regenerate: Option<Kind>,
    /// The committed run data (relative to `docs/reports/`).
    #[serde(default)]
    data: Option<String>,
    /// With `regenerate: command`: argv, run from the repository root.
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    shows: Option<String>,
    #[serde(default)]
    commentary: Option<String>,
}

/// The first line where `got` (regenerated) and `want` (committed) differ, or `None`.
fn first_difference(want: &str, got: &str) -> Option<String> {
    if want == got {
        return None;
    }
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let i = (0..w.len().max(g.len()))
        .find(|i| w.get(*i) != g.get(*i))
        .unwrap_or(w.len());
    let cut = |s: Option<&&str>| {
        s.map_or("(end of file)".to_string(), |s| {
            s.chars().take(300).collect()
        })
    };
    Some(format!(
        "line {}: committed «{}», regenerated from its data «{}»",
        i + 1,
        cut(w.get(i)),
        cut(g.get(i))
    ))
}

fn regenerate(root: &Path, reports: &Path, e: &Entry) -> Result<String, String> {
    let read_data = || -> Result<Vec<u8>, String> {
        let d = e.data.as_ref().ok_or("no `data`")?;
        std::fs::read(reports.join(d)).map_err(|err| format!("data {d}: {err}"))
    };
    match e.regenerate.ok_or("no `regenerate`")? {
        Kind::Replay => {
            let s: replay::Summary = serde_json::from_slice(&read_data()?)
                .map_err(|err| format!("reading data: {err}"))?;
            Ok(replay::doc(&s).markdown())
        }
        Kind::Repeats => {
            let r: Repeats = serde_json::from_slice(&read_data()?)
                .map_err(|err| format!("reading data: {err}"))?;
            Ok(r.markdown())
        }
        Kind::Command => {
            let argv = e
                .command
                .as_ref()
                .filter(|c| !c.is_empty())
                .ok_or("no `command`")?;
            let out = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(root)
                .output()
                .map_err(|err| format!("running {argv:?}: {err}"))?;
            if !out.status.success() {
                return Err(format!(
                    "{argv:?} failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            String::from_utf8(out.stdout).map_err(|err| err.to_string())
        }
    }
}

/// Every file under `reports` (but `data/`), relative.
fn files(reports: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if rel != "data" {
                    walk(&p, base, out);
                }
            } else if rel != "provenance.yaml" {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(reports, reports, &mut out);
    out.sort();
    out
}

/// What is wrong with `root`/docs/reports against its manifest (empty: nothing). `update`:
/// rewrite a regenerated report that differs instead (UPDATE_REPORTS).
fn problems(root: &Path, update: bool) -> Vec<String> {
    let reports = root.join("docs/reports");
    let manifest: Manifest = match std::fs::read_to_string(reports.join("provenance.yaml"))
        .map_err(|e| e.to_string())
        .and_then(|t| serde_norway::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(m) => m,
        Err(e) => return vec![format!("provenance.yaml: {e}")],
    };
    let mut bad = Vec::new();
    for f in files(&reports) {
        if !manifest.reports.contains_key(&f) {
            bad.push(format!(
                "{f}: not in provenance.yaml (where do its numbers come from?)"
            ));
        }
    }
    for (name, e) in &manifest.reports {
        let path = reports.join(name);
        if !path.exists() {
            bad.push(format!("{name}: listed, but there is no such file"));
            continue;
        }
        let kinds = [
            e.regenerate.is_some(),
            e.shows.is_some(),
            e.commentary.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            bad.push(format!(
                "{name}: exactly one of regenerate, shows, commentary"
            ));
            continue;
        }
        if e.regenerate.is_some() {
            let want = std::fs::read_to_string(&path).unwrap_or_default();
            match regenerate(root, &reports, e) {
                Ok(got) if update && got != want => {
                    // After a change to how a report is written: rewrite it from its data
                    // (review the diff), as UPDATE_OPENAPI does for the API document.
                    std::fs::write(&path, got).expect("rewriting the report");
                }
                Ok(got) => {
                    if let Some(d) = first_difference(&want, &got) {
                        bad.push(format!(
                            "{name}: not what its data gives — {d} (a report whose writer \
                             changed: UPDATE_REPORTS=1 cargo test -p labctl provenance, and \
                             review the diff)"
                        ));
                    }
                }
                Err(err) => bad.push(format!("{name}: cannot regenerate: {err}")),
            }
        } else if let Some(of) = &e.shows {
            // Only a picture may lean on another file: a page carries numbers of its own.
            if !name.ends_with(".png") {
                bad.push(format!("{name}: `shows` is for screenshots; a page or text with numbers is regenerated or commentary"));
            }
            match manifest.reports.get(of) {
                Some(t) if t.shows.is_none() => {}
                Some(_) => bad.push(format!("{name}: shows {of}, itself a picture")),
                None => bad.push(format!("{name}: shows {of}, which is not listed")),
            }
        } else if let Some(source) = &e.commentary {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let banner = format!("> Commentary: {source}");
            let said = if name.ends_with(".html") {
                text.contains(&format!("<p class=commentary>Commentary: {source}</p>"))
            } else {
                text.lines().any(|l| l.trim_end() == banner)
            };
            if !said {
                bad.push(format!(
                    "{name}: commentary, but the file does not say so: add the line «{banner}»"
                ));
            }
        }
    }
    bad
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_committed_report_is_regenerated_from_its_run_data_or_says_it_is_commentary() {
    let bad = problems(&repo_root(), std::env::var_os("UPDATE_REPORTS").is_some());
    assert!(bad.is_empty(), "docs/reports/:\n{}", bad.join("\n"));
}

/// A copy of the committed reports (and what regenerating them needs) to break on purpose.
fn scratch() -> PathBuf {
    let root = repo_root();
    let dir = std::env::temp_dir().join(format!("lab_prov_{:016x}", rand::random::<u64>()));
    let copy = |rel: &str| {
        let (from, to) = (root.join(rel), dir.join(rel));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    };
    for f in [
        "provenance.yaml",
        "replay-incident.md",
        "data/replay-incident-summary.json",
    ] {
        copy(&format!("docs/reports/{f}"));
    }
    // Only that one entry: the rest of the manifest would name files not copied.
    let y = "reports:\n  replay-incident.md: {regenerate: replay, data: data/replay-incident-summary.json}\n";
    std::fs::write(dir.join("docs/reports/provenance.yaml"), y).unwrap();
    dir
}

#[test]
fn a_number_edited_in_a_report_an_unlisted_report_and_an_unmarked_commentary_all_fail() {
    let dir = scratch();
    let reports = dir.join("docs/reports");
    assert_eq!(
        problems(&dir, false),
        Vec::<String>::new(),
        "the untouched copy is clean"
    );
    // One number typed over: "0.30" (the fix in one number) becomes "0.50".
    let md = std::fs::read_to_string(reports.join("replay-incident.md")).unwrap();
    let at = md.find("## How good").unwrap();
    let line_end = at + md[at..].find("- legacy: ").unwrap();
    let edited = format!(
        "{}- legacy: 9{}",
        &md[..line_end],
        &md[line_end + "- legacy: ".len() + 1..]
    );
    std::fs::write(reports.join("replay-incident.md"), &edited).unwrap();
    let bad = problems(&dir, false);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("replay-incident.md: not what its data gives — line "),
        "{bad:?}"
    );
    std::fs::write(reports.join("replay-incident.md"), &md).unwrap();
    // A report nobody listed.
    std::fs::write(reports.join("typed.md"), "# 42 rps\n").unwrap();
    let bad = problems(&dir, false);
    assert!(
        bad.iter()
            .any(|b| b.starts_with("typed.md: not in provenance.yaml")),
        "{bad:?}"
    );
    // Listed as commentary, but the file does not say so.
    let y = std::fs::read_to_string(reports.join("provenance.yaml")).unwrap()
        + "  typed.md: {commentary: \"typed in by hand\"}\n";
    std::fs::write(reports.join("provenance.yaml"), y).unwrap();
    let bad = problems(&dir, false);
    assert!(
        bad.iter()
            .any(|b| b.starts_with("typed.md: commentary, but the file does not say so")),
        "{bad:?}"
    );
    std::fs::write(
        reports.join("typed.md"),
        "# 42 rps\n\n> Commentary: typed in by hand\n",
    )
    .unwrap();
    assert_eq!(problems(&dir, false), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}
