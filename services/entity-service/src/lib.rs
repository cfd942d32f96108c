//! entity-service: resolves text spans to canonical entities in PostgreSQL.
//!
//! In the incident this is the dependency that got slow (stale statistics flipped its hot lookup
//! to a bitmap heap scan: p99 120 → 640 ms). It is a plain, honest service: everything that made
//! the incident worse happened in its callers.
//!
//! # Layout
//! - [`admission`]: the fixed client's requests admitted to the pool only when they fit their
//!   budget (the callee's half of the concurrency limit).
//! - [`fair`]: the pool's connections shared between tenants in fair turn (budgeted requests).
//! - [`configuration`]: settings and their defaults.
//! - [`startup`]: `Application::build` / `port` / `run_until_stopped`.
//! - [`resolve`]: `POST /v1/resolve` — exact match, then the locale-aware candidate lookup.
//! - [`score`]: how a candidate is scored against a span.
//! - [`session`]: the `statement_timeout` each pooled connection runs under (budgeted lookups).
//! - [`telemetry`]: this service's metrics, including abandoned work.
//! - [`dbstats`]: the database facts (`entity_db_*`: plan, staleness, dead tuples), refreshed in
//!   the background.
//! - [`fault`]: game-day fault injection from runtime flags (counted, never the real trigger).

pub mod admission;
pub mod configuration;
pub mod dbstats;
pub mod fair;
pub mod fault;
pub mod resolve;
pub mod score;
pub mod session;
pub mod startup;
pub mod telemetry;

pub use configuration::Settings;
pub use startup::Application;
