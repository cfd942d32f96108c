//! labctl — the operator's CLI for retry-storm-lab.
//!
//! ```text
//! labctl db prepare              create, migrate and pin the lab database
//! labctl seed [--small]          the deterministic data set, API keys and document corpus
//! labctl up | down | status      the native lab (service binaries as supervised processes)
//! labctl extract [--count N]     a few real extractions through the gateway, printed
//! labctl load --rate R ...       open-loop load with latency from intended send times
//! labctl load set-rate R         change the rate of a running `labctl load`
//! labctl flags list|get|set|reset|measure   runtime flags, and how fast a flip takes effect
//! labctl tenants list|create-key|revoke      API keys (hashes only in the database)
//! labctl gameday <scenario> --mode legacy|resilient   a scenario, scraped and summarized
//! labctl replay [--mode both]        the main job: calibrate, replay the incident, verdicts
//! labctl watch                        the report's panels, live, in a terminal
//! labctl chain-limit                   the chain against its physical limit (pgbench, ladder, perf)
//! labctl rollout restart <service>     a rolling restart (Argo's rollback: every cache cold)
//! labctl scale <service> --replicas N  more (cold) replicas, joining the gateway's rotation
//! labctl limits memory <service> 700M  a memory limit the kernel enforces (OOMKilled)
//! ```

mod chain_limit;
mod db;
mod experiment;
mod extract;
mod flags;
mod kafka;
mod lab;
mod load;
mod seed;
mod tenants;
mod trace;
mod trigger;
mod watch;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// labctl is a command line over the lab-* crates: each verb's file parses its arguments and
/// calls them; nothing else lives here.
#[derive(Parser)]
#[command(
    name = "labctl",
    version,
    about = "Operate retry-storm-lab: seed it, run it, load it"
)]
struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

/// Where every verb finds the lab: its database, flag store, state and data.
#[derive(clap::Args)]
pub struct Globals {
    /// The lab database.
    #[arg(
        long,
        global = true,
        env = "LAB_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/retry_storm_lab"
    )]
    database_url: String,
    /// Where labctl keeps run state and logs (`run/`, `logs/`).
    #[arg(long, global = true, env = "LAB_STATE_DIR", default_value = ".lab")]
    state_dir: PathBuf,
    /// The runtime flag store.
    #[arg(
        long,
        global = true,
        env = "LAB_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// Where seed writes (and load reads) api-keys.json and corpus.jsonl.
    #[arg(long, global = true, env = "LAB_DATA_DIR", default_value = ".lab/data")]
    data_dir: PathBuf,
}

impl Globals {
    /// The same, as an experiment takes them.
    fn experiment(&self) -> lab_experiment::Globals {
        lab_experiment::Globals {
            database_url: self.database_url.clone(),
            redis_url: self.redis_url.clone(),
            state_dir: self.state_dir.clone(),
            data_dir: self.data_dir.clone(),
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Database administration.
    Db {
        #[command(subcommand)]
        command: db::DbCommand,
    },
    /// Load the deterministic data set: tenants, API keys, entities, and a document corpus.
    Seed(seed::SeedCli),
    #[command(flatten)]
    Lab(Box<lab::LabCommand>),
    /// Send a few real documents through the gateway and print the entities found.
    Extract(extract::ExtractArgs),
    /// Tenants and their API keys: list, create a key, revoke a key.
    Tenants {
        #[command(subcommand)]
        command: tenants::TenantsCommand,
    },
    /// Runtime flags: list, get, set, reset, and measure propagation to every replica.
    Flags {
        #[command(subcommand)]
        command: flags::FlagsCommand,
    },
    /// Open-loop load against the gateway (loopback only, bounded, stops by itself).
    Load(load::LoadCli),
    #[command(flatten)]
    Experiment(Box<experiment::ExperimentCommand>),
    /// The 03:00 locale backfill: autovacuum off, populate ~40% of rows, then widen the column
    /// (drops its statistics and invalidates every cached plan: the hot lookup flips).
    Backfill(trigger::BackfillCli),
    /// Fix (or fail to fix) the stale statistics: `analyze` cures, `vacuum` alone does not.
    Remediate(trigger::RemediateCli),
    /// The chain against its physical limit: pgbench with the lab down, the idle lab, a rate
    /// ladder to the maximum sustainable rate, the CPU by process and perf profiles.
    ChainLimit(Box<chain_limit::ChainLimitArgs>),
    /// Kafka: the enrichment group's lag per partition (like kafka-consumer-groups.sh --describe).
    Kafka {
        #[command(subcommand)]
        command: kafka::KafkaCommand,
    },
    /// A live terminal dashboard of the report's panels (a second terminal during a game day).
    Watch(watch::WatchArgs),
    /// The native lab's traces (its own OTLP receiver): the slowest and orphaned, and one as a
    /// waterfall (`labctl trace show worst`).
    Trace(trace::TraceArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Cli {
        globals: g,
        command,
    } = Cli::parse();
    match command {
        Command::Db { command } => db::run(command, &g).await,
        Command::Seed(s) => seed::run(s, &g).await,
        Command::Lab(cmd) => lab::run(*cmd, &g).await,
        Command::Extract(a) => extract::run(a, &g).await,
        Command::Tenants { command } => tenants::run(command, &g.database_url).await,
        Command::Flags { command } => flags::run(command, &g.redis_url, &g.state_dir).await,
        Command::Load(cli) => load::run(cli, &g).await,
        Command::Experiment(cmd) => experiment::run(*cmd, &g).await,
        Command::Backfill(b) => trigger::backfill(b, &g).await,
        Command::Remediate(r) => trigger::remediate(r, &g).await,
        Command::ChainLimit(a) => chain_limit::run(*a, &g).await,
        Command::Kafka { command } => kafka::run(command, &g.state_dir).await,
        Command::Watch(args) => watch::run(&args, &g.state_dir).await,
        Command::Trace(args) => trace::run(&args, &g.state_dir).await,
    }
}
