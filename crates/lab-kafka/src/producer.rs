//! Publishing from the request path without waiting on the broker.
//!
//! The request path hands an event to librdkafka's local queue and goes on: `publish` never
//! blocks and never awaits the broker. librdkafka batches, sends and retries on its own thread;
//! the outcome comes back in a delivery report. So a slow or dead broker costs an extraction one
//! failed `enqueue` at most — an O(1) in-memory operation — and never its latency budget.
//!
//! How much can wait, and for how long, is two numbers (`[kafka]` settings, with their why in each
//! service's defaults): `queue_max_events` / `queue_max_kbytes` bound the queue — an event that
//! finds it full is dropped at once and counted (`dropped_queue_full`) — and
//! `delivery_timeout_ms` bounds how long a queued event may wait for the broker before its
//! delivery fails (counted, with librdkafka's reason). Nothing is dropped without a count:
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `kafka_producer_events_total` | `topic`, `outcome` | `queued`, `dropped_queue_full`, `dropped_error` (an enqueue librdkafka refused for another reason, e.g. a message over `message.max.bytes`) |
//! | `kafka_producer_delivered_total` | `topic` | delivery reports that say the broker has the event |
//! | `kafka_producer_delivery_failures_total` | `topic`, `reason` | delivery reports that say it never will (`MessageTimedOut` after `delivery_timeout_ms`, `PurgeQueue` at shutdown, ...) |
//! | `kafka_producer_queue_events` | `topic` | events queued or in flight right now |
//! | `kafka_producer_delivery_seconds` | `topic` | enqueue → delivery report (successful ones): how long events waited |

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use serde::Deserialize;

/// `[kafka]` settings of a producing service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProducerSettings {
    /// Comma-separated `host:port`; empty switches publishing off.
    pub brokers: String,
    pub topic: String,
    /// Upper bounds of the local queue (librdkafka `queue.buffering.max.messages` / `.kbytes`).
    pub queue_max_events: u32,
    pub queue_max_kbytes: u32,
    /// How long a queued event may wait for the broker (librdkafka `message.timeout.ms`).
    pub delivery_timeout_ms: u64,
    /// How long librdkafka waits to fill a batch (`linger.ms`).
    pub linger_ms: u32,
    /// Events per batch at most (`batch.num.messages`). The native lab sets
    /// [`crate::lag::NATIVE_BATCH_MAX_EVENTS`] (with a 500 ms linger) against tansu, whose high
    /// watermark is the last batch's base offset + 1 (see [`crate::lag`]).
    pub batch_max_events: u32,
}

impl ProducerSettings {
    /// `None` when publishing is off.
    pub fn bootstrap_servers(&self) -> Option<String> {
        crate::bootstrap_servers(&self.brokers)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.topic.trim().is_empty(),
            "kafka.topic must not be empty"
        );
        anyhow::ensure!(
            self.queue_max_events > 0 && self.queue_max_kbytes > 0,
            "kafka.queue_max_events and kafka.queue_max_kbytes must be at least 1"
        );
        anyhow::ensure!(
            self.delivery_timeout_ms > 0,
            "kafka.delivery_timeout_ms must be at least 1 (0 would mean: wait forever)"
        );
        anyhow::ensure!(
            self.batch_max_events > 0,
            "kafka.batch_max_events must be at least 1"
        );
        Ok(())
    }
}

/// What became of one `publish` call. Either way the caller goes on; the count is already made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    Queued,
    DroppedQueueFull,
    DroppedError,
}

struct Counters {
    queued: IntCounter,
    dropped_queue_full: IntCounter,
    dropped_error: IntCounter,
    delivered: IntCounter,
    failures: IntCounterVec,
    in_queue: IntGauge,
    delivery_seconds: Histogram,
    topic: String,
}

/// librdkafka's callbacks land here, on the producer's own polling thread.
struct Reporter {
    counters: Arc<Counters>,
}

impl ClientContext for Reporter {}

