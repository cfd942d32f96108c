//! `labctl flags list | get | set | reset | measure`.
//!
//! `measure` answers the postmortem's question about a kill switch — "seconds to effect" — for
//! this lab: it flips a flag back and forth and times, for each flip, how long until every
//! replica of the running lab reports the new value on its `/metrics`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use lab_flags::{Definitions, Store};
use serde::Serialize;

use lab_native::supervise;

#[derive(Debug, clap::Subcommand)]
pub enum FlagsCommand {
    /// Every flag: current variant, choices, description.
    List,
    /// One flag's current variant.
    Get { flag: String },
    /// Set a flag for every replica (takes effect in-process, no restart).
    Set { flag: String, variant: String },
    /// Every flag back to its default.
    Reset,
    /// Flip a flag repeatedly and time how long every replica takes to apply it.
    Measure {
        #[arg(long, default_value = "client.mode")]
        flag: String,
        /// How many flips (each flip alternates between two variants).
        #[arg(long, default_value_t = 100)]
        flips: usize,
        /// Write the samples and the summary here as JSON.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
}

pub async fn run(cmd: FlagsCommand, redis_url: &str, state_dir: &Path) -> anyhow::Result<()> {
    let defs = Definitions::embedded();
    let store = Store::new(redis_url)?;
    match cmd {
        FlagsCommand::List => {
            let stored = store
                .read_all()
                .await
                .context("reading the flag store (is Redis up? scripts/deps.sh)")?;
            for (name, def) in &defs.flags {
                let current = stored
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| format!("{} (default)", def.default_variant));
                let choices: Vec<&str> = def.variants.keys().map(String::as_str).collect();
                println!("{name} = {current}   [{}]", choices.join(" | "));
                println!("    {}", def.description);
            }
        }
        FlagsCommand::Get { flag } => {
            let def = defs
                .flags
                .get(&flag)
                .with_context(|| format!("unknown flag {flag:?}"))?;
            let stored = store.read_all().await?;
            println!("{}", stored.get(&flag).unwrap_or(&def.default_variant));
        }
        FlagsCommand::Set { flag, variant } => {
            defs.check(&flag, &variant)?;
            store.set(&flag, &variant).await?;
            println!("{flag} = {variant}");
        }
        FlagsCommand::Reset => {
            store.reset().await?;
            println!("every flag is back to its default");
        }
        FlagsCommand::Measure { flag, flips, out } => {
            let report = measure(&defs, &store, state_dir, &flag, flips).await?;
            println!(
                "{} flips of {} over {} replicas: every replica applied the new value after p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                report.flips, report.flag, report.replicas, report.p50_ms, report.p99_ms, report.max_ms
            );
            if let Some(path) = out {
                std::fs::write(&path, serde_json::to_vec_pretty(&report)?)?;
                println!("samples written to {}", path.display());
            }
        }
    }
    Ok(())
}

#[derive(Debug, Serialize)]
pub struct MeasureReport {
    pub flag: String,
    pub flips: usize,
    pub replicas: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Per flip: milliseconds until the slowest replica reported the new value.
    pub samples_ms: Vec<f64>,
}

async fn measure(
    defs: &Definitions,
    store: &Store,
    state_dir: &Path,
    flag: &str,
    flips: usize,
) -> anyhow::Result<MeasureReport> {
    let def = defs
        .flags
        .get(flag)
        .with_context(|| format!("unknown flag {flag:?}"))?;
    let variants: Vec<&String> = def.variants.keys().collect();
    if variants.len() < 2 {
        bail!("{flag} has fewer than two variants");
    }
    anyhow::ensure!(
        (1..=10_000).contains(&flips),
        "--flips must be in 1..=10000"
    );
    let Some(state) = supervise::read_state(state_dir)? else {
        bail!("no lab is up: start one with `labctl up`");
    };
    let urls: Vec<String> = state
        .procs
        .iter()
        .map(|p| format!("http://127.0.0.1:{}/metrics", p.admin_port))
        .collect();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let original = store.read_all().await?.get(flag).cloned();
    let mut samples = Vec::with_capacity(flips);
    for i in 0..flips {
        let variant = variants[(i + 1) % 2];
        let series = format!("lab_flag_variant{{flag=\"{flag}\",variant=\"{variant}\"}} 1");
        let start = Instant::now();
        store.set(flag, variant).await?;
        let mut pending: Vec<&String> = urls.iter().collect();
        let deadline = start + Duration::from_secs(30);
        while !pending.is_empty() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "flip {i}: {} replicas did not apply {flag}={variant} within 30 s",
                pending.len()
            );
            let mut still = Vec::new();
            for url in pending {
                let text = client.get(url).send().await.ok();
                let body = match text {
                    Some(r) => r.text().await.unwrap_or_default(),
                    None => String::new(),
                };
                if !body.lines().any(|l| l == series) {
                    still.push(url);
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        samples.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    match original {
        Some(v) => store.set(flag, &v).await?,
        // It was never set: leave it unset again, so `flags list` still says "(default)".
        None => store.unset(flag).await?,
    }
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| sorted[((sorted.len() as f64 - 1.0) * p).round() as usize];
    Ok(MeasureReport {
        flag: flag.to_string(),
        flips,
        replicas: urls.len(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        max_ms: *sorted.last().expect("at least one flip"),
        samples_ms: samples,
    })
}
