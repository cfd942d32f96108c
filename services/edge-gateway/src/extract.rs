//! `POST /v1/extract`: authenticate, validate, forward within the 3 s budget.
//!
//! The budget is enforced for the whole request: at `budget.request_ms` the client gets a 504
//! and the upstream call is dropped, which closes its connection — the gateway cancels correctly
//! in every mode (the postmortem's gateway did too; the orphans lived below it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use lab_api::headers;
use lab_api::wire::{ExtractRequest, InternalExtractRequest};
use lab_contract::errors;
use lab_core::http::ApiError;
use prometheus::IntCounterVec;

use crate::auth::KeyStore;
use crate::configuration::{BudgetSettings, LegacySettings, LimitSettings};
use crate::upstream::Upstreams;

#[derive(Clone)]
pub struct AppState {
    pub keys: Arc<KeyStore>,
    pub upstreams: Arc<Upstreams>,
    pub http: reqwest::Client,
    pub budget: BudgetSettings,
    pub limits: LimitSettings,
    pub legacy: LegacySettings,
    pub flags: Arc<lab_flags::Flags>,
    pub limiter: Arc<crate::ratelimit::RateLimiter>,
    pub upstream_metrics: UpstreamMetrics,
}

/// How the gateway's hop to the orchestrators is counted: every attempt once, when it ends, and
/// a retry together with its attempt (so the two can never disagree); failovers apart (nothing
/// was sent).
#[derive(Clone)]
pub struct UpstreamMetrics {
    /// `gateway_upstream_attempts_total{outcome}`: requests sent to an orchestrator, by how they
    /// ended — `ok`, `error_5xx`, `error_4xx`, `attempt_timeout`, `transport_error`, and
    /// `cut_by_budget` (in flight when the 3 s budget ended the whole request).
    pub attempts: IntCounterVec,
    /// `gateway_upstream_retries_total`: attempts after the first, counted with their attempt.
    pub retries: prometheus::IntCounter,
    /// `gateway_upstream_failovers_total`: a refused connection, or one closed before any byte of
    /// an answer, moved the same attempt to the next ready replica (nothing was answered: not an
    /// attempt, not a retry).
    pub failovers: prometheus::IntCounter,
}

impl UpstreamMetrics {
    pub fn new(metrics: &lab_core::metrics::Metrics) -> Self {
        let attempts = metrics.counter_vec(
            "gateway_upstream_attempts_total",
            "Requests the gateway sent to an orchestrator, by how they ended (counted once, when \
             they end; cut_by_budget: in flight when the request's budget ran out)",
            &["outcome"],
        );
        for o in ATTEMPT_OUTCOMES {
            attempts.with_label_values(&[o]);
        }
        Self {
            attempts,
            retries: metrics.register(
                prometheus::IntCounter::new(
                    "gateway_upstream_retries_total",
                    "Attempts after the first at an orchestrator (legacy mode), counted with their \
                     attempt in gateway_upstream_attempts_total",
                )
                .expect("valid metric"),
            ),
            failovers: metrics.register(
                prometheus::IntCounter::new(
                    "gateway_upstream_failovers_total",
                    "Refused connections to an orchestrator replica, or connections it closed \
                     before any byte of an answer; the same attempt moved to the next ready one \
                     (nothing was answered)",
                )
                .expect("valid metric"),
            ),
        }
    }
}

/// Values of `gateway_upstream_attempts_total{outcome}`, pre-registered at 0.
pub const ATTEMPT_OUTCOMES: &[&str] = &[
    "ok",
    "error_5xx",
    "error_4xx",
    "attempt_timeout",
    "transport_error",
    "cut_by_budget",
];

