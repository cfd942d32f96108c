//! The experiment engine: scenarios as data, run on a lab, measured, judged.
//!
//! # Layout
//! - [`scenario`]: scenario files (`load/scenarios/<name>.yaml`) — phases, rates, flags, the
//!   timeline's [`action`]s, verdicts — checked when they load.
//! - [`action`]: the typed timeline: the trigger, the remedy and the fleet's operations, run in
//!   process through [`lab_native::Lab`].
//! - [`engine`]: one scenario on a running lab: flags and rate per phase, the actions, the
//!   open-loop load, a [`scrape`] of every replica each second; everything measured, returned.
//! - [`replay`]: the main job — calibrate, then the incident in both modes on fresh labs —
//!   and [`repeats`] (k of N); [`cell`]: one fresh-lab measurement, the unit of [`ablate`] and
//!   [`map`].
//! - [`chain_limit`]: the chain against its physical limit — pgbench, the idle lab, a rate
//!   ladder, the CPU by process and perf profiles (`labctl chain-limit`).
//! - [`targets`], [`traces`], [`progress`]: where the replicas are, the worst trace kept, the
//!   bars a terminal shows.
//!
//! What a run's numbers mean and how they are drawn is lab-report's.
//!
//! This file is `labctl gameday <scenario> --mode legacy|resilient`: the runner sets the mode
//! and resets every other flag, starts the open-loop load, scrapes every replica's `/metrics`
//! each second, applies each phase's flags and rate on the timeline, keeps scraping for a few
//! seconds after the load so late orphans are counted, and prints a summary shaped like the
//! postmortem's Performance Comparison (one column per phase). Everything — the per-second
//! series, the summary, the load report — is written as JSON and Markdown.

pub mod ablate;
pub mod action;
pub mod cell;
pub mod chain_limit;
pub mod engine;
mod fine;
pub mod map;
pub mod progress;
#[cfg(test)]
mod provenance;
pub mod repeats;
pub mod replay;
#[cfg(test)]
mod replay_test;
pub mod report;
mod rows;
mod runqueue;
pub mod scenario;
pub mod scrape;
pub mod smoke;
mod targets;
pub mod traces;

/// Tests that load PostgreSQL hard and measure what it does (the replay's fidelity) take turns:
/// run side by side they would measure each other.
#[cfg(test)]
static HEAVY_TEST: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use lab_load::TenantMix;
use lab_native::supervise;
use lab_report::doc::{Cell, Doc, Table};
use lab_report::summary;
use lab_report::verdict::{Check, Outcome, Verdict};
use lab_seed::ApiKeyRecord;
use scrape::Target;
pub use targets::parse_targets;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    clap::ValueEnum,
    Serialize,
    serde::Deserialize,
)]
pub enum Mode {
    Legacy,
    Resilient,
}

impl Mode {
    pub fn variant(self) -> &'static str {
        match self {
            Mode::Legacy => "legacy",
            Mode::Resilient => "resilient",
        }
    }

    /// The fixed client: its verdicts say whether the fix held, not whether the postmortem's
    /// step was reproduced.
    pub fn is_fix(self) -> bool {
        self != Mode::Legacy
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct GamedayArgs {
    /// Scenario name in load/scenarios (e.g. dependency-dead) or a path to a .yaml file.
    pub scenario: String,
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Override the scenario's base rate (requests/s).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Override the scenario's tenant mix.
    #[arg(long, value_enum)]
    pub tenants: Option<TenantMix>,
    /// Extra flags for the whole run, `flag=variant` (ablation: one control at a time).
    #[arg(long = "flag")]
    pub flags: Vec<String>,
    /// The gateway (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub gateway: String,
    /// Where to write the report (default: <state dir>/reports/gameday-<scenario>-<mode>-<unix time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The replicas to scrape, `service=url` comma-separated (service: edge-gateway, orchestrator,
    /// entity-service), for labs labctl did not start itself (docker compose). Default: the
    /// native lab's state file.
    #[arg(long, env = "LAB_GAMEDAY_TARGETS")]
    pub targets: Option<String>,
    /// Exit non-zero when a verdict of this mode (a postmortem step or an `expect:` range) did
    /// not hold or was not measured, or an action of the timeline failed.
    #[arg(long)]
    pub strict: bool,
    /// Seed of the document stream and the arrivals. The default repeats the same documents
    /// run after run (comparable game days on fresh labs); give back-to-back runs on ONE lab
    /// different seeds, or the second run finds the first's documents in the caches.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Every phase's length times this (0.1: a run a tenth as long, same shape; each phase
    /// lasts at least 1 s).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
}

/// What a game day did, for a caller that runs several (`labctl scenarios check`).
pub struct Ran {
    /// The report's directory.
    pub out: PathBuf,
    pub actions: Vec<engine::ActionRun>,
    /// Requests the load generator sent, and how many were answered at all.
    pub sent: u64,
    pub answered: u64,
}

#[derive(Serialize)]
struct Report<'a> {
    scenario: &'a scenario::Scenario,
    mode: Mode,
    extra_flags: &'a [String],
    targets: &'a [Target],
    phases: &'a [engine::PhaseReport],
    /// The phases' postmortem steps (`verdict:`), judged as the replay judges them.
    steps: &'a [Verdict],
    /// The scenario's `expect:` ranges for this mode.
    expectations: &'a [Verdict],
    /// The run's own bookkeeping: sent = answered by status, 5xx = sum of origins.
    consistency: &'a [Check],
    actions: &'a [engine::ActionRun],
    load: &'a lab_load::LoadReport,
    restarts_during_run: u32,
    /// The run's base rate (rps) and tenant mix (the report's title).
    base_rate: f64,
    tenant_mix: TenantMix,
}

