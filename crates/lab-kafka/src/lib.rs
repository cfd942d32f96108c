//! The lab's Kafka plumbing, shared by the orchestrator (producer), the enrichment workers
//! (consumers), labctl (topic creation) and the tests.
//!
//! librdkafka (bundled, through rdkafka) does the protocol work. What this crate adds is the
//! lab's policy around it:
//!
//! - [`producer`]: publishing from the request path without ever waiting on the broker — a
//!   bounded local queue, delivery reported asynchronously, and every event that could not be
//!   queued or delivered counted by reason (never silently dropped).
//! - [`topic`]: `doc.ingested` created idempotently with its 12 partitions, and refused loudly if
//!   it exists with another count (keys would map to other partitions than the design says).
//! - [`lag`]: consumer lag per partition from the group's committed offsets and the log end, the
//!   way `kafka-consumer-groups.sh --describe` computes it, with a floor for brokers whose high
//!   watermark lags what consumers have already read (tansu, see the module).

pub mod lag;
pub mod producer;
pub mod topic;

pub use producer::{EventProducer, ProducerSettings};

/// A librdkafka configuration for `servers` (`host:port,...`), the starting point of every client
/// the lab creates. `LAB_KAFKA_DEBUG` (librdkafka debug contexts, e.g. `cgrp,topic,fetch`) turns
/// on librdkafka's own debug log — how to see a consumer group's join and sync steps. It arrives
/// as log events of target `librdkafka` (the services' subscriber bridges the `log` crate), so
/// also let them through: `RUST_LOG=info,librdkafka=debug`.
pub fn client_config(servers: &str) -> rdkafka::ClientConfig {
    let mut c = rdkafka::ClientConfig::new();
    c.set("bootstrap.servers", servers);
    // KIP-714 client metrics push: off. The lab reads its clients' numbers from its own
    // Prometheus metrics, and a broker without the feature (tansu 0.6) is asked again for its
    // telemetry subscriptions every 5 s by every client — 12 requests a minute each, a fifth of
    // an idle lab's requests at the broker (issue 29; counted in librdkafka's protocol log).
    c.set("enable.metrics.push", "false");
    if let Ok(contexts) = std::env::var("LAB_KAFKA_DEBUG") {
        if !contexts.trim().is_empty() {
            c.set("debug", contexts.trim());
        }
    }
    c
}

/// Comma-separated `host:port` list → the form librdkafka takes (`bootstrap.servers`), trimmed;
/// `None` when empty (Kafka switched off).
pub fn bootstrap_servers(list: &str) -> Option<String> {
    let hosts: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    (!hosts.is_empty()).then(|| hosts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_servers_trims_and_treats_empty_as_off() {
        assert_eq!(bootstrap_servers(""), None);
        assert_eq!(bootstrap_servers(" , "), None);
        assert_eq!(
            bootstrap_servers(" kafka-0:9092, kafka-1:9092 ,"),
            Some("kafka-0:9092,kafka-1:9092".into())
        );
    }
}
