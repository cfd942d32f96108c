//! The spans BOTH entity clients open — named once, here, after the postmortem's waterfall:
//!
//! ```text
//! orchestrator.Extract             (the caller's server span)
//!   entity.Resolve                 one call: the retry loop, backoffs included
//!     entity.Resolve.attempt.0     one request to entity-service, `traceparent` on the wire
//!     entity.Resolve.attempt.1
//! ```
//!
//! In the fixed client every one of them ends before (or with) the caller's span: they are part
//! of its future. In the legacy client `entity.Resolve` and its attempts run in a detached task,
//! so after a caller hangs up they keep going and end later — in the caller's trace, the child
//! span outliving its parent that the postmortem's Jaeger screenshot shows.

use tracing::field::Empty;

pub use crate::metrics::RESOLVE_SPAN as RESOLVE;

/// `entity.Resolve.attempt.N`, N counted from 0 as in the postmortem. A client span: the
/// `traceparent` sent with the request names it as entity-service's parent.
pub fn attempt(n: u32, url: &str) -> tracing::Span {
    tracing::info_span!(
        "entity.Resolve.attempt",
        otel.name = format!("entity.Resolve.attempt.{n}"),
        otel.kind = "client",
        attempt = n,
        http.request.method = "POST",
        url.full = url,
        budget_ms = Empty,
        http.response.status_code = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// Record how an attempt (or a whole call) ended: the HTTP status if one came back, and an error
/// status — the mark tail sampling keeps a trace for — unless it succeeded.
pub fn record_outcome(
    span: &tracing::Span,
    status: Option<u16>,
    error: Option<&dyn std::fmt::Display>,
) {
    if let Some(status) = status {
        span.record("http.response.status_code", status);
    }
    if let Some(error) = error {
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_description", tracing::field::display(error));
    }
}