/// A game day's `summary.json` read back: what its report shows ([`gameday_doc`]).
#[derive(serde::Deserialize)]
pub struct GameDaySummary {
    scenario: scenario::Scenario,
    mode: Mode,
    #[serde(default)]
    extra_flags: Vec<String>,
    /// Not in summaries written before the report was drawn from the summary.
    #[serde(default)]
    base_rate: Option<f64>,
    #[serde(default)]
    tenant_mix: Option<TenantMix>,
    phases: Vec<engine::PhaseReport>,
    #[serde(default)]
    steps: Vec<Verdict>,
    #[serde(default)]
    expectations: Vec<Verdict>,
    #[serde(default)]
    consistency: Vec<Check>,
    load: LoadCounts,
    #[serde(default)]
    restarts_during_run: u32,
}

#[derive(serde::Deserialize)]
struct LoadCounts {
    sent: u64,
    by_status: std::collections::BTreeMap<String, u64>,
}

/// Seconds since the Unix epoch (run directories' names).
pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Where an experiment finds the lab: its database, flag store, state and data.
#[derive(Debug, Clone)]
pub struct Globals {
    pub database_url: String,
    pub redis_url: String,
    pub state_dir: PathBuf,
    pub data_dir: PathBuf,
}

impl Globals {
    /// Where a timeline's actions find the lab's dependencies.
    pub fn deps(&self) -> lab_native::deps::Deps<'_> {
        lab_native::deps::Deps {
            database_url: &self.database_url,
            redis_url: &self.redis_url,
            state_dir: &self.state_dir,
        }
    }
}

/// Run `action` to completion, in process, against the lab in `g.state_dir` (what it did goes
/// to `log`).
pub async fn act(g: &Globals, action: action::Action, log: &Path) -> anyhow::Result<()> {
    let out = lab_native::Log::file(log)?;
    let lab = lab_native::NativeLab::new(&g.state_dir, out.clone());
    out.line(format!("{action}"));
    action
        .run(&lab, g.deps(), &out)
        .await
        .with_context(|| format!("{action} failed; see {}", log.display()))
}

