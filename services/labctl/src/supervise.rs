//! The native lab: service binaries as local processes, supervised like a kubelet would.
//!
//! `labctl up` plans the processes (ports, environment), starts `labctl supervise` detached, and
//! waits until every replica's `/readyz` passes. The supervisor starts the replicas, restarts any
//! that exits — visibly: a log line and a per-replica restart counter in the state file — and on
//! SIGTERM (`labctl down`) stops them gracefully. Replicas get `PR_SET_PDEATHSIG`, so they die
//! with the supervisor even if it is killed.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// One process of the lab.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcSpec {
    /// Unique name, e.g. `orchestrator-1`; also its log file's name.
    pub name: String,
    /// Binary name, e.g. `orchestrator`.
    pub binary: String,
    pub port: u16,
    pub env: BTreeMap<String, String>,
}

/// What `up` asks the supervisor to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub bin_dir: PathBuf,
    pub state_dir: PathBuf,
    pub procs: Vec<ProcSpec>,
}

/// What the supervisor reports, rewritten on every change (`run/lab.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub supervisor_pid: u32,
    pub procs: Vec<ProcState>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcState {
    pub name: String,
    pub binary: String,
    pub port: u16,
    pub pid: Option<u32>,
    pub restarts: u32,
    pub last_exit: Option<String>,
}

pub fn state_file(state_dir: &Path) -> PathBuf {
    state_dir.join("run").join("lab.json")
}

pub fn read_state(state_dir: &Path) -> anyhow::Result<Option<State>> {
    let path = state_file(state_dir);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes)
                .with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn write_state(state_dir: &Path, state: &State) -> anyhow::Result<()> {
    let path = state_file(state_dir);
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, serde_json::to_vec_pretty(state)?)?;
    fs::rename(&tmp, &path)?;
    Ok(())
}

