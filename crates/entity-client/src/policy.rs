//! A team's client policy ([`lab_contract::policy::PolicySettings`], `--policy FILE`) as the
//! fixed client's own configuration: each absent key the client's default, each value checked
//! here, and an error naming the key that is wrong (an orchestrator refuses to start on it, and
//! labctl refuses the file before the lab starts).

use std::time::Duration;

pub use lab_contract::policy::PolicySettings;

use crate::backoff::BASE_BACKOFF;
use crate::{Backoff, BreakerConfig, Jitter, RetryBudgetConfig};

/// The backoff schedule, or which key is wrong.
pub fn backoff(p: &PolicySettings) -> anyhow::Result<Backoff> {
    let d = Backoff::entity();
    let base = p
        .backoff_base_ms
        .map_or(BASE_BACKOFF, Duration::from_millis);
    let cap = p.backoff_cap_ms.map_or(d.cap(), Duration::from_millis);
    let b = Backoff::try_new(base, cap)
        .map_err(|e| anyhow::anyhow!("policy.backoff_base_ms / policy.backoff_cap_ms: {e}"))?;
    Ok(match &p.jitter {
        Some(j) => b.with_jitter(
            j.parse::<Jitter>()
                .map_err(|e| anyhow::anyhow!("policy.jitter: {e}"))?,
        ),
        None => b,
    })
}

pub fn retry_budget(p: &PolicySettings) -> anyhow::Result<RetryBudgetConfig> {
    let d = RetryBudgetConfig::default();
    let c = RetryBudgetConfig {
        max_tokens: p.retry_budget_max_tokens.unwrap_or(d.max_tokens),
        retry_cost: p.retry_budget_retry_cost.unwrap_or(d.retry_cost),
        success_credit: p.retry_budget_success_credit.unwrap_or(d.success_credit),
    };
    c.validate()
        .map_err(|e| anyhow::anyhow!("policy.retry_budget_*: {e}"))?;
    Ok(c)
}

pub fn breaker(p: &PolicySettings) -> anyhow::Result<BreakerConfig> {
    let d = BreakerConfig::default();
    let ms = Duration::from_millis;
    let c = BreakerConfig {
        failure_ratio: p.breaker_failure_ratio.unwrap_or(d.failure_ratio),
        min_requests: p.breaker_min_requests.unwrap_or(d.min_requests),
        window: p.breaker_window_ms.map_or(d.window, ms),
        shedding_for: p.breaker_shedding_ms.map_or(d.shedding_for, ms),
        probes: p.breaker_probes.unwrap_or(d.probes),
    };
    c.validate()
        .map_err(|e| anyhow::anyhow!("policy.breaker_*: {e}"))?;
    Ok(c)
}
