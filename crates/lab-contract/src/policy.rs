//! A client policy as an overlay of the hop table: what a team may change of the fixed client
//! (`labctl up --policy FILE`, the orchestrator's `[budget]`, `[resilient]` and `[policy]`
//! sections), next to the table it changes. Only the shapes live here; every value is checked
//! where it becomes a client: the entity hop against its parent here
//! ([`BudgetOverrides::apply`]: no child may outlive its parent, as for the table itself), the
//! backoff, retry budget and breaker by `entity_client::policy`.
//!
//! Every key is optional: an absent key keeps the table's or the client's own value, whose why
//! is written where it is defined. Examples with their sources: `load/policies/`.

use std::time::Duration;

use serde::Deserialize;

use crate::budget::{Budget, BudgetError, HopTable};

/// The sections a policy file may set; anything else (ports, URLs, the cache) is the lab's, not
/// the policy's, and a file that sets it is refused.
pub const SECTIONS: &[&str] = &["budget", "resilient", "policy"];

/// Overrides of the entity hop of the hop table (absent: the table's value).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetOverrides {
    pub entity_total_ms: Option<u64>,
    pub entity_per_attempt_ms: Option<u64>,
    pub entity_guard_band_ms: Option<u64>,
    pub entity_max_attempts: Option<u32>,
}

impl BudgetOverrides {
    /// `table` with its entity hop overridden, validated: an inverted table is an error naming
    /// both budgets (the postmortem's one-line bump of the child's timeout).
    pub fn apply(&self, table: HopTable) -> Result<HopTable, BudgetError> {
        let e = &table.entity;
        let ms = Duration::from_millis;
        let entity = Budget {
            name: e.name.clone(),
            total: self.entity_total_ms.map_or(e.total, ms),
            per_attempt: self.entity_per_attempt_ms.map_or(e.per_attempt, ms),
            guard_band: self.entity_guard_band_ms.map_or(e.guard_band, ms),
            max_attempts: self.entity_max_attempts.unwrap_or(e.max_attempts),
        };
        HopTable::new(table.gateway, table.orchestrator, entity)
    }
}

/// The fixed client's concurrency limit, as the orchestrator runs it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResilientSettings {
    pub max_concurrency: usize,
    pub max_concurrency_adaptive: usize,
}

impl ResilientSettings {
    /// At least one call in flight, and the adaptive limit starts at the static one.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_concurrency == 0 {
            return Err("resilient.max_concurrency must be at least 1".into());
        }
        if self.max_concurrency_adaptive < self.max_concurrency {
            return Err(format!(
                "resilient.max_concurrency_adaptive ({}) must be >= resilient.max_concurrency \
                 ({}): the adaptive limit starts at the static one",
                self.max_concurrency_adaptive, self.max_concurrency
            ));
        }
        Ok(())
    }
}

/// The fixed client's retry policy beyond the hop table and the concurrency limit: backoff,
/// retry budget, breaker. Absent keys keep the client's defaults, each with its why where it is
/// defined (`entity_client::backoff`, `RetryBudgetConfig`, `BreakerConfig`).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::hop_table;

    #[test]
    fn an_override_that_outlives_its_parent_is_refused_naming_both() {
        // `var DefaultTimeout = 10 * time.Second`, as a policy.
        let bump = BudgetOverrides {
            entity_total_ms: Some(10_000),
            ..Default::default()
        };
        let e = bump.apply(hop_table()).unwrap_err().to_string();
        assert!(
            e.contains("entity.resolve") && e.contains("orchestrator.dispatch"),
            "{e}"
        );
        let fewer = BudgetOverrides {
            entity_max_attempts: Some(2),
            ..Default::default()
        };
        let t = fewer.apply(hop_table()).unwrap();
        assert_eq!(t.entity.max_attempts, 2);
        assert_eq!(
            t.entity.total,
            hop_table().entity.total,
            "the rest is the table's"
        );
    }

    #[test]
    fn the_concurrency_limits_are_checked() {
        let ok = ResilientSettings {
            max_concurrency: 64,
            max_concurrency_adaptive: 256,
        };
        assert!(ok.validate().is_ok());
        let inverted = ResilientSettings {
            max_concurrency: 100,
            max_concurrency_adaptive: 50,
        };
        assert!(inverted
            .validate()
            .unwrap_err()
            .contains("max_concurrency_adaptive"));
        let none = ResilientSettings {
            max_concurrency: 0,
            max_concurrency_adaptive: 0,
        };
        assert!(none.validate().is_err());
    }
}
