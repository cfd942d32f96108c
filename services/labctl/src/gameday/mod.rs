//! `labctl gameday <scenario> --mode legacy|resilient`: run a scenario against the running lab.
//!
//! The runner sets the mode and resets every other flag, starts the open-loop load, scrapes every
//! replica's `/metrics` each second, applies each phase's flags and rate on the timeline, keeps
//! scraping for a few seconds after the load so late orphans are counted, and prints a summary
//! shaped like the postmortem's Performance Comparison (one column per phase). Everything — the
//! per-second series, the summary, the load report — is written as JSON and Markdown.

pub mod report;
pub mod scenario;
pub mod scrape;
mod targets;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::load::{self, DocSource, Docs, LoadArgs, RateControl, TenantMix};
use crate::seed::ApiKeyRecord;
use crate::supervise;
use scrape::{Series, Target, Tick};
use targets::parse_targets;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Mode {
    Legacy,
    Resilient,
}

impl Mode {
    fn variant(self) -> &'static str {
        match self {
            Mode::Legacy => "legacy",
            Mode::Resilient => "resilient",
        }
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
    /// Exit non-zero when a scenario expectation for this mode is not met.
    #[arg(long)]
    pub strict: bool,
    /// Seed of the document stream and the arrivals. The default repeats the same documents
    /// run after run (comparable game days on fresh labs); give back-to-back runs on ONE lab
    /// different seeds, or the second run finds the first's documents in the caches.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Serialize)]
struct Report<'a> {
    scenario: &'a scenario::Scenario,
    mode: Mode,
    extra_flags: &'a [String],
    targets: &'a [Target],
    phases: Vec<PhaseReport>,
    expectations: Vec<ExpectationResult>,
    /// The run's own bookkeeping: sent = answered by status, 5xx = sum of origins.
    consistency: Vec<report::Check>,
    load: &'a load::LoadReport,
    restarts_during_run: u32,
}

#[derive(Serialize)]
struct PhaseReport {
    name: String,
    seconds: u64,
    summary: report::PhaseSummary,
    /// The gateway's 5xx in this phase by the error-table row that decided them.
    errors_5xx_by_origin: std::collections::BTreeMap<String, f64>,
}

#[derive(Serialize, Clone)]
struct ExpectationResult {
    metric: String,
    phase: String,
    min: Option<f64>,
    max: Option<f64>,
    value: Option<f64>,
    ok: bool,
}

/// The global options a labctl child process needs to act on the same lab.
#[derive(Debug, Clone)]
pub struct Globals {
    pub database_url: String,
    pub redis_url: String,
    pub state_dir: PathBuf,
    pub data_dir: PathBuf,
}

/// Start `labctl <cmd>` with the same globals; its output goes to the game day's log file.
fn spawn_labctl(g: &Globals, cmd: &str, log: &Path) -> anyhow::Result<tokio::process::Child> {
    let exe = std::env::current_exe().context("locating labctl itself")?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    tokio::process::Command::new(exe)
        .arg("--database-url")
        .arg(&g.database_url)
        .arg("--redis-url")
        .arg(&g.redis_url)
        .arg("--state-dir")
        .arg(&g.state_dir)
        .arg("--data-dir")
        .arg(&g.data_dir)
        .args(cmd.split_whitespace())
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting labctl {cmd}"))
}

/// Run `cmds` one after another (a phase's `run:` list), logging each exit.
fn run_in_background(
    g: Globals,
    cmds: Vec<String>,
    log: PathBuf,
    t0: Instant,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for cmd in cmds {
            println!("  t={:5.1}s run: labctl {cmd}", t0.elapsed().as_secs_f64());
            match spawn_labctl(&g, &cmd, &log) {
                Ok(mut child) => match child.wait().await {
                    Ok(st) => println!(
                        "  t={:5.1}s done: labctl {cmd} ({st})",
                        t0.elapsed().as_secs_f64()
                    ),
                    Err(e) => println!("  labctl {cmd}: {e}"),
                },
                Err(e) => println!("  labctl {cmd}: {e:#}"),
            }
        }
    })
}