pub fn process_alive(pid: u32) -> bool {
    // Signal 0 checks existence and permission without sending anything.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn signal(pid: u32, sig: libc::c_int) {
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Start `labctl supervise` detached from this terminal and return its pid.
pub fn spawn_supervisor(plan: &Plan) -> anyhow::Result<u32> {
    use std::os::unix::process::CommandExt;
    fs::create_dir_all(plan.state_dir.join("run"))?;
    fs::create_dir_all(plan.state_dir.join("logs"))?;
    let plan_path = plan.state_dir.join("run").join("plan.json");
    fs::write(&plan_path, serde_json::to_vec_pretty(plan)?)?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(plan.state_dir.join("logs").join("supervisor.log"))?;
    let exe = std::env::current_exe().context("locating labctl itself")?;
    let child = Command::new(exe)
        .arg("supervise")
        .arg("--plan")
        .arg(&plan_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: Ctrl-C in the terminal that ran `labctl up` does not reach it.
        .process_group(0)
        .spawn()
        .context("starting the supervisor")?;
    Ok(child.id())
}

struct Running {
    spec: ProcSpec,
    child: Option<Child>,
    restarts: u32,
    last_exit: Option<String>,
    /// When to start again after an exit (crash-loop backoff).
    restart_at: Option<Instant>,
    backoff: Duration,
}

/// First restart delay after an exit. Kubernetes starts CrashLoopBackOff at 10 s; a lab that
/// wants to show "the replica came back" uses 1 s, doubling per consecutive crash up to
/// [`MAX_BACKOFF`], reset after [`STABLE_AFTER`] of uptime.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const STABLE_AFTER: Duration = Duration::from_secs(30);

/// The supervisor's main loop (runs until SIGTERM/SIGINT).
pub async fn supervise(plan_path: &Path) -> anyhow::Result<()> {
    let plan: Plan = serde_json::from_slice(&fs::read(plan_path)?).context("reading the plan")?;
    let mut procs: Vec<Running> = plan
        .procs
        .iter()
        .cloned()
        .map(|spec| Running {
            spec,
            child: None,
            restarts: 0,
            last_exit: None,
            restart_at: Some(Instant::now()),
            backoff: FIRST_BACKOFF,
        })
        .collect();
    let mut started_at: BTreeMap<String, Instant> = BTreeMap::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    log(
        "supervisor started",
        &[("pid", std::process::id().to_string())],
    );
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {}
        }
        let mut changed = false;
        for p in procs.iter_mut() {
            if let Some(child) = p.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    let up = started_at
                        .get(&p.spec.name)
                        .map(|t| t.elapsed())
                        .unwrap_or_default();
                    if up >= STABLE_AFTER {
                        p.backoff = FIRST_BACKOFF;
                    }
                    p.child = None;
                    p.restarts += 1;
                    p.last_exit = Some(describe(status));
                    p.restart_at = Some(Instant::now() + p.backoff);
                    log(
                        "replica exited; restarting",
                        &[
                            ("replica", p.spec.name.clone()),
                            ("exit", describe(status)),
                            ("restarts", p.restarts.to_string()),
                            ("restart_in_ms", p.backoff.as_millis().to_string()),
                        ],
                    );
                    p.backoff = (p.backoff * 2).min(MAX_BACKOFF);
                    changed = true;
                }
            }
            if p.child.is_none() && p.restart_at.is_some_and(|t| Instant::now() >= t) {
                match start(&plan, &p.spec) {
                    Ok(child) => {
                        log(
                            "replica started",
                            &[
                                ("replica", p.spec.name.clone()),
                                ("pid", child.id().to_string()),
                            ],
                        );
                        started_at.insert(p.spec.name.clone(), Instant::now());
                        p.child = Some(child);
                        p.restart_at = None;
                    }
                    Err(e) => {
                        log(
                            "replica failed to start",
                            &[
                                ("replica", p.spec.name.clone()),
                                ("error", format!("{e:#}")),
                            ],
                        );
                        p.restart_at = Some(Instant::now() + p.backoff);
                        p.backoff = (p.backoff * 2).min(MAX_BACKOFF);
                    }
                }
                changed = true;
            }
        }
        if changed {
            write_state(&plan.state_dir, &snapshot(&procs))?;
        }
    }

    // Kafka consumers first, one at a time. tansu (the native lab's broker) wedges a consumer
    // group for good when two members leave at once: afterwards no consumer can join it until
    // the broker restarts (measured with two librdkafka clients closing together: a third waited
    // 30 s and got nothing; closed 4 s apart, it was assigned every partition in 3.2 s). Apache
    // Kafka has no such problem; the order costs `labctl down` a few seconds.
    let mut first = true;
    for p in procs.iter_mut().filter(|p| p.spec.binary == "enrichment") {
        let Some(c) = p.child.as_mut() else { continue };
        if !first {
            // Let the group finish the rebalance the previous leave started (~3 s on tansu).
            tokio::time::sleep(Duration::from_secs(4)).await;
        }
        first = false;
        log(
            "stopping consumer (SIGTERM)",
            &[("replica", p.spec.name.clone())],
        );
        signal(c.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        while c.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                log(
                    "consumer did not stop in time; SIGKILL",
                    &[("replica", p.spec.name.clone())],
                );
                let _ = c.kill();
                let _ = c.wait();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    log("stopping replicas (SIGTERM)", &[]);
    for p in procs.iter() {
        if let Some(c) = &p.child {
            signal(c.id(), libc::SIGTERM);
        }
    }
    // The services drain within their own bound (10 s by default); wait a little longer.
    let deadline = Instant::now() + Duration::from_secs(15);
    for p in procs.iter_mut() {
        if let Some(c) = p.child.as_mut() {
            while c.try_wait()?.is_none() {
                if Instant::now() >= deadline {
                    log(
                        "replica did not stop in time; SIGKILL",
                        &[("replica", p.spec.name.clone())],
                    );
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let _ = fs::remove_file(state_file(&plan.state_dir));
    log("supervisor stopped", &[]);
    Ok(())
}

fn snapshot(procs: &[Running]) -> State {
    State {
        supervisor_pid: std::process::id(),
        procs: procs
            .iter()
            .map(|p| ProcState {
                name: p.spec.name.clone(),
                binary: p.spec.binary.clone(),
                port: p.spec.port,
                pid: p.child.as_ref().map(Child::id),
                restarts: p.restarts,
                last_exit: p.last_exit.clone(),
            })
            .collect(),
    }
}

fn start(plan: &Plan, spec: &ProcSpec) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let bin = plan.bin_dir.join(&spec.binary);
    if !bin.exists() {
        bail!(
            "{} not found (build it: cargo build --release)",
            bin.display()
        );
    }
    let log = OpenOptions::new().create(true).append(true).open(
        plan.state_dir
            .join("logs")
            .join(format!("{}.log", spec.name)),
    )?;
    let mut cmd = Command::new(&bin);
    cmd.envs(&spec.env)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(9)) => "killed by SIGKILL".to_string(),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown".to_string(),
    }
}

/// One JSON log line on the supervisor's stderr (its log file).
fn log(msg: &str, fields: &[(&str, String)]) {
    let mut m = serde_json::Map::new();
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    m.insert("ts_unix_ms".into(), (ts as u64).into());
    m.insert("service".into(), "labctl-supervisor".into());
    m.insert("msg".into(), msg.into());
    for (k, v) in fields {
        m.insert((*k).into(), v.clone().into());
    }
    eprintln!("{}", serde_json::Value::Object(m));
}
