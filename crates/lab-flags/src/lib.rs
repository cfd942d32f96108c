//! Runtime flags, one mechanism for the native lab, compose and Kubernetes.
//!
//! - **Definitions** — name, description, variants, default — live in one flagd-compatible JSON
//!   file, `deploy/flags/flags.json`, compiled in (and mounted as a ConfigMap in Kubernetes).
//! - **Current values** live in Redis: the hash `lab:flags` maps a flag to its variant name.
//!   `labctl flags set` writes the hash and publishes on `lab:flags:changed` (`lab` is the
//!   namespace; tests use their own).
//! - **Every replica watches**: it subscribes to the channel and reloads on every message, and
//!   re-reads the hash every few seconds as well (a missed message, a reconnect); a read that
//!   fails is tried again 200 ms later, doubling up to the re-read interval, and each call may
//!   take up to [`store::CALL_TIMEOUT`] (5 s), since no request waits on it. A flag takes
//!   effect in-process, without a restart (postmortem: "A flag that requires a deploy is not a
//!   kill switch").
//! - **Evaluated per request** from an in-memory snapshot: a request never waits on Redis.
//! - **Last-known values are kept** when Redis is unreachable (the defaults until the first
//!   successful read), and every change is logged and exported as `lab_flag_variant`. They are
//!   kept too when Redis answers but has lost its data (restarted without persistence: the hash
//!   is gone, [`store::WRITTEN_FIELD`] with it) — measured by the Redis outage
//!   (load/scenarios/faults/redis-outage.yaml, its "back" column): before
//!   this, every replica of a legacy lab flipped to resilient when Redis came back empty, with
//!   nobody setting a flag. `lab_flags_store_empty` says so; the next `labctl flags set` (or
//!   `reset`) is the source of truth again.
//! - **Last-known values survive a restart** when `[flags] last_known_file` names a file: every
//!   value read from the store is written there, and a replica that starts while the store is
//!   unreachable, or answers empty, applies the file's values instead of the defaults (issue 28:
//!   before this, a replica restarted during a Redis outage ran resilient beside legacy peers).
//!   Until the store has answered or such a file was read, [`Flags::known`] is false, and the
//!   services' `/readyz` answers 503 `flags_unknown`: a replica that does not know which client
//!   it runs takes no traffic.
//!
//! # Layout
//! - [`defs`]: parsing and validating the definitions.
//! - [`store`]: reading and writing the Redis hash.
//! - this file: [`Flags`], the watched snapshot.

pub mod acl;
pub mod defs;
pub mod store;

/// `[flags]` in every service's configuration.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlagSettings {
    /// The flag store. Unreachable at startup: the last-known file's values apply, else the
    /// defaults, not ready (`flags_unknown`), until it answers.
    pub redis_url: String,
    /// Key namespace in Redis (`<namespace>:flags`).
    pub namespace: String,
    /// Where this process keeps the last values it read, to apply them when it restarts while
    /// the store cannot tell it (none: a restart during an outage starts from the defaults and
    /// is not ready until the store answers). A file that outlives the process but not the
    /// replica: the native lab's `run/flags-<replica>.json`, an `emptyDir` in Kubernetes.
    #[serde(default)]
    pub last_known_file: Option<std::path::PathBuf>,
}

impl FlagSettings {
    /// Watch the store these settings name.
    pub async fn watch(
        &self,
        metrics: &lab_core::metrics::Metrics,
    ) -> anyhow::Result<std::sync::Arc<Flags>> {
        let store = Store::with_namespace(&self.redis_url, &self.namespace)?;
        let defs = std::sync::Arc::new(Definitions::embedded());
        Ok(Flags::watch_keeping(store, defs, metrics, self.last_known_file.clone()).await)
    }
}

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts};

pub use defs::{Definitions, FlagDef};
pub use store::{Store, DEFAULT_NAMESPACE};

/// How often a replica re-reads the hash even without a message. 5 s: a lost pub/sub message or
/// a Redis restart costs at most 5 s of staleness (the postmortem's kill switch took "under 5
/// seconds, cluster-wide").
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// The first retry of a failed read comes this soon, doubling per failure up to the re-read
/// interval: a flag store that dropped one connection answers the next read at once, one that is
/// down is asked no more often than every interval.
const RETRY_FIRST: Duration = Duration::from_millis(200);

/// When to read the store again after a read failed (none while reads succeed).
struct Retry {
    at: Option<tokio::time::Instant>,
    backoff: Duration,
    /// The longest wait: the re-read interval (a retry later than the next re-read is useless).
    cap: Duration,
}

