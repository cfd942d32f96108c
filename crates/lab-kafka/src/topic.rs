//! Creating a topic idempotently, with the partition count the design says.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    Created,
    AlreadyThere,
}

/// An admin client for `bootstrap`, and options that bound each operation by `timeout`.
fn admin(
    bootstrap: &str,
    timeout: Duration,
) -> anyhow::Result<(AdminClient<DefaultClientContext>, AdminOptions)> {
    let admin = crate::client_config(bootstrap)
        .create()
        .with_context(|| format!("kafka admin client for {bootstrap}"))?;
    let opts = AdminOptions::new()
        .operation_timeout(Some(timeout))
        .request_timeout(Some(timeout));
    Ok((admin, opts))
}

/// Create `topic` with `partitions` partitions unless it exists; if it exists with another
/// partition count, fail: keys would hash to other partitions than the lab's numbers assume, and
/// shrinking is impossible in Kafka anyway, so a human must decide.
pub async fn ensure(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
    timeout: Duration,
) -> anyhow::Result<Ensured> {
    let (admin, opts) = admin(bootstrap, timeout)?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    let results = admin
        .create_topics([&new], &opts)
        .await
        .with_context(|| format!("creating topic {topic} on {bootstrap}"))?;
    let ensured = match results.into_iter().next() {
        Some(Ok(_)) => Ensured::Created,
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ensured::AlreadyThere,
        Some(Err((_, code))) => bail!("creating topic {topic} on {bootstrap}: {code:?}"),
        None => bail!("creating topic {topic} on {bootstrap}: the broker answered nothing"),
    };
    let found = partition_count(Arc::new(admin), topic, timeout).await?;
    if found != partitions {
        bail!(
            "topic {topic} on {bootstrap} has {found} partitions, the lab needs {partitions}: \
             delete it (or point the lab at another topic) and run again"
        );
    }
    Ok(ensured)
}

/// Delete `topic` with every event the broker holds in it, then create it as [`ensure`] does.
/// Returns how many times the create was tried: a broker may finish a deletion after it
/// answered (Kafka marks a topic for deletion), and a create meanwhile finds it still there.
pub async fn recreate(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
    timeout: Duration,
) -> anyhow::Result<u32> {
    let (admin, opts) = admin(bootstrap, timeout)?;
    let deleted = admin
        .delete_topics(&[topic], &opts)
        .await
        .with_context(|| format!("deleting topic {topic} on {bootstrap}"))?;
    match deleted.into_iter().next() {
        Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::UnknownTopicOrPartition))) => {}
        Some(Err((_, code))) => bail!("deleting topic {topic} on {bootstrap}: {code:?}"),
        None => bail!("deleting topic {topic} on {bootstrap}: the broker answered nothing"),
    }
    // Only the create is retried, within what is left of `timeout`: a topic still being
    // deleted answers TopicAlreadyExists (with whatever partitions it had).
    let deadline = tokio::time::Instant::now() + timeout;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    let mut tries = 0;
    loop {
        tries += 1;
        let created = admin
            .create_topics([&new], &opts)
            .await
            .with_context(|| format!("creating topic {topic} on {bootstrap}"))?;
        match created.into_iter().next() {
            Some(Ok(_)) => break,
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists)))
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => {
                bail!("topic {topic} on {bootstrap} was still there {timeout:?} after its deletion")
            }
            Some(Err((_, code))) => bail!("creating topic {topic} on {bootstrap}: {code:?}"),
            None => bail!("creating topic {topic} on {bootstrap}: the broker answered nothing"),
        }
    }
    let left = deadline
        .saturating_duration_since(tokio::time::Instant::now())
        .max(Duration::from_secs(1));
    let found = partition_count(Arc::new(admin), topic, left).await?;
    if found != partitions {
        bail!("topic {topic} on {bootstrap} was created with {found} partitions, not {partitions}");
    }
    Ok(tries)
}

/// Partitions of `topic` per the broker's metadata (waits, bounded, for a just-created topic to
/// show up in it).
async fn partition_count(
    admin: Arc<AdminClient<DefaultClientContext>>,
    topic: &str,
    timeout: Duration,
) -> anyhow::Result<i32> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // fetch_metadata blocks (a broker round trip): off the async threads.
        let (a, t) = (admin.clone(), topic.to_string());
        let md = tokio::task::spawn_blocking(move || a.inner().fetch_metadata(Some(&t), timeout))
            .await?
            .with_context(|| format!("reading metadata of topic {topic}"))?;
        let n = md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len() as i32);
        if n > 0 || tokio::time::Instant::now() >= deadline {
            return Ok(n);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
