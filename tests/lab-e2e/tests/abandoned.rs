//! Abandoned work is measured where it happens: entity-service handler time spent after the end
//! user's request already ended at the gateway (the observation-only deadline header). A 5 s
//! entity-service (injected latency) under the 3 s budget: the legacy gateway's attempts go out at
//! 0, 1 and 2 s (1 s slices) and each makes entity-service work until 5, 6 and 7 s, past the end
//! user; the resilient stack cancels its 700 ms attempts long before the deadline and abandons
//! nothing.
//!
//! Why not 2 s (as before): a legacy orchestrator handler runs to its end after the gateway hangs
//! up (Go's semantics, LAB-BUG(go-handler)) and caches the answer. At 2 s the first attempt's
//! answer lands in the cache just as the third attempt arrives, which may then be answered 200
//! from it (CI saw it once). At 5 s no answer exists before the end user's deadline.

use lab_e2e::{Lab, LabOptions};
use serde_json::json;
use testkit::{fixtures, TestDb};

async fn abandoned_after_one_request(mode: &str) -> (f64, f64) {
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::entities(&db.url, &[(10, 1, "organization", "Vega Labs", 100)]).await;
    let lab = Lab::start(db, LabOptions::default()).await;
    lab.set_flag("readiness.depth", "shallow").await;
    lab.set_flag("client.mode", mode).await;
    lab.set_flag("fault.entity.latency_ms", "5000").await;
    let resp = lab
        .extract(
            &key.api_key,
            json!({"doc_id": "d", "text": "The payee Vega Labs confirmed."}),
        )
        .await;
    assert!(resp.status().is_server_error(), "{}", resp.status());
    // Wait (bounded) for the last entity-service handler to finish: ~7 s after the request.
    let entity = &lab.entity_services[0].admin;
    let mut last = (-1.0, -1.0);
    for _ in 0..30 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let now = (
            Lab::metric(entity, "entity_service_abandoned_requests_total", "").await,
            Lab::metric(entity, "entity_service_busy_seconds_total", "").await,
        );
        if now == last && Lab::metric(entity, "entity_service_requests_in_flight", "").await == 0.0
        {
            break;
        }
        last = now;
    }
    (
        Lab::metric(entity, "entity_service_abandoned_requests_total", "").await,
        Lab::metric(entity, "entity_service_abandoned_seconds_total", "").await,
    )
}

#[tokio::test]
async fn legacy_entity_service_keeps_working_after_the_end_user_is_gone() {
    let (requests, seconds) = abandoned_after_one_request("legacy").await;
    assert!(
        requests >= 1.0,
        "work finished after the end user's deadline: {requests}"
    );
    assert!(
        seconds > 0.5,
        "and it is measured in handler seconds: {seconds}"
    );
}

#[tokio::test]
async fn resilient_abandons_no_entity_service_work() {
    let (requests, seconds) = abandoned_after_one_request("resilient").await;
    assert_eq!((requests, seconds), (0.0, 0.0));
}

/// A lab with one orchestrator and tenant 1's "Vega Labs", and tenant 1's key.
async fn one_orchestrator() -> (Lab, fixtures::TenantKey) {
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::entities(&db.url, &[(10, 1, "organization", "Vega Labs", 100)]).await;
    let lab = Lab::start(
        db,
        LabOptions {
            orchestrators: 1,
            ..LabOptions::default()
        },
    )
    .await;
    (lab, key)
}

/// One document sent straight to the orchestrator by a caller that hangs up after 200 ms, while
/// entity-service answers in 300 ms: inside the fixed client's 700 ms attempt, so a handler that
/// ran on would cache the answer in either mode. Then, for up to 8 s, the orchestrator's cache
/// entries and its orphaned handlers, once both have stopped moving.
async fn cache_after_a_hung_up_request(mode: &str) -> (f64, f64) {
    let (lab, key) = one_orchestrator().await;
    lab.set_flag("readiness.depth", "shallow").await;
    lab.set_flag("client.mode", mode).await;
    lab.set_flag("fault.entity.latency_ms", "300").await;
    let impatient = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(200))
        .build()
        .unwrap();
    let sent = impatient
        .post(format!("{}/internal/extract", lab.orchestrators[0].url))
        .json(&json!({
            "tenant_id": key.tenant_id,
            "doc_id": "d",
            "text": "The payee Vega Labs confirmed.",
        }))
        .send()
        .await;
    assert!(
        sent.as_ref().is_err_and(|e| e.is_timeout()),
        "the caller hangs up first: {sent:?}"
    );
    let orch = &lab.orchestrators[0].admin;
    let read = || async {
        (
            Lab::metric(orch, "orchestrator_cache_entries", "").await,
            Lab::metric(orch, "orchestrator_handlers_orphaned_total", "").await,
        )
    };
    let mut last = read().await;
    for _ in 0..16 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let now = read().await;
        if now == last && now.0 > 0.0 {
            break;
        }
        last = now;
    }
    last
}

#[tokio::test]
async fn a_legacy_handler_runs_on_after_its_caller_hangs_up_and_fills_the_cache() {
    let (entries, orphaned) = cache_after_a_hung_up_request("legacy").await;
    // Go's semantics (LAB-BUG(go-handler)): the handler its caller left finished its work: the
    // answer it waited for is in the cache, and it was counted.
    assert_eq!(orphaned, 1.0, "handlers whose caller left");
    assert!(
        entries >= 1.0,
        "the orphaned handler filled the cache: {entries}"
    );
}

#[tokio::test]
async fn a_fixed_handler_is_cancelled_with_its_caller() {
    // The same hang-up: the fixed handler is dropped with its connection (LAB-FIX(go-handler)),
    // so the answer entity-service gave in 300 ms is never cached (spawned, it would be).
    let (entries, orphaned) = cache_after_a_hung_up_request("resilient").await;
    assert_eq!((entries, orphaned), (0.0, 0.0));
}

#[tokio::test]
async fn a_fixed_orchestrator_refuses_a_budget_it_cannot_read() {
    let (lab, key) = one_orchestrator().await;
    lab.set_flag("client.mode", "resilient").await;
    let extract = |budget: &'static str| {
        testkit::http()
            .post(format!("{}/internal/extract", lab.orchestrators[0].url))
            .header("x-request-budget-ms", budget)
            .json(&json!({
                "tenant_id": key.tenant_id,
                "doc_id": "d",
                "text": "The payee Vega Labs confirmed.",
            }))
            .send()
    };
    // Not a number, and past what a deadline can be built from (it panicked the handler's
    // clock arithmetic when u64::MAX ms was added to now).
    for bad in ["soon", "18446744073709551615"] {
        let resp = extract(bad).await.unwrap();
        assert_eq!(resp.status(), 400, "budget {bad}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_request", "budget {bad}");
    }
    assert_eq!(extract("2500").await.unwrap().status(), 200);
}
