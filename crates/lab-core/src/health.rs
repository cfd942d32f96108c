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

/// A condition of this process's own that must hold before it takes traffic, with the reason
/// `/readyz` gives while it does not (`flags_unknown`: it does not know which client it runs).
pub type Gate = (&'static str, Arc<dyn Fn() -> bool + Send + Sync>);

#[derive(Default)]
struct HealthInner {
    check: OnceLock<ReadinessCheck>,
    gates: std::sync::RwLock<Vec<Gate>>,
    /// Set once, after configuration is loaded and the listener is bound (warm-up goes here).
    started: AtomicBool,
    /// Set when shutdown begins, so load balancers stop sending new work while in-flight
    /// requests drain.
    draining: AtomicBool,
    /// `lab_readiness_failures_total{reason}`: every `/readyz` answered 503, by why — starting,
    /// draining, or the extra (dependency) check — or abandoned by the prober before the
    /// dependency check answered (`caller_gone`). Probe answers are not user traffic, so they
    /// are named here and never in `lab_errors_total`.
    failures: OnceLock<prometheus::IntCounterVec>,
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
    /// True from SIGTERM on (the server is draining).
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }
    /// Count failed readiness answers in `metrics` (once; [`crate::server::Server::bind`] does).
    pub fn count_failures_in(&self, metrics: &crate::metrics::Metrics) {
        self.inner.failures.get_or_init(|| {
            metrics.counter_vec(
                "lab_readiness_failures_total",
                "Failed /readyz probes, by reason: starting, draining, a gate of this process's \
                 own (flags_unknown: it does not know which client it runs), dependency (the \
                 deep check answered no), caller_gone (the prober hung up before the deep check \
                 answered)",
                &["reason"],
            )
        });
    }

    /// Install the extra readiness condition (once).
    pub fn set_check(&self, check: ReadinessCheck) {
        let _ = self.inner.check.set(check);
    }

    /// Refuse readiness with `reason` while `holds` is false (asked on every probe; cheap).
    pub fn require(&self, reason: &'static str, holds: Arc<dyn Fn() -> bool + Send + Sync>) {
        self.inner
            .gates
            .write()
            .expect("health gates lock")
            .push((reason, holds));
    }

    /// `Ok` when this process can serve, otherwise the reason.
    pub fn ready(&self) -> Result<(), &'static str> {
        if !self.inner.started.load(Ordering::SeqCst) {
            return Err("starting");
        }
        if self.inner.draining.load(Ordering::SeqCst) {
            return Err("draining");
        }
        let gates = self.inner.gates.read().expect("health gates lock");
        match gates.iter().find(|(_, holds)| !holds()) {
            Some((reason, _)) => Err(reason),
            None => Ok(()),
        }
    }
}

pub async fn livez() -> StatusCode {
    StatusCode::OK
}

pub async fn readyz(State(h): State<Health>) -> Response {
    let mut verdict = h.ready().map_err(|why| (why, why.to_owned()));
    if verdict.is_ok() {
        if let Some(check) = h.inner.check.get().and_then(|c| c()) {
            // A prober that hangs up before the deep check answers (its probe timeout) is a
            // failed probe too: counted as `caller_gone` when this future is dropped.
            struct Pending<'a>(Option<&'a prometheus::IntCounterVec>);
            impl Drop for Pending<'_> {
                fn drop(&mut self) {
                    if let Some(c) = self.0 {
                        c.with_label_values(&["caller_gone"]).inc();
                    }
                }
            }
            let mut pending = Pending(h.inner.failures.get());
            verdict = check.await.map_err(|why| ("dependency", why));
            pending.0 = None;
        }
    }
    match verdict {
        Ok(()) => (StatusCode::OK, Json(serde_json::json!({"status": "ready"}))).into_response(),
        Err((reason, why)) => {
            if let Some(c) = h.inner.failures.get() {
                c.with_label_values(&[reason]).inc();
            }
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({"status": why})),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_holds_readiness_until_it_passes_and_names_itself() {
        let h = Health::new();
        let known = Arc::new(AtomicBool::new(false));
        let k = known.clone();
        h.require("flags_unknown", Arc::new(move || k.load(Ordering::SeqCst)));
        assert_eq!(h.ready(), Err("starting"), "starting comes first");
        h.mark_started();
        assert_eq!(h.ready(), Err("flags_unknown"));
        known.store(true, Ordering::SeqCst);
        assert_eq!(h.ready(), Ok(()));
        h.begin_drain();
        assert_eq!(h.ready(), Err("draining"));
    }
}
