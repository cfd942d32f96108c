//! The OpenAPI document is kept in sync with the code three ways: the committed file equals the
//! generated document; the schema mirrors serialize exactly like the `lab-api` wire types; and
//! real answers of an in-process gateway, for every status it can be driven to, conform to the
//! document.

mod common;

use std::time::Duration;

use common::{assert_conforms, doc, validator};
use edge_gateway::openapi::schema;
use lab_api::wire;
use lab_e2e::LabOptions;
use proptest::prelude::*;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};
use testkit::fixtures;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

#[test]
fn openapi_document_equals_the_committed_file() {
    let generated = edge_gateway::openapi::document();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, &generated).expect("write openapi.json");
        return;
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == generated,
        "services/edge-gateway/openapi.json is not the document the code generates; \
         review the change and run `UPDATE_OPENAPI=1 cargo test -p edge-gateway --test openapi`"
    );
}

#[test]
fn openapi_request_limits_are_the_default_limits() {
    let doc = doc();
    let limits = edge_gateway::Settings::defaults().unwrap().limits;
    let props = &doc["components"]["schemas"]["ExtractRequest"]["properties"];
    assert_eq!(props["text"]["maxLength"], json!(limits.max_text_chars));
    assert_eq!(props["doc_id"]["maxLength"], json!(limits.max_doc_id_chars));
    assert_eq!(
        limits.max_body_bytes,
        1 << 20,
        "the 413 description says 1 MiB"
    );
}

#[test]
fn openapi_documents_the_bearer_scheme_and_every_extract_status() {
    let doc = doc();
    let scheme = &doc["components"]["securitySchemes"]["api_key"];
    assert_eq!(scheme["type"], "http");
    assert_eq!(scheme["scheme"], "bearer");
    let op = &doc["paths"]["/v1/extract"]["post"];
    assert_eq!(op["security"], json!([{"api_key": []}]));
    let mut statuses: Vec<&str> = op["responses"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        ["200", "400", "401", "408", "413", "415", "422", "429", "500", "502", "503", "504"]
    );
    for (status, r) in op["responses"].as_object().unwrap() {
        assert!(
            r["headers"]["X-Request-Id"].is_object(),
            "{status} lists X-Request-Id"
        );
    }
    assert!(op["responses"]["429"]["headers"]["Retry-After"].is_object());
}

#[test]
fn openapi_lists_every_server_error_code_of_the_error_table_under_its_status() {
    let doc = doc();
    let responses = &doc["paths"]["/v1/extract"]["post"]["responses"];
    for row in lab_contract::errors::TABLE {
        if row.status < 500 {
            continue;
        }
        let description = responses[row.status.to_string()]["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{} is not a documented status", row.status));
        assert!(
            description.contains(&format!("`{}`", row.code)),
            "{} ({}) is missing from the {} description",
            row.code,
            row.origin(),
            row.status
        );
    }
}

/// `real` → JSON → mirror → JSON is the same JSON, and the mirror's JSON reads back as `real`.
fn assert_mirrors<R, M>(real: &R)
where
    R: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    M: Serialize + DeserializeOwned,
{
    let json = serde_json::to_value(real).unwrap();
    let mirror: M = serde_json::from_value(json.clone())
        .unwrap_or_else(|e| panic!("the mirror cannot read {json}: {e}"));
    let again = serde_json::to_value(&mirror).unwrap();
    assert_eq!(again, json, "the mirror drops or changes fields");
    let back: R = serde_json::from_value(again).unwrap();
    assert_eq!(&back, real);
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-zA-Z ]{0,12}", Just(String::new())]
}

prop_compose! {
    fn extract_request()(
        doc_id in text(), text in text(),
        locale in proptest::option::of(text()), doc_type in proptest::option::of(text()),
    ) -> wire::ExtractRequest {
        wire::ExtractRequest { doc_id, text, locale, doc_type }
    }
}

prop_compose! {
    fn extracted_entity()(
        id in any::<i64>(), name in text(), kind in text(), confidence in 0.0f32..=1.0,
        start in 0usize..1_000_000, len in 0usize..100, mention in text(),
    ) -> wire::ExtractedEntity {
        wire::ExtractedEntity {
            entity: wire::EntityRef { id, name, kind },
            confidence, start, end: start + len, mention,
        }
    }
}

prop_compose! {
    fn extract_response()(
        doc_id in text(), entities in proptest::collection::vec(extracted_entity(), 0..4),
        unresolved in 0usize..10_000,
    ) -> wire::ExtractResponse {
        wire::ExtractResponse { doc_id, entities, unresolved }
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x0A91),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn schema_mirrors_serialize_like_the_wire_types(
        req in extract_request(), resp in extract_response(),
        code in text(), message in text(),
    ) {
        assert_mirrors::<_, schema::ExtractRequest>(&req);
        assert_mirrors::<_, schema::ExtractResponse>(&resp);
        assert_mirrors::<_, schema::ErrorBody>(&wire::ErrorBody::new(code, message));
    }

    #[test]
    fn wire_responses_validate_against_the_document(
        resp in extract_response(), code in text(), message in text(),
    ) {
        let doc = doc();
        let ok = validator(&doc, &doc["paths"]["/v1/extract"]["post"]["responses"]["200"]
            ["content"]["application/json"]["schema"]);
        let value = serde_json::to_value(&resp).unwrap();
        prop_assert!(ok.is_valid(&value), "{}", value);
        let err = validator(&doc, &json!({"$ref": "#/components/schemas/ErrorBody"}));
        let value = serde_json::to_value(wire::ErrorBody::new(code, message)).unwrap();
        prop_assert!(err.is_valid(&value), "{}", value);
    }
}

