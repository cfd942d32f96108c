//! Test support for BOTH entity clients (feature `test-support`; dev-dependencies only): a stub
//! entity-service on `127.0.0.1:0` whose replies are scripted per test, and readers for a
//! metrics registry. One copy, used by `entity-client` and `entity-client-legacy` tests alike.
//!
//! The stub records, per request, the tokio `Instant` it arrived and the headers that matter; it
//! also records *hang-ups*: a handler dropped before it replied, which is how hyper reports a
//! client that closed the connection mid-request. Tests run on the paused clock
//! (`#[tokio::test(start_paused = true)]`): tokio advances time only when every task is idle, so
//! the stub's delays, the clients' timeouts and backoffs all run in virtual time while the bytes
//! still cross a real loopback socket.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use lab_api::headers;
use lab_api::wire::{ResolveRequest, SpanQuery};
use lab_core::call::CallContext;
use lab_core::metrics::Metrics;
use prometheus::proto::MetricType;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the stub does with one request.
#[derive(Clone, Debug)]
pub struct Reply {
    /// Status to answer with.
    pub status: u16,
    /// How long to wait before answering (virtual time under a paused clock).
    pub delay: Duration,
    /// The body; `None` = `{"results":[]}` for 2xx, an `{"error":...}` body otherwise.
    pub body: Option<String>,
    /// Answer one `null` (no match) per span the request sent, whatever the batch's size.
    pub per_span: bool,
    /// The error-table row to name in `x-lab-error-origin`, as the real entity-service does.
    pub origin: Option<&'static lab_contract::Failure>,
    /// Server pushback to send (`x-lab-retry-pushback-ms`), as entity-service's admission does
    /// on a refusal.
    pub pushback: Option<Duration>,
}

impl Reply {
    /// 200 with an empty, valid `ResolveResponse`, at once.
    pub fn ok() -> Self {
        Self::status(200)
    }

    /// `status` at once. Like the real entity-service, an error names its row of the error
    /// table (`x-lab-error-origin`): 503 is `db_unavailable`, 500 `query_failed`; other statuses
    /// name none (use [`Reply::with_origin`]), and [`Reply::unnamed`] sends a 5xx the way a
    /// foreign server would.
    pub fn status(status: u16) -> Self {
        let origin = match status {
            503 => Some(&lab_contract::errors::ES_DB_UNAVAILABLE),
            500 => Some(&lab_contract::errors::ES_QUERY_FAILED),
            _ => None,
        };
        Self {
            status,
            delay: Duration::ZERO,
            body: None,
            per_span: false,
            origin,
            pushback: None,
        }
    }

    /// The same reply without any `x-lab-error-origin`.
    pub fn unnamed(mut self) -> Self {
        self.origin = None;
        self
    }

    /// Accept the request and never answer (an hour is forever in a test).
    pub fn black_hole() -> Self {
        Self::ok().after(Duration::from_secs(3600))
    }

    /// The same reply, after `delay`.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same reply, naming `row` in `x-lab-error-origin`.
    pub fn with_origin(mut self, row: &'static lab_contract::Failure) -> Self {
        self.origin = Some(row);
        self
    }

    /// entity-service's admission refusing before any work (503 `db_pool_exhausted`), saying its
    /// queue is `pushback` too long for the request's budget.
    pub fn refused_with_pushback(pushback: Duration) -> Self {
        Self {
            pushback: Some(pushback),
            ..Self::status(503).with_origin(&lab_contract::errors::ES_DB_POOL_EXHAUSTED)
        }
    }

    /// 200 with one `null` per span sent: a valid answer for a batch of any size.
    pub fn nulls() -> Self {
        Self {
            per_span: true,
            ..Self::ok()
        }
    }

    /// The same reply with this body.
    pub fn with_body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }
}

/// One request as the stub saw it.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// When it arrived.
    pub at: Instant,
    /// `x-request-id`.
    pub request_id: Option<String>,
    /// `x-request-budget-ms` (only the fixed client sends it).
    pub budget_ms: Option<u64>,
    /// The observation-only end-user deadline header.
    pub observe_user_deadline: Option<String>,
    /// W3C `traceparent` (sent by both clients while traces are on).
    pub traceparent: Option<String>,
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Reply>,
    default: Option<Reply>,
    arrivals: Vec<Arrival>,
    hangups: Vec<Instant>,
    in_flight: usize,
    max_in_flight: usize,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Notify,
}

impl Shared {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let t = f(&mut self.inner.lock().unwrap());
        self.changed.notify_waiters();
        t
    }
}

/// A stub entity-service. Dropping it stops the server.
pub struct Stub {
    /// `http://127.0.0.1:<port>`, to pass as a base URL.
    pub url: String,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Stub {
    /// A stub answering every request with `default` (until [`Stub::then`] scripts otherwise).
    pub async fn start(default: Reply) -> Stub {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                default: Some(default),
                ..Inner::default()
            }),
            changed: Notify::new(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the stub");
        let url = format!("http://{}", listener.local_addr().expect("stub address"));
        let app = Router::new()
            .route("/v1/resolve", post(handle))
            .with_state(shared.clone());
        // A stub server for the client's tests, not the client: it runs until the stub drops.
        #[allow(clippy::disallowed_methods)]
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Stub {
            url,
            shared,
            server,
        }
    }

    /// Serve the next requests with `replies`, in order, then go back to the default.
    pub fn then(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.with(|s| s.script.extend(replies));
    }

