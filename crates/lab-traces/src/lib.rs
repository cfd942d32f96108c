//! The native lab's trace backend. compose and kind have Jaeger; the native lab (no Docker, no
//! Jaeger server) has this: a real OTLP/gRPC receiver the services export to with their usual
//! exporter ([`receiver`]), a bounded window of recent traces ([`store`]), a small JSON query API
//! for `labctl trace` ([`api`]), and the postmortem's cover drawn from what arrived
//! ([`waterfall`]): "The gateway span ends at 3.0 s. Its child span keeps going to 9.8 s."
//!
//! `labctl up` runs the receiver inside its supervisor; nothing here knows about labctl.

pub mod api;
pub mod model;
pub mod receiver;
pub mod store;
pub mod waterfall;

pub use model::{SpanRecord, Summary};
pub use store::Store;
