//! The orchestrator replicas behind the gateway, kept in or out of rotation by their `/readyz`
//! (served on each replica's admin listener, not on the port the gateway sends requests to).
//!
//! This is what a Kubernetes Service does with its endpoints, so the native lab reproduces the
//! postmortem's deep-readiness cascade without a cluster: a replica whose readiness fails
//! `failure_threshold` probes in a row stops receiving requests; `success_threshold` passes put it
//! back. A connection refused on a real request ejects the replica at once (the process is gone;
//! waiting for three probes would fail three seconds of requests), and that request moves to the
//! next ready replica: nothing was sent, so this is failover, not a retry of work. The last
//! endpoint in rotation is never ejected by a refusal (it may be a Service address standing for
//! every pod: [`Upstreams::eject`]); its request tries it once more.
//!
//! Each replica is probed at its own moment of the period (`upstream.probe_phase = "random"`, a
//! phase drawn once per replica), as kubelet probes each pod from a worker of its own that first
//! waits a random part of its period: replicas cross their failure threshold one after another,
//! and one taken out of rotation puts its requests on the others before their own probes run.
//! `"aligned"` probes them all in one round, as this lab did before issue 26 measured the two.
//! A probe still in flight when its next moment comes skips that period (kubelet's worker is
//! sequential too).
//!
//! The set of replicas may change while the gateway runs, as a Service's endpoints do when a
//! Deployment is scaled: with `upstream.orchestrators_file` the list is re-read before every round
//! of probes. A new replica joins out of rotation and enters it once its readiness passes (its
//! cache cold, its connection slots new — the postmortem's scale-up); a replica gone from the
//! list leaves the rotation at once.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus::IntGaugeVec;

use crate::configuration::{ProbePhase, UpstreamSettings};

pub struct Endpoint {
    pub url: String,
    /// The replica's admin listener, where its `/readyz` is.
    pub admin: String,
    ready: AtomicBool,
    consecutive_failures: AtomicU32,
    consecutive_successes: AtomicU32,
    /// Where in each probe period this replica is probed (0 when aligned).
    phase: Duration,
    /// A probe of this replica is in flight: the next one waits for it (skips its moment).
    probing: AtomicBool,
}

impl Endpoint {
    fn new((url, admin): (String, String), phase: Duration) -> Self {
        Endpoint {
            url,
            admin,
            ready: AtomicBool::new(false),
            consecutive_failures: AtomicU32::new(0),
            consecutive_successes: AtomicU32::new(0),
            phase,
            probing: AtomicBool::new(false),
        }
    }

    /// Where in each probe period this replica is probed.
    pub fn phase(&self) -> Duration {
        self.phase
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

pub struct Upstreams {
    endpoints: RwLock<Arc<Vec<Arc<Endpoint>>>>,
    next: AtomicUsize,
    probe: reqwest::Client,
    settings: UpstreamSettings,
    ready_gauge: IntGaugeVec,
}

impl Upstreams {
    pub fn new(
        settings: UpstreamSettings,
        metrics: &lab_core::metrics::Metrics,
    ) -> anyhow::Result<Arc<Self>> {
        let probe = reqwest::Client::builder()
            .timeout(Duration::from_millis(settings.probe_timeout_ms))
            .build()?;
        let ready_gauge = metrics.register(
            IntGaugeVec::new(
                prometheus::Opts::new(
                    "gateway_upstream_ready",
                    "1 while an orchestrator replica is in the gateway's rotation",
                ),
                &["endpoint"],
            )
            .expect("valid metric"),
        );
        let urls = match &settings.orchestrators_file {
            Some(path) if !path.is_empty() => read_list(path)?,
            _ => settings.endpoint_list()?,
        };
        let endpoints = urls
            .into_iter()
            .map(|u| Arc::new(Endpoint::new(u, phase_for(&settings))))
            .collect();
        Ok(Arc::new(Self {
            endpoints: RwLock::new(Arc::new(endpoints)),
            next: AtomicUsize::new(0),
            probe,
            settings,
            ready_gauge,
        }))
    }

    /// The replicas as of now.
    pub fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints.read().expect("endpoints lock").clone()
    }

    /// The next ready endpoint after round-robin, skipping the URLs in `tried`.
    pub fn pick(&self, tried: &[String]) -> Option<Arc<Endpoint>> {
        let all = self.endpoints();
        let n = all.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| &all[(start + k) % n])
            .find(|e| !tried.contains(&e.url) && e.is_ready())
            .cloned()
    }

