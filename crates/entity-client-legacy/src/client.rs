//! The legacy client: `internal/entity/client.go` and `internal/httpx` of the postmortem's "Code
//! Before", reproduced faithfully in Rust. "Count the bugs: five in about ninety lines, and not
//! one of them is a typo. Every one is a design decision that looked like an obvious best practice
//! in isolation."
//!
//! ```text
//! resolve(ctx) ── spawn ──▶ detached task (ctx never reaches it)
//!   await JoinHandle          for attempt in 0..3:
//!   (dropping it does           wait for a per-host slot (no deadline but the 10 s)
//!    not stop the task)         POST, 10 s timeout (the package default)
//!                               ok                   ─▶ return
//!                               4xx / undecodable    ─▶ return
//!                               transport, timeout, ANY 5xx ─▶ sleep 200ms << attempt; continue
//!                             "entity-service: exhausted 3 attempts" (elapsed_ms: ~31,400)
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context as _};
use bytes::Bytes;
use lab_api::headers;
use lab_api::wire::{ResolveRequest, ResolveResponse};
use lab_core::call::CallContext;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backoff::backoff;
use crate::defaults::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_CONNS_PER_HOST,
    DEFAULT_MAX_IDLE_PER_HOST, DEFAULT_TIMEOUT,
};
use crate::error::Error;
use crate::metrics::{outcome, retry_class, ChildSpan, ClientMetrics};
use crate::pool::HostPool;
use crate::retryability::is_retryable;
use entity_client::spans;

/// Longest 4xx body kept in an error.
const ERROR_BODY_KEPT: usize = 512;

/// The Go `httpx.New(opts ...Option)`: every `None` inherits the package default from
/// [`crate::defaults`] — which is the whole trouble: whoever edits a default changes every caller
/// that passed nothing, and the orchestrator passed nothing.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Per-attempt client timeout; `None` inherits [`DEFAULT_TIMEOUT`] (10 s).
    pub timeout: Option<Duration>,
    /// Concurrent requests per entity-service host; `None` inherits
    /// [`DEFAULT_MAX_CONNS_PER_HOST`] (64). The lab sets a smaller cap to reach exhaustion at
    /// laptop scale.
    pub max_conns_per_host: Option<usize>,
    /// Attempts per call; `None` inherits [`DEFAULT_MAX_ATTEMPTS`] (3).
    pub max_attempts: Option<u32>,
}

/// The legacy entity-service client. Cheap to share (`Send + Sync`); the detached tasks hold
/// their own reference to its innards, which is how they keep running after everyone else is gone.
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// The HTTP client, with the 10 s default as its timeout (Go's `Client.Timeout`).
    http: reqwest::Client,
    /// `{base_url}/v1/resolve` and its `host:port` for every replica.
    targets: Vec<Target>,
    /// Round-robin cursor over `targets`, advanced per attempt.
    next: AtomicUsize,
    /// The per-attempt timeout (inherited: 10 s). Covers the slot wait, headers and body.
    timeout: Duration,
    /// Attempts per call (inherited: 3).
    max_attempts: u32,
    /// The per-host cap on requests in flight.
    pool: HostPool,
    /// The families shared with the fixed client (user traffic).
    metrics: ClientMetrics,
    /// Where the deep readiness probe's calls are counted (`entity_probe_*`): the probe goes
    /// through the same client and slots as users (that is the bug), but its attempts are not
    /// users' attempts.
    probe_metrics: ClientMetrics,
}

struct Target {
    url: String,
    host: String,
}

/// What the detached task needs from the caller — copied, because the caller may be gone.
struct Meta {
    doc_id: String,
    request_id: Option<String>,
    observe_user_deadline: Option<String>,
    traffic: Traffic,
}

impl Client {
    /// The orchestrator's `NewClient(baseURL)`: `httpx.New()` "called with zero options" —
    /// everything inherited, the 10 s [`DEFAULT_TIMEOUT`] included. `metrics`: the process's
    /// entity-client families ([`ClientMetrics::register`], once), shared with the fixed client.
    pub fn new(base_urls: Vec<String>, metrics: ClientMetrics) -> anyhow::Result<Self> {
        Self::with_options(base_urls, Options::default(), metrics)
    }

