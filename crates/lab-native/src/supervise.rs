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
    /// The admin listener (`/livez`, `/readyz`, `/metrics`): [`admin_port`] of `port`.
    pub admin_port: u16,
    pub env: BTreeMap<String, String>,
}

/// The native lab's port plan for admin listeners: the public port + 1000 (8080 -> 9080,
/// 8101 -> 9101, ...), so each replica's two ports are easy to tell apart and never collide
/// with another tier's public ports (81xx, 82xx, 83xx).
pub fn admin_port(port: u16) -> u16 {
    port.saturating_add(1000)
}

/// What `up` asks the supervisor to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub bin_dir: PathBuf,
    pub state_dir: PathBuf,
    pub procs: Vec<ProcSpec>,
    /// The native lab's trace receiver, run inside the supervisor (none: traces go where the
    /// user's `OTEL_EXPORTER_OTLP_ENDPOINT` says, or nowhere).
    #[serde(default)]
    pub traces: Option<TracesPlan>,
    /// Services run inside the supervisor: one address in front of a binary's replicas
    /// ([`crate::service`]).
    #[serde(default)]
    pub services: Vec<crate::service::ServicePlan>,
}

/// Where the supervisor's OTLP receiver listens, and how many traces it keeps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TracesPlan {
    pub otlp_port: u16,
    pub api_port: u16,
    pub capacity: usize,
}

/// What the supervisor reports, rewritten on every change (`run/lab.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub supervisor_pid: u32,
    pub procs: Vec<ProcState>,
    /// The trace receiver's query API (`labctl trace`), when the supervisor runs one.
    #[serde(default)]
    pub traces_api: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcState {
    pub name: String,
    pub binary: String,
    pub port: u16,
    #[serde(default)]
    pub admin_port: u16,
    pub pid: Option<u32>,
    /// Restarts after the replica exited on its own (crash, kill -9, OOM kill).
    pub restarts: u32,
    pub last_exit: Option<String>,
    /// Deliberate restarts (`labctl rollout restart`): a new process with a cold cache, like a
    /// new pod of a rollout. Not crashes.
    #[serde(default)]
    pub rollouts: u32,
    /// Exits killed by the memory limit (the kernel's OOM killer in the replica's cgroup).
    #[serde(default)]
    pub oom_kills: u32,
    /// The memory limit in force for this replica (bytes), if any.
    #[serde(default)]
    pub memory_limit_bytes: Option<u64>,
}

/// What `labctl` asks a running supervisor to do (`run/control/*.json`, one file a command).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Control {
    /// Stop the replica gracefully (SIGTERM, its drain) and start it again at once: one step of a
    /// rolling restart.
    Restart { name: String },
    /// Start a new replica.
    Add { spec: ProcSpec },
    /// Stop a replica for good.
    Remove { name: String },
    /// Put every replica of `binary` (those running and those started later) under a memory
    /// limit (`None`: no limit).
    MemoryLimit { binary: String, bytes: Option<u64> },
}

/// The control directory: labctl writes `cmd-<id>.json`, the supervisor executes it within a
/// tick (200 ms), removes it and writes `done-<id>.json` with the outcome.
pub fn control_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("run").join("control")
}

/// The supervisor's answer to one command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Done {
    pub ok: bool,
    pub message: String,
}

