//! Test support shared by every crate's tests.
//!
//! - [`TestDb`]: a fresh, migrated database per test, dropped afterwards. The server comes from
//!   `DATABASE_URL` when set (CI, this repository's scripts, any machine with PostgreSQL); else
//!   from testcontainers when a Docker engine is reachable (laptops); else the local default
//!   `postgres://postgres@127.0.0.1:5432/postgres`.
//! - [`fixtures`]: tenants with API keys, entities.
//! - [`redis_url`]: the same rule for Redis; [`kafka_bootstrap`] for Kafka (`KAFKA_BOOTSTRAP`,
//!   e.g. the tansu broker scripts/deps.sh starts).
//! - [`http`]: an HTTP client for tests, with a timeout (`.clippy.toml` bans one without).
//! - [`resp`]: a stand-in Redis that counts its connections and answers from a function.
//! - [`proxy`]: a proxy to a real server that a test cuts and restores.

pub mod broker;
pub mod fixtures;
pub mod proxy;
pub mod resp;

use std::sync::OnceLock;

use rand::Rng;

const LOCAL_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const LOCAL_REDIS: &str = "redis://127.0.0.1:6379";
const LOCAL_KAFKA: &str = "127.0.0.1:9092";

/// A test's HTTP client: a new one (its own connections) per call, with a timeout, so a test
/// against a server that never answers fails instead of hanging the run. 30 s: far above any
/// answer the lab's servers give within their own budgets (3 s at the gateway), so it never
/// decides a test's outcome.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("a reqwest client with a timeout")
}

/// Is a Docker engine reachable? Only then do tests start containers.
pub fn docker_engine_available() -> bool {
    if std::env::var_os("DOCKER_HOST").is_some() {
        return true;
    }
    std::path::Path::new("/var/run/docker.sock").exists()
        && std::os::unix::net::UnixStream::connect("/var/run/docker.sock").is_ok()
}

/// The PostgreSQL server tests use (a URL naming any existing database on it).
pub async fn postgres_server_url() -> String {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return url;
    }
    if docker_engine_available() {
        return containers::postgres().await;
    }
    LOCAL_POSTGRES.to_string()
}

/// The Redis server tests use.
pub async fn redis_url() -> String {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return url;
    }
    if docker_engine_available() {
        return containers::redis().await;
    }
    LOCAL_REDIS.to_string()
}

/// The Kafka bootstrap servers tests use (`host:port`).
pub async fn kafka_bootstrap() -> String {
    if let Ok(servers) = std::env::var("KAFKA_BOOTSTRAP") {
        return servers;
    }
    if docker_engine_available() {
        return containers::kafka().await;
    }
    LOCAL_KAFKA.to_string()
}

/// A name no other test (or earlier run against the same long-lived broker) uses: topics and
/// consumer groups are per test.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::rng().random::<u64>())
}

/// Replace the database name in a PostgreSQL URL.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..].find('/').map(|i| i + scheme_end);
    let host_part = match path_start {
        Some(i) => &base[..i],
        None => base,
    };
    match query {
        Some(q) => format!("{host_part}/{name}?{q}"),
        None => format!("{host_part}/{name}"),
    }
}

/// A fresh database, created and migrated, dropped when this value is dropped.
pub struct TestDb {
    pub url: String,
}

impl TestDb {
    pub async fn new() -> Self {
        let server = postgres_server_url().await;
        let suffix: u64 = rand::rng().random();
        let url = with_database(&server, &format!("lab_test_{suffix:016x}"));
        lab_db::prepare(&url)
            .await
            .unwrap_or_else(|e| panic!("cannot prepare a test database on {server}: {e:#}\nIs PostgreSQL running? scripts/deps.sh starts it; or set DATABASE_URL."));
        Self { url }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let url = self.url.clone();
        // Drop runs inside the test's runtime, which cannot block on itself: use a thread.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                if let Err(e) = rt.block_on(lab_db::drop_database(&url)) {
                    eprintln!("testkit: could not drop {url}: {e:#}");
                }
            }
        })
        .join();
    }
}

mod containers {
    use super::*;
    use testcontainers::runners::AsyncRunner;
    use testcontainers::ImageExt;

    static PG: OnceLock<String> = OnceLock::new();
    static REDIS: OnceLock<String> = OnceLock::new();
    static KAFKA: OnceLock<String> = OnceLock::new();

    pub async fn kafka() -> String {
        if let Some(u) = KAFKA.get() {
            return u.clone();
        }
        let c = testcontainers_modules::kafka::apache::Kafka::default()
            .start()
            .await
            .expect("starting a Kafka container");
        let port = c
            .get_host_port_ipv4(testcontainers_modules::kafka::apache::KAFKA_PORT)
            .await
            .expect("container port");
        std::mem::forget(c);
        KAFKA.get_or_init(|| format!("127.0.0.1:{port}")).clone()
    }

    pub async fn postgres() -> String {
        if let Some(u) = PG.get() {
            return u.clone();
        }
        let c = testcontainers_modules::postgres::Postgres::default()
            .with_host_auth()
            .with_tag("15-alpine")
            .start()
            .await
            .expect("starting a PostgreSQL container");
        let port = c.get_host_port_ipv4(5432).await.expect("container port");
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        // The container lives as long as the test binary; the engine's reaper removes it.
        std::mem::forget(c);
        PG.get_or_init(|| url).clone()
    }

    pub async fn redis() -> String {
        if let Some(u) = REDIS.get() {
            return u.clone();
        }
        let c = testcontainers_modules::redis::Redis::default()
            .with_tag("7-alpine")
            .start()
            .await
            .expect("starting a Redis container");
        let port = c.get_host_port_ipv4(6379).await.expect("container port");
        std::mem::forget(c);
        REDIS
            .get_or_init(|| format!("redis://127.0.0.1:{port}"))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_name() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    }
}
