//! entity-service configuration (see `config/defaults.toml` for every value and its why).

use lab_core::server::{AdminSettings, HttpSettings};
use serde::Deserialize;

pub const DEFAULTS: &str = include_str!("../config/defaults.toml");

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub http: HttpSettings,
    pub admin: AdminSettings,
    pub database: DatabaseSettings,
    pub resolve: ResolveSettings,
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
    pub pool_wait_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveSettings {
    pub max_spans: usize,
    pub min_confidence: f32,
}

impl Settings {
    pub fn load() -> anyhow::Result<Self> {
        lab_core::config::load("entity-service", DEFAULTS)
    }

    /// Defaults only (tests build on this and override fields).
    pub fn defaults() -> anyhow::Result<Self> {
        lab_core::config::load_from("entity-service", DEFAULTS, std::iter::empty())
    }
}
