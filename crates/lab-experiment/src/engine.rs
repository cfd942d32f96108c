//! The experiment engine's core: run one scenario on a running lab — flags and rate per phase,
//! the phases' actions on the timeline, the open-loop load, a scrape of every replica each second
//! (replicas added mid-run included) — and return everything measured. `labctl gameday` and
//! `labctl replay` both drive it; neither interprets anything while it runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::FutureExt;
use serde::Serialize;

use crate::action::{Action, Step};
use crate::rows::RunRows;
use crate::scenario::Scenario;
use crate::scrape::{self, Scrape, Series, Target, Tick};
use crate::{wait_applied, Globals, Mode};
use lab_load::{DocSource, Docs, LoadArgs, LoadReport, RateControl, TenantMix};
use lab_native::deps::Deps;
use lab_native::supervise;
use lab_native::{Lab, Log, NativeLab};
use lab_report::quantity::Fine;
use lab_report::summary::{self as report, Check, PhaseSummary};
use lab_seed::ApiKeyRecord;

/// Where the replicas to scrape come from.
#[derive(Debug, Clone)]
pub enum TargetSource {
    /// A fixed list (`--targets`: a lab labctl did not start).
    Fixed(Vec<Target>),
    /// The native lab's supervisor state, re-read every tick: a replica `labctl scale` adds is
    /// scraped from its first second, and the supervisor's own counters (restarts, OOM kills,
    /// rollouts) become the series of a `supervisor` target.
    Native(PathBuf),
}

/// One run of a scenario.
pub struct Run<'a> {
    pub scenario: &'a Scenario,
    pub mode: Mode,
    pub rate: f64,
    pub tenants: TenantMix,
    pub extra_flags: &'a [(String, String)],
    pub gateway: String,
    pub targets: TargetSource,
    pub seed: u64,
    pub out: PathBuf,
    /// Every phase's length is multiplied by this (a shorter replay keeps the same shape).
    pub time_scale: f64,
}

pub use lab_report::summary::PhaseReport;

/// When the last of `phase`'s commands ended (seconds since the start of the run; 0 if none).
pub fn actions_end(actions: &[ActionRun], phase: &str) -> f64 {
    actions
        .iter()
        .filter(|a| a.phase == phase)
        .map(|a| a.started_at + a.seconds)
        .fold(0.0, f64::max)
}

/// An action a phase ran, and how it went.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ActionRun {
    pub phase: String,
    pub command: String,
    pub started_at: f64,
    pub seconds: f64,
    pub ok: bool,
}

/// Everything one run measured.
pub struct Outcome {
    pub phases: Vec<PhaseReport>,
    pub targets: Vec<Target>,
    pub load: LoadReport,
    pub consistency: Vec<Check>,
    pub actions: Vec<ActionRun>,
}

/// The targets of the native lab's state, plus the supervisor's pseudo-target.
pub fn native_targets(state_dir: &Path) -> anyhow::Result<(Vec<Target>, supervise::State)> {
    let Some(state) = supervise::read_state(state_dir)? else {
        bail!("no lab is up: start one with `labctl up` (or name the replicas with --targets)");
    };
    let mut t: Vec<Target> = state
        .procs
        .iter()
        .map(|p| Target {
            service: p.binary.clone(),
            replica: p.name.clone(),
            // Scraped: the replica's admin listener, where /metrics is.
            url: format!("http://127.0.0.1:{}", p.admin_port),
        })
        .collect();
    t.push(Target {
        service: SUPERVISOR.into(),
        replica: SUPERVISOR.into(),
        url: String::new(),
    });
    Ok((t, state))
}

pub use crate::scrape::{DATABASE, SUPERVISOR};

