//! A Kubernetes Service for the native lab: one address in front of a fleet's replicas, balanced
//! per connection among the replicas whose readiness passes.
//!
//! Why the lab needs one (issue 26, hypothesis 2): in the postmortem every orchestrator pod called
//! entity-service through ONE address, so its `MaxConnsPerHost: 64` was 64 connection slots in
//! all, spread by kube-proxy over 16 entity-service pods. A client given every replica's address
//! instead has 64 slots PER replica — with two replicas twice the postmortem's — and balances per
//! request, which no Service does. What this module does is what a ClusterIP Service does:
//!
//! - **Endpoints**: the replicas the supervisor runs (its endpoints file for the binary, re-read
//!   every probe period, as the Endpoints object follows a Deployment's pods: a scaled-up replica
//!   joins, a removed one leaves).
//! - **Readiness** (the kubelet's probe, the manifests' numbers: `k8s/base/entity-service.yaml`
//!   period 5 s, timeout 1 s, 3 failures out, 1 success in): only ready replicas receive new
//!   connections. A new replica starts out of rotation until its first probe passes.
//! - **kube-proxy**: each new connection goes to the next ready replica (IPVS's default
//!   round-robin; iptables mode picks at random, to the same effect on average), chosen once, at
//!   connect time. Bytes are copied both ways until either side closes. A connection already
//!   open keeps its replica when that replica leaves the rotation (conntrack keeps established
//!   flows); it ends when the replica closes it.
//! - **No ready replica**: the connection is closed at once (kube-proxy REJECTs a Service without
//!   endpoints: the client sees a refused connection, a transport error).
//!
//! A userspace copy, as kube-proxy's original `userspace` mode was: one more hop on loopback (tens
//! of microseconds) and the supervisor's CPU for the bytes, against requests of milliseconds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};

/// How often a replica out of rotation is probed. The kubelet probes a new container from its
/// start (`initialDelaySeconds: 0`), so a restarted pod is back in its Service within a second or
/// so; this Service cannot see a process start, so it probes a replica that is out of rotation
/// every second until it passes, and a ready one at the manifest's period.
const NOT_READY_PROBE: Duration = Duration::from_secs(1);

/// One Service: where it listens and whose replicas it fronts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServicePlan {
    /// The Service's name (the binary it fronts), for the log.
    pub name: String,
    /// The Service's address: the one URL the callers are given.
    pub port: u16,
    /// The supervisor's endpoints file for the binary (`<url> <admin url>` per line).
    pub endpoints_file: PathBuf,
    /// The readiness probe, as the manifests set it for this binary.
    pub probe: ProbePlan,
    /// Where the Service writes its ready replicas (`host:port` per line) whenever they change:
    /// what `labctl rollout restart` waits on before it stops the next replica, as a Deployment
    /// waits for a new pod's endpoint.
    pub ready_file: PathBuf,
}

/// A kubelet readiness probe's numbers (`periodSeconds`, `timeoutSeconds`, `failureThreshold`,
/// `successThreshold`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbePlan {
    pub period_ms: u64,
    pub timeout_ms: u64,
    pub failure_threshold: u32,
    pub success_threshold: u32,
}

impl ProbePlan {
    /// `k8s/base/entity-service.yaml`'s readinessProbe: period 5 s, timeout 1 s, failureThreshold
    /// 3 (successThreshold is Kubernetes' default, 1).
    pub fn entity_service() -> Self {
        Self {
            period_ms: 5_000,
            timeout_ms: 1_000,
            failure_threshold: 3,
            success_threshold: 1,
        }
    }
}

/// One replica behind the Service.
#[derive(Debug, Clone)]
struct Endpoint {
    /// `host:port` of its public listener.
    addr: String,
    /// Its admin listener's `/readyz`.
    readyz: String,
    ready: bool,
    failures: u32,
    successes: u32,
    /// When its readiness was last probed (`None`: never).
    probed_at: Option<Instant>,
}

