//! One cell of an experiment (`labctl ablate`, `labctl map`): a fresh lab, a client
//! configuration, a load, and the real trigger held for a stated time — the stale plan
//! (`backfill --only invalidate`, optionally with the postmortem's rollback on top) cured by
//! `ANALYZE` — measured by the same engine as a game day. What a cell costs: a lab start, a
//! closed-loop warm-up, its timeline; never the backfill (the table stays populated between
//! cells, and every cell starts from freshly analyzed statistics).
//!
//! Cells are resumable: each repetition writes `cells/<id>/rep-<n>/cell.json` when it is done,
//! and a matrix run again with the same `--out` skips the ones already measured (`--rerun`
//! measures them again).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::action::{Action, Step};
use crate::engine::{self, TargetSource};
use crate::replay::{self, Calibration, Modes, ReplayArgs};
use crate::scenario::{Phase, Scenario};
use crate::{Globals, Mode};
use lab_load::{SecondSample, TenantMix};
use lab_native::{Service, UpArgs};
use lab_report::charts::RunSeries;
use lab_report::quantity::{Expr, Filter, Window};
use lab_report::verdict::Check;
use lab_seed::ApiKeyRecord;

/// Options every experiment shares (`labctl ablate`, `labctl map`).
#[derive(Debug, Clone, clap::Args)]
pub struct CellArgs {
    /// Where the experiment lives. Run again with the same --out to resume: cells already
    /// measured are read back, not re-run (default: <state dir>/reports/<command>-<unix time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Measure every cell this many times (the report shows the spread).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Measure cells again even where --out already holds them.
    #[arg(long)]
    pub rerun: bool,
    /// The short version (fewer cells, shorter phases): ~20 minutes on a 2-core machine.
    #[arg(long)]
    pub quick: bool,
    /// Closed-loop warm-up of every cell's fresh lab (fills the caches the same way each time).
    #[arg(long, default_value_t = 30)]
    pub warmup_seconds: u64,
    /// Seconds of each calibration probe.
    #[arg(long, default_value_t = 15)]
    pub probe_seconds: u64,
    /// Clients of the closed loops (the default lab's 32 PostgreSQL connections).
    #[arg(long, default_value_t = 32)]
    pub probe_concurrency: usize,
    /// Seconds measured after ANALYZE: a cell that has not recovered by then stayed failed.
    #[arg(long)]
    pub recovery_seconds: Option<u64>,
    /// Recovered = goodput at least this share of the offered load for 5 seconds in a row.
    #[arg(long, default_value_t = 0.95)]
    pub recovery_margin: f64,
    /// Orchestrator memory limit (`700M`, `none`; default: the calibration's, by the
    /// postmortem's ratio).
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// Seed of the document stream (every cell sends the same documents).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Reuse a calibration instead of measuring one: a `calibration.json`, or a replay's,
    /// an ablation's or a map's `summary.json`.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// Measure (or read) the calibration, write `calibration.json` under --out, and stop.
    #[arg(long)]
    pub calibrate_only: bool,
    #[command(flatten)]
    pub lab: UpArgs,
}

impl CellArgs {
    /// The replay's options with these values (the calibration and warm-up are the replay's).
    pub fn as_replay(&self) -> ReplayArgs {
        ReplayArgs {
            mode: Modes::Both,
            rate: None,
            stale_utilisation: crate::replay::STALE_UTILISATION,
            time_scale: 1.0,
            scenario: "incident".into(),
            warmup_seconds: self.warmup_seconds,
            probe_seconds: self.probe_seconds,
            // Cells keep one probe length for both (their --quick timings are shorter).
            stale_probe_seconds: Some(self.probe_seconds),
            probe_concurrency: self.probe_concurrency,
            memory_limit: self.memory_limit.clone(),
            out: None,
            seed: self.seed,
            repeat: 1,
            calibrate_only: false,
            lab: self.lab.clone(),
        }
    }

    pub fn out_dir(&self, g: &Globals, command: &str) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            g.state_dir
                .join("reports")
                .join(format!("{command}-{}", crate::now_s()))
        })
    }

    /// Seconds measured after ANALYZE (default 60; --quick 45).
    pub fn recovery(&self) -> u64 {
        self.recovery_seconds
            .unwrap_or(if self.quick { 45 } else { 60 })
    }

    /// Seconds of steady state before the trigger (15; --quick 10).
    pub fn steady(&self) -> u64 {
        if self.quick {
            10
        } else {
            15
        }
    }

    /// One cell of this experiment: `v` at `rate`, the plan stale `stale_seconds` (the rollback
    /// `rollback_after` into it), with this experiment's steady and recovery seconds and margin;
    /// `setup`: [`setup_fingerprint`] of the options it is measured under.
    pub fn spec(
        &self,
        v: Variant,
        rate: f64,
        (stale_seconds, rollback_after): (u64, Option<u64>),
        setup: String,
    ) -> CellSpec {
        CellSpec {
            id: v.id,
            label: v.label,
            mode: v.mode,
            flags: v.flags,
            rate,
            steady_seconds: self.steady(),
            stale_seconds,
            rollback_after,
            recovery_seconds: self.recovery(),
            recovery_margin: self.recovery_margin,
            policy: v.policy,
            setup,
        }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.repeat >= 1, "--repeat must be at least 1");
        anyhow::ensure!(
            self.recovery_margin > 0.0 && self.recovery_margin <= 1.0,
            "--recovery-margin must be in (0, 1]"
        );
        anyhow::ensure!(
            self.warmup_seconds >= 5,
            "--warmup-seconds must be at least 5"
        );
        Ok(())
    }
}