/// The supervisor's counters as a scrape: `lab_supervisor_{restarts,oom_kills,rollouts}_total`
/// per replica, and `lab_supervisor_replicas{binary}` (replicas with a process right now); and,
/// read from the kernel by this process, `lab_supervisor_runqueue_wait_seconds_total` per
/// replica (its threads' time runnable but waiting for a CPU: [`crate::runqueue`]).
fn supervisor_scrape(state: &supervise::State) -> Scrape {
    let mut m = std::collections::HashMap::new();
    let mut running: std::collections::BTreeMap<&str, f64> = Default::default();
    for p in &state.procs {
        let l = format!("{{replica=\"{}\",binary=\"{}\"}}", p.name, p.binary);
        m.insert(
            format!("lab_supervisor_restarts_total{l}"),
            f64::from(p.restarts),
        );
        m.insert(
            format!("lab_supervisor_oom_kills_total{l}"),
            f64::from(p.oom_kills),
        );
        m.insert(
            format!("lab_supervisor_rollouts_total{l}"),
            f64::from(p.rollouts),
        );
        if let Some(wait) = p.pid.and_then(crate::runqueue::wait_seconds) {
            m.insert(
                format!("lab_supervisor_runqueue_wait_seconds_total{l}"),
                wait,
            );
        }
        *running.entry(&p.binary).or_default() += f64::from(u8::from(p.pid.is_some()));
    }
    for (b, n) in running {
        m.insert(format!("lab_supervisor_replicas{{binary=\"{b}\"}}"), n);
    }
    Some(m)
}

/// Scrape every target once (the supervisor's from its state file).
pub async fn scrape_once(
    http: &reqwest::Client,
    source: &TargetSource,
    targets: &mut Vec<Target>,
) -> anyhow::Result<Vec<Scrape>> {
    let mut supervisor = None;
    if let TargetSource::Native(dir) = source {
        let (now, state) = native_targets(dir)?;
        // Append-only: a target keeps its index for the whole run (removed ones stop answering).
        for t in now {
            if !targets.iter().any(|x| x.replica == t.replica) {
                targets.push(t);
            }
        }
        supervisor = Some(supervisor_scrape(&state));
    }
    let http_targets: Vec<Target> = targets
        .iter()
        .filter(|t| t.service != SUPERVISOR && t.service != DATABASE)
        .cloned()
        .collect();
    let mut scraped = scrape::scrape_all(http, &http_targets).await.into_iter();
    Ok(targets
        .iter()
        .map(|t| match t.service.as_str() {
            SUPERVISOR => supervisor.clone().flatten(),
            // Read by the run itself ([`crate::rows`]), when a verdict needs it.
            DATABASE => None,
            _ => scraped.next().flatten(),
        })
        .collect())
}

/// A spawned task aborted when its handle is dropped (a tokio `JoinHandle` dropped lets its task
/// run on): an experiment stopped mid-run (labctl on Ctrl-C drops it, then brings the lab down
/// and runs ANALYZE) must not leave its load generator sending and its actions acting meanwhile
/// — an invalidate finishing after that ANALYZE would leave the plan stale.
pub(crate) struct Task<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Task<T> {
    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl<T> std::future::Future for Task<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Run `steps` one after another, in process, recording each and whether it went as the
/// scenario expects (most must succeed; some must fail); what they did goes to `log`.
fn run_actions(
    g: Globals,
    phase: String,
    steps: Vec<Step>,
    log: Log,
    t0: Instant,
) -> Task<Vec<ActionRun>> {
    Task(tokio::spawn(async move {
        let lab = NativeLab::new(&g.state_dir, log.clone());
        let mut done = Vec::new();
        for step in steps {
            let started_at = t0.elapsed().as_secs_f64();
            println!("  t={started_at:5.1}s run: {step}");
            log.line(format!("t={started_at:.1}s {step}"));
            let failed = failure(&step.action, &lab, g.deps(), &log).await;
            let ok = step.as_expected(failed.as_deref());
            let outcome = match (&failed, ok) {
                (None, true) => "done".to_string(),
                (Some(why), true) => format!("failed, as expected: {why}"),
                (None, false) => "SUCCEEDED, but the scenario expects it to fail".to_string(),
                (Some(why), false) => format!("FAILED: {why}"),
            };
            log.line(format!("{step}: {outcome}"));
            let seconds = t0.elapsed().as_secs_f64() - started_at;
            println!(
                "  t={:5.1}s {step} ({seconds:.1} s): {outcome}",
                t0.elapsed().as_secs_f64(),
            );
            done.push(ActionRun {
                phase: phase.clone(),
                command: step.to_string(),
                started_at,
                seconds,
                ok,
            });
        }
        done
    }))
}

/// Run `action`; `None` when it succeeded, else why not. In process now, not a subprocess: an
/// action that panics is recorded as failed, with the panic's message, instead of taking the
/// phase's other records down with its task.
async fn failure(action: &Action, lab: &impl Lab, deps: Deps<'_>, log: &Log) -> Option<String> {
    let run = std::panic::AssertUnwindSafe(action.run(lab, deps, log));
    match run.catch_unwind().await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("{e:#}")),
        Err(panic) => Some(format!("panicked: {}", panic_message(&*panic))),
    }
}

