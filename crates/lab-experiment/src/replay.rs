//! `labctl replay`: the lab's main job — the postmortem's morning, from the real trigger, in both
//! modes, at an operating point chosen by measurement, with a verdict per step.
//!
//! 1. **Calibrate** (skipped with `--rate`). On a fresh lab in resilient mode (the fixed client
//!    sheds instead of storming, so it measures what the database can serve): a closed-loop
//!    warm-up whose last seconds give the healthy capacity; the backfill if the table has not had
//!    it; the plan flip (`backfill --only invalidate`); a closed-loop probe of the stale capacity;
//!    ANALYZE. The replay's rate is `--stale-utilisation` ([`STALE_UTILISATION`], 1.02) × the
//!    stale capacity: demand just past what the stale plan can serve, where the postmortem's plan
//!    flip alone cost 2.1% of requests (issue 26, hypothesis 4). The
//!    steady orchestrator RSS sets the memory limit by the postmortem's ratio (4 Gi over 380 MB).
//! 2. **Replay** each mode on a fresh lab (cold processes, the same closed-loop warm-up, the
//!    memory limit applied): `load/scenarios/incident.yaml`, every phase a line of the timeline.
//! 3. **Report**: the timeline with the postmortem's observation and the lab's measured
//!    before/after and verdict per mode; the Performance Comparison (before / peak / after fix)
//!    next to the postmortem's numbers; where the 5xx came from; how good the fix is in one
//!    number; the calibration. `replay.md` + `summary.json` + each mode's series.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::action::Action;
use crate::engine::{self, TargetSource};
use crate::scenario::{self, Scenario};
use crate::{act, now_s, Globals, Mode};
use lab_load::{DocSource, Docs, LoadArgs, TenantMix};
use lab_native::Service;
use lab_native::UpArgs;
use lab_report::doc::{Cell, Doc, Table};
use lab_report::summary as report;
use lab_report::verdict::{Outcome, Verdict};
use lab_seed::ApiKeyRecord;
use lab_trigger::backfill::{Job, Step};

/// The postmortem's memory limit over its steady RSS: "Memory per pod had gone from 380 MB to
/// 3.8 GB against a 4 Gi limit" — 4,096 MiB / 380 MB ≈ 10.8.
const POSTMORTEM_LIMIT_RATIO: f64 = 4096.0 / 380.0;
/// The healthy lab must stay comfortably inside its capacity at the replay's rate: the
/// postmortem's steady state used 61 of 200 connections (30%); above 60% the lab is not healthy
/// before the trigger, and the calibration says so.
const HEALTHY_UTILISATION_MAX: f64 = 0.6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Modes {
    Both,
    Legacy,
    Resilient,
}

/// The replay's operating point, as a share of the stale plan's measured capacity: 1.02, demand
/// just past it (issue 26, hypothesis 4). Why: the postmortem's plan flip alone took the error
/// rate from 0.4% to 2.1% at 09:47, before any rollback or scale-up. A service that serves its
/// capacity C and fails the excess loses 1 − C/D of a demand D, so 2.1% lost says D = C / (1 −
/// 0.021) ≈ 1.02 C: the morning's demand was just past what the stale plan could serve, and it
/// was healthy on the good plan (61 of 200 connections). The lab ran 0.9 before: inside the stale
/// capacity, where the plan flip cost nothing (0.0% in every replay) and the storm had to wait
/// for the rollback to start. Measured at 1.02 on four fresh short replays, the plan flip cost the
/// legacy lab 0.2%, 7.2%, 50.0% and 33.4%: a knife edge, where the calibration's own error (about
/// ±10%) decides whether the excess stays a slow backlog or storms within the phase
/// (docs/replay.md, item 4, "The rate").
pub const STALE_UTILISATION: f64 = 1.02;

#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Which mode(s) to replay: legacy (the incident), resilient (the fix already shipped).
    #[arg(long, value_enum, default_value_t = Modes::Both)]
    pub mode: Modes,
    /// The replay's rate (requests/s); skips the calibration.
    #[arg(long)]
    pub rate: Option<f64>,
    /// The rate as a share of the stale plan's measured capacity (default: demand just past
    /// it, the postmortem's operating point: see [`STALE_UTILISATION`]).
    #[arg(long, default_value_t = STALE_UTILISATION)]
    pub stale_utilisation: f64,
    /// Every phase's length times this (0.5: a replay half as long, same shape).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// The scenario (load/scenarios/<name>.yaml or a path).
    #[arg(long, default_value = "incident")]
    pub scenario: String,
    /// Closed-loop warm-up before every run (fills the caches; its end measures health).
    #[arg(long, default_value_t = 60)]
    pub warmup_seconds: u64,
    /// Seconds of the healthy capacity probe (the warm-up's last ones).
    #[arg(long, default_value_t = 20)]
    pub probe_seconds: u64,
    /// Seconds of the stale-plan probe, which sets the replay's rate. Its goodput drifts by
    /// ±15% over 10 s windows on this 2-core machine (per-second sd 26–41 rps around ~200), so
    /// 20 s moved the rate 14.5% between three calibrations and 40 s 13.2% (issue 24): default
    /// 90 s. Default: 90, or `--probe-seconds` when that is longer.
    #[arg(long)]
    pub stale_probe_seconds: Option<u64>,
    /// Clients of the closed-loop probes: the PostgreSQL connections of the default lab (2
    /// entity-services × 16), which is also the fixed client's total concurrency limit.
    #[arg(long, default_value_t = 32)]
    pub probe_concurrency: usize,
    /// Memory limit of every orchestrator: a size (`700M`), `none`, or the default: the steady
    /// RSS measured by the calibration × the postmortem's ratio (4 Gi / 380 MB).
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// Where the report goes (default: <state dir>/reports/replay-<unix time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of the document stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Replay N times, each a calibration and every mode on fresh labs (<out>/rep-1 …): each
    /// step's verdict as "k of N", and a step counts as reproduced (the fix as held) only when
    /// it did in every repetition. The calibration's spread is reported beside it.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Only calibrate (with `--repeat N`: N calibrations, and how far they moved): the
    /// calibration's own stability, measured.
    #[arg(long, conflicts_with = "rate")]
    pub calibrate_only: bool,
    /// The lab's shape (every run starts a fresh one of it).
    #[command(flatten)]
    pub lab: UpArgs,
}