impl Retry {
    fn after(ok: bool, cap: Duration) -> Self {
        let mut r = Self {
            at: None,
            backoff: RETRY_FIRST.min(cap),
            cap,
        };
        r.next(ok);
        r
    }

    /// Record a read's outcome: a success clears the retry, a failure schedules the next one.
    fn next(&mut self, ok: bool) {
        if ok {
            self.at = None;
            self.backoff = RETRY_FIRST.min(self.cap);
        } else {
            self.at = Some(tokio::time::Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(self.cap);
        }
    }

    /// Resolves when a retry is due; never while none is scheduled.
    async fn wait(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// Current variant of every defined flag.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    variants: BTreeMap<String, String>,
    defs: Arc<Definitions>,
}

impl Snapshot {
    /// The defaults of `defs`.
    pub fn defaults(defs: Arc<Definitions>) -> Self {
        let variants = defs
            .flags
            .iter()
            .map(|(name, d)| (name.clone(), d.default_variant.clone()))
            .collect();
        Self { variants, defs }
    }

    /// The variant name of `flag` (the default if unknown to the store).
    pub fn variant(&self, flag: &str) -> &str {
        self.variants
            .get(flag)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("flag {flag:?} is not defined in deploy/flags/flags.json"))
    }

    /// The value of a boolean flag.
    pub fn enabled(&self, flag: &str) -> bool {
        let d = self.def(flag);
        d.variants
            .get(self.variant(flag))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or_else(|| panic!("flag {flag:?} is not boolean"))
    }

    /// The value of a numeric flag.
    pub fn number(&self, flag: &str) -> f64 {
        let d = self.def(flag);
        d.variants
            .get(self.variant(flag))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("flag {flag:?} is not numeric"))
    }

    fn def(&self, flag: &str) -> &FlagDef {
        self.defs
            .flags
            .get(flag)
            .unwrap_or_else(|| panic!("flag {flag:?} is not defined in deploy/flags/flags.json"))
    }

    /// Is `request_id`'s request served by the fixed stack ("Code After")? Yes when
    /// `client.mode=resilient`; while it is `legacy`, for the `hotfix.canary_percent` share of
    /// requests — the hotfix canary. flagd-style fractional targeting with the request id as the
    /// targeting key: every hop hashes the same id (the gateway forwards it), so a request is
    /// fixed or legacy end to end, never half of each.
    pub fn fixed_for(&self, request_id: &str) -> bool {
        if self.variant("client.mode") != "legacy" {
            return true;
        }
        let percent = self.number("hotfix.canary_percent");
        percent > 0.0 && (canary_bucket(request_id) as f64) < percent
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.variants.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Apply values read from the store; unknown flags and unknown variants are ignored with a
    /// warning (a newer labctl may know flags an older service does not).
    fn with_store_values(&self, stored: &BTreeMap<String, String>) -> Self {
        let mut next = Snapshot::defaults(self.defs.clone());
        for (flag, variant) in stored {
            match self.defs.flags.get(flag) {
                Some(d) if d.variants.contains_key(variant) => {
                    next.variants.insert(flag.clone(), variant.clone());
                }
                Some(_) => tracing::warn!(
                    flag,
                    variant,
                    "unknown variant in the flag store; using the default"
                ),
                None => tracing::debug!(flag, "flag in the store is not defined here; ignored"),
            }
        }
        next
    }
}

/// The request's bucket in 0..100: FNV-1a of the id, the same in every process and on every run
/// (a canary of 5% is the same 5% of request ids everywhere).
pub fn canary_bucket(request_id: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in request_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % 100) as u32
}