/// The calibration: read back from `out/calibration.json` (resume) or `--calibration`, else
/// measured (and saved) the replay's way.
pub async fn calibration(
    args: &CellArgs,
    g: &Globals,
    keys: &[ApiKeyRecord],
    out: &Path,
) -> anyhow::Result<Calibration> {
    let saved = out.join("calibration.json");
    let from = args
        .calibration
        .clone()
        .or_else(|| saved.exists().then(|| saved.clone()));
    if let Some(path) = from {
        let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_slice(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let c = v.get("calibration").cloned().unwrap_or(v);
        let cal: Calibration = serde_json::from_value(c).with_context(|| {
            format!(
                "{} holds no calibration (a calibration.json, or a replay's/ablation's/map's \
                 summary.json; a replay run with --rate has none)",
                path.display()
            )
        })?;
        println!(
            "calibration from {}: healthy {:.0} rps, stale {:.0} rps",
            path.display(),
            cal.healthy_capacity_rps,
            cal.stale_capacity_rps
        );
        let mut cal = cal;
        // A limit given now wins over the one the calibration chose.
        match args.memory_limit.as_deref() {
            Some("none") => cal.memory_limit_bytes = None,
            Some(s) => cal.memory_limit_bytes = Some(lab_native::cgroup::parse_size(s)?),
            None => {}
        }
        std::fs::write(&saved, serde_json::to_vec_pretty(&cal)?)?;
        return Ok(cal);
    }
    let cal = replay::calibrate(&args.as_replay(), g, keys, out).await?;
    std::fs::write(&saved, serde_json::to_vec_pretty(&cal)?)?;
    Ok(cal)
}

/// The start every experiment shares: its directory and its calibration; `None` when
/// `--calibrate-only` asked for nothing more.
pub async fn prepare(
    args: &CellArgs,
    g: &Globals,
    keys: &[ApiKeyRecord],
    command: &str,
) -> anyhow::Result<Option<(PathBuf, Calibration)>> {
    let out = args.out_dir(g, command);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let cal = calibration(args, g, keys, &out).await?;
    if args.calibrate_only {
        println!(
            "calibration written to {}: healthy {:.0} rps, stale {:.0} rps",
            out.join("calibration.json").display(),
            cal.healthy_capacity_rps,
            cal.stale_capacity_rps
        );
        return Ok(None);
    }
    Ok(Some((out, cal)))
}

/// What sets one cell apart from the others of its experiment (see [`CellArgs::spec`]).
#[derive(Debug, Clone)]
pub struct Variant {
    pub id: String,
    pub label: String,
    pub mode: Mode,
    pub flags: Vec<(String, String)>,
    pub policy: Option<PathBuf>,
}

/// What one cell runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CellSpec {
    /// File-safe and stable (`legacy`, `base+retry_budget`, `all-jitter`).
    pub id: String,
    /// What a reader sees.
    pub label: String,
    pub mode: Mode,
    /// Flags for the whole cell (on top of the mode), `flag → variant`.
    pub flags: Vec<(String, String)>,
    /// Offered load, requests/s (open loop).
    pub rate: f64,
    /// Seconds before the trigger.
    pub steady_seconds: u64,
    /// How long the plan stays stale before ANALYZE (the trigger's size).
    pub stale_seconds: u64,
    /// The postmortem's rollback (`rollout restart orchestrator`, cold caches) this many seconds
    /// into the stale plan.
    pub rollback_after: Option<u64>,
    /// Seconds measured after ANALYZE.
    pub recovery_seconds: u64,
    pub recovery_margin: f64,
    /// A policy file every orchestrator of the cell's lab loads (`labctl up --policy`).
    #[serde(default)]
    pub policy: Option<PathBuf>,
    /// Everything else a measurement depends on (warm-up, seed, memory limit, the lab's shape,
    /// the policy file's contents), so a resumed matrix never reuses a cell measured under
    /// other settings (a file without one is measured again).
    #[serde(default)]
    pub setup: String,
}

/// [`CellSpec::setup`] for these options.
pub fn setup_fingerprint(
    args: &CellArgs,
    cal: &Calibration,
    policy: Option<&Path>,
) -> anyhow::Result<String> {
    let policy_hash = match policy {
        Some(p) => {
            use sha2::Digest;
            let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
            hex::encode(&sha2::Sha256::digest(&bytes)[..8])
        }
        None => "-".into(),
    };
    let bins = binaries_digest(args.lab.bin_dir.as_deref())?;
    Ok(format!(
        "warmup={} seed={} memory={:?} orchestrators={} entity_services={} gateways={} policy={policy_hash} binaries={bins}",
        args.warmup_seconds,
        args.seed,
        cal.memory_limit_bytes,
        args.lab.orchestrators,
        args.lab.entity_services,
        args.lab.gateways,
    ))
}

/// The binaries a cell runs, by content (SHA-256 of each file, in a fixed order): a resumed
/// matrix must not reuse a cell measured with other client code (issue 24). `bin_dir`: where
/// `labctl up` takes them from (default: beside this labctl, as `lab_native::plan` does).
pub fn binaries_digest(bin_dir: Option<&Path>) -> anyhow::Result<String> {
    use sha2::Digest;
    let exe = std::env::current_exe()?;
    let dir = match bin_dir {
        Some(d) => d.to_path_buf(),
        None => exe
            .parent()
            .context("labctl has no parent directory")?
            .to_path_buf(),
    };
    let mut h = sha2::Sha256::new();
    for name in [
        "edge-gateway",
        "orchestrator",
        "entity-service",
        "enrichment",
    ] {
        let path = dir.join(name);
        // A missing binary is `labctl up`'s error to report; here it only changes the digest.
        let bytes = std::fs::read(&path).unwrap_or_default();
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    h.update(std::fs::read(&exe).with_context(|| format!("reading {}", exe.display()))?);
    Ok(hex::encode(&h.finalize()[..8]))
}

impl CellSpec {
    /// The cell's timeline as a scenario for the engine.
    pub fn scenario(&self) -> Scenario {
        let phase = |name: &str, seconds: u64, run: &[Action]| Phase {
            name: name.into(),
            seconds: seconds.max(1),
            rate: None,
            flags: BTreeMap::new(),
            run: run.iter().cloned().map(Step::from).collect(),
            window: Default::default(),
            ends: Default::default(),
            postmortem: None,
            verdict: BTreeMap::new(),
        };
        let mut phases = vec![phase("steady", self.steady_seconds, &[])];
        match self.rollback_after {
            Some(r) if r < self.stale_seconds => {
                phases.push(phase("stale", r, &[Action::INVALIDATE]));
                phases.push(phase(
                    "rollback",
                    self.stale_seconds - r,
                    &[Action::RolloutRestart(Service::Orchestrator)],
                ));
            }
            _ => phases.push(phase("stale", self.stale_seconds, &[Action::INVALIDATE])),
        }
        phases.push(phase("analyzed", self.recovery_seconds, &[Action::ANALYZE]));
        Scenario {
            name: format!("cell {}", self.id),
            summary: self.label.clone(),
            description: "One experiment cell: the stale plan held, then ANALYZE.".into(),
            rate: self.rate,
            tenants: "size".into(),
            settle_seconds: 5,
            phases,
            peak: None,
            cleanup: vec![],
            expect: BTreeMap::new(),
        }
    }
}

/// What one repetition of a cell measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    pub spec: CellSpec,
    pub repeat: u32,
    /// Aggregates over the trigger window (from the plan flip to ANALYZE) unless named
    /// otherwise; see [`aggregate`].
    pub metrics: BTreeMap<String, f64>,
    /// Seconds from the end of ANALYZE until goodput held within the margin for 5 s; `None`:
    /// it had not within the recovery window (stayed failed).
    pub recovery_seconds: Option<f64>,
    /// Each phase's summary, as a game day reports it.
    pub phases: Vec<(String, BTreeMap<String, f64>)>,
    /// The run's own counts added up.
    pub consistent: bool,
    /// The consistency checks that did not hold, with their counts (empty in cells measured
    /// before they were kept: those say only that the counts did not add up).
    #[serde(default)]
    pub counts_failed: Vec<Check>,
    /// The load generator's answers by status, `client_timeout` and `client_error` included.
    #[serde(default)]
    pub load_by_status: BTreeMap<String, u64>,
    /// Why this repetition cannot be ranked or mapped (empty: valid): the trigger's command
    /// failed, the hot plan never left the index scan (or was not measured) while the plan was
    /// meant to be stale, the counts do not add up. See [`invalid_reasons`].
    #[serde(default)]
    pub invalid: Vec<String>,
    /// Wall time of the cell, lab start to lab down.
    pub seconds: f64,
    pub dir: PathBuf,
}

