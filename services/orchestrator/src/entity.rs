//! The orchestrator's client for entity-service.
//!
//! This is the foundation's plain client: one attempt per batch, bounded by the earlier of the
//! caller's propagated budget and `entity.timeout_ms`, cancelled with the caller (it is an
//! ordinary future, dropped when the handler is dropped). The postmortem's two clients — the
//! legacy one that reproduces "Code Before" and the fixed one from "Code After" — replace it
//! behind the same `resolve` call with the client issue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lab_api::headers;
use lab_api::wire::{ResolveRequest, ResolveResponse};
use lab_core::metrics::{Metrics, CALLEE_BUCKETS};
use prometheus::{HistogramVec, IntCounterVec};

/// What the caller hands down with every call.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The caller's deadline, from its `X-Request-Budget-Ms`, if it sent one.
    pub deadline: Option<Instant>,
    pub request_id: Option<String>,
    /// The observation-only end-user deadline, forwarded unchanged.
    pub observe_user_deadline: Option<String>,
}

/// Errors by what the caller must do about them.
#[derive(Debug, thiserror::Error)]
pub enum EntityError {
    /// The time ran out (ours or the caller's): the answer would be worthless now.
    #[error("entity-service did not answer within the time left ({0:?})")]
    DeadlineExceeded(Duration),
    /// entity-service could not be reached or the connection failed.
    #[error("entity-service unreachable: {0}")]
    Unavailable(String),
    /// entity-service answered with an error status.
    #[error("entity-service answered {status}: {body}")]
    Upstream { status: u16, body: String },
}

pub struct EntityClient {
    http: reqwest::Client,
    urls: Vec<String>,
    next: AtomicUsize,
    timeout: Duration,
    requests: IntCounterVec,
    duration: HistogramVec,
}

impl EntityClient {
    pub fn new(urls: Vec<String>, timeout: Duration, metrics: &Metrics) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !urls.is_empty(),
            "at least one entity-service URL is required"
        );
        let http = reqwest::Client::builder()
            // Connecting on loopback or a cluster network takes microseconds; a second means the
            // address is wrong or the peer is gone.
            .connect_timeout(Duration::from_secs(1))
            .build()?;
        Ok(Self {
            http,
            urls,
            next: AtomicUsize::new(0),
            timeout,
            requests: metrics.counter_vec(
                "entity_requests_total",
                "Requests (attempts) the orchestrator sent to entity-service, by outcome",
                &["outcome"],
            ),
            duration: metrics.histogram_vec(
                "entity_request_duration_seconds",
                "Duration of each request to entity-service as the orchestrator saw it",
                &["outcome"],
                CALLEE_BUCKETS,
            ),
        })
    }

    pub async fn resolve(
        &self,
        ctx: &CallContext,
        req: &ResolveRequest,
    ) -> Result<ResolveResponse, EntityError> {
        let now = Instant::now();
        let left = ctx
            .deadline
            .map(|d| d.saturating_duration_since(now))
            .unwrap_or(self.timeout)
            .min(self.timeout);
        if left.is_zero() {
            self.requests.with_label_values(&["not_sent"]).inc();
            return Err(EntityError::DeadlineExceeded(left));
        }
        let url = &self.urls[self.next.fetch_add(1, Ordering::Relaxed) % self.urls.len()];
        let mut rb = self
            .http
            .post(format!("{url}/v1/resolve"))
            .timeout(left)
            .header(headers::REQUEST_BUDGET_MS, left.as_millis().to_string())
            .json(req);
        if let Some(id) = &ctx.request_id {
            rb = rb.header(headers::REQUEST_ID, id);
        }
        if let Some(d) = &ctx.observe_user_deadline {
            rb = rb.header(headers::OBSERVE_USER_DEADLINE, d);
        }
        let started = Instant::now();
        let result = async {
            let resp = rb.send().await.map_err(|e| classify(e, left))?;
            let status = resp.status();
            if status.is_success() {
                resp.json::<ResolveResponse>()
                    .await
                    .map_err(|e| classify(e, left))
            } else {
                let body = resp.text().await.unwrap_or_default();
                Err(EntityError::Upstream {
                    status: status.as_u16(),
                    body: body.chars().take(512).collect(),
                })
            }
        }
        .await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(EntityError::DeadlineExceeded(_)) => "timeout",
            Err(EntityError::Unavailable(_)) => "unavailable",
            Err(EntityError::Upstream { status, .. }) if *status >= 500 => "error_5xx",
            Err(EntityError::Upstream { .. }) => "error_4xx",
        };
        self.requests.with_label_values(&[outcome]).inc();
        self.duration
            .with_label_values(&[outcome])
            .observe(started.elapsed().as_secs_f64());
        result
    }
}

fn classify(e: reqwest::Error, left: Duration) -> EntityError {
    if e.is_timeout() {
        EntityError::DeadlineExceeded(left)
    } else {
        EntityError::Unavailable(e.to_string())
    }
}