/// Extract the entities a document mentions.
///
/// Checked in this order, each failing fast: the API key on the headers alone (401; 503 when it
/// cannot be verified within the budget), the tenant's rate (429), then the body is read (413
/// past its limit, 408 still arriving when the budget ends), its content type (415) and shape
/// (400); then the request is forwarded. One 3 s budget from the headers on covers all of it
/// (504 when it runs out).
#[utoipa::path(
    post,
    path = "/v1/extract",
    tag = "extraction",
    security(("api_key" = [])),
    params((
        "X-Request-Id" = Option<String>, Header, nullable = false,
        description = "Ignored: the gateway makes every request's id itself and answers it in \
                       X-Request-Id (it picks the request's path through a canary, so a caller \
                       cannot choose it).",
    )),
    request_body(
        content = crate::openapi::schema::ExtractRequest,
        content_type = "application/json",
        description = "Also accepted as `application/<anything>+json`. At most 1 MiB.",
    ),
    responses(
        (status = 200, description = "The entities found.",
         body = crate::openapi::schema::ExtractResponse),
        (status = 400, description = "`invalid_request`: malformed JSON, a missing, unknown or \
         mistyped field, a field outside its limits, or an unreadable body.",
         body = crate::openapi::schema::ErrorBody),
        (status = 401, description = "`unauthorized`: missing, malformed, unknown or revoked \
         API key.", body = crate::openapi::schema::ErrorBody),
        (status = 408, description = "`request_timeout`: the body was still arriving when the \
         request's 3 s budget ended.", body = crate::openapi::schema::ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 1 MiB.",
         body = crate::openapi::schema::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not declared JSON.",
         body = crate::openapi::schema::ErrorBody),
        (status = 422, description = "`too_many_spans`: the document names more distinct \
         entities than one request may resolve (1,024 by default): split it.",
         body = crate::openapi::schema::ErrorBody),
        (status = 429, description = "`rate_limited`: the tenant is over its plan's requests \
         per second.", body = crate::openapi::schema::ErrorBody,
         headers(("Retry-After" = u64))),
        (status = 500, description = "A bug (the gateway's, or a bug below passed through); \
         not worth retrying.", body = crate::openapi::schema::ErrorBody),
        (status = 502, description = "An upstream's answer was broken (a dropped connection, an \
         unreadable answer).", body = crate::openapi::schema::ErrorBody),
        (status = 503, description = "Temporarily unable: congestion or a shed; retry later with \
         backoff.", body = crate::openapi::schema::ErrorBody),
        (status = 504, description = "The request's time ran out (its 3 s budget, or a budget \
         below it); the work below was cancelled.", body = crate::openapi::schema::ErrorBody),
    ),
)]
pub async fn extract(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    // The budget starts when the headers are in: the body, authentication and the limiter all
    // spend it (a slow upload or a slow key store cannot hold a request past it).
    let started = Instant::now();
    // Minted here, never taken from the client: the request id picks the hotfix canary's cohort
    // on every hop, and a client must not choose its own path (issue 28).
    let request_id = new_request_id();
    let result = handle(&st, &headers, body, started, &request_id).await;
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert(headers::REQUEST_ID, v);
    }
    resp
}

async fn handle(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
    started: Instant,
    request_id: &str,
) -> Result<Response, ApiError> {
    let budget = Duration::from_millis(st.budget.request_ms);
    let deadline = started + budget;
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // Authenticated on the headers alone, before a byte of the body is read: an unknown caller
    // costs no buffer. Inside the budget: a key store that cannot answer in time is a 503, not
    // a request held open.
    let tenant = match tokio::time::timeout_at(deadline.into(), st.keys.authenticate(auth)).await {
        Ok(t) => t?,
        Err(_) => {
            return Err(ApiError::from_failure(
                &errors::GW_AUTH_UNAVAILABLE,
                format!(
                    "the API key could not be verified within the request's {} ms budget",
                    budget.as_millis()
                ),
            ))
        }
    };
    if let Some(retry_after) = st
        .limiter
        .check(tenant.id, tenant.rate_limit_rps)
        .await
        .retry_after()
    {
        // Whole seconds, rounded up: `Retry-After: 0` would invite an immediate retry.
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        let mut resp = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!(
                "tenant over its plan's {} requests/s; retry after {} s",
                tenant.rate_limit_rps,
                secs.max(1)
            ),
        )
        .into_response();
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        return Ok(resp);
    }
    let body = read_body(body, st.limits.max_body_bytes, deadline, budget).await?;
    let req = parse(headers, body)?;
    validate(&req, &st.limits)?;

    let user_deadline_ms = (SystemTime::now() + budget.saturating_sub(started.elapsed()))
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let internal = InternalExtractRequest {
        tenant_id: tenant.id,
        doc_id: req.doc_id,
        text: req.text,
        locale: req.locale,
        doc_type: req.doc_type,
    };
    // Bytes: every attempt (3 in legacy mode) shares this buffer instead of copying it.
    let body = bytes::Bytes::from(
        serde_json::to_vec(&internal).map_err(|e| ApiError::internal(e.to_string()))?,
    );

    let forward = forward(st, &body, deadline, request_id, user_deadline_ms);
    match tokio::time::timeout_at(deadline.into(), forward).await {
        Ok(result) => result,
        // The attempt in flight is dropped here (its connection closed) and counts itself as
        // `cut_by_budget`.
        Err(_) => Err(ApiError::from_failure(
            &errors::GW_DEADLINE_EXCEEDED,
            format!(
                "the request did not complete within its {} ms budget",
                budget.as_millis()
            ),
        )),
    }
}

