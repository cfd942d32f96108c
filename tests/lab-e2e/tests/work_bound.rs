//! One document's work is bounded (issue 28): a document of thousands of distinct names cost
//! thousands of lookups with every call sent at once, filling the slots in front of
//! entity-service for every other tenant. Now a document sends at most
//! `entity.batches_in_flight` (4) calls at once and may ask for at most `entity.max_spans`
//! (1,024) distinct spans; past that it is refused before any lookup. Counts, not times.

use std::time::Duration;

use entity_client::test_support::{Reply, Stub};
use lab_e2e::Lab;
use serde_json::json;

/// `n` distinct single-name spans ("we met Qaaa. we met Qaab. ..."), each its own sentence.
fn names(n: usize, salt: char) -> String {
    (0..n)
        .map(|i| {
            let l = |k: usize| (b'a' + ((i / 26usize.pow(k as u32)) % 26) as u8) as char;
            format!("we met Q{salt}{}{}{}. ", l(2), l(1), l(0))
        })
        .collect()
}

#[tokio::test]
async fn a_document_sends_at_most_four_calls_at_once_in_either_mode() {
    // Slow enough that every call the orchestrator would send at once is in flight together.
    let stub = Stub::start(Reply::nulls().after(Duration::from_millis(200))).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    lab.set_flag("readiness.depth", "shallow").await;
    for (mode, salt) in [("resilient", 'r'), ("legacy", 'l')] {
        lab.set_flag("client.mode", mode).await;
        let before = stub.requests();
        // 160 distinct names: 10 calls of 16, none cached.
        let resp = lab
            .extract(
                &key,
                json!({"doc_id": format!("big-{mode}"), "text": names(160, salt)}),
            )
            .await;
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert_eq!(status, 200, "{mode}: {body}");
        assert_eq!(
            stub.requests() - before,
            10,
            "{mode}: 160 spans in calls of 16"
        );
        assert!(
            stub.max_in_flight() <= 4,
            "{mode}: {} calls in flight at once (all 10 before the bound)",
            stub.max_in_flight()
        );
    }
    assert_eq!(
        stub.max_in_flight(),
        4,
        "the bound is reached, not undershot"
    );
}

#[tokio::test]
async fn a_document_of_more_distinct_spans_than_the_bound_is_refused_before_any_lookup() {
    let stub = Stub::start(Reply::nulls()).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    lab.set_flag("readiness.depth", "shallow").await;
    let resp = lab
        .extract(&key, json!({"doc_id": "huge", "text": names(1_025, 'h')}))
        .await;
    assert_eq!(resp.status(), 422);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_spans", "{body}");
    assert_eq!(stub.requests(), 0, "not one lookup for a refused document");
    // At the bound it is served.
    let resp = lab
        .extract(
            &key,
            json!({"doc_id": "at-bound", "text": names(1_024, 'b')}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(stub.requests(), 64, "1,024 spans in calls of 16");
}