    /// Passive ejection after a refused connection; `false` when `e` was kept: it is the last
    /// endpoint in rotation. A refused connection says one process is gone, and the last
    /// endpoint is where every request would go next: behind a Kubernetes Service address (the
    /// kind gateway's one upstream) it stands for every orchestrator pod, and ejecting it made
    /// one dead pod's refusal a `no_ready_upstream` for every request until the next probe
    /// passed (issue 28). Taking the last endpoint out is the readiness probe's decision (the
    /// postmortem's deep-readiness cascade is made of probes, not of refusals).
    pub fn eject(&self, e: &Endpoint) -> bool {
        let others_ready = self
            .endpoints()
            .iter()
            .any(|o| !std::ptr::eq(o.as_ref(), e) && o.is_ready());
        if !others_ready {
            tracing::warn!(endpoint = %e.url, "connection refused by the last endpoint in rotation; kept");
            return false;
        }
        if e.ready.swap(false, Ordering::SeqCst) {
            tracing::warn!(endpoint = %e.url, "connection refused; out of rotation until /readyz passes");
        }
        e.consecutive_successes.store(0, Ordering::SeqCst);
        self.ready_gauge.with_label_values(&[&e.url]).set(0);
        true
    }

    /// Re-read the endpoints file, if there is one: keep the replicas still listed (with their
    /// readiness), add new ones out of rotation, drop the rest.
    fn refresh(&self) {
        let Some(path) = self
            .settings
            .orchestrators_file
            .as_deref()
            .filter(|p| !p.is_empty())
        else {
            return;
        };
        let urls = match read_list(path) {
            Ok(u) => u,
            Err(e) => {
                // Keep the last known set: a half-written or missing file must not empty the
                // rotation.
                tracing::warn!(error = %format!("{e:#}"), "cannot read the endpoints file; keeping the last known replicas");
                return;
            }
        };
        let current = self.endpoints();
        if current
            .iter()
            .map(|e| (&e.url, &e.admin))
            .eq(urls.iter().map(|(u, a)| (u, a)))
        {
            return;
        }
        let next: Vec<Arc<Endpoint>> = urls
            .into_iter()
            .map(|(u, a)| {
                current
                    .iter()
                    .find(|e| e.url == u && e.admin == a)
                    .cloned()
                    .unwrap_or_else(|| {
                        tracing::info!(endpoint = %u, "new replica; in rotation once /readyz passes");
                        Arc::new(Endpoint::new((u, a), phase_for(&self.settings)))
                    })
            })
            .collect();
        for gone in current
            .iter()
            .filter(|e| !next.iter().any(|n| n.url == e.url))
        {
            tracing::info!(endpoint = %gone.url, "replica gone from the endpoints; out of rotation");
            let _ = self.ready_gauge.remove_label_values(&[&gone.url]);
        }
        *self.endpoints.write().expect("endpoints lock") = Arc::new(next);
    }

    /// Probe every endpoint once, concurrently (after re-reading the endpoints file): the
    /// gateway's first round, before it serves.
    pub async fn probe_all(&self) {
        self.refresh();
        let all = self.endpoints();
        futures::future::join_all(all.iter().map(|e| self.probe_one(e))).await;
    }