/// The body, at most `limit` bytes (413 past it), and only while the request's budget lasts: an
/// upload still arriving at the deadline is answered 408 and its connection let go.
async fn read_body(
    body: Body,
    limit: usize,
    deadline: Instant,
    budget: Duration,
) -> Result<axum::body::Bytes, ApiError> {
    match tokio::time::timeout_at(deadline.into(), axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                body_rejection_too_large()
            } else {
                ApiError::bad_request(format!("cannot read the request body: {e}"))
            })
        }
        Err(_) => Err(ApiError::from_failure(
            &errors::GW_REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within the request's {} ms budget",
                budget.as_millis()
            ),
        )),
    }
}

fn body_rejection_too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "the request body exceeds the gateway's limit (limits.max_body_bytes)",
    )
}

/// Parse the body as JSON: the content type must say JSON (415 otherwise), then serde decides
/// (400 with the field and position of the first problem).
fn parse(headers: &HeaderMap, body: axum::body::Bytes) -> Result<ExtractRequest, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| {
            let m = m.trim().to_ascii_lowercase();
            m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
        });
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with Content-Type: application/json",
        ));
    }
    serde_json::from_slice::<ExtractRequest>(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

fn validate(req: &ExtractRequest, limits: &LimitSettings) -> Result<(), ApiError> {
    let id_len = req.doc_id.chars().count();
    if id_len == 0 || id_len > limits.max_doc_id_chars {
        return Err(ApiError::bad_request(format!(
            "doc_id: must be 1..={} characters",
            limits.max_doc_id_chars
        )));
    }
    if req.doc_id.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "doc_id: control characters are not allowed",
        ));
    }
    let text_len = req.text.chars().count();
    if text_len == 0 || text_len > limits.max_text_chars {
        return Err(ApiError::bad_request(format!(
            "text: must be 1..={} characters",
            limits.max_text_chars
        )));
    }
    if let Some(l) = &req.locale {
        // BCP 47-ish: "de", "fr-CA", "es-419"; 35 is the longest tag BCP 47 guarantees to support.
        let ok = !l.is_empty()
            && l.len() <= 35
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok {
            return Err(ApiError::bad_request(
                "locale: must be a language tag such as \"de\" or \"fr-CA\"",
            ));
        }
    }
    if let Some(t) = &req.doc_type {
        let len = t.chars().count();
        if len == 0 || len > 64 {
            return Err(ApiError::bad_request("doc_type: must be 1..=64 characters"));
        }
    }
    Ok(())
}

/// How this request is forwarded, decided once from the flags in force when it arrived.
#[derive(Debug, Clone, Copy)]
struct Policy {
    attempts: u32,
    /// Per-attempt timeout; `None`: the rest of the budget.
    attempt_timeout: Option<Duration>,
    /// Send `X-Request-Budget-Ms` (the fix's deadline propagation).
    propagate_budget: bool,
}