/// The watched flags of one process.
pub struct Flags {
    current: RwLock<Arc<Snapshot>>,
    defs: Arc<Definitions>,
    variant_gauge: IntGaugeVec,
    reloads: IntCounterVec,
    reachable: IntGauge,
    empty: IntGauge,
    /// Values came from the store or a last-known file (not the defaults by ignorance).
    known: AtomicBool,
    known_gauge: IntGauge,
    /// `[flags] last_known_file`: written after every read that changed what we apply.
    last_known: Option<PathBuf>,
    /// What the file holds now (None: not written by this process yet).
    persisted: RwLock<Option<Arc<Snapshot>>>,
    /// One reload at a time, read and apply together: the watcher's and a caller's reloads
    /// (they run on different threads) cannot apply an older read over a newer one.
    reloading: tokio::sync::Mutex<()>,
    /// Dropped with the flags: tells the watcher's thread to end (and close its connections)
    /// at once, not at its next wake-up.
    _stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Flags {
    /// Flags fixed at their defaults, never watched (tests, and a service run without Redis).
    pub fn fixed(defs: Arc<Definitions>, metrics: &lab_core::metrics::Metrics) -> Arc<Self> {
        let flags = Arc::new(Self::new(defs, metrics, None));
        // Fixed at the defaults on purpose: known.
        flags.set_known();
        flags.export();
        flags
    }

    fn new(
        defs: Arc<Definitions>,
        metrics: &lab_core::metrics::Metrics,
        last_known: Option<PathBuf>,
    ) -> Self {
        Self {
            current: RwLock::new(Arc::new(Snapshot::defaults(defs.clone()))),
            defs,
            variant_gauge: metrics.register(
                IntGaugeVec::new(
                    Opts::new(
                        "lab_flag_variant",
                        "1 for the variant of each runtime flag this process currently applies, 0 for the others",
                    ),
                    &["flag", "variant"],
                )
                .expect("valid metric"),
            ),
            reloads: metrics.counter_vec(
                "lab_flags_reloads_total",
                "Reads of the flag store, by result (ok, error)",
                &["result"],
            ),
            reachable: metrics.gauge(
                "lab_flags_store_reachable",
                "1 while the last read of the flag store succeeded; 0 means last-known values are in force",
            ),
            empty: metrics.gauge(
                "lab_flags_store_empty",
                "1 while the flag store answers but holds no written state (restarted without persistence): last-known values are in force",
            ),
            known: AtomicBool::new(false),
            known_gauge: metrics.gauge(
                "lab_flags_known",
                "1 once the values in force came from the flag store or the last-known file; 0 while they are the defaults because nothing could tell (/readyz answers flags_unknown)",
            ),
            last_known,
            persisted: RwLock::new(None),
            reloading: tokio::sync::Mutex::new(()),
            _stop: None,
        }
    }

    /// Do the values in force come from the store or a last-known file? False only while a
    /// process that started with the store unreachable and no last-known file runs its
    /// defaults; the services' readiness waits for it.
    pub fn known(&self) -> bool {
        self.known.load(Ordering::SeqCst)
    }

    /// Make `health`'s `/readyz` answer 503 `flags_unknown` while these flags are not
    /// [`Flags::known`].
    pub fn gate(self: &Arc<Self>, health: &lab_core::health::Health) {
        let flags = self.clone();
        health.require("flags_unknown", Arc::new(move || flags.known()));
    }

    fn set_known(&self) {
        self.known.store(true, Ordering::SeqCst);
        self.known_gauge.set(1);
    }

    /// Load once from `store` (defaults if unreachable), and watch it for
    /// the life of the process.
    pub async fn watch(
        store: Store,
        defs: Arc<Definitions>,
        metrics: &lab_core::metrics::Metrics,
    ) -> Arc<Self> {
        Self::watch_keeping(store, defs, metrics, None).await
    }

    /// [`Flags::watch`], keeping the last values read in `last_known` (see
    /// [`FlagSettings::last_known_file`]): applied at start, before the store is asked, when the
    /// file holds any.
    pub async fn watch_keeping(
        store: Store,
        defs: Arc<Definitions>,
        metrics: &lab_core::metrics::Metrics,
        last_known: Option<PathBuf>,
    ) -> Arc<Self> {
        Self::watch_refreshing(store, defs, metrics, last_known, REFRESH_INTERVAL).await
    }

    /// [`Flags::watch_keeping`], re-reading the store every `refresh` without a message (the
    /// services use [`REFRESH_INTERVAL`]; a test lengthens it to see what reaches a replica by the
    /// messages and their retries alone).
    pub async fn watch_refreshing(
        store: Store,
        defs: Arc<Definitions>,
        metrics: &lab_core::metrics::Metrics,
        last_known: Option<PathBuf>,
        refresh: Duration,
    ) -> Arc<Self> {
        let (stop_tx, stop) = tokio::sync::oneshot::channel();
        let flags = Arc::new(Self {
            _stop: Some(stop_tx),
            ..Self::new(defs, metrics, last_known)
        });
        flags.restore();
        let weak = Arc::downgrade(&flags);
        let first = flags.clone();
        // Its own connections, opened and driven by its own runtime (see Store::detached).
        let store = store.detached();
        let (started, first_read) = tokio::sync::oneshot::channel();
        // LAB-FIX(flag-thread): the watcher runs on a thread and runtime of its own, and every
        // call to the store with it (the store's connections are driven by the runtime that
        // opened them). On the runtime that serves requests, a reload woken by a kill switch's
        // message waited behind every queued request task: in the replay's storm the gateway
        // (thousands of tasks, half its /metrics scrapes failing) applied
        // `retries.gateway.enabled=off` 15–18 s after the flip (issue 26). The OS shares the
        // cores between this thread and the workers; no request task can stand in its way.
        let spawned = std::thread::Builder::new()
            .name("lab-flags".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start the flag watcher's runtime; flags stay as they are");
                        return;
                    }
                };
                runtime.block_on(async move {
                    first.reload(&store).await;
                    first.export();
                    drop(first);
                    let _ = started.send(());
                    Self::follow(weak, store, refresh, stop).await;
                });
            });
        match spawned {
            // The first read (or its failure) before the caller goes on, as before the thread.
            Ok(_) => {
                if first_read.await.is_err() {
                    tracing::error!("the flag watcher ended before its first read (it panicked?); flags stay as they are");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start the flag watcher's thread; flags stay as they are")
            }
        }
        flags
    }

    /// Follow the store for as long as the flags live: a reload per change message, one per
    /// `refresh`, and retries of a failed one.
    async fn follow(
        weak: std::sync::Weak<Self>,
        store: Store,
        refresh: Duration,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) {
        let mut backoff = RETRY_FIRST;
        loop {
            let Some(f) = weak.upgrade() else { return };
            match store.subscribe().await {
                Ok(mut messages) => {
                    backoff = RETRY_FIRST;
                    // Re-read after (re)subscribing: changes made while we were away count.
                    let mut retry = Retry::after(f.reload(&store).await, refresh);
                    drop(f);
                    let mut tick = tokio::time::interval(refresh);
                    tick.tick().await;
                    loop {
                        tokio::select! {
                            _ = &mut stop => return,
                            msg = messages.next() => {
                                let Some(f) = weak.upgrade() else { return };
                                if msg.is_none() {
                                    tracing::warn!("flag store subscription ended; resubscribing");
                                    break;
                                }
                                retry.next(f.reload(&store).await);
                            }
                            _ = tick.tick() => {
                                let Some(f) = weak.upgrade() else { return };
                                retry.next(f.reload(&store).await);
                            }
                            // LAB-FIX(flag-retry): a read that failed is tried again within
                            // RETRY_FIRST..refresh, not at the next tick: the failed read may
                            // have been the one a kill switch's message asked for.
                            _ = retry.wait() => {
                                let Some(f) = weak.upgrade() else { return };
                                retry.next(f.reload(&store).await);
                            }
                        }
                    }
                }
                Err(e) => {
                    f.reachable.set(0);
                    tracing::warn!(error = %e, "cannot subscribe to the flag store; keeping last-known values");
                    drop(f);
                    tokio::select! {
                        _ = &mut stop => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(refresh);
                }
            }
        }
    }

    /// The snapshot to evaluate one request against.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.read().expect("flags lock").clone()
    }

    pub fn definitions(&self) -> &Definitions {
        &self.defs
    }

    /// Read the store and apply what changed; false when the store could not be read.
    pub async fn reload(&self, store: &Store) -> bool {
        let _one_at_a_time = self.reloading.lock().await;
        match store.read().await {
            Ok(contents) if !contents.written && contents.values.is_empty() => {
                // Lost, not reset: keep what we apply. (At startup that is the last-known
                // file's values, else the defaults: a store that answers is never written, or
                // has lost what was, and either way nobody is asking for anything else.)
                self.reloads.with_label_values(&["ok"]).inc();
                self.reachable.set(1);
                self.set_known();
                if self.empty.get() == 0 {
                    tracing::warn!(
                        "the flag store holds nothing (restarted without persistence?); keeping \
                         last-known values until a flag is set"
                    );
                }
                self.empty.set(1);
                true
            }
            Ok(contents) => {
                let stored = contents.values;
                self.reloads.with_label_values(&["ok"]).inc();
                self.reachable.set(1);
                self.empty.set(0);
                self.set_known();
                let old = self.snapshot();
                let next = old.with_store_values(&stored);
                self.persist(&next);
                if next != *old {
                    for (flag, variant) in next.iter() {
                        if old.variant(flag) != variant {
                            tracing::info!(
                                flag,
                                from = old.variant(flag),
                                to = variant,
                                "flag changed"
                            );
                        }
                    }
                    *self.current.write().expect("flags lock") = Arc::new(next);
                    self.export();
                }
                true
            }
            Err(e) => {
                self.reloads.with_label_values(&["error"]).inc();
                self.reachable.set(0);
                tracing::warn!(error = %e, "cannot read the flag store; keeping last-known values");
                false
            }
        }
    }

    /// Apply the last-known file's values, if there is one and it holds any.
    fn restore(&self) {
        let Some(path) = &self.last_known else { return };
        match read_last_known(path) {
            Ok(None) => {}
            Ok(Some(values)) => {
                let next = Snapshot::defaults(self.defs.clone()).with_store_values(&values);
                tracing::info!(
                    file = %path.display(),
                    client_mode = next.variant("client.mode"),
                    "applying the last-known flags until the flag store answers"
                );
                *self.current.write().expect("flags lock") = Arc::new(next.clone());
                *self.persisted.write().expect("flags lock") = Some(Arc::new(next));
                self.set_known();
            }
            Err(e) => tracing::warn!(
                file = %path.display(),
                error = %e,
                "cannot use the last-known flags file; the defaults apply until the flag store answers"
            ),
        }
    }

    /// Write `next` to the last-known file when it differs from what the file holds (a write
    /// per change, not per reload: the reload runs every 5 s on every replica).
    fn persist(&self, next: &Snapshot) {
        let Some(path) = &self.last_known else { return };
        if self.persisted.read().expect("flags lock").as_deref() == Some(next) {
            return;
        }
        match write_last_known(path, next) {
            Ok(()) => *self.persisted.write().expect("flags lock") = Some(Arc::new(next.clone())),
            Err(e) => tracing::warn!(
                file = %path.display(),
                error = %e,
                "cannot write the last-known flags file; a restart during a flag-store outage would start from the defaults"
            ),
        }
    }

    fn export(&self) {
        let snap = self.snapshot();
        for (flag, def) in &self.defs.flags {
            for variant in def.variants.keys() {
                self.variant_gauge
                    .with_label_values(&[flag.as_str(), variant.as_str()])
                    .set(i64::from(snap.variant(flag) == variant));
            }
        }
    }
}

