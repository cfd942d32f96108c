//! The legacy entity-service client: the postmortem's "Code Before", reproduced ON PURPOSE.
//!
//! Every defect of the incident's client is here, each marked `// LAB-BUG(slug): ...` with the
//! postmortem line it reproduces; the fixed client in `entity-client` has the same module names
//! and a `// LAB-FIX(slug)` for each, so `grep -rn 'LAB-\(BUG\|FIX\)' crates/` pairs them up.
//! Nothing here is a sleep or a mock of the failure: the timeouts, the detached work, the retries,
//! the per-host queue are real, and so is what they do to entity-service.
//!
//! # Layout
//! - [`defaults`]: the package defaults a zero-option client inherits — the 10 s
//!   `DEFAULT_TIMEOUT` (LAB-BUG(timeout-inversion)), 64 connections per host, 3 attempts
//!   (LAB-BUG(retry-amplification)).
//! - [`client`]: [`Client`] and [`Options`]; the retry loop detached with `tokio::spawn` so the
//!   caller's cancellation never reaches it (LAB-BUG(orphaned-work)); `ready()`, the deep
//!   readiness check through the same pool (LAB-BUG(deep-readiness)).
//! - [`backoff`]: `200ms << attempt`, no jitter (LAB-BUG(no-jitter)).
//! - [`retryability`]: retries every transport error and ANY 5xx (LAB-BUG(retries-5xx)).
//! - [`pool`]: the per-host hard cap callers queue behind with no deadline of theirs
//!   (LAB-BUG(pool-exhaustion)).
//! - [`metrics`]: the families shared with the fixed client (defined once, in
//!   `entity_client::metrics`) and what each means when this client writes it.
//! - [`error`]: [`Error`], including the postmortem's `entity-service: exhausted 3 attempts`.

pub mod backoff;
pub mod client;
pub mod defaults;
pub mod error;
pub mod metrics;
pub mod pool;
pub mod retryability;

pub use client::{Client, Options};
pub use defaults::DEFAULT_TIMEOUT;
pub use error::Error;
pub use lab_core::call::CallContext;