pub async fn run(
    args: &GamedayArgs,
    globals: &Globals,
    state_dir: &Path,
    keys: Vec<ApiKeyRecord>,
) -> anyhow::Result<Ran> {
    anyhow::ensure!(
        args.time_scale > 0.0 && args.time_scale <= 10.0,
        "--time-scale {}: use a factor in (0, 10]",
        args.time_scale
    );
    let sc = scenario::load(&args.scenario)?;
    let extra = extra_flags(&args.flags)?;
    let targets = match &args.targets {
        Some(list) => engine::TargetSource::Fixed(parse_targets(list).await?),
        None => engine::TargetSource::Native(state_dir.to_path_buf()),
    };
    let restarts = || restarts_so_far(args, state_dir);
    let restarts_before = restarts()?;
    let base_rate = args.rate.unwrap_or(sc.rate);
    anyhow::ensure!(
        base_rate > 0.0,
        "scenario {} has no rate of its own: pass --rate",
        sc.name
    );
    let out = args.out.clone().unwrap_or_else(|| {
        state_dir.join("reports").join(format!(
            "gameday-{}-{}-{}",
            sc.name,
            args.mode.variant(),
            now_s()
        ))
    });
    let tenants = args.tenants.unwrap_or(if sc.tenants == "uniform" {
        TenantMix::Uniform
    } else {
        TenantMix::Size
    });
    let run = engine::Run {
        scenario: &sc,
        mode: args.mode,
        rate: base_rate,
        tenants,
        extra_flags: &extra,
        gateway: args.gateway.clone(),
        targets,
        seed: args.seed,
        out: out.clone(),
        time_scale: args.time_scale,
    };
    let outcome = engine::execute(&run, globals, keys).await?;
    let phases = &outcome.phases;
    let steps = sc.verdicts(args.mode.variant(), phases);
    let expectations = sc.expectations(args.mode.variant(), phases);
    let restarts_after = restarts()?.max(restarts_before);

    let restarts = restarts_after - restarts_before;
    let verdicts = [&steps[..], &expectations[..]];
    let ctx = (&sc, args, base_rate, tenants);
    write_report(ctx, &outcome, restarts, verdicts, &out)?;
    fail_on_inconsistency(&outcome.consistency, &out)?;
    if args.strict {
        let unmet: Vec<String> = steps
            .iter()
            .chain(&expectations)
            .filter(|v| v.outcome != Outcome::Reproduced)
            .map(|v| format!("{}: {}", v.phase, v.words(args.mode.is_fix())))
            .chain(
                outcome
                    .actions
                    .iter()
                    .filter(|a| !a.ok)
                    .map(|a| format!("{}: `{}` failed", a.phase, a.command)),
            )
            .collect();
        if !unmet.is_empty() {
            bail!(
                "--strict: {} of the scenario's verdicts or actions did not hold ({})",
                unmet.len(),
                unmet.join("; ")
            );
        }
    }
    Ok(Ran {
        out,
        actions: outcome.actions,
        sent: outcome.load.sent,
        answered: outcome.load.answered(),
    })
}

/// The game day's summary.json, then its summary.md (printed too) and report.html drawn from it.
fn write_report(
    (sc, args, base_rate, tenants): (&scenario::Scenario, &GamedayArgs, f64, TenantMix),
    outcome: &engine::Outcome,
    restarts: u32,
    [steps, expectations]: [&[Verdict]; 2],
    out: &Path,
) -> anyhow::Result<()> {
    let body = Report {
        scenario: sc,
        mode: args.mode,
        extra_flags: &args.flags,
        targets: &outcome.targets,
        phases: &outcome.phases,
        steps,
        expectations,
        consistency: &outcome.consistency,
        actions: &outcome.actions,
        load: &outcome.load,
        restarts_during_run: restarts,
        base_rate,
        tenant_mix: tenants,
    };
    let mode = args.mode.variant();
    let header = lab_report::run::Header::new(lab_report::run::RunKind::GameDay, &sc.name)
        .judged(mode, args.mode.is_fix(), steps)
        .judged(
            &format!("{mode} (expect)"),
            args.mode.is_fix(),
            expectations,
        )
        .consistency(&outcome.consistency);
    lab_report::run::write(out, &header, &body)?;
    let md = report::draw(out)?;
    println!("\n{md}");
    println!(
        "report written to {} ({})",
        out.display(),
        out.join("report.html").display()
    );
    Ok(())
}

/// Replicas the native lab's supervisor has restarted so far (0 for a lab it did not start).
fn restarts_so_far(args: &GamedayArgs, state_dir: &Path) -> anyhow::Result<u32> {
    Ok(match &args.targets {
        Some(_) => 0,
        None => supervise::read_state(state_dir)?
            .map(|s| s.procs.iter().map(|p| p.restarts).sum())
            .unwrap_or(0),
    })
}

/// `--flag flag=variant`, each checked against the flag definitions (`client.mode` is `--mode`'s).
fn extra_flags(flags: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    let defs = lab_flags::Definitions::embedded();
    let mut extra = Vec::new();
    for f in flags {
        let (flag, variant) = f
            .split_once('=')
            .with_context(|| format!("--flag {f:?}: use flag=variant"))?;
        defs.check(flag, variant)?;
        if flag == "client.mode" {
            bail!("--flag client.mode: use --mode");
        }
        extra.push((flag.to_string(), variant.to_string()));
    }
    Ok(extra)
}