/// The Service's view of its replicas, shared by the accept loop and the probe loop.
#[derive(Default)]
struct Endpoints {
    all: RwLock<Vec<Endpoint>>,
    next: AtomicUsize,
}

impl Endpoints {
    /// The next ready replica, round-robin; `None` when none is ready.
    fn pick(&self) -> Option<String> {
        let all = self.all.read().expect("endpoints lock");
        let ready: Vec<&Endpoint> = all.iter().filter(|e| e.ready).collect();
        if ready.is_empty() {
            return None;
        }
        let k = self.next.fetch_add(1, Ordering::Relaxed) % ready.len();
        Some(ready[k].addr.clone())
    }

    /// Follow the endpoints file: keep the replicas still listed with their state, add new ones
    /// out of rotation, drop the others.
    fn follow(&self, listed: Vec<(String, String)>) -> Vec<String> {
        let mut all = self.all.write().expect("endpoints lock");
        let mut joined = Vec::new();
        let next: Vec<Endpoint> = listed
            .into_iter()
            .map(|(addr, readyz)| {
                all.iter()
                    .find(|e| e.addr == addr)
                    .cloned()
                    .unwrap_or_else(|| {
                        joined.push(addr.clone());
                        Endpoint {
                            addr,
                            readyz,
                            ready: false,
                            failures: 0,
                            successes: 0,
                            probed_at: None,
                        }
                    })
            })
            .collect();
        *all = next;
        joined
    }

    /// Out of rotation now (its process is gone); `true` when it was in.
    fn eject(&self, addr: &str) -> bool {
        let mut all = self.all.write().expect("endpoints lock");
        match all.iter_mut().find(|e| e.addr == addr) {
            Some(e) => {
                e.successes = 0;
                std::mem::replace(&mut e.ready, false)
            }
            None => false,
        }
    }

    /// The replicas due a probe at `now`: a ready one every period, one out of rotation every
    /// [`NOT_READY_PROBE`].
    fn due(&self, now: Instant, probe: &ProbePlan) -> Vec<(String, String)> {
        let all = self.all.read().expect("endpoints lock");
        all.iter()
            .filter(|e| {
                let every = if e.ready {
                    Duration::from_millis(probe.period_ms)
                } else {
                    NOT_READY_PROBE
                };
                e.probed_at.is_none_or(|t| now.duration_since(t) >= every)
            })
            .map(|e| (e.addr.clone(), e.readyz.clone()))
            .collect()
    }

    /// The ready replicas' addresses, in order.
    fn ready(&self) -> Vec<String> {
        let all = self.all.read().expect("endpoints lock");
        all.iter()
            .filter(|e| e.ready)
            .map(|e| e.addr.clone())
            .collect()
    }

    /// Record one probe result for `addr`; `Some(new readiness)` when it changed.
    fn record(&self, addr: &str, passed: bool, probe: &ProbePlan) -> Option<bool> {
        let mut all = self.all.write().expect("endpoints lock");
        let e = all.iter_mut().find(|e| e.addr == addr)?;
        e.probed_at = Some(Instant::now());
        if passed {
            e.failures = 0;
            e.successes += 1;
            if !e.ready && e.successes >= probe.success_threshold {
                e.ready = true;
                return Some(true);
            }
        } else {
            e.successes = 0;
            e.failures += 1;
            if e.ready && e.failures >= probe.failure_threshold {
                e.ready = false;
                return Some(false);
            }
        }
        None
    }
}