/// Send `cmd` to the running supervisor and wait (bounded) for its answer.
pub async fn send(state_dir: &Path, cmd: &Control) -> anyhow::Result<Done> {
    let Some(state) = read_state(state_dir)? else {
        bail!("no lab is up: start one with `labctl up`");
    };
    anyhow::ensure!(
        process_alive(state.supervisor_pid),
        "the lab's supervisor (pid {}) is gone; `labctl down` then `labctl up`",
        state.supervisor_pid
    );
    let dir = control_dir(state_dir);
    fs::create_dir_all(&dir)?;
    let id = format!(
        "{:020}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos(),
        std::process::id()
    );
    let tmp = dir.join(format!("tmp-{id}.json"));
    fs::write(&tmp, serde_json::to_vec(cmd)?)?;
    fs::rename(&tmp, dir.join(format!("cmd-{id}.json")))?;
    let done = dir.join(format!("done-{id}.json"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(bytes) = fs::read(&done) {
            let _ = fs::remove_file(&done);
            return serde_json::from_slice(&bytes).context("reading the supervisor's answer");
        }
        if Instant::now() >= deadline {
            bail!("the supervisor did not take the command within 10 s (see .lab/logs/supervisor.log)");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The file listing the URLs of every replica of `binary` the supervisor runs, one per line:
/// the native lab's Endpoints object. The gateway re-reads it (`upstream.orchestrators_file`),
/// so a scaled-up replica joins its rotation the way a Service gains endpoints.
pub fn endpoints_file(state_dir: &Path, binary: &str) -> PathBuf {
    state_dir.join("run").join(format!("endpoints-{binary}"))
}

/// Where the Service in front of `binary` publishes its ready replicas
/// ([`crate::service::ServicePlan::ready_file`]).
pub fn service_ready_file(state_dir: &Path, binary: &str) -> PathBuf {
    state_dir.join("run").join(format!("service-{binary}"))
}

/// Where replica `name` keeps the last flag values it read (`[flags] last_known_file`): it
/// outlives the process, so a replica the supervisor restarts during a Redis outage runs what
/// its peers run, and `labctl up` removes it, so a new lab starts from the store.
pub fn flags_file(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join("run").join(format!("flags-{name}.json"))
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
    // Our own child (the supervisor, when `labctl replay` started the lab in-process) stays a
    // zombie after it exits until we reap it, and a zombie still answers signal 0: reap first.
    let mut status = 0;
    let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
    if reaped == pid as libc::pid_t {
        return false;
    }
    // Signal 0 checks existence and permission without sending anything.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn signal(pid: u32, sig: libc::c_int) {
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Start `labctl supervise` detached from this terminal and return its pid.
/// The lab's `run/` directory, made readable by its owner only: the plan, the supervisor's
/// commands (a scaled replica's spec) and `redis-users.json` carry the services' Redis
/// passwords in their environments.
pub fn private_run_dir(state_dir: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let run = state_dir.join("run");
    fs::create_dir_all(&run).with_context(|| format!("creating {}", run.display()))?;
    fs::set_permissions(&run, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", run.display()))?;
    Ok(run)
}

pub fn spawn_supervisor(plan: &Plan) -> anyhow::Result<u32> {
    use std::os::unix::process::CommandExt;
    let run = private_run_dir(&plan.state_dir)?;
    fs::create_dir_all(plan.state_dir.join("logs"))?;
    let plan_path = run.join("plan.json");
    fs::write(&plan_path, serde_json::to_vec_pretty(plan)?)?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(plan.state_dir.join("logs").join("supervisor.log"))?;
    let exe = std::env::current_exe().context("locating labctl itself")?;
    let mut cmd = Command::new(exe);
    // The lab runs at the ordinary priority whatever its caller's (crate::priority).
    crate::priority::ordinary_in_child(&mut cmd);
    let child = cmd
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
    /// A deliberate stop is in progress: restart at once when it exits (`Restart`), or drop the
    /// replica (`Remove`).
    stopping: Option<Stopping>,
    rollouts: u32,
    oom_kills: u32,
    /// The cgroup this replica's process is in, when a memory limit applies.
    cgroup: Option<crate::cgroup::MemoryGroup>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopping {
    Restart,
    Remove,
}

/// First restart delay after an exit. Kubernetes starts CrashLoopBackOff at 10 s; a lab that
/// wants to show "the replica came back" uses 1 s, doubling per consecutive crash up to
/// [`MAX_BACKOFF`], reset after [`STABLE_AFTER`] of uptime.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const STABLE_AFTER: Duration = Duration::from_secs(30);

/// The supervisor's main loop (runs until SIGTERM/SIGINT).
pub async fn supervise(plan_path: &Path) -> anyhow::Result<()> {
    let mut sup = Supervisor::new(plan_path).await?;
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
        sup.tick()?;
    }
    sup.shutdown().await
}

/// What the supervisor's loop works on, from one tick to the next.
struct Supervisor {
    plan: Plan,
    control: PathBuf,
    procs: Vec<Running>,
    /// Memory limits per binary (`labctl limits`), applied to replicas started later too.
    memory_limits: BTreeMap<String, u64>,
    /// When each replica's current process started (a crash after a stable run resets backoff).
    started_at: BTreeMap<String, Instant>,
    traces_api: Option<String>,
}

impl Supervisor {
    /// Read the plan, clear stale commands and cgroups, write the endpoints files and start the
    /// trace receiver; no replica is started yet (the first tick does).
    async fn new(plan_path: &Path) -> anyhow::Result<Self> {
        let plan: Plan =
            serde_json::from_slice(&fs::read(plan_path)?).context("reading the plan")?;
        let procs: Vec<Running> = plan.procs.iter().cloned().map(Running::new).collect();
        let control = control_dir(&plan.state_dir);
        fs::create_dir_all(&control)?;
        // Commands left from a previous supervisor are not ours.
        for e in fs::read_dir(&control)?.flatten() {
            let _ = fs::remove_file(e.path());
        }
        write_endpoints(&plan.state_dir, &procs)?;
        // A previous lab's Services are not ours (a rollout would wait on a stale list).
        for b in crate::Service::ALL {
            let _ = fs::remove_file(service_ready_file(&plan.state_dir, b.as_str()));
        }
        for svc in &plan.services {
            // Before any replica starts: a caller that connects early is refused (no endpoints
            // ready), never sent to whoever else holds the port.
            let addr = crate::service::start(svc.clone()).await?;
            log(
                "service started",
                &[("service", svc.name.clone()), ("address", addr.to_string())],
            );
        }
        crate::cgroup::remove_stale();
        let traces_api = match &plan.traces {
            Some(t) => start_traces(t).await,
            None => None,
        };
        Ok(Supervisor {
            plan,
            control,
            procs,
            memory_limits: BTreeMap::new(),
            started_at: BTreeMap::new(),
            traces_api,
        })
    }

    /// One tick: execute the control commands, reap every exited replica and start those due,
    /// drop the removed ones; rewrite the state file if anything changed.
    fn tick(&mut self) -> anyhow::Result<()> {
        let mut changed = apply_commands(
            &self.plan,
            &self.control,
            &mut self.procs,
            &mut self.memory_limits,
        )?;
        for p in self.procs.iter_mut() {
            changed |= p.reap(&self.started_at)?;
            changed |= p.start_if_due(&self.plan, &self.memory_limits, &mut self.started_at);
        }
        changed |= self.drop_removed()?;
        if changed {
            write_state(
                &self.plan.state_dir,
                &snapshot(&self.procs, self.traces_api.clone()),
            )?;
        }
        Ok(())
    }

    /// Removed replicas that have exited leave the plan (and the endpoints files); `true` when
    /// any did.
    fn drop_removed(&mut self) -> anyhow::Result<bool> {
        let before = self.procs.len();
        self.procs
            .retain(|p| !(p.child.is_none() && p.restart_at.is_none() && p.stopping.is_none()));
        if self.procs.len() == before {
            return Ok(false);
        }
        write_endpoints(&self.plan.state_dir, &self.procs)?;
        Ok(true)
    }

    /// Stop every replica (the Kafka consumers first, one at a time), remove their cgroups and
    /// the state file.
    async fn shutdown(mut self) -> anyhow::Result<()> {
        stop_consumers(&mut self.procs).await?;
        stop_replicas(&mut self.procs).await?;
        for p in &self.procs {
            if let Some(g) = &p.cgroup {
                g.remove();
            }
        }
        let _ = fs::remove_file(state_file(&self.plan.state_dir));
        log("supervisor stopped", &[]);
        Ok(())
    }
}

/// Stop the Kafka consumers (the enrichment workers) one at a time, 4 s apart.
///
/// Kafka consumers go first, one at a time: tansu (the native lab's broker) wedges a consumer
/// group for good when two members leave at once: afterwards no consumer can join it until
/// the broker restarts (measured with two librdkafka clients closing together: a third waited
/// 30 s and got nothing; closed 4 s apart, it was assigned every partition in 3.2 s). Apache
/// Kafka has no such problem; the order costs `labctl down` a few seconds.
async fn stop_consumers(procs: &mut [Running]) -> anyhow::Result<()> {
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
        wait_or_kill(
            c,
            &p.spec.name,
            deadline,
            "consumer did not stop in time; SIGKILL",
        )
        .await?;
    }
    Ok(())
}

/// SIGTERM every replica still running, then wait for them all, SIGKILLing those still up
/// after 15 s.
async fn stop_replicas(procs: &mut [Running]) -> anyhow::Result<()> {
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
            wait_or_kill(
                c,
                &p.spec.name,
                deadline,
                "replica did not stop in time; SIGKILL",
            )
            .await?;
        }
    }
    Ok(())
}

/// Wait until `child` exits; at `deadline`, log `msg` and SIGKILL it.
async fn wait_or_kill(
    child: &mut Child,
    name: &str,
    deadline: Instant,
    msg: &str,
) -> anyhow::Result<()> {
    while child.try_wait()?.is_none() {
        if Instant::now() >= deadline {
            log(msg, &[("replica", name.to_string())]);
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

impl Running {
    fn new(spec: ProcSpec) -> Self {
        Running {
            spec,
            child: None,
            restarts: 0,
            last_exit: None,
            restart_at: Some(Instant::now()),
            backoff: FIRST_BACKOFF,
            stopping: None,
            rollouts: 0,
            oom_kills: 0,
            cgroup: None,
        }
    }

    /// If the process exited, record how and schedule what follows; `true` when it had exited.
    fn reap(&mut self, started_at: &BTreeMap<String, Instant>) -> anyhow::Result<bool> {
        let Some(child) = self.child.as_mut() else {
            return Ok(false);
        };
        let Some(status) = child.try_wait()? else {
            return Ok(false);
        };
        let up = started_at
            .get(&self.spec.name)
            .map(|t| t.elapsed())
            .unwrap_or_default();
        self.child = None;
        let exit = self.exit_reason(status);
        self.last_exit = Some(exit.clone());
        match self.stopping.take() {
            Some(Stopping::Restart) => self.rolled_out(exit),
            Some(Stopping::Remove) => self.removed(exit),
            None => self.crashed(exit, up),
        }
        Ok(true)
    }

    /// How the process ended, an OOM kill in its memory cgroup counted and named as such.
    fn exit_reason(&mut self, status: std::process::ExitStatus) -> String {
        let oom = self.cgroup.as_ref().is_some_and(|g| g.take_oom_kill());
        if oom {
            self.oom_kills += 1;
            format!("OOMKilled ({})", describe(status))
        } else {
            describe(status)
        }
    }

    /// A rollout's stop completed: count it and start the new process at once.
    fn rolled_out(&mut self, exit: String) {
        self.rollouts += 1;
        self.restart_at = Some(Instant::now());
        log(
            "replica stopped for a rollout; starting the new one",
            &[("replica", self.spec.name.clone()), ("exit", exit)],
        );
    }

    /// A removal's stop completed: never start again, and give up the cgroup.
    fn removed(&mut self, exit: String) {
        self.restart_at = None;
        if let Some(g) = self.cgroup.take() {
            g.remove();
        }
        log(
            "replica removed",
            &[("replica", self.spec.name.clone()), ("exit", exit)],
        );
    }

    /// The process exited on its own after `up`: restart it after the crash-loop backoff,
    /// reset first if the run was stable.
    fn crashed(&mut self, exit: String, up: Duration) {
        if up >= STABLE_AFTER {
            self.backoff = FIRST_BACKOFF;
        }
        self.restarts += 1;
        self.restart_at = Some(Instant::now() + self.backoff);
        log(
            "replica exited; restarting",
            &[
                ("replica", self.spec.name.clone()),
                ("exit", exit),
                ("restarts", self.restarts.to_string()),
                ("restart_in_ms", self.backoff.as_millis().to_string()),
            ],
        );
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Start the process if it is down and its (re)start is due, under its binary's memory
    /// limit; on failure retry after the backoff. `true` when a start was attempted.
    fn start_if_due(
        &mut self,
        plan: &Plan,
        memory_limits: &BTreeMap<String, u64>,
        started_at: &mut BTreeMap<String, Instant>,
    ) -> bool {
        let due = self.child.is_none() && self.restart_at.is_some_and(|t| Instant::now() >= t);
        if !due {
            return false;
        }
        match start(plan, &self.spec) {
            Ok(child) => {
                log(
                    "replica started",
                    &[
                        ("replica", self.spec.name.clone()),
                        ("pid", child.id().to_string()),
                    ],
                );
                if let Some(limit) = memory_limits.get(&self.spec.binary) {
                    self.cgroup = limit_memory(&self.spec.name, child.id(), *limit);
                }
                started_at.insert(self.spec.name.clone(), Instant::now());
                self.child = Some(child);
                self.restart_at = None;
            }
            Err(e) => {
                log(
                    "replica failed to start",
                    &[
                        ("replica", self.spec.name.clone()),
                        ("error", format!("{e:#}")),
                    ],
                );
                self.restart_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            }
        }
        true
    }
}

/// Execute the commands waiting in `control`, oldest first; `true` when something changed.
fn apply_commands(
    plan: &Plan,
    control: &Path,
    procs: &mut Vec<Running>,
    memory_limits: &mut BTreeMap<String, u64>,
) -> anyhow::Result<bool> {
    let mut files: Vec<PathBuf> = fs::read_dir(control)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cmd-") && n.ends_with(".json"))
        })
        .collect();
    files.sort();
    let mut changed = false;
    for path in files {
        let id = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| {
                n.trim_start_matches("cmd-")
                    .trim_end_matches(".json")
                    .to_string()
            })
            .unwrap_or_default();
        let outcome = match fs::read(&path)
            .map_err(anyhow::Error::from)
            .and_then(|b| serde_json::from_slice::<Control>(&b).map_err(Into::into))
        {
            Ok(cmd) => {
                log("command", &[("command", format!("{cmd:?}"))]);
                apply(plan, &cmd, procs, memory_limits)
            }
            Err(e) => Err(e),
        };
        let _ = fs::remove_file(&path);
        let done = match outcome {
            Ok(message) => {
                changed = true;
                Done { ok: true, message }
            }
            Err(e) => Done {
                ok: false,
                message: format!("{e:#}"),
            },
        };
        // Written whole, then renamed into place: the sender polls for `done-<id>.json` and
        // read a file `fs::write` had created but not yet filled (a rollout failed on "EOF while
        // parsing" in a replay's full rollout).
        let tmp = control.join(format!("tmp-done-{id}.json"));
        fs::write(&tmp, serde_json::to_vec(&done)?)?;
        fs::rename(&tmp, control.join(format!("done-{id}.json")))?;
    }
    if changed {
        write_endpoints(&plan.state_dir, procs)?;
    }
    Ok(changed)
}

fn apply(
    plan: &Plan,
    cmd: &Control,
    procs: &mut Vec<Running>,
    memory_limits: &mut BTreeMap<String, u64>,
) -> anyhow::Result<String> {
    let find = |procs: &mut Vec<Running>, name: &str| -> anyhow::Result<usize> {
        procs
            .iter()
            .position(|p| p.spec.name == *name)
            .with_context(|| format!("no replica named {name}"))
    };
    match cmd {
        Control::Restart { name } | Control::Remove { name } => {
            let i = find(procs, name)?;
            let p = &mut procs[i];
            let how = if matches!(cmd, Control::Restart { .. }) {
                Stopping::Restart
            } else {
                Stopping::Remove
            };
            match p.child.as_ref() {
                Some(c) => {
                    p.stopping = Some(how);
                    signal(c.id(), libc::SIGTERM);
                    Ok(format!("{name}: SIGTERM sent (pid {})", c.id()))
                }
                None => {
                    // Not running (crash-loop backoff): start now, or drop it. A restart
                    // asked for is a rollout all the same: its new process is the rollout's.
                    match how {
                        Stopping::Restart => {
                            p.rollouts += 1;
                            p.restart_at = Some(Instant::now());
                        }
                        Stopping::Remove => p.restart_at = None,
                    }
                    Ok(format!("{name}: was not running"))
                }
            }
        }
        Control::Add { spec } => {
            anyhow::ensure!(
                !procs.iter().any(|p| p.spec.name == spec.name
                    || p.spec.port == spec.port
                    || p.spec.admin_port == spec.admin_port),
                "a replica named {} or on port {} exists already",
                spec.name,
                spec.port
            );
            anyhow::ensure!(
                plan.bin_dir.join(&spec.binary).exists(),
                "{} not found in {}",
                spec.binary,
                plan.bin_dir.display()
            );
            procs.push(Running::new(spec.clone()));
            Ok(format!("{} added on port {}", spec.name, spec.port))
        }
        Control::MemoryLimit { binary, bytes } => {
            match bytes {
                Some(b) => {
                    crate::cgroup::available()?;
                    memory_limits.insert(binary.clone(), *b);
                }
                None => {
                    memory_limits.remove(binary);
                }
            }
            let mut n = 0;
            for p in procs.iter_mut().filter(|p| p.spec.binary == *binary) {
                match (bytes, p.child.as_ref()) {
                    (Some(b), Some(c)) => {
                        p.cgroup = limit_memory(&p.spec.name, c.id(), *b);
                        n += 1;
                    }
                    (None, _) => {
                        if let Some(g) = &p.cgroup {
                            g.set_limit(None)?;
                        }
                        n += 1;
                    }
                    _ => {}
                }
            }
            Ok(match bytes {
                Some(b) => format!("{binary}: memory limit {} MiB on {n} replicas", b >> 20),
                None => format!("{binary}: memory limit removed on {n} replicas"),
            })
        }
    }
}

/// Put `pid` in the replica's memory cgroup with `limit`; logs and gives up (no limit) on error.
fn limit_memory(name: &str, pid: u32, limit: u64) -> Option<crate::cgroup::MemoryGroup> {
    match crate::cgroup::MemoryGroup::create(name, limit).and_then(|g| g.add(pid).map(|_| g)) {
        Ok(g) => Some(g),
        Err(e) => {
            log(
                "cannot apply the memory limit",
                &[("replica", name.to_string()), ("error", format!("{e:#}"))],
            );
            None
        }
    }
}

/// Rewrite the endpoints files (one per binary) from the replicas the supervisor runs or will
/// run (a replica being removed is already gone from them).
fn write_endpoints(state_dir: &Path, procs: &[Running]) -> anyhow::Result<()> {
    let mut by_binary: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for p in procs {
        let list = by_binary.entry(p.spec.binary.as_str()).or_default();
        if p.stopping != Some(Stopping::Remove) && (p.child.is_some() || p.restart_at.is_some()) {
            // `<url> <admin url>`: what the gateway's endpoints file reader expects.
            list.push(format!(
                "http://127.0.0.1:{} http://127.0.0.1:{}",
                p.spec.port, p.spec.admin_port
            ));
        }
    }
    for (binary, urls) in by_binary {
        let path = endpoints_file(state_dir, binary);
        let tmp = path.with_extension("tmp");
        fs::write(&tmp, urls.join("\n") + "\n")?;
        fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// The OTLP receiver on this runtime, for as long as the supervisor runs; its API's URL. A port
/// in use is logged and the lab runs without it (the services' exporters then drop their spans
/// from a bounded queue: a missing trace backend never takes a service down).
async fn start_traces(t: &TracesPlan) -> Option<String> {
    let store = std::sync::Arc::new(lab_traces::Store::new(t.capacity));
    let started = lab_traces::receiver::start(
        ([127, 0, 0, 1], t.otlp_port).into(),
        ([127, 0, 0, 1], t.api_port).into(),
        store,
    )
    .await;
    match started {
        Ok(r) => {
            log(
                "trace receiver started",
                &[
                    ("otlp", r.otlp.to_string()),
                    ("api", r.api.to_string()),
                    ("capacity", t.capacity.to_string()),
                ],
            );
            Some(format!("http://{}", r.api))
        }
        Err(e) => {
            log("trace receiver NOT started", &[("error", format!("{e:#}"))]);
            None
        }
    }
}

fn snapshot(procs: &[Running], traces_api: Option<String>) -> State {
    State {
        traces_api,
        supervisor_pid: std::process::id(),
        procs: procs
            .iter()
            .map(|p| ProcState {
                name: p.spec.name.clone(),
                binary: p.spec.binary.clone(),
                port: p.spec.port,
                admin_port: p.spec.admin_port,
                pid: p.child.as_ref().map(Child::id),
                restarts: p.restarts,
                last_exit: p.last_exit.clone(),
                rollouts: p.rollouts,
                oom_kills: p.oom_kills,
                memory_limit_bytes: p.cgroup.as_ref().and_then(|g| g.limit()),
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
pub(crate) fn log(msg: &str, fields: &[(&str, String)]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_directory_is_made_private_even_when_an_older_lab_left_it_open() {
        use std::os::unix::fs::PermissionsExt;
        let state = std::env::temp_dir().join(format!("lab-run-{}", std::process::id()));
        let run = state.join("run");
        fs::create_dir_all(&run).unwrap();
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(private_run_dir(&state).unwrap(), run);
        let mode = fs::metadata(&run).unwrap().permissions().mode() & 0o777;
        fs::remove_dir_all(&state).unwrap();
        assert_eq!(mode, 0o700, "the plan and redis-users.json hold passwords");
    }
}