pub async fn run(
    args: &GamedayArgs,
    globals: &Globals,
    redis_url: &str,
    state_dir: &Path,
    data_dir: &Path,
    keys: Vec<ApiKeyRecord>,
) -> anyhow::Result<()> {
    let sc = scenario::load(&args.scenario)?;
    let defs = lab_flags::Definitions::embedded();
    let mut extra = Vec::new();
    for f in &args.flags {
        let (flag, variant) = f
            .split_once('=')
            .with_context(|| format!("--flag {f:?}: use flag=variant"))?;
        defs.check(flag, variant)?;
        if flag == "client.mode" {
            bail!("--flag client.mode: use --mode");
        }
        extra.push((flag.to_string(), variant.to_string()));
    }
    let (targets, restarts_before) = match &args.targets {
        Some(list) => (parse_targets(list).await?, 0),
        None => {
            let Some(state) = supervise::read_state(state_dir)? else {
                bail!("no lab is up: start one with `labctl up` (or name the replicas with --targets)");
            };
            let targets: Vec<Target> = state
                .procs
                .iter()
                .map(|p| Target {
                    service: p.binary.clone(),
                    replica: p.name.clone(),
                    url: format!("http://127.0.0.1:{}", p.port),
                })
                .collect();
            (targets, state.procs.iter().map(|p| p.restarts).sum::<u32>())
        }
    };
    let store = lab_flags::Store::new(redis_url)?;
    let http = scrape::client();

    // The starting point: every flag at its default, then the mode and the run's extra flags.
    store
        .reset()
        .await
        .context("resetting flags (is Redis up? scripts/deps.sh)")?;
    store.set("client.mode", args.mode.variant()).await?;
    for (f, v) in &extra {
        store.set(f, v).await?;
    }
    wait_applied(&http, &targets, "client.mode", args.mode.variant()).await?;
    println!(
        "game day {} in {} mode: {} phases, {} s, {:.0} rps base rate",
        sc.name,
        args.mode.variant(),
        sc.phases.len(),
        sc.total_seconds(),
        args.rate.unwrap_or(sc.rate)
    );

    let base_rate = args.rate.unwrap_or(sc.rate);
    let control = RateControl::new(sc.phases[0].rate.unwrap_or(base_rate))?;
    let load_args = LoadArgs {
        gateway: args.gateway.clone(),
        rate: control.get(),
        duration: sc.total_seconds(),
        timeout_ms: 10_000,
        tenants: args.tenants.unwrap_or(if sc.tenants == "uniform" {
            TenantMix::Uniform
        } else {
            TenantMix::Size
        }),
        max_in_flight: 10_000,
        seed: args.seed,
        out: None,
        docs: Docs::Stream,
    };
    let source = DocSource::open(Docs::Stream, data_dir, load_args.tenants)?;
    // The baseline: every counter as it stood before the first request of this run, so the
    // run's totals (and its consistency checks) start from zero exactly.
    let baseline = scrape::scrape_all(&http, &targets).await;
    let started = Instant::now();
    let load_task = {
        let (a, c) = (load_args.clone(), control.clone());
        tokio::spawn(async move { load::run_with(&a, c, keys, source).await })
    };

    // Phase timeline and the 1 s scrape loop.
    let mut ticks: Vec<Tick> = vec![Tick {
        t: 0.0,
        phase: 0,
        scrapes: baseline,
    }];
    let mut phase_starts = Vec::new();
    let mut acc = 0u64;
    for p in &sc.phases {
        phase_starts.push(acc as f64);
        acc += p.seconds;
    }
    let end = sc.total_seconds() as f64 + sc.settle_seconds as f64;
    let mut current = usize::MAX;
    let mut next_tick = started;
    let out = args.out.clone().unwrap_or_else(|| {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        state_dir
            .join("reports")
            .join(format!("gameday-{}-{}-{ts}", sc.name, args.mode.variant()))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let actions_log = out.join("actions.log");
    let mut actions = Vec::new();
    loop {
        let t = started.elapsed().as_secs_f64();
        if t > end {
            break;
        }
        let phase = phase_starts.iter().rposition(|s| *s <= t).unwrap_or(0);
        if phase != current {
            current = phase;
            let p = &sc.phases[phase];
            for (f, v) in &p.flags {
                store.set(f, v).await?;
            }
            control.set(p.rate.unwrap_or(base_rate))?;
            if !p.run.is_empty() {
                actions.push(run_in_background(
                    globals.clone(),
                    p.run.clone(),
                    actions_log.clone(),
                    started,
                ));
            }
            println!(
                "  t={t:5.1}s phase {:<10} {:>4} s at {:.0} rps {}",
                p.name,
                p.seconds,
                control.get(),
                if p.flags.is_empty() {
                    String::new()
                } else {
                    format!("flags {:?}", p.flags)
                }
            );
        }
        let scrapes = scrape::scrape_all(&http, &targets).await;
        ticks.push(Tick { t, phase, scrapes });
        next_tick += Duration::from_secs(1);
        tokio::time::sleep_until(next_tick.into()).await;
    }
    let load_report = load_task.await.context("load generator panicked")??;
    store.reset().await?;
    for a in actions {
        let _ = a.await;
    }
    if !sc.cleanup.is_empty() {
        run_in_background(
            globals.clone(),
            sc.cleanup.clone(),
            actions_log.clone(),
            started,
        )
        .await
        .ok();
    }

    // Summaries.
    let series = Series {
        targets: &targets,
        ticks: &ticks,
    };
    let mut phases = Vec::new();
    for (i, p) in sc.phases.iter().enumerate() {
        let secs = p.seconds as f64;
        let summary = report::summarize(&series, i, secs, &load_report.per_second, phase_starts[i]);
        phases.push(PhaseReport {
            name: p.name.clone(),
            seconds: p.seconds,
            summary,
            errors_5xx_by_origin: report::origins(&series, i),
        });
    }
    if let Some(first) = phases
        .first()
        .and_then(|p| p.summary.get("amplification").copied())
    {
        for p in phases.iter_mut() {
            if let Some(a) = p.summary.get("amplification").copied() {
                p.summary.insert("amplification_ratio".into(), a / first);
            }
        }
    }
    let expectations: Vec<ExpectationResult> = sc
        .expect
        .get(args.mode.variant())
        .map(|checks| {
            checks
                .iter()
                .map(|(metric, e)| {
                    let value = phases
                        .iter()
                        .find(|p| p.name == e.phase)
                        .and_then(|p| p.summary.get(metric).copied());
                    let ok = value.is_some_and(|v| {
                        e.min.is_none_or(|m| v >= m) && e.max.is_none_or(|m| v <= m)
                    });
                    ExpectationResult {
                        metric: metric.clone(),
                        phase: e.phase.clone(),
                        min: e.min,
                        max: e.max,
                        value,
                        ok,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let restarts_after: u32 = match &args.targets {
        Some(_) => restarts_before,
        None => supervise::read_state(state_dir)?
            .map(|s| s.procs.iter().map(|p| p.restarts).sum())
            .unwrap_or(restarts_before),
    };

    let title = format!(
        "{} — {} mode{} ({:.0} rps base, {} tenant mix)",
        sc.name,
        args.mode.variant(),
        if extra.is_empty() {
            String::new()
        } else {
            format!(", flags {}", args.flags.join(" "))
        },
        base_rate,
        match load_args.tenants {
            TenantMix::Uniform => "uniform",
            TenantMix::Size => "size",
        }
    );
    let phase_names: Vec<(String, u64)> =
        phases.iter().map(|p| (p.name.clone(), p.seconds)).collect();
    let summaries: Vec<report::PhaseSummary> = phases.iter().map(|p| p.summary.clone()).collect();
    let consistency = report::consistency(&series, &load_report);
    let mut md = report::markdown(&title, &phase_names, &summaries);
    let per_phase_origins: Vec<_> = phases
        .iter()
        .map(|p| p.errors_5xx_by_origin.clone())
        .collect();
    md.push_str(&report::origins_markdown(
        &phase_names,
        &per_phase_origins,
        &consistency,
    ));
    md.push_str(&format!(
        "\nLoad: {} sent, by status {:?}. Replica restarts during the run: {}.\n",
        load_report.sent,
        load_report.by_status,
        restarts_after.saturating_sub(restarts_before)
    ));
    if !expectations.is_empty() {
        md.push_str("\nExpectations for this mode:\n\n");
        for e in &expectations {
            md.push_str(&format!(
                "- {} {} in {}: {} (expected {}..{})\n",
                if e.ok { "PASS" } else { "FAIL" },
                e.metric,
                e.phase,
                e.value.map_or("—".into(), |v| format!("{v:.2}")),
                e.min.map_or("".into(), |v| format!("{v}")),
                e.max.map_or("".into(), |v| format!("{v}")),
            ));
        }
    }
    println!("\n{md}");

    let report = Report {
        scenario: &sc,
        mode: args.mode,
        extra_flags: &args.flags,
        targets: &targets,
        phases,
        expectations: expectations.clone(),
        consistency: consistency.clone(),
        load: &load_report,
        restarts_during_run: restarts_after.saturating_sub(restarts_before),
    };
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    std::fs::write(out.join("summary.md"), &md)?;
    write_series(&out.join("series.jsonl"), &targets, &ticks)?;
    println!("report written to {}", out.display());
    let broken: Vec<&str> = consistency
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.name.as_str())
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
    if args.strict && expectations.iter().any(|e| !e.ok) {
        bail!("expectations not met (see above)");
    }
    Ok(())
}

/// Wait (bounded) until every target reports `flag = variant`.
async fn wait_applied(
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

/// The raw series, one JSON line per tick: `{t, phase, replicas: {name: {series: value}}}`.
fn write_series(path: &Path, targets: &[Target], ticks: &[Tick]) -> anyhow::Result<()> {
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