/// What a panic carried, if it was a message.
fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Run `run` against the lab: the mode and extra flags first (every other flag reset), a
/// baseline scrape, then the load and the timeline, then the settle time and the cleanup.
pub async fn execute(
    run: &Run<'_>,
    globals: &Globals,
    keys: Vec<ApiKeyRecord>,
) -> anyhow::Result<Outcome> {
    let sc = run.scenario;
    let store = lab_flags::Store::new(&globals.redis_url)?;
    let http = scrape::client();
    let mut targets: Vec<Target> = match &run.targets {
        TargetSource::Fixed(t) => t.clone(),
        TargetSource::Native(dir) => native_targets(dir)?.0,
    };
    set_mode(run, &store, &http, &targets).await?;
    let timetable = Timetable::new(sc, run.time_scale);
    let total: u64 = timetable.seconds.iter().sum();
    // A phase held for its run makes the timeline longer: the generator is given room for every
    // hold and stopped when the timeline ends.
    let holds = sc
        .phases
        .iter()
        .filter(|p| p.ends == crate::scenario::Ends::AfterRun)
        .count() as u64;
    let load_seconds = total + holds * HOLD_MAX as u64;
    println!(
        "{} in {} mode: {} phases, {total} s, {:.0} rps base rate",
        sc.name,
        run.mode.variant(),
        sc.phases.len(),
        run.rate
    );
    let control = RateControl::new(sc.phases[0].rate.unwrap_or(run.rate))?;
    let load_args = LoadArgs::stream(
        &run.gateway,
        control.get(),
        load_seconds,
        run.tenants,
        run.seed,
    );
    let source = DocSource::open(Docs::Stream, &globals.data_dir, load_args.tenants)?;
    std::fs::create_dir_all(&run.out).with_context(|| format!("creating {}", run.out.display()))?;
    let actions_log = Log::file(&run.out.join("actions.log"))?;

    // What the run's documents leave in the database: a target of its own, for a scenario whose
    // verdicts read it.
    let mut rows = sc.reads_database().then(|| {
        targets.push(Target {
            service: DATABASE.into(),
            replica: DATABASE.into(),
            url: String::new(),
        });
        RunRows::new(&globals.database_url, run.seed)
    });
    let scrape = async |targets: &mut Vec<Target>, rows: &mut Option<RunRows>| {
        let mut scrapes = scrape_once(&http, &run.targets, targets).await?;
        if let Some(rows) = rows {
            let i = targets.iter().position(|t| t.service == DATABASE);
            scrapes[i.expect("pushed")] = rows.scrape().await;
        }
        anyhow::Ok(scrapes)
    };
    // The baseline: every counter as it stood before the first request of this run, so the
    // run's totals (and its consistency checks) start from zero exactly.
    let baseline = scrape(&mut targets, &mut rows).await?;
    if let Some(r) = &rows {
        r.check_fresh(&targets, &baseline, run.seed)?;
    }
    let started = Instant::now();
    let mut fine = crate::fine::FineReader::new(crate::fine::unix_ms());
    let load_task = {
        let (a, c) = (load_args.clone(), control.clone());
        Task(tokio::spawn(async move {
            lab_load::run_with(&a, c, keys, source).await
        }))
    };
    let mut ticks: Vec<Tick> = vec![Tick {
        t: 0.0,
        phase: 0,
        scrapes: baseline,
    }];
    let mut clock = Clock {
        run,
        globals,
        store: &store,
        control: &control,
        timetable,
        started,
        actions_log,
        running: Vec::new(),
        released: vec![false; sc.phases.len()],
        status_path: match &run.targets {
            TargetSource::Native(dir) => Some(status_file(dir)),
            TargetSource::Fixed(_) => None,
        },
    };
    let settle = sc.settle_seconds as f64;
    let bar = crate::progress::timeline(
        (clock.timetable.end() + settle).ceil() as u64,
        &format!("{} {}", sc.name, run.mode.variant()),
    );
    let (mut current, mut next_tick) = (usize::MAX, started);
    loop {
        let t = started.elapsed().as_secs_f64();
        if current != usize::MAX {
            clock.hold(current, t, &bar);
        }
        let end = clock.timetable.end();
        if t >= end {
            control.stop();
        }
        if t > end + settle {
            break;
        }
        bar.set_position(t as u64);
        let phase = clock.timetable.phase_at(t);
        clock.write_status(phase, t);
        if phase != current {
            current = phase;
            clock.enter(phase, t, &bar).await?;
        }
        let known = targets.clone();
        let (scrapes, reads) = tokio::join!(scrape(&mut targets, &mut rows), async {
            fine.fetch(&http, &known).await
        });
        let scrapes = scrapes?;
        fine.absorb(reads, crate::fine::unix_ms(), |service| {
            crate::fine::running(&targets, &scrapes, service)
        });
        // Older ticks have fewer targets; `Series` reads a missing one as "not scraped".
        ticks.push(Tick { t, phase, scrapes });
        next_tick += Duration::from_secs(1);
        tokio::time::sleep_until(next_tick.into()).await;
    }
    bar.finish_and_clear();
    if let Some(path) = &clock.status_path {
        let _ = std::fs::remove_file(path);
    }
    control.stop();
    let load_report = load_task.await.context("load generator panicked")??;
    store.reset().await?;
    let timetable = clock.timetable.clone();
    let actions = clock.finish().await;
    let fine = fine.fine();
    let outcome = measured(
        sc,
        (&timetable.seconds, &timetable.starts),
        targets,
        &ticks,
        load_report,
        Some(&fine),
        actions,
    );
    write_series(&run.out.join("series.jsonl"), &outcome.targets, &ticks)?;
    std::fs::write(
        run.out.join(lab_report::charts::FINE_FILE),
        serde_json::to_vec(&fine)?,
    )?;
    keep_worst_trace(run).await;
    Ok(outcome)
}