    /// One readiness probe of `e`, recorded.
    async fn probe_one(&self, e: &Endpoint) {
        let ok = match self.probe.get(format!("{}/readyz", e.admin)).send().await {
            Ok(resp) => resp.status().is_success(),
            Err(_) => false,
        };
        self.record(e, ok);
    }

    fn record(&self, e: &Endpoint, ok: bool) {
        if ok {
            e.consecutive_failures.store(0, Ordering::SeqCst);
            let s = e.consecutive_successes.fetch_add(1, Ordering::SeqCst) + 1;
            if s >= self.settings.success_threshold && !e.ready.swap(true, Ordering::SeqCst) {
                tracing::info!(endpoint = %e.url, "readiness passed; in rotation");
            }
        } else {
            e.consecutive_successes.store(0, Ordering::SeqCst);
            let f = e.consecutive_failures.fetch_add(1, Ordering::SeqCst) + 1;
            if f >= self.settings.failure_threshold && e.ready.swap(false, Ordering::SeqCst) {
                tracing::warn!(endpoint = %e.url, failures = f, "readiness failed; out of rotation");
            }
        }
        self.ready_gauge
            .with_label_values(&[&e.url])
            .set(i64::from(e.is_ready()));
    }

    /// Probe forever, every `probe_interval_ms`, each replica at its own phase of the period
    /// (the task is aborted when the gateway stops, and its probes with it).
    pub fn spawn_prober(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick =
                tokio::time::interval(Duration::from_millis(me.settings.probe_interval_ms));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut probes = tokio::task::JoinSet::new();
            loop {
                tick.tick().await;
                me.refresh();
                for e in me.endpoints().iter() {
                    if e.probing.swap(true, Ordering::SeqCst) {
                        continue;
                    }
                    let (me, e) = (me.clone(), e.clone());
                    probes.spawn(async move {
                        tokio::time::sleep(e.phase).await;
                        me.probe_one(&e).await;
                        e.probing.store(false, Ordering::SeqCst);
                    });
                }
                while probes.try_join_next().is_some() {}
            }
        })
    }
}

/// A new replica's phase: uniform in `[0, probe_interval)` when random, 0 when aligned.
fn phase_for(settings: &UpstreamSettings) -> Duration {
    match settings.probe_phase {
        ProbePhase::Aligned => Duration::ZERO,
        ProbePhase::Random => {
            use rand::Rng;
            let period = settings.probe_interval_ms.max(1);
            Duration::from_millis(rand::rng().random_range(0..period))
        }
    }
}

