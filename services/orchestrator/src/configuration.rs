//! orchestrator configuration (see `config/defaults.toml` for every value and its why).

use entity_client::{hop_table, HopTable};
pub use lab_contract::policy::{BudgetOverrides, PolicySettings, ResilientSettings};
use lab_core::server::{AdminSettings, HttpSettings};
use serde::Deserialize;

pub const DEFAULTS: &str = include_str!("../config/defaults.toml");

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub http: HttpSettings,
    pub admin: AdminSettings,
    pub entity: EntitySettings,
    pub cache: CacheSettings,
    #[serde(default)]
    pub budget: BudgetOverrides,
    pub resilient: ResilientSettings,
    /// A retry policy's knobs for the fixed client (`labctl up --policy FILE`); every key
    /// absent keeps the client's own default.
    #[serde(default)]
    pub policy: PolicySettings,
    pub legacy: LegacySettings,
    pub flags: lab_flags::FlagSettings,
    pub kafka: lab_kafka::ProducerSettings,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitySettings {
    pub urls: String,
    pub batch_size: usize,
    /// A document's resolve calls in flight at once (the rest wait for one to end).
    pub batches_in_flight: usize,
    /// Distinct spans one document may ask for; past it the request is refused (422).
    pub max_spans: usize,
}

impl EntitySettings {
    pub fn url_list(&self) -> Vec<String> {
        lab_core::config::url_list(&self.urls)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSettings {
    pub capacity: usize,
    /// Entries pre-populated on boot when `cache.warmup_on_boot` says so.
    pub warmup_entries: i64,
    /// How long a starting replica may spend on the warm-up before it gives up and starts cold.
    pub warmup_budget_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacySettings {
    pub max_conns_per_host: usize,
}

impl Settings {
    pub fn load() -> anyhow::Result<Self> {
        lab_core::config::load("orchestrator", DEFAULTS)
    }

    /// Defaults only (tests build on this and override fields).
    pub fn defaults() -> anyhow::Result<Self> {
        lab_core::config::load_from("orchestrator", DEFAULTS, std::iter::empty())
    }

    /// The hop table with this process's overrides, validated: an inverted table is an error
    /// naming both budgets, and the orchestrator refuses to start on it.
    pub fn hop_table(&self) -> anyhow::Result<HopTable> {
        self.budget
            .apply(hop_table())
            .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.entity.url_list().is_empty(),
            "entity.urls: at least one entity-service URL is required (LAB_ENTITY__URLS)"
        );
        anyhow::ensure!(
            self.entity.batch_size > 0
                && self.entity.batches_in_flight > 0
                && self.entity.max_spans > 0,
            "entity.batch_size, entity.batches_in_flight and entity.max_spans must be at least 1"
        );
        anyhow::ensure!(self.cache.capacity > 0, "cache.capacity must be at least 1");
        anyhow::ensure!(
            self.legacy.max_conns_per_host > 0,
            "legacy.max_conns_per_host must be at least 1"
        );
        self.resilient.validate().map_err(anyhow::Error::msg)?;
        self.kafka.validate()?;
        self.hop_table()?;
        entity_client::policy::backoff(&self.policy)?;
        entity_client::policy::retry_budget(&self.policy)?;
        entity_client::policy::breaker(&self.policy)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_env(pairs: &[(&str, &str)]) -> anyhow::Result<Settings> {
        let env = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        lab_core::config::load_from("orchestrator", DEFAULTS, env)
    }

    #[test]
    fn defaults_hold_the_hop_table_invariant() {
        let s = Settings::defaults().unwrap();
        s.validate().unwrap();
        let t = s.hop_table().unwrap();
        assert_eq!(t.entity.total, std::time::Duration::from_millis(1800));
        assert_eq!(t.entity.per_attempt, std::time::Duration::from_millis(700));
    }

    #[test]
    fn the_postmortems_one_line_bump_is_refused_at_startup_naming_both_budgets() {
        // `var DefaultTimeout = 10 * time.Second`, as configuration.
        let s = with_env(&[("LAB_BUDGET__ENTITY_TOTAL_MS", "10000")]).unwrap();
        let err = format!("{:#}", s.validate().unwrap_err());
        assert!(err.contains("refusing to start"), "{err}");
        assert!(
            err.contains("entity.resolve") && err.contains("orchestrator.dispatch"),
            "{err}"
        );
    }

    #[test]
    fn a_per_attempt_longer_than_the_total_is_refused() {
        let s = with_env(&[("LAB_BUDGET__ENTITY_PER_ATTEMPT_MS", "1900")]).unwrap();
        assert!(s.validate().is_err());
    }
}