impl CellResult {
    /// Recompute the aggregates from the stored phase summaries and, where the cell's series is
    /// still on disk, its per-second figures: a cell measured by an earlier labctl gains the
    /// figures added since.
    fn refresh(&mut self) {
        let sc = self.spec.scenario();
        if sc.phases.len() != self.phases.len() {
            return;
        }
        let mut start = 0.0;
        let reports: Vec<engine::PhaseReport> = sc
            .phases
            .iter()
            .zip(&self.phases)
            .map(|(p, (name, summary))| {
                let r = engine::PhaseReport {
                    name: name.clone(),
                    seconds: p.seconds,
                    start,
                    judged_from: None,
                    summary: summary.clone(),
                    errors_5xx_by_origin: Default::default(),
                };
                start += p.seconds as f64;
                r
            })
            .collect();
        // A stored cell is judged by today's rule too (its trigger command's outcome is not
        // stored: a failed one shows as a plan that never flipped).
        self.invalid = invalid_reasons(&self.phases, &[], self.consistent, &self.counts_failed);
        let mut m = aggregate(&reports);
        let phase_list: Vec<(String, f64, f64)> = reports
            .iter()
            .map(|p| (p.name.clone(), p.start, p.seconds as f64))
            .collect();
        match RunSeries::read(&self.dir.join("series.jsonl"), vec![], phase_list) {
            Ok(series) => per_second_metrics(&series, &reports, &mut m),
            Err(_) => {
                for (k, v) in &self.metrics {
                    if k.starts_with("retry_amplif") {
                        m.insert(k.clone(), *v);
                    }
                }
            }
        }
        self.metrics = m;
    }
}

/// Why a repetition proves nothing (empty: it does). A cell is an experiment on the stale plan:
/// one whose trigger command failed (its DDL lock timeout, say), or whose hot plan was still an
/// index scan — or not measured — during the stale window, measured something else; one whose
/// own counts do not add up measured nothing reliably.
pub fn invalid_reasons(
    phases: &[(String, BTreeMap<String, f64>)],
    trigger_failed: &[String],
    consistent: bool,
    counts_failed: &[Check],
) -> Vec<String> {
    let mut why: Vec<String> = trigger_failed
        .iter()
        .map(|c| format!("the trigger's `labctl {c}` failed (actions.log)"))
        .collect();
    // The stale window: every phase between steady and analyzed ("stale", and "rollback").
    for (name, summary) in phases
        .iter()
        .filter(|(n, _)| n != "steady" && n != "analyzed")
    {
        match summary.get("hot_plan_index_scan_min") {
            None => why.push(format!(
                "{name}: the hot plan was not measured (entity_db_stats_up was not 1 throughout)"
            )),
            Some(v) if *v > 0.0 => why.push(format!(
                "{name}: the hot plan never left the index scan — the trigger did not happen"
            )),
            Some(_) => {}
        }
    }
    if !consistent && counts_failed.is_empty() {
        why.push("the run's own counts do not add up (its summary's consistency checks)".into());
    }
    why.extend(counts_failed.iter().map(|c| {
        format!(
            "the counts do not add up: {}: {} {:.0}, got {:.0}",
            c.check,
            c.reference_word(),
            c.reference.unwrap_or(f64::NAN),
            c.value.unwrap_or(f64::NAN)
        )
    }));
    why
}

/// The repetitions that prove their trigger; the others are named in the error of
/// [`ensure_valid`] once the report is written.
pub fn valid(results: &[CellResult]) -> Vec<CellResult> {
    results
        .iter()
        .filter(|r| r.invalid.is_empty())
        .cloned()
        .collect()
}

/// Fail (after the report) when any repetition was invalid: a matrix with holes is not a result.
pub fn ensure_valid(results: &[CellResult]) -> anyhow::Result<()> {
    let bad: Vec<String> = results
        .iter()
        .filter(|r| !r.invalid.is_empty())
        .map(|r| format!("{} rep {}: {}", r.spec.id, r.repeat, r.invalid.join("; ")))
        .collect();
    anyhow::ensure!(
        bad.is_empty(),
        "{} cell repetition(s) excluded from the rankings and maps as invalid (--rerun measures \
         them again):\n  {}",
        bad.len(),
        bad.join("\n  ")
    );
    Ok(())
}