    /// `httpx.New(opts...)`: `None` options inherit the package defaults. Probe calls
    /// ([`Client::ready`]) are counted nowhere until [`Client::with_probe_metrics`] says where.
    pub fn with_options(
        base_urls: Vec<String>,
        opts: Options,
        metrics: ClientMetrics,
    ) -> anyhow::Result<Self> {
        ensure!(
            !base_urls.is_empty(),
            "legacy entity client: at least one entity-service URL is required"
        );
        // LAB-BUG(timeout-inversion): `Timeout: DefaultTimeout` unless an option says otherwise.
        // Nothing here (or anywhere) compares it with the caller's budget.
        let timeout = opts.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let cap = opts
            .max_conns_per_host
            .unwrap_or(DEFAULT_MAX_CONNS_PER_HOST);
        let max_attempts = opts.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        // Sanity only (values that would hang or do nothing), not a budget check: the defects
        // this client reproduces are its defaults and its loop, not missing input validation.
        ensure!(
            !timeout.is_zero(),
            "legacy entity client: timeout must be > 0"
        );
        ensure!(
            cap >= 1,
            "legacy entity client: max_conns_per_host must be >= 1"
        );
        ensure!(
            max_attempts >= 1,
            "legacy entity client: max_attempts must be >= 1"
        );
        let targets = base_urls
            .iter()
            .map(|b| target(b))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let http = reqwest::Client::builder()
            // Go's `Client.Timeout` on the wire part; the attempt wraps the slot wait in the same
            // duration (see `attempt`).
            .timeout(timeout)
            // `MaxIdleConnsPerHost: 64`, `IdleConnTimeout: 90 * time.Second`.
            .pool_max_idle_per_host(DEFAULT_MAX_IDLE_PER_HOST)
            .pool_idle_timeout(DEFAULT_IDLE_TIMEOUT)
            // An internal hop: never through an HTTP(S)_PROXY from the environment.
            .no_proxy()
            .build()
            .context("legacy entity client: building the HTTP client")?;
        let mut hosts: Vec<String> = targets.iter().map(|t| t.host.clone()).collect();
        hosts.sort();
        hosts.dedup();
        let pool = HostPool::new(cap, hosts, metrics.pool_in_use(), metrics.pool_waiting());
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                targets,
                next: AtomicUsize::new(0),
                timeout,
                max_attempts,
                pool,
                metrics,
                probe_metrics: ClientMetrics::unregistered(),
            }),
        })
    }

    /// Count the deep readiness probe's calls in `probe` ([`ClientMetrics::register_probe`]).
    /// Call before the client is shared.
    pub fn with_probe_metrics(mut self, probe: ClientMetrics) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.probe_metrics = probe;
        }
        self
    }

    /// Tests only: hold one of `base_url`'s connection slots until the returned slot is dropped.
    ///
    /// Why a hook: with FIFO slots and one clock for every call, a waiter can only reach its
    /// timeout while still waiting at an exact tie — every call ahead of it started earlier and
    /// releases its slot by its own (earlier) deadline. A slot held from outside the clock is the
    /// only deterministic way to show what happens when the wait does outlast the timeout.
    #[cfg(feature = "test-support")]
    pub async fn hold_slot_for_tests(&self, base_url: &str) -> crate::pool::Slot {
        let host = target(base_url).expect("a valid base URL").host;
        self.inner.pool.acquire(&host).await
    }

    /// The per-attempt timeout in force (10 s unless an option said otherwise).
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Resolve one batch of spans, the legacy way. `retries_enabled` is the postmortem's kill
    /// switch `retries.entity.enabled` (off: one attempt — still followed by its 200 ms sleep).
    ///
    /// `ctx.deadline` is never read; `ctx.request_id` and `ctx.observe_user_deadline` are only
    /// forwarded as headers.
    pub async fn resolve(
        &self,
        ctx: &CallContext,
        req: &ResolveRequest,
        retries_enabled: bool,
    ) -> Result<ResolveResponse, Error> {
        self.resolve_as(ctx, req, retries_enabled, Traffic::User)
            .await
    }

    async fn resolve_as(
        &self,
        ctx: &CallContext,
        req: &ResolveRequest,
        retries_enabled: bool,
        traffic: Traffic,
    ) -> Result<ResolveResponse, Error> {
        let body = serde_json::to_vec(req)
            .map(Bytes::from)
            .map_err(|e| Error::Decode {
                message: format!("encoding the request: {e}"),
            })?;
        // LAB-BUG(retry-amplification): 3 attempts here (the package default), under the gateway's
        // 3 at the layer above — 9 requests per user request while entity-service fails, and
        // nothing caps the aggregate. Only the kill switch `retries.entity.enabled` (the
        // postmortem's mitigation 1, "amplification drops from 9× to 3×") turns it off.
        let max_attempts = if retries_enabled {
            self.inner.max_attempts
        } else {
            1
        };
        let meta = Meta {
            doc_id: req.doc_id.clone(),
            request_id: ctx.request_id.clone(),
            observe_user_deadline: ctx.observe_user_deadline.clone(),
            traffic,
        };
        // The parent stays in this (the caller's) future; the child goes with the work.
        // With a Go handler above (LAB-BUG(go-handler)) the caller's future runs on after the
        // gateway hangs up: the hang-up, not this future's drop, is when the caller left.
        let (parent, child) = self
            .inner
            .metrics_for(traffic)
            .span_pair_with(ctx.caller_gone.clone());
        // The span is opened HERE, in the caller's context — a child of `orchestrator.Extract`,
        // in the end user's trace — and then carried into the detached task below. So when the
        // caller is gone, its trace shows what the postmortem's Jaeger waterfall showed at 10:41:
        // "The gateway span ends at 3.0 s. Its child span keeps going to 9.8 s." (What
        // `context.Background()` cut in Go was the cancellation and the deadline; the trace shows
        // the orphan precisely because the span still hangs under its dead parent.)
        let span = tracing::info_span!(
            "entity.Resolve",
            doc_id = %meta.doc_id,
            request_id = meta.request_id.as_deref().unwrap_or(""),
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let inner = self.inner.clone();
        // LAB-BUG(orphaned-work): `http.NewRequestWithContext(context.Background(), ...)` — "The
        // caller's ctx is right there in the signature. It is never used. Cancellation,
        // deadlines, and trace context all stop at this line." This is how that looks in Rust.
        // Rust cancels for free: dropping a future drops everything it was doing, so a plain
        // `async fn` here could not reproduce the bug. The loop is therefore DETACHED on
        // purpose: `tokio::spawn` runs it as its own task and we await its `JoinHandle` — and
        // dropping a `JoinHandle` does not cancel the task. When the gateway hangs up and the
        // orchestrator's handler (and this future) is dropped, the task keeps waiting for slots,
        // sending attempts, sleeping 200/400/800 ms, for a caller that no longer exists: the
        // postmortem's 4,102 goroutines parked in `httpx.(*Client).Do`.
        let task = tokio::spawn(
            async move {
                let out = inner.run(body, &meta, max_attempts, &child).await;
                if let Err(e) = &out {
                    spans::record_outcome(&tracing::Span::current(), None, Some(e));
                }
                // The work's span ends here; if the caller already went away, it is an orphan.
                drop(child);
                out
            }
            .instrument(span),
        );
        let out = task.await;
        drop(parent);
        out.unwrap_or_else(|e| {
            Err(Error::Detached {
                message: e.to_string(),
            })
        })
    }

    // LAB-BUG(deep-readiness): the postmortem's `Health.Ready` — `h.entity.Resolve(r.Context(),
    // "healthcheck", nil)` — "/readyz called entity-service. Through the same client. Through the
    // same exhausted connection pool." When the per-host slots are taken, this waits in the same
    // queue (and, with retries, up to ~31 s); probes time out, Kubernetes (or labctl's gateway
    // rotation) pulls the pod, traffic concentrates on the rest, their pools fill: "a machine
    // that, on detecting stress, systematically removed healthy capacity until nothing was left".
    /// The orchestrator's deep readiness: a resolve of doc `healthcheck` with no spans (and no
    /// tenant: 0) through the SAME client, loop and per-host pool as production traffic — with
    /// the same retry kill switch (`retries.entity.enabled`) — counted as probe traffic: in the
    /// `entity_probe_*` families here, and marked `x-lab-traffic: probe` for entity-service.
    pub async fn ready(&self, retries_enabled: bool) -> Result<(), Error> {
        let req = ResolveRequest {
            doc_id: "healthcheck".into(),
            tenant: 0,
            locale: None,
            spans: vec![],
        };
        self.resolve_as(
            &CallContext::default(),
            &req,
            retries_enabled,
            Traffic::Probe,
        )
        .await
        .map(|_| ())
    }
}

