//! The consumer loop.
//!
//! A batch at a time: receive an event and what arrives within `enrich.batch_linger_ms` after it,
//! apply them in one transaction (retrying the write until it succeeds — never skipping a
//! well-formed event), then store their offsets. librdkafka commits stored offsets every second, on
//! every rebalance and at shutdown (`enable.auto.offset.store = false`, `enable.auto.commit =
//! true`): an offset is never committed before its write, so a worker killed at any instant loses
//! nothing — the events after its last commit are read again by the partition's next owner and
//! found already applied.
//!
//! Metrics (the names the alert `EnrichmentConsumerLagGrowing` and the Enrichment dashboard read):
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `enrichment_events_total` | `outcome` | `applied`, `duplicate` (a redelivery, changed nothing), `invalid` (not a `doc.ingested` event: logged and skipped) |
//! | `enrichment_event_duration_seconds` | | one event's write: the transaction of the batch it was applied in, retries included |
//! | `enrichment_batch_events` | | events written in one transaction (`enrich.batch_max_events`, `enrich.batch_linger_ms`) |
//! | `enrichment_event_age_seconds` | | extraction finished → enrichment applied: the lag in time |
//! | `enrichment_consumer_lag` | `partition` | the group's lag: log end − committed offset, reported by each worker for the partitions it fetches, and for EVERY partition of the topic by a worker that fetches none (read it with `max by (partition)`); a group that owns nothing still shows its backlog ([`lab_kafka::lag`], `lag_loop`) |
//! | `enrichment_lag_log_ends_total` | `source` | the log ends each lag measurement used, per partition: `fetch` (the worker's own fetch responses) or `broker` (ListOffsets; on tansu it reads the partition, issue 29) |
//! | `enrichment_rebalances_total` | `kind` | `assign`, `revoke`, `error` |
//! | `enrichment_assigned_partitions` | | partitions this worker owns now |
//! | `enrichment_paused` | | 1 while consumption is paused by `fault.enrichment.paused` |
//! | `enrichment_write_retries_total` | | writes that failed and were retried (PostgreSQL down, a deadlock) |

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lab_api::events::DocIngested;
use lab_core::metrics::Metrics;
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, TopicPartitionList};
use tokio::sync::watch;
use tracing::Instrument as _;

use crate::configuration::Settings;
use crate::store::{self, Applied, ApplyError, Origin};

/// The flag that pauses consumption (deploy/flags/flags.json).
pub const PAUSE_FLAG: &str = "fault.enrichment.paused";

/// How often the loop looks at the pause flag: the flag store's own propagation is ~5 ms, so
/// 250 ms keeps a pause well inside a game-day step without spinning.
const PAUSE_CHECK: Duration = Duration::from_millis(250);

/// Bound on one lag measurement's broker round trips (milliseconds on loopback; a hung broker
/// must not stall the loop for longer).
const LAG_QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often librdkafka reports the fetched partitions' log ends (see `consumer`).
const STATS_INTERVAL_MS: u64 = 1000;

#[derive(Clone)]
pub struct WorkerMetrics {
    applied: IntCounter,
    duplicate: IntCounter,
    invalid: IntCounter,
    duration: Histogram,
    /// Events per transaction (`enrich.batch_max_events`).
    batch: Histogram,
    age: Histogram,
    lag: IntGaugeVec,
    /// Per lag measurement, per partition: where its log end came from (`fetch`, `broker`).
    log_ends: IntCounterVec,
    rebalances: IntCounterVec,
    assigned: IntGauge,
    paused: IntGauge,
    write_retries: IntCounter,
}

