//! W3C Trace Context (`traceparent`, `tracestate`) in and out of carriers.
//!
//! Every hop carries the trace the same way: HTTP headers ([`headers_for`] on the way out, the
//! server span in [`crate::metrics::track`] on the way in) and, for Kafka or anything else with
//! string key/value headers, [`inject_with`] / [`set_parent_with`]. All of it does nothing while
//! traces are off ([`super::enabled`]).
//!
//! ```text
//! // Producer: write the current span's context into the record's headers.
//! lab_core::telemetry::propagation::inject_with(|k, v| headers.push((k.to_string(), v)));
//! // Consumer: make the processing span a child of the producer's.
//! let span = tracing::info_span!("enrichment.Process");
//! lab_core::telemetry::propagation::set_parent_with(&span, |k| header(k));
//! ```

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C header that carries trace id, parent span id and the sampled flag.
pub const TRACEPARENT: &str = "traceparent";

/// Headers carrying `span`'s context (`traceparent`, and `tracestate` if any), to add to an
/// outgoing request: `request_builder.headers(headers_for(&span))`. Empty while traces are off.
pub fn headers_for(span: &tracing::Span) -> HeaderMap {
    let mut map = HeaderMap::new();
    if super::enabled() {
        let cx = span.context();
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(&mut map));
    }
    map
}

/// [`headers_for`] the span we are in.
pub fn current_headers() -> HeaderMap {
    headers_for(&tracing::Span::current())
}

/// Make `span` a child of the context in `headers` (a server span and its caller's
/// `traceparent`). Without a valid `traceparent`, `span` keeps its own parent (a new root for a
/// server span). Must be called before `span` is first entered.
pub fn set_parent_from_headers(span: &tracing::Span, headers: &HeaderMap) {
    if super::enabled() {
        set_parent(span, extract(&HeaderExtractor(headers)));
    }
}

/// Write the current span's context through `set(key, value)`: any string key/value carrier
/// (Kafka record headers, a map, a message envelope). Writes nothing while traces are off.
pub fn inject_with(set: impl FnMut(&str, String)) {
    inject_span_with(&tracing::Span::current(), set)
}

/// [`inject_with`] for a given span.
pub fn inject_span_with(span: &tracing::Span, set: impl FnMut(&str, String)) {
    if super::enabled() {
        let cx = span.context();
        TraceContextPropagator::new().inject_context(&cx, &mut FnInjector(set));
    }
}

/// Make `span` a child of the context read through `get(key)` from any string key/value carrier;
/// see [`set_parent_from_headers`].
pub fn set_parent_with(span: &tracing::Span, get: impl Fn(&str) -> Option<String>) {
    if super::enabled() {
        // The propagator borrows `&str` from its carrier; fetch the few keys it reads up front.
        let fields = TraceContextPropagator::new()
            .fields()
            .filter_map(|k| get(k).map(|v| (k.to_string(), v)))
            .collect();
        set_parent(span, extract(&OwnedCarrier(fields)));
    }
}

/// The trace id in a `traceparent` value (32 lowercase hex digits), if it is well formed.
pub fn trace_id_of(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (_version, trace_id) = (parts.next()?, parts.next()?);
    (trace_id.len() == 32 && trace_id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(trace_id)
}

fn extract(carrier: &dyn Extractor) -> Context {
    TraceContextPropagator::new().extract(carrier)
}

fn set_parent(span: &tracing::Span, cx: Context) {
    if cx.span().span_context().is_valid() {
        // Fails only if the span is disabled or already started: then it keeps its own parent.
        let _ = span.set_parent(cx);
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct FnInjector<F>(F);

impl<F: FnMut(&str, String)> Injector for FnInjector<F> {
    fn set(&mut self, key: &str, value: String) {
        (self.0)(key, value)
    }
}

/// The propagator's keys and their values, read from a caller's carrier.
struct OwnedCarrier(Vec<(String, String)>);

impl Extractor for OwnedCarrier {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_id_of_reads_a_traceparent_and_refuses_garbage() {
        assert_eq!(
            trace_id_of("00-4b1c9f2e8a7d6c5b4a39281706f5e4d3-00f067aa0ba902b7-01"),
            Some("4b1c9f2e8a7d6c5b4a39281706f5e4d3")
        );
        assert_eq!(trace_id_of("00-xyz-00f067aa0ba902b7-01"), None);
        assert_eq!(trace_id_of(""), None);
    }
}
