//! The operations of the postmortem's timeline on the native lab, named by the verbs operators
//! already use: `labctl rollout restart orchestrator` (Argo's rollback: every pod cycled, every
//! cache cold), `labctl scale orchestrator --replicas 8` (24 → 60 pods: new cold replicas with
//! their own connection slots, joining the gateway's rotation like new endpoints of a Service),
//! `labctl limits memory orchestrator 700M` (a pod's memory limit, enforced by the kernel), and
//! `labctl fault kill entity-service-1` (a pod lost: SIGKILL, no drain).
//! Each acts through the running supervisor and waits until the lab is in the asked-for shape.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::supervise::{self, Control, ProcSpec, ProcState};
use crate::{Log, Service};

/// How long a replica may take to stop (its drain: 10 s by default) and come back ready.
const READY_WAIT: Duration = Duration::from_secs(60);

fn replicas(state_dir: &Path, service: &str) -> anyhow::Result<Vec<ProcState>> {
    let Some(state) = supervise::read_state(state_dir)? else {
        bail!("no lab is up: start one with `labctl up`");
    };
    let mut r: Vec<ProcState> = state
        .procs
        .into_iter()
        .filter(|p| p.binary == service)
        .collect();
    anyhow::ensure!(
        !r.is_empty(),
        "the lab runs no {service} (services: edge-gateway, orchestrator, entity-service, enrichment)"
    );
    r.sort_by_key(|p| p.port);
    Ok(r)
}

async fn ok(state_dir: &Path, cmd: Control) -> anyhow::Result<String> {
    let done = supervise::send(state_dir, &cmd).await?;
    anyhow::ensure!(done.ok, "the supervisor refused {cmd:?}: {}", done.message);
    Ok(done.message)
}

/// Which process of a replica `wait_ready` waits for.
#[derive(Clone, Copy, Debug)]
enum NewProcess {
    /// Any process: a replica just added.
    Any,
    /// One other than this pid: the supervisor's restart after a kill.
    NotPid(u32),
    /// One started by a rollout after the replica's `before`-th: a rollout waits for its own
    /// restart, not for whatever process runs now — a replica that crashed and came back while
    /// an earlier replica rolled out runs a new pid too, and would pass for rolled out while
    /// the rollout's SIGTERM is still on its way (CI, stop 53: `rollouts` read 0 after the
    /// rollout had returned).
    RolledOutAfter(u32),
}

impl NewProcess {
    fn is(self, p: &ProcState) -> bool {
        match self {
            NewProcess::Any => true,
            NewProcess::NotPid(old) => p.pid != Some(old),
            NewProcess::RolledOutAfter(before) => p.rollouts > before,
        }
    }
}