fn policy(st: &AppState, request_id: &str) -> Policy {
    let flags = st.flags.snapshot();
    // `client.mode`, or the hotfix canary's share of requests (`hotfix.canary_percent`), decided
    // on the request id exactly as the orchestrator below decides it.
    if !flags.fixed_for(request_id) {
        // LAB-BUG(retry-amplification): "edge-gateway: 3 attempts against orchestrator". Each
        // attempt gets a 1 s slice of the 3 s budget; an attempt that times out is dropped here
        // (its connection closed), but the orchestrator's legacy client below it has detached its
        // own 3-attempt loop, which carries on. 3 gateway attempts x 3 orphaned orchestrator
        // attempts = 9 calls to entity-service per user request. The postmortem's gateway sent
        // no budget downstream. `retries.gateway.enabled = off` is the 10:56 kill switch.
        Policy {
            attempts: if flags.enabled("retries.gateway.enabled") {
                st.legacy.attempts
            } else {
                1
            },
            attempt_timeout: Some(Duration::from_millis(st.legacy.attempt_timeout_ms)),
            propagate_budget: false,
        }
    } else {
        // LAB-FIX(retry-amplification): retries live at exactly one layer, and it is not this
        // one. One attempt with the whole remaining budget, announced downstream.
        Policy {
            attempts: 1,
            attempt_timeout: None,
            propagate_budget: true,
        }
    }
}

/// What one attempt came to.
enum Attempt {
    /// An answer to hand to the client as is (2xx, 4xx; or a 5xx when no attempt is left).
    Answer(Response),
    /// Worth another attempt under the legacy policy (timeout, transport error, any 5xx).
    Failed(Response),
}

/// Send to a ready orchestrator, up to the policy's attempts. A refused connection ejects the
/// replica and moves the same attempt to the next ready one (nothing was sent: failover, not a
/// retry); so does a connection closed before any byte of an answer (nothing was answered).
async fn forward(
    st: &AppState,
    body: &bytes::Bytes,
    deadline: Instant,
    request_id: &str,
    user_deadline_ms: u128,
) -> Result<Response, ApiError> {
    let policy = policy(st, request_id);
    let mut last = None;
    for attempt in 0..policy.attempts {
        let retry = attempt > 0;
        match attempt_once(
            st,
            &policy,
            body,
            deadline,
            request_id,
            user_deadline_ms,
            retry,
        )
        .await?
        {
            Attempt::Answer(resp) => return Ok(resp),
            Attempt::Failed(resp) => last = Some(resp),
        }
    }
    Ok(last.expect("at least one attempt"))
}

/// One attempt's outcome, recorded exactly once: when it ends, or — dropped mid-flight by the
/// request's budget — as `cut_by_budget`.
struct AttemptGuard<'a> {
    metrics: &'a UpstreamMetrics,
    outcome: Option<&'static str>,
    /// An attempt after the first: counted as a retry with it.
    retry: bool,
    /// False once it turned out nothing was sent (a refused connection).
    armed: bool,
}

impl AttemptGuard<'_> {
    /// Not an attempt after all: the connection was refused, nothing was sent.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for AttemptGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.metrics
                .attempts
                .with_label_values(&[self.outcome.unwrap_or("cut_by_budget")])
                .inc();
            if self.retry {
                self.metrics.retries.inc();
            }
        }
    }
}

