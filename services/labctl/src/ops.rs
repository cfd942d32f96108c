//! The operations of the postmortem's timeline on the native lab, named by the verbs operators
//! already use: `labctl rollout restart orchestrator` (Argo's rollback: every pod cycled, every
//! cache cold), `labctl scale orchestrator --replicas 5` (24 → 60 pods: new cold replicas with
//! their own connection slots, joining the gateway's rotation like new endpoints of a Service),
//! and `labctl limits memory orchestrator 700M` (a pod's memory limit, enforced by the kernel).
//! Each acts through the running supervisor and waits until the lab is in the asked-for shape.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::supervise::{self, Control, ProcSpec, ProcState};

/// How long a replica may take to stop (its drain: 10 s by default) and come back ready.
const READY_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, clap::Subcommand)]
pub enum RolloutCommand {
    /// Restart every replica of a service, one at a time: each is stopped gracefully and
    /// replaced by a new process (cold caches), and the next waits until it is ready.
    Restart {
        /// orchestrator, entity-service, edge-gateway, enrichment.
        service: String,
    },
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum LimitsCommand {
    /// Put every replica of a service under a memory limit (`none` lifts it). The kernel's OOM
    /// killer enforces it; the supervisor restarts a killed replica and reports OOMKilled.
    Memory {
        service: String,
        /// A size (`700M`, `4G`, bytes) or `none`.
        limit: String,
    },
}

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

/// Wait until replica `name` runs a process other than `old_pid` and its `/readyz` passes.
async fn wait_ready(
    state_dir: &Path,
    name: &str,
    port: u16,
    old_pid: Option<u32>,
) -> anyhow::Result<u32> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let deadline = Instant::now() + READY_WAIT;
    loop {
        let pid = supervise::read_state(state_dir)?
            .and_then(|s| s.procs.into_iter().find(|p| p.name == name))
            .and_then(|p| p.pid);
        if let Some(pid) = pid.filter(|p| Some(*p) != old_pid) {
            let ready = http
                .get(format!("http://127.0.0.1:{port}/readyz"))
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

/// `labctl rollout restart <service>`.
pub async fn rollout(state_dir: &Path, cmd: &RolloutCommand) -> anyhow::Result<()> {
    let RolloutCommand::Restart { service } = cmd;
    let started = Instant::now();
    let list = replicas(state_dir, service)?;
    println!(
        "rolling restart of {} {service} replicas, one at a time",
        list.len()
    );
    for p in &list {
        let t = Instant::now();
        ok(
            state_dir,
            Control::Restart {
                name: p.name.clone(),
            },
        )
        .await?;
        let pid = wait_ready(state_dir, &p.name, p.port, p.pid).await?;
        println!(
            "  {} restarted: pid {} -> {pid}, ready after {:.1} s",
            p.name,
            p.pid.map_or("-".into(), |x| x.to_string()),
            t.elapsed().as_secs_f64()
        );
    }
    println!(
        "rollout of {service} complete in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `labctl scale <service> --replicas N`: new replicas are copies of the first one's spec on the
/// next free ports (named `<service>-<k>`); scaling down removes the highest-numbered.
pub async fn scale(state_dir: &Path, service: &str, replicas_wanted: usize) -> anyhow::Result<()> {
    anyhow::ensure!(replicas_wanted >= 1, "--replicas must be at least 1");
    anyhow::ensure!(
        replicas_wanted <= 32,
        "--replicas {replicas_wanted}: more than 32 replicas of one service on one machine is \
         not a lab any more"
    );
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
        println!("{service}: already {have} replicas");
        return Ok(());
    }
    if replicas_wanted < have {
        for p in list.iter().rev().take(have - replicas_wanted) {
            println!(
                "  {}",
                ok(
                    state_dir,
                    Control::Remove {
                        name: p.name.clone()
                    }
                )
                .await?
            );
        }
        println!("{service} scaled {have} -> {replicas_wanted}");
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
        spec.env.insert("LAB_HTTP__PORT".into(), port.to_string());
        println!(
            "  {}",
            ok(state_dir, Control::Add { spec: spec.clone() }).await?
        );
        added.push(spec);
    }
    for spec in &added {
        wait_ready(state_dir, &spec.name, spec.port, None).await?;
    }
    println!(
        "{service} scaled {have} -> {replicas_wanted} in {:.1} s (new replicas start cold and join \
         the gateway's rotation when their /readyz passes)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn next_free_port(from: u16) -> anyhow::Result<u16> {
    (from..from.saturating_add(200))
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .with_context(|| format!("no free port from {from}"))
}

/// `labctl limits memory <service> <size|none>`.
pub async fn limits(state_dir: &Path, cmd: &LimitsCommand) -> anyhow::Result<()> {
    let LimitsCommand::Memory { service, limit } = cmd;
    replicas(state_dir, service)?;
    let bytes = if limit == "none" {
        None
    } else {
        Some(crate::cgroup::parse_size(limit)?)
    };
    println!(
        "{}",
        ok(
            state_dir,
            Control::MemoryLimit {
                binary: service.clone(),
                bytes,
            }
        )
        .await?
    );
    Ok(())
}
