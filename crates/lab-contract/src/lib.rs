//! The contract between the hops of the synchronous path — client → edge-gateway → orchestrator →
//! entity-service → PostgreSQL — as two tables every hop reads:
//!
//! - [`budget`]: WHEN each hop gives up. The hop table ([`budget::hop_table`]) with every budget
//!   next to its parent's, validated so no child can outlive its parent
//!   (LAB-FIX(timeout-inversion)).
//! - [`errors`]: WHAT each hop then answers. The error table ([`errors::TABLE`]): for every
//!   failure a hop can decide, its status, error code, whether it is transient, and the metric
//!   label that names it; the row travels up the path in `x-lab-error-origin`.
//! - [`policy`]: what a team may change of the fixed client — the entity hop, the concurrency
//!   limit, backoff, retry budget, breaker — as an overlay of the hop table (`--policy FILE`).
//!
//! A crate of its own so the gateway validates its budget without depending on the orchestrator's
//! HTTP client, and so the contract compiles (and is tested) alone.

pub mod budget;
pub mod errors;
pub mod policy;

pub use budget::{hop_table, Budget, BudgetError, HopTable, MIN_ATTEMPT_BUDGET};
pub use errors::{Failure, Hop, ORIGIN_HEADER};
