//! Counts you can trust: every error is a row of the error table on every hop, every user-facing
//! 5xx is named by exactly one origin, attempts are counted once and never exceed what the hop
//! table allows, and probe traffic is never counted as a user's. Counts and ratios only.

use std::collections::BTreeMap;
use std::time::Duration;

use entity_client::test_support::{Reply, Stub};
use lab_contract::errors::{self, Failure, Hop};
use lab_e2e::{sum_metric, Lab, LabOptions};
use serde_json::json;
use testkit::{fixtures, TestDb};

/// One span, so one user request is one batch: one entity call per attempt.
const DOC: &str = "The payee Vega Labs confirmed.";

async fn metrics_text(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The rows a hop below the gateway can answer with (499 is never an answer: the caller is gone).
fn answerable(hop: Hop) -> Vec<&'static Failure> {
    errors::TABLE
        .iter()
        .copied()
        .filter(|f| f.hop == hop && f.status != 499)
        .collect()
}

#[tokio::test]
async fn error_table_every_entity_service_row_reaches_the_user_unchanged() {
    let stub = Stub::start(Reply::ok()).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    // One attempt per row: this walks the table, not the retry policy.
    lab.set_flag("retries.entity.enabled", "off").await;
    let rows = answerable(Hop::EntityService);
    assert!(rows.len() >= 10, "the walk covers the table");
    for (i, row) in rows.iter().enumerate() {
        stub.set_default(Reply::status(row.status).with_origin(row));
        let resp = lab
            .extract(&key, json!({"doc_id": format!("w{i}"), "text": DOC}))
            .await;
        assert_eq!(resp.status().as_u16(), row.status, "{}", row.origin());
        assert!(
            resp.headers().get(lab_contract::ORIGIN_HEADER).is_none(),
            "the origin names internal hops: never sent to a user"
        );
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], row.code, "{}", row.origin());
        assert_eq!(
            body["error"]["message"],
            row.means,
            "{}: the user gets the table's words, not an inner hop's text",
            row.origin()
        );
    }
    // Each row counted once at the gateway and once at the orchestrator, by its own name.
    let gw = metrics_text(&lab.gateway.admin).await;
    let orch = metrics_text(&lab.orchestrators[0].admin).await;
    for row in &rows {
        let labels = format!(
            "hop=\"entity-service\",origin=\"{}\",status=\"{}\"",
            row.code, row.status
        );
        assert_eq!(
            sum_metric(&gw, "lab_errors_total", &labels),
            1.0,
            "{labels}"
        );
        assert_eq!(
            sum_metric(&orch, "lab_errors_total", &labels),
            1.0,
            "{labels}"
        );
    }
}

#[tokio::test]
async fn error_table_every_orchestrator_row_reaches_the_user_through_the_gateway() {
    // A stand-in orchestrator that answers each row of the table in turn, as the real one names
    // them; the gateway must answer each with the row's status and code, and count it once.
    use axum::routing::post;
    let next: std::sync::Arc<std::sync::Mutex<Option<&'static Failure>>> = Default::default();
    let n = next.clone();
    let app = axum::Router::new().route(
        "/internal/extract",
        post(move || {
            let n = n.clone();
            async move {
                let row = n.lock().unwrap().expect("a row is set");
                let mut resp = axum::response::IntoResponse::into_response((
                    axum::http::StatusCode::from_u16(row.status).unwrap(),
                    format!(r#"{{"error":{{"code":"{}","message":"http://10.0.0.7:8201 secret"}}}}"#, row.code),
                ));
                resp.headers_mut()
                    .insert(lab_contract::ORIGIN_HEADER, row.origin().parse().unwrap());
                resp
            }
        }),
    ).route("/readyz", axum::routing::get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let mut s = edge_gateway::Settings::defaults().unwrap();
    s.http.port = 0;
    s.admin.port = 0;
    s.database.url = lab_e2e::service_role_url(&db.url, lab_db::GATEWAY_ROLE).await;
    s.flags.namespace = format!("counts-{:016x}", rand::random::<u64>());
    s.flags.redis_url = testkit::redis_url().await;
    s.ratelimit.redis_url = s.flags.redis_url.clone();
    s.ratelimit.namespace = s.flags.namespace.clone();
    // The stub serves /readyz on its one port: it is its own admin listener.
    s.upstream.orchestrators_admin = url.clone();
    s.upstream.orchestrators = url;
    let gw = lab_e2e::Running::start("edge-gateway", move || async move {
        let app = edge_gateway::Application::build(s).await?;
        Ok((
            app.port(),
            app.admin_port(),
            app.run_until_stopped(std::future::pending()),
        ))
    })
    .await;

    let mut rows = answerable(Hop::Orchestrator);
    rows.extend(answerable(Hop::EntityService));
    let client = testkit::http();
    for (i, row) in rows.iter().enumerate() {
        *next.lock().unwrap() = Some(row);
        let resp = client
            .post(format!("{}/v1/extract", gw.url))
            .bearer_auth(&key.api_key)
            .json(&json!({"doc_id": format!("o{i}"), "text": DOC}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), row.status, "{}", row.origin());
        let body = resp.text().await.unwrap();
        assert!(
            !body.contains("http://") && !body.contains("secret"),
            "{}: the inner body never reaches the user: {body}",
            row.origin()
        );
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], row.code);
    }
    let text = metrics_text(&gw.admin).await;
    for row in &rows {
        let labels = format!(
            "hop=\"{}\",origin=\"{}\",status=\"{}\"",
            row.hop, row.code, row.status
        );
        assert_eq!(
            sum_metric(&text, "lab_errors_total", &labels),
            1.0,
            "{labels}"
        );
    }
    assert_eq!(
        sum_metric(&text, "lab_errors_total", "origin=\"upstream_unlabelled\""),
        0.0
    );
}