/// What the run measured: every phase's summary and 5xx by origin, and the run's own
/// bookkeeping, from its ticks and its load.
fn measured(
    sc: &Scenario,
    (seconds, phase_starts): (&[u64], &[f64]),
    targets: Vec<Target>,
    ticks: &[Tick],
    load: LoadReport,
    fine: Option<&Fine>,
    actions: Vec<ActionRun>,
) -> Outcome {
    let series = Series {
        targets: &targets,
        ticks,
    };
    let phases = phase_reports(
        sc,
        seconds,
        phase_starts,
        &series,
        &load.per_second,
        fine,
        &actions,
    );
    let consistency = report::consistency(&series, &load);
    Outcome {
        phases,
        targets,
        load,
        consistency,
        actions,
    }
}

/// The flags a run starts from: every flag reset, the client mode and the run's extra flags,
/// applied by every replica before the first request.
async fn set_mode(
    run: &Run<'_>,
    store: &lab_flags::Store,
    http: &reqwest::Client,
    targets: &[Target],
) -> anyhow::Result<()> {
    store
        .reset()
        .await
        .context("resetting flags (is Redis up? scripts/deps.sh)")?;
    store.set("client.mode", run.mode.variant()).await?;
    for (f, v) in run.extra_flags {
        store.set(f, v).await?;
    }
    let http_targets: Vec<Target> = targets
        .iter()
        .filter(|t| t.service != SUPERVISOR)
        .cloned()
        .collect();
    wait_applied(http, &http_targets, "client.mode", run.mode.variant()).await
}

/// The longest a phase that `ends: after-run` waits for its run before the timeline goes on
/// anyway (the phase's action is still reported, with its real duration): a rolling restart of
/// the scale-up's 8 orchestrators took 45 s on 2 cores, and each replica may take up to
/// lab-native's 60 s readiness wait; 300 s is room for five slow replicas, and it bounds how long
/// the load generator may have to run past the scenario's own seconds.
pub const HOLD_MAX: f64 = 300.0;

/// Each phase's seconds and its start, in seconds since the run began. They start as the
/// scenario's (scaled, at least 1 s); a phase that `ends: after-run` is held while its run goes
/// on — its scaled seconds then count from when the run finished — and every later phase moves
/// with it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Timetable {
    pub seconds: Vec<u64>,
    pub starts: Vec<f64>,
    scaled: Vec<u64>,
}

