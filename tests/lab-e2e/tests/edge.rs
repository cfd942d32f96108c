//! The public door decides (issue 28): what a client sends cannot hide its requests, choose its
//! canary cohort, hold a buffer before it is known, or hold a request past its budget.

use std::time::Duration;

use entity_client::test_support::{Reply, Stub};
use lab_e2e::{Lab, LabOptions};
use serde_json::json;
use testkit::{fixtures, TestDb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One span per document; the stub resolves none of them.
const ONE: &str = "The payee Vega Labs confirmed.";

/// How long a test waits for an answer the gateway must give by itself: far past every budget
/// below, so only a gateway that never answers runs into it.
const NO_ANSWER: Duration = Duration::from_secs(15);

async fn lab() -> (Lab, String, Stub) {
    lab_trusting(true).await
}

async fn lab_trusting(traceparent: bool) -> (Lab, String, Stub) {
    let stub = Stub::start(Reply::ok().with_body(r#"{"results":[null]}"#)).await;
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let lab = Lab::start(
        db,
        LabOptions {
            entity_urls_override: Some(stub.url.clone()),
            gateway_trusts_traceparent: traceparent,
            ..LabOptions::default()
        },
    )
    .await;
    lab.set_flag("readiness.depth", "shallow").await;
    (lab, key.api_key, stub)
}

/// Send `head` (request line and headers, no body yet) and then `body`, and read the status
/// line the gateway answers; `None` when it answered nothing within [`NO_ANSWER`].
async fn raw(gateway_url: &str, head: &str, body: &[u8]) -> Option<String> {
    let addr = gateway_url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(NO_ANSWER, s.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.lines().next().map(str::to_owned)
}

/// The keys the gateway read at start, once it has (bounded wait: 5 s).
async fn preloaded(lab: &Lab) -> f64 {
    for _ in 0..100 {
        let n = Lab::metric(&lab.gateway.admin, "gateway_auth_keys_preloaded", "").await;
        if n >= 1.0 {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    0.0
}

/// One request with `key` while `api_keys` is locked ACCESS EXCLUSIVE (released once it is
/// answered, or after [`NO_ANSWER`]).
async fn while_api_keys_is_locked(lab: &Lab, key: &str) -> reqwest::Result<reqwest::Response> {
    let mut locker = lock_api_keys(&lab.db.url).await;
    let resp = testkit::http()
        .post(format!("{}/v1/extract", lab.gateway.url))
        .bearer_auth(key)
        .timeout(NO_ANSWER)
        .json(&json!({"doc_id": "d", "text": ONE}))
        .send()
        .await;
    sqlx::Executor::execute(&mut locker, "ROLLBACK")
        .await
        .unwrap();
    resp
}

/// A connection holding `api_keys` locked ACCESS EXCLUSIVE in an open transaction: every
/// lookup of a key waits until it rolls back.
async fn lock_api_keys(db_url: &str) -> sqlx::PgConnection {
    use sqlx::{Connection, Executor};
    let mut locker = sqlx::PgConnection::connect(db_url).await.unwrap();
    locker.execute("BEGIN").await.unwrap();
    locker
        .execute("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    locker
}

fn head(key: &str, content_length: usize) -> String {
    format!(
        "POST /v1/extract HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n"
    )
}

#[tokio::test]
async fn an_internal_traffic_mark_from_outside_is_stripped_and_the_request_counted() {
    let (lab, key, _stub) = lab().await;
    let counted = || Lab::metric(&lab.gateway.admin, "gateway_requests_total", "");
    let before = counted().await;
    for traffic in ["probe", "warmup", "probe", "warmup", "probe"] {
        let resp = testkit::http()
            .post(format!("{}/v1/extract", lab.gateway.url))
            .bearer_auth(&key)
            .header("x-lab-traffic", traffic)
            .json(&json!({"doc_id": "d", "text": ONE}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    assert_eq!(counted().await - before, 5.0, "every request counted");
    let hidden = Lab::metric(&lab.gateway.admin, "gateway_internal_requests_total", "").await;
    assert_eq!(hidden, 0.0, "nothing from outside is internal traffic");
}

#[tokio::test]
async fn a_client_cannot_choose_its_request_id_and_with_it_its_canary_cohort() {
    let (lab, key, _stub) = lab().await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let resp = testkit::http()
            .post(format!("{}/v1/extract", lab.gateway.url))
            .bearer_auth(&key)
            .header("x-request-id", "always-the-canary")
            .json(&json!({"doc_id": "d", "text": ONE}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
        assert_ne!(id, "always-the-canary", "the gateway mints the id");
        seen.push(id);
    }
    seen.dedup();
    assert_eq!(seen.len(), 3, "one id per request: {seen:?}");
}

#[tokio::test]
async fn an_unknown_caller_is_refused_before_a_byte_of_its_body_is_read() {
    let (lab, _key, _stub) = lab().await;
    // A declared 1 MB body that never comes: a gateway reading bodies before keys waits for it.
    let status = raw(&lab.gateway.url, &head("not-a-key", 1_000_000), b"").await;
    assert_eq!(status.as_deref(), Some("HTTP/1.1 401 Unauthorized"));
}

#[tokio::test]
async fn a_slow_upload_is_answered_408_when_the_budget_ends_not_held_open() {
    let (lab, key, _stub) = lab().await;
    // Ten bytes of a thousand, then nothing: the 3 s budget ends while the body is due.
    let status = raw(&lab.gateway.url, &head(&key, 1_000), b"{\"doc_id\":").await;
    assert_eq!(status.as_deref(), Some("HTTP/1.1 408 Request Timeout"));
    let counted = Lab::metric(
        &lab.gateway.admin,
        "lab_errors_total",
        "origin=\"request_timeout\"",
    )
    .await;
    assert_eq!(counted, 1.0, "by its error-table row");
}

#[tokio::test]
async fn a_never_seen_key_is_answered_within_the_budget_while_api_keys_is_locked() {
    let (lab, _key, _stub) = lab().await;
    // A key made after the gateway read its keys at start (else the preload may read it: the
    // first lookup this test is about would never happen).
    preloaded(&lab).await;
    let fresh = fixtures::tenant_with_key(&lab.db.url, 2).await;
    let resp = while_api_keys_is_locked(&lab, &fresh.api_key).await;
    let resp = resp.expect("an answer, not a request held while the key store is locked");
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "auth_unavailable", "{body}");
    // The lock gone, the same key works.
    let ok = testkit::http()
        .post(format!("{}/v1/extract", lab.gateway.url))
        .bearer_auth(&fresh.api_key)
        .json(&json!({"doc_id": "d", "text": ONE}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}

/// A fresh gateway knows every key that existed when it started: a real tenant's first request
/// needs no lookup, so neither a locked `api_keys` nor a flood of never-seen ids queued for the
/// first-lookup permits can refuse it (issue 28: a gateway restarted during a flood answered
/// real tenants' first requests 503 until the flood stopped).
#[tokio::test]
async fn a_fresh_gateway_knows_its_tenants_keys_before_their_first_request() {
    let (lab, key, _stub) = lab().await;
    assert_eq!(
        preloaded(&lab).await,
        1.0,
        "the one tenant's key, read at start"
    );
    let resp = while_api_keys_is_locked(&lab, &key).await;
    let resp = resp.expect("an answer");
    assert_eq!(
        resp.status(),
        200,
        "its first request, with the key store locked: {:?}",
        resp.text().await
    );
    let lookups_refused = Lab::metric(
        &lab.gateway.admin,
        "gateway_auth_total",
        "result=\"unavailable\"",
    )
    .await;
    assert_eq!(lookups_refused, 0.0);
}

#[tokio::test]
async fn a_clients_traceparent_does_not_choose_the_trace_at_a_public_door() {
    let spans = lab_core::telemetry::recorder::global();
    let (lab, key, _stub) = lab_trusting(false).await;
    let trace_id = format!("{:032x}", rand::random::<u128>() | 1);
    let parent = format!("{:016x}", rand::random::<u64>() | 1);
    let resp = testkit::http()
        .post(format!("{}/v1/extract", lab.gateway.url))
        .bearer_auth(&key)
        .header("traceparent", format!("00-{trace_id}-{parent}-01"))
        .json(&json!({"doc_id": "d", "text": ONE}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The gateway's span of it is a root: wait until one is recorded, then look for the
    // client's trace.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while spans.named("edge-gateway.HandleExtract").is_empty() && std::time::Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let gateway = spans.named("edge-gateway.HandleExtract");
    assert!(!gateway.is_empty(), "the request's span was recorded");
    assert!(
        gateway.iter().all(|s| s.parent_span_id.is_none()),
        "every request's trace starts at the gateway: {gateway:#?}"
    );
    assert!(
        spans.trace(&trace_id).is_empty(),
        "no hop joined the client's trace"
    );
}

#[tokio::test]
async fn a_clients_request_id_is_kept_as_a_span_attribute_never_as_the_id() {
    let spans = lab_core::telemetry::recorder::global();
    let (lab, key, _stub) = lab().await;
    let send = |id: String| {
        testkit::http()
            .post(format!("{}/v1/extract", lab.gateway.url))
            .bearer_auth(&key)
            .header("x-request-id", id)
            .json(&json!({"doc_id": "d", "text": ONE}))
            .send()
    };
    // Too long to be one token of a search: not kept.
    let long = format!("long-{}", "x".repeat(124));
    assert_eq!(send(long.clone()).await.unwrap().status(), 200);
    let mine = format!("client-{:016x}", rand::random::<u64>());
    let resp = send(mine.clone()).await.unwrap();
    assert_eq!(resp.status(), 200);
    let echoed = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_ne!(echoed, mine, "the gateway answers with the id it minted");
    let kept = |id: &str| {
        spans
            .named("edge-gateway.HandleExtract")
            .into_iter()
            .any(|s| s.attribute("client.request_id") == Some(id))
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !kept(&mine) && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(kept(&mine), "the client's id is on the gateway's span");
    // The long one was answered first, so its span is recorded by now.
    assert!(!kept(&long), "an id over 128 bytes is not kept");
}
