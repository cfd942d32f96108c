//! The asynchronous path end to end, against the real broker: extractions through the gateway →
//! `doc.ingested` → enrichment workers → PostgreSQL. Every test has its own topic and consumer
//! group, so tests (and a running native lab) never see each other's events.

use std::time::{Duration, Instant};

use lab_e2e::{KafkaTarget, Lab, LabOptions};
use serde_json::json;
use testkit::broker::PrivateBroker;
use testkit::{fixtures, TestDb};

const TENANT: i64 = 1;

async fn fixtures(db: &TestDb) -> String {
    let key = fixtures::tenant_with_key(&db.url, TENANT).await;
    // The tests send bursts; the limiter is not what they are about.
    fixtures::set_rate_limit(&db.url, TENANT, 10_000).await;
    fixtures::entities(
        &db.url,
        &[
            (10, TENANT, "organization", "Vega Labs", 100),
            (11, TENANT, "organization", "Orion Freight", 90),
        ],
    )
    .await;
    key.api_key
}

async fn rows(db_url: &str) -> i64 {
    let mut c = lab_db::connect(db_url).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM enrichment_documents")
        .fetch_one(&mut c)
        .await
        .unwrap()
}

/// Wait (bounded) until `rows` reaches `n`, then a little longer to catch duplicates arriving late.
async fn settle_rows(db_url: &str, n: i64, within: Duration) -> i64 {
    let t0 = Instant::now();
    while rows(db_url).await < n && t0.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    rows(db_url).await
}

async fn extract_n(lab: &Lab, key: &str, n: usize, prefix: &str) {
    for i in 0..n {
        let resp = lab
            .extract(
                key,
                json!({"doc_id": format!("{prefix}-{i}"), "text": "Vega Labs shipped with Orion Freight."}),
            )
            .await;
        assert_eq!(resp.status(), 200, "extraction {i}");
    }
}

#[tokio::test]
async fn n_extractions_make_exactly_n_enrichment_rows() {
    let brokers = testkit::kafka_bootstrap().await;
    let db = TestDb::new().await;
    let key = fixtures(&db).await;
    let opts = LabOptions {
        kafka: Some(KafkaTarget::fresh(&brokers).await),
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let w1 = lab.enrichment_worker().await;
    let w2 = lab.enrichment_worker().await;

    const N: usize = 60;
    extract_n(&lab, &key, N, "doc").await;
    assert_eq!(
        settle_rows(&lab.db.url, N as i64, Duration::from_secs(60)).await,
        N as i64
    );

    // Exactly once per extraction, and the derived counts say so too: both entities in every
    // document, so each has N documents and the pair co-occurs N times.
    let mut c = lab_db::connect(&lab.db.url).await.unwrap();
    let (docs, pair): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT min(documents) FROM tenant_entity_mentions WHERE tenant_id = 1), \
                (SELECT documents FROM entity_cooccurrence WHERE entity_a = 10 AND entity_b = 11)",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!((docs, pair), (N as i64, N as i64));
    let orch = &lab.orchestrators[0].admin;
    assert_eq!(
        Lab::metric(orch, "kafka_producer_delivered_total", "").await,
        N as f64
    );
    // Both workers share the partitions.
    let (o1, o2) = (
        Lab::metric(&w1.admin, "enrichment_assigned_partitions", "").await,
        Lab::metric(&w2.admin, "enrichment_assigned_partitions", "").await,
    );
    assert!(o1 > 0.0 && o2 > 0.0 && o1 + o2 == 12.0, "{o1} + {o2}");
}

/// The broker stops answering (SIGSTOP) while extractions go on: every extraction still succeeds
/// within its budget, the events that fit the producer's queue wait there, the rest are dropped
/// and counted; the broker back, the queued ones arrive and are enriched.
#[tokio::test]
async fn a_dead_broker_never_fails_an_extraction_and_what_was_queued_arrives() {
    let broker = PrivateBroker::start();
    let db = TestDb::new().await;
    let key = fixtures(&db).await;
    const QUEUE: u32 = 20;
    let opts = LabOptions {
        kafka: Some(KafkaTarget {
            queue_max_events: QUEUE,
            delivery_timeout_ms: 120_000,
            ..KafkaTarget::fresh(&broker.bootstrap).await
        }),
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let _w = lab.enrichment_worker().await;
    // The path works with the broker up.
    extract_n(&lab, &key, 5, "before").await;
    assert_eq!(
        settle_rows(&lab.db.url, 5, Duration::from_secs(60)).await,
        5
    );

    broker.freeze();
    const DOWN: usize = 30;
    extract_n(&lab, &key, DOWN, "down").await; // each asserted 200
    let orch = &lab.orchestrators[0].admin;
    let m = |name: &'static str, filter: &'static str| Lab::metric(orch, name, filter);
    assert_eq!(
        m("kafka_producer_events_total", "outcome=\"queued\"").await,
        5.0 + QUEUE as f64
    );
    assert_eq!(
        m(
            "kafka_producer_events_total",
            "outcome=\"dropped_queue_full\""
        )
        .await,
        (DOWN - QUEUE as usize) as f64
    );
    assert_eq!(m("kafka_producer_delivered_total", "").await, 5.0);
    assert_eq!(m("kafka_producer_queue_events", "").await, QUEUE as f64);
    // No extraction failed: the gateway counted only 200s.
    assert_eq!(
        Lab::metric(
            &lab.gateway.admin,
            "gateway_requests_total",
            "status=\"200\""
        )
        .await,
        (5 + DOWN) as f64
    );

    broker.resume();
    let want = 5 + QUEUE as i64;
    assert_eq!(
        settle_rows(&lab.db.url, want, Duration::from_secs(90)).await,
        want
    );
    assert_eq!(m("kafka_producer_delivered_total", "").await, want as f64);
    assert_eq!(m("kafka_producer_delivery_failures_total", "").await, 0.0);
}