impl Timetable {
    pub fn new(sc: &Scenario, time_scale: f64) -> Self {
        let seconds: Vec<u64> = sc
            .phases
            .iter()
            .map(|p| ((p.seconds as f64 * time_scale).round() as u64).max(1))
            .collect();
        let starts = seconds
            .iter()
            .scan(0u64, |acc, s| {
                let start = *acc;
                *acc += s;
                Some(start as f64)
            })
            .collect();
        Self {
            scaled: seconds.clone(),
            seconds,
            starts,
        }
    }

    /// The phase running at `t`.
    pub fn phase_at(&self, t: f64) -> usize {
        self.starts.iter().rposition(|s| *s <= t).unwrap_or(0)
    }

    /// When the last phase ends.
    pub fn end(&self) -> f64 {
        self.starts.last().copied().unwrap_or(0.0)
            + self.seconds.last().copied().unwrap_or(0) as f64
    }

    /// Phase `i`'s run was still going at `t` (or was seen finished at `t`): the phase lasts its
    /// scaled seconds from the next whole second, the later phases move with it. Never
    /// shortens a phase.
    pub fn hold(&mut self, i: usize, t: f64) {
        let end = self.starts[i] + self.seconds[i] as f64;
        let wanted = t.ceil() + self.scaled[i] as f64;
        if wanted > end {
            let delta = wanted - end;
            self.seconds[i] += delta as u64;
            for s in &mut self.starts[i + 1..] {
                *s += delta;
            }
        }
    }
}

/// The timeline as it runs: what entering a phase does, and the actions it started.
struct Clock<'a> {
    run: &'a Run<'a>,
    globals: &'a Globals,
    store: &'a lab_flags::Store,
    control: &'a RateControl,
    timetable: Timetable,
    started: Instant,
    actions_log: Log,
    /// Each phase's actions, by phase index.
    running: Vec<(usize, Task<Vec<ActionRun>>)>,
    /// Phases that `end: after-run` no longer held (their run finished, or HOLD_MAX passed).
    released: Vec<bool>,
    /// Where `labctl watch` reads the current step (native labs only).
    status_path: Option<PathBuf>,
}

impl Clock<'_> {
    /// What `labctl watch` shows as the current step; rewritten every tick (cheap).
    fn write_status(&self, phase: usize, t: f64) {
        let Some(path) = &self.status_path else {
            return;
        };
        let sc = self.run.scenario;
        let status: Status<&str> = Status {
            scenario: sc.name.as_str(),
            mode: self.run.mode.variant(),
            phase: sc.phases[phase].name.as_str(),
            index: phase,
            phases: sc.phases.len(),
            t,
            total: self.timetable.end(),
            rate: self.control.get(),
        };
        let _ = write_status(path, &status);
    }

    /// Phase `phase` begins at `t`: its flags, its rate, its actions (in the background).
    async fn enter(
        &mut self,
        phase: usize,
        t: f64,
        bar: &indicatif::ProgressBar,
    ) -> anyhow::Result<()> {
        let sc = self.run.scenario;
        let p = &sc.phases[phase];
        for (f, v) in &p.flags {
            self.store.set(f, v).await?;
        }
        self.control.set(p.rate.unwrap_or(self.run.rate))?;
        if !p.run.is_empty() {
            self.running.push((
                phase,
                run_actions(
                    self.globals.clone(),
                    p.name.clone(),
                    p.run.clone(),
                    self.actions_log.clone(),
                    self.started,
                ),
            ));
        }
        let rate = self.control.get();
        bar.set_message(format!(
            "step {}/{} {} at {rate:.0} rps",
            phase + 1,
            sc.phases.len(),
            p.name,
        ));
        // Through the bar, so the line and the bar do not draw over each other.
        bar.suspend(|| {
            println!(
                "  t={t:5.1}s phase {:<14} {:>4} s at {rate:.0} rps {}",
                p.name,
                self.timetable.seconds[phase],
                if p.flags.is_empty() {
                    String::new()
                } else {
                    format!("flags {:?}", p.flags)
                }
            )
        });
        Ok(())
    }

    /// A phase that `ends: after-run` is held while its run goes on, and once more on the tick
    /// that sees it finished (so its judged seconds are never fewer than the scenario's); at
    /// most [`HOLD_MAX`] after it began.
    fn hold(&mut self, phase: usize, t: f64, bar: &indicatif::ProgressBar) {
        let p = &self.run.scenario.phases[phase];
        if p.ends != crate::scenario::Ends::AfterRun || self.released[phase] {
            return;
        }
        let finished = self
            .running
            .iter()
            .filter(|(i, _)| *i == phase)
            .all(|(_, h)| h.is_finished());
        let waited = t - self.timetable.starts[phase];
        if waited > HOLD_MAX {
            self.released[phase] = true;
            bar.suspend(|| {
                println!(
                    "  t={t:5.1}s phase {} still running its commands after {HOLD_MAX:.0} s: \
                     the timeline goes on",
                    p.name
                )
            });
            return;
        }
        self.timetable.hold(phase, t);
        self.released[phase] = finished;
        bar.set_length(
            (self.timetable.end() + self.run.scenario.settle_seconds as f64).ceil() as u64,
        );
    }

    /// Every action the phases started, once done; then the scenario's cleanup.
    async fn finish(self) -> Vec<ActionRun> {
        let mut actions = Vec::new();
        for (_, a) in self.running {
            actions.extend(a.await.unwrap_or_default());
        }
        let sc = self.run.scenario;
        if !sc.cleanup.is_empty() {
            let cleanup = run_actions(
                self.globals.clone(),
                "cleanup".into(),
                sc.cleanup.iter().cloned().map(Step::from).collect(),
                self.actions_log,
                self.started,
            );
            actions.extend(cleanup.await.unwrap_or_default());
        }
        actions
    }
}

