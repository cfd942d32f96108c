//! The orchestrator replicas behind the gateway, kept in or out of rotation by their `/readyz`.
//!
//! This is what a Kubernetes Service does with its endpoints, so the native lab reproduces the
//! postmortem's deep-readiness cascade without a cluster: a replica whose readiness fails
//! `failure_threshold` probes in a row stops receiving requests; `success_threshold` passes put it
//! back. A connection refused on a real request ejects the replica at once (the process is gone;
//! waiting for three probes would fail three seconds of requests), and that request moves to the
//! next ready replica: nothing was sent, so this is failover, not a retry of work.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGaugeVec;

use crate::configuration::UpstreamSettings;

pub struct Endpoint {
    pub url: String,
    ready: AtomicBool,
    consecutive_failures: AtomicU32,
    consecutive_successes: AtomicU32,
}

impl Endpoint {
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

pub struct Upstreams {
    endpoints: Vec<Endpoint>,
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
        let endpoints = settings
            .url_list()
            .into_iter()
            .map(|url| Endpoint {
                url,
                ready: AtomicBool::new(false),
                consecutive_failures: AtomicU32::new(0),
                consecutive_successes: AtomicU32::new(0),
            })
            .collect();
        Ok(Arc::new(Self {
            endpoints,
            next: AtomicUsize::new(0),
            probe,
            settings,
            ready_gauge,
        }))
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The next ready endpoint after round-robin, skipping `tried`.
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.endpoints.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| (start + k) % n)
            .find(|i| !tried.contains(i) && self.endpoints[*i].is_ready())
    }

    /// Passive ejection after a refused connection.
    pub fn eject(&self, i: usize) {
        let e = &self.endpoints[i];
        if e.ready.swap(false, Ordering::SeqCst) {
            tracing::warn!(endpoint = %e.url, "connection refused; out of rotation until /readyz passes");
        }
        e.consecutive_successes.store(0, Ordering::SeqCst);
        self.ready_gauge.with_label_values(&[&e.url]).set(0);
    }

    /// Probe every endpoint once, concurrently.
    pub async fn probe_all(&self) {
        let probes = self.endpoints.iter().map(|e| async move {
            let ok = match self.probe.get(format!("{}/readyz", e.url)).send().await {
                Ok(resp) => resp.status().is_success(),
                Err(_) => false,
            };
            self.record(e, ok);
        });
        futures::future::join_all(probes).await;
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

    /// Probe forever at `probe_interval_ms` (the task is aborted when the gateway stops).
    pub fn spawn_prober(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick =
                tokio::time::interval(Duration::from_millis(me.settings.probe_interval_ms));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                me.probe_all().await;
            }
        })
    }
}
