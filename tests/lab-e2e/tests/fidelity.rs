//! Fidelity, both directions (postmortem, "Testing Strategy": "downstream rps must never exceed
//! 1.2x ingress rps"). With the orchestrator's cache effectively off, so every extraction needs
//! entity-service, a dead dependency (`fault.entity.error_fraction = 1`, 503):
//! - legacy: entity-service receives >= 8x per user request what it receives when healthy
//!   (3 gateway attempts x 3 orchestrator attempts = 9x expected) — the lab must not quietly heal;
//! - resilient: <= 1.1x while the dependency STAYS dead, with no abandoned work — the fix must
//!   not regress.
//!
//! The resilient claim is about the steady state, so it is measured after a lead-in: the first
//! requests after the death are the controls' designed transient. The breaker opens only once
//! half of the calls in its 10 s window have failed (the healthy phase's successes are still in
//! it), and until then each failing request may retry, with tokens from the full retry budget
//! ("the bucket drains in ~100 retries"). Measured over 48 requests that transient read 1.04x to
//! 1.17x (issue 23), depending on how many healthy successes were still in the window: a claim
//! about the controls' start-up, not about a dead dependency. It is held to the postmortem's own
//! game-day criterion instead ("amplification stays under 1.5x") and printed with the counters
//! that explain it.
//!
//! Counts only, read from entity-service's and the orchestrators' own /metrics; never times.

use futures::future::join_all;
use lab_e2e::{Lab, LabOptions};
use serde_json::json;
use testkit::{fixtures, TestDb};

/// User requests per phase. The fixed client lets a few retries through before its breaker has
/// seen the 20 failures it needs to shed; 48 requests keep that fixed handful well inside the
/// 1.1x bound (24 measured 1.04x, too close to it to be a stable test).
const REQUESTS: usize = 48;
/// Sent in waves of this many at once: inside the fixed client's concurrency limit (16 per
/// orchestrator), so the healthy baseline is not shed by the fix's own limiter, and the same in
/// both modes.
const WAVE: usize = 12;

async fn lab() -> (Lab, String) {
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let opts = LabOptions {
        cache_capacity: Some(1),
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    // The deep probe's own calls are a separate effect (tests/modes.rs); keep the count pure.
    lab.set_flag("readiness.depth", "shallow").await;
    (lab, key.api_key)
}

/// Send `REQUESTS` distinct one-span documents at once; return entity-service's inbound count
/// for them, once every orphaned legacy loop has finished.
async fn phase(lab: &Lab, key: &str, tag: &str) -> f64 {
    let entity = &lab.entity_services[0].admin;
    let before = Lab::metric(entity, "entity_service_requests_total", "").await;
    for wave in (0..REQUESTS).collect::<Vec<_>>().chunks(WAVE) {
        let calls = wave.iter().map(|i| {
            let text = format!("The payee Firm{tag}{i} Labs confirmed.");
            lab.extract(key, json!({"doc_id": format!("{tag}-{i}"), "text": text}))
        });
        join_all(calls).await;
    }
    // Orphaned legacy loops run up to ~3.4 s after their user request: wait for the count to
    // stop moving (bounded).
    let mut last = -1.0;
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let now = Lab::metric(entity, "entity_service_requests_total", "").await;
        if now == last {
            break;
        }
        last = now;
    }
    last - before
}

/// Per user request: entity-service's inbound when healthy, in the first `REQUESTS` after the
/// dependency died (the transient), and in the next `REQUESTS` while it stays dead.
struct Amplification {
    healthy: f64,
    transient: f64,
    dead: f64,
    lab: Lab,
}

async fn amplification(mode: &str) -> Amplification {
    let (lab, key) = lab().await;
    lab.set_flag("client.mode", mode).await;
    let per_request = |n: f64| n / REQUESTS as f64;
    let healthy = per_request(phase(&lab, &key, "h").await);
    lab.set_flag("fault.entity.error_fraction", "1").await;
    let transient = per_request(phase(&lab, &key, "t").await);
    print_client_counters(&lab, "after the transient").await;
    let dead = per_request(phase(&lab, &key, "d").await);
    print_client_counters(&lab, "after the dead phase").await;
    Amplification {
        healthy,
        transient,
        dead,
        lab,
    }
}

/// The orchestrators' entity-client counters, summed: what explains an amplification figure.
async fn print_client_counters(lab: &Lab, when: &str) {
    let mut line = format!("  {when}:");
    for (name, filter) in [
        ("entity_requests_total", ""),
        ("entity_retries_total", ""),
        ("entity_failovers_total", ""),
        ("entity_shed_total", "reason=\"breaker_open\""),
        ("entity_shed_total", "reason=\"retry_budget\""),
        ("entity_shed_total", "reason=\"concurrency_limit\""),
    ] {
        let mut sum = 0.0;
        for o in &lab.orchestrators {
            sum += Lab::metric(&o.admin, name, filter).await;
        }
        line.push_str(&format!(" {name}{{{filter}}}={sum}"));
    }
    println!("{line}");
}

#[tokio::test]
async fn legacy_dependency_dead_amplifies_at_least_eightfold() {
    let Amplification {
        healthy,
        transient,
        dead,
        ..
    } = amplification("legacy").await;
    println!("legacy: first {REQUESTS} requests after the death {transient:.2}/request");
    assert!(
        healthy >= 1.0,
        "every extraction needs entity-service: {healthy}"
    );
    let ratio = dead / healthy;
    println!(
        "legacy: healthy {healthy:.2}/request, dead {dead:.2}/request, amplification {ratio:.2}x"
    );
    assert!(
        ratio >= 8.0,
        "the storm must still happen in legacy mode: {ratio:.2}x"
    );
}

#[tokio::test]
async fn resilient_dependency_dead_stays_below_1_1x_without_abandoned_work() {
    let Amplification {
        healthy,
        transient,
        dead,
        lab,
    } = amplification("resilient").await;
    assert!(
        healthy >= 1.0,
        "every extraction needs entity-service: {healthy}"
    );
    let (start, ratio) = (transient / healthy, dead / healthy);
    println!(
        "resilient: healthy {healthy:.2}/request; first {REQUESTS} after the death {transient:.2}/request \
         ({start:.2}x); then, still dead, {dead:.2}/request, amplification {ratio:.2}x"
    );
    assert!(
        start <= 1.5,
        "the controls' transient must stay within the postmortem's game-day criterion (1.5x): \
         {start:.2}x"
    );
    assert!(ratio <= 1.1, "the fix must hold: {ratio:.2}x");
    let abandoned = Lab::metric(
        &lab.entity_services[0].admin,
        "entity_service_abandoned_requests_total",
        "",
    )
    .await;
    assert_eq!(
        abandoned, 0.0,
        "no entity-service work after the end user's deadline"
    );
}