/// Start the Service on this runtime: bind its port (an error when it is taken: the callers'
/// one address would be someone else's), then accept and probe for as long as the runtime runs.
pub async fn start(plan: ServicePlan) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", plan.port))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "service {}: binding 127.0.0.1:{}: {e}",
                plan.name,
                plan.port
            )
        })?;
    let local = listener.local_addr()?;
    let endpoints = Arc::new(Endpoints::default());
    let probe = reqwest::Client::builder()
        .timeout(Duration::from_millis(plan.probe.timeout_ms))
        .build()?;
    tokio::spawn(probe_loop(plan.clone(), endpoints.clone(), probe));
    tokio::spawn(accept_loop(plan.name.clone(), listener, endpoints));
    Ok(local)
}

async fn accept_loop(name: String, listener: TcpListener, endpoints: Arc<Endpoints>) {
    loop {
        let (client, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors, say: the next accept may succeed.
                crate::supervise::log(
                    "service accept failed",
                    &[("service", name.clone()), ("error", e.to_string())],
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // No ready replica: closed at once, as kube-proxy rejects a Service without endpoints.
        let Some(addr) = endpoints.pick() else {
            drop(client);
            continue;
        };
        tokio::spawn(forward(name.clone(), client, addr, endpoints.clone()));
    }
}

/// Copy one connection's bytes both ways until either side closes.
async fn forward(name: String, mut client: TcpStream, addr: String, endpoints: Arc<Endpoints>) {
    let mut addr = addr;
    // Each refusal takes one replica out of rotation, so this ends: connected, or none left.
    let mut upstream = loop {
        match TcpStream::connect(&addr).await {
            Ok(u) => break u,
            Err(_) => {
                // The replica's listener is gone (a crash, a restart, the end of its drain's
                // linger): it leaves the rotation at once, as the kubelet marks a pod whose
                // container exited NotReady, and as Kubernetes takes a terminating pod out of
                // its Service's endpoints without waiting for three failed probes. This
                // connection goes to another ready replica: on Kubernetes the caller's connect
                // would have been routed to one (or refused, which the callers retry), but this
                // Service has already accepted it, and a connection closed with nothing said
                // reads as an attempt that got no answer, which the fixed client rightly does
                // not retry (measured: 8 requests of a resilient rollout, CI, 2026-12-07).
                if endpoints.eject(&addr) {
                    crate::supervise::log(
                        "service endpoint refused a connection: out of rotation until ready",
                        &[("service", name.clone()), ("endpoint", addr.clone())],
                    );
                }
                match endpoints.pick() {
                    Some(next) => addr = next,
                    None => return,
                }
            }
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

async fn probe_loop(plan: ServicePlan, endpoints: Arc<Endpoints>, probe: reqwest::Client) {
    let mut tick =
        tokio::time::interval(NOT_READY_PROBE.min(Duration::from_millis(plan.probe.period_ms)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published: Option<Vec<String>> = None;
    loop {
        tick.tick().await;
        match read_endpoints(&plan) {
            Ok(listed) => {
                for addr in endpoints.follow(listed) {
                    crate::supervise::log(
                        "service endpoint added (out of rotation until ready)",
                        &[("service", plan.name.clone()), ("endpoint", addr)],
                    );
                }
            }
            Err(e) => crate::supervise::log(
                "service keeps its last endpoints",
                &[("service", plan.name.clone()), ("error", format!("{e:#}"))],
            ),
        }
        let targets = endpoints.due(Instant::now(), &plan.probe);
        let results =
            futures_join(targets.iter().map(|(_, readyz)| {
                let probe = probe.clone();
                let readyz = readyz.clone();
                async move {
                    matches!(probe.get(&readyz).send().await, Ok(r) if r.status().is_success())
                }
            }))
            .await;
        for ((addr, _), passed) in targets.iter().zip(results) {
            if let Some(ready) = endpoints.record(addr, passed, &plan.probe) {
                crate::supervise::log(
                    if ready {
                        "service endpoint ready"
                    } else {
                        "service endpoint not ready: out of rotation"
                    },
                    &[("service", plan.name.clone()), ("endpoint", addr.clone())],
                );
            }
        }
        // Published on change (and at the first round); an ejection between rounds is
        // published by the next one, a second later at most.
        let ready = endpoints.ready();
        if published.as_ref() != Some(&ready) {
            match write_ready(&plan.ready_file, &ready) {
                Ok(()) => published = Some(ready),
                Err(e) => crate::supervise::log(
                    "service cannot write its ready replicas",
                    &[("service", plan.name.clone()), ("error", format!("{e:#}"))],
                ),
            }
        }
    }
}

/// `ready`, one per line, replacing `path` at once (a reader sees the old list or the new one).
fn write_ready(path: &std::path::Path, ready: &[String]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut text = ready.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// The ready replicas a Service published (`host:port` each); `None` when no Service of that
/// name runs (no file).
pub fn read_ready(path: &std::path::Path) -> anyhow::Result<Option<Vec<String>>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t.lines().map(str::to_string).collect())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("reading {}: {e}", path.display())),
    }
}

/// Run the probes concurrently (a hung probe costs its timeout once, not once per replica).
async fn futures_join<F: std::future::Future<Output = bool> + Send + 'static>(
    probes: impl Iterator<Item = F>,
) -> Vec<bool> {
    let handles: Vec<_> = probes.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap_or(false));
    }
    out
}

/// `(host:port, readyz url)` per line of the endpoints file.
fn read_endpoints(plan: &ServicePlan) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(&plan.endpoints_file)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", plan.endpoints_file.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.split_whitespace();
            match (it.next(), it.next()) {
                (Some(url), Some(admin)) => Ok((
                    url.trim_start_matches("http://")
                        .trim_end_matches('/')
                        .to_string(),
                    format!("{}/readyz", admin.trim_end_matches('/')),
                )),
                _ => anyhow::bail!(
                    "{}: expected `<url> <admin url>` per line, got {l:?}",
                    plan.endpoints_file.display()
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe() -> ProbePlan {
        ProbePlan::entity_service()
    }

    #[test]
    fn a_new_replica_waits_for_its_first_probe_and_three_failures_take_it_out() {
        let e = Endpoints::default();
        let joined = e.follow(vec![("a:1".into(), "http://a:2/readyz".into())]);
        assert_eq!(joined, vec!["a:1".to_string()]);
        assert_eq!(e.pick(), None, "out of rotation until ready");
        assert_eq!(e.record("a:1", true, &probe()), Some(true));
        assert_eq!(e.pick().as_deref(), Some("a:1"));
        assert_eq!(e.record("a:1", false, &probe()), None);
        assert_eq!(e.record("a:1", false, &probe()), None);
        assert_eq!(e.pick().as_deref(), Some("a:1"), "two failures keep it");
        assert_eq!(e.record("a:1", false, &probe()), Some(false));
        assert_eq!(e.pick(), None);
        // Back after one probe; a refused connection takes it out without waiting for probes.
        assert_eq!(e.record("a:1", true, &probe()), Some(true));
        assert!(e.eject("a:1"));
        assert_eq!(e.pick(), None);
        assert!(!e.eject("a:1"), "already out");
    }

    #[test]
    fn connections_go_round_robin_over_ready_replicas_only_and_keep_state_across_rereads() {
        let e = Endpoints::default();
        let list = |n: usize| -> Vec<(String, String)> {
            (0..n)
                .map(|i| (format!("r:{i}"), format!("http://r:{i}/readyz")))
                .collect()
        };
        e.follow(list(3));
        e.record("r:0", true, &probe());
        e.record("r:2", true, &probe());
        let picks: Vec<String> = (0..4).filter_map(|_| e.pick()).collect();
        assert_eq!(picks, ["r:0", "r:2", "r:0", "r:2"]);
        // Re-read with one more replica: the ready ones stay ready, the new one waits.
        assert_eq!(e.follow(list(4)), vec!["r:3".to_string()]);
        let mut seen: Vec<String> = (0..4).filter_map(|_| e.pick()).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, ["r:0", "r:2"]);
        // Scaled down to one: the others leave at once.
        e.follow(list(1));
        assert_eq!(e.pick().as_deref(), Some("r:0"));
    }

    #[tokio::test]
    async fn one_address_spreads_connections_over_the_replicas_and_refuses_when_none_is_ready() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Two "replicas", each answering every connection with its own name, and an admin
        // listener per replica answering /readyz (a minimal HTTP/1.1 200).
        let mut lines = Vec::new();
        for name in ["one", "two"] {
            let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
            lines.push(format!(
                "http://{} http://{}",
                public.local_addr().unwrap(),
                admin.local_addr().unwrap()
            ));
            tokio::spawn(async move {
                loop {
                    let (mut s, _) = public.accept().await.unwrap();
                    s.write_all(name.as_bytes()).await.unwrap();
                }
            });
            tokio::spawn(async move {
                loop {
                    let (mut s, _) = admin.accept().await.unwrap();
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                }
            });
        }
        let dir = std::env::temp_dir().join(format!("lab-service-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("endpoints-fake");
        std::fs::write(&file, "").unwrap();
        let plan = ServicePlan {
            name: "fake".into(),
            port: 0,
            endpoints_file: file.clone(),
            probe: ProbePlan {
                period_ms: 50,
                timeout_ms: 500,
                failure_threshold: 1,
                success_threshold: 1,
            },
            ready_file: dir.join("service-fake"),
        };
        let addr = start(plan).await.unwrap();
        let read_one = || async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let mut out = String::new();
            let _ =
                tokio::time::timeout(Duration::from_millis(300), s.read_to_string(&mut out)).await;
            out
        };
        // No endpoints yet: the connection is closed with nothing said.
        assert_eq!(read_one().await, "");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let mut seen = Vec::new();
        for _ in 0..100 {
            let got = read_one().await;
            if !got.is_empty() {
                seen.push(got);
            }
            if seen.len() >= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen, ["one", "two"], "both replicas behind the one address");
        let mut ready = read_ready(&dir.join("service-fake")).unwrap().unwrap();
        ready.sort();
        let mut want: Vec<String> = lines
            .iter()
            .map(|l| {
                l.split_whitespace()
                    .next()
                    .unwrap()
                    .trim_start_matches("http://")
                    .to_string()
            })
            .collect();
        want.sort();
        assert_eq!(ready, want, "the ready replicas are published");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A replica that refuses (its listener gone) is taken out of rotation, and the connection
    /// the Service had accepted goes to a ready one instead of being closed with nothing said.
    #[tokio::test]
    async fn a_connection_a_replica_refuses_goes_to_another_ready_one() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let live = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_addr = live.local_addr().unwrap().to_string();
        let gone = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone_addr = gone.local_addr().unwrap().to_string();
        drop(gone);
        tokio::spawn(async move {
            loop {
                let (mut s, _) = live.accept().await.unwrap();
                s.write_all(b"live").await.unwrap();
            }
        });
        let e = Arc::new(Endpoints::default());
        e.follow(vec![
            (gone_addr.clone(), "http://x/readyz".into()),
            (live_addr.clone(), "http://y/readyz".into()),
        ]);
        let plan = ProbePlan::entity_service();
        e.record(&gone_addr, true, &plan);
        e.record(&live_addr, true, &plan);
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        let mut caller = TcpStream::connect(front_addr).await.unwrap();
        let (accepted, _) = front.accept().await.unwrap();
        tokio::spawn(forward("t".into(), accepted, gone_addr.clone(), e.clone()));
        let mut out = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), caller.read_to_string(&mut out)).await;
        assert_eq!(out, "live");
        assert_eq!(
            e.pick().as_deref(),
            Some(live_addr.as_str()),
            "the refuser is out"
        );
        assert_eq!(e.pick().as_deref(), Some(live_addr.as_str()));
    }
}
