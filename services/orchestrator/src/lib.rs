//! orchestrator: the brain of the extraction path.
//!
//! Splits a document into candidate spans, answers what it can from its in-process LRU cache
//! (load-bearing: the postmortem's rollback and scale-up both hurt because they emptied it), sends
//! the misses to entity-service in batches, and assembles the answer with offsets and confidence.
//!
//! # Layout
//! - [`configuration`]: settings and their defaults.
//! - [`startup`]: `Application::build` / `port` / `run_until_stopped`.
//! - [`plan`]: document → distinct span queries and their occurrences.
//! - [`cache`]: the resolution LRU and its hit/miss counters.
//! - [`entity`]: the client that calls entity-service.
//! - [`extract`]: `POST /internal/extract`.

pub mod cache;
pub mod configuration;
pub mod entity;
pub mod extract;
pub mod plan;
pub mod startup;

pub use configuration::Settings;
pub use startup::Application;
