//! enrichment configuration (see `config/defaults.toml` for every value and its why).

use lab_core::server::{AdminSettings, HttpSettings};
use serde::Deserialize;

pub const DEFAULTS: &str = include_str!("../config/defaults.toml");

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub http: HttpSettings,
    pub admin: AdminSettings,
    pub database: DatabaseSettings,
    pub kafka: KafkaSettings,
    pub enrich: EnrichSettings,
    pub flags: lab_flags::FlagSettings,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    pub url: String,
    /// Connect even when `url`'s role is a PostgreSQL superuser (test harnesses only; see
    /// `lab_db::Superuser`). The service refuses to start as one otherwise.
    pub allow_superuser: bool,
    pub pool_size: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSettings {
    pub brokers: String,
    pub topic: String,
    pub group_id: String,
    pub session_timeout_ms: u64,
    pub max_poll_interval_ms: u64,
    pub lag_interval_ms: u64,
    pub fetch_wait_max_ms: u64,
    pub fetch_min_bytes: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrichSettings {
    pub max_entities_for_pairs: usize,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub batch_max_events: usize,
    pub batch_linger_ms: u64,
}

impl Settings {
    pub fn load() -> anyhow::Result<Self> {
        lab_core::config::load("enrichment", DEFAULTS)
    }

    /// Defaults only (tests build on this and override fields).
    pub fn defaults() -> anyhow::Result<Self> {
        lab_core::config::load_from("enrichment", DEFAULTS, std::iter::empty())
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            lab_kafka::bootstrap_servers(&self.kafka.brokers).is_some(),
            "kafka.brokers: a worker needs at least one broker (LAB_KAFKA__BROKERS=host:port)"
        );
        anyhow::ensure!(
            !self.kafka.topic.is_empty(),
            "kafka.topic must not be empty"
        );
        anyhow::ensure!(
            !self.kafka.group_id.is_empty(),
            "kafka.group_id must not be empty"
        );
        anyhow::ensure!(
            self.database.pool_size > 0,
            "database.pool_size must be at least 1"
        );
        anyhow::ensure!(
            self.kafka.lag_interval_ms > 0,
            "kafka.lag_interval_ms must be at least 1"
        );
        anyhow::ensure!(
            (1..=30_000).contains(&self.kafka.fetch_wait_max_ms),
            "kafka.fetch_wait_max_ms must be 1..=30000 (a fetch held longer than librdkafka's \
             socket timeout, 60 s, would be taken for a dead broker)"
        );
        anyhow::ensure!(
            (1..=1_048_576).contains(&self.kafka.fetch_min_bytes),
            "kafka.fetch_min_bytes must be 1..=1048576 (at most a MiB: more than any batch the \
             lab's producers make before fetch_wait_max_ms ends the wait)"
        );
        anyhow::ensure!(
            self.enrich.max_entities_for_pairs >= 2,
            "enrich.max_entities_for_pairs must be at least 2 (a pair)"
        );
        anyhow::ensure!(
            self.enrich.retry_initial_ms > 0
                && self.enrich.retry_max_ms >= self.enrich.retry_initial_ms,
            "enrich.retry_initial_ms must be at least 1 and at most enrich.retry_max_ms"
        );
        anyhow::ensure!(
            (1..=10_000).contains(&self.enrich.batch_max_events),
            "enrich.batch_max_events must be 1..=10000 (1: one event per transaction)"
        );
        anyhow::ensure!(
            self.enrich.batch_linger_ms <= 1_000,
            "enrich.batch_linger_ms must be at most 1000 (the lag alert reads seconds)"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Settings::defaults().unwrap().validate().unwrap();
    }

    #[test]
    fn a_worker_without_brokers_refuses_to_start() {
        let env = [("LAB_KAFKA__BROKERS".to_string(), " ".to_string())];
        let s: Settings = lab_core::config::load_from("enrichment", DEFAULTS, env).unwrap();
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains("LAB_KAFKA__BROKERS"), "{err}");
    }

    /// Each bounded setting refuses a value past its bound, naming the setting: a batch of
    /// nothing or without bound, a fetch that never waits or waits past librdkafka's socket
    /// timeout (60 s, a dead broker to it), a fetch waiting for more than a MiB.
    #[test]
    fn settings_out_of_their_range_are_refused() {
        for (key, bad, named) in [
            (
                "LAB_ENRICH__BATCH_MAX_EVENTS",
                "0",
                "enrich.batch_max_events",
            ),
            (
                "LAB_ENRICH__BATCH_MAX_EVENTS",
                "10001",
                "enrich.batch_max_events",
            ),
            (
                "LAB_ENRICH__BATCH_LINGER_MS",
                "1001",
                "enrich.batch_linger_ms",
            ),
            (
                "LAB_KAFKA__FETCH_WAIT_MAX_MS",
                "0",
                "kafka.fetch_wait_max_ms",
            ),
            (
                "LAB_KAFKA__FETCH_WAIT_MAX_MS",
                "60000",
                "kafka.fetch_wait_max_ms",
            ),
            ("LAB_KAFKA__FETCH_MIN_BYTES", "0", "kafka.fetch_min_bytes"),
            (
                "LAB_KAFKA__FETCH_MIN_BYTES",
                "1048577",
                "kafka.fetch_min_bytes",
            ),
        ] {
            let env = [(key.to_string(), bad.to_string())];
            let s: Settings = lab_core::config::load_from("enrichment", DEFAULTS, env).unwrap();
            let err = s.validate().unwrap_err().to_string();
            assert!(err.contains(named), "{key}={bad}: {err}");
        }
    }
}