/// Who a call is for: it decides the metric families, never the behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traffic {
    User,
    Probe,
}

impl Inner {
    fn metrics_for(&self, traffic: Traffic) -> &ClientMetrics {
        match traffic {
            Traffic::User => &self.metrics,
            Traffic::Probe => &self.probe_metrics,
        }
    }

    /// The retry loop of `entity.(*Client).Resolve`, running detached.
    async fn run(
        &self,
        body: Bytes,
        meta: &Meta,
        max_attempts: u32,
        child: &ChildSpan,
    ) -> Result<ResolveResponse, Error> {
        let started = Instant::now();
        let metrics = self.metrics_for(meta.traffic);
        let mut attempt: u32 = 0;
        loop {
            let target =
                &self.targets[self.next.fetch_add(1, Ordering::Relaxed) % self.targets.len()];
            // `entity.Resolve.attempt.N`: in the caller's trace, ending whenever the request
            // does — 10 s after it started, if that is what it takes.
            let span = spans::attempt(attempt, &target.url);
            let result = self
                .attempt(target, body.clone(), meta, &span)
                .instrument(span.clone())
                .await;
            match &result {
                Ok(_) => spans::record_outcome(&span, Some(200), None),
                Err(e @ Error::Upstream { status, .. }) => {
                    spans::record_outcome(&span, Some(*status), Some(e))
                }
                Err(e) => spans::record_outcome(&span, None, Some(e)),
            }
            drop(span);
            if child.parent_ended() {
                // This attempt's answer arrived for nobody: "Nobody is listening. Result discarded."
                metrics.record_abandoned();
            }
            let err = match result {
                Ok(answer) => return Ok(answer),
                Err(e) => e,
            };
            if !is_retryable(&err) {
                return Err(err);
            }
            let more = attempt + 1 < max_attempts;
            // LAB-BUG(no-jitter) and LAB-BUG(orphaned-work): `time.Sleep(backoff(attempt))` —
            // the same 200/400/800 ms on every pod, slept after every failure INCLUDING the last,
            // and "blocks even if the caller is long gone" (this task ignores the caller).
            tokio::time::sleep(backoff(attempt)).await;
            if more {
                // Counted when the next `client.Do` starts (right below), never before the sleep.
                metrics.record_retry(retry_class_of(&err));
            }
            if !more {
                let elapsed = started.elapsed();
                // The postmortem's log line, thousands of times per second; its `elapsed_ms: 30412`
                // "was in every log line for 56 minutes" and nobody read it.
                tracing::error!(
                    elapsed_ms = elapsed.as_millis() as u64,
                    attempts = max_attempts,
                    doc_id = %meta.doc_id,
                    err = %err,
                    "entity-service: exhausted {max_attempts} attempts"
                );
                return Err(Error::Exhausted {
                    attempts: max_attempts,
                    elapsed,
                    last: Box::new(err),
                });
            }
            attempt += 1;
        }
    }

