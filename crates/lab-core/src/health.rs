//! Shallow health endpoints.
//!
//! `/livez`: is this process wedged? Deliberately the cheapest possible answer (always 200 while
//! the server can answer at all). `/readyz`: can THIS process serve a request — started and not
//! draining. Neither asks about a dependency: if entity-service is down, every replica is equally
//! unable to serve, and failing readiness everywhere removes the whole fleet to fix a problem in
//! a different fleet (postmortem, "The deep health check").

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An extra readiness condition, asked after the shallow one passes. The lab installs one only to
/// reproduce the postmortem's deep health check (legacy orchestrator); `None` means "not now".
pub type ReadinessCheck =
    Arc<dyn Fn() -> Option<Pin<Box<dyn Future<Output = Result<(), String>> + Send>>> + Send + Sync>;

#[derive(Clone, Default)]
pub struct Health {
    inner: Arc<HealthInner>,
}

#[derive(Default)]
struct HealthInner {
    check: OnceLock<ReadinessCheck>,
    /// Set once, after configuration is loaded and the listener is bound (warm-up goes here).
    started: AtomicBool,
    /// Set when shutdown begins, so load balancers stop sending new work while in-flight
    /// requests drain.
    draining: AtomicBool,
}

impl Health {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn mark_started(&self) {
        self.inner.started.store(true, Ordering::SeqCst);
    }
    pub fn begin_drain(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
    }
    /// Install the extra readiness condition (once).
    pub fn set_check(&self, check: ReadinessCheck) {
        let _ = self.inner.check.set(check);
    }

    /// `Ok` when this process can serve, otherwise the reason.
    pub fn ready(&self) -> Result<(), &'static str> {
        if !self.inner.started.load(Ordering::SeqCst) {
            Err("starting")
        } else if self.inner.draining.load(Ordering::SeqCst) {
            Err("draining")
        } else {
            Ok(())
        }
    }
}

pub async fn livez() -> StatusCode {
    StatusCode::OK
}

pub async fn readyz(State(h): State<Health>) -> Response {
    let mut verdict = h.ready().map_err(str::to_owned);
    if verdict.is_ok() {
        if let Some(check) = h.inner.check.get().and_then(|c| c()) {
            verdict = check.await;
        }
    }
    match verdict {
        Ok(()) => (StatusCode::OK, Json(serde_json::json!({"status": "ready"}))).into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": why})),
        )
            .into_response(),
    }
}
