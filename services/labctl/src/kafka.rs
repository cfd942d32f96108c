//! `labctl kafka lag`: the consumer group's lag per partition, computed like
//! `kafka-consumer-groups.sh --describe --group enrichment-workers` (the postmortem's "Step 3:
//! Kafka") — from the group's committed offsets and the log end, read from outside the group.

use std::path::Path;
use std::time::Duration;

use lab_api::events::{DOC_INGESTED_TOPIC, ENRICHMENT_GROUP};

#[derive(Debug, clap::Subcommand)]
pub enum KafkaCommand {
    /// Lag per partition of a consumer group (default: enrichment-workers on doc.ingested).
    Lag {
        #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "127.0.0.1:9092")]
        brokers: String,
        /// Default: the group of the running native lab's workers (`labctl up` starts a new one
        /// per run), else enrichment-workers.
        #[arg(long)]
        group: Option<String>,
        #[arg(long, default_value = DOC_INGESTED_TOPIC)]
        topic: String,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
}

/// The consumer group the running native lab's workers use, from `labctl up`'s plan.
fn running_group(state_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(state_dir.join("run").join("plan.json")).ok()?;
    let plan: lab_native::supervise::Plan = serde_json::from_str(&text).ok()?;
    plan.procs
        .iter()
        .find(|p| p.binary == "enrichment")
        .and_then(|p| p.env.get("LAB_KAFKA__GROUP_ID").cloned())
}

pub async fn run(command: KafkaCommand, state_dir: &Path) -> anyhow::Result<()> {
    match command {
        KafkaCommand::Lag {
            brokers,
            group,
            topic,
            json,
        } => {
            let group = group
                .or_else(|| running_group(state_dir))
                .unwrap_or_else(|| ENRICHMENT_GROUP.to_string());
            let (b, g, t) = (brokers.clone(), group.clone(), topic.clone());
            let lags = tokio::task::spawn_blocking(move || {
                lab_kafka::lag::group_lag(&b, &g, &t, Duration::from_secs(10))
            })
            .await??;
            if json {
                let rows: Vec<_> = lags
                    .iter()
                    .map(|l| {
                        serde_json::json!({
                            "partition": l.partition, "committed": l.committed,
                            "log_end": l.log_end, "lag": l.lag,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "group": group, "topic": topic, "partitions": rows,
                        "total_lag": lags.iter().map(|l| l.lag).sum::<i64>(),
                    }))?
                );
                return Ok(());
            }
            println!(
                "{:<20} {:<16} {:>9} {:>14} {:>14} {:>8}",
                "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"
            );
            for l in &lags {
                println!(
                    "{:<20} {:<16} {:>9} {:>14} {:>14} {:>8}",
                    group,
                    topic,
                    l.partition,
                    l.committed.map_or("-".to_string(), |c| c.to_string()),
                    l.log_end,
                    l.lag
                );
            }
            println!(
                "total lag {} (log end from the high watermark; on tansu up to {} short per partition, \
                 so a committed offset can read past it; see crates/lab-kafka/src/lag.rs)",
                lags.iter().map(|l| l.lag).sum::<i64>(),
                lab_kafka::lag::NATIVE_BATCH_MAX_EVENTS - 1
            );
            Ok(())
        }
    }
}