#[tokio::test]
async fn every_user_facing_5xx_is_named_by_exactly_one_origin() {
    // A dependency failing half its calls: 503s and breaker sheds and successes, mixed.
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let lab = Lab::start(
        db,
        LabOptions {
            cache_capacity: Some(1),
            ..LabOptions::default()
        },
    )
    .await;
    lab.set_flag("fault.entity.error_fraction", "0.5").await;
    let mut seen: BTreeMap<u16, u32> = BTreeMap::new();
    for wave in 0..6 {
        let calls = (0..10).map(|i| {
            let text = format!("The payee Firm{wave}x{i} Labs confirmed.");
            lab.extract(
                &key.api_key,
                json!({"doc_id": format!("{wave}-{i}"), "text": text}),
            )
        });
        for resp in futures::future::join_all(calls).await {
            *seen.entry(resp.status().as_u16()).or_default() += 1;
        }
    }
    let user_5xx: u32 = seen
        .iter()
        .filter(|(s, _)| **s >= 500)
        .map(|(_, n)| n)
        .sum();
    assert!(user_5xx > 0, "the fault produced errors: {seen:?}");
    let text = metrics_text(&lab.gateway.admin).await;
    let by_origin: f64 = lab_core::exposition::samples(&text)
        .filter(|s| s.name == "lab_errors_total")
        .filter(|s| {
            lab_core::exposition::label(s.labels, "status").is_some_and(|st| st.starts_with('5'))
        })
        .map(|s| s.value)
        .sum();
    assert_eq!(
        by_origin, user_5xx as f64,
        "5xx seen by the user {seen:?} = the sum of origins at the gateway"
    );
    for unnamed in ["unlabelled", "upstream_unlabelled", "entity_unlabelled"] {
        assert_eq!(
            sum_metric(&text, "lab_errors_total", &format!("origin=\"{unnamed}\"")),
            0.0,
            "{unnamed}: every error of the lab names its row"
        );
    }
}

/// `attempts / (attempts - retries)` of a hop: what the report calls attempts per first attempt.
fn per_first(attempts: f64, retries: f64) -> f64 {
    attempts / (attempts - retries)
}

