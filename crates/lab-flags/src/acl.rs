//! Redis ACL users, one per role (issue 28): what each process may do in the lab's Redis, and
//! nothing more.
//!
//! | role | keys | channels | commands |
//! |---|---|---|---|
//! | [`Role::Gateway`] | `<ns>:rl:*` read and write (its rate limiter's GCRA function); `<ns>:flags` read only | `<ns>:flags:changed` | the operator's function (`FCALL`, and `TIME`, `GET`, `SET` it runs), `HGETALL`, `SUBSCRIBE` |
//! | [`Role::Service`] (orchestrator, entity-service, enrichment) | `<ns>:flags` read only | `<ns>:flags:changed` | `HGETALL`, `SUBSCRIBE` |
//! | the operator (labctl) | everything | everything | everything: flags are set by `labctl flags set` |
//!
//! No code of the gateway's own runs in Redis: the limiter is a Redis function
//! ([`RATELIMIT_LIBRARY`], `crates/lab-flags/redis/ratelimit.lua`) that the operator loads
//! ([`load_functions`], with the users) and the gateway may only call (`FCALL`). `EVAL`,
//! `EVALSHA`, `SCRIPT LOAD` and `FUNCTION LOAD` are refused it, so a gateway taken over runs
//! nothing in Redis but the GCRA on its own keys: bounded in what it reads and writes and in the
//! CPU each call takes (issue 28; before, it could `SCRIPT LOAD` a loop of its own). A Redis
//! that restarted without the function (no persistence) answers the gateway's call with an
//! error, and the gateway limits locally until the operator loads it again (`labctl fault start
//! redis` does; in docker-compose.yml and the kind overlay the Redis container loads it at every
//! start and is not healthy until it has).
//!
//! So an internet-facing gateway taken over can spend its own rate-limit keys, and cannot set
//! `fault.entity.black_hole` fleet-wide, `FLUSHALL`, `CONFIG SET` or `SHUTDOWN` the store.
//! Every role may also authenticate and ping (`@connection` less its `@admin`/`@dangerous`
//! commands such as `CLIENT KILL`).
//!
//! The rules are written here once. `labctl up` makes the native lab's users with fresh
//! passwords (kept in `.lab/run/redis-users.json`, mode 0600) and hands each service its URL;
//! `labctl fault start redis` makes them again (a Redis without persistence forgets its users),
//! and every lab-e2e lab runs on users of its own namespace. docker-compose.yml and the kind
//! overlay start Redis with the same users word for word, an operator user (`lab-operator`,
//! labctl) and the default user off (`tests/deploy_acl.rs` fails if they drift); the Helm chart
//! gives each service its user's URL from a Secret. The native lab shares the machine's Redis
//! with the tests, so its default user stays as the machine has it: the native lab shows what
//! each role may do, not a locked-down server.

use anyhow::Context;

/// The Redis function library the gateway's rate limiter calls (`#!lua name=retry_storm_lab`):
/// the operator loads it, the gateway's user may only `FCALL` it. docker-compose.yml mounts this
/// file; the kind overlay carries a copy (`crates/lab-flags/tests/deploy_acl.rs` checks it).
pub const RATELIMIT_LIBRARY: &str = include_str!("../redis/ratelimit.lua");

/// The function of [`RATELIMIT_LIBRARY`] the gateway calls: `FCALL lab_gcra 1 <key> <interval
/// µs> <burst> [<admitted locally since Redis last answered>]`, answering `{allowed,
/// retry_after_us}`.
pub const RATELIMIT_FUNCTION: &str = "lab_gcra";

/// Whose user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Gateway,
    Service,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Gateway, Role::Service];

    fn suffix(self) -> &'static str {
        match self {
            Role::Gateway => "gateway",
            Role::Service => "service",
        }
    }
}

/// The ACL user of `role` in `namespace`: `lab-gateway`, `lab-service` for the lab's namespace.
pub fn user(namespace: &str, role: Role) -> String {
    format!("{namespace}-{}", role.suffix())
}

/// The rules of `role`'s user in `namespace`, without `on` and the password: what `ACL SETUSER`
/// takes after the name (each element one argument), and what an ACL file's `user` line holds.
pub fn rules(namespace: &str, role: Role) -> Vec<String> {
    let mut r = vec![
        "resetkeys".to_string(),
        "resetchannels".to_string(),
        "-@all".to_string(),
        "+@connection".to_string(),
        "-@admin".to_string(),
        "-@dangerous".to_string(),
        format!("%R~{namespace}:flags"),
        format!("&{namespace}:flags:changed"),
        "+hgetall".to_string(),
        "+subscribe".to_string(),
        "+unsubscribe".to_string(),
    ];
    if role == Role::Gateway {
        r.extend([
            format!("~{namespace}:rl:*"),
            "+fcall".to_string(),
            "+time".to_string(),
            "+get".to_string(),
            "+set".to_string(),
        ]);
    }
    r
}

