//! edge-gateway configuration (see `config/defaults.toml` for every value and its why).

use lab_core::server::HttpSettings;
use serde::Deserialize;

pub const DEFAULTS: &str = include_str!("../config/defaults.toml");

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub http: HttpSettings,
    pub database: DatabaseSettings,
    pub auth: AuthSettings,
    pub budget: BudgetSettings,
    pub upstream: UpstreamSettings,
    pub limits: LimitSettings,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    pub url: String,
    pub pool_size: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    pub cache_ttl_ms: u64,
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
    pub probe_interval_ms: u64,
    pub probe_timeout_ms: u64,
    pub failure_threshold: u32,
    pub success_threshold: u32,
}

impl UpstreamSettings {
    pub fn url_list(&self) -> Vec<String> {
        self.orchestrators
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect()
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
    pub fn load() -> anyhow::Result<Self> {
        lab_core::config::load("edge-gateway", DEFAULTS)
    }

    /// Defaults only (tests build on this and override fields).
    pub fn defaults() -> anyhow::Result<Self> {
        lab_core::config::load_from("edge-gateway", DEFAULTS, std::iter::empty())
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.upstream.url_list().is_empty(),
            "upstream.orchestrators: at least one orchestrator URL is required (LAB_UPSTREAM__ORCHESTRATORS)"
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
            self.upstream.failure_threshold > 0 && self.upstream.success_threshold > 0,
            "upstream thresholds must be at least 1"
        );
        Ok(())
    }
}