/// The game day's report: the phases' table, the 5xx by origin, the load, its verdicts.
pub fn gameday_doc(s: &GameDaySummary) -> Doc {
    let title = format!(
        "{} — {} mode{}{}",
        s.scenario.name,
        s.mode.variant(),
        if s.extra_flags.is_empty() {
            String::new()
        } else {
            format!(", flags {}", s.extra_flags.join(" "))
        },
        match (s.base_rate, s.tenant_mix) {
            (Some(rate), Some(mix)) => format!(
                " ({rate:.0} rps base, {} tenant mix)",
                match mix {
                    TenantMix::Uniform => "uniform",
                    TenantMix::Size => "size",
                }
            ),
            _ => String::new(),
        }
    );
    let mut d = Doc::new(title.clone());
    d.para(s.scenario.summary.trim_end());
    let phase_names: Vec<(String, u64)> = s
        .phases
        .iter()
        .map(|p| (p.name.clone(), p.seconds))
        .collect();
    let summaries: Vec<summary::PhaseSummary> =
        s.phases.iter().map(|p| p.summary.clone()).collect();
    summary::phases_doc(&mut d, "Every phase", &phase_names, &summaries);
    let per_phase_origins: Vec<_> = s
        .phases
        .iter()
        .map(|p| p.errors_5xx_by_origin.clone())
        .collect();
    summary::origins_doc(&mut d, &phase_names, &per_phase_origins, &s.consistency);
    d.para(format!(
        "Load: {} sent, by status {:?}. Replica restarts during the run: {}.",
        s.load.sent, s.load.by_status, s.restarts_during_run
    ));
    let fix = s.mode.is_fix();
    let postmortem = s.scenario.phases.iter().any(|p| p.postmortem.is_some());
    for (title, verdicts) in [
        (
            if postmortem {
                "The postmortem's timeline, step by step"
            } else {
                "The scenario's verdicts, phase by phase"
            },
            &s.steps,
        ),
        ("The scenario's expectations for this mode", &s.expectations),
    ] {
        if verdicts.is_empty() {
            continue;
        }
        let mut t = Table::new(&["time", "phase", "the postmortem", "measured", "verdict"]);
        for v in verdicts {
            let pm = s
                .scenario
                .phases
                .iter()
                .find(|p| p.name == v.phase)
                .and_then(|p| p.postmortem.as_ref());
            t.row(vec![
                pm.map_or("", |p| p.time.as_str()).into(),
                v.phase.as_str().into(),
                pm.map_or("", |p| p.observation.as_str()).into(),
                Cell::checks(v),
                Cell::outcome(v, fix),
            ]);
        }
        d.h2(title).table(t);
    }
    d
}

/// A run whose own counts do not add up fails, loudly, after writing its report.
pub fn fail_on_inconsistency(checks: &[Check], out: &Path) -> anyhow::Result<()> {
    let broken: Vec<&str> = checks
        .iter()
        .filter(|c| !c.holds())
        .map(|c| c.check.as_str())
        .collect();
    if !broken.is_empty() {
        bail!(
            "this run's counts do not add up ({}): its numbers cannot be trusted — was other \
             traffic sent to the gateway during the run, or did a replica restart between \
             scrapes? The report was written anyway ({})",
            broken.join("; "),
            out.display()
        );
    }
    Ok(())
}

/// Wait (bounded) until every target reports `flag = variant`.
pub async fn wait_applied(
    http: &reqwest::Client,
    targets: &[Target],
    flag: &str,
    variant: &str,
) -> anyhow::Result<()> {
    let series = format!("lab_flag_variant{{flag=\"{flag}\",variant=\"{variant}\"}}");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let scrapes = scrape::scrape_all(http, targets).await;
        let missing: Vec<&str> = targets
            .iter()
            .zip(&scrapes)
            .filter(|(_, s)| s.as_ref().and_then(|m| m.get(&series)).copied() != Some(1.0))
            .map(|(t, _)| t.replica.as_str())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{missing:?} did not apply {flag}={variant} within 15 s (flag store reachable?)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