/// The last-known file: `{"variants": {flag: variant}}`. Absent: `None`.
fn read_last_known(path: &Path) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    #[derive(serde::Deserialize)]
    struct File {
        variants: BTreeMap<String, String>,
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let file: File = serde_json::from_str(&text)?;
    Ok(Some(file.variants))
}

/// Write `snap` to `path` whole or not at all (a temporary file renamed over it): a process
/// killed mid-write leaves the previous values, never half a file.
fn write_last_known(path: &Path, snap: &Snapshot) -> anyhow::Result<()> {
    let variants: BTreeMap<&str, &str> = snap.iter().collect();
    let text = serde_json::to_string_pretty(&serde_json::json!({ "variants": variants }))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(values: &[(&str, &str)]) -> Snapshot {
        let base = Snapshot::defaults(Arc::new(Definitions::embedded()));
        let stored = values
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        base.with_store_values(&stored)
    }

    #[test]
    fn fixed_for_serves_the_canary_share_of_request_ids_and_is_stable() {
        let ids: Vec<String> = (0..10_000).map(|i| format!("{i:016x}req")).collect();
        let share = |s: &Snapshot| ids.iter().filter(|id| s.fixed_for(id)).count() as f64 / 1e4;
        assert_eq!(share(&snapshot(&[("client.mode", "legacy")])), 0.0);
        let canary = snapshot(&[("client.mode", "legacy"), ("hotfix.canary_percent", "5")]);
        let five = share(&canary);
        assert!((0.04..=0.06).contains(&five), "5% canary served {five}");
        // The same ids every time, in every process: a request is fixed end to end.
        let again = snapshot(&[("client.mode", "legacy"), ("hotfix.canary_percent", "5")]);
        assert!(ids
            .iter()
            .all(|id| canary.fixed_for(id) == again.fixed_for(id)));
        // Widening the canary keeps the requests already in it.
        let quarter = snapshot(&[("client.mode", "legacy"), ("hotfix.canary_percent", "25")]);
        assert!(ids
            .iter()
            .filter(|id| canary.fixed_for(id))
            .all(|id| quarter.fixed_for(id)));
        let full = snapshot(&[("client.mode", "legacy"), ("hotfix.canary_percent", "100")]);
        assert_eq!(share(&full), 1.0);
        // Resilient mode is fixed whatever the canary says.
        assert_eq!(share(&snapshot(&[("client.mode", "resilient")])), 1.0);
    }
}