#[tokio::test]
async fn attempts_per_first_attempt_never_exceed_the_configured_attempts() {
    // Legacy, dependency dead: every user request makes 3 gateway attempts (the last one cut by
    // the 3 s budget or its own 1 s slice) and every orchestrator call 3 attempts.
    let stub = Stub::start(Reply::status(503)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    lab.set_flag("client.mode", "legacy").await;
    const USERS: usize = 4;
    let calls =
        (0..USERS).map(|i| lab.extract(&key, json!({"doc_id": format!("a{i}"), "text": DOC})));
    for resp in futures::future::join_all(calls).await {
        assert!(resp.status().is_server_error());
    }
    // The orphaned loops finish ~1.4 s after their last attempt started.
    let orch = &lab.orchestrators[0].admin;
    let mut last = -1.0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = Lab::metric(orch, "entity_requests_total", "").await;
        if now == last {
            break;
        }
        last = now;
    }
    let gw = &lab.gateway.admin;
    let gw_attempts = Lab::metric(gw, "gateway_upstream_attempts_total", "").await;
    let gw_retries = Lab::metric(gw, "gateway_upstream_retries_total", "").await;
    assert_eq!(
        gw_attempts,
        3.0 * USERS as f64,
        "every attempt counted once"
    );
    assert_eq!(gw_retries, 2.0 * USERS as f64);
    assert!(per_first(gw_attempts, gw_retries) <= 3.0);
    let cut = Lab::metric(
        gw,
        "gateway_upstream_attempts_total",
        "outcome=\"cut_by_budget\"",
    )
    .await
        + Lab::metric(
            gw,
            "gateway_upstream_attempts_total",
            "outcome=\"attempt_timeout\"",
        )
        .await;
    assert_eq!(
        cut,
        3.0 * USERS as f64,
        "each attempt ended by a clock, counted once"
    );

    let attempts = Lab::metric(orch, "entity_requests_total", "").await;
    let retries = Lab::metric(orch, "entity_retries_total", "").await;
    assert_eq!(attempts, 9.0 * USERS as f64, "3 x 3 per user request");
    assert_eq!(retries, 6.0 * USERS as f64);
    let ratio = per_first(attempts, retries);
    assert!(ratio <= 3.0, "orchestrator hop: {ratio}");
    assert_eq!(
        stub.requests() as f64,
        attempts,
        "every counted attempt was on the wire"
    );

    // Resilient: same dead dependency, the ratio stays within its 3 attempts too.
    lab.set_flag("client.mode", "resilient").await;
    let (a0, r0) = (attempts, retries);
    for i in 0..USERS {
        let resp = lab
            .extract(&key, json!({"doc_id": format!("r{i}"), "text": DOC}))
            .await;
        assert!(resp.status().is_server_error());
    }
    let a = Lab::metric(orch, "entity_requests_total", "").await - a0;
    let r = Lab::metric(orch, "entity_retries_total", "").await - r0;
    assert!(a >= USERS as f64);
    assert!(
        per_first(a, r) <= 3.0,
        "resilient: {a} attempts, {r} retries"
    );
}

#[tokio::test]
async fn deep_readiness_probes_are_never_counted_as_user_traffic() {
    // Legacy mode probes entity-service deeply (every 100 ms here) through the user's client and
    // slots. With the dependency dead and no user at all, no user-facing series may move.
    let db = TestDb::new().await;
    let lab = Lab::start(db, LabOptions::default()).await;
    lab.set_flag("fault.entity.error_fraction", "1").await;
    lab.set_flag("client.mode", "legacy").await;
    let orch = &lab.orchestrators[0].admin;
    let mut probes = 0.0;
    for _ in 0..100 {
        probes = Lab::metric(orch, "entity_probe_requests_total", "").await;
        if probes >= 6.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(probes >= 6.0, "the deep probe ran: {probes}");
    for name in [
        "entity_requests_total",
        "entity_retries_total",
        "entity_abandoned_total",
        "otel_span_orphaned_total",
        "lab_errors_total",
    ] {
        assert_eq!(
            Lab::metric(orch, name, "").await,
            0.0,
            "orchestrator {name}"
        );
    }
    assert!(Lab::metric(orch, "entity_probe_retries_total", "").await > 0.0);
    assert!(
        Lab::metric(orch, "lab_readiness_failures_total", "").await > 0.0,
        "the failed probes are named where they belong"
    );
    let es = &lab.entity_services[0].admin;
    assert_eq!(
        Lab::metric(es, "entity_service_requests_total", "").await,
        0.0,
        "entity-service's inbound rate counts users only"
    );
    assert!(
        Lab::metric(
            es,
            "entity_service_internal_requests_total",
            "traffic=\"probe\""
        )
        .await
            > 0.0
    );
}

#[tokio::test]
async fn a_legacy_decode_error_is_a_502_like_the_fixed_clients() {
    let stub = Stub::start(Reply::ok().with_body("this is not a resolve response")).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    for mode in ["resilient", "legacy"] {
        lab.set_flag("client.mode", mode).await;
        let resp = lab
            .extract(&key, json!({"doc_id": mode, "text": DOC}))
            .await;
        assert_eq!(resp.status(), 502, "{mode}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "entity_decode", "{mode}");
    }
}

#[tokio::test]
async fn entity_service_failures_keep_their_status_to_the_user() {
    // A real entity-service with a 500 fault: a bug is a 500 for the user, not "503 retry later".
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let lab = Lab::start(db, LabOptions::default()).await;
    lab.set_flag("readiness.depth", "shallow").await;
    lab.set_flag("fault.entity.error_status", "500").await;
    lab.set_flag("fault.entity.error_fraction", "1").await;
    for mode in ["resilient", "legacy"] {
        lab.set_flag("client.mode", mode).await;
        let resp = lab
            .extract(&key.api_key, json!({"doc_id": mode, "text": DOC}))
            .await;
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap();
        match mode {
            "resilient" => {
                assert_eq!(status, 500);
                assert_eq!(body["error"]["code"], "injected_fault_500");
            }
            // Legacy retries the 500 at both layers until the gateway's 1 s slices run out.
            _ => assert!(status >= 500, "{status} {body}"),
        }
    }
}
