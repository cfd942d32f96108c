//! Game-day fault injection, driven by runtime flags (`fault.entity.*`).
//!
//! These are the game day's *injected* triggers — a dependency that is dead (503/500 on every
//! request), silent (a black hole) or slow (added latency on a fraction of requests) — so the
//! clients above can be compared under a controlled fault. Every injection is counted in
//! `entity_service_faults_injected_total{kind}`, so no report can mistake one for the real
//! trigger, which is the stale-statistics plan flip in PostgreSQL (no sleep involved).

use std::time::Duration;

use lab_core::http::ApiError;
use lab_flags::Snapshot;
use prometheus::IntCounterVec;
use rand::Rng;

/// Apply the faults the flags ask for to one request: an error to return, a wait, or never.
pub async fn inject(flags: &Snapshot, counter: &IntCounterVec) -> Result<(), ApiError> {
    if flags.enabled("fault.entity.black_hole") {
        counter.with_label_values(&["black_hole"]).inc();
        // Accept and never answer: the handler is dropped when the caller hangs up.
        std::future::pending::<()>().await;
    }
    let error_fraction = flags.number("fault.entity.error_fraction");
    if error_fraction > 0.0 && rand::rng().random_bool(error_fraction.min(1.0)) {
        let status = flags.number("fault.entity.error_status") as u16;
        counter
            .with_label_values(&[&format!("error_{status}")])
            .inc();
        // Two rows of the error table, as the flag's two variants: a 503 says "congested, try
        // again" (the legacy client and the fixed one both retry it), a 500 says "a bug".
        let row = if status == 500 {
            &lab_contract::errors::ES_INJECTED_FAULT_500
        } else {
            &lab_contract::errors::ES_INJECTED_FAULT_503
        };
        return Err(ApiError::from_failure(
            row,
            "game-day fault injection (fault.entity.error_fraction)",
        ));
    }
    let latency_ms = flags.number("fault.entity.latency_ms");
    let fraction = flags.number("fault.entity.latency_fraction");
    if latency_ms > 0.0 && rand::rng().random_bool(fraction.clamp(0.0, 1.0)) {
        counter.with_label_values(&["latency"]).inc();
        tokio::time::sleep(Duration::from_millis(latency_ms as u64)).await;
    }
    Ok(())
}