/// Each phase's summary over its window (for `window: after-run`, from when the phase's actions
/// ended), its 5xx by origin, and amplification against the first phase.
fn phase_reports(
    sc: &Scenario,
    seconds: &[u64],
    phase_starts: &[f64],
    series: &Series,
    load: &[lab_load::SecondSample],
    fine: Option<&Fine>,
    actions: &[ActionRun],
) -> Vec<PhaseReport> {
    let mut phases: Vec<PhaseReport> = sc
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| PhaseReport {
            name: p.name.clone(),
            seconds: seconds[i],
            start: phase_starts[i],
            // The verdict's window starts once the phase's commands have finished: the ticks
            // before are set apart (the window's baseline becomes the last of them).
            judged_from: matches!(p.window, crate::scenario::Window::AfterRun)
                .then(|| actions_end(actions, &p.name).max(phase_starts[i])),
            summary: PhaseSummary::new(),
            errors_5xx_by_origin: report::origins(series, i),
        })
        .collect();
    report::summarize_phases(series, load, fine, &mut phases, &sc.judged());
    phases
}

/// The run's worst trace, kept beside its report while the lab (and its receiver) is still up.
/// A receiver that does not answer costs the run its waterfall, not its report.
async fn keep_worst_trace(run: &Run<'_>) {
    if let TargetSource::Native(state_dir) = &run.targets {
        match crate::traces::save_worst(state_dir, &run.out).await {
            Ok(Some(w)) => println!(
                "worst trace {}: {} {:.1} s, {} orphan(s){} (labctl report draws it)",
                w.trace_id,
                w.root,
                w.root_ms / 1000.0,
                w.orphans,
                w.worst_orphan
                    .as_ref()
                    .map(|o| format!(", worst {o} +{:.1} s", w.worst_orphan_ms / 1000.0))
                    .unwrap_or_default()
            ),
            Ok(None) => {}
            Err(e) => eprintln!("the run's worst trace was not kept: {e:#}"),
        }
    }
}

/// What a running game day is doing, for `labctl watch` (`run/gameday.json` of the native lab).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Status<S: AsRef<str> = String> {
    pub scenario: S,
    pub mode: S,
    pub phase: S,
    pub index: usize,
    pub phases: usize,
    /// Seconds since the run started, and the run's length (phases only).
    pub t: f64,
    pub total: f64,
    pub rate: f64,
}

pub fn status_file(state_dir: &Path) -> PathBuf {
    state_dir.join("run").join("gameday.json")
}

