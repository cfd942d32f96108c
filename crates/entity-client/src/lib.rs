//! The resilient entity-service client: the postmortem's "Code After", as a library.
//!
//! The orchestrator calls entity-service through this client (or through the legacy one in
//! `entity-client-legacy`, which reproduces "Code Before"; the two share module names, so reading
//! `backoff.rs` in both is reading the bug next to its fix). `grep -rn 'LAB-\(BUG\|FIX\)' crates/`
//! lists every defect and every control.
//!
//! # Layout
//! - [`budget`] (re-exported from `lab-contract`, the contract between the hops): [`Budget`] (a
//!   required argument: no `Default` anywhere), [`MIN_ATTEMPT_BUDGET`], and the path's hop table
//!   in ONE place — [`hop_table`], [`HopTable::validate`] refusing any child that could outlive
//!   its parent. LAB-FIX(timeout-inversion). Its neighbour there, the error table, says what each
//!   failure of this client is answered with ([`Error::failure`]).
//! - [`client`]: [`Client`], [`ClientConfig`] and the per-request [`Controls`]; the retry loop of
//!   the postmortem's flow diagram, bound to the caller's future (LAB-FIX(orphaned-work)); a
//!   retry after entity-service's admission refused waits for the refusal's pushback first
//!   (LAB-FIX(pushback), gRPC's server pushback; `lab_api::headers::RETRY_PUSHBACK_MS`).
//! - [`backoff`]: exponential backoff with full jitter, cancellable. LAB-FIX(no-jitter).
//! - [`retry_budget`]: the token bucket that switches retries off when nothing succeeds.
//!   LAB-FIX(retry-amplification).
//! - [`retryability`]: the ONE function deciding what is retried. LAB-FIX(retries-5xx).
//! - [`breaker`]: `Admitting` → `Shedding` → `Probing`, named by effect.
//! - [`limiter`]: the non-queueing concurrency limit in front of entity-service.
//!   LAB-FIX(pool-exhaustion).
//! - [`metrics`]: the metric families BOTH clients write, registered once per registry
//!   ([`metrics::ClientMetrics::register`], once per process, handed to both), with the exact semantics per client.
//! - [`spans`]: the span names BOTH clients open (`entity.Resolve`, `entity.Resolve.attempt.N`)
//!   and how an outcome is recorded on them.
//! - [`error`]: [`Error`], split by what the caller must do, with `is_retryable()` and `code()`.
//! - `test_support` (feature `test-support`, dev only): the stub entity-service and metric
//!   readers both clients' tests use.
//!
//! LAB-FIX(deep-readiness): unlike the legacy client this one has no `ready()`. Readiness answers
//! "can THIS process serve a request?" (`lab_core::health`), never "is entity-service happy?" —
//! a dependency check in `/readyz` is a fleet-wide kill switch with no owner.

pub mod backoff;
pub mod breaker;
pub mod client;
pub mod error;
pub mod limiter;
pub mod metrics;
pub mod policy;
pub mod retry_budget;
pub mod retryability;
pub mod spans;
#[cfg(feature = "test-support")]
pub mod test_support;

pub use backoff::{Backoff, Jitter};
pub use breaker::{BreakerConfig, BreakerState};
pub use client::{Client, ClientConfig, Controls};
pub use error::{Error, TransportStage};
pub use lab_contract::budget;
pub use lab_contract::budget::{hop_table, Budget, BudgetError, HopTable, MIN_ATTEMPT_BUDGET};
pub use lab_core::call::CallContext;
pub use retry_budget::RetryBudgetConfig;