/// One replica per line, `<url> <admin url>` (blank lines and `#` comments ignored).
fn read_list(path: &str) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading the endpoints file {path}: {e}"))?;
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [url, admin] => Ok((url.to_string(), admin.to_string())),
            _ => anyhow::bail!(
                "endpoints file {path}: expected `<url> <admin url>` per line, got {l:?}"
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prober's settings for these replicas: Kubernetes' numbers, a 500 ms probe timeout.
    fn settings(urls: &[String], admins: &[String], probe_phase: ProbePhase) -> UpstreamSettings {
        UpstreamSettings {
            orchestrators: urls.join(","),
            orchestrators_admin: admins.join(","),
            orchestrators_file: None,
            probe_interval_ms: 1000,
            probe_timeout_ms: 500,
            failure_threshold: 3,
            success_threshold: 1,
            probe_phase,
        }
    }

    fn upstreams(n: usize) -> Arc<Upstreams> {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 1 + i))
            .collect();
        let admins: Vec<String> = (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 101 + i))
            .collect();
        let u = Upstreams::new(
            settings(&urls, &admins, ProbePhase::Aligned),
            &lab_core::metrics::Metrics::new(),
        )
        .unwrap();
        for e in u.endpoints().iter() {
            u.record(e, true);
        }
        u
    }

    /// `n` readiness endpoints on loopback, each recording when it was probed (virtual clock).
    async fn readiness_stubs(
        n: usize,
    ) -> (
        Vec<String>,
        Arc<std::sync::Mutex<Vec<Vec<tokio::time::Instant>>>>,
    ) {
        let seen = Arc::new(std::sync::Mutex::new(vec![Vec::new(); n]));
        let mut admins = Vec::new();
        for i in 0..n {
            let seen = seen.clone();
            let app = axum::Router::new().route(
                "/readyz",
                axum::routing::get(move || {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap()[i].push(tokio::time::Instant::now());
                        "ok"
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            admins.push(format!("http://{}", listener.local_addr().unwrap()));
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
        (admins, seen)
    }

    /// Each replica's probes as offsets into the period, from the prober's start.
    async fn probe_offsets(phase: ProbePhase, n: usize) -> Vec<Vec<u128>> {
        let (admins, seen) = readiness_stubs(n).await;
        let urls: Vec<String> = (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 1 + i))
            .collect();
        let u = Upstreams::new(
            settings(&urls, &admins, phase),
            &lab_core::metrics::Metrics::new(),
        )
        .unwrap();
        let start = tokio::time::Instant::now();
        let prober = u.spawn_prober();
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        prober.abort();
        let seen = seen.lock().unwrap().clone();
        seen.iter()
            .map(|ts| ts.iter().map(|t| (*t - start).as_millis()).collect())
            .collect()
    }

    /// kubelet's probe worker waits a random part of its period before its first probe: the
    /// replicas of one Deployment are probed at different moments, each every period. Aligned,
    /// every replica is probed in the same round (the lab's earlier prober).
    #[tokio::test(start_paused = true)]
    async fn replicas_are_probed_at_their_own_phase_each_every_period() {
        let random = probe_offsets(ProbePhase::Random, 8).await;
        let firsts: Vec<u128> = random.iter().map(|p| p[0]).collect();
        let spread = firsts.iter().max().unwrap() - firsts.iter().min().unwrap();
        // 8 uniform phases in [0, 1000) all within 300 ms of each other: p < 8 x 0.3^7 = 2e-3.
        assert!(spread >= 300, "random phases, first probes at {firsts:?}");
        for probes in &random {
            assert!(probes.len() >= 3, "{probes:?}");
            for w in probes.windows(2) {
                assert!(
                    (990..=1010).contains(&(w[1] - w[0])),
                    "one probe a period: {probes:?}"
                );
            }
        }

        let aligned = probe_offsets(ProbePhase::Aligned, 8).await;
        let firsts: Vec<u128> = aligned.iter().map(|p| p[0]).collect();
        let spread = firsts.iter().max().unwrap() - firsts.iter().min().unwrap();
        assert!(spread <= 10, "aligned, first probes at {firsts:?}");
    }

    /// A refused connection ejects a replica while another is in rotation, never the last one:
    /// behind one Service address (the kind gateway) the last endpoint is every pod, and its
    /// ejection answered every request `no_ready_upstream` until the next probe (issue 28).
    #[test]
    fn a_refused_connection_never_takes_the_last_endpoint_out_of_rotation() {
        let one = upstreams(1);
        let service = one.pick(&[]).expect("in rotation");
        assert!(!one.eject(&service), "the only endpoint is kept");
        assert!(one.pick(&[]).is_some(), "and still picked");

        let two = upstreams(2);
        let first = two.pick(&[]).unwrap();
        assert!(
            two.eject(&first),
            "a replica with a peer in rotation is ejected"
        );
        let second = two.pick(&[]).unwrap();
        assert_ne!(first.url, second.url);
        assert!(!two.eject(&second), "its peer is now the last: kept");
        assert_eq!(
            two.pick(&[]).map(|e| e.url.clone()),
            Some(second.url.clone())
        );
        // The readiness probe may still take it out: the deep-readiness cascade is probes.
        for _ in 0..3 {
            two.record(&second, false);
        }
        assert!(two.pick(&[]).is_none());
    }
}