impl WorkerMetrics {
    pub fn new(m: &Metrics) -> Self {
        let events = m.counter_vec(
            "enrichment_events_total",
            "doc.ingested events handled, by outcome (applied, duplicate, invalid)",
            &["outcome"],
        );
        Self {
            applied: events.with_label_values(&["applied"]),
            duplicate: events.with_label_values(&["duplicate"]),
            invalid: events.with_label_values(&["invalid"]),
            duration: m.register(
                Histogram::with_opts(
                    HistogramOpts::new(
                        "enrichment_event_duration_seconds",
                        "Time to apply one event: the transaction of the batch it was applied in, retries included",
                    )
                    .buckets(vec![
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
                        30.0,
                    ]),
                )
                .expect("valid metric"),
            ),
            batch: m.register(
                Histogram::with_opts(
                    HistogramOpts::new(
                        "enrichment_batch_events",
                        "Events written in one transaction (well-formed ones; duplicates included)",
                    )
                    .buckets(vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]),
                )
                .expect("valid metric"),
            ),
            age: m.register(
                Histogram::with_opts(
                    HistogramOpts::new(
                        "enrichment_event_age_seconds",
                        "From the extraction's end to its enrichment: the consumer lag in time",
                    )
                    // Milliseconds when keeping up, up to the tens of minutes of a starved group.
                    .buckets(vec![
                        0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
                    ]),
                )
                .expect("valid metric"),
            ),
            lag: m.register(
                IntGaugeVec::new(
                    Opts::new(
                        "enrichment_consumer_lag",
                        "The consumer group's lag: events between its committed offset and the log end, per partition: the partitions this worker fetches, or every partition when it fetches none (read with max by partition)",
                    ),
                    &["partition"],
                )
                .expect("valid metric"),
            ),
            log_ends: m.counter_vec(
                "enrichment_lag_log_ends_total",
                "Log ends the lag was measured with, per partition and measurement, by source: fetch (the worker's own fetch responses, free), broker (a ListOffsets request, which tansu answers by reading the partition)",
                &["source"],
            ),
            rebalances: m.counter_vec(
                "enrichment_rebalances_total",
                "Consumer-group rebalances this worker took part in (assign, revoke, error)",
                &["kind"],
            ),
            assigned: m.gauge(
                "enrichment_assigned_partitions",
                "Partitions of doc.ingested this worker owns",
            ),
            paused: m.gauge(
                "enrichment_paused",
                "1 while this worker has paused consumption (flag fault.enrichment.paused)",
            ),
            write_retries: m.register(
                IntCounter::new(
                    "enrichment_write_retries_total",
                    "Event writes that failed and were retried (the event is never skipped)",
                )
                .expect("valid metric"),
            ),
        }
    }
}

/// librdkafka's callbacks (rebalances run inside `recv`, on the loop's task).
pub struct WorkerContext {
    metrics: WorkerMetrics,
    paused: AtomicBool,
    /// Per partition: the last offset received + 1 (the lag's log-end floor, see lab_kafka::lag).
    consumed_end: Mutex<HashMap<i32, i64>>,
    /// Per partition this worker is fetching: the log end its last fetch response carried
    /// (librdkafka's statistics, every `lag_interval_ms`). The lag loop asks the broker only for
    /// the others: tansu's ListOffsets reads the whole partition (see lab_kafka::lag::measure).
    fetched_end: Mutex<HashMap<i32, i64>>,
    topic: String,
}

impl ClientContext for WorkerContext {
    fn stats(&self, stats: Statistics) {
        let Some(topic) = stats.topics.get(&self.topic) else {
            return;
        };
        // Only partitions being fetched now: a paused or stopped one's `hi_offset` is as old as
        // its last fetch.
        let ends = topic
            .partitions
            .values()
            .filter(|p| p.partition >= 0 && p.fetch_state == "active" && p.hi_offset >= 0)
            .map(|p| (p.partition, p.hi_offset));
        let mut fetched = self.fetched_end.lock().expect("not poisoned");
        fetched.clear();
        fetched.extend(ends);
    }
}

impl ConsumerContext for WorkerContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                self.metrics.rebalances.with_label_values(&["revoke"]).inc();
                // No commit here: with enable.auto.commit librdkafka itself commits the stored
                // offsets of the partitions it removes, and a Sync commit from this callback would
                // block the runtime thread polling the consumer without a bound.
                // The floor of the lag's log end is only known for partitions this worker reads.
                let mut ends = self.consumed_end.lock().expect("not poisoned");
                let mut fetched = self.fetched_end.lock().expect("not poisoned");
                for e in tpl.elements() {
                    ends.remove(&e.partition());
                    fetched.remove(&e.partition());
                }
                tracing::info!(partitions = ?partitions_of(tpl), "partitions revoked");
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(e) => {
                self.metrics.rebalances.with_label_values(&["error"]).inc();
                tracing::warn!(error = %e, "rebalance error");
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.metrics.rebalances.with_label_values(&["assign"]).inc();
            // Both ways, every time: librdkafka keeps a partition's application-level pause across
            // revoke and re-assign, so a partition that moved away while the flag was on and came
            // back after it went off would otherwise never be fetched again.
            if tpl.count() > 0 {
                let res = if self.paused.load(Ordering::SeqCst) {
                    consumer.pause(tpl)
                } else {
                    consumer.resume(tpl)
                };
                if let Err(e) = res {
                    tracing::warn!(error = %e, "could not pause/resume newly assigned partitions");
                }
            }
            tracing::info!(partitions = ?partitions_of(tpl), "partitions assigned");
        }
        let owned = consumer.assignment().map_or(0, |a| a.count());
        self.metrics.assigned.set(owned as i64);
    }
}