/// A quantity that is NaN when not measured (`--rate` skips the calibration): serde_json writes
/// NaN as `null`, read back here as NaN (a plain `f64` refuses `null`, and the run's own
/// `summary.json` / `repeats.json` could not be read back).
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    use serde::Deserialize;
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl ReplayArgs {
    /// Seconds of the stale-plan probe ([`ReplayArgs::stale_probe_seconds`]).
    pub fn stale_probe(&self) -> u64 {
        self.stale_probe_seconds
            .unwrap_or(90.max(self.probe_seconds))
    }

    /// The modes to replay (none with `--calibrate-only`).
    pub fn modes(&self) -> Vec<Mode> {
        match (self.calibrate_only, self.mode) {
            (true, _) => Vec::new(),
            (_, Modes::Both) => vec![Mode::Legacy, Mode::Resilient],
            (_, Modes::Legacy) => vec![Mode::Legacy],
            (_, Modes::Resilient) => vec![Mode::Resilient],
        }
    }
}

/// What the calibration measured and chose.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Calibration {
    /// 200s within 3 s per second, closed loop, warm caches, healthy plan.
    #[serde(deserialize_with = "nan_if_null")]
    pub healthy_capacity_rps: f64,
    /// The same with the stale plan (after the plan flip).
    #[serde(deserialize_with = "nan_if_null")]
    pub stale_capacity_rps: f64,
    /// The healthy probe's slowest and fastest second (goodput per second), rps.
    #[serde(default)]
    pub healthy_per_second: Option<[f64; 2]>,
    /// The stale probe's slowest and fastest second, rps.
    #[serde(default)]
    pub stale_per_second: Option<[f64; 2]>,
    /// The probes' goodput, second by second (the healthy probe's, then the stale one's): what
    /// the capacities above were computed from.
    #[serde(default)]
    pub healthy_probe_goodput: Vec<u64>,
    #[serde(default)]
    pub stale_probe_goodput: Vec<u64>,
    /// Hot candidate lookups per second PostgreSQL answered during the stale probe (every
    /// entity-service's `entity_db_query_duration_seconds_count{query="candidate"}`, inside the
    /// seconds its goodput is counted over): the stale database's capacity in the unit the plan flip makes dear, which
    /// no cache state changes (a document's lookups do: cold caches need more per document).
    #[serde(default)]
    pub stale_lookups_rps: Option<f64>,
    #[serde(deserialize_with = "nan_if_null")]
    pub stale_over_healthy: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub stale_utilisation: f64,
    /// The replay's rate.
    pub rate: f64,
    /// `rate / healthy capacity`: how much of the healthy lab the replay's load uses.
    #[serde(deserialize_with = "nan_if_null")]
    pub healthy_utilisation: f64,
    pub healthy_utilisation_ok: bool,
    /// Largest orchestrator RSS at the end of the warm-up (steady, caches warm), MB.
    pub steady_rss_mb: Option<f64>,
    /// The memory limit applied to every orchestrator, bytes.
    pub memory_limit_bytes: Option<u64>,
    /// Whether the backfill (populate) ran during the calibration (false: it had run before).
    pub backfill_ran: bool,
    pub seconds: f64,
    /// What a reader must know about how it was chosen (user overrides included).
    pub notes: Vec<String>,
}

#[derive(Serialize, serde::Deserialize)]
pub struct ModeReport {
    pub mode: Mode,
    phases: Vec<engine::PhaseReport>,
    pub steps: Vec<Verdict>,
    pub consistency: Vec<report::Check>,
    actions: Vec<engine::ActionRun>,
    load_sent: u64,
    load_by_status: BTreeMap<String, u64>,
    /// How far behind its schedule the load generator sent (p99, max; ms): absent in a summary
    /// from before it was measured.
    #[serde(default)]
    load_dispatch_lag_ms: Option<(f64, f64)>,
    /// The load generator's per-second samples (the charts' offered load and goodput).
    load_per_second: Vec<lab_load::SecondSample>,
    /// Goodput while the plan is stale over what the stale database could serve of that load
    /// ([`fix_quality`]) — 1 is a perfect client.
    pub fix_quality: Option<f64>,
}

/// `summary.json` of one replay (beside its `run` header): everything its `replay.md` and
/// `report.html` are drawn from ([`doc`]).
#[derive(Serialize, serde::Deserialize)]
pub struct Summary {
    pub scenario: Scenario,
    pub calibration: Calibration,
    pub time_scale: f64,
    pub modes: Vec<ModeReport>,
}

/// A fresh lab of `args.lab`'s shape (any lab still up is stopped first).
pub(super) async fn fresh_lab(args: &ReplayArgs, g: &Globals) -> anyhow::Result<()> {
    lab_native::down(&g.state_dir).await?;
    lab_native::up(&args.lab, &g.database_url, &g.redis_url, &g.state_dir).await
}

/// What a closed-loop probe measured over its last seconds: goodput per second, its mean and
/// its slowest and fastest second.
#[derive(Debug, Clone)]
pub(super) struct Probe {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Goodput of each second of the window.
    pub good: Vec<u64>,
}

impl Probe {
    /// The probe of `per_second`'s seconds in `[from, to)` (a second with no sample: 0 good).
    fn of(per_second: &[lab_load::SecondSample], from: u64, to: u64) -> Probe {
        let good: Vec<u64> = (from..to.max(from + 1))
            .map(|sec| {
                per_second
                    .iter()
                    .find(|s| s.second == sec)
                    .map_or(0, |s| s.good)
            })
            .collect();
        Probe {
            mean: good.iter().sum::<u64>() as f64 / good.len() as f64,
            min: good.iter().copied().min().unwrap_or(0) as f64,
            max: good.iter().copied().max().unwrap_or(0) as f64,
            good,
        }
    }
}

/// A closed-loop run of `seconds`; its goodput per second over the last `tail` seconds.
pub(super) async fn closed_loop(
    args: &ReplayArgs,
    g: &Globals,
    keys: &[ApiKeyRecord],
    seconds: u64,
    tail: u64,
    seed: u64,
) -> anyhow::Result<(Probe, lab_load::LoadReport)> {
    let la = LoadArgs::stream(
        &format!("http://127.0.0.1:{}", args.lab.gateway_port),
        1.0,
        seconds,
        TenantMix::Size,
        seed,
    );
    let source = DocSource::open(Docs::Stream, &g.data_dir, TenantMix::Size)?;
    let bar = crate::progress::countdown(
        seconds,
        &format!("closed loop, {} clients", args.probe_concurrency),
    );
    let r = lab_load::run_closed(&la, args.probe_concurrency, keys.to_vec(), source).await;
    bar.finish_and_clear();
    let r = r?;
    let probe = Probe::of(&r.per_second, seconds.saturating_sub(tail), seconds);
    Ok((probe, r))
}