/// May a stored repetition stand for `wanted`? Only when it was measured with exactly this cell
/// and these settings — one without a recorded fingerprint never.
fn reusable(stored: &CellSpec, wanted: &CellSpec) -> bool {
    !stored.setup.is_empty() && stored == wanted
}

/// `cells/<id>/rep-<n>`.
pub fn rep_dir(out: &Path, id: &str, rep: u32) -> PathBuf {
    out.join("cells").join(id).join(format!("rep-{rep}"))
}

/// Run (or read back) every repetition of every cell, in order.
pub async fn run_all(
    specs: &[CellSpec],
    args: &CellArgs,
    cal: &Calibration,
    g: &Globals,
    keys: &[ApiKeyRecord],
    out: &Path,
) -> anyhow::Result<Vec<CellResult>> {
    let total = specs.len() * args.repeat as usize;
    let mut results = Vec::new();
    let started = Instant::now();
    let mut measured = 0usize;
    for (i, spec) in specs.iter().enumerate() {
        for rep in 1..=args.repeat {
            let n = i * args.repeat as usize + rep as usize;
            let dir = rep_dir(out, &spec.id, rep);
            let file = dir.join("cell.json");
            if !args.rerun && file.exists() {
                let mut r: CellResult = serde_json::from_slice(&std::fs::read(&file)?)
                    .with_context(|| format!("reading {}", file.display()))?;
                if reusable(&r.spec, spec) {
                    // The series beside this file, wherever --out has moved since.
                    r.dir = dir.clone();
                    r.refresh();
                    println!("[{n}/{total}] {} rep {rep}: already measured", spec.label);
                    results.push(r);
                    continue;
                }
                println!(
                    "[{n}/{total}] {} rep {rep}: measured with other settings; measuring again",
                    spec.label
                );
            }
            let eta = (measured > 0).then(|| {
                let per = started.elapsed().as_secs_f64() / measured as f64;
                let left = total - n + 1;
                format!(" (~{:.0} min left)", per * left as f64 / 60.0)
            });
            println!(
                "\n[{n}/{total}] {} rep {rep}: {} mode{}, {:.0} rps, stale {} s{}{}",
                spec.label,
                spec.mode.variant(),
                if spec.flags.is_empty() {
                    String::new()
                } else {
                    format!(
                        " + {}",
                        spec.flags
                            .iter()
                            .map(|(f, v)| format!("{f}={v}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                },
                spec.rate,
                spec.stale_seconds,
                spec.rollback_after
                    .map(|r| format!(", rollback at +{r} s"))
                    .unwrap_or_default(),
                eta.unwrap_or_default()
            );
            let r = run_one(spec, rep, args, cal, g, keys, &dir).await?;
            measured += 1;
            println!(
                "  → 5xx {:.1}%, goodput {:.1}% of offered while stale, recovery {}",
                r.metrics.get("error_5xx_pct").copied().unwrap_or(f64::NAN),
                r.metrics.get("goodput_pct").copied().unwrap_or(f64::NAN),
                r.recovery_seconds
                    .map_or("none (stayed failed)".into(), |s| format!("{s:.0} s"))
            );
            std::fs::write(&file, serde_json::to_vec_pretty(&r)?)?;
            results.push(r);
        }
    }
    Ok(results)
}

async fn run_one(
    spec: &CellSpec,
    rep: u32,
    args: &CellArgs,
    cal: &Calibration,
    g: &Globals,
    keys: &[ApiKeyRecord],
    dir: &Path,
) -> anyhow::Result<CellResult> {
    let started = Instant::now();
    std::fs::create_dir_all(dir)?;
    let mut ra = args.as_replay();
    ra.lab.policy = spec.policy.clone();
    let log = dir.join("actions.log");
    // The same starting point for every cell: statistics freshly analyzed (a cell cut short
    // may have left the plan stale), then a fresh lab booted with the cell's flags, its memory
    // limit, and the same closed-loop warm-up.
    crate::act(g, Action::ANALYZE, &log).await?;
    replay::fresh_warm_lab(
        &ra,
        g,
        keys,
        (spec.mode, &spec.flags),
        cal.memory_limit_bytes,
        &log,
    )
    .await?;
    let sc = spec.scenario();
    let run = engine::Run {
        scenario: &sc,
        mode: spec.mode,
        rate: spec.rate,
        tenants: TenantMix::Size,
        extra_flags: &spec.flags,
        gateway: format!("http://127.0.0.1:{}", args.lab.gateway_port),
        targets: TargetSource::Native(g.state_dir.clone()),
        seed: args.seed,
        out: dir.to_path_buf(),
        time_scale: 1.0,
    };
    let outcome = engine::execute(&run, g, keys.to_vec()).await;
    lab_native::down(&g.state_dir).await?;
    let outcome = outcome?;
    let result = result_of(spec, rep, started, dir, &outcome)?;
    std::fs::write(
        dir.join("load.json"),
        serde_json::to_vec(&outcome.load.per_second)?,
    )?;
    Ok(result)
}

/// A cell's result from its run: ANALYZE's end, the recovery after it, the aggregates over the
/// stale window and the per-second figures, and whatever makes the cell invalid.
fn result_of(
    spec: &CellSpec,
    rep: u32,
    started: Instant,
    dir: &Path,
    outcome: &engine::Outcome,
) -> anyhow::Result<CellResult> {
    let analyze_end = outcome
        .actions
        .iter()
        .find(|a| a.command.starts_with("remediate analyze"))
        .filter(|a| a.ok)
        .map(|a| a.started_at + a.seconds)
        .context("the cell's ANALYZE did not run: see actions.log")?;
    let run_end: f64 = outcome.phases.iter().map(|p| p.seconds as f64).sum();
    let recovery = recovery_seconds(
        &outcome.load.per_second,
        analyze_end,
        run_end,
        spec.recovery_margin,
    );
    let phase_list: Vec<(String, f64, f64)> = outcome
        .phases
        .iter()
        .map(|p| (p.name.clone(), p.start, p.seconds as f64))
        .collect();
    let series = RunSeries::read(
        &dir.join("series.jsonl"),
        outcome.load.per_second.clone(),
        phase_list,
    )?;
    let phases: Vec<(String, BTreeMap<String, f64>)> = outcome
        .phases
        .iter()
        .map(|p| (p.name.clone(), p.summary.clone()))
        .collect();
    let mut metrics = aggregate(&outcome.phases);
    per_second_metrics(&series, &outcome.phases, &mut metrics);
    // What was left of the recovery window once ANALYZE had finished (a slow ANALYZE
    // shortens it; "stayed failed" means "not within this").
    metrics.insert("recovery_window_s".into(), run_end - analyze_end);
    let consistent = outcome.consistency.iter().all(|c| c.holds());
    let counts_failed: Vec<Check> = outcome
        .consistency
        .iter()
        .filter(|c| !c.holds())
        .cloned()
        .collect();
    let trigger_failed: Vec<String> = outcome
        .actions
        .iter()
        .filter(|a| a.command.starts_with("backfill") && !a.ok)
        .map(|a| a.command.clone())
        .collect();
    let invalid = invalid_reasons(&phases, &trigger_failed, consistent, &counts_failed);
    let result = CellResult {
        spec: spec.clone(),
        repeat: rep,
        metrics,
        recovery_seconds: recovery,
        invalid,
        phases,
        consistent,
        counts_failed,
        load_by_status: outcome.load.by_status.clone(),
        seconds: started.elapsed().as_secs_f64(),
        dir: dir.to_path_buf(),
    };
    Ok(result)
}

/// The first second after `analyze_end` that starts 5 seconds in a row with goodput at least
/// `margin` of what was sent **and is not followed by a relapse** (5 seconds in a row below it)
/// before `run_end`, as seconds after `analyze_end`; `None` when there is none (the cell stayed
/// failed through its recovery window, or fell back into failure after recovering). A second a
/// cell never left healthy counts as recovered at once (0).
///
/// Why the relapse: the full-size map of 2026-12-07 had a legacy cell (0.95x the healthy
/// capacity, 30 s stale, the rollback at +10 s) serve everything from 7 s after ANALYZE for 10
/// seconds, then collapse to 10-20% goodput for the 40 seconds left of its window, with the plan
/// healthy — as the rollout's last orchestrators came back with cold caches. The first rule
/// called it recovered in 5 s.
pub fn recovery_seconds(
    load: &[SecondSample],
    analyze_end: f64,
    run_end: f64,
    margin: f64,
) -> Option<f64> {
    const HOLD: u64 = 5;
    let sample = |s: u64| load.iter().find(|x| x.second == s).filter(|x| x.sent > 0);
    let good = |s: u64| sample(s).is_some_and(|x| x.good as f64 >= margin * x.sent as f64);
    let bad = |s: u64| sample(s).is_some_and(|x| (x.good as f64) < margin * x.sent as f64);
    let first = analyze_end.floor() as u64;
    // The seconds a run of HOLD may start at: it must end inside the window.
    let starts_until = (run_end.floor() as u64).saturating_sub(HOLD - 1);
    let mut from = first;
    loop {
        let recovered = (from..starts_until).find(|s| (*s..*s + HOLD).all(good))?;
        match (recovered + HOLD..starts_until).find(|s| (*s..*s + HOLD).all(bad)) {
            None => return Some((recovered as f64 - analyze_end).max(0.0)),
            Some(relapse) => from = relapse + HOLD,
        }
    }
}

/// Which phases hold the stale plan: from the one that flips it to the one that analyzes.
fn trigger_window(phases: &[engine::PhaseReport]) -> std::ops::Range<usize> {
    let from = phases.iter().position(|p| p.name == "stale").unwrap_or(0);
    let to = phases
        .iter()
        .position(|p| p.name == "analyzed")
        .unwrap_or(phases.len());
    from..to
}

/// The trigger window's figures: time-weighted means of rates and shares, maxima of peaks,
/// and two whole-run totals (`entity_calls_total`, `oom_kills`), plus the analyzed phase's
/// error rate and goodput share (`after_*`).
pub fn aggregate(phases: &[engine::PhaseReport]) -> BTreeMap<String, f64> {
    let w = trigger_window(phases);
    let win = &phases[w.clone()];
    let mut m = BTreeMap::new();
    let secs: f64 = win.iter().map(|p| p.seconds as f64).sum();
    let sum = |key: &str| -> Option<f64> {
        let mut acc = 0.0;
        let mut any = false;
        for p in win {
            if let Some(v) = p.summary.get(key) {
                acc += v * p.seconds as f64;
                any = true;
            }
        }
        any.then_some(acc)
    };
    let max = |key: &str| -> Option<f64> {
        win.iter()
            .filter_map(|p| p.summary.get(key).copied())
            .reduce(f64::max)
    };
    for key in [
        "error_5xx_pct",
        "amplification",
        "abandoned_pct",
        "entity_inbound_rps",
        "goodput_rps",
        "offered_rps",
    ] {
        if let Some(v) = sum(key) {
            m.insert(key.to_string(), v / secs.max(1.0));
        }
    }
    if let (Some(good), Some(offered)) = (sum("goodput_rps"), sum("offered_rps")) {
        if offered > 0.0 {
            m.insert("goodput_pct".into(), 100.0 * good / offered);
        }
    }
    for key in [
        "amplification",
        "gateway_attempts_per_first",
        "orchestrator_attempts_per_first",
        "gateway_p99_ms",
        "entity_p99_ms",
        "orchestrator_tasks_max",
        "orchestrator_rss_mb_max",
        "db_connections_max",
    ] {
        if let Some(v) = max(key) {
            m.insert(format!("{key}_peak"), v);
        }
    }
    let calls: f64 = phases
        .iter()
        .filter_map(|p| {
            p.summary
                .get("entity_inbound_rps")
                .map(|v| v * p.seconds as f64)
        })
        .sum();
    m.insert("entity_calls_total".into(), calls);
    let ooms: f64 = phases
        .iter()
        .filter_map(|p| p.summary.get("oom_kills").copied())
        .sum();
    m.insert("oom_kills".into(), ooms);
    if let Some(v) = phases.first().and_then(|p| p.summary.get("goodput_pct")) {
        m.insert("steady_goodput_pct".into(), *v);
    }
    if let Some(after) = phases.iter().find(|p| p.name == "analyzed") {
        for key in ["error_5xx_pct", "goodput_pct"] {
            if let Some(v) = after.summary.get(key) {
                m.insert(format!("after_{key}"), *v);
            }
        }
    }
    m
}

/// Retries' amplification second by second over the trigger window: gateway attempts per first
/// attempt × orchestrator attempts per first attempt (1-s increments of the same counters the
/// phase summaries use) — the postmortem's "9×" is this product (3 × 3), and caches going cold
/// after a rollback do not move it, as they move entity-service inbound / gateway ingress.
fn retry_amplification_per_second(
    series: &RunSeries,
    phases: &[engine::PhaseReport],
) -> Option<Vec<f64>> {
    let w = trigger_window(phases);
    let (from, to) = (
        phases.get(w.start)?.start,
        phases.get(w.end - 1).map(|p| p.start + p.seconds as f64)?,
    );
    let count = |service: &'static str, metric: &'static str| Expr::Increase {
        service,
        metric,
        filter: Filter::All,
    };
    let hops = [
        (
            count("edge-gateway", "gateway_upstream_attempts_total"),
            count("edge-gateway", "gateway_upstream_retries_total"),
        ),
        (
            count("orchestrator", "entity_requests_total"),
            count("orchestrator", "entity_retries_total"),
        ),
    ];
    let frame = series.frame();
    let mut out = Vec::new();
    for i in 1..series.ticks.len() {
        // The second from tick i-1 to tick i, wholly inside the window (ticks land a few ms
        // after each whole second).
        let (t0, t1) = (series.ticks[i - 1].t, series.ticks[i].t);
        if t0 < from - 0.5 || t1 > to + 0.5 {
            continue;
        }
        let mut product = 1.0;
        let second = Window::at(&series.ticks, i, 1);
        for (attempts, retries) in &hops {
            let a = frame.eval(attempts, &second).unwrap_or(0.0);
            let r = frame.eval(retries, &second).unwrap_or(0.0);
            if a > r {
                product *= a / (a - r);
            } else if r > 0.0 {
                // Attempts are counted when they end and retries when they are sent: a second
                // of storm can send more retries than attempts finish. Amplified, by an amount
                // this second cannot say.
                product = f64::INFINITY;
            }
            // No attempt and no retry at a hop (all shed): it amplifies nothing.
        }
        out.push(product);
    }
    (!out.is_empty()).then_some(out)
}

/// The longest run of consecutive values above `threshold`.
pub fn longest_run_above(values: &[f64], threshold: f64) -> usize {
    let (mut longest, mut run) = (0, 0);
    for v in values {
        run = if *v > threshold { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// The postmortem's ceiling for a healthy fleet ("downstream ≤ 1.2× ingress"): above it,
/// retries are a storm.
pub const RETRY_AMPLIFICATION_MAX: f64 = 1.2;

/// The per-second figures of a cell from its series: the longest run of seconds with retries'
/// amplification above [`RETRY_AMPLIFICATION_MAX`], and its 1-s peak.
fn per_second_metrics(
    series: &RunSeries,
    phases: &[engine::PhaseReport],
    m: &mut BTreeMap<String, f64>,
) {
    if let Some(v) = retry_amplification_per_second(series, phases) {
        m.insert(
            "retry_amplified_seconds_longest".into(),
            longest_run_above(&v, RETRY_AMPLIFICATION_MAX) as f64,
        );
        if let Some(peak) = v.iter().copied().filter(|x| x.is_finite()).reduce(f64::max) {
            m.insert("retry_amplification_peak_1s".into(), peak);
        }
    }
}

/// What a cell costs, as a sentence: the mean wall time of the repetitions measured.
pub fn cost_line(results: &[CellResult]) -> String {
    if results.is_empty() {
        return String::new();
    }
    let mean = results.iter().map(|r| r.seconds).sum::<f64>() / results.len() as f64;
    format!(
        "A cell costs {mean:.0} s on this machine (mean of {}: fresh lab, warm-up, timeline, lab \
         down); the backfill is never re-run.",
        results.len()
    )
}

/// Mean, min and max of `key` over a cell's repetitions.
pub fn spread(results: &[&CellResult], key: &str) -> Option<(f64, f64, f64)> {
    let v: Vec<f64> = results
        .iter()
        .filter_map(|r| r.metrics.get(key).copied())
        .filter(|v| v.is_finite())
        .collect();
    if v.is_empty() {
        return None;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((mean, min, max))
}

/// `12.3` or `12.3 (10.1–14.0)` when repeated.
pub fn fmt_spread(s: Option<(f64, f64, f64)>, n: usize, digits: usize) -> String {
    match s {
        None => "—".into(),
        Some((m, _, _)) if n <= 1 => format!("{m:.digits$}"),
        Some((m, lo, hi)) => format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})"),
    }
}

/// Recovery over repetitions: every one recovered → the mean time; any stayed failed → so.
pub fn recovery_summary(results: &[&CellResult]) -> (Option<f64>, usize) {
    let failed = results
        .iter()
        .filter(|r| r.recovery_seconds.is_none())
        .count();
    let ok: Vec<f64> = results.iter().filter_map(|r| r.recovery_seconds).collect();
    let mean = (!ok.is_empty()).then(|| ok.iter().sum::<f64>() / ok.len() as f64);
    (if failed > 0 { None } else { mean }, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        cells: CellArgs,
    }

    fn cell_args(argv: &[&str]) -> CellArgs {
        use clap::Parser;
        Cli::try_parse_from(std::iter::once("cell").chain(argv.iter().copied()))
            .unwrap()
            .cells
    }

    #[test]
    fn a_cell_takes_its_experiments_timing_and_its_own_variant() {
        let v = |id: &str| Variant {
            id: id.into(),
            label: format!("label {id}"),
            mode: Mode::Resilient,
            flags: vec![("resilience.concurrency_adaptive".into(), "off".into())],
            policy: Some(PathBuf::from("p.toml")),
        };
        let full = cell_args(&[]).spec(v("a"), 120.0, (60, Some(10)), "s".into());
        assert_eq!(
            (
                full.steady_seconds,
                full.stale_seconds,
                full.rollback_after,
                full.recovery_seconds
            ),
            (15, 60, Some(10), 60)
        );
        assert_eq!((full.id.as_str(), full.label.as_str()), ("a", "label a"));
        assert_eq!(full.flags, v("a").flags);
        assert_eq!((full.rate, full.recovery_margin), (120.0, 0.95));
        assert_eq!(
            (full.policy, full.setup),
            (Some(PathBuf::from("p.toml")), "s".into())
        );
        let quick = cell_args(&["--quick", "--recovery-margin", "0.9"]).spec(
            v("b"),
            1.0,
            (40, None),
            "".into(),
        );
        assert_eq!(
            (
                quick.steady_seconds,
                quick.recovery_seconds,
                quick.recovery_margin,
                quick.rollback_after
            ),
            (10, 45, 0.9, None)
        );
        let own = cell_args(&["--quick", "--recovery-seconds", "30"]).spec(
            v("c"),
            1.0,
            (40, None),
            "".into(),
        );
        assert_eq!(own.recovery_seconds, 30);
    }

    fn sample(second: u64, sent: u64, good: u64) -> SecondSample {
        SecondSample {
            second,
            sent,
            ok: good,
            good,
            errors: sent - good,
            p50_ms: 0.0,
            p99_ms: 0.0,
            lag_max_ms: 0.0,
        }
    }

    #[test]
    fn recovery_is_the_first_of_five_good_seconds_after_analyze() {
        // Failing until second 14, good from 15 on; ANALYZE ended at 10.4.
        let load: Vec<_> = (0..40)
            .map(|s| {
                if (5..15).contains(&s) {
                    sample(s, 100, 10)
                } else {
                    sample(s, 100, 99)
                }
            })
            .collect();
        let r = recovery_seconds(&load, 10.4, 40.0, 0.95).unwrap();
        assert!((r - 4.6).abs() < 1e-9, "{r}");
        // A blip inside the five seconds restarts the count.
        let mut blip = load.clone();
        blip[17] = sample(17, 100, 50);
        let r = recovery_seconds(&blip, 10.4, 40.0, 0.95).unwrap();
        assert!((r - 7.6).abs() < 1e-9, "{r}");
    }

    #[test]
    fn a_recovery_followed_by_a_relapse_is_no_recovery() {
        // ANALYZE ended at 10.0; good 15-24, then failing to the end (the map's 0.95x cell).
        let relapse: Vec<_> = (0..60)
            .map(|s| {
                if (15..25).contains(&s) || s < 5 {
                    sample(s, 100, 100)
                } else {
                    sample(s, 100, 15)
                }
            })
            .collect();
        assert_eq!(recovery_seconds(&relapse, 10.0, 60.0, 0.95), None);
        // Fewer than five bad seconds after it is a blip, not a relapse.
        let blip: Vec<_> = (0..60)
            .map(|s| {
                if (5..15).contains(&s) || (30..34).contains(&s) {
                    sample(s, 100, 15)
                } else {
                    sample(s, 100, 100)
                }
            })
            .collect();
        assert_eq!(recovery_seconds(&blip, 10.0, 60.0, 0.95), Some(5.0));
        // Recovered, relapsed, recovered for good: the recovery is the one that lasted.
        let twice: Vec<_> = (0..60)
            .map(|s| {
                if (5..15).contains(&s) || (25..35).contains(&s) {
                    sample(s, 100, 15)
                } else {
                    sample(s, 100, 100)
                }
            })
            .collect();
        assert_eq!(recovery_seconds(&twice, 10.0, 60.0, 0.95), Some(25.0));
    }

    #[test]
    fn a_cell_still_failing_at_the_end_of_its_window_stayed_failed() {
        let load: Vec<_> = (0..40)
            .map(|s| {
                if !(5..=37).contains(&s) {
                    sample(s, 100, 100)
                } else {
                    sample(s, 100, 20)
                }
            })
            .collect();
        // Good again only from 38: fewer than five seconds before the end.
        assert_eq!(recovery_seconds(&load, 10.0, 40.0, 0.95), None);
        // Never failed: recovered at once.
        let fine: Vec<_> = (0..40).map(|s| sample(s, 100, 100)).collect();
        assert_eq!(recovery_seconds(&fine, 10.0, 40.0, 0.95), Some(0.0));
    }

    fn phase(name: &str, seconds: u64, kv: &[(&str, f64)]) -> engine::PhaseReport {
        engine::PhaseReport {
            name: name.into(),
            seconds,
            start: 0.0,
            judged_from: None,
            summary: kv.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            errors_5xx_by_origin: Default::default(),
        }
    }

    #[test]
    fn aggregates_weigh_phases_by_their_length_and_keep_the_steady_phase_out() {
        let phases = vec![
            phase(
                "steady",
                10,
                &[
                    ("error_5xx_pct", 0.0),
                    ("goodput_rps", 100.0),
                    ("offered_rps", 100.0),
                    ("entity_inbound_rps", 100.0),
                ],
            ),
            phase(
                "stale",
                10,
                &[
                    ("error_5xx_pct", 10.0),
                    ("goodput_rps", 90.0),
                    ("offered_rps", 100.0),
                    ("entity_inbound_rps", 150.0),
                    ("orchestrator_tasks_max", 50.0),
                ],
            ),
            phase(
                "rollback",
                30,
                &[
                    ("error_5xx_pct", 50.0),
                    ("goodput_rps", 50.0),
                    ("offered_rps", 100.0),
                    ("entity_inbound_rps", 300.0),
                    ("orchestrator_tasks_max", 900.0),
                    ("oom_kills", 2.0),
                ],
            ),
            phase(
                "analyzed",
                20,
                &[
                    ("error_5xx_pct", 1.0),
                    ("goodput_rps", 99.0),
                    ("offered_rps", 100.0),
                    ("goodput_pct", 99.0),
                    ("entity_inbound_rps", 100.0),
                ],
            ),
        ];
        let m = aggregate(&phases);
        assert!((m["error_5xx_pct"] - 40.0).abs() < 1e-9, "{m:?}");
        assert!((m["goodput_pct"] - 60.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m["orchestrator_tasks_max_peak"], 900.0);
        assert_eq!(m["entity_calls_total"], 1000.0 + 1500.0 + 9000.0 + 2000.0);
        assert_eq!(m["oom_kills"], 2.0);
        assert_eq!(m["after_goodput_pct"], 99.0);
    }

    #[test]
    fn a_cell_read_back_recomputes_its_aggregates_from_its_phases() {
        let spec = CellSpec {
            id: "x".into(),
            label: "x".into(),
            mode: Mode::Legacy,
            flags: vec![],
            rate: 100.0,
            steady_seconds: 10,
            stale_seconds: 30,
            rollback_after: None,
            recovery_seconds: 20,
            recovery_margin: 0.95,
            policy: None,
            setup: String::new(),
        };
        let kv = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let mut r = CellResult {
            spec,
            repeat: 1,
            // As an older labctl stored it: no gateway figure, one per-second figure (its series
            // is gone: the figure is kept as stored).
            metrics: kv(&[("retry_amplified_seconds_longest", 4.0)]),
            recovery_seconds: Some(1.0),
            phases: vec![
                ("steady".into(), kv(&[("gateway_attempts_per_first", 1.0)])),
                (
                    "stale".into(),
                    kv(&[("gateway_attempts_per_first", 2.5), ("error_5xx_pct", 30.0)]),
                ),
                (
                    "analyzed".into(),
                    kv(&[("gateway_attempts_per_first", 1.1)]),
                ),
            ],
            consistent: true,
            counts_failed: vec![],
            load_by_status: BTreeMap::new(),
            invalid: vec![],
            seconds: 100.0,
            dir: PathBuf::from("/nonexistent"),
        };
        r.refresh();
        // Stored without a plan figure: judged by today's rule, it proved no trigger.
        assert!(!r.invalid.is_empty(), "{:?}", r.invalid);
        assert_eq!(r.metrics["gateway_attempts_per_first_peak"], 2.5);
        assert_eq!(r.metrics["error_5xx_pct"], 30.0);
        assert_eq!(r.metrics["retry_amplified_seconds_longest"], 4.0);
    }

    #[test]
    fn a_stored_cell_is_reused_only_under_the_same_cell_and_settings() {
        let wanted = CellSpec {
            id: "all".into(),
            label: "all".into(),
            mode: Mode::Resilient,
            flags: vec![],
            rate: 212.0,
            steady_seconds: 10,
            stale_seconds: 40,
            rollback_after: Some(10),
            recovery_seconds: 45,
            recovery_margin: 0.95,
            policy: None,
            setup: "warmup=30 seed=1".into(),
        };
        assert!(reusable(&wanted.clone(), &wanted));
        let other_warmup = CellSpec {
            setup: "warmup=60 seed=1".into(),
            ..wanted.clone()
        };
        assert!(!reusable(&other_warmup, &wanted));
        let unrecorded = CellSpec {
            setup: String::new(),
            ..wanted.clone()
        };
        assert!(!reusable(&unrecorded, &wanted));
        let other_rate = CellSpec {
            rate: 300.0,
            ..wanted.clone()
        };
        assert!(!reusable(&other_rate, &wanted));
    }

    #[test]
    fn a_cell_that_did_not_prove_its_trigger_is_invalid() {
        let kv = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let flipped = vec![
            (
                "steady".to_string(),
                kv(&[("hot_plan_index_scan_min", 1.0)]),
            ),
            ("stale".to_string(), kv(&[("hot_plan_index_scan_min", 0.0)])),
            (
                "analyzed".to_string(),
                kv(&[("hot_plan_index_scan_min", 1.0)]),
            ),
        ];
        assert!(invalid_reasons(&flipped, &[], true, &[]).is_empty());
        // The plan never flipped (the invalidation's DDL timed out, say).
        let mut never = flipped.clone();
        never[1].1.insert("hot_plan_index_scan_min".into(), 1.0);
        let why = invalid_reasons(&never, &[], true, &[]);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].contains("never left the index scan"), "{why:?}");
        // The probe was down: not measured is not proof.
        let mut blind = flipped.clone();
        blind[1].1.clear();
        assert!(invalid_reasons(&blind, &[], true, &[])[0].contains("not measured"));
        // The trigger's command failed, the counts do not add up.
        let why = invalid_reasons(&flipped, &["backfill --only invalidate".into()], false, &[]);
        assert_eq!(why.len(), 2, "{why:?}");
        // The counts that did not add up are named, with their values.
        let timeouts = Check::counts_agree(
            "load: every request got an HTTP answer (no client timeout or error)",
            1000.0,
            940.0,
        );
        let why = invalid_reasons(&flipped, &[], false, &[timeouts]);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].contains("no client timeout") && why[0].contains("expected 1000, got 940"),
            "{why:?}"
        );
        // A rollback phase is part of the stale window too.
        let mut rolled = flipped.clone();
        rolled.insert(
            2,
            (
                "rollback".to_string(),
                kv(&[("hot_plan_index_scan_min", 1.0)]),
            ),
        );
        assert_eq!(invalid_reasons(&rolled, &[], true, &[]).len(), 1);
    }

    #[test]
    fn a_storm_is_the_longest_run_above_the_ceiling() {
        let v = [1.0, 1.3, 1.5, 1.1, 1.3, 1.3, 1.3, 1.0];
        assert_eq!(longest_run_above(&v, RETRY_AMPLIFICATION_MAX), 3);
        assert_eq!(
            longest_run_above(&[1.0, 1.2, 1.0], RETRY_AMPLIFICATION_MAX),
            0
        );
        assert_eq!(longest_run_above(&[], RETRY_AMPLIFICATION_MAX), 0);
    }

    #[test]
    fn a_cell_with_a_rollback_splits_the_stale_plan_in_two_phases() {
        let spec = CellSpec {
            id: "legacy".into(),
            label: "legacy".into(),
            mode: Mode::Legacy,
            flags: vec![],
            rate: 100.0,
            steady_seconds: 10,
            stale_seconds: 40,
            rollback_after: Some(10),
            recovery_seconds: 45,
            recovery_margin: 0.95,
            policy: None,
            setup: String::new(),
        };
        let sc = spec.scenario();
        let names: Vec<_> = sc
            .phases
            .iter()
            .map(|p| (p.name.as_str(), p.seconds))
            .collect();
        assert_eq!(
            names,
            [
                ("steady", 10),
                ("stale", 10),
                ("rollback", 30),
                ("analyzed", 45)
            ]
        );
        assert_eq!(sc.phases[3].run, [Action::ANALYZE]);
        let plain = CellSpec {
            rollback_after: None,
            ..spec
        };
        assert_eq!(plain.scenario().phases.len(), 3);
    }
}
