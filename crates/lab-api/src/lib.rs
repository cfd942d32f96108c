//! Wire types and shared text rules of the lab.
//!
//! # Layout
//! - [`wire`]: the JSON bodies on every hop (public API, gateway → orchestrator, orchestrator →
//!   entity-service) and the error body every service returns.
//! - [`events`]: the `doc.ingested` event the orchestrator publishes to Kafka.
//! - [`headers`]: header names, one constant each, so nobody spells a budget header two ways.
//! - [`text`]: normalization, candidate-span splitting and the kind guess. The seed data, the
//!   orchestrator and entity-service must agree on these byte for byte, which is why they live in
//!   one place rather than in each service.

pub mod events;
pub mod headers;
pub mod text;
pub mod wire;
