//! The legacy client writes the SAME metric families as the fixed client, defined once in
//! [`entity_client::metrics`] (see its module docs for the full table). Both clients live on one
//! registry: the process registers the families once ([`ClientMetrics::register`]) and hands the
//! same handles to both clients; the deep readiness probe's calls go to the probe families
//! ([`ClientMetrics::register_probe`], `entity_probe_*`) instead.
//!
//! What each series means when THIS client writes it:
//!
//! - `entity_requests_total{outcome}` / `entity_request_duration_seconds{outcome}`: every attempt
//!   `client.Do` made, counted when it ends — `ok`, `timeout`, `error_5xx`, `error_4xx`,
//!   `transport`, `decode`; never `cancelled`, because nothing cancels it. A call whose 10 s ran
//!   out while it was still waiting for a per-host slot is `slot_timeout`: nothing went on the
//!   wire (Go's `Client.Timeout` reports it as a timeout all the same, and the loop retries it).
//! - `entity_retries_total{class}`: retries, counted when the next `client.Do` starts, after the
//!   backoff sleep (the sleep after the LAST attempt is not a retry and is not counted).
//! - `entity_abandoned_total`: attempts that COMPLETED after the caller had gone (the awaiting
//!   future was dropped, or — under a handler that runs on as a Go handler does — the gateway
//!   hung up on it: `CallContext::caller_gone`): each one ran its whole length for nobody. Fixed counts the attempts it
//!   CUT when the caller went away; both answer "how many attempts' answers did nobody use?".
//! - `otel_span_orphaned_total{span="entity.Resolve"}`: the detached retry loop finishing after
//!   the caller was gone (dropped, or hung up on as above) — "a child span outliving its parent ... has exactly one meaning:
//!   cancellation isn't propagating".
//! - `entity_pool_slots{state}`: `in_use` per-host slots held by attempts, `waiting` attempts
//!   parked for a slot.
//! - `entity_shed_total{reason}`: never incremented — this client sheds nothing.
//! - `entity_retry_budget_tokens`, `entity_breaker_state`: not written (no series is created).

pub use entity_client::metrics::{
    outcome, pool_state, retry_class, ChildSpan, ClientMetrics, ParentSpan,
};
