//! Prometheus metrics: one registry per service, rendered at `/metrics` in the text format.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lab_contract::errors::{self, Failure, Hop, ORIGIN_HEADER};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};
use tracing::Instrument as _;

use crate::http::ErrorInfo;

/// Latency buckets for a callee's own view: they reach far past the gateway's 3 s budget (up to
/// 60 s) because the postmortem's entity-service p99 was 6.9 s while the gateway could only ever
/// report 3.0 s. A histogram that stops at the budget is the "blindfold with axis labels".
pub const CALLEE_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5,
    10.0, 15.0, 20.0, 30.0, 60.0,
];

/// A service's metrics registry with the process and runtime collectors already registered.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        #[cfg(target_os = "linux")]
        {
            // process_resident_memory_bytes, process_cpu_seconds_total (to the tick, not whole
            // seconds: crate::process), process_open_fds, ...
            let _ = registry.register(Box::new(crate::process::Process::for_self()));
        }
        let _ = registry.register(Box::new(RuntimeCollector::new()));
        Self { registry }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Register a collector; a name registered twice is a programming error.
    pub fn register<C: Collector + Clone + 'static>(&self, c: C) -> C {
        self.registry
            .register(Box::new(c.clone()))
            .expect("metric registered twice");
        c
    }

    pub fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }

    pub fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help).expect("valid metric"))
    }

    pub fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        buckets: &[f64],
    ) -> HistogramVec {
        self.register(
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                labels,
            )
            .expect("valid metric"),
        )
    }

    /// The Prometheus text exposition of everything registered.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("text encoding is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// `GET /metrics`.
pub async fn handler(State(metrics): State<Metrics>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
        .into_response()
}

/// Tokio's live task count, the Rust analogue of the postmortem's goroutine count (240 → 4,180
/// per pod): detached tasks that nobody awaits any more still count here.
#[derive(Clone)]
struct RuntimeCollector {
    alive: IntGauge,
}

impl RuntimeCollector {
    fn new() -> Self {
        Self {
            alive: IntGauge::new(
                "tokio_alive_tasks",
                "Tasks alive on this process's Tokio runtime, including detached ones",
            )
            .expect("valid metric"),
        }
    }
}

impl Collector for RuntimeCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.alive.desc()
    }
    fn collect(&self) -> Vec<MetricFamily> {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            self.alive.set(handle.metrics().num_alive_tasks() as i64);
        }
        self.alive.collect()
    }
}

/// Request count and duration for one service's API routes, by status code — and, when traces are
/// on, the server span of each request (see [`track`]).
#[derive(Clone)]
pub struct HttpMetrics {
    inner: Arc<HttpMetricsInner>,
    /// The server span's name (the postmortem's, e.g. `orchestrator.Extract`); `None`:
    /// `"{method} {path}"`.
    span_name: Option<&'static str>,
    /// The public edge: errors are counted by origin but the origin is not put on the wire (it
    /// names internal hops; users get the row's code and meaning in the body).
    public: bool,
    /// The server span joins the caller's `traceparent`: always between the lab's hops; at the
    /// public edge only when configured (a client must not choose trace ids or sampling).
    trust_caller_trace: bool,
}

struct HttpMetricsInner {
    /// The hop these routes belong to: the `hop` of an error this service decided itself.
    hop: Hop,
    requests: IntCounterVec,
    duration: HistogramVec,
    in_flight: IntGauge,
    /// `lab_errors_total{hop, origin, status}`: every error response, by the error-table row that
    /// decided it (which may belong to a hop below).
    errors: IntCounterVec,
    /// `<prefix>_internal_requests_total{traffic, status}`: requests made for no user (marked
    /// `x-lab-traffic`: probes, warm-ups), kept out of every series above.
    internal: IntCounterVec,
}

