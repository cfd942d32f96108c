//! enrichment: the asynchronous path the postmortem's responders chased for four minutes.
//!
//! Workers of the consumer group `enrichment-workers` read `doc.ingested` (one event per
//! completed extraction, published by the orchestrator) and derive per-tenant mention statistics
//! and entity co-occurrence counts in PostgreSQL. Nothing on the request path waits for them:
//! during the incident their lag grew because the cluster was starved for CPU — a real symptom,
//! not a cause, and the lab reproduces it with the same real mechanism.
//!
//! Delivery is at-least-once and the writes are idempotent, so the result is exactly-once:
//! - an event's writes happen in one transaction that first records its `event_id`; a second
//!   delivery finds it and changes nothing ([`store`]);
//! - an offset is stored only after its transaction committed, and committed from there (every
//!   second, on rebalance, at shutdown), so a worker killed at any instant loses nothing: its
//!   partitions' uncommitted events are read again by whoever gets them ([`worker`]).
//!
//! # Layout
//! - [`configuration`]: settings and their defaults.
//! - [`startup`]: `Application::build` / `port` / `run_until_stopped`.
//! - [`store`]: the idempotent write of one event.
//! - [`worker`]: the consumer loop, pause/resume by flag, rebalances, lag.

pub mod configuration;
pub mod startup;
pub mod store;
pub mod worker;

pub use configuration::Settings;
pub use startup::Application;