impl ProducerContext for Reporter {
    /// When the event was queued.
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, queued_at: Box<Instant>) {
        let c = &self.counters;
        c.in_queue.dec();
        match result {
            Ok(_) => {
                c.delivered.inc();
                c.delivery_seconds
                    .observe(queued_at.elapsed().as_secs_f64());
            }
            Err((err, _)) => {
                c.failures
                    .with_label_values(&[&c.topic, &reason(err)])
                    .inc();
            }
        }
    }
}

fn reason(err: &KafkaError) -> String {
    match err.rdkafka_error_code() {
        Some(code) => format!("{code:?}"),
        None => "Other".to_string(),
    }
}

/// How long the delivery-report thread waits for an event in one `poll`. rdkafka's
/// `ThreadedProducer` polls in 100 ms calls, and every call ends in a busy loop: `poll` re-waits
/// with the deadline's remainder truncated to whole milliseconds, so its last millisecond is spent
/// polling with a 0 ms timeout (rdkafka 0.39, `Timeout::as_millis`). Measured on an idle native
/// lab (issue 29): 0.0087 cores per orchestrator, all on that thread. Reports still come the
/// moment they exist (the wait ends on an event); this only sets how often the loop wakes with
/// nothing to do, and so the spin: 1 s makes it a thousandth of a core at most, and the thread
/// notices a drop within a second.
const REPORT_WAIT: Duration = Duration::from_secs(1);

/// A producer for one topic. Cheap to share (`Arc`); `publish` is safe from any task.
pub struct EventProducer {
    producer: Arc<BaseProducer<Reporter>>,
    /// Tells the delivery-report thread to finish; it holds the last reference to the producer
    /// and destroys it (purging what is still queued, counted) when it does.
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
}

impl Drop for EventProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The delivery reports' own thread: librdkafka hands them to whoever polls.
fn serve_reports(producer: Arc<BaseProducer<Reporter>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        producer.poll(REPORT_WAIT);
    }
}

impl EventProducer {
    /// `None` when `settings.brokers` is empty (publishing off). Creating the producer does not
    /// contact the broker: a broker that is down at startup only delays deliveries.
    pub fn new(settings: &ProducerSettings, registry: &Registry) -> anyhow::Result<Option<Self>> {
        settings.validate()?;
        let Some(servers) = settings.bootstrap_servers() else {
            return Ok(None);
        };
        let counters = Arc::new(Counters::register(registry, &settings.topic)?);
        let producer: BaseProducer<Reporter> = crate::client_config(&servers)
            .set(
                "queue.buffering.max.messages",
                settings.queue_max_events.to_string(),
            )
            .set(
                "queue.buffering.max.kbytes",
                settings.queue_max_kbytes.to_string(),
            )
            .set(
                "message.timeout.ms",
                settings.delivery_timeout_ms.to_string(),
            )
            .set("linger.ms", settings.linger_ms.to_string())
            .set("batch.num.messages", settings.batch_max_events.to_string())
            // The Java client's partitioner: the same key lands in the same partition whichever
            // client (Rust here, a JVM tool there) produced it.
            .set("partitioner", "murmur2_random")
            // Every replica acknowledges before an event counts as delivered.
            .set("acks", "all")
            .create_with_context(Reporter {
                counters: counters.clone(),
            })
            .map_err(|e| anyhow::anyhow!("kafka producer for {servers}: {e}"))?;
        let producer = Arc::new(producer);
        let stop = Arc::new(AtomicBool::new(false));
        let (p, st) = (producer.clone(), stop.clone());
        std::thread::Builder::new()
            .name("kafka-reports".into())
            .spawn(move || serve_reports(p, st))
            .map_err(|e| anyhow::anyhow!("kafka producer's delivery-report thread: {e}"))?;
        Ok(Some(Self {
            producer,
            stop,
            counters,
        }))
    }

    pub fn topic(&self) -> &str {
        &self.counters.topic
    }