impl HttpMetrics {
    /// `<prefix>_requests_total{status}`, `<prefix>_request_duration_seconds{status}`,
    /// `<prefix>_requests_in_flight`, and `lab_errors_total{hop, origin, status}` for the routes of
    /// `hop`.
    pub fn new(metrics: &Metrics, hop: Hop, prefix: &str, what: &str, buckets: &[f64]) -> Self {
        Self {
            inner: Arc::new(HttpMetricsInner {
                hop,
                errors: metrics.counter_vec(
                    "lab_errors_total",
                    "Error responses this service sent, by the error-table row that decided them: \
                     hop and origin name the row (possibly a hop below), status what was answered",
                    &["hop", "origin", "status"],
                ),
                internal: metrics.counter_vec(
                    &format!("{prefix}_internal_requests_total"),
                    &format!(
                        "Requests {what} made for no user (x-lab-traffic: probe, warmup), by \
                         traffic and HTTP status; not in {prefix}_requests_total"
                    ),
                    &["traffic", "status"],
                ),
                requests: metrics.counter_vec(
                    &format!("{prefix}_requests_total"),
                    &format!("Requests {what}, by HTTP status"),
                    &["status"],
                ),
                duration: metrics.histogram_vec(
                    &format!("{prefix}_request_duration_seconds"),
                    &format!("Duration of requests {what}, as this service observed it"),
                    &["status"],
                    buckets,
                ),
                in_flight: metrics.gauge(
                    &format!("{prefix}_requests_in_flight"),
                    &format!("Requests {what} currently being handled"),
                ),
            }),
            span_name: None,
            public: false,
            trust_caller_trace: true,
        }
    }

    /// These routes face users: never send `x-lab-error-origin` to the caller, and start every
    /// request's trace here unless [`HttpMetrics::trusting_caller_trace`] says otherwise.
    pub fn public(mut self) -> Self {
        self.public = true;
        self.trust_caller_trace = false;
        self
    }

    /// Whether the server span joins the caller's `traceparent`.
    pub fn trusting_caller_trace(mut self, trust: bool) -> Self {
        self.trust_caller_trace = trust;
        self
    }

    /// Name the server span of every request through [`track`] (the names the postmortem's
    /// Jaeger waterfall shows: `edge-gateway.HandleExtract`, `orchestrator.Extract`).
    pub fn with_span_name(mut self, name: &'static str) -> Self {
        self.span_name = Some(name);
        self
    }

    pub fn observe(&self, status: StatusCode, seconds: f64) {
        let s = status.as_str();
        self.inner.requests.with_label_values(&[s]).inc();
        self.inner.duration.with_label_values(&[s]).observe(seconds);
    }

    /// Count one error response as `f`, answered with `status`.
    fn count_error(&self, f: &Failure, status: StatusCode) {
        self.inner
            .errors
            .with_label_values(&[f.hop.as_str(), f.code, status.as_str()])
            .inc();
    }

    /// The row an error response of these routes answers: the one it names, else the one its
    /// code names at this hop, else this hop's `unlabelled` (a response not built from the table).
    fn failure_of(&self, resp: &Response) -> &'static Failure {
        let info = resp.extensions().get::<ErrorInfo>();
        info.and_then(|i| i.origin)
            .or_else(|| info.and_then(|i| errors::lookup(self.inner.hop, i.code)))
            .unwrap_or_else(|| {
                errors::lookup(self.inner.hop, "unlabelled").expect("every hop has `unlabelled`")
            })
    }
}