/// Every running `binary` replica's /metrics text, or `None` if the lab's state or any
/// replica could not be read.
async fn metrics_of(g: &Globals, binary: &str) -> Option<Vec<String>> {
    let state = lab_native::supervise::read_state(&g.state_dir).ok()??;
    let http = crate::scrape::client();
    let mut texts = Vec::new();
    for p in state.procs.iter().filter(|p| p.binary == binary) {
        let text = http
            .get(format!("http://127.0.0.1:{}/metrics", p.admin_port))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        texts.push(text);
    }
    Some(texts)
}

/// The largest orchestrator RSS of the running lab, MB.
async fn orchestrator_rss_mb(g: &Globals) -> Option<f64> {
    metrics_of(g, "orchestrator")
        .await?
        .iter()
        .fold(None, |max, text| {
            let v = lab_core::exposition::samples(text)
                .find(|s| s.name == "process_resident_memory_bytes")
                .map(|s| s.value / 1e6);
            match (max, v) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }
        })
}

/// Hot candidate lookups answered so far, summed over the running entity-services (`None`
/// unless every one was read and one reported them).
async fn candidate_lookups(g: &Globals) -> Option<f64> {
    let texts = metrics_of(g, "entity-service").await?;
    let found: Vec<f64> = texts
        .iter()
        .flat_map(|text| {
            lab_core::exposition::samples(text)
                .filter(|s| {
                    s.name == "entity_db_query_duration_seconds_count"
                        && lab_core::exposition::label(s.labels, "query") == Some("candidate")
                })
                .map(|s| s.value)
                .collect::<Vec<_>>()
        })
        .collect();
    (!found.is_empty()).then(|| found.iter().sum())
}

async fn set_resilient(g: &Globals) -> anyhow::Result<()> {
    let store = lab_flags::Store::new(&g.redis_url)?;
    store.reset().await?;
    store.set("client.mode", "resilient").await?;
    // The flag reaches every replica within its watch (pub/sub, ≤ 5 s): give it a moment.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    Ok(())
}

/// Step 1.
/// The 03:00 backfill's first step, unless an earlier run already populated `locale`; whether
/// it ran.
async fn populate_if_needed(g: &Globals, log: &Path) -> anyhow::Result<bool> {
    let client = lab_db::inspect::connect(&g.database_url).await?;
    let populated = lab_db::inspect::table_status(&client)
        .await?
        .locale_null_frac
        .is_some_and(|f| f < 0.9);
    if !populated {
        println!("  the backfill (03:00): populating locale, autovacuum off");
        act(
            g,
            Action::Backfill(Job::Backfill(Some(Step::Populate))),
            log,
        )
        .await?;
    }
    Ok(!populated)
}

/// The replay's rate from the capacities measured: `stale_utilisation` × the stale capacity, the
/// healthy lab's utilisation at it, whether that stays inside the postmortem's steady state,
/// and what a reader must know about it.
fn operating_point(
    stale_utilisation: f64,
    healthy: f64,
    stale: f64,
) -> (f64, f64, bool, Vec<String>) {
    let rate = (stale_utilisation * stale).max(1.0);
    let healthy_utilisation = rate / healthy;
    let mut notes = vec![format!(
        "rate = {:.2} × stale capacity {stale:.0} rps = {rate:.0} rps",
        stale_utilisation
    )];
    let ok = healthy_utilisation <= HEALTHY_UTILISATION_MAX;
    if !ok {
        notes.push(format!(
            "the healthy lab runs at {:.0}% of its capacity at this rate — above the {:.0}% the \
             postmortem's steady state allows: the plan flip costs this machine too little \
             ({:.2}x) to leave the healthy lab comfortably inside capacity",
            100.0 * healthy_utilisation,
            100.0 * HEALTHY_UTILISATION_MAX,
            stale / healthy
        ));
    }
    (rate, healthy_utilisation, ok, notes)
}

pub(super) async fn calibrate(
    args: &ReplayArgs,
    g: &Globals,
    keys: &[ApiKeyRecord],
    out: &Path,
) -> anyhow::Result<Calibration> {
    let started = Instant::now();
    let log = out.join("calibration.log");
    println!(
        "calibration: fresh lab, resilient mode, closed loop at {} clients",
        args.probe_concurrency
    );
    // Flags first: a lab boots with what the store holds (the boot warm-up included), and the
    // store still holds the previous run's flags.
    set_resilient(g).await?;
    fresh_lab(args, g).await?;
    let (healthy_probe, _) = closed_loop(
        args,
        g,
        keys,
        args.warmup_seconds,
        args.probe_seconds.min(args.warmup_seconds),
        args.seed.wrapping_add(1000),
    )
    .await?;
    let healthy = healthy_probe.mean;
    let steady_rss_mb = orchestrator_rss_mb(g).await;
    println!("  healthy capacity: {healthy:.0} rps (warm caches); steady orchestrator RSS {steady_rss_mb:?} MB");
    let backfill_ran = populate_if_needed(g, &log).await?;
    println!("  the plan flip (09:41): backfill --only invalidate");
    act(g, Action::INVALIDATE, &log).await?;
    // The probe's goodput counts its last `stale_probe()` seconds, after a 2 s lead-in; its
    // lookups are counted inside the same stretch, from two scrapes made while the load runs
    // (one second short of its end: the load starts after its document source opens), and
    // divided by the time between them.
    const LEAD: u64 = 2;
    let window = args.stale_probe();
    let lookups = async {
        tokio::time::sleep(Duration::from_secs(LEAD)).await;
        let a = candidate_lookups(g).await?;
        let t = Instant::now();
        tokio::time::sleep(Duration::from_secs(window.saturating_sub(1).max(1))).await;
        let b = candidate_lookups(g).await?;
        // A replica restarted in between counts from 0 again: not measured.
        (b >= a).then(|| (b - a) / t.elapsed().as_secs_f64())
    };
    let (probe, stale_lookups_rps) = tokio::join!(
        closed_loop(
            args,
            g,
            keys,
            window + LEAD,
            window,
            args.seed.wrapping_add(2000),
        ),
        lookups
    );
    let (stale_probe, _) = probe?;
    let stale = stale_probe.mean;
    println!(
        "  stale capacity: {stale:.0} rps; {} hot lookups/s",
        stale_lookups_rps.map_or("not measured".into(), |v| format!("{v:.0}"))
    );
    act(g, Action::ANALYZE, &log).await?;
    lab_native::down(&g.state_dir).await?;
    anyhow::ensure!(
        healthy > 0.0 && stale > 0.0,
        "the calibration measured no goodput (healthy {healthy:.1}, stale {stale:.1} rps): is the \
         lab seeded (labctl seed) and answering? See {}",
        log.display()
    );
    let (rate, healthy_utilisation, ok, notes) =
        operating_point(args.stale_utilisation, healthy, stale);
    let memory_limit_bytes = match args.memory_limit.as_deref() {
        Some("none") => None,
        Some(s) => Some(lab_native::cgroup::parse_size(s)?),
        None => steady_rss_mb.map(|mb| (mb * 1e6 * POSTMORTEM_LIMIT_RATIO) as u64),
    };
    Ok(Calibration {
        healthy_capacity_rps: healthy,
        stale_capacity_rps: stale,
        healthy_per_second: Some([healthy_probe.min, healthy_probe.max]),
        stale_per_second: Some([stale_probe.min, stale_probe.max]),
        healthy_probe_goodput: healthy_probe.good,
        stale_probe_goodput: stale_probe.good,
        stale_lookups_rps,
        stale_over_healthy: stale / healthy,
        stale_utilisation: args.stale_utilisation,
        rate,
        healthy_utilisation,
        healthy_utilisation_ok: ok,
        steady_rss_mb,
        memory_limit_bytes,
        backfill_ran,
        seconds: started.elapsed().as_secs_f64(),
        notes,
    })
}

