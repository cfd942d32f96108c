//! Shared by the gateway's integration tests: the OpenAPI document as JSON, validators for its
//! schemas, and a lab with a tenant whose rate limit stays out of the way.

#![allow(dead_code)] // each test binary uses its own subset

use lab_e2e::{Lab, LabOptions};
use serde_json::Value;
use testkit::{fixtures, TestDb};

/// The document the code generates (what `GET /openapi.json` serves).
pub fn doc() -> Value {
    serde_json::from_str(&edge_gateway::openapi::document()).expect("the document is JSON")
}

/// A validator for `schema` (an inline schema or a `$ref` into the document's components).
pub fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = schema.clone();
    root.as_object_mut()
        .expect("a schema object")
        .insert("components".into(), doc["components"].clone());
    jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("invalid schema {schema}: {e}"))
}

/// The documented response of `method path` for `status`; panics when it is not documented.
pub fn response<'d>(doc: &'d Value, method: &str, path: &str, status: u16) -> &'d Value {
    let r = &doc["paths"][path][method]["responses"][status.to_string()];
    assert!(
        r.is_object(),
        "{method} {path} answered {status}, which the OpenAPI document does not list"
    );
    r
}

/// Check a real answer against the document: its status is listed, every header the document
/// lists for it is present, and its JSON body validates against the listed schema.
pub fn assert_conforms(
    doc: &Value,
    method: &str,
    path: &str,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: &[u8],
) {
    let documented = response(doc, method, path, status);
    if let Some(hs) = documented["headers"].as_object() {
        for name in hs.keys() {
            assert!(
                headers.contains_key(name.to_ascii_lowercase().as_str()),
                "{method} {path} {status}: documented header {name} is missing"
            );
        }
    }
    if let Some(schema) = documented["content"]["application/json"]["schema"].as_object() {
        let ct = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(
            ct.starts_with("application/json"),
            "{method} {path} {status}: content type {ct:?}"
        );
        let value: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!(
                "{method} {path} {status}: body is not JSON ({e}): {}",
                String::from_utf8_lossy(body)
            )
        });
        let v = validator(doc, &Value::Object(schema.clone()));
        let errors: Vec<String> = v.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "{method} {path} {status}: {value} does not match the document: {errors:?}"
        );
    }
}

/// Plans generous enough that the limiter never answers: these tests are about the parser.
pub const UNLIMITED_RPS: i32 = 1_000_000;

/// A lab over a fresh database with tenant 1 (one entity, "Vega Labs") and its API key.
pub async fn lab(opts: LabOptions) -> (Lab, fixtures::TenantKey) {
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::set_rate_limit(&db.url, 1, UNLIMITED_RPS).await;
    fixtures::entities(&db.url, &[(10, 1, "organization", "Vega Labs", 800)]).await;
    (Lab::start(db, opts).await, key)
}