/// A record header's value as text.
fn header(msg: &BorrowedMessage<'_>, key: &str) -> Option<String> {
    use rdkafka::message::Headers;
    let headers = msg.headers()?;
    headers
        .iter()
        .find(|h| h.key == key)
        .and_then(|h| h.value)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned)
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

fn commit_stored<C: ConsumerContext>(consumer: &impl Consumer<C>, why: &str) {
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => {}
        // Nothing stored since the last commit.
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => tracing::warn!(error = %e, why, "committing stored offsets failed"),
    }
}

pub type WorkerConsumer = StreamConsumer<WorkerContext>;

/// A client for the lag's offset queries: the group id, never subscribed, never committing.
pub fn offsets_reader(settings: &Settings) -> anyhow::Result<Arc<BaseConsumer>> {
    let k = &settings.kafka;
    let servers = lab_kafka::bootstrap_servers(&k.brokers)
        .ok_or_else(|| anyhow::anyhow!("kafka.brokers is empty"))?;
    let reader: BaseConsumer = lab_kafka::client_config(&servers)
        .set("group.id", &k.group_id)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| anyhow::anyhow!("kafka offsets reader for {servers}: {e}"))?;
    Ok(Arc::new(reader))
}

/// Create the consumer and join the group.
pub fn consumer(
    settings: &Settings,
    metrics: WorkerMetrics,
) -> anyhow::Result<Arc<WorkerConsumer>> {
    let k = &settings.kafka;
    let servers = lab_kafka::bootstrap_servers(&k.brokers)
        .ok_or_else(|| anyhow::anyhow!("kafka.brokers is empty"))?;
    let consumer: WorkerConsumer = lab_kafka::client_config(&servers)
        .set("group.id", &k.group_id)
        // At-least-once: offsets are stored by the loop after the write, committed by librdkafka.
        .set("enable.auto.offset.store", "false")
        .set("enable.auto.commit", "true")
        // One second of applied-but-uncommitted events is what a kill re-reads (and finds applied).
        .set("auto.commit.interval.ms", "1000")
        // A group with no committed offset (first start, new topic) reads from the beginning:
        // events published before any worker ran are enriched too.
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", k.session_timeout_ms.to_string())
        .set("max.poll.interval.ms", k.max_poll_interval_ms.to_string())
        .set("fetch.wait.max.ms", k.fetch_wait_max_ms.to_string())
        .set("fetch.min.bytes", k.fetch_min_bytes.to_string())
        // The log ends of the partitions this worker fetches, for the lag (WorkerContext::stats):
        // at most a second old when the lag loop reads them, a parse of a few KB of JSON a second.
        .set(
            "statistics.interval.ms",
            k.lag_interval_ms.min(STATS_INTERVAL_MS).to_string(),
        )
        .set(
            "heartbeat.interval.ms",
            (k.session_timeout_ms / 3).max(1).to_string(),
        )
        .create_with_context(WorkerContext {
            metrics,
            paused: AtomicBool::new(false),
            consumed_end: Mutex::new(HashMap::new()),
            fetched_end: Mutex::new(HashMap::new()),
            topic: k.topic.clone(),
        })
        .map_err(|e| anyhow::anyhow!("kafka consumer for {servers}: {e}"))?;
    consumer
        .subscribe(&[&k.topic])
        .map_err(|e| anyhow::anyhow!("subscribing to {}: {e}", k.topic))?;
    Ok(Arc::new(consumer))
}

