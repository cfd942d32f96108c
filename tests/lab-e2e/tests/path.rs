//! The synchronous path end to end: real extractions, auth, hostile input, and a dead or silent
//! dependency answered within the budget instead of a hang.

use lab_e2e::{Lab, LabOptions};
use serde_json::{json, Value};
use testkit::{fixtures, TestDb};

const DOC: &str = "The buyer Müller Logistik GmbH paid Anna Schmidt. Our auditor Vega Labs agreed \
                   with Müller Logistik AG on the terms.";

async fn seeded_db() -> (TestDb, fixtures::TenantKey, fixtures::TenantKey) {
    let db = TestDb::new().await;
    let a = fixtures::tenant_with_key(&db.url, 1).await;
    let b = fixtures::tenant_with_key(&db.url, 2).await;
    fixtures::entities(
        &db.url,
        &[
            (10, 1, "organization", "Müller Logistik GmbH", 900),
            (11, 1, "organization", "Vega Labs", 800),
            (12, 1, "person", "Anna Schmidt", 500),
            (20, 2, "organization", "Secret Bank", 100),
        ],
    )
    .await;
    (db, a, b)
}

fn slice(text: &str, start: u64, end: u64) -> String {
    text.chars()
        .skip(start as usize)
        .take((end - start) as usize)
        .collect()
}

