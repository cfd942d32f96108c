//! `client.mode` end to end: the legacy stack multiplies a failing dependency's load by 3 x 3,
//! the resilient one does not, and a flip reaches every replica without a restart.
//! Assertions are on counts at the stub entity-service, never on times.

use entity_client::test_support::{Reply, Stub};
use lab_e2e::{Lab, LabOptions};
use serde_json::json;
use testkit::{fixtures, TestDb};

/// A document with one span, so one user request is one batch: one call per attempt.
const DOC: &str = "The payee Vega Labs confirmed.";

/// Wait (bounded) until the stub has seen `n` requests, then a little longer to catch any extra.
async fn settle(stub: &Stub, n: usize) -> usize {
    for _ in 0..400 {
        if stub.requests() >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    // The legacy loops sleep 200/400/800 ms between attempts: 2 s more catches any straggler.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    stub.requests()
}

#[tokio::test]
async fn legacy_mode_sends_nine_requests_per_user_request_to_a_failing_entity_service() {
    let stub = Stub::start(Reply::status(503)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    lab.set_flag("client.mode", "legacy").await;

    let resp = lab.extract(&key, json!({"doc_id": "d", "text": DOC})).await;
    assert!(resp.status().is_server_error(), "{}", resp.status());
    // 3 gateway attempts, each timing out after 1 s and orphaning an orchestrator loop that
    // still makes all 3 of its attempts.
    assert_eq!(
        settle(&stub, 9).await,
        9,
        "3 x 3 attempts reach entity-service"
    );
    let orch = &lab.orchestrators[0].admin;
    assert_eq!(Lab::metric(orch, "entity_requests_total", "").await, 9.0);
    // Each attempt counted as it started, per 100 ms, on the admin listener only (the backoff's
    // clock, before any slot wait: `labctl` reads it beside entity-service's arrivals).
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    let starts: lab_core::arrivals::Buckets = reqwest::get(format!("{orch}/debug/attempts"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(starts.counts.iter().sum::<u64>(), 9, "{starts:?}");
    let public = reqwest::get(format!("{}/debug/attempts", lab.orchestrators[0].url))
        .await
        .unwrap();
    assert_eq!(public.status(), 404, "not on the public port");
    assert!(
        Lab::metric(orch, "otel_span_orphaned_total", "").await >= 2.0,
        "the loops under the timed-out gateway attempts outlived their callers"
    );
    assert_eq!(
        Lab::metric(&lab.gateway.admin, "gateway_upstream_retries_total", "").await,
        2.0
    );
}

#[tokio::test]
async fn legacy_kill_switches_cut_the_amplification_to_one() {
    let stub = Stub::start(Reply::status(503)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    lab.set_flag("client.mode", "legacy").await;
    lab.set_flag("retries.entity.enabled", "off").await;
    lab.set_flag("retries.gateway.enabled", "off").await;
    let resp = lab.extract(&key, json!({"doc_id": "d", "text": DOC})).await;
    assert!(resp.status().is_server_error());
    assert_eq!(
        settle(&stub, 1).await,
        1,
        "10:52 + 10:56: amplification 9x -> 1x"
    );
}

#[tokio::test]
async fn resilient_mode_sends_at_most_three_requests_and_never_retries_a_500() {
    let stub = Stub::start(Reply::status(503)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    let resp = lab.extract(&key, json!({"doc_id": "d", "text": DOC})).await;
    assert_eq!(resp.status(), 503);
    let n = settle(&stub, 3).await;
    assert!(
        (1..=3).contains(&n),
        "one retry layer, max 3 attempts: got {n}"
    );

    stub.set_default(Reply::status(500));
    let before = stub.requests();
    let resp = lab
        .extract(
            &key,
            json!({"doc_id": "d2", "text": "The payee Nova Labs confirmed."}),
        )
        .await;
    assert!(resp.status().is_server_error());
    assert_eq!(
        settle(&stub, before + 1).await - before,
        1,
        "a 500 is a bug, not congestion"
    );
}

#[tokio::test]
async fn flipping_client_mode_changes_every_replica_without_a_restart() {
    let stub = Stub::start(Reply::status(503)).await;
    let (lab, key) = Lab::against(&stub.url, 2).await;
    let docs = [
        "The payee Vega Labs confirmed.",
        "The payee Nova Labs confirmed.",
    ];

    // Resilient: at most 3 per user request, on both replicas (round-robin spreads the two).
    for (i, text) in docs.iter().enumerate() {
        lab.extract(&key, json!({"doc_id": format!("r{i}"), "text": text}))
            .await;
    }
    let resilient = settle(&stub, 2).await;
    assert!(
        resilient <= 6,
        "resilient: {resilient} calls for 2 user requests"
    );

    lab.set_flag("client.mode", "legacy").await;
    for (i, text) in docs.iter().enumerate() {
        lab.extract(&key, json!({"doc_id": format!("l{i}"), "text": text}))
            .await;
    }
    let legacy = settle(&stub, resilient + 18).await - resilient;
    assert_eq!(
        legacy, 18,
        "legacy: 9 calls per user request on every replica"
    );
    for o in &lab.orchestrators {
        let served = Lab::metric(&o.admin, "orchestrator_requests_total", "").await;
        assert!(
            served >= 2.0,
            "{} took part in both phases ({served} requests)",
            o.url
        );
    }
}

#[tokio::test]
async fn legacy_deep_readiness_evicts_every_replica_when_the_dependency_fails() {
    let stub = Stub::start(Reply::status(503)).await;
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let opts = LabOptions {
        orchestrators: 2,
        entity_urls_override: Some(stub.url.clone()),
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    // Resilient (shallow readiness): both replicas stay in rotation while the dependency fails.
    lab.extract(&key.api_key, json!({"doc_id": "d", "text": DOC}))
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        Lab::metric(&lab.gateway.admin, "gateway_upstream_ready", "").await,
        2.0,
        "shallow probes keep healthy processes in rotation"
    );

    lab.set_flag("client.mode", "legacy").await;
    // The probe now calls entity-service through the production client; 3 failures in a row
    // (a few hundred ms at the tests' 100 ms probe period) take each replica out.
    let mut ready = 2.0;
    for _ in 0..400 {
        ready = Lab::metric(&lab.gateway.admin, "gateway_upstream_ready", "").await;
        if ready == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(
        ready, 0.0,
        "the deep probe evicted every replica: the fleet-wide kill switch"
    );
    let resp = lab
        .extract(&key.api_key, json!({"doc_id": "d2", "text": DOC}))
        .await;
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "no_ready_upstream");
}

#[tokio::test]
async fn the_hotfix_canary_serves_its_share_with_the_fixed_stack_end_to_end() {
    // entity-service dead. Legacy: 9 calls per user request. With the canary at 100% (the full
    // rollout) every request is fixed at BOTH hops — one gateway attempt, at most 3 calls — even
    // though client.mode is still legacy.
    let stub = Stub::start(Reply::status(503)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    lab.set_flag("client.mode", "legacy").await;
    lab.set_flag("hotfix.canary_percent", "100").await;
    let resp = lab
        .extract(&key, json!({"doc_id": "c1", "text": DOC}))
        .await;
    assert_eq!(
        resp.status(),
        503,
        "the fixed client's answer, not a gateway timeout"
    );
    let n = settle(&stub, 1).await;
    assert!((1..=3).contains(&n), "canary request: {n} calls");
    assert_eq!(
        Lab::metric(&lab.gateway.admin, "gateway_upstream_retries_total", "").await,
        0.0,
        "the gateway's policy for the canary request is the fixed one"
    );
    lab.set_flag("hotfix.canary_percent", "0").await;
    let before = stub.requests();
    lab.extract(&key, json!({"doc_id": "c2", "text": DOC}))
        .await;
    assert_eq!(
        settle(&stub, before + 9).await - before,
        9,
        "legacy again: 3 x 3"
    );
}
