//! The flag store: a Redis hash plus a pub/sub channel.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use futures::Stream;

/// The namespace every lab process uses unless told otherwise; tests use their own.
pub const DEFAULT_NAMESPACE: &str = "lab";
// Keys: `<namespace>:flags` (hash: field = flag name, value = variant name) and
// `<namespace>:flags:changed` (channel: published after every change; payload = the flag name).
/// A field every write leaves in the hash (`set`, `unset`, `reset`): a hash without it was never
/// written by labctl or has lost what was written — Redis restarted without persistence (this
/// lab's Redis keeps nothing on disk), a failover to an empty replica, a hand-run `DEL`. Told
/// apart from "every flag at its default", which is a hash holding only this field.
pub const WRITTEN_FIELD: &str = "_written";

/// What the store holds: the flags' values, and whether it has ever been written (and still
/// remembers it) — see [`WRITTEN_FIELD`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contents {
    pub values: BTreeMap<String, String>,
    pub written: bool,
}

/// A call to the store may take this long before it counts as a failure (the connect, its
/// handshake and the command each; the redis crate's own 500 ms response timeout is off). No
/// request waits on the store: reloads run in the background, and a reload that waits longer only
/// delays a flag that would otherwise not arrive at all. 5 s, the re-read interval
/// ([`crate::REFRESH_INTERVAL`]): waiting longer gets no value sooner than the next re-read. It
/// was 500 ms, a loopback round trip's worth with room to spare; on a machine starved by the
/// replay's storm a round trip from the gateway took longer, every reload timed out and
/// reconnected, and the kill switch `retries.gateway.enabled=off` reached the gateway 15–18 s
/// after the flip (issue 26, replays of 764dfb3 and 7aea896).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Store {
    client: redis::Client,
    hash_key: String,
    channel: String,
    /// The connection [`Store::read`] keeps between reads (shared by the store's clones),
    /// replaced after any failure. A new connection per read was a TCP connect, AUTH and the
    /// client's setup commands before the `HGETALL`, all inside one 500 ms timeout: on a
    /// machine starved by a storm the gateway's reloads failed for 15 s, and the kill switch
    /// `retries.gateway.enabled=off` reached it a step late (issue 26, replay of 764dfb3).
    reader: std::sync::Arc<tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>>,
}

impl Store {
    /// The lab's store at `redis_url`.
    pub fn new(redis_url: &str) -> anyhow::Result<Self> {
        Self::with_namespace(redis_url, DEFAULT_NAMESPACE)
    }

    /// A store under `<namespace>:flags` (tests isolate themselves from a running lab with this).
    pub fn with_namespace(redis_url: &str, namespace: &str) -> anyhow::Result<Self> {
        Ok(Self {
            client: redis::Client::open(redis_url)
                .with_context(|| format!("invalid Redis URL {redis_url:?}"))?,
            hash_key: format!("{namespace}:flags"),
            channel: format!("{namespace}:flags:changed"),
            reader: Default::default(),
        })
    }