/// The postmortem's Performance Comparison (its words and numbers, quoted) by report row:
/// before (steady), during the incident (10:15 peak), after the fix.
const POSTMORTEM_TABLE: &[(&str, &str, &str, &str)] = &[
    ("gateway_p50_ms", "96 ms", "2,410 ms", "91 ms"),
    ("gateway_p95_ms", "240 ms", "3,000 ms (clipped)", "218 ms"),
    ("gateway_p99_ms", "480 ms", "3,000 ms (clipped)", "390 ms"),
    ("entity_p99_ms", "120 ms", "6,900 ms", "130 ms"),
    ("gateway_rps", "900", "640", "940"),
    // The postmortem's inbound and amplification figures are its callers' attempts (its alert:
    // `entity_requests_total / gateway_requests_total`); the callee's own arrival count has no
    // figure there.
    ("entity_attempted_rps", "950", "8,100 attempted", "970"),
    ("entity_served_rps", "—", "1,430 served", "—"),
    (
        "amplification_attempted",
        "1.0×",
        "9.0×",
        "1.0× steady / 1.2× max",
    ),
    ("abandoned_pct", "0.3%", "71%", "0.4%"),
    ("error_5xx_pct", "0.04%", "34%", "0.02%"),
    (
        "orchestrator_cpu_cores",
        "0.9 / 2 cores",
        "1.98 (saturated)",
        "0.8",
    ),
    (
        "orchestrator_rss_mb_max",
        "380 MB",
        "3.8 GB (OOMKilled ×7)",
        "410 MB",
    ),
    ("orchestrator_tasks_max", "240 goroutines", "4,180", "260"),
    ("db_connections_max", "61 / 200", "200 / 200", "58"),
    ("orchestrator_replicas_max", "24", "60 (thrashing)", "24"),
];

/// The replay's report, from its summary alone (`labctl report` draws it again).
pub fn doc(s: &Summary) -> Doc {
    let (sc, cal, modes) = (&s.scenario, &s.calibration, &s.modes[..]);
    let mut d = Doc::new(format!(
        "Replay: {} — the postmortem's morning from the real trigger",
        sc.name
    ));
    d.para(sc.summary.trim_end());
    calibration_doc(&mut d, cal);
    timeline_doc(&mut d, sc, s.time_scale, modes);
    comparison_doc(&mut d, sc, modes);
    fix_doc(&mut d, cal, modes);
    database_doc(&mut d, sc, cal, modes);
    phases_doc(&mut d, sc, cal, modes);
    d
}

/// How the replay's rate was chosen.
fn calibration_doc(d: &mut Doc, cal: &Calibration) {
    let mut t = Table::new(&["", ">"]);
    for (what, value) in [
        (
            "healthy capacity (closed loop, warm)",
            measured(cal.healthy_capacity_rps, |v| format!("{v:.0} rps")),
        ),
        (
            "stale-plan capacity",
            measured(cal.stale_capacity_rps, |v| {
                format!("{v:.0} rps ({:.2}× healthy)", cal.stale_over_healthy)
            }),
        ),
        ("replay rate", format!("{:.0} rps", cal.rate)),
        (
            "healthy utilisation at that rate",
            measured(cal.healthy_utilisation, |u| {
                format!(
                    "{:.0}%{}",
                    100.0 * u,
                    if cal.healthy_utilisation_ok {
                        ""
                    } else {
                        " (**above 60%**)"
                    }
                )
            }),
        ),
        (
            "steady orchestrator RSS",
            cal.steady_rss_mb
                .map_or("—".into(), |v| format!("{v:.0} MB")),
        ),
        (
            "orchestrator memory limit",
            cal.memory_limit_bytes
                .map_or("none".into(), |b| format!("{} MiB", b >> 20)),
        ),
        (
            "backfill run during calibration",
            if cal.backfill_ran {
                "yes"
            } else {
                "no (already populated)"
            }
            .into(),
        ),
        ("calibration time", format!("{:.0} s", cal.seconds)),
    ] {
        t.row(vec![what.into(), value.into()]);
        // Measured since issue 27's database section; older summaries have no figure (and
        // their reports no row).
        if let (true, Some(v)) = (what == "stale-plan capacity", cal.stale_lookups_rps) {
            t.row(vec![
                "stale-plan hot lookups (the same probe)".into(),
                format!("{v:.0} per second").into(),
            ]);
        }
    }
    d.h2("Calibration").table(t).list(cal.notes.clone());
}

/// `v` as `show` puts it, or "not measured" (`--rate` skips the calibration: no capacity).
fn measured(v: f64, show: impl Fn(f64) -> String) -> String {
    if v.is_finite() {
        show(v)
    } else {
        "not measured".into()
    }
}