/// Middleware: count and time every request through the layer it wraps. A request whose client
/// disconnects is dropped by the server before it completes; it is counted as status 499
/// (nginx's "client closed request") so those requests stay visible. Every error response is
/// also counted in `lab_errors_total` by its error-table row, and carries the row upward in
/// `x-lab-error-origin` (unless it already names one).
///
/// When traces are on it also opens the request's server span, a child of the caller's
/// `traceparent`, and marks it an error on a 5xx or a hang-up — what tail sampling keeps. The span
/// ends when the handler returns or is dropped, so a handler whose caller hung up ends its span
/// then: anything it started that is still running afterwards is a child outliving its parent.
pub async fn track(State(m): State<HttpMetrics>, req: Request, next: Next) -> Response {
    struct Guard {
        m: HttpMetrics,
        start: Instant,
        done: bool,
        span: tracing::Span,
    }
    impl Drop for Guard {
        fn drop(&mut self) {
            self.m.inner.in_flight.dec();
            if !self.done {
                let code = StatusCode::from_u16(499).expect("valid status");
                self.m.observe(code, self.start.elapsed().as_secs_f64());
                if let Some(f) = errors::lookup(self.m.inner.hop, "caller_gone") {
                    self.m.count_error(f, code);
                }
                self.span.record("http.response.status_code", 499);
                self.span.record("otel.status_code", "ERROR");
                self.span
                    .record("otel.status_description", "client closed request");
            }
        }
    }
    let internal = match req
        .headers()
        .get(lab_api::headers::TRAFFIC)
        .and_then(|v| v.to_str().ok())
    {
        Some(lab_api::headers::TRAFFIC_PROBE) => Some(lab_api::headers::TRAFFIC_PROBE),
        Some(lab_api::headers::TRAFFIC_WARMUP) => Some(lab_api::headers::TRAFFIC_WARMUP),
        _ => None,
    };
    if let Some(traffic) = internal {
        // No user's request: counted apart, never in the user-facing series or spans.
        let resp = next.run(req).await;
        m.inner
            .internal
            .with_label_values(&[traffic, resp.status().as_str()])
            .inc();
        return resp;
    }
    let span = if crate::telemetry::enabled() {
        server_span(&m, &req)
    } else {
        tracing::Span::none()
    };
    m.inner.in_flight.inc();
    let mut guard = Guard {
        m: m.clone(),
        start: Instant::now(),
        done: false,
        span: span.clone(),
    };
    let mut resp = next.run(req).instrument(span).await;
    guard.done = true;
    m.observe(resp.status(), guard.start.elapsed().as_secs_f64());
    if resp.status().is_client_error() || resp.status().is_server_error() {
        // Counted by the row that decided it, and the row goes up to the caller.
        let f = m.failure_of(&resp);
        m.count_error(f, resp.status());
        if m.public {
            resp.headers_mut().remove(ORIGIN_HEADER);
        } else if let Ok(v) = HeaderValue::from_str(&f.origin()) {
            resp.headers_mut().entry(ORIGIN_HEADER).or_insert(v);
        }
    }
    guard
        .span
        .record("http.response.status_code", resp.status().as_u16());
    if resp.status().is_server_error() {
        guard.span.record("otel.status_code", "ERROR");
    }
    resp
}

/// The longest client request id kept: a UUID is 36, a ULID 26; 128 leaves room for any
/// scheme's prefix and bounds what a caller can write into every span.
const CLIENT_REQUEST_ID_MAX: usize = 128;

/// The caller's `X-Request-Id`, when it is short and printable ASCII (no spaces, no control
/// characters): what a log or trace search can take as one token.
fn client_request_id(headers: &axum::http::HeaderMap) -> Option<&str> {
    let id = headers.get(lab_api::headers::REQUEST_ID)?.to_str().ok()?;
    (!id.is_empty()
        && id.len() <= CLIENT_REQUEST_ID_MAX
        && id.bytes().all(|b| b.is_ascii_graphic()))
    .then_some(id)
}

/// The server span of one request: named by [`HttpMetrics::with_span_name`], parented by the
/// request's `traceparent` where the caller is trusted with it.
fn server_span(m: &HttpMetrics, req: &Request) -> tracing::Span {
    let name = m
        .span_name
        .map(std::borrow::Cow::Borrowed)
        .unwrap_or_else(|| format!("{} {}", req.method(), req.uri().path()).into());
    let span = tracing::info_span!(
        "http.server",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %req.method(),
        url.path = req.uri().path(),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        client.request_id = tracing::field::Empty,
    );
    // At a public door the caller's own X-Request-Id is kept where its owner can find the
    // request by it (the gateway mints the id every hop uses, and echoes only that one): an
    // attribute, never an id, and only a short printable one.
    if m.public {
        if let Some(id) = client_request_id(req.headers()) {
            span.record("client.request_id", id);
        }
    }
    if m.trust_caller_trace {
        crate::telemetry::propagation::set_parent_from_headers(&span, req.headers());
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_request_id_is_kept_only_when_short_and_printable() {
        let with = |v: &[u8]| {
            let mut h = axum::http::HeaderMap::new();
            h.insert(
                lab_api::headers::REQUEST_ID,
                HeaderValue::from_bytes(v).unwrap(),
            );
            client_request_id(&h).map(str::to_owned)
        };
        assert_eq!(with(b"req-01J9Z"), Some("req-01J9Z".into()));
        assert_eq!(with(&[b'a'; 128]).map(|s| s.len()), Some(128));
        assert_eq!(with(&[b'a'; 129]), None);
        assert_eq!(with(b"two words"), None);
        assert_eq!(with(b"tab\there"), None);
        assert_eq!(with("caf\u{e9}".as_bytes()), None);
        assert_eq!(with(b""), None);
        assert_eq!(client_request_id(&axum::http::HeaderMap::new()), None);
    }
}