    /// One `client.Do`: wait for a per-host slot, send, read — all under the one timeout.
    async fn attempt(
        &self,
        target: &Target,
        body: Bytes,
        meta: &Meta,
        span: &tracing::Span,
    ) -> Result<ResolveResponse, Error> {
        let started = Instant::now();
        // Started on the backoff's clock: counted before the slot wait paces it.
        self.metrics_for(meta.traffic).record_attempt_start();
        // Set once a slot is held: a timeout before that never put anything on the wire.
        let mut got_slot = false;
        let got = &mut got_slot;
        let exchange = async {
            // LAB-BUG(pool-exhaustion): park here while the host's slots are all taken.
            let _slot = self.pool.acquire(&target.host).await;
            *got = true;
            let mut rb = self
                .http
                .post(&target.url)
                // The trace context does travel (the caller's trace is where the orphan shows).
                .headers(lab_core::telemetry::propagation::headers_for(span))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
            if let Some(id) = &meta.request_id {
                rb = rb.header(headers::REQUEST_ID, id);
            }
            if let Some(d) = &meta.observe_user_deadline {
                rb = rb.header(headers::OBSERVE_USER_DEADLINE, d);
            }
            if meta.traffic == Traffic::Probe {
                rb = rb.header(headers::TRAFFIC, headers::TRAFFIC_PROBE);
            }
            // No X-Request-Budget-Ms: entity-service is never told how long anyone will wait.
            // (Observation only: when the attempt left, after its slot wait.)
            rb = rb.header(headers::OBSERVE_SENT_UNIX_US, headers::unix_us_now());
            let resp = rb
                .send()
                .await
                .map_err(|e| wire_error(&target.url, e, self.timeout))?;
            let status = resp.status();
            let origin = resp
                .headers()
                .get(lab_contract::ORIGIN_HEADER)
                .and_then(|v| v.to_str().ok())
                .and_then(lab_contract::errors::parse_origin);
            if status.is_server_error() {
                // `resp.Body.Close()` without draining: the connection cannot be reused.
                drop(resp);
                return Err(Error::Upstream {
                    status: status.as_u16(),
                    body: String::new(),
                    origin,
                });
            }
            if !status.is_success() {
                let text = resp.text().await.unwrap_or_default();
                return Err(Error::Upstream {
                    status: status.as_u16(),
                    body: text.chars().take(ERROR_BODY_KEPT).collect(),
                    origin,
                });
            }
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| wire_error(&target.url, e, self.timeout))?;
            serde_json::from_slice::<ResolveResponse>(&bytes).map_err(|e| Error::Decode {
                message: e.to_string(),
            })
        };
        // Go's `Client.Timeout` is one clock over everything `Do` does, the wait for a
        // connection slot included — so the slot wait is inside it.
        let result = match tokio::time::timeout(self.timeout, exchange).await {
            Ok(r) => r,
            Err(_) if !got_slot => Err(Error::SlotTimeout {
                url: target.url.clone(),
                timeout: self.timeout,
            }),
            Err(_) => Err(Error::Timeout {
                url: target.url.clone(),
                timeout: self.timeout,
            }),
        };
        self.metrics_for(meta.traffic)
            .record_attempt(outcome_of(&result), started.elapsed());
        result
    }
}

