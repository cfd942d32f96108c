//! orchestrator configuration (see `config/defaults.toml` for every value and its why).

use lab_core::server::HttpSettings;
use serde::Deserialize;

pub const DEFAULTS: &str = include_str!("../config/defaults.toml");

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub http: HttpSettings,
    pub entity: EntitySettings,
    pub cache: CacheSettings,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitySettings {
    pub urls: String,
    pub batch_size: usize,
    pub timeout_ms: u64,
}

impl EntitySettings {
    pub fn url_list(&self) -> Vec<String> {
        self.urls
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSettings {
    pub capacity: usize,
}

impl Settings {
    pub fn load() -> anyhow::Result<Self> {
        lab_core::config::load("orchestrator", DEFAULTS)
    }

    /// Defaults only (tests build on this and override fields).
    pub fn defaults() -> anyhow::Result<Self> {
        lab_core::config::load_from("orchestrator", DEFAULTS, std::iter::empty())
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
            self.entity.timeout_ms > 0,
            "entity.timeout_ms must be at least 1"
        );
        Ok(())
    }
}
