//! Property tests of `POST /v1/extract`'s request handling, against a real in-process gateway
//! (and its real upstreams, so an input that breaks something below the gateway shows too).
//!
//! - Arbitrary bytes, strings and JSON under arbitrary content types: never a 5xx, never a
//!   dropped connection, every refusal a JSON error with the code its status promises.
//! - The gateway accepts exactly what the OpenAPI document's request schema accepts.
//! - Valid requests round-trip: 200, the same `doc_id`, offsets that point at the mentions.
//!
//! 256 cases each from a fixed seed: the same inputs on every run, a few seconds in all.

mod common;

use std::time::Duration;

use common::{assert_conforms, doc, validator};
use lab_e2e::{Lab, LabOptions};
use proptest::prelude::*;
use proptest::test_runner::{RngSeed, TestRunner};
use serde_json::{Map, Value};

/// Small, so that generated bodies cross it and 413 is exercised too.
const MAX_BODY_BYTES: usize = 2048;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x5EED_0004),
        // Each shrink step is a round trip through the lab; 64 is plenty to find a small input.
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    }
}

/// One lab per property, driven from a runtime of the test's own.
struct Harness {
    rt: tokio::runtime::Runtime,
    lab: Option<Lab>,
    key: String,
    client: reqwest::Client,
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: bytes::Bytes,
}