    /// Change the reply for every request after the scripted ones.
    pub fn set_default(&self, reply: Reply) {
        self.shared.with(|s| s.default = Some(reply));
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.shared.inner.lock().unwrap().arrivals.len()
    }

    /// Every request received so far, in arrival order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.shared.inner.lock().unwrap().arrivals.clone()
    }

    /// When each request the client hung up on (connection closed before the reply) was dropped.
    pub fn hangups(&self) -> Vec<Instant> {
        self.shared.inner.lock().unwrap().hangups.clone()
    }

    /// Requests being handled right now.
    pub fn in_flight(&self) -> usize {
        self.shared.inner.lock().unwrap().in_flight
    }

    /// The most requests ever handled at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.inner.lock().unwrap().max_in_flight
    }

    /// Wait until `n` requests have arrived.
    pub async fn wait_for_requests(&self, n: usize) {
        self.wait(|s| s.arrivals.len() >= n).await
    }

    /// Wait until `n` hang-ups have been seen.
    pub async fn wait_for_hangups(&self, n: usize) {
        self.wait(|s| s.hangups.len() >= n).await
    }

    /// Wait until exactly `n` requests are in flight.
    pub async fn wait_for_in_flight(&self, n: usize) {
        self.wait(|s| s.in_flight == n).await
    }

    async fn wait(&self, pred: impl Fn(&Inner) -> bool) {
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if pred(&self.shared.inner.lock().unwrap()) {
                return;
            }
            notified.await;
        }
    }
}

/// Counts a request as in flight; dropped before `answered` is set, it is a hang-up.
struct InFlight {
    shared: Arc<Shared>,
    answered: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let answered = self.answered;
        self.shared.with(|s| {
            s.in_flight -= 1;
            if !answered {
                s.hangups.push(Instant::now());
            }
        });
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    hdrs: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let get = |name: &str| {
        hdrs.get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let arrival = Arrival {
        at: Instant::now(),
        request_id: get(headers::REQUEST_ID),
        budget_ms: get(headers::REQUEST_BUDGET_MS).and_then(|v| v.parse().ok()),
        observe_user_deadline: get(headers::OBSERVE_USER_DEADLINE),
        traceparent: get(lab_core::telemetry::propagation::TRACEPARENT),
    };
    let reply = shared.with(|s| {
        s.arrivals.push(arrival);
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        s.script
            .pop_front()
            .or_else(|| s.default.clone())
            .unwrap_or_else(Reply::ok)
    });
    let mut guard = InFlight {
        shared,
        answered: false,
    };
    tokio::time::sleep(reply.delay).await;
    guard.answered = true;
    let status = StatusCode::from_u16(reply.status).expect("valid status");
    let spans = || {
        serde_json::from_slice::<ResolveRequest>(&body)
            .map(|r| r.spans.len())
            .unwrap_or(0)
    };
    let body = reply.body.unwrap_or_else(|| {
        if status.is_success() && reply.per_span {
            format!(r#"{{"results":[{}]}}"#, vec!["null"; spans()].join(","))
        } else if status.is_success() {
            r#"{"results":[]}"#.to_string()
        } else {
            format!(r#"{{"error":{{"code":"stub","message":"stub answered {status}"}}}}"#)
        }
    });
    let mut resp = (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if let Some(p) = reply.pushback {
        resp.headers_mut().insert(
            headers::RETRY_PUSHBACK_MS,
            p.as_millis().to_string().parse().expect("digits"),
        );
    }
    if let Some(row) = reply.origin {
        resp.headers_mut().insert(
            lab_contract::ORIGIN_HEADER,
            row.origin().parse().expect("a valid header value"),
        );
    }
    resp
}

/// A small, valid request.
pub fn request() -> ResolveRequest {
    ResolveRequest {
        doc_id: "doc_01HZX9K2QW".into(),
        tenant: 1,
        locale: None,
        spans: vec![SpanQuery {
            normalized: "vega labs".into(),
            kind: "organization".into(),
        }],
    }
}

/// A caller context with ids (no deadline).
pub fn ctx() -> CallContext {
    CallContext {
        deadline: None,
        request_id: Some("req-1".into()),
        observe_user_deadline: Some("1749631424882".into()),
        caller_gone: None,
    }
}

/// Sum of the samples of `name` whose labels include all of `labels` (counter and gauge values;
/// a histogram's sample count). 0 when there is no such series.
pub fn metric(metrics: &Metrics, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut sum = 0.0;
    for family in metrics
        .registry()
        .gather()
        .iter()
        .filter(|f| f.name() == name)
    {
        let kind = family.get_field_type();
        for m in family.get_metric() {
            let matches = labels.iter().all(|(k, v)| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == *k && l.value() == *v)
            });
            if !matches {
                continue;
            }
            sum += match kind {
                MetricType::COUNTER => m.get_counter().get_value(),
                MetricType::GAUGE => m.get_gauge().get_value(),
                MetricType::HISTOGRAM => m.get_histogram().get_sample_count() as f64,
                _ => 0.0,
            };
        }
    }
    sum
}

/// Does `name` have at least one series in the registry's exposition?
pub fn has_series(metrics: &Metrics, name: &str) -> bool {
    metrics
        .registry()
        .gather()
        .iter()
        .any(|f| f.name() == name && !f.get_metric().is_empty())
}