/// The postmortem's steps, one row each: per mode the checks measured and the verdict.
fn timeline_doc(d: &mut Doc, sc: &Scenario, time_scale: f64, modes: &[ModeReport]) {
    let mut head = vec!["time".to_string(), "step".into(), "the postmortem".into()];
    for m in modes {
        head.push(format!("{} (measured)", m.mode.variant()));
        head.push(format!("{} verdict", m.mode.variant()));
    }
    let mut t = Table::new(&head);
    let mut reproduced: BTreeMap<Mode, [usize; 3]> = BTreeMap::new();
    for p in &sc.phases {
        let (time, obs) = p
            .postmortem
            .as_ref()
            .map_or(("", ""), |pm| (pm.time.as_str(), pm.observation.as_str()));
        let mut row = vec![time.into(), p.name.as_str().into(), obs.into()];
        for m in modes {
            match m.steps.iter().find(|s| s.phase == p.name) {
                Some(s) => {
                    reproduced.entry(m.mode).or_default()[match s.outcome {
                        Outcome::Reproduced => 0,
                        Outcome::NotReproduced => 1,
                        Outcome::NotMeasured => 2,
                    }] += 1;
                    row.push(Cell::checks(s));
                    row.push(Cell::step(s, m.mode.is_fix()));
                }
                None => row.extend(["—".into(), "—".into()]),
            }
        }
        t.row(row);
    }
    d.h2(format!(
        "The timeline, step by step (time scale {time_scale}×)"
    ))
    .table(t)
    .list(
        reproduced
            .iter()
            .map(|(mode, [ok, no, unmeasured])| {
                format!(
                    "{}: {ok} of {} steps {}; {no} {}; {unmeasured} not measured (a \
                         precondition failed or a value was missing)",
                    mode.variant(),
                    ok + no + unmeasured,
                    Outcome::Reproduced.words(mode.is_fix()),
                    Outcome::NotReproduced.words(mode.is_fix()),
                )
            })
            .collect(),
    );
}

/// The postmortem's Performance Comparison, measured: before, peak and after per mode.
fn comparison_doc(d: &mut Doc, sc: &Scenario, modes: &[ModeReport]) {
    let peak = |m: &ModeReport| {
        let summaries: Vec<_> = m.phases.iter().map(|p| &p.summary).collect();
        sc.peak_phase(&summaries)
    };
    let named = modes.first().is_some_and(|m| peak(m).1);
    d.h2("Performance Comparison (the postmortem's table, measured)")
        .para(format!(
            "Before = the steady phase; peak = {}; after fix = the last phase.",
            if named {
                "the phase the scenario names as the postmortem's peak (its `peak`)"
            } else {
                "the phase with the highest 5xx rate (the first of tied ones)"
            }
        ));
    let mut head: Vec<String> = [
        "Metric",
        ">postmortem before",
        ">postmortem peak",
        ">postmortem after",
    ]
    .map(String::from)
    .into();
    for m in modes {
        let pk = &m.phases[peak(m).0].name;
        let v = m.mode.variant();
        head.extend([
            format!(">{v} before"),
            format!(">{v} peak ({pk})"),
            format!(">{v} after"),
        ]);
    }
    let mut t = Table::new(&head);
    for q in lab_report::quantities::in_tables() {
        let key = q.id;
        let any = modes
            .iter()
            .any(|m| m.phases.iter().any(|p| p.summary.contains_key(key)));
        if !any {
            continue;
        }
        let pm = POSTMORTEM_TABLE.iter().find(|r| r.0 == key);
        let mut row: Vec<Cell> = vec![
            q.label.into(),
            pm.map_or("", |r| r.1).into(),
            pm.map_or("", |r| r.2).into(),
            pm.map_or("", |r| r.3).into(),
        ];
        for m in modes {
            let last = m.phases.len() - 1;
            for i in [0, peak(m).0, last] {
                row.push(q.unit.fmt(m.phases[i].summary.get(key).copied()).into());
            }
        }
        t.row(row);
    }
    d.table(t);
}

/// The fix in one number, per mode.
fn fix_doc(d: &mut Doc, cal: &Calibration, modes: &[ModeReport]) {
    d.h2("How good is the fix, in one number").para(
        "Goodput while the plan is stale (from the plan flip to ANALYZE) over what the stale \
         database could serve of the offered load (`Σ goodput / Σ min(offered, stale capacity)`, \
         by phase second): the only loss a perfect client avoids is work nobody waits for, so a \
         perfect client scores 1 — unless something else (a rollback's cold caches) cuts \
         capacity below the calibrated one.",
    );
    d.list(
        modes
            .iter()
            .map(|m| {
                format!(
                    "{}: {}",
                    m.mode.variant(),
                    m.fix_quality.map_or(
                        if cal.stale_capacity_rps.is_finite() {
                            "not measured".to_string()
                        } else {
                            "not measured (no calibration: --rate gives no stale capacity)"
                                .to_string()
                        },
                        |q| format!("{q:.2}")
                    )
                )
            })
            .collect(),
    );
}

/// The phases from the one that flips the plan up to (not including) the one that cures it:
/// the stale window of [`fix_quality`], by index.
fn stale_phases(sc: &Scenario) -> Option<std::ops::Range<usize>> {
    let has = |p: &scenario::Phase, f: fn(&Action) -> bool| p.run.iter().any(|s| f(&s.action));
    let from = sc
        .phases
        .iter()
        .position(|p| has(p, Action::invalidates_plans))?;
    let to = sc.phases.iter().position(|p| has(p, Action::cures_plans))?;
    (from < to).then_some(from..to)
}

/// A phase's hot lookups per second as a share of the stale probe's, if both were measured.
fn stale_database_share(
    summary: &lab_report::summary::PhaseSummary,
    cal: &Calibration,
) -> Option<f64> {
    let lookups = summary.get("candidate_lookups_rps").copied()?;
    let capacity = cal.stale_lookups_rps.filter(|c| *c > 0.0)?;
    lookups.is_finite().then(|| lookups / capacity)
}