/// Everything the loop needs.
pub struct Worker {
    pub consumer: Arc<WorkerConsumer>,
    /// Reads the group's committed offsets and the watermarks for the lag (see [`lag_loop`]).
    pub offsets_reader: Arc<BaseConsumer>,
    pub pool: deadpool_postgres::Pool,
    pub flags: Arc<lab_flags::Flags>,
    pub settings: Settings,
}

impl Worker {
    /// Run until `stop` turns true: finish the event in hand, commit, return. The caller drops
    /// the consumer afterwards, which leaves the group (its partitions move at once rather than
    /// after the session timeout).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let lag = tokio::spawn(lag_loop(
            self.consumer.clone(),
            self.offsets_reader.clone(),
            self.settings.kafka.topic.clone(),
            Duration::from_millis(self.settings.kafka.lag_interval_ms),
        ));
        let mut check = tokio::time::interval(PAUSE_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                _ = check.tick() => self.sync_pause(),
                msg = self.consumer.recv() => match msg {
                    Ok(first) => {
                        let batch = self.gather(first).await;
                        if !self.handle(&batch, &mut stop).await {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "kafka consumer error");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        lag.abort();
        let consumer = self.consumer.clone();
        let _ =
            tokio::task::spawn_blocking(move || commit_stored(consumer.as_ref(), "shutdown")).await;
        tracing::info!("enrichment worker stopped; offsets committed");
    }

    /// Pause or resume every owned partition to follow the flag.
    fn sync_pause(&self) {
        let want = self.flags.snapshot().enabled(PAUSE_FLAG);
        let ctx = self.consumer.context();
        if ctx.paused.load(Ordering::SeqCst) == want {
            return;
        }
        let owned = match self.consumer.assignment() {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "reading the assignment failed; retrying");
                return;
            }
        };
        let res = if want {
            self.consumer.pause(&owned)
        } else {
            self.consumer.resume(&owned)
        };
        match res {
            // Recorded only once done, so a failed pause/resume is tried again on the next check.
            Ok(()) => {
                ctx.paused.store(want, Ordering::SeqCst);
                ctx.metrics.paused.set(i64::from(want));
                tracing::info!(paused = want, partitions = ?partitions_of(&owned), "flag {PAUSE_FLAG}")
            }
            Err(e) => tracing::warn!(error = %e, paused = want, "pause/resume failed; retrying"),
        }
    }

    /// `first` and what else arrives within `enrich.batch_linger_ms` of it, up to
    /// `enrich.batch_max_events`.
    async fn gather<'a>(&'a self, first: BorrowedMessage<'a>) -> Vec<BorrowedMessage<'a>> {
        let e = &self.settings.enrich;
        let until = tokio::time::Instant::now() + Duration::from_millis(e.batch_linger_ms);
        let mut batch = vec![first];
        while batch.len() < e.batch_max_events {
            match tokio::time::timeout_at(until, self.consumer.recv()).await {
                Ok(Ok(msg)) => batch.push(msg),
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "kafka consumer error");
                    break;
                }
                Err(_linger_over) => break,
            }
        }
        batch
    }

    /// Apply a batch of messages and store their offsets. `false`: stopping (the write could not
    /// finish before shutdown; the offsets stay unstored, so the events are read again).
    async fn handle(
        &self,
        batch: &[BorrowedMessage<'_>],
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let m = &self.consumer.context().metrics;
        let started = Instant::now();
        {
            let mut ends = self
                .consumer
                .context()
                .consumed_end
                .lock()
                .expect("not poisoned");
            for msg in batch {
                let end = ends.entry(msg.partition()).or_insert(0);
                *end = (*end).max(msg.offset() + 1);
            }
        }
        let mut events = Vec::with_capacity(batch.len());
        let mut spans = Vec::with_capacity(batch.len());
        for msg in batch {
            let (partition, offset) = (msg.partition(), msg.offset());
            match msg.payload().map(serde_json::from_slice::<DocIngested>) {
                Some(Ok(event)) => {
                    // A child of the extraction's trace (the record's `traceparent`), so a trace
                    // shows the enrichment that followed a request, however much later it ran. A
                    // consumer span: nobody waits for it, so outliving the request is its
                    // contract, not an orphan (crates/lab-traces tells the two apart by this
                    // kind). It lasts as long as the batch that applies the event.
                    let span = tracing::info_span!(
                        "enrichment.Apply",
                        otel.kind = "consumer",
                        event_id = %event.event_id,
                        partition,
                        offset,
                        batch = batch.len()
                    );
                    lab_core::telemetry::propagation::set_parent_with(&span, |k| header(msg, k));
                    spans.push(span);
                    events.push((event, Origin { partition, offset }));
                }
                other => {
                    // A poison message must not stall its partition: count, log, move on.
                    m.invalid.inc();
                    let why = match other {
                        None => "empty payload".to_string(),
                        Some(Err(e)) => e.to_string(),
                        Some(Ok(_)) => unreachable!(),
                    };
                    tracing::warn!(partition, offset, error = %why, "skipping a message that is not a doc.ingested event");
                }
            }
        }
        if !events.is_empty() {
            let batch_span = tracing::info_span!("enrichment.ApplyBatch", events = events.len());
            let Some(outcomes) = self
                .apply_until_done(&events, stop)
                .instrument(batch_span)
                .await
            else {
                return false;
            };
            let took = started.elapsed().as_secs_f64();
            m.batch.observe(events.len() as f64);
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            for ((event, origin), outcome) in events.iter().zip(outcomes) {
                match outcome {
                    Ok(Applied::New) => m.applied.inc(),
                    Ok(Applied::Duplicate) => m.duplicate.inc(),
                    Err(why) => {
                        // Retrying cannot help; stalling the partition behind it would be worse.
                        m.invalid.inc();
                        tracing::warn!(partition = origin.partition, offset = origin.offset, event_id = %event.event_id, error = %why, "skipping an event the schema rejects");
                    }
                }
                m.duration.observe(took);
                m.age.observe(
                    now_ms.saturating_sub(event.extracted_at_unix_ms).max(0) as f64 / 1000.0,
                );
            }
        }
        drop(spans);
        for msg in batch {
            if let Err(e) = self.consumer.store_offset_from_message(msg) {
                // The partition was revoked meanwhile: its next owner re-reads this event and
                // finds it applied.
                tracing::warn!(partition = msg.partition(), offset = msg.offset(), error = %e, "could not store the offset");
            }
        }
        true
    }

    /// The batch's write, retried with capped exponential backoff until it succeeds or the
    /// worker stops (`None`). One result per event; an event the schema cannot hold is
    /// `Err(why)`, not retried. When PostgreSQL refuses the batch for some event's values, the
    /// events are applied one by one, so only that event is skipped.
    async fn apply_until_done(
        &self,
        events: &[(DocIngested, Origin)],
        stop: &mut watch::Receiver<bool>,
    ) -> Option<Vec<Result<Applied, String>>> {
        let e = &self.settings.enrich;
        let refs: Vec<(&DocIngested, Origin)> = events.iter().map(|(ev, o)| (ev, *o)).collect();
        let mut one_by_one = false;
        // One by one, the outcomes so far: a retry after a transient failure goes on from the
        // first event not yet applied, so those before keep their outcome (applied, not found
        // again as duplicates).
        let mut done: Vec<Result<Applied, String>> = Vec::with_capacity(refs.len());
        let mut backoff = Duration::from_millis(e.retry_initial_ms);
        loop {
            let attempt = async {
                let mut client = self.pool.get().await.map_err(|e| e.to_string())?;
                if !one_by_one {
                    return store::apply_batch(&mut client, &refs, e.max_entities_for_pairs)
                        .await
                        .map(Some)
                        .map_err(|e| e.to_string());
                }
                for &(event, origin) in &refs[done.len()..] {
                    match store::apply(&mut client, event, origin, e.max_entities_for_pairs).await {
                        Ok(applied) => done.push(Ok(applied)),
                        Err(ApplyError::Permanent(why)) => done.push(Err(why)),
                        Err(transient) => return Err(transient.to_string()),
                    }
                }
                Ok(None)
            };
            match attempt.await {
                Ok(Some(outcomes)) => return Some(outcomes),
                Ok(None) => return Some(done),
                Err(err) if err.starts_with("permanent: ") && !one_by_one => {
                    tracing::warn!(error = %err, events = refs.len(), "the batch was refused for some event's values; applying its events one by one");
                    one_by_one = true;
                    continue;
                }
                Err(err) => {
                    self.consumer.context().metrics.write_retries.inc();
                    tracing::warn!(
                        error = %err,
                        events = refs.len(),
                        retry_in_ms = backoff.as_millis() as u64,
                        "enrichment write failed; retrying"
                    );
                }
            }
            tokio::select! {
                _ = stop.changed() => return None,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_millis(e.retry_max_ms));
        }
    }
}