#[tokio::test]
async fn extract_returns_resolved_entities_with_char_offsets_and_caches_them() {
    let (db, a, _) = seeded_db().await;
    let lab = Lab::start(db, LabOptions::default()).await;

    let resp = lab
        .extract(
            &a.api_key,
            json!({"doc_id": "doc-1", "text": DOC, "locale": "de"}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().contains_key("x-request-id"));
    let body: Value = resp.json().await.unwrap();
    let found: Vec<(i64, String, String)> = body["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let (s, en) = (e["start"].as_u64().unwrap(), e["end"].as_u64().unwrap());
            assert_eq!(
                slice(DOC, s, en),
                e["mention"].as_str().unwrap(),
                "offsets point at the mention"
            );
            (
                e["entity"]["id"].as_i64().unwrap(),
                e["mention"].as_str().unwrap().to_string(),
                e["entity"]["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (10, "Müller Logistik GmbH".into(), "organization".into()),
            (12, "Anna Schmidt".into(), "person".into()),
            (11, "Vega Labs".into(), "organization".into()),
            (10, "Müller Logistik AG".into(), "organization".into()),
        ]
    );
    let variant = &body["entities"][3];
    assert!(
        variant["confidence"].as_f64().unwrap() < 1.0,
        "a variant is a candidate match"
    );
    assert_eq!(body["entities"][0]["confidence"], 1.0);

    // The same document again is answered from the orchestrator's cache: no new calls.
    let orch = &lab.orchestrators[0].admin;
    let calls_before = Lab::metric(orch, "entity_requests_total", "").await;
    let resp = lab
        .extract(
            &a.api_key,
            json!({"doc_id": "doc-1b", "text": DOC, "locale": "de"}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        Lab::metric(orch, "entity_requests_total", "").await,
        calls_before
    );
    assert!(Lab::metric(orch, "orchestrator_cache_requests_total", "result=\"hit\"").await >= 4.0);
    assert_eq!(
        Lab::metric(
            &lab.gateway.admin,
            "gateway_requests_total",
            "status=\"200\""
        )
        .await,
        2.0
    );
}

#[tokio::test]
async fn extract_never_reads_another_tenants_entities() {
    let (db, a, b) = seeded_db().await;
    let lab = Lab::start(db, LabOptions::default()).await;
    let text = "The payee Secret Bank confirmed.";
    let body: Value = lab
        .extract(&a.api_key, json!({"doc_id": "x", "text": text}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["entities"],
        json!([]),
        "tenant 1 must not see tenant 2's entity"
    );
    assert_eq!(body["unresolved"], 1);
    let body: Value = lab
        .extract(&b.api_key, json!({"doc_id": "x", "text": text}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["entities"][0]["entity"]["id"], 20);
}

#[tokio::test]
async fn extract_refuses_unknown_malformed_and_revoked_keys() {
    let (db, a, _) = seeded_db().await;
    let url = db.url.clone();
    let opts = LabOptions {
        auth_cache_ttl_ms: 0,
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let doc = json!({"doc_id": "d", "text": DOC});

    let wrong_secret = format!("rsl_{}_{}", a.key_id, "0".repeat(64));
    for key in [wrong_secret.as_str(), "rsl_ffffffffffff_00", "not-a-key"] {
        let resp = lab.extract(key, doc.clone()).await;
        assert_eq!(resp.status(), 401, "key {key}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized");
    }
    let resp = testkit::http()
        .post(format!("{}/v1/extract", lab.gateway.url))
        .json(&doc)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401, "no Authorization header");

    assert_eq!(lab.extract(&a.api_key, doc.clone()).await.status(), 200);
    fixtures::revoke(&url, &a.key_id).await;
    assert_eq!(
        lab.extract(&a.api_key, doc).await.status(),
        401,
        "revoked key"
    );
}

#[tokio::test]
async fn extract_rejects_hostile_input_with_json_errors() {
    let (db, a, _) = seeded_db().await;
    let opts = LabOptions {
        max_body_bytes: 4096,
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let client = testkit::http();
    let post = |body: String, ct: &'static str| {
        client
            .post(format!("{}/v1/extract", lab.gateway.url))
            .bearer_auth(&a.api_key)
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let cases: Vec<(String, &str, u16, &str)> = vec![
        (
            "{not json".into(),
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"doc_id":"d"}"#.into(),
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"doc_id":"d","text":"x","bogus":1}"#.into(),
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"doc_id":"","text":"x"}"#.into(),
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"doc_id":"d","text":"x","locale":"de;drop"}"#.into(),
            "application/json",
            400,
            "invalid_request",
        ),
        (
            r#"{"doc_id":"d","text":"x"}"#.into(),
            "text/plain",
            415,
            "unsupported_media_type",
        ),
        (
            format!(r#"{{"doc_id":"d","text":"{}"}}"#, "a".repeat(10_000)),
            "application/json",
            413,
            "payload_too_large",
        ),
    ];
    for (body, ct, status, code) in cases {
        let resp = post(body.clone(), ct).await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "body {:.60}", body);
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["error"]["code"], code, "body {:.60}", body);
        assert!(err["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    assert_eq!(
        Lab::metric(
            &lab.orchestrators[0].admin,
            "orchestrator_requests_total",
            ""
        )
        .await,
        0.0,
        "nothing invalid reaches the orchestrator"
    );
}

#[tokio::test]
async fn extract_with_entity_service_down_answers_5xx_not_a_hang() {
    let (db, a, _) = seeded_db().await;
    // A port nobody listens on: connection refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let opts = LabOptions {
        entity_urls_override: Some(dead),
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let resp = lab
        .extract(&a.api_key, json!({"doc_id": "d", "text": DOC}))
        .await;
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["error"]["code"], "entity_unreachable",
        "the error table's row for a refused connection"
    );
}

#[tokio::test]
async fn extract_with_silent_entity_service_answers_504_within_the_budget() {
    let (db, a, _) = seeded_db().await;
    let hole =
        entity_client::test_support::Stub::start(entity_client::test_support::Reply::black_hole())
            .await;
    let opts = LabOptions {
        entity_urls_override: Some(hole.url.clone()),
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let resp = lab
        .extract(&a.api_key, json!({"doc_id": "d", "text": DOC}))
        .await;
    assert_eq!(resp.status(), 504, "answered at the budget, not a hang");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "deadline_exceeded");
    // The resilient client gives up within its 1.8 s entity budget: at most 3 attempts.
    let sent = hole.requests();
    assert!(
        (1..=3).contains(&sent),
        "{sent} requests reached the silent entity-service"
    );
}

#[tokio::test]
async fn gateway_keeps_serving_from_the_surviving_orchestrator() {
    let (db, a, _) = seeded_db().await;
    let opts = LabOptions {
        orchestrators: 2,
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let doc = json!({"doc_id": "d", "text": DOC});
    for _ in 0..4 {
        assert_eq!(lab.extract(&a.api_key, doc.clone()).await.status(), 200);
    }
    let killed = lab.orchestrators[0].url.clone();
    lab.orchestrators[0].kill();
    let mut ok = 0;
    for _ in 0..20 {
        if lab.extract(&a.api_key, doc.clone()).await.status() == 200 {
            ok += 1;
        }
    }
    assert_eq!(
        ok, 20,
        "every request after the kill is served by the other replica"
    );
    let ready = Lab::metric(
        &lab.gateway.admin,
        "gateway_upstream_ready",
        &format!("endpoint=\"{killed}\""),
    )
    .await;
    assert_eq!(ready, 0.0, "the dead replica is out of rotation");
    assert!(
        Lab::metric(
            &lab.orchestrators[1].admin,
            "orchestrator_requests_total",
            "status=\"200\""
        )
        .await
            >= 20.0
    );
}

#[tokio::test]
async fn a_verified_key_keeps_working_while_the_key_store_is_unreachable() {
    use sqlx::{Connection, Executor};
    // entity-service is a stub: only the gateway's key lookups touch this database.
    // One span per document, one (unresolved) result per call.
    const ONE: &str = "The payee Vega Labs confirmed.";
    let stub = entity_client::test_support::Stub::start(
        entity_client::test_support::Reply::ok().with_body(r#"{"results":[null]}"#),
    )
    .await;
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let lab = Lab::start(
        db,
        LabOptions {
            entity_urls_override: Some(stub.url.clone()),
            auth_cache_ttl_ms: 100,
            ..LabOptions::default()
        },
    )
    .await;
    lab.set_flag("readiness.depth", "shallow").await;
    let ok = lab
        .extract(&key.api_key, json!({"doc_id": "a", "text": ONE}))
        .await;
    assert_eq!(ok.status(), 200);
    // The key store becomes unreachable: no new connection, and the gateway's are cut.
    let name = lab_db::database_name(&lab.db.url).unwrap();
    let mut admin = sqlx::PgConnection::connect(&testkit::with_database(&lab.db.url, "postgres"))
        .await
        .unwrap();
    admin
        .execute(format!("ALTER DATABASE \"{name}\" WITH ALLOW_CONNECTIONS false").as_str())
        .await
        .unwrap();
    admin
        .execute(
            format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            )
            .as_str(),
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // The cached answer expired 100 ms in; re-verifying fails, the last answer stands.
    let stale = lab
        .extract(&key.api_key, json!({"doc_id": "b", "text": ONE}))
        .await;
    assert_eq!(
        stale.status(),
        200,
        "fail static, not an outage of the public API"
    );
    assert!(Lab::metric(&lab.gateway.admin, "gateway_auth_total", "result=\"stale\"").await >= 1.0);
    // A key never verified has no answer to fall back on.
    let unknown = lab
        .extract(
            "rsl_0123456789ab_0123456789abcdef",
            json!({"doc_id": "c", "text": ONE}),
        )
        .await;
    assert_eq!(unknown.status(), 503);
    admin
        .execute(format!("ALTER DATABASE \"{name}\" WITH ALLOW_CONNECTIONS true").as_str())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_resilient_orchestrator_warms_its_cache_on_boot() {
    let (db, a, _) = seeded_db().await;
    let lab = Lab::start(
        db,
        LabOptions {
            cache_warmup_entries: 5000,
            ..LabOptions::default()
        },
    )
    .await;
    let orch = &lab.orchestrators[0].admin;
    let warmed = Lab::metric(orch, "orchestrator_cache_warmup_entries", "").await;
    assert!(warmed > 0.0, "resilient mode warms up on boot");
    assert_eq!(
        Lab::metric(orch, "orchestrator_cache_warmup_total", "outcome=\"ok\"").await,
        1.0
    );
    // A span naming a warmed entity is a cache hit at once: the first document costs no lookup.
    let es = &lab.entity_services[0].admin;
    let before = Lab::metric(es, "entity_service_requests_total", "").await;
    let resp = lab
        .extract(
            &a.api_key,
            json!({"doc_id": "w", "text": "Our auditor Vega Labs agreed.", "locale": "de-DE"}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["entities"][0]["entity"]["name"], "Vega Labs", "{body}");
    assert_eq!(
        Lab::metric(es, "entity_service_requests_total", "").await,
        before,
        "answered from the warmed cache, in any locale"
    );
    assert_eq!(
        before, 0.0,
        "the warm-up itself is not user traffic at entity-service"
    );
    assert_eq!(
        Lab::metric(
            es,
            "entity_service_internal_requests_total",
            "traffic=\"warmup\""
        )
        .await,
        1.0
    );
}
