//! lab-kafka against the real broker (`KAFKA_BOOTSTRAP`; scripts/deps.sh starts tansu).

use std::time::{Duration, Instant};

use lab_kafka::producer::Publish;
use lab_kafka::topic::{self, Ensured};
use lab_kafka::{EventProducer, ProducerSettings};
use prometheus::Registry;

const TIMEOUT: Duration = Duration::from_secs(10);

fn settings(brokers: &str, topic: &str) -> ProducerSettings {
    ProducerSettings {
        brokers: brokers.to_string(),
        topic: topic.to_string(),
        queue_max_events: 1000,
        queue_max_kbytes: 1024,
        delivery_timeout_ms: 10_000,
        linger_ms: 5,
        batch_max_events: 10_000,
    }
}

async fn wait_drained(p: &EventProducer) {
    let t0 = Instant::now();
    while p.in_flight() > 0 {
        assert!(
            t0.elapsed() < TIMEOUT,
            "{} events never delivered",
            p.in_flight()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The lag of a group that never consumed `topic`, read from outside it (blocking, off the runtime).
async fn nobody_consumes_lag(brokers: &str, topic: &str) -> Vec<lab_kafka::lag::PartitionLag> {
    let (b, n) = (brokers.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        lab_kafka::lag::group_lag(&b, "nobody-consumes", &n, TIMEOUT)
    })
    .await
    .unwrap()
    .unwrap()
}

fn metric(registry: &Registry, name: &str, label: Option<(&str, &str)>) -> f64 {
    let text = {
        use prometheus::Encoder;
        let mut buf = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut buf)
            .unwrap();
        String::from_utf8(buf).unwrap()
    };
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| label.is_none_or(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_topic_is_created_once_and_a_wrong_partition_count_is_refused() {
    let brokers = testkit::kafka_bootstrap().await;
    let name = testkit::unique_name("test.topic");
    assert_eq!(
        topic::ensure(&brokers, &name, 12, 1, TIMEOUT)
            .await
            .unwrap(),
        Ensured::Created
    );
    assert_eq!(
        topic::ensure(&brokers, &name, 12, 1, TIMEOUT)
            .await
            .unwrap(),
        Ensured::AlreadyThere
    );
    let err = topic::ensure(&brokers, &name, 6, 1, TIMEOUT)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("has 12 partitions") && err.contains("needs 6"),
        "{err}"
    );
}

#[tokio::test]
async fn every_published_event_is_counted_as_delivered() {
    let brokers = testkit::kafka_bootstrap().await;
    let name = testkit::unique_name("test.deliver");
    topic::ensure(&brokers, &name, 12, 1, TIMEOUT)
        .await
        .unwrap();
    let registry = Registry::new();
    let p = EventProducer::new(&settings(&brokers, &name), &registry)
        .unwrap()
        .expect("brokers set");
    for i in 0..200 {
        let key = format!("doc-{i}");
        assert_eq!(
            p.publish(&key, b"{}", &[("traceparent", "x")]),
            Publish::Queued
        );
    }
    wait_drained(&p).await;
    assert_eq!(
        metric(
            &registry,
            "kafka_producer_events_total",
            Some(("outcome", "queued"))
        ),
        200.0
    );
    assert_eq!(
        metric(&registry, "kafka_producer_delivered_total", None),
        200.0
    );
    assert_eq!(
        metric(&registry, "kafka_producer_delivery_failures_total", None),
        0.0
    );
    assert_eq!(metric(&registry, "kafka_producer_queue_events", None), 0.0);
}

#[tokio::test]
async fn publishing_is_off_without_brokers() {
    let registry = Registry::new();
    assert!(EventProducer::new(&settings("", "t"), &registry)
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn a_full_queue_drops_at_once_and_counts() {
    // A broker nobody listens on: nothing is ever delivered, so the queue fills.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let registry = Registry::new();
    let mut s = settings(&dead, "t");
    s.queue_max_events = 10;
    let p = EventProducer::new(&s, &registry).unwrap().unwrap();
    let outcomes: Vec<Publish> = (0..25).map(|_| p.publish("k", b"{}", &[])).collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == Publish::Queued).count(),
        10
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Publish::DroppedQueueFull)
            .count(),
        15
    );
    // Every drop counted, and the queue holds exactly its bound: the 15 were refused at the call
    // (`publish` returned), not after waiting for a broker that never answers.
    assert_eq!(
        metric(
            &registry,
            "kafka_producer_events_total",
            Some(("outcome", "dropped_queue_full"))
        ),
        15.0
    );
    assert_eq!(metric(&registry, "kafka_producer_queue_events", None), 10.0);
}

/// Lag from outside the group: N events, nobody consuming, never committed → N. Produced one per
/// batch (each awaited), because tansu's high watermark is wrong after a batched produce (see
/// lab_kafka::lag, which records the measurement).
#[tokio::test]
async fn group_lag_counts_every_unconsumed_event() {
    let brokers = testkit::kafka_bootstrap().await;
    let name = testkit::unique_name("test.lag");
    topic::ensure(&brokers, &name, 12, 1, TIMEOUT)
        .await
        .unwrap();
    let registry = Registry::new();
    let p = EventProducer::new(&settings(&brokers, &name), &registry)
        .unwrap()
        .unwrap();
    for i in 0..37 {
        p.publish(&format!("doc-{i}"), b"{}", &[]);
        wait_drained(&p).await;
    }
    let lags = nobody_consumes_lag(&brokers, &name).await;
    assert_eq!(lags.len(), 12);
    assert_eq!(lags.iter().map(|l| l.lag).sum::<i64>(), 37, "{lags:?}");

    // A log end the caller already knows (a worker's own fetch responses) is taken as given; the
    // broker is asked for the others, which come out as before.
    let (b, n) = (brokers.clone(), name.clone());
    let with_known = tokio::task::spawn_blocking(move || {
        let c: rdkafka::consumer::BaseConsumer = lab_kafka::client_config(&b)
            .set("group.id", "nobody-consumes")
            .create()
            .unwrap();
        let partitions: Vec<i32> = (0..12).collect();
        let known = std::collections::HashMap::from([(3, 1_000)]);
        lab_kafka::lag::measure(&c, &n, &partitions, &known, &Default::default(), TIMEOUT)
    })
    .await
    .unwrap()
    .unwrap();
    for (asked, known) in lags.iter().zip(&with_known) {
        let want = if known.partition == 3 {
            1_000
        } else {
            asked.lag
        };
        assert_eq!(known.lag, want, "{with_known:?}");
    }
}

/// The native lab's batching against tansu: events batched up to `NATIVE_BATCH_MAX_EVENTS` leave
/// the broker's high watermark short of the true log end by at most that many - 1. 37 events with one key (one partition), held
/// 300 ms so the batches fill: on Apache Kafka the lag is exactly 37; on tansu 0.6 the last
/// batch's base offset + 1 (the module docs of lab_kafka::lag). Fails if a batch could exceed the
/// bound (the under-count would pass 7) or if the watermark counted more than was published.
/// (The floor a consumer's reads put under it: lab_kafka::lag's unit tests.)
#[tokio::test]
async fn a_batching_producer_leaves_the_lag_short_by_less_than_a_batch() {
    let bound = lab_kafka::lag::NATIVE_BATCH_MAX_EVENTS as i64;
    let brokers = testkit::kafka_bootstrap().await;
    let name = testkit::unique_name("test.lag-batched");
    topic::ensure(&brokers, &name, 12, 1, TIMEOUT)
        .await
        .unwrap();
    let registry = Registry::new();
    let batched = ProducerSettings {
        linger_ms: 300,
        batch_max_events: lab_kafka::lag::NATIVE_BATCH_MAX_EVENTS,
        ..settings(&brokers, &name)
    };
    let p = EventProducer::new(&batched, &registry).unwrap().unwrap();
    for _ in 0..37 {
        assert_eq!(p.publish("one-key", b"{}", &[]), Publish::Queued);
    }
    wait_drained(&p).await;
    let lags = nobody_consumes_lag(&brokers, &name).await;
    let busy: Vec<_> = lags.iter().filter(|l| l.lag > 0).collect();
    assert_eq!(busy.len(), 1, "one key, one partition: {lags:?}");
    let lag = busy[0].lag;
    assert!(
        (37 - (bound - 1)..=37).contains(&lag),
        "lag {lag} of 37 published, batches of at most {bound}: {lags:?}"
    );
}

/// A recreated topic holds nothing of what was published to it before: the native lab drops the
/// last lab's events at `labctl up` (tansu's memory storage pays for every event it holds on
/// every fetch: issue 29).
#[tokio::test]
async fn a_recreated_topic_is_empty() {
    let brokers = testkit::kafka_bootstrap().await;
    let name = testkit::unique_name("test.recreate");
    topic::ensure(&brokers, &name, 2, 1, TIMEOUT).await.unwrap();
    let registry = Registry::new();
    let p = EventProducer::new(&settings(&brokers, &name), &registry)
        .unwrap()
        .expect("brokers are set");
    for i in 0..20 {
        p.publish(&format!("k{i}"), b"{}", &[]);
    }
    wait_drained(&p).await;
    drop(p);
    let ends = |brokers: String, name: String| {
        tokio::task::spawn_blocking(move || {
            lab_kafka::lag::group_lag(&brokers, "test-recreate-reader", &name, TIMEOUT)
                .unwrap()
                .iter()
                .map(|l| l.log_end)
                .sum::<i64>()
        })
    };
    let before = ends(brokers.clone(), name.clone()).await.unwrap();
    assert!(before > 0, "the events were published: log ends {before}");
    topic::recreate(&brokers, &name, 2, 1, TIMEOUT)
        .await
        .unwrap();
    let after = ends(brokers.clone(), name.clone()).await.unwrap();
    assert_eq!(after, 0, "the recreated topic's log ends");
}