/// One user with its password, as applied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct User {
    pub role: Role,
    pub name: String,
    pub password: String,
}

/// The users of a lab in `namespace`, each with a fresh random password (32 hex digits).
pub fn new_users(namespace: &str) -> Vec<User> {
    Role::ALL
        .iter()
        .map(|&role| User {
            role,
            name: user(namespace, role),
            password: format!("{:032x}", rand::random::<u128>()),
        })
        .collect()
}

/// Create or replace each of `users` in the Redis at `admin_url` (whose user may run `ACL
/// SETUSER`: the default user natively), and load the function they call ([`load_functions`]).
pub async fn apply(admin_url: &str, namespace: &str, users: &[User]) -> anyhow::Result<()> {
    load_functions(admin_url).await?;
    let mut c = admin(admin_url).await?;
    for u in users {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&u.name)
            .arg("reset")
            .arg("on")
            .arg(format!(">{}", u.password))
            .arg(rules(namespace, u.role))
            .query_async(&mut c)
            .await
            .with_context(|| format!("ACL SETUSER {} (Redis 7 or later is needed)", u.name))?;
    }
    Ok(())
}

/// Load (or replace with this build's) [`RATELIMIT_LIBRARY`] into the Redis at `admin_url`, whose
/// user may run `FUNCTION LOAD`. Functions are the server's, not a namespace's: every lab on one
/// Redis calls the same library, and loading it again is harmless.
pub async fn load_functions(admin_url: &str) -> anyhow::Result<()> {
    let mut c = admin(admin_url).await?;
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(RATELIMIT_LIBRARY)
        .query_async(&mut c)
        .await
        .context("FUNCTION LOAD of the rate limiter's library (Redis 7 or later is needed)")?;
    Ok(())
}

/// Delete the users named `names` from the Redis at `admin_url` (a lab's users, when it ends).
pub async fn delete(admin_url: &str, names: &[String]) -> anyhow::Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    let mut c = admin(admin_url).await?;
    let _: () = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(names)
        .query_async(&mut c)
        .await
        .context("ACL DELUSER")?;
    Ok(())
}

/// A connection to `admin_url` (the default user natively), within 2 s.
async fn admin(admin_url: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(admin_url)
        .with_context(|| format!("invalid Redis URL {admin_url:?}"))?;
    tokio::time::timeout(
        std::time::Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .context("connecting to Redis to manage the lab's users timed out")?
    .context("connecting to Redis to manage the lab's users")
}

/// `url` with `user`'s name and password in it.
pub fn url_as(url: &str, user: &User) -> anyhow::Result<String> {
    let mut u = url::Url::parse(url).with_context(|| format!("invalid Redis URL {url:?}"))?;
    u.set_username(&user.name)
        .ok()
        .context("a Redis URL that cannot carry a user name")?;
    u.set_password(Some(&user.password))
        .ok()
        .context("a Redis URL that cannot carry a password")?;
    Ok(u.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_gateway_touches_rate_limit_keys_and_nobody_writes_flags() {
        let g = rules("lab", Role::Gateway).join(" ");
        let s = rules("lab", Role::Service).join(" ");
        assert!(g.contains("~lab:rl:*") && !s.contains("rl:"));
        for role in Role::ALL {
            let r = rules("lab", role);
            assert!(
                r.contains(&"%R~lab:flags".to_string()),
                "flags read only: {r:?}"
            );
            for granted in ["~lab:flags", "~*", "+@all", "+@write", "+hset", "+publish"] {
                assert!(!r.contains(&granted.to_string()), "{role:?} has {granted}");
            }
            assert_eq!(r[..3], ["resetkeys", "resetchannels", "-@all"]);
        }
    }

    #[test]
    fn a_url_carries_the_user() {
        let u = User {
            role: Role::Gateway,
            name: "lab-gateway".into(),
            password: "p".into(),
        };
        assert_eq!(
            url_as("redis://127.0.0.1:6379", &u).unwrap(),
            "redis://lab-gateway:p@127.0.0.1:6379"
        );
    }
}