/// A port that accepts connections and never answers: whatever waits on it runs out of budget.
async fn black_hole() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    url
}

/// A port nobody listens on.
fn dead_port() -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    url
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: bytes::Bytes,
}

async fn post(gateway: &str, key: Option<&str>, content_type: &str, body: String) -> Answer {
    let mut rb = testkit::http()
        .post(format!("{gateway}/v1/extract"))
        .timeout(Duration::from_secs(20))
        .header("content-type", content_type)
        .body(body);
    if let Some(key) = key {
        rb = rb.bearer_auth(key);
    }
    let resp = rb.send().await.expect("the gateway answered");
    Answer {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.bytes().await.unwrap(),
    }
}

const DOC: &str = r#"{"doc_id":"d-1","text":"The payee Vega Labs confirmed.","locale":"de"}"#;

#[tokio::test]
async fn extract_answers_conform_to_the_document_for_every_reachable_status() {
    let doc = doc();
    let mut seen = Vec::new();
    let mut check = |a: Answer| {
        assert_conforms(&doc, "post", "/v1/extract", a.status, &a.headers, &a.body);
        seen.push(a.status);
        a
    };

    let (lab, key) = common::lab(LabOptions {
        max_body_bytes: 4096,
        ..LabOptions::default()
    })
    .await;
    let gw = lab.gateway.url.as_str();
    let k = Some(key.api_key.as_str());
    let ok = check(post(gw, k, "application/json", DOC.into()).await);
    assert_eq!(ok.status, 200);
    let body: Value = serde_json::from_slice(&ok.body).unwrap();
    assert_eq!(body["entities"][0]["entity"]["id"], 10, "{body}");
    let a = check(post(gw, k, "application/json", r#"{"doc_id":"d"}"#.into()).await);
    assert_eq!(a.status, 400);
    let a = check(
        post(
            gw,
            Some("rsl_ffffffffffff_00"),
            "application/json",
            DOC.into(),
        )
        .await,
    );
    assert_eq!(a.status, 401);
    let a = check(post(gw, None, "application/json", DOC.into()).await);
    assert_eq!(a.status, 401);
    let big = format!(r#"{{"doc_id":"d","text":"{}"}}"#, "a".repeat(10_000));
    let a = check(post(gw, k, "application/json", big).await);
    assert_eq!(a.status, 413);
    let a = check(post(gw, k, "text/plain", DOC.into()).await);
    assert_eq!(a.status, 415);

    // 429: a plan of 1 request/s with a burst of 1; the second request at once is refused.
    fixtures::set_rate_limit(&lab.db.url, 1, 1).await;
    let slow = fixtures::tenant_with_key(&lab.db.url, 2).await;
    fixtures::set_rate_limit(&lab.db.url, 2, 1).await;
    let s = Some(slow.api_key.as_str());
    let mut limited = None;
    for _ in 0..5 {
        let a = post(gw, s, "application/json", DOC.into()).await;
        if a.status == 429 {
            limited = Some(a);
            break;
        }
        check(a);
    }
    let a = check(limited.expect("a 1 rps tenant is limited within 5 quick requests"));
    let secs: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(secs >= 1);
    drop(lab);

    // 503: the orchestrator cannot reach entity-service (connection refused).
    let (lab, key) = common::lab(LabOptions {
        entity_urls_override: Some(dead_port()),
        ..LabOptions::default()
    })
    .await;
    let a = check(
        post(
            &lab.gateway.url,
            Some(&key.api_key),
            "application/json",
            DOC.into(),
        )
        .await,
    );
    assert_eq!(a.status, 503);
    // 503 again: no orchestrator is in rotation.
    lab.orchestrators[0].kill();
    let mut status = 0;
    for _ in 0..100 {
        let a = post(
            &lab.gateway.url,
            Some(&key.api_key),
            "application/json",
            DOC.into(),
        )
        .await;
        status = check(a).status;
        if status == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 503);
    drop(lab);

    // 504: entity-service accepts and never answers; the 3 s budget runs out.
    let (lab, key) = common::lab(LabOptions {
        entity_urls_override: Some(black_hole().await),
        ..LabOptions::default()
    })
    .await;
    let a = check(
        post(
            &lab.gateway.url,
            Some(&key.api_key),
            "application/json",
            DOC.into(),
        )
        .await,
    );
    assert_eq!(a.status, 504);

    seen.sort();
    seen.dedup();
    assert_eq!(seen, [200, 400, 401, 413, 415, 429, 503, 504]);
}

#[tokio::test]
async fn openapi_json_is_served_unauthenticated_and_is_the_document() {
    let (lab, _) = common::lab(LabOptions::default()).await;
    let resp = reqwest::get(format!("{}/openapi.json", lab.gateway.url))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(
        resp.text().await.unwrap(),
        edge_gateway::openapi::document()
    );
    // The admin surface is not on the public port, and not in the public document: a user who
    // can reach /v1/extract cannot read the fleet's internals (replica URLs, live flags).
    let doc = doc();
    for path in ["/readyz", "/livez", "/metrics"] {
        assert!(
            doc["paths"].get(path).is_none(),
            "{path} is in the public document"
        );
        let public = reqwest::get(format!("{}{path}", lab.gateway.url))
            .await
            .unwrap();
        assert_eq!(public.status(), 404, "{path} on the public port");
        let admin = reqwest::get(format!("{}{path}", lab.gateway.admin))
            .await
            .unwrap();
        assert_eq!(admin.status(), 200, "{path} on the admin listener");
    }
}