fn write_status(path: &Path, s: &Status<&str>) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(s)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The raw series, one JSON line per tick: `{t, phase, replicas: {name: {series: value}}}`.
pub fn write_series(path: &Path, targets: &[Target], ticks: &[Tick]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for tick in ticks {
        let replicas: serde_json::Map<String, serde_json::Value> = targets
            .iter()
            .zip(&tick.scrapes)
            .map(|(t, s)| {
                (
                    t.replica.clone(),
                    s.as_ref()
                        .map(|m| serde_json::to_value(m).unwrap_or_default())
                        .unwrap_or(serde_json::Value::Null),
                )
            })
            .collect();
        writeln!(
            f,
            "{}",
            serde_json::json!({"t": tick.t, "phase": tick.phase, "replicas": replicas})
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_native::Service;

    /// A lab whose rollout panics, whose scale fails and whose memory limit works: only the
    /// engine's bookkeeping is under test here, not the lab.
    struct Broken;

    impl Lab for Broken {
        async fn rollout_restart(&self, _: Service) -> anyhow::Result<()> {
            panic!("the supervisor's control directory vanished")
        }
        async fn scale(&self, _: Service, _: usize) -> anyhow::Result<()> {
            anyhow::bail!("the supervisor refused Add")
        }
        async fn limit_memory(&self, _: Service, _: Option<u64>) -> anyhow::Result<()> {
            Ok(())
        }
        async fn kill(&self, _: lab_native::Replica) -> anyhow::Result<()> {
            anyhow::bail!("the lab runs no such replica")
        }
    }

    #[tokio::test]
    async fn a_panicking_or_failing_action_is_recorded_as_failed_with_why() {
        let log = Log::stdout();
        let db = Deps {
            database_url: "postgres://unused",
            redis_url: "redis://unused",
            state_dir: std::path::Path::new("/nonexistent"),
        };
        let panicked = failure(
            &Action::RolloutRestart(Service::Orchestrator),
            &Broken,
            db,
            &log,
        );
        let why = panicked.await.expect("a panic is a failure");
        assert!(
            why.contains("panicked: the supervisor's control directory vanished"),
            "{why}"
        );
        let failed = failure(&Action::Scale(Service::Orchestrator, 5), &Broken, db, &log).await;
        assert_eq!(failed.as_deref(), Some("the supervisor refused Add"));
        let ok = failure(
            &Action::LimitMemory(Service::Orchestrator, None),
            &Broken,
            db,
            &log,
        );
        assert_eq!(ok.await, None);
    }

    fn three_phases() -> Scenario {
        serde_norway::from_str(
            "name: t\nsummary: s\ndescription: d\nrate: 10\nphases:\n\
             - {name: a, seconds: 10}\n\
             - {name: rollback, seconds: 20, run: [\"rollout restart orchestrator\"], ends: after-run}\n\
             - {name: c, seconds: 10}\n",
        )
        .unwrap()
    }

    #[test]
    fn a_phase_held_for_its_run_counts_its_seconds_from_the_runs_end_and_moves_the_rest() {
        let sc = three_phases();
        sc.validate(&lab_flags::Definitions::embedded()).unwrap();
        let mut tt = Timetable::new(&sc, 0.5);
        assert_eq!(
            (tt.seconds.clone(), tt.starts.clone()),
            (vec![5, 10, 5], vec![0.0, 5.0, 15.0])
        );
        assert_eq!(tt.phase_at(14.9), 1);
        // The run is still going at 5.2 s and 13.6 s: the phase lasts 10 s from the next whole
        // second, and c starts after it.
        tt.hold(1, 5.2);
        assert_eq!((tt.seconds[1], tt.starts[2]), (11, 16.0));
        tt.hold(1, 13.6);
        assert_eq!((tt.seconds[1], tt.starts[2], tt.end()), (19, 24.0, 29.0));
        assert_eq!(tt.phase_at(20.0), 1);
        assert_eq!(tt.phase_at(24.0), 2);
        // Holding never shortens a phase.
        tt.hold(1, 6.0);
        assert_eq!((tt.seconds[1], tt.starts[2]), (19, 24.0));
        assert_eq!(tt.seconds[0], 5, "the phases before are not moved");
    }

    #[test]
    fn ends_after_run_needs_a_run() {
        let y = "name: t\nsummary: s\ndescription: d\nrate: 10\nphases:\n- {name: a, seconds: 10, ends: after-run}\n";
        let sc: Scenario = serde_norway::from_str(y).unwrap();
        let e = sc
            .validate(&lab_flags::Definitions::embedded())
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("ends after-run needs a `run`"),
            "{e:#}"
        );
    }
}