/// What each client did with the stale database, step by step (issue 27: "serves everything
/// the system can serve"). Goodput per document cannot say it: a rollback's cold caches make
/// each document need more lookups, so the documents the stale database can serve fall below the
/// calibrated rate whatever the client does. Lookups per second can: the stale probe measured how
/// many the stale plan answers per second, and no cache state changes that.
fn database_doc(d: &mut Doc, sc: &Scenario, cal: &Calibration, modes: &[ModeReport]) {
    let Some(stale) = stale_phases(sc) else {
        return;
    };
    // Runs from before the quantity existed have no lookups to show: no section.
    let measured = modes.iter().any(|m| {
        m.phases.get(stale.clone()).is_some_and(|ps| {
            ps.iter()
                .any(|p| p.summary.contains_key("candidate_lookups_rps"))
        })
    });
    if !measured {
        return;
    }
    d.h2("What each client did with the stale database")
        .para(format!(
        "Hot candidate lookups per second (PostgreSQL, all entity-services) in each step while the \
         plan is stale, as a share of what the stale plan answered per second in the \
         calibration's probe ({}). A client that serves everything the system can serve keeps \
         that share near 100% whenever documents wait, with no work for callers already gone \
         (abandoned ≈ 0); the documents it serves then fall only with the cache hit rate \
         (each miss is a lookup). A share well below 100% while requests fail is capacity the \
         client left unused; work after the caller had gone is capacity spent on nobody. \
         Each step over the same window as the tables above (a step judged after its commands, \
         from their end). A lookup counts when PostgreSQL answered it: one cancelled by its \
         statement timeout or failed is work the database did and this share leaves out.",
        cal.stale_lookups_rps
            .map_or("not measured".into(), |v| format!("{v:.0} per second"))
    ));
    let mut head = vec!["step".to_string()];
    for m in modes {
        let v = m.mode.variant();
        head.extend([
            format!(">{v}: hot lookups/s (of stale capacity)"),
            format!(">{v}: abandoned"),
            format!(">{v}: cache hits"),
            format!(">{v}: goodput"),
            format!(">{v}: 5xx"),
        ]);
    }
    let mut t = Table::new(&head);
    let pct = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.1}%"));
    for i in stale {
        let mut row: Vec<Cell> = vec![sc.phases[i].name.clone().into()];
        for m in modes {
            let Some(p) = m.phases.get(i) else {
                row.extend((0..5).map(|_| Cell::from("—")));
                continue;
            };
            let get = |k: &str| p.summary.get(k).copied().filter(|v| v.is_finite());
            row.push(
                match (
                    get("candidate_lookups_rps"),
                    stale_database_share(&p.summary, cal),
                ) {
                    (Some(l), Some(s)) => format!("{l:.0} ({:.0}%)", 100.0 * s),
                    (Some(l), None) => format!("{l:.0}"),
                    _ => "—".into(),
                }
                .into(),
            );
            row.push(pct(get("abandoned_pct")).into());
            row.push(pct(get("cache_hit_pct")).into());
            row.push(pct(get("goodput_pct")).into());
            row.push(pct(get("error_5xx_pct")).into());
        }
        t.row(row);
    }
    d.table(t);
}

