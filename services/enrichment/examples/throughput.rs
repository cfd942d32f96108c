//! How many events per second one enrichment worker applies here: publish M events to a fresh
//! topic, start one worker (its own group, a fresh database), time until all M are applied.
//!
//!   cargo run --release -p enrichment --example throughput -- [EVENTS] [--json FILE]
//!
//! Needs DATABASE_URL, REDIS_URL, KAFKA_BOOTSTRAP (defaults: the services scripts/deps.sh runs).
//! Each event mentions 8 entities (28 co-occurrence pairs), like a seeded document's resolved
//! entities. Bounded: gives up after 10 minutes.

use std::time::{Duration, Instant};

use lab_api::events::{DocIngested, Mention};
use lab_kafka::{EventProducer, ProducerSettings};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let events: usize = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let json_out = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1).cloned());

    let brokers = testkit::kafka_bootstrap().await;
    let db = testkit::TestDb::new().await;
    let topic = testkit::unique_name("bench.doc.ingested");
    lab_kafka::topic::ensure(&brokers, &topic, 12, 1, Duration::from_secs(10)).await?;

    // Published before the worker starts, so the worker is never waiting for input.
    let registry = prometheus::Registry::new();
    let producer = EventProducer::new(
        &ProducerSettings {
            brokers: brokers.clone(),
            topic: topic.clone(),
            queue_max_events: 1_000_000,
            queue_max_kbytes: 1_048_576,
            delivery_timeout_ms: 120_000,
            linger_ms: 5,
            batch_max_events: 10_000,
        },
        &registry,
    )?
    .expect("brokers set");
    for i in 0..events {
        let tenant = (i % 50) as i64 + 1;
        let e = DocIngested {
            event_id: format!("bench-{i}"),
            doc_id: format!("doc-{i}"),
            tenant_id: tenant,
            locale: None,
            mentions: (0..8)
                .map(|k| Mention {
                    entity_id: tenant * 10_000 + ((i * 7 + k * 131) % 500) as i64,
                    count: 1 + (k % 3) as u32,
                })
                .collect(),
            unresolved: 2,
            spans: 12,
            cache_hits: 8,
            duration_ms: 3.0,
            extracted_at_unix_ms: 1_700_000_000_000,
        };
        producer.publish(&e.doc_id, &serde_json::to_vec(&e)?, &[]);
    }
    while producer.in_flight() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut s = enrichment::Settings::defaults()?;
    s.http.port = 0;
    s.admin.port = 0;
    s.database.url = db.url.clone();
    // The test database's owner: this bench measures the worker, not its role.
    s.database.allow_superuser = true;
    s.kafka.brokers = brokers.clone();
    s.kafka.topic = topic.clone();
    s.kafka.group_id = testkit::unique_name("bench-group");
    s.flags.redis_url = testkit::redis_url().await;
    s.flags.namespace = testkit::unique_name("bench");
    let app = enrichment::Application::build(s).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(app.run_until_stopped(async move {
        let _ = stop_rx.await;
    }));

    let mut conn = lab_db::connect(&db.url).await?;
    let t0 = Instant::now();
    let mut first: Option<Instant> = None;
    loop {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM enrichment_documents")
            .fetch_one(&mut conn)
            .await?;
        if n > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        if n as usize >= events {
            break;
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(600),
            "only {n} of {events} applied in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // From the first applied event: the group join (a few seconds) is not throughput.
    let secs = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    let eps = events as f64 / secs.max(1e-9);
    println!(
        "one enrichment worker: {events} events (8 entities, 28 pairs each) applied in {secs:.2} s \
         after the first -> {eps:.0} events/s; group join + first event {:.2} s",
        first.map_or(0.0, |f| (f - t0).as_secs_f64())
    );
    if let Some(path) = json_out {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&serde_json::json!({
                "events": events, "seconds": secs, "events_per_second": eps,
            }))?,
        )?;
    }
    let _ = stop_tx.send(());
    run.await??;
    Ok(())
}
