//! Abandoned work is measured where it happens: entity-service handler time spent after the end
//! user's request already ended at the gateway (the observation-only deadline header). A 2 s
//! entity-service (injected latency) under the 3 s budget: the legacy stack's third gateway
//! attempt (sent at ~2 s) makes entity-service work until ~4 s, a second past the end user; the
//! resilient stack cancels its 700 ms attempts long before the deadline and abandons nothing.

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
    lab.set_flag("fault.entity.latency_ms", "2000").await;
    let resp = lab
        .extract(
            &key.api_key,
            json!({"doc_id": "d", "text": "The payee Vega Labs confirmed."}),
        )
        .await;
    assert!(resp.status().is_server_error(), "{}", resp.status());
    // Wait (bounded) for the last entity-service handler to finish: ~4 s after the request.
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
