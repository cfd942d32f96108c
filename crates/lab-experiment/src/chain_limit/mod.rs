//! `labctl chain-limit` (issues 17, 25, 29): the chain against its physical limit, in one run on
//! this machine. How many lookups a second PostgreSQL serves when nothing else runs (pgbench),
//! what a fresh lab costs idle, how many lookups the whole chain (gateway → orchestrator →
//! entity-service → PostgreSQL) gets through at its highest sustainable rate, the ratio, and
//! where the CPU goes (the whole machine by process from /proc, perf profiles of the hot path).
//!
//! - [`pgbench`]: pgbench's runs and its output, parsed (pgbench itself is the thin shell);
//! - [`lab`]: the fresh native lab, started in process, and what is measured of it;
//! - [`ladder`]: the open-loop steps (`lab_load`) and the choice of the maximum sustainable rate;
//! - [`cpu`]: CPU per process and thread from `/proc/<pid>/stat`;
//! - [`perf`], [`profile`]: `perf record` / `perf report` as subprocesses, their text parsed;
//! - [`summary`], [`report`], [`advice`]: `summary.json` and `chain-limit.md` drawn from it.
//!
//! Bounded: every load is open loop, time-bounded and sent to 127.0.0.1 only; the lab and
//! pgbench's scratch database are gone on every exit path. The caller holds the heavy lock
//! (scripts/chain-limit.sh takes it).

mod advice;
pub mod cpu;
mod lab;
pub mod ladder;
pub mod perf;
pub mod pgbench;
mod profile;
pub mod report;
pub mod summary;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use lab_native::UpArgs;
use lab_seed::ApiKeyRecord;

use crate::Globals;
use ladder::{Bound, StepPlan, Verdict};
use summary::{HotPlanLine, Meta, StepKind, StepRow, Summary};

/// The report's file name in a run directory.
pub const REPORT: &str = "chain-limit.md";

/// A run's knobs (labctl's flags, each with its `CHAIN_*` environment fallback).
#[derive(Debug, Clone)]
pub struct Config {
    pub rates: Vec<f64>,
    pub step_seconds: u64,
    pub warmup_rate: f64,
    pub warmup_seconds: u64,
    pub p99_ms: f64,
    pub ok_pct: f64,
    pub pgbench_clients: Vec<u32>,
    pub pgbench_seconds: u64,
    pub pgbench_scale: u32,
    pub pgbench_db: String,
    /// 0: no profile step.
    pub profile_seconds: u64,
    pub perf_hz: u32,
    pub hot_per_txn: usize,
    pub idle_settle_seconds: u64,
    pub idle_sample_seconds: u64,
    pub out: Option<PathBuf>,
    /// The lab's shape (`labctl up`'s flags).
    pub lab: UpArgs,
}

impl Config {
    fn bound(&self) -> Bound {
        Bound {
            p99_ms: self.p99_ms,
            ok_pct: self.ok_pct,
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.rates.is_empty(), "--rates: give at least one rate");
        anyhow::ensure!(
            self.rates.iter().all(|r| *r > 0.0 && *r <= 5_000.0),
            "--rates {:?}: each in (0, 5000] rps (lab_load's bound)",
            self.rates
        );
        anyhow::ensure!(
            self.step_seconds >= 5,
            "--step-seconds: at least 5 (the CPU snapshots need 1 s at each end)"
        );
        anyhow::ensure!(self.hot_per_txn >= 1, "--hot-per-txn: at least 1");
        anyhow::ensure!(
            !self.pgbench_clients.is_empty(),
            "--pgbench-clients: give at least one count"
        );
        anyhow::ensure!(self.pgbench_seconds >= 5, "--pgbench-seconds: at least 5");
        Ok(())
    }
}