/// The user-facing error for an orchestrator's non-2xx answer: the error-table row it names,
/// answered with that row's status and code and a message from the table — never the inner
/// hop's own text, which is logged instead.
fn upstream_error(status: u16, headers: &reqwest::header::HeaderMap, body: &[u8]) -> ApiError {
    let row = headers
        .get(lab_contract::ORIGIN_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(errors::parse_origin);
    match row {
        Some(f) => {
            tracing::debug!(
                status,
                origin = %f.origin(),
                body = %String::from_utf8_lossy(&body[..body.len().min(512)]),
                "orchestrator answered an error"
            );
            ApiError::from_failure(f, f.means)
        }
        None => {
            tracing::warn!(
                status,
                body = %String::from_utf8_lossy(&body[..body.len().min(512)]),
                "orchestrator answered an error naming no known origin"
            );
            ApiError::from_failure(
                &errors::GW_UPSTREAM_UNLABELLED,
                errors::GW_UPSTREAM_UNLABELLED.means,
            )
        }
    }
}

async fn attempt_once(
    st: &AppState,
    policy: &Policy,
    body: &bytes::Bytes,
    deadline: Instant,
    request_id: &str,
    user_deadline_ms: u128,
    retry: bool,
) -> Result<Attempt, ApiError> {
    let m = &st.upstream_metrics;
    let mut tried: Vec<String> = Vec::new();
    // A refused connection to an endpoint kept in rotation (the last one: a Service address
    // whose next connection may reach another pod) is tried once more, no more.
    let mut refused_kept = false;
    loop {
        let Some(endpoint) = st.upstreams.pick(&tried) else {
            return Err(ApiError::from_failure(
                &errors::GW_NO_READY_UPSTREAM,
                "no orchestrator replica is ready to serve",
            ));
        };
        tried.push(endpoint.url.clone());
        let url = &endpoint.url;
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = policy.attempt_timeout.map_or(left, |t| t.min(left));
        let mut rb = st
            .http
            .post(format!("{url}/internal/extract"))
            .timeout(timeout)
            // W3C `traceparent`: the orchestrator's span joins the user's trace.
            .headers(lab_core::telemetry::propagation::current_headers())
            .header(header::CONTENT_TYPE, "application/json")
            .header(headers::REQUEST_ID, request_id)
            .header(headers::OBSERVE_USER_DEADLINE, user_deadline_ms.to_string())
            .body(body.clone());
        if policy.propagate_budget {
            rb = rb.header(headers::REQUEST_BUDGET_MS, left.as_millis().to_string());
        }
        // From here the attempt is on its way: it is counted once, however it ends.
        let mut guard = AttemptGuard {
            metrics: m,
            outcome: None,
            retry,
            armed: true,
        };
        // `unanswered`: the send failed on an open connection before any byte of an answer (a
        // replica shutting down closed it under the request: the keep-alive race).
        let mut unanswered = false;
        let sent = async {
            let resp = rb.send().await.inspect_err(|e| {
                unanswered = !e.is_timeout() && lab_core::http::unanswered(e);
            })?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, bytes))
        }
        .await;
        if let Err(e) = &sent {
            if e.is_connect() {
                // Nothing reached the replica: failover to the next one, same attempt.
                guard.disarm();
                m.failovers.inc();
                if !st.upstreams.eject(&endpoint) && !refused_kept {
                    refused_kept = true;
                    tried.retain(|u| u != &endpoint.url);
                }
                continue;
            }
            if unanswered {
                // No answer was lost (and an extraction is a read): the same attempt to the next
                // ready replica. Not ejected: a connection closed in a drain says nothing about
                // the next one, and the readiness probe already reports the drain.
                guard.disarm();
                m.failovers.inc();
                tracing::debug!(error = %e, endpoint = %endpoint.url, "connection closed before any answer; failing over");
                continue;
            }
        }
        return Ok(match sent {
            Ok((status, headers, bytes)) => {
                let server_error = status.is_server_error();
                guard.outcome = Some(if status.is_success() {
                    "ok"
                } else if server_error {
                    "error_5xx"
                } else {
                    "error_4xx"
                });
                let resp = if status.is_success() {
                    Response::builder()
                        .status(StatusCode::OK)
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(Body::from(bytes))
                        .expect("valid response")
                } else {
                    upstream_error(status.as_u16(), &headers, &bytes).into_response()
                };
                // LAB-BUG(retries-5xx) in legacy mode: any 5xx is worth another attempt.
                if server_error {
                    Attempt::Failed(resp)
                } else {
                    Attempt::Answer(resp)
                }
            }
            Err(e) if e.is_timeout() => {
                guard.outcome = Some("attempt_timeout");
                Attempt::Failed(
                    ApiError::from_failure(
                        &errors::GW_UPSTREAM_TIMEOUT,
                        format!(
                            "the orchestrator did not answer within {} ms",
                            timeout.as_millis()
                        ),
                    )
                    .into_response(),
                )
            }
            Err(e) => {
                guard.outcome = Some("transport_error");
                tracing::warn!(error = %e, "orchestrator connection failed");
                Attempt::Failed(
                    ApiError::from_failure(
                        &errors::GW_UPSTREAM_FAILED,
                        errors::GW_UPSTREAM_FAILED.means,
                    )
                    .into_response(),
                )
            }
        });
    }
}

/// A process-unique, time-ordered request id, minted for every request (never the client's).
fn new_request_id() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    format!(
        "{nanos:016x}{:08x}{:06x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed) & 0xff_ffff
    )
}
