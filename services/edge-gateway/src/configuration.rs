//! edge-gateway configuration (see `config/defaults.toml` for every value and its why).

use lab_core::server::{AdminSettings, HttpSettings};
use serde::Deserialize;

pub const DEFAULTS: &str = include_str!("../config/defaults.toml");

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub http: HttpSettings,
    pub admin: AdminSettings,
    pub database: DatabaseSettings,
    pub auth: AuthSettings,
    pub budget: BudgetSettings,
    pub upstream: UpstreamSettings,
    pub edge: EdgeSettings,
    pub limits: LimitSettings,
    pub flags: lab_flags::FlagSettings,
    pub legacy: LegacySettings,
    pub ratelimit: crate::ratelimit::RateLimitSettings,
}

/// What the public door takes from its callers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeSettings {
    /// Parent the request's trace on the caller's `traceparent` (off: every request starts a
    /// trace of its own here).
    pub trust_traceparent: bool,
}

/// How the gateway behaves when `client.mode = legacy` (the postmortem's gateway).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacySettings {
    pub attempts: u32,
    pub attempt_timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    pub url: String,
    /// Connect even when `url`'s role is a PostgreSQL superuser (test harnesses only; see
    /// `lab_db::Superuser`). The service refuses to start as one otherwise.
    pub allow_superuser: bool,
    pub pool_size: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    pub cache_ttl_ms: u64,
    pub stale_ttl_ms: u64,
    pub refresh_timeout_ms: u64,
    /// Bound what never-seen key ids may cost (src/auth.rs, `KeyStore::with_flood_guard`);
    /// `false` reproduces the unbounded key store, for measuring a flood before and after.
    pub flood_guard: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSettings {
    pub request_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSettings {
    pub orchestrators: String,
    /// Each orchestrator's admin listener, in the order of `orchestrators`: the readiness probe
    /// goes there (`/readyz` is not served on the port requests use).
    #[serde(default)]
    pub orchestrators_admin: String,
    /// A file listing the orchestrator URLs, one per line, re-read before every round of probes
    /// (the native lab's Endpoints: `labctl scale` adds replicas there). Set: it replaces
    /// `orchestrators`.
    #[serde(default)]
    pub orchestrators_file: Option<String>,
    pub probe_interval_ms: u64,
    pub probe_timeout_ms: u64,
    pub failure_threshold: u32,
    pub success_threshold: u32,
    /// Where in each period each replica is probed (issue 26, the fleet's shape).
    pub probe_phase: ProbePhase,
}

/// When, within each probe period, a replica's readiness is probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbePhase {
    /// A phase drawn once per replica, uniformly in `[0, probe_interval)`: kubelet's probe
    /// worker waits a random part of its period before its first probe, so the pods of one
    /// Deployment are probed, and cross their failure thresholds, at different moments.
    Random,
    /// Every replica in the same round, at the same moment (the native lab before issue 26's
    /// measurement of partial eviction; kept for comparison).
    Aligned,
}

impl UpstreamSettings {
    pub fn url_list(&self) -> Vec<String> {
        lab_core::config::url_list(&self.orchestrators)
    }

    /// Each orchestrator with its admin URL (`orchestrators` zipped with `orchestrators_admin`).
    pub fn endpoint_list(&self) -> anyhow::Result<Vec<(String, String)>> {
        let urls = self.url_list();
        let admins = lab_core::config::url_list(&self.orchestrators_admin);
        anyhow::ensure!(
            urls.len() == admins.len(),
            "upstream.orchestrators_admin must list one admin URL per orchestrator, in the same \
             order (LAB_UPSTREAM__ORCHESTRATORS_ADMIN): {} orchestrators, {} admin URLs",
            urls.len(),
            admins.len()
        );
        Ok(urls.into_iter().zip(admins).collect())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    pub max_body_bytes: usize,
    pub max_text_chars: usize,
    pub max_doc_id_chars: usize,
}

impl Settings {
    /// This gateway's hop of the hop table (crates/lab-contract/src/budget.rs) with its configured
    /// request budget, checked against the orchestrator's hop below it: a gateway whose budget
    /// the orchestrator could outlive refuses to start, naming both budgets.
    pub fn hop_budget(&self) -> anyhow::Result<lab_contract::Budget> {
        let table = lab_contract::hop_table();
        let guard = table.gateway.guard_band;
        let total = std::time::Duration::from_millis(self.budget.request_ms);
        let gateway = lab_contract::Budget {
            total,
            per_attempt: total.saturating_sub(guard),
            ..table.gateway.clone()
        };
        lab_contract::HopTable::new(gateway.clone(), table.orchestrator, table.entity)
            .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
        Ok(gateway)
    }

    pub fn load() -> anyhow::Result<Self> {
        lab_core::config::load("edge-gateway", DEFAULTS)
    }

    /// Defaults only (tests build on this and override fields).
    pub fn defaults() -> anyhow::Result<Self> {
        lab_core::config::load_from("edge-gateway", DEFAULTS, std::iter::empty())
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self
            .upstream
            .orchestrators_file
            .as_deref()
            .is_none_or(str::is_empty)
        {
            self.upstream.endpoint_list()?;
        }
        anyhow::ensure!(
            !self.upstream.url_list().is_empty()
                || self
                    .upstream
                    .orchestrators_file
                    .as_deref()
                    .is_some_and(|f| !f.is_empty()),
            "upstream.orchestrators: at least one orchestrator URL is required (LAB_UPSTREAM__ORCHESTRATORS), or a file listing them (LAB_UPSTREAM__ORCHESTRATORS_FILE)"
        );
        anyhow::ensure!(
            self.budget.request_ms > 0,
            "budget.request_ms must be at least 1"
        );
        anyhow::ensure!(
            self.http.drain_seconds * 1000 > self.budget.request_ms,
            "http.drain_seconds ({} s) must exceed budget.request_ms ({} ms), or requests in flight at shutdown are cut off",
            self.http.drain_seconds,
            self.budget.request_ms
        );
        anyhow::ensure!(
            self.legacy.attempts >= 1 && self.legacy.attempt_timeout_ms > 0,
            "legacy.attempts and legacy.attempt_timeout_ms must be at least 1"
        );
        anyhow::ensure!(
            self.upstream.failure_threshold > 0 && self.upstream.success_threshold > 0,
            "upstream thresholds must be at least 1"
        );
        anyhow::ensure!(
            self.ratelimit.burst_seconds > 0.0 && self.ratelimit.deadline_ms > 0,
            "ratelimit.burst_seconds and ratelimit.deadline_ms must be positive"
        );
        anyhow::ensure!(
            self.ratelimit.fallback_replicas >= 1,
            "ratelimit.fallback_replicas must be at least 1 (the gateway replicas sharing a \
             tenant's plan while Redis cannot decide)"
        );
        self.hop_budget()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_budget_the_orchestrator_could_outlive_is_refused() {
        let mut s = Settings::defaults().unwrap();
        s.validate().unwrap();
        s.budget.request_ms = 2000;
        let err = format!("{:#}", s.validate().unwrap_err());
        assert!(
            err.contains("gateway.request") && err.contains("orchestrator.dispatch"),
            "{err}"
        );
    }
}