/// Every `interval`: the group's lag (blocking broker round trips, off the async threads), on the
/// partitions this worker is fetching, their log ends from its own fetch responses (see
/// [`WorkerContext`]). A worker that fetches nothing — paused, stuck in a rebalance, owning no
/// partition — asks the broker for EVERY partition of the topic instead: a group can own nothing,
/// every member stuck in a rebalance that never completes, as tansu does to a group two members
/// left at once (seen in a game day: 0 partitions assigned, 11,333 events behind, and a per-owner
/// metric that showed nothing at all). So `max by (partition)` over the workers is the group's lag
/// whether it is consuming or stuck, and a consuming group costs the broker no ListOffsets (issue
/// 29: tansu's reads the whole partition; two workers asking for all 12 every 5 s were most of an
/// idle broker's CPU). The offsets are read by a client of their own that carries the group id
/// but never joins: on the consumer's own connection every query would wait behind its fetch
/// long-poll (brokers answer a connection's requests in order; `kafka.fetch_wait_max_ms`), which
/// made twelve partitions' queries time out while the worker was consuming (seen in the pause
/// test).
async fn lag_loop(
    consumer: Arc<WorkerConsumer>,
    reader: Arc<BaseConsumer>,
    topic: String,
    interval: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported = BTreeSet::new();
    loop {
        tick.tick().await;
        let (c, r, t) = (consumer.clone(), reader.clone(), topic.clone());
        let res = tokio::task::spawn_blocking(move || {
            let ends = c
                .context()
                .consumed_end
                .lock()
                .expect("not poisoned")
                .clone();
            // While the worker is paused its fetch responses stop: every log end from the broker.
            let fetched = if c.context().paused.load(Ordering::SeqCst) {
                HashMap::new()
            } else {
                c.context()
                    .fetched_end
                    .lock()
                    .expect("not poisoned")
                    .clone()
            };
            let partitions: Vec<i32> = if fetched.is_empty() {
                // Every partition of the topic: the GROUP's backlog, owned or not.
                let md = r.fetch_metadata(Some(&t), LAG_QUERY_TIMEOUT)?;
                md.topics()
                    .iter()
                    .filter(|x| x.name() == t)
                    .flat_map(|x| x.partitions().iter().map(|p| p.id()))
                    .collect()
            } else {
                fetched.keys().copied().collect()
            };
            let lags = lab_kafka::lag::measure(
                r.as_ref(),
                &t,
                &partitions,
                &fetched,
                &ends,
                LAG_QUERY_TIMEOUT,
            );
            // Serve the reader's own queue (its log and error events land there): unpolled, it
            // would grow for as long as the worker runs.
            let _ = r.poll(Duration::ZERO);
            lags.map(|l| (l, fetched.len()))
        })
        .await;
        match res {
            Ok(Ok((lags, from_fetch))) => {
                let m = &consumer.context().metrics;
                m.log_ends
                    .with_label_values(&["fetch"])
                    .inc_by(from_fetch as u64);
                m.log_ends
                    .with_label_values(&["broker"])
                    .inc_by((lags.len() - from_fetch.min(lags.len())) as u64);
                let gauge = &m.lag;
                let now: BTreeSet<i32> = lags.iter().map(|l| l.partition).collect();
                // A partition this worker no longer reports (moved to another worker) must not
                // keep its last value: `max by (partition)` would read it for ever.
                for gone in reported.difference(&now) {
                    let _ = gauge.remove_label_values(&[&gone.to_string()]);
                }
                for l in &lags {
                    gauge
                        .with_label_values(&[&l.partition.to_string()])
                        .set(l.lag);
                }
                reported = now;
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "measuring consumer lag failed"),
            Err(e) => tracing::warn!(error = %e, "lag task failed"),
        }
    }
}