/// Wait until replica `name` runs the process `which` names and its `/readyz` (on
/// `admin_port`) passes.
async fn wait_ready(
    state_dir: &Path,
    name: &str,
    admin_port: u16,
    which: NewProcess,
) -> anyhow::Result<u32> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let deadline = Instant::now() + READY_WAIT;
    loop {
        let pid = supervise::read_state(state_dir)?
            .and_then(|s| s.procs.into_iter().find(|p| p.name == name))
            .filter(|p| which.is(p))
            .and_then(|p| p.pid);
        if let Some(pid) = pid {
            let ready = http
                .get(format!("http://127.0.0.1:{admin_port}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(pid);
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "{name} was not back and ready within {} s; see .lab/logs/{name}.log",
                READY_WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait until every gateway of the lab has the orchestrator on `port` in its rotation
/// (`gateway_upstream_ready{endpoint}` = 1 on its admin listener).
async fn wait_in_rotation(state_dir: &Path, port: u16) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let endpoint = format!("endpoint=\"http://127.0.0.1:{port}\"");
    let deadline = Instant::now() + READY_WAIT;
    loop {
        let gateways: Vec<u16> = supervise::read_state(state_dir)?
            .map(|s| {
                s.procs
                    .into_iter()
                    .filter(|p| p.binary == "edge-gateway")
                    .map(|p| p.admin_port)
                    .collect()
            })
            .unwrap_or_default();
        let mut all = true;
        for g in &gateways {
            let text = match http
                .get(format!("http://127.0.0.1:{g}/metrics"))
                .send()
                .await
            {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            let ready = lab_core::exposition::samples(&text).any(|s| {
                s.name == "gateway_upstream_ready" && s.labels.contains(&endpoint) && s.value == 1.0
            });
            all &= ready;
        }
        if all {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the orchestrator on port {port} was ready but not back in every gateway's \
                 rotation within {} s; see .lab/logs/edge-gateway-*.log",
                READY_WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until the Service in front of `binary` (when the lab runs one) has the replica on `port`
/// among its ready endpoints: ready is not yet routable through a Service either.
async fn wait_in_service(state_dir: &Path, binary: &str, port: u16) -> anyhow::Result<()> {
    let file = supervise::service_ready_file(state_dir, binary);
    let want = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + READY_WAIT;
    loop {
        match crate::service::read_ready(&file)? {
            None => return Ok(()),
            Some(ready) if ready.contains(&want) => return Ok(()),
            Some(_) => {}
        }
        if Instant::now() >= deadline {
            bail!(
                "{binary} on port {port} was ready but not back in its Service within {} s; see \
                 .lab/logs/supervisor.log",
                READY_WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `labctl rollout restart <service>`: every replica of `service` restarted, one at a time;
/// each is stopped gracefully and replaced by a new process (cold caches), and the next waits
/// until it is ready (and, for an orchestrator, back in the gateways' rotation).
pub async fn rollout_restart(state_dir: &Path, service: Service, log: &Log) -> anyhow::Result<()> {
    let service = service.as_str();
    let started = Instant::now();
    let list = replicas(state_dir, service)?;
    log.line(format!(
        "rolling restart of {} {service} replicas, one at a time",
        list.len()
    ));
    for listed in &list {
        let t = Instant::now();
        // The replica as it is now, not as it was listed: the rollout's baseline count and the
        // pid it replaces (another restart may have come between).
        let p = replicas(state_dir, service)?
            .into_iter()
            .find(|r| r.name == listed.name)
            .with_context(|| format!("{} left the lab during the rollout", listed.name))?;
        let p = &p;
        ok(
            state_dir,
            Control::Restart {
                name: p.name.clone(),
            },
        )
        .await?;
        let pid = wait_ready(
            state_dir,
            &p.name,
            p.admin_port,
            NewProcess::RolledOutAfter(p.rollouts),
        )
        .await?;
        // Ready is not yet routable: the gateways put a replica back in rotation on their next
        // probe (up to a probe interval later). Stopping the next replica before that leaves a
        // moment with none in rotation, and requests fail with no_ready_upstream (measured by
        // the fault checks; load/scenarios/faults/rollouts.yaml now) — Kubernetes waits for the
        // endpoint, and so does this.
        if p.binary == "orchestrator" {
            wait_in_rotation(state_dir, p.port).await?;
        }
        // The same behind the entity-service Service (`labctl up --entity-address service`).
        wait_in_service(state_dir, &p.binary, p.port).await?;
        // An enrichment worker is ready before it owns a partition: stopping the next one while
        // the group rebalances wedges the group on tansu for good (measured by the fault checks,
        // load/scenarios/faults/rollouts.yaml now: both new workers at 0 partitions, the lag
        // stuck). Wait until
        // the group owns every partition again, as `labctl up` does.
        if p.binary == "enrichment" {
            let workers: Vec<u16> = replicas(state_dir, "enrichment")?
                .iter()
                .map(|w| w.admin_port)
                .collect();
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(1))
                .build()?;
            crate::fleet::wait_enrichment_group(
                &http,
                &workers,
                Instant::now() + READY_WAIT,
                READY_WAIT.as_secs(),
                state_dir,
            )
            .await?;
        }
        log.line(format!(
            "  {} restarted: pid {} -> {pid}, ready after {:.1} s",
            p.name,
            p.pid.map_or("-".into(), |x| x.to_string()),
            t.elapsed().as_secs_f64()
        ));
    }
    log.line(format!(
        "rollout of {service} complete in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `labctl fault kill <replica>`: the replica's process killed with SIGKILL — no drain, no
/// goodbye to its callers, like a lost node or the OOM killer — and the supervisor's restart of
/// it awaited until the new process is ready (an orchestrator: back in the gateways' rotation).
pub async fn kill(state_dir: &Path, replica: crate::Replica, log: &Log) -> anyhow::Result<()> {
    let name = replica.to_string();
    let all = replicas(state_dir, replica.service.as_str())?;
    let Some(p) = all.iter().find(|p| p.name == name) else {
        bail!(
            "the lab runs no {name} (its {} replicas: {})",
            replica.service,
            all.iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let Some(pid) = p.pid else {
        bail!("{name} has no process to kill (it is restarting: see labctl status)");
    };
    let t = Instant::now();
    // SAFETY: kill(2) on a pid the supervisor started and still reports as its child.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } != 0 {
        bail!(
            "kill -9 {pid} ({name}): {}",
            std::io::Error::last_os_error()
        );
    }
    log.line(format!("{name} (pid {pid}) killed with SIGKILL"));
    let new = wait_ready(state_dir, &name, p.admin_port, NewProcess::NotPid(pid)).await?;
    if p.binary == "orchestrator" {
        wait_in_rotation(state_dir, p.port).await?;
    }
    wait_in_service(state_dir, &p.binary, p.port).await?;
    log.line(format!(
        "  {name} restarted by the supervisor: pid {pid} -> {new}, ready after {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `labctl scale <service> --replicas N`: new replicas are copies of the first one's spec on the
/// next free ports (named `<service>-<k>`); scaling down removes the highest-numbered.
pub async fn scale(
    state_dir: &Path,
    service: Service,
    replicas_wanted: usize,
    log: &Log,
) -> anyhow::Result<()> {
    let service = service.as_str();
    check_replicas(replicas_wanted)?;
    let list = replicas(state_dir, service)?;
    let plan: supervise::Plan = serde_json::from_slice(
        &std::fs::read(state_dir.join("run").join("plan.json"))
            .context("reading the lab's plan")?,
    )?;
    let template: ProcSpec = plan
        .procs
        .iter()
        .find(|s| s.name == list[0].name)
        .cloned()
        .with_context(|| format!("{} is not in the lab's plan", list[0].name))?;
    let started = Instant::now();
    let have = list.len();
    if replicas_wanted == have {
        log.line(format!("{service}: already {have} replicas"));
        return Ok(());
    }
    if replicas_wanted < have {
        for p in list.iter().rev().take(have - replicas_wanted) {
            let done = ok(
                state_dir,
                Control::Remove {
                    name: p.name.clone(),
                },
            )
            .await?;
            log.line(format!("  {done}"));
        }
        log.line(format!("{service} scaled {have} -> {replicas_wanted}"));
        return Ok(());
    }
    let mut port = list.iter().map(|p| p.port).max().unwrap_or(template.port);
    let mut k = list
        .iter()
        .filter_map(|p| {
            p.name
                .rsplit_once('-')
                .and_then(|(_, n)| n.parse::<u32>().ok())
        })
        .max()
        .unwrap_or(0);
    let mut added = Vec::new();
    for _ in have..replicas_wanted {
        port = next_free_port(port + 1)?;
        k += 1;
        let mut spec = template.clone();
        spec.name = format!("{service}-{k}");
        spec.port = port;
        spec.admin_port = supervise::admin_port(port);
        spec.env.insert("LAB_HTTP__PORT".into(), port.to_string());
        spec.env
            .insert("LAB_ADMIN__PORT".into(), spec.admin_port.to_string());
        let flags_file = supervise::flags_file(state_dir, &spec.name);
        let _ = std::fs::remove_file(&flags_file);
        spec.env.insert(
            crate::fleet::FLAGS_FILE_ENV.into(),
            crate::fleet::absolute(&flags_file)
                .to_string_lossy()
                .into_owned(),
        );
        let done = ok(state_dir, Control::Add { spec: spec.clone() }).await?;
        log.line(format!("  {done}"));
        added.push(spec);
    }
    for spec in &added {
        wait_ready(state_dir, &spec.name, spec.admin_port, NewProcess::Any).await?;
    }
    log.line(format!(
        "{service} scaled {have} -> {replicas_wanted} in {:.1} s (new replicas start cold and join \
         the gateway's rotation when their /readyz passes)",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// A replica count the native lab can run: at least 1, at most 32 (more on one machine is not a
/// lab any more: every replica holds connections, memory and a share of 2 cores).
pub fn check_replicas(n: usize) -> anyhow::Result<()> {
    anyhow::ensure!(n >= 1, "--replicas must be at least 1");
    anyhow::ensure!(
        n <= 32,
        "--replicas {n}: more than 32 replicas of one service on one machine is not a lab any more"
    );
    Ok(())
}

fn next_free_port(from: u16) -> anyhow::Result<u16> {
    (from..from.saturating_add(200))
        .find(|p| {
            [*p, supervise::admin_port(*p)]
                .iter()
                .all(|q| std::net::TcpListener::bind(("127.0.0.1", *q)).is_ok())
        })
        .with_context(|| format!("no free port from {from}"))
}

/// `labctl limits memory <service> <size|none>`: every replica of `service` under a memory
/// limit of `bytes` (`None` lifts it). The kernel's OOM killer enforces it; the supervisor
/// restarts a killed replica and reports OOMKilled.
pub async fn limit_memory(
    state_dir: &Path,
    service: Service,
    bytes: Option<u64>,
    log: &Log,
) -> anyhow::Result<()> {
    let service = service.as_str();
    replicas(state_dir, service)?;
    let done = ok(
        state_dir,
        Control::MemoryLimit {
            binary: service.to_string(),
            bytes,
        },
    )
    .await?;
    log.line(done);
    Ok(())
}