/// Every phase of every mode: the full table, the 5xx by origin, the load and the actions.
fn phases_doc(d: &mut Doc, sc: &Scenario, cal: &Calibration, modes: &[ModeReport]) {
    for m in modes {
        let names: Vec<(String, u64)> = m
            .phases
            .iter()
            .map(|p| (p.name.clone(), p.seconds))
            .collect();
        let per_phase: Vec<_> = m
            .phases
            .iter()
            .map(|p| p.errors_5xx_by_origin.clone())
            .collect();
        d.h2(format!("{} mode: every phase", m.mode.variant()));
        let summaries: Vec<_> = m.phases.iter().map(|p| p.summary.clone()).collect();
        report::phases_doc(
            d,
            &format!(
                "{} — {} mode at {:.0} rps",
                sc.name,
                m.mode.variant(),
                cal.rate
            ),
            &names,
            &summaries,
        );
        report::origins_doc(d, &names, &per_phase, &m.consistency);
        d.para(format!(
            "Load: {} sent, by status {:?}{}.",
            m.load_sent,
            m.load_by_status,
            m.load_dispatch_lag_ms
                .map_or(String::new(), |(p99, max)| format!(
                    "; the generator's dispatch lag (behind its schedule) p99 {p99:.0} ms, max \
                 {max:.0} ms"
                ))
        ))
        .para(format!(
            "Actions: {}",
            m.actions
                .iter()
                .map(|a| format!(
                    "`labctl {}` at {:.0} s ({:.1} s{})",
                    a.command,
                    a.started_at,
                    a.seconds,
                    if a.ok { "" } else { ", FAILED" }
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
}

/// Goodput while the plan is stale — from the phase that flips it to the one that runs
/// ANALYZE — over what the stale database could serve of the offered load, second by second
/// of the load's record: `Σ goodput / Σ min(offered, stale capacity)`. A perfect client loses
/// only work nobody waits for, so it scores 1. Read from the seconds, not from the phases'
/// summaries: a phase judged `after-run` summarizes only its seconds after its commands, and
/// the whole phase was stale.
fn fix_quality(
    sc: &Scenario,
    phases: &[engine::PhaseReport],
    per_second: &[lab_load::SecondSample],
    stale_capacity: f64,
) -> Option<f64> {
    // Without a measured stale capacity (`--rate` skips the calibration) there is no "what the
    // stale database could serve": not measured. (`f64::min` ignores a NaN, which silently made
    // this goodput ÷ offered — issue 24.)
    if !(stale_capacity.is_finite() && stale_capacity > 0.0) {
        return None;
    }
    let stale = stale_phases(sc)?;
    let (start, end) = (phases.get(stale.start)?.start, phases.get(stale.end)?.start);
    let (mut good, mut possible) = (0.0, 0.0);
    for s in per_second
        .iter()
        .filter(|s| (start..end).contains(&(s.second as f64)))
    {
        good += s.good as f64;
        possible += (s.sent as f64).min(stale_capacity);
    }
    (possible > 0.0 && possible.is_finite()).then(|| good / possible)
}

/// One replay — the calibration (unless `--rate`) and every mode on a fresh lab — reported in
/// `out` (`replay.md`, `summary.json`, `report.html`, each mode's series).
pub struct Replayed {
    pub calibration: Calibration,
    pub modes: Vec<ModeReport>,
}

/// `labctl replay`.
pub async fn run(args: &ReplayArgs, g: &Globals, keys: Vec<ApiKeyRecord>) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.time_scale > 0.0 && args.time_scale <= 10.0,
        "--time-scale must be in (0, 10]"
    );
    anyhow::ensure!(
        args.stale_utilisation > 0.0 && args.stale_utilisation <= 3.0,
        "--stale-utilisation must be in (0, 3]"
    );
    anyhow::ensure!(
        (1..=20).contains(&args.repeat),
        "--repeat must be in 1..=20 (each repetition is a calibration and a replay per mode)"
    );
    if let Some(rate) = args.rate {
        anyhow::ensure!(rate > 0.0, "--rate must be positive");
    }
    let sc = scenario::load(&args.scenario)?;
    let out = args.out.clone().unwrap_or_else(|| {
        g.state_dir
            .join("reports")
            .join(format!("replay-{}", now_s()))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let started = Instant::now();
    if args.repeat == 1 {
        let r = replay_once(args, g, &keys, &sc, &out).await?;
        if args.calibrate_only {
            println!("calibration: {}", out.join("calibration.json").display());
            return Ok(());
        }
        println!(
            "replay done in {:.1} min; report: {} ({} with the charts)",
            started.elapsed().as_secs_f64() / 60.0,
            out.join("replay.md").display(),
            out.join("report.html").display()
        );
        for m in &r.modes {
            crate::fail_on_inconsistency(&m.consistency, &out)
                .with_context(|| format!("{} mode", m.mode.variant()))?;
        }
        return Ok(());
    }
    let mut reps = Vec::new();
    for i in 1..=args.repeat {
        println!("\n=== repetition {i} of {} ===", args.repeat);
        let dir = out.join(format!("rep-{i}"));
        std::fs::create_dir_all(&dir)?;
        let r = replay_once(args, g, &keys, &sc, &dir).await;
        if let Err(e) = &r {
            // Recorded (its steps are "not measured"), and the others still run: a repetition
            // that failed is a result of the repeat, not a reason to lose the rest.
            eprintln!("repetition {i} failed: {e:#}");
            let _ = lab_native::down(&g.state_dir).await;
        }
        reps.push(r.map_err(|e| format!("{e:#}")));
    }
    let report = crate::repeats::Repeats::of(&sc, args, &reps);
    let doc = report.doc();
    let md = doc.markdown();
    std::fs::write(out.join("replay.md"), &md)?;
    std::fs::write(out.join("report.html"), doc.html())?;
    std::fs::write(
        out.join("repeats.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    println!("\n{md}");
    println!(
        "replay ×{} done in {:.1} min; report: {} (each repetition's own in rep-N/)",
        args.repeat,
        started.elapsed().as_secs_f64() / 60.0,
        out.join("replay.md").display()
    );
    report.ensure_complete()
}

/// Step 1 and 2 once, and the report of them in `out`. Fails on an operation that failed;
/// counts that do not add up are returned for the caller to judge (after the report).
/// A fresh lab for one run: booted in `mode` with `flags` — set in the store first, since a
/// lab boots with what the store holds, and it still holds the previous run's (the
/// calibration's boot warm-up; issue 24) — its orchestrators' memory limit, then the same
/// closed-loop warm-up.
pub(super) async fn fresh_warm_lab(
    args: &ReplayArgs,
    g: &Globals,
    keys: &[ApiKeyRecord],
    (mode, flags): (Mode, &[(String, String)]),
    memory_limit: Option<u64>,
    log: &Path,
) -> anyhow::Result<()> {
    let store = lab_flags::Store::new(&g.redis_url)?;
    store.reset().await?;
    store.set("client.mode", mode.variant()).await?;
    for (f, v) in flags {
        store.set(f, v).await?;
    }
    fresh_lab(args, g).await?;
    // The limit before the warm-up: memory a process holds when it enters its cgroup stays
    // charged elsewhere (see cgroup.rs), and the cache is most of it.
    if let Some(b) = memory_limit {
        act(g, Action::LimitMemory(Service::Orchestrator, Some(b)), log).await?;
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    closed_loop(
        args,
        g,
        keys,
        args.warmup_seconds,
        1,
        args.seed.wrapping_add(3000),
    )
    .await?;
    Ok(())
}

/// The calibration a `--rate` stands for: none measured, the rate as given.
fn given_rate(args: &ReplayArgs, rate: f64) -> anyhow::Result<Calibration> {
    Ok(Calibration {
        healthy_capacity_rps: f64::NAN,
        stale_capacity_rps: f64::NAN,
        healthy_per_second: None,
        stale_per_second: None,
        healthy_probe_goodput: Vec::new(),
        stale_probe_goodput: Vec::new(),
        stale_lookups_rps: None,
        stale_over_healthy: f64::NAN,
        stale_utilisation: f64::NAN,
        rate,
        healthy_utilisation: f64::NAN,
        healthy_utilisation_ok: true,
        steady_rss_mb: None,
        memory_limit_bytes: match args.memory_limit.as_deref() {
            None | Some("none") => None,
            Some(s) => Some(lab_native::cgroup::parse_size(s)?),
        },
        backfill_ran: false,
        seconds: 0.0,
        notes: vec![format!("rate {rate} rps given with --rate: no calibration")],
    })
}

/// One mode of the replay: a fresh lab booted in that mode, its memory limit, a closed-loop
/// warm-up, the scenario at the calibrated rate, the lab down.
async fn replay_mode(
    args: &ReplayArgs,
    g: &Globals,
    keys: &[ApiKeyRecord],
    sc: &Scenario,
    cal: &Calibration,
    mode: Mode,
    out: &Path,
) -> anyhow::Result<ModeReport> {
    let dir = out.join(mode.variant());
    std::fs::create_dir_all(&dir)?;
    println!(
        "\n{} mode: fresh lab, {} s closed-loop warm-up",
        mode.variant(),
        args.warmup_seconds
    );
    fresh_warm_lab(
        args,
        g,
        keys,
        (mode, &[]),
        cal.memory_limit_bytes,
        &dir.join("actions.log"),
    )
    .await?;
    let run = engine::Run {
        scenario: sc,
        mode,
        rate: cal.rate,
        tenants: if sc.tenants == "uniform" {
            TenantMix::Uniform
        } else {
            TenantMix::Size
        },
        extra_flags: &[],
        gateway: format!("http://127.0.0.1:{}", args.lab.gateway_port),
        targets: TargetSource::Native(g.state_dir.clone()),
        seed: args.seed,
        out: dir.clone(),
        time_scale: args.time_scale,
    };
    let outcome: engine::Outcome = engine::execute(&run, g, keys.to_vec()).await?;
    lab_native::down(&g.state_dir).await?;
    let steps = sc.verdicts(mode.variant(), &outcome.phases);
    let fix_quality = fix_quality(
        sc,
        &outcome.phases,
        &outcome.load.per_second,
        cal.stale_capacity_rps,
    );
    // A mode whose counts do not add up fails the replay, but only after BOTH modes ran and
    // the report was written (it says so): bailing here skipped the other mode and wrote
    // nothing, under a message that said the report was written anyway.
    Ok(ModeReport {
        mode,
        phases: outcome.phases,
        steps,
        consistency: outcome.consistency,
        actions: outcome.actions,
        load_sent: outcome.load.sent,
        load_by_status: outcome.load.by_status.clone(),
        load_dispatch_lag_ms: Some((
            outcome.load.dispatch_lag_ms.p99,
            outcome.load.dispatch_lag_ms.max,
        )),
        load_per_second: outcome.load.per_second.clone(),
        fix_quality,
    })
}

async fn replay_once(
    args: &ReplayArgs,
    g: &Globals,
    keys: &[ApiKeyRecord],
    sc: &Scenario,
    out: &Path,
) -> anyhow::Result<Replayed> {
    let cal = match args.rate {
        Some(rate) => given_rate(args, rate)?,
        None => calibrate(args, g, keys, out).await?,
    };
    println!(
        "replay rate {:.0} rps (healthy capacity {:.0}, stale {:.0})",
        cal.rate, cal.healthy_capacity_rps, cal.stale_capacity_rps
    );
    if args.calibrate_only {
        std::fs::write(
            out.join("calibration.json"),
            serde_json::to_vec_pretty(&cal)?,
        )?;
        return Ok(Replayed {
            calibration: cal,
            modes: Vec::new(),
        });
    }
    let mut reports = Vec::new();
    for mode in args.modes() {
        reports.push(replay_mode(args, g, keys, sc, &cal, mode, out).await?);
    }
    if reports.is_empty() {
        bail!("no mode was replayed");
    }
    let mut header = lab_report::run::Header::new(lab_report::run::RunKind::Replay, &sc.name);
    for r in &reports {
        header = header
            .judged(r.mode.variant(), r.mode.is_fix(), &r.steps)
            .consistency(&r.consistency);
    }
    let body = Summary {
        scenario: sc.clone(),
        calibration: cal,
        time_scale: args.time_scale,
        modes: reports,
    };
    lab_report::run::write(out, &header, &body)?;
    let md = crate::report::draw(out)?;
    println!("\n{md}");
    Ok(Replayed {
        calibration: body.calibration,
        modes: body.modes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fix_in_one_number_is_not_measured_without_a_stale_capacity() {
        let y = "name: x\nsummary: s\ndescription: d\nrate: 10\nphases:\n\
          - {name: steady, seconds: 10}\n\
          - {name: stale, seconds: 10, run: [\"backfill --only invalidate\"]}\n\
          - {name: analyze, seconds: 10, run: [\"remediate analyze\"]}\n";
        let sc: Scenario = serde_norway::from_str(y).unwrap();
        let phase = |name: &str, start: f64| engine::PhaseReport {
            name: name.into(),
            seconds: 10,
            start,
            judged_from: None,
            summary: Default::default(),
            errors_5xx_by_origin: Default::default(),
        };
        let phases = [
            phase("steady", 0.0),
            phase("stale", 10.0),
            phase("analyze", 20.0),
        ];
        // 100 offered every second; 40 good while stale, all of them otherwise.
        let seconds: Vec<lab_load::SecondSample> = (0..30)
            .map(|second| lab_load::SecondSample {
                second,
                sent: 100,
                ok: 100,
                good: if (10..20).contains(&second) { 40 } else { 100 },
                errors: 0,
                p50_ms: 1.0,
                p99_ms: 1.0,
                lag_max_ms: 0.0,
            })
            .collect();
        assert_eq!(
            fix_quality(&sc, &phases, &seconds, 50.0),
            Some(0.8),
            "40 of the 50 it could serve, in the stale seconds only"
        );
        assert_eq!(
            fix_quality(&sc, &phases, &seconds, f64::NAN),
            None,
            "not 40 / 100"
        );
        assert_eq!(
            Outcome::NotReproduced.words(Mode::Legacy.is_fix()),
            "not reproduced"
        );
    }

    /// The stale database's use is read in hot lookups per second against the stale probe's,
    /// in the stale steps only, and "not measured" without a probe figure, never against 0.
    #[test]
    fn the_stale_database_is_read_in_lookups_against_the_probe_in_the_stale_steps_only() {
        let y = "name: x\nsummary: s\ndescription: d\nrate: 10\nphases:\n\
          - {name: steady, seconds: 10}\n\
          - {name: stale, seconds: 10, run: [\"backfill --only invalidate\"]}\n\
          - {name: rollback, seconds: 10}\n\
          - {name: analyze, seconds: 10, run: [\"remediate analyze\"]}\n";
        let sc: Scenario = serde_norway::from_str(y).unwrap();
        assert_eq!(stale_phases(&sc), Some(1..3));
        let phase = |name: &str, lookups: f64| engine::PhaseReport {
            name: name.into(),
            seconds: 10,
            start: 0.0,
            judged_from: None,
            summary: [
                ("candidate_lookups_rps".to_string(), lookups),
                ("abandoned_pct".to_string(), 0.5),
            ]
            .into(),
            errors_5xx_by_origin: Default::default(),
        };
        let mode = ModeReport {
            mode: Mode::Resilient,
            phases: vec![
                phase("steady", 111.0),
                phase("stale", 950.0),
                phase("rollback", 420.0),
                phase("analyze", 222.0),
            ],
            steps: Vec::new(),
            consistency: Vec::new(),
            actions: Vec::new(),
            load_sent: 0,
            load_by_status: Default::default(),
            load_dispatch_lag_ms: None,
            load_per_second: Vec::new(),
            fix_quality: None,
        };
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            replay: ReplayArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["replay"]).unwrap();
        let mut cal = given_rate(&cli.replay, 10.0).unwrap();
        assert_eq!(stale_database_share(&mode.phases[1].summary, &cal), None);
        cal.stale_lookups_rps = Some(0.0);
        assert_eq!(stale_database_share(&mode.phases[1].summary, &cal), None);
        cal.stale_lookups_rps = Some(1000.0);
        assert_eq!(
            stale_database_share(&mode.phases[1].summary, &cal),
            Some(0.95)
        );

        let mut d = Doc::new("t");
        database_doc(&mut d, &sc, &cal, &[mode]);
        let md = d.markdown();
        assert!(md.contains("| stale | 950 (95%) | 0.5% |"), "{md}");
        assert!(
            md.contains("\n|---|---:|"),
            "the step column reads left-aligned: {md}"
        );
        assert!(md.contains("| rollback | 420 (42%) |"), "{md}");
        assert!(
            !md.contains("| steady") && !md.contains("| analyze"),
            "{md}"
        );
    }
}