    /// Queue one event. Never blocks, never waits on the broker; the outcome is counted.
    pub fn publish(&self, key: &str, payload: &[u8], headers: &[(&str, &str)]) -> Publish {
        let mut owned = OwnedHeaders::new_with_capacity(headers.len());
        for (k, v) in headers {
            owned = owned.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        }
        let record = BaseRecord::with_opaque_to(&self.counters.topic, Box::new(Instant::now()))
            .key(key)
            .payload(payload)
            .headers(owned);
        let c = &self.counters;
        // Counted before the send: the delivery report (another thread) may arrive before
        // `send` returns, and the gauge must never dip below zero.
        c.in_queue.inc();
        match self.producer.send(record) {
            Ok(()) => {
                c.queued.inc();
                Publish::Queued
            }
            Err((err, _)) => {
                c.in_queue.dec();
                if err.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) {
                    c.dropped_queue_full.inc();
                    Publish::DroppedQueueFull
                } else {
                    c.dropped_error.inc();
                    tracing::warn!(error = %err, topic = %c.topic, "event refused by the producer");
                    Publish::DroppedError
                }
            }
        }
    }

    /// Events queued or in flight.
    pub fn in_flight(&self) -> i32 {
        self.producer.in_flight_count()
    }

    /// Graceful shutdown: wait up to `timeout` for queued events to be delivered. Returns how
    /// many were still undelivered and logs that number — the count that survives the process
    /// (they are purged when the producer is dropped; the `PurgeQueue` / `PurgeInflight` failures
    /// land in a registry nobody scrapes any more). Blocking: call it from `spawn_blocking` or
    /// after the runtime's work is done.
    pub fn flush(&self, timeout: Duration) -> i32 {
        let _ = self.producer.flush(timeout);
        let left = self.producer.in_flight_count();
        if left > 0 {
            tracing::warn!(
                undelivered = left,
                topic = %self.counters.topic,
                "kafka: events still undelivered at shutdown; they are lost (counted)"
            );
        }
        left
    }
}

impl Counters {
    fn register(registry: &Registry, topic: &str) -> anyhow::Result<Self> {
        let events = IntCounterVec::new(
            Opts::new(
                "kafka_producer_events_total",
                "Events handed to the Kafka producer, by outcome: queued, or dropped at once (queue full, refused)",
            ),
            &["topic", "outcome"],
        )?;
        let delivered = IntCounterVec::new(
            Opts::new(
                "kafka_producer_delivered_total",
                "Events the broker acknowledged",
            ),
            &["topic"],
        )?;
        let failures = IntCounterVec::new(
            Opts::new(
                "kafka_producer_delivery_failures_total",
                "Queued events whose delivery failed for good, by librdkafka's reason",
            ),
            &["topic", "reason"],
        )?;
        let in_queue = prometheus::IntGaugeVec::new(
            Opts::new(
                "kafka_producer_queue_events",
                "Events queued in the producer or in flight to the broker",
            ),
            &["topic"],
        )?;
        let delivery_seconds = prometheus::HistogramVec::new(
            HistogramOpts::new(
                "kafka_producer_delivery_seconds",
                "From enqueue to the broker's acknowledgement",
            )
            // From a healthy linger (ms) to a broker outage that the queue rode out (minutes).
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0, 120.0, 300.0,
            ]),
            &["topic"],
        )?;
        registry.register(Box::new(events.clone()))?;
        registry.register(Box::new(delivered.clone()))?;
        registry.register(Box::new(failures.clone()))?;
        registry.register(Box::new(in_queue.clone()))?;
        registry.register(Box::new(delivery_seconds.clone()))?;
        Ok(Self {
            queued: events.with_label_values(&[topic, "queued"]),
            dropped_queue_full: events.with_label_values(&[topic, "dropped_queue_full"]),
            dropped_error: events.with_label_values(&[topic, "dropped_error"]),
            delivered: delivered.with_label_values(&[topic]),
            failures,
            in_queue: in_queue.with_label_values(&[topic]),
            delivery_seconds: delivery_seconds.with_label_values(&[topic]),
            topic: topic.to_string(),
        })
    }
}