impl Harness {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (lab, key) = rt.block_on(common::lab(LabOptions {
            max_body_bytes: MAX_BODY_BYTES,
            ..LabOptions::default()
        }));
        Self {
            rt,
            lab: Some(lab),
            key: key.api_key,
            client: testkit::http(),
        }
    }

    fn post(&self, content_type: Option<&str>, body: Vec<u8>) -> Answer {
        let url = format!("{}/v1/extract", self.lab.as_ref().unwrap().gateway.url);
        self.rt.block_on(async {
            let mut rb = self
                .client
                .post(url)
                .bearer_auth(&self.key)
                .timeout(Duration::from_secs(20))
                .body(body);
            if let Some(ct) = content_type {
                rb = rb.header("content-type", ct);
            }
            let resp = rb
                .send()
                .await
                .expect("the gateway answered (no dropped connection)");
            Answer {
                status: resp.status().as_u16(),
                headers: resp.headers().clone(),
                body: resp.bytes().await.expect("a complete body"),
            }
        })
    }

    fn run<S: Strategy>(&self, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
    where
        S::Value: std::fmt::Debug,
    {
        if let Err(e) = TestRunner::new(config()).run(&strategy, test) {
            panic!("{e}");
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _guard = self.rt.enter();
        drop(self.lab.take());
    }
}

/// A refusal is the JSON error its status promises, and conforms to the document.
fn check_answer(doc: &Value, a: &Answer) -> Result<(), TestCaseError> {
    prop_assert!(a.status < 500, "{} {:?}", a.status, a.body);
    let expected = match a.status {
        200 => None,
        400 => Some("invalid_request"),
        413 => Some("payload_too_large"),
        415 => Some("unsupported_media_type"),
        s => {
            return Err(TestCaseError::fail(format!(
                "unexpected status {s}: {:?}",
                a.body
            )))
        }
    };
    assert_conforms(doc, "post", "/v1/extract", a.status, &a.headers, &a.body);
    if let Some(code) = expected {
        let err: Value = serde_json::from_slice(&a.body).expect("JSON error body");
        prop_assert_eq!(&err["error"]["code"], code);
        prop_assert!(err["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    Ok(())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[a-zA-Z0-9 -]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Values for the request's fields: mostly strings near the rules' edges, sometimes anything.
fn field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "[a-zA-Z0-9 -]{0,40}".prop_map(Value::String),
        3 => any::<String>().prop_map(Value::String),
        1 => "[A-Za-z]{2}(-[A-Z]{2})?".prop_map(Value::String),
        1 => "(.|\n){60,70}".prop_map(Value::String),
        1 => json_value(),
    ]
}

/// JSON objects shaped like a request: each known field present or not, sometimes an extra.
fn request_shaped() -> impl Strategy<Value = Value> {
    (
        proptest::option::weighted(0.9, field_value()),
        proptest::option::weighted(0.9, field_value()),
        proptest::option::of(field_value()),
        proptest::option::of(field_value()),
        proptest::option::weighted(0.1, ("[a-z_]{1,10}", field_value())),
    )
        .prop_map(|(doc_id, text, locale, doc_type, extra)| {
            let mut m = Map::new();
            let fields = [
                ("doc_id", doc_id),
                ("text", text),
                ("locale", locale),
                ("doc_type", doc_type),
            ];
            for (k, v) in fields {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            if let Some((k, v)) = extra {
                m.insert(k, v);
            }
            Value::Object(m)
        })
}

fn content_type() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(Some("application/json".to_string())),
        1 => Just(Some("application/json; charset=utf-8".to_string())),
        1 => Just(Some("Application/Problem+JSON".to_string())),
        1 => Just(Some("text/plain".to_string())),
        1 => Just(Some("application/x-www-form-urlencoded".to_string())),
        1 => Just(None),
        2 => "[ -~]{0,40}".prop_map(Some),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..(MAX_BODY_BYTES + 512)),
        any::<String>().prop_map(String::into_bytes),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        request_shaped().prop_map(|v| serde_json::to_vec(&v).unwrap()),
    ]
}

#[test]
fn extract_answers_arbitrary_bodies_and_content_types_with_json_errors_never_5xx() {
    let h = Harness::new();
    let doc = doc();
    h.run((content_type(), body()), |(ct, body)| {
        let a = h.post(ct.as_deref(), body);
        check_answer(&doc, &a)
    });
}

#[test]
fn extract_accepts_exactly_the_requests_the_document_declares_valid() {
    let h = Harness::new();
    let doc = doc();
    let schema = validator(
        &doc,
        &doc["paths"]["/v1/extract"]["post"]["requestBody"]["content"]["application/json"]
            ["schema"],
    );
    let input = prop_oneof![3 => request_shaped(), 1 => json_value()];
    h.run(input, |value| {
        let a = h.post(
            Some("application/json"),
            serde_json::to_vec(&value).unwrap(),
        );
        check_answer(&doc, &a)?;
        let valid = schema.is_valid(&value);
        prop_assert_eq!(
            a.status == 200,
            valid,
            "the document says {} is {}valid; the gateway answered {}: {}",
            value,
            if valid { "" } else { "in" },
            a.status,
            String::from_utf8_lossy(&a.body)
        );
        Ok(())
    });
}

prop_compose! {
    fn valid_request()(
        doc_id in "[^\u{0}-\u{1f}\u{7f}-\u{9f}]{1,128}",
        before in ".{0,60}", vega in any::<bool>(), after in "(.|\n){0,60}",
        locale in proptest::option::of("[a-z]{2}(-[A-Z]{2})?"),
        doc_type in proptest::option::of("[a-z]{1,64}"),
    ) -> Value {
        let mut text = before;
        if vega {
            // Lower-case words around it, so no neighbour joins the candidate span.
            text.push_str(" paid the Vega Labs team. ");
        }
        text.push_str(&after);
        if text.is_empty() {
            text.push('x');
        }
        let mut m = Map::new();
        m.insert("doc_id".into(), doc_id.into());
        m.insert("text".into(), text.into());
        if let Some(l) = locale { m.insert("locale".into(), l.into()); }
        if let Some(t) = doc_type { m.insert("doc_type".into(), t.into()); }
        Value::Object(m)
    }
}

#[test]
fn extract_round_trips_valid_requests() {
    let h = Harness::new();
    let doc = doc();
    h.run(valid_request(), |req| {
        let a = h.post(Some("application/json"), serde_json::to_vec(&req).unwrap());
        prop_assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        check_answer(&doc, &a)?;
        let resp: lab_api::wire::ExtractResponse = serde_json::from_slice(&a.body).unwrap();
        prop_assert_eq!(resp.doc_id.as_str(), req["doc_id"].as_str().unwrap());
        let text: Vec<char> = req["text"].as_str().unwrap().chars().collect();
        for e in &resp.entities {
            prop_assert!(e.start < e.end && e.end <= text.len(), "{:?}", e);
            let slice: String = text[e.start..e.end].iter().collect();
            prop_assert_eq!(&slice, &e.mention);
        }
        if req["text"]
            .as_str()
            .unwrap()
            .contains(" the Vega Labs team. ")
        {
            prop_assert!(
                resp.entities.iter().any(|e| e.entity.id == 10),
                "Vega Labs is found: {:?}",
                resp
            );
        }
        Ok(())
    });
}