fn wire_error(url: &str, e: reqwest::Error, timeout: Duration) -> Error {
    let connect = e.is_connect();
    if e.is_timeout() {
        return Error::Timeout {
            url: url.to_string(),
            timeout,
        };
    }
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    Error::Transport {
        url: url.to_string(),
        message,
        connect,
    }
}

fn outcome_of(result: &Result<ResolveResponse, Error>) -> &'static str {
    match result {
        Ok(_) => outcome::OK,
        Err(Error::Timeout { .. }) => outcome::TIMEOUT,
        Err(Error::SlotTimeout { .. }) => outcome::SLOT_TIMEOUT,
        Err(Error::Upstream { status, .. }) => outcome::for_status(*status),
        Err(Error::Decode { .. }) => outcome::DECODE,
        Err(_) => outcome::TRANSPORT,
    }
}

fn retry_class_of(err: &Error) -> &'static str {
    match err {
        Error::Timeout { .. } => retry_class::TIMEOUT,
        Error::SlotTimeout { .. } => retry_class::SLOT_TIMEOUT,
        Error::Upstream { status, .. } => retry_class::for_status(*status),
        _ => retry_class::TRANSPORT,
    }
}

fn target(base: &str) -> anyhow::Result<Target> {
    let url = reqwest::Url::parse(base)
        .with_context(|| format!("legacy entity client: invalid entity-service URL {base:?}"))?;
    let host = match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) if matches!(url.scheme(), "http" | "https") => format!("{h}:{p}"),
        _ => anyhow::bail!(
            "legacy entity client: entity-service URL {base:?} must be http://host:port"
        ),
    };
    Ok(Target {
        url: format!("{}/v1/resolve", base.trim_end_matches('/')),
        host,
    })
}
