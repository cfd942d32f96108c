//! `labctl chain-limit`: the chain against its physical limit in one run on this machine
//! (crates/lab-experiment: `chain_limit`). Every knob is a flag with the `CHAIN_*` environment
//! variable scripts/chain-limit.sh has always read as its fallback; the lab's shape is
//! `labctl up`'s flags (`--kafka ''` runs it without the broker, `--trace-sample 0` untraced).

use std::path::PathBuf;

use lab_experiment::chain_limit::{self, Config};

use crate::Globals;

#[derive(clap::Args)]
pub struct ChainLimitArgs {
    /// The ladder's offered rates, requests/s, in order (space- or comma-separated).
    #[arg(long, env = "CHAIN_RATES", value_delimiter = ' ', num_args = 1..,
          default_value = "600 800 1000 1200 1400 1600")]
    rates: Vec<String>,
    /// Seconds of load per step.
    #[arg(long, env = "CHAIN_STEP_SECONDS", default_value_t = 20)]
    step_seconds: u64,
    /// The warm-up's rate: fresh documents never repeat, so the caches need tens of thousands
    /// of documents to reach their steady hit rate (orchestrator defaults: 65% after 60,000).
    #[arg(long, env = "CHAIN_WARMUP_RATE", default_value_t = 500.0)]
    warmup_rate: f64,
    #[arg(long, env = "CHAIN_WARMUP_SECONDS", default_value_t = 60)]
    warmup_seconds: u64,
    /// The bound: p99 of the 200s (ms) — a twelfth of the user's 3 s budget.
    #[arg(long, env = "CHAIN_P99_MS", default_value_t = 250.0)]
    p99_ms: f64,
    /// The bound: share of 200s (%).
    #[arg(long, env = "CHAIN_OK_PCT", default_value_t = 99.0)]
    ok_pct: f64,
    /// pgbench's client counts, one run each.
    #[arg(long, env = "CHAIN_PGBENCH_CLIENTS", value_delimiter = ' ', num_args = 1..,
          default_value = "2 4 8")]
    pgbench_clients: Vec<String>,
    #[arg(long, env = "CHAIN_PGBENCH_SECONDS", default_value_t = 15)]
    pgbench_seconds: u64,
    /// pgbench -i's scale: 10 is 1M rows, the size of the lab's entities.
    #[arg(long, env = "CHAIN_PGBENCH_SCALE", default_value_t = 10)]
    pgbench_scale: u32,
    /// The scratch database pgbench -i fills (dropped afterwards).
    #[arg(long, env = "CHAIN_PGBENCH_DB", default_value = "chain_limit_pgbench")]
    pgbench_db: String,
    /// perf's window in the profile step (0: no profile step).
    #[arg(long, env = "CHAIN_PROFILE_SECONDS", default_value_t = 15)]
    profile_seconds: u64,
    /// 499 Hz, not perf's customary 99: each replica uses ~0.1 core at the chain's maximum,
    /// which 99 Hz would sample ~150 times in 15 s.
    #[arg(long, env = "CHAIN_PERF_HZ", default_value_t = 499)]
    perf_hz: u32,
    /// Hot lookups per pgbench transaction: one parameter pick (a round trip) serves this many.
    #[arg(long, env = "CHAIN_HOT_PER_TXN", default_value_t = 8)]
    hot_per_txn: usize,
    /// Seconds the idle lab settles after `up` (consumer groups joined) before it is sampled.
    #[arg(long, env = "CHAIN_IDLE_SETTLE_SECONDS", default_value_t = 30)]
    idle_settle_seconds: u64,
    /// Seconds the idle lab is sampled.
    #[arg(long, env = "CHAIN_IDLE_SECONDS", default_value_t = 60)]
    idle_seconds: u64,
    /// The run's directory (default <state dir>/reports/chain-limit-<unix time>).
    #[arg(long, env = "CHAIN_OUT")]
    out: Option<PathBuf>,
    /// Copy the report to docs/reports/chain-limit.md and its summary to
    /// docs/reports/data/chain-limit.json (run from the repository's root).
    #[arg(long)]
    publish: bool,
    /// Draw DIR's report again from its summary.json, measuring nothing.
    #[arg(long, value_name = "DIR")]
    report_only: Option<PathBuf>,
    #[command(flatten)]
    lab: lab_native::UpArgs,
}

/// `600 800` or `600,800` (an environment variable keeps its spaces as one value).
fn numbers<T: std::str::FromStr>(flag: &str, values: &[String]) -> anyhow::Result<Vec<T>> {
    values
        .iter()
        .flat_map(|v| v.split([' ', ',']))
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<T>()
                .map_err(|_| anyhow::anyhow!("--{flag} {v:?}: not a number"))
        })
        .collect()
}

pub async fn run(a: ChainLimitArgs, g: &Globals) -> anyhow::Result<()> {
    let dir = match &a.report_only {
        Some(dir) => {
            println!("{}", chain_limit::report_only(dir)?);
            dir.clone()
        }
        None => {
            let cfg = Config {
                rates: numbers("rates", &a.rates)?,
                step_seconds: a.step_seconds,
                warmup_rate: a.warmup_rate,
                warmup_seconds: a.warmup_seconds,
                p99_ms: a.p99_ms,
                ok_pct: a.ok_pct,
                pgbench_clients: numbers("pgbench-clients", &a.pgbench_clients)?,
                pgbench_seconds: a.pgbench_seconds,
                pgbench_scale: a.pgbench_scale,
                pgbench_db: a.pgbench_db,
                profile_seconds: a.profile_seconds,
                perf_hz: a.perf_hz,
                hot_per_txn: a.hot_per_txn,
                idle_settle_seconds: a.idle_settle_seconds,
                idle_sample_seconds: a.idle_seconds,
                out: a.out,
                lab: a.lab,
            };
            let keys = crate::seed::keys_of_this_database(g).await?;
            chain_limit::run(&cfg, &g.experiment(), keys).await?
        }
    };
    if a.publish {
        chain_limit::publish(&dir, &std::env::current_dir()?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_take_spaces_commas_and_refuse_words() {
        let v: Vec<f64> = numbers("rates", &["600 800".into(), "1000,1200".into()]).unwrap();
        assert_eq!(v, vec![600.0, 800.0, 1000.0, 1200.0]);
        let err = numbers::<u32>("pgbench-clients", &["2 four".into()]).unwrap_err();
        assert!(err.to_string().contains("\"four\""), "{err}");
    }
}