    async fn conn(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        // Our own timeout bounds each call; the crate's (500 ms per response) would undo it.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(None);
        tokio::time::timeout(
            CALL_TIMEOUT,
            self.client
                .get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .context("connecting to the flag store timed out")?
        .context("connecting to the flag store")
    }

    /// This store with a connection slot of its own: the flag watcher's copy, whose connections
    /// its own runtime opens and drives (a connection is driven by a task on the runtime that
    /// opened it, so one shared with the caller's runtime would wait on the caller's queue).
    pub fn detached(&self) -> Self {
        Self {
            reader: Default::default(),
            ..self.clone()
        }
    }

    /// Run one write (a pipeline whose replies are ignored) on a new connection, the connect
    /// and the write each within [`CALL_TIMEOUT`] (the redis crate's own response timeout is
    /// off, see `conn`): a kill switch's `labctl flags set` fails, it does not hang.
    async fn write(&self, what: &'static str, pipe: &redis::Pipeline) -> anyhow::Result<()> {
        let mut c = self.conn().await?;
        tokio::time::timeout(CALL_TIMEOUT, pipe.query_async::<()>(&mut c))
            .await
            .with_context(|| format!("{what} timed out"))?
            .context(what)
    }

    /// The flags' stored values (without [`WRITTEN_FIELD`]).
    pub async fn read_all(&self) -> anyhow::Result<BTreeMap<String, String>> {
        Ok(self.read().await?.values)
    }

    /// The flags' stored values and whether the store remembers being written.
    pub async fn read(&self) -> anyhow::Result<Contents> {
        let mut slot = self.reader.lock().await;
        let mut c = match slot.as_ref() {
            Some(c) => c.clone(),
            None => {
                let c = self.conn().await?;
                *slot = Some(c.clone());
                c
            }
        };
        let read: anyhow::Result<BTreeMap<String, String>> = tokio::time::timeout(
            CALL_TIMEOUT,
            redis::cmd("HGETALL")
                .arg(&self.hash_key)
                .query_async(&mut c),
        )
        .await
        .context("reading the flag store timed out")
        .and_then(|r| r.map_err(anyhow::Error::from));
        match read {
            Ok(mut values) => {
                let written = values.remove(WRITTEN_FIELD).is_some();
                Ok(Contents { values, written })
            }
            Err(e) => {
                // Whatever failed (a dropped connection, one silent for CALL_TIMEOUT, an error
                // reply), the next read starts on a new connection.
                *slot = None;
                Err(e)
            }
        }
    }

    /// Set one flag and tell every watcher. The caller validates against the definitions.
    pub async fn set(&self, flag: &str, variant: &str) -> anyhow::Result<()> {
        let pipe = redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(&self.hash_key)
            .arg(flag)
            .arg(variant)
            .arg(WRITTEN_FIELD)
            .arg("1")
            .ignore()
            .cmd("PUBLISH")
            .arg(&self.channel)
            .arg(flag)
            .ignore()
            .clone();
        self.write("writing the flag store", &pipe).await
    }

    /// Remove one stored value (the flag goes back to its default) and tell every watcher.
    pub async fn unset(&self, flag: &str) -> anyhow::Result<()> {
        let pipe = redis::pipe()
            .atomic()
            .cmd("HDEL")
            .arg(&self.hash_key)
            .arg(flag)
            .ignore()
            .cmd("HSET")
            .arg(&self.hash_key)
            .arg(WRITTEN_FIELD)
            .arg("1")
            .ignore()
            .cmd("PUBLISH")
            .arg(&self.channel)
            .arg(flag)
            .ignore()
            .clone();
        self.write("writing the flag store", &pipe).await
    }

    /// Remove every stored value (all flags back to their defaults) and tell every watcher. The
    /// hash keeps [`WRITTEN_FIELD`]: "all defaults" on purpose, not a store that lost its data.
    pub async fn reset(&self) -> anyhow::Result<()> {
        let pipe = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg(&self.hash_key)
            .ignore()
            .cmd("HSET")
            .arg(&self.hash_key)
            .arg(WRITTEN_FIELD)
            .arg("1")
            .ignore()
            .cmd("PUBLISH")
            .arg(&self.channel)
            .arg("*")
            .ignore()
            .clone();
        self.write("resetting the flag store", &pipe).await
    }

    /// Delete the hash outright, [`WRITTEN_FIELD`] too: what a Redis restarted without
    /// persistence looks like (tests; lab-e2e's cleanup).
    pub async fn forget(&self) -> anyhow::Result<()> {
        let pipe = redis::pipe()
            .cmd("DEL")
            .arg(&self.hash_key)
            .ignore()
            .clone();
        self.write("deleting the flag store", &pipe).await
    }

    /// A stream with one item per change notification.
    pub async fn subscribe(&self) -> anyhow::Result<impl Stream<Item = ()> + Unpin> {
        let mut pubsub = tokio::time::timeout(CALL_TIMEOUT, self.client.get_async_pubsub())
            .await
            .context("subscribing to the flag store timed out")??;
        tokio::time::timeout(CALL_TIMEOUT, pubsub.subscribe(&self.channel))
            .await
            .context("subscribing to flag changes timed out")?
            .context("subscribing to flag changes")?;
        Ok(Box::pin(futures::StreamExt::map(
            pubsub.into_on_message(),
            |_| (),
        )))
    }
}