/// Seconds since the epoch, fractional.
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `2026-12-01 20:31 UTC` of a Unix time (the civil calendar from days since the epoch).
pub fn utc_minute(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let (h, mi) = ((unix % 86_400) / 3_600, (unix % 3_600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02} UTC")
}

fn say(s: impl std::fmt::Display) {
    println!("[chain-limit] {s}");
}

/// Measure, write `summary.json` and `chain-limit.md` in the run directory, and return it.
pub async fn run(cfg: &Config, g: &Globals, keys: Vec<ApiKeyRecord>) -> anyhow::Result<PathBuf> {
    cfg.validate()?;
    lab::ensure_no_lab(&g.state_dir)?;
    ensure_tool("pgbench", "postgresql-client")?;
    let out = cfg.out.clone().unwrap_or_else(|| {
        g.state_dir
            .join("reports")
            .join(format!("chain-limit-{}", crate::now_s()))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    say(format!("output: {}", out.display()));
    let mut meta = meta(cfg, g, &out).await?;
    let plan = pgbench::Plan {
        database_url: &g.database_url,
        data_dir: &g.data_dir,
        scratch_db: &cfg.pgbench_db,
        scale: cfg.pgbench_scale,
        seconds: cfg.pgbench_seconds,
        clients: &cfg.pgbench_clients,
        hot_per_txn: cfg.hot_per_txn,
        dir: &out.join("pgbench"),
        cores: meta.cores,
    };
    let (pgbench, hot_params) = pgbench::run_all(&plan).await?;
    meta.hot_params = hot_params;
    say("fresh native lab, resilient mode");
    let lab = match lab::LabUnderTest::up(&cfg.lab, g, keys, meta.cores).await {
        Ok(lab) => lab,
        Err(e) => {
            let _ = lab_native::down(&g.state_dir).await;
            return Err(e.context("starting the lab"));
        }
    };
    let measured = interruptible(chain(cfg, &lab, &out)).await;
    let down = lab.down().await;
    let chain = measured?;
    down.context("stopping the lab")?;
    let summary = Summary {
        meta,
        pgbench,
        idle: Some(chain.idle),
        lab_processes: chain.processes,
        max_sustainable_rps: ladder::max_sustainable(chain.steps.iter()).map(|s| s.rate),
        steps: chain.steps,
        stopped_early: chain.stopped,
        profile: chain.profile,
    };
    summary.write(&out)?;
    let md = crate::report::draw(&out)?;
    println!("\n{md}");
    say(format!("report: {}", out.join(REPORT).display()));
    Ok(out)
}

/// `fut`, or an error when the operator presses Ctrl-C (the caller then cleans up).
async fn interruptible<T>(
    fut: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        r = fut => r,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted (Ctrl-C): cleaning up"),
    }
}

fn ensure_tool(tool: &str, package: &str) -> anyhow::Result<()> {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
    anyhow::ensure!(
        found,
        "{tool} not found: install it (Debian: apt-get install {package})"
    );
    Ok(())
}

/// What the chain part measured.
struct Chain {
    idle: cpu::CpuSplit,
    processes: std::collections::BTreeMap<String, u32>,
    steps: Vec<StepRow>,
    stopped: Option<String>,
    profile: Option<summary::Profile>,
}

async fn chain(cfg: &Config, lab: &lab::LabUnderTest, out: &Path) -> anyhow::Result<Chain> {
    say(format!(
        "idle lab: {} s to settle, then {} s sampled",
        cfg.idle_settle_seconds, cfg.idle_sample_seconds
    ));
    let idle = lab
        .idle(cfg.idle_settle_seconds, cfg.idle_sample_seconds)
        .await;
    let lab_total = report::lab_rows(&idle).iter().fold(0.0, |a, (_, v)| a + v);
    say(format!(
        "  idle: the lab {lab_total:.3} cores, the broker {:.3}, the machine {:.2} busy",
        idle.cores(cpu::BROKER),
        idle.busy_cores
    ));
    let mut steps = Vec::new();
    let mut seed = 0;
    let mut plan = |name: String, kind, rate, seconds| {
        seed += 1;
        StepPlan {
            name,
            kind,
            rate,
            seconds,
            seed,
        }
    };
    say(format!(
        "warm-up: {} rps for {} s (the orchestrators' caches fill)",
        cfg.warmup_rate, cfg.warmup_seconds
    ));
    let warm = plan(
        "warmup".into(),
        StepKind::Warmup,
        cfg.warmup_rate,
        cfg.warmup_seconds,
    );
    steps.push(step(lab, &warm, cfg.bound()).await?);
    let mut stopped = None;
    for &r in &cfg.rates {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let p = plan(
            format!("rate-{:05.0}", r),
            StepKind::Rate,
            r,
            cfg.step_seconds,
        );
        let row = step(lab, &p, cfg.bound()).await?;
        let far = ladder::judge(row.p99, row.ok_pct, cfg.bound()) == Verdict::Far;
        steps.push(row);
        if far {
            stopped = Some(format!("rate-{r:.0}"));
            break;
        }
    }
    let rate = ladder::max_sustainable(steps.iter()).map_or(cfg.rates[0], |s| s.rate);
    let profile_plan = plan(
        "profile".into(),
        StepKind::Profile,
        rate,
        cfg.profile_seconds + 10,
    );
    let profile = profile_step(cfg, lab, out, &profile_plan, &mut steps).await?;
    Ok(Chain {
        idle,
        processes: lab.processes(),
        steps,
        stopped,
        profile,
    })
}

async fn step(lab: &lab::LabUnderTest, plan: &StepPlan, bound: Bound) -> anyhow::Result<StepRow> {
    let (row, _) = ladder::run_step(lab, plan, bound, None).await?;
    say(format!(
        "  {} ({} rps, {} s): {} p99 {:.0} ms, 200s {:.2} %, {:.0} ok/s, by status {:?}",
        row.name,
        row.rate,
        row.seconds,
        match ladder::judge(row.p99, row.ok_pct, bound) {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Far => "far",
        },
        row.p99,
        row.ok_pct,
        row.ok_rps,
        row.by_status
    ));
    Ok(row)
}

/// The maximum rate again with perf on the hot path (skipped without perf or with 0 s).
async fn profile_step(
    cfg: &Config,
    lab: &lab::LabUnderTest,
    out: &Path,
    plan: &StepPlan,
    steps: &mut Vec<StepRow>,
) -> anyhow::Result<Option<summary::Profile>> {
    if cfg.profile_seconds == 0 || ensure_tool("perf", "linux-perf").is_err() {
        say("profile: skipped (perf not installed, or --profile-seconds 0)");
        return Ok(None);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    say(format!(
        "profile: {} rps for {} s, perf for {} s of it",
        plan.rate, plan.seconds, cfg.profile_seconds
    ));
    let profiler = profile::Profiler {
        lab,
        dir: out.join("profile"),
        hz: cfg.perf_hz,
        seconds: cfg.profile_seconds,
    };
    let (row, rec) = ladder::run_step(lab, plan, cfg.bound(), Some(&profiler)).await?;
    steps.push(row);
    let Some(rec) = rec else {
        return Ok(None);
    };
    let symbols = perf::symbols(&bin_dir(&cfg.lab)).await;
    Ok(Some(profile::read_back(&rec, symbols).await))
}

fn bin_dir(lab: &UpArgs) -> PathBuf {
    lab.bin_dir.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default()
    })
}

/// The machine, the knobs and the lab database's state before the run.
async fn meta(cfg: &Config, g: &Globals, out: &Path) -> anyhow::Result<Meta> {
    let client = lab_db::inspect::connect(&g.database_url).await?;
    let pg_version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    let lab_db = lab_db::database_name(&g.database_url)?;
    let hot_plan = match lab_db::inspect::status(&client, &lab_db, None).await {
        Ok(st) => Some(hot_plan_line(&st)),
        Err(e) => anyhow::bail!("reading the lab database ({e:#}): seed it first (`labctl seed`)"),
    };
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    Ok(Meta {
        started: crate::now_s(),
        out: out.display().to_string(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        pg_version,
        release_debug: release_debug(&std::fs::read_to_string("Cargo.toml").unwrap_or_default()),
        lab_db,
        pgbench_db: cfg.pgbench_db.clone(),
        pgbench_scale: cfg.pgbench_scale,
        pgbench_seconds: cfg.pgbench_seconds,
        step_seconds: cfg.step_seconds,
        warmup_rate: cfg.warmup_rate,
        warmup_seconds: cfg.warmup_seconds,
        profile_seconds: cfg.profile_seconds,
        idle_settle_seconds: cfg.idle_settle_seconds,
        idle_sample_seconds: cfg.idle_sample_seconds,
        p99_ms: cfg.p99_ms,
        ok_pct: cfg.ok_pct,
        hot_params: 0,
        hot_per_txn: cfg.hot_per_txn,
        kafka: cfg.lab.kafka.clone(),
        perf_hz: cfg.perf_hz,
        fleet: Meta::fleet_of(&cfg.lab),
        hot_plan,
    })
}

/// `labctl db status` as one line: the plan's shape and verdict, the table's state.
fn hot_plan_line(st: &lab_db::inspect::DbStatus) -> HotPlanLine {
    let p = &st.hot_plan;
    let health = if p.is_index_scan() {
        "index scan: healthy"
    } else if p.is_bitmap_heap_scan() {
        "BITMAP HEAP SCAN: stale statistics"
    } else {
        "unexpected plan"
    };
    let t = &st.entities;
    let dead = 100.0 * t.n_dead_tup as f64 / t.n_live_tup.max(1) as f64;
    let stats = match (t.locale_has_stats, t.locale_null_frac) {
        (true, Some(f)) => format!("statistics present (null_frac {f:.2})"),
        (true, None) => "statistics present".into(),
        (false, _) => "NO statistics".into(),
    };
    HotPlanLine {
        shape: format!("{}  [{health}]  {:.2} ms", p.shape(), p.execution_ms),
        state: vec![
            format!(
                "entities: {} live, {} dead ({dead:.0}% of live), {} modified since analyze, {} HOT updates",
                t.n_live_tup, t.n_dead_tup, t.n_mod_since_analyze, t.n_tup_hot_upd
            ),
            format!("locale {}: {stats}", t.locale_type),
            format!(
                "enrichment's tables {:.0} MB",
                st.enrichment_bytes as f64 / 1e6
            ),
        ],
    }
}

/// `[profile.release] debug = …` of a Cargo.toml (reported, never changed).
pub fn release_debug(cargo_toml: &str) -> String {
    let mut in_release = false;
    for line in cargo_toml.lines().map(str::trim) {
        if line.starts_with('[') {
            in_release = line == "[profile.release]";
        } else if in_release {
            if let Some(v) = line
                .strip_prefix("debug")
                .and_then(|r| r.trim_start().strip_prefix('='))
            {
                return v.trim().to_string();
            }
        }
    }
    "false (unset)".into()
}

/// Draw a run directory's report again from its `summary.json` (no measuring).
pub fn report_only(dir: &Path) -> anyhow::Result<String> {
    crate::report::draw(dir)
}

/// Copy a run's report to `docs/reports/chain-limit.md` and its summary to
/// `docs/reports/data/chain-limit.json` under `repo`.
pub fn publish(dir: &Path, repo: &Path) -> anyhow::Result<()> {
    let reports = repo.join("docs/reports");
    std::fs::create_dir_all(reports.join("data"))?;
    std::fs::copy(dir.join(REPORT), reports.join("chain-limit.md"))?;
    std::fs::copy(
        dir.join(summary::FILE),
        reports.join("data/chain-limit.json"),
    )?;
    say("published docs/reports/chain-limit.md and docs/reports/data/chain-limit.json");
    Ok(())
}

#[cfg(test)]
mod tests;
