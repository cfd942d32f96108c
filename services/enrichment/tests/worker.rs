//! Enrichment workers as real processes against the real broker and PostgreSQL: a SIGKILL
//! mid-stream loses and duplicates nothing; a paused group reports exactly the backlog as lag.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab_api::events::{DocIngested, Mention};
use lab_kafka::{EventProducer, ProducerSettings};
use testkit::TestDb;

const TIMEOUT: Duration = Duration::from_secs(10);

struct Worker {
    child: Child,
    url: String,
}

impl Worker {
    /// The `enrichment` binary, configured only through its environment as in production.
    fn spawn(db: &str, brokers: &str, topic: &str, group: &str, redis: &str, ns: &str) -> Worker {
        let (port, admin) = (free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_enrichment"))
            .env("LAB_HTTP__PORT", port.to_string())
            .env("LAB_ADMIN__PORT", admin.to_string())
            .env("LAB_DATABASE__URL", db)
            .env("LAB_DATABASE__ALLOW_SUPERUSER", "true")
            .env("LAB_KAFKA__BROKERS", brokers)
            .env("LAB_KAFKA__TOPIC", topic)
            .env("LAB_KAFKA__GROUP_ID", group)
            .env("LAB_KAFKA__LAG_INTERVAL_MS", "200")
            .env("LAB_FLAGS__REDIS_URL", redis)
            .env("LAB_FLAGS__NAMESPACE", ns)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            // LAB_TEST_WORKER_LOGS=1 shows the workers' logs.
            .stdout(if std::env::var_os("LAB_TEST_WORKER_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("spawn enrichment");
        // The worker serves no API: everything a test reads is on its admin listener.
        Worker {
            child,
            url: format!("http://127.0.0.1:{admin}"),
        }
    }

    fn sigkill(&mut self) {
        // SAFETY: kill(2) on our own child.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) },
            0
        );
        let _ = self.child.wait();
    }

    async fn metric(&self, name: &str, filter: &str) -> f64 {
        let Ok(resp) = reqwest::get(format!("{}/metrics", self.url)).await else {
            return f64::NAN;
        };
        let text = resp.text().await.unwrap_or_default();
        lab_core::exposition::samples(&text)
            .filter(|s| s.name == name && s.labels.contains(filter))
            .map(|s| s.value)
            .sum()
    }

    /// Wait (bounded) until `name` is at least `want`.
    async fn wait_metric_at_least(
        &self,
        name: &str,
        filter: &str,
        want: f64,
        within: Duration,
    ) -> f64 {
        let t0 = Instant::now();
        loop {
            let v = self.metric(name, filter).await;
            if v >= want || t0.elapsed() > within {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Wait (bounded) until `name` reaches `want`.
    async fn wait_metric(&self, name: &str, filter: &str, want: f64, within: Duration) -> f64 {
        let t0 = Instant::now();
        loop {
            let v = self.metric(name, filter).await;
            if v == want || t0.elapsed() > within {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn event(i: usize) -> DocIngested {
    DocIngested {
        event_id: format!("req-{i}"),
        doc_id: format!("doc-{i}"),
        tenant_id: 1,
        locale: None,
        // Every document mentions entity 1 and one of ten others: entity 1's `documents` count
        // must end at exactly N, which a duplicate application would push above N.
        mentions: vec![
            Mention {
                entity_id: 1,
                count: 1,
            },
            Mention {
                entity_id: 2 + (i % 10) as i64,
                count: 2,
            },
        ],
        unresolved: 0,
        spans: 2,
        cache_hits: 0,
        duration_ms: 1.0,
        extracted_at_unix_ms: 1_700_000_000_000,
    }
}

/// Publish events `range`, one per batch (exact watermarks on tansu, see lab_kafka::lag), and wait
/// until the broker has them all.
async fn publish(brokers: &str, topic: &str, range: std::ops::Range<usize>) {
    publish_events(brokers, topic, range.map(event)).await
}

/// Publish `events` as [`publish`] does.
async fn publish_events(brokers: &str, topic: &str, events: impl IntoIterator<Item = DocIngested>) {
    let registry = prometheus::Registry::new();
    let p = EventProducer::new(
        &ProducerSettings {
            brokers: brokers.into(),
            topic: topic.into(),
            queue_max_events: 100_000,
            queue_max_kbytes: 65_536,
            delivery_timeout_ms: 30_000,
            linger_ms: 0,
            batch_max_events: 1,
        },
        &registry,
    )
    .unwrap()
    .unwrap();
    for e in events {
        p.publish(&e.doc_id, &serde_json::to_vec(&e).unwrap(), &[]);
    }
    let t0 = Instant::now();
    while p.in_flight() > 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "publishing stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn counts(db: &str) -> (i64, i64) {
    let mut c = lab_db::connect(db).await.unwrap();
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM enrichment_documents), \
                (SELECT coalesce(sum(documents), 0)::bigint FROM tenant_entity_mentions WHERE entity_id = 1)",
    )
    .fetch_one(&mut c)
    .await
    .unwrap()
}

async fn wait_rows(db: &str, at_least: i64, within: Duration) -> (i64, i64) {
    let t0 = Instant::now();
    loop {
        let c = counts(db).await;
        if c.0 >= at_least || t0.elapsed() > within {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Setup {
    db: TestDb,
    brokers: String,
    topic: String,
    group: String,
    redis: String,
    ns: String,
}

async fn setup() -> Setup {
    let brokers = testkit::kafka_bootstrap().await;
    let topic = testkit::unique_name("test.doc.ingested");
    lab_kafka::topic::ensure(&brokers, &topic, 12, 1, TIMEOUT)
        .await
        .unwrap();
    Setup {
        db: TestDb::new().await,
        brokers,
        topic,
        group: testkit::unique_name("enrichment-workers"),
        redis: testkit::redis_url().await,
        ns: testkit::unique_name("lab-test"),
    }
}

impl Setup {
    fn worker(&self) -> Worker {
        Worker::spawn(
            &self.db.url,
            &self.brokers,
            &self.topic,
            &self.group,
            &self.redis,
            &self.ns,
        )
    }
}

/// Issue 29: a worker writes what has arrived in batches (one transaction each, not one per
/// event), and an event PostgreSQL refuses for its values is skipped alone: the batch it came in
/// is applied one by one. Fails with `enrich.batch_max_events = 1` (as many transactions as
/// events) and if the refused batch were skipped whole (rows missing).
#[tokio::test]
async fn a_worker_writes_in_batches_and_skips_only_the_event_the_database_refuses() {
    let s = setup().await;
    const N: usize = 400;
    let mut events: Vec<DocIngested> = (0..N).map(event).collect();
    let mut bad = event(N);
    bad.extracted_at_unix_ms = i64::MAX; // a time PostgreSQL cannot represent
    events.insert(N / 2, bad);
    publish_events(&s.brokers, &s.topic, events).await;
    let w = s.worker();
    let (rows, entity_docs) = wait_rows(&s.db.url, N as i64, Duration::from_secs(60)).await;
    assert_eq!(
        (rows, entity_docs),
        (N as i64, N as i64),
        "every good event once"
    );
    let invalid = w
        .wait_metric(
            "enrichment_events_total",
            "outcome=\"invalid\"",
            1.0,
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(invalid, 1.0, "the refused event, and only it, skipped");
    let written = w.metric("enrichment_batch_events_sum", "").await;
    let transactions = w.metric("enrichment_batch_events_count", "").await;
    assert_eq!(written, (N + 1) as f64, "every event went through a batch");
    assert!(
        transactions * 4.0 <= written,
        "{transactions} batches for {written} events: not batched"
    );
}

#[tokio::test]
async fn a_worker_killed_mid_stream_loses_nothing_and_applies_nothing_twice() {
    let s = setup().await;
    const N: usize = 3000;
    publish(&s.brokers, &s.topic, 0..N).await;
    let mut a = s.worker();
    let b = s.worker();
    // Both in the group before the kill, so the kill forces a rebalance.
    assert_eq!(
        b.wait_metric(
            "enrichment_rebalances_total",
            "kind=\"assign\"",
            1.0,
            Duration::from_secs(30)
        )
        .await
        .min(1.0),
        1.0
    );
    wait_rows(&s.db.url, 300, Duration::from_secs(60)).await;
    a.sigkill();
    // Read after the kill: the stream was not done when the worker died.
    let (mid, _) = counts(&s.db.url).await;
    assert!(
        mid < N as i64,
        "the kill came after the stream was done ({mid} rows)"
    );
    let assigns_before = b
        .metric("enrichment_rebalances_total", "kind=\"assign\"")
        .await;
    let _a2 = s.worker();

    let (rows, entity_docs) = wait_rows(&s.db.url, N as i64, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(2)).await; // late duplicates would show now
    let (rows_after, docs_after) = counts(&s.db.url).await;
    assert_eq!((rows, rows_after), (N as i64, N as i64), "exactly N rows");
    assert_eq!(
        (entity_docs, docs_after),
        (N as i64, N as i64),
        "every event's counts applied exactly once"
    );
    // The group rebalanced: the survivor was assigned partitions again (the dead worker's
    // session expired, and the restarted one joined).
    assert!(
        b.metric("enrichment_rebalances_total", "kind=\"assign\"")
            .await
            > assigns_before,
        "the survivor saw a rebalance after the kill"
    );
}

#[tokio::test]
async fn a_paused_group_reports_exactly_the_backlog_as_lag() {
    let s = setup().await;
    let flags = lab_flags::Store::with_namespace(&s.redis, &s.ns).unwrap();
    let w = s.worker();
    assert_eq!(
        w.wait_metric(
            "enrichment_assigned_partitions",
            "",
            12.0,
            Duration::from_secs(30)
        )
        .await,
        12.0
    );
    // Some events before the pause: the lag is measured from committed offsets, not from 0.
    publish(&s.brokers, &s.topic, 0..20).await;
    assert_eq!(
        wait_rows(&s.db.url, 20, Duration::from_secs(30)).await.0,
        20
    );
    assert_eq!(
        w.wait_metric("enrichment_consumer_lag", "", 0.0, Duration::from_secs(10))
            .await,
        0.0
    );
    // Consuming, the worker measures its lag with the log ends of its own fetches and asks the
    // broker for none (issue 29: tansu's ListOffsets reads the whole partition): two more
    // measurements of its 12 partitions, and the broker counter has not moved.
    const ENDS: &str = "enrichment_lag_log_ends_total";
    let (fetch, broker) = ("source=\"fetch\"", "source=\"broker\"");
    // Until librdkafka's first statistics arrive the worker has no fetch log ends and asks the
    // broker; the zero lag above may come from such a round, and the round after it may still be
    // in flight. Wait for one whole round from fetches: rounds run one after another, so every
    // round counted from here began with the worker's fetch log ends in hand (a CI run read the
    // broker counter 12 above its start when it did not wait).
    assert!(
        w.wait_metric_at_least(ENDS, fetch, 12.0, Duration::from_secs(10))
            .await
            >= 12.0,
        "a consuming worker's log ends come from its fetches"
    );
    let broker0 = w.metric(ENDS, broker).await;
    let fetch0 = w.metric(ENDS, fetch).await;
    assert!(
        w.wait_metric_at_least(ENDS, fetch, fetch0 + 24.0, Duration::from_secs(10))
            .await
            >= fetch0 + 24.0,
        "a consuming worker's log ends come from its fetches"
    );
    assert_eq!(
        w.metric(ENDS, broker).await,
        broker0,
        "and not from the broker"
    );

    flags.set("fault.enrichment.paused", "on").await.unwrap();
    // The worker says when its partitions are paused (not a sleep: it checks the flag on its own
    // schedule).
    assert_eq!(
        w.wait_metric("enrichment_paused", "", 1.0, Duration::from_secs(10))
            .await,
        1.0
    );
    const N: usize = 57;
    publish(&s.brokers, &s.topic, 20..20 + N).await;
    // The worker's own metric and an outside reader of the group's offsets agree: N.
    assert_eq!(
        w.wait_metric(
            "enrichment_consumer_lag",
            "",
            N as f64,
            Duration::from_secs(10)
        )
        .await,
        N as f64
    );
    let (b, g, t) = (s.brokers.clone(), s.group.clone(), s.topic.clone());
    let outside =
        tokio::task::spawn_blocking(move || lab_kafka::lag::group_lag(&b, &g, &t, TIMEOUT))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(outside.iter().map(|l| l.lag).sum::<i64>(), N as i64);
    // Paused, its fetches stop: every partition's log end is the broker's.
    assert!(
        w.wait_metric_at_least(ENDS, broker, broker0 + 12.0, Duration::from_secs(10))
            .await
            >= broker0 + 12.0,
        "a paused worker asks the broker"
    );
    assert_eq!(
        counts(&s.db.url).await.0,
        20,
        "nothing applied while paused"
    );

    flags.set("fault.enrichment.paused", "off").await.unwrap();
    assert_eq!(
        wait_rows(&s.db.url, (20 + N) as i64, Duration::from_secs(30))
            .await
            .0,
        (20 + N) as i64
    );
    assert_eq!(
        w.wait_metric("enrichment_consumer_lag", "", 0.0, Duration::from_secs(10))
            .await,
        0.0
    );
    flags.reset().await.unwrap();
}

/// librdkafka keeps a partition's pause across revoke and re-assign. Paused partitions that move
/// to another worker and come back after the flag went off must be consumed again.
#[tokio::test]
async fn partitions_paused_before_a_rebalance_are_consumed_after_the_flag_goes_off() {
    let s = setup().await;
    let flags = lab_flags::Store::with_namespace(&s.redis, &s.ns).unwrap();
    let w1 = s.worker();
    assert_eq!(
        w1.wait_metric(
            "enrichment_assigned_partitions",
            "",
            12.0,
            Duration::from_secs(30)
        )
        .await,
        12.0
    );
    // Paused with all 12 partitions; a second worker takes some of them away.
    flags.set("fault.enrichment.paused", "on").await.unwrap();
    assert_eq!(
        w1.wait_metric("enrichment_paused", "", 1.0, Duration::from_secs(10))
            .await,
        1.0
    );
    let mut w2 = s.worker();
    assert_eq!(
        w1.wait_metric(
            "enrichment_assigned_partitions",
            "",
            6.0,
            Duration::from_secs(30)
        )
        .await,
        6.0,
        "the second worker took half"
    );
    flags.set("fault.enrichment.paused", "off").await.unwrap();
    assert_eq!(
        w1.wait_metric("enrichment_paused", "", 0.0, Duration::from_secs(10))
            .await,
        0.0
    );
    // The second worker leaves (SIGKILL: no leave-during-rebalance on tansu, see scripts/README);
    // its partitions — paused on w1 before they moved — come back to w1.
    w2.sigkill();
    assert_eq!(
        w1.wait_metric(
            "enrichment_assigned_partitions",
            "",
            12.0,
            Duration::from_secs(60)
        )
        .await,
        12.0
    );
    const N: usize = 48;
    publish(&s.brokers, &s.topic, 0..N).await;
    assert_eq!(
        wait_rows(&s.db.url, N as i64, Duration::from_secs(30))
            .await
            .0,
        N as i64,
        "every partition is consumed again"
    );
    flags.reset().await.unwrap();
}
