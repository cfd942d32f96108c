//! orchestrator configuration (see `config/defaults.toml` for every value and its why).

use std::time::Duration;

use entity_client::backoff::BASE_BACKOFF;
use entity_client::{
    hop_table, Backoff, BreakerConfig, Budget, HopTable, Jitter, RetryBudgetConfig,
};
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

/// Overrides of the entity hop of the hop table (absent: the table's value).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetOverrides {
    pub entity_total_ms: Option<u64>,
    pub entity_per_attempt_ms: Option<u64>,
    pub entity_guard_band_ms: Option<u64>,
    pub entity_max_attempts: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResilientSettings {
    pub max_concurrency: usize,
    pub max_concurrency_adaptive: usize,
}

/// The fixed client's retry policy beyond the hop table and the concurrency limit: backoff,
/// retry budget, breaker. Absent keys keep the client's defaults, each with its why where it is
/// defined (`entity_client::backoff`, `RetryBudgetConfig`, `BreakerConfig`). A team's policy
/// file sets them (see `load/policies/`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    /// A name for reports (`grpc-retry-throttling`).
    pub name: Option<String>,
    pub backoff_base_ms: Option<u64>,
    pub backoff_cap_ms: Option<u64>,
    /// `full`, `equal` or `none`.
    pub jitter: Option<String>,
    pub retry_budget_max_tokens: Option<f64>,
    pub retry_budget_retry_cost: Option<f64>,
    pub retry_budget_success_credit: Option<f64>,
    pub breaker_failure_ratio: Option<f64>,
    pub breaker_min_requests: Option<u32>,
    pub breaker_window_ms: Option<u64>,
    pub breaker_shedding_ms: Option<u64>,
    pub breaker_probes: Option<u32>,
}

impl PolicySettings {
    /// The backoff schedule, or which key is wrong.
    pub fn backoff(&self) -> anyhow::Result<Backoff> {
        let d = Backoff::entity();
        let base = self
            .backoff_base_ms
            .map_or(BASE_BACKOFF, Duration::from_millis);
        let cap = self.backoff_cap_ms.map_or(d.cap(), Duration::from_millis);
        let b = Backoff::try_new(base, cap)
            .map_err(|e| anyhow::anyhow!("policy.backoff_base_ms / policy.backoff_cap_ms: {e}"))?;
        Ok(match &self.jitter {
            Some(j) => b.with_jitter(
                j.parse::<Jitter>()
                    .map_err(|e| anyhow::anyhow!("policy.jitter: {e}"))?,
            ),
            None => b,
        })
    }

    pub fn retry_budget(&self) -> anyhow::Result<RetryBudgetConfig> {
        let d = RetryBudgetConfig::default();
        let c = RetryBudgetConfig {
            max_tokens: self.retry_budget_max_tokens.unwrap_or(d.max_tokens),
            retry_cost: self.retry_budget_retry_cost.unwrap_or(d.retry_cost),
            success_credit: self.retry_budget_success_credit.unwrap_or(d.success_credit),
        };
        c.validate()
            .map_err(|e| anyhow::anyhow!("policy.retry_budget_*: {e}"))?;
        Ok(c)
    }

    pub fn breaker(&self) -> anyhow::Result<BreakerConfig> {
        let d = BreakerConfig::default();
        let ms = Duration::from_millis;
        let c = BreakerConfig {
            failure_ratio: self.breaker_failure_ratio.unwrap_or(d.failure_ratio),
            min_requests: self.breaker_min_requests.unwrap_or(d.min_requests),
            window: self.breaker_window_ms.map_or(d.window, ms),
            shedding_for: self.breaker_shedding_ms.map_or(d.shedding_for, ms),
            probes: self.breaker_probes.unwrap_or(d.probes),
        };
        c.validate()
            .map_err(|e| anyhow::anyhow!("policy.breaker_*: {e}"))?;
        Ok(c)
    }
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
        let base = hop_table();
        let e = &base.entity;
        let o = &self.budget;
        let ms = Duration::from_millis;
        let entity = Budget {
            name: e.name.clone(),
            total: o.entity_total_ms.map_or(e.total, ms),
            per_attempt: o.entity_per_attempt_ms.map_or(e.per_attempt, ms),
            guard_band: o.entity_guard_band_ms.map_or(e.guard_band, ms),
            max_attempts: o.entity_max_attempts.unwrap_or(e.max_attempts),
        };
        HopTable::new(base.gateway, base.orchestrator, entity)
            .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.entity.url_list().is_empty(),
            "entity.urls: at least one entity-service URL is required (LAB_ENTITY__URLS)"
        );
        anyhow::ensure!(
            self.entity.batch_size > 0,
            "entity.batch_size must be at least 1"
        );
        anyhow::ensure!(self.cache.capacity > 0, "cache.capacity must be at least 1");
        anyhow::ensure!(
            self.resilient.max_concurrency > 0,
            "resilient.max_concurrency must be at least 1"
        );
        anyhow::ensure!(
            self.legacy.max_conns_per_host > 0,
            "legacy.max_conns_per_host must be at least 1"
        );
        anyhow::ensure!(
            self.resilient.max_concurrency_adaptive >= self.resilient.max_concurrency,
            "resilient.max_concurrency_adaptive ({}) must be >= resilient.max_concurrency ({}): \
             the adaptive limit starts at the static one",
            self.resilient.max_concurrency_adaptive,
            self.resilient.max_concurrency
        );
        self.kafka.validate()?;
        self.hop_table()?;
        self.policy.backoff()?;
        self.policy.retry_budget()?;
        self.policy.breaker()?;
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
        assert_eq!(t.entity.total, Duration::from_millis(1800));
        assert_eq!(t.entity.per_attempt, Duration::from_millis(700));
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
