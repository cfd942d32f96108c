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
//! labctl rollout restart <service>     a rolling restart (Argo's rollback: every cache cold)
//! labctl scale <service> --replicas N  more (cold) replicas, joining the gateway's rotation
//! labctl limits memory <service> 700M  a memory limit the kernel enforces (OOMKilled)
//! ```

mod dbstatus;
mod extract;
mod flags;
mod kafka;
mod tenants;
mod trace;
mod watch;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lab_experiment::action::{LimitsCommand, RolloutCommand};
use lab_native::{supervise, Lab, Log, NativeLab, Service};
use lab_trigger::{backfill, remediate};

#[derive(Parser)]
#[command(
    name = "labctl",
    version,
    about = "Operate retry-storm-lab: seed it, run it, load it"
)]
struct Cli {
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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Database administration.
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Load the deterministic data set: tenants, API keys, entities, and a document corpus.
    Seed(SeedCli),
    /// Start the native lab in the background and wait until every replica is ready.
    Up(lab_native::UpArgs),
    /// Stop the native lab gracefully.
    Down,
    /// Show every replica: pid, readiness, restarts.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Send a few real documents through the gateway and print the entities found.
    Extract {
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        gateway: String,
        #[arg(long, default_value_t = 3)]
        count: usize,
    },
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
    #[command(args_conflicts_with_subcommands = true)]
    Load {
        #[command(subcommand)]
        command: Option<LoadCommand>,
        #[command(flatten)]
        args: lab_load::LoadArgs,
    },
    /// Run a game-day scenario (load/scenarios/*.yaml) against the running lab and report.
    Gameday(lab_experiment::GamedayArgs),
    /// The lab's main job: calibrate, then replay the postmortem's morning from the real trigger
    /// in both modes (fresh labs), with a verdict per step (load/scenarios/incident.yaml).
    Replay(lab_experiment::replay::ReplayArgs),
    /// Test the postmortem's claims: the fix taken apart, control by control, on the real
    /// trigger (calibrated load, stale plan, rollback, ANALYZE), every cell a fresh lab.
    Ablate(lab_experiment::ablate::AblateArgs),
    /// The metastability map: how long the plan stays stale × offered load, per mode — which
    /// cells stay failed after ANALYZE.
    Map(lab_experiment::map::MapArgs),
    /// The 03:00 locale backfill: autovacuum off, populate ~40% of rows, then widen the column
    /// (drops its statistics and invalidates every cached plan: the hot lookup flips).
    Backfill(BackfillCli),
    /// Fix (or fail to fix) the stale statistics: `analyze` cures, `vacuum` alone does not.
    Remediate {
        #[command(subcommand)]
        remedy: remediate::Remedy,
        #[arg(long, global = true)]
        json: bool,
    },
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
    /// (Re)draw a game day's or a replay's report.html from its run directory.
    Report {
        /// The run's directory (with summary.json and series.jsonl).
        dir: PathBuf,
    },
    /// Rolling restart of a service's replicas (the postmortem's rollback: processes cycle,
    /// caches start cold).
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// Scale a service to N replicas (new ones cold, with their own connection slots).
    Scale {
        service: Service,
        #[arg(long)]
        replicas: usize,
    },
    /// Resource limits of a service's replicas, enforced by the kernel (cgroups).
    Limits {
        #[command(subcommand)]
        command: LimitsCommand,
    },
    /// (internal) The supervisor process `labctl up` starts.
    #[command(hide = true)]
    Supervise {
        #[arg(long)]
        plan: PathBuf,
    },
}

#[derive(Subcommand)]
enum LoadCommand {
    /// Change the arrival rate of the `labctl load` running on this machine.
    SetRate { rate: f64 },
    /// Change the tenant mix (size or uniform) of the `labctl load` running on this machine.
    SetMix {
        #[arg(value_enum)]
        mix: lab_load::TenantMix,
    },
}

#[derive(Subcommand)]
enum DbCommand {
    /// Create the database if missing, run migrations, pin the planner settings.
    Prepare,
    /// The hot statement's generic plan as pooled connections run it, the statistics and sizes
    /// of entities.
    Status(DbStatusCli),
}

#[derive(clap::Args)]
struct DbStatusCli {
    #[arg(long)]
    json: bool,
    /// Tenant to execute the hot statement for (default: the median-sized tenant).
    #[arg(long)]
    tenant: Option<i64>,
    #[arg(long, default_value = "organization")]
    kind: String,
    /// Locale tag the request carries; `none` for a request without one.
    #[arg(long, default_value = "de-DE")]
    locale: String,
}

#[derive(clap::Args)]
struct BackfillCli {
    /// Run one step only (the replay runs them hours apart).
    #[arg(long, value_enum, conflicts_with = "reset")]
    only: Option<backfill::Step>,
    /// Restore the pre-incident state instead: locale NULL and varchar(8) (one table rewrite),
    /// autovacuum reset, ANALYZE.
    #[arg(long)]
    reset: bool,
    /// Ids per committed batch.
    #[arg(long, default_value_t = backfill::DEFAULT_BATCH_IDS)]
    batch_ids: i64,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct SeedCli {
    /// Laptop size: 100k entities / 200 tenants / 5k documents.
    #[arg(long)]
    small: bool,
    /// Entities (default 1,000,000; 100,000 with --small).
    #[arg(long)]
    entities: Option<u64>,
    /// Tenants (default 2,000; 200 with --small).
    #[arg(long)]
    tenants: Option<u64>,
    /// Documents in the corpus (default 20,000; 5,000 with --small).
    #[arg(long)]
    documents: Option<u64>,
    /// PRNG seed: the same seed gives the same data (20260611: the incident's date).
    #[arg(long, default_value_t = 20_260_611)]
    seed: u64,
    /// Wipe existing data first (without it, seed refuses a non-empty database).
    #[arg(long)]
    force: bool,
    /// Do nothing if the database already holds entities (for scripts).
    #[arg(long, conflicts_with = "force")]
    if_empty: bool,
}

impl Cli {
    /// What a labctl child process (a game day's action) needs to act on the same lab.
    fn globals(&self) -> lab_experiment::Globals {
        lab_experiment::Globals {
            database_url: self.database_url.clone(),
            redis_url: self.redis_url.clone(),
            state_dir: self.state_dir.clone(),
            data_dir: self.data_dir.clone(),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let lab = || NativeLab::new(&cli.state_dir, Log::stdout());
    let globals = cli.globals();
    match cli.command {
        Command::Db {
            command: DbCommand::Prepare,
        } => {
            lab_db::prepare(&cli.database_url).await?;
            println!("database ready: {}", cli.database_url);
        }
        Command::Db {
            command: DbCommand::Status(s),
        } => {
            let params = match s.tenant {
                Some(tenant) => Some(lab_db::inspect::HotParams {
                    tenant,
                    kind: s.kind,
                    locale: (s.locale != "none").then_some(s.locale),
                }),
                None => None,
            };
            dbstatus::run(&cli.database_url, params, s.json).await?;
        }
        Command::Backfill(b) => {
            let job = if b.reset {
                backfill::Job::Reset
            } else {
                backfill::Job::Backfill(b.only)
            };
            let r = backfill::run(&cli.database_url, job, b.batch_ids, !b.json).await?;
            if b.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{r}");
            }
        }
        Command::Remediate { remedy, json } => {
            let r = remediate::run(&cli.database_url, remedy).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{r}");
            }
        }
        Command::Seed(s) => {
            let args = lab_seed::SeedArgs {
                entities: s
                    .entities
                    .unwrap_or(if s.small { 100_000 } else { 1_000_000 }),
                tenants: s.tenants.unwrap_or(if s.small { 200 } else { 2_000 }),
                documents: s.documents.unwrap_or(if s.small { 5_000 } else { 20_000 }),
                seed: s.seed,
                data_dir: cli.data_dir.clone(),
                force: s.force,
                progress: true,
            };
            if s.if_empty && already_seeded(&cli.database_url, &cli.data_dir).await? {
                println!(
                    "already seeded ({}); use --force to reseed",
                    cli.database_url
                );
                return Ok(());
            }
            let report = lab_seed::run(&cli.database_url, &args).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Command::Up(args) => lab_native::up(&args, &cli.database_url, &cli.state_dir).await?,
        Command::Down => lab_native::down(&cli.state_dir).await?,
        Command::Status { json } => lab_native::status(&cli.state_dir, json).await?,
        Command::Extract { gateway, count } => {
            let keys = lab_seed::read_api_keys(&cli.data_dir)?;
            let corpus = lab_seed::read_corpus(&cli.data_dir)?;
            let ok = extract::run(&gateway, count, &keys, &corpus).await?;
            anyhow::ensure!(ok > 0, "no extraction succeeded");
        }
        Command::Load {
            command: Some(LoadCommand::SetRate { rate }),
            ..
        } => {
            lab_load::set_rate(&cli.state_dir, rate)?;
            println!(
                "rate set to {rate} requests/s (a running `labctl load` applies it within 1 s)"
            );
        }
        Command::Load {
            command: Some(LoadCommand::SetMix { mix }),
            ..
        } => {
            lab_load::set_mix(&cli.state_dir, mix)?;
            println!("tenant mix set to {mix:?} (a running `labctl load` applies it within 1 s)");
        }
        Command::Load {
            command: None,
            args,
        } => {
            let keys = lab_seed::read_api_keys(&cli.data_dir)?;
            let source = lab_load::DocSource::open(args.docs, &cli.data_dir, args.tenants)?;
            let control = lab_load::RateControl::new(args.rate)?;
            let follower = lab_load::follow_rate_file(&cli.state_dir, control.clone());
            let report = lab_load::run_with(&args, control, keys, source).await;
            follower.abort();
            let report = report?;
            lab_load::print(&report);
            if let Some(path) = &args.out {
                std::fs::write(path, serde_json::to_vec_pretty(&report)?)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("  series written to {}", path.display());
            }
        }
        Command::Gameday(args) => {
            let keys = lab_seed::read_api_keys(&cli.data_dir)?;
            lab_experiment::run(&args, &globals, &cli.state_dir, keys).await?;
        }
        Command::Replay(args) => {
            let keys = lab_seed::read_api_keys(&cli.data_dir)?;
            lab_experiment::replay::run(&args, &globals, keys).await?;
        }
        Command::Ablate(args) if args.list => lab_experiment::ablate::list(),
        Command::Ablate(args) => {
            let keys = lab_seed::read_api_keys(&cli.data_dir)?;
            lab_experiment::ablate::run(&args, &globals, keys).await?;
        }
        Command::Map(args) => {
            let keys = lab_seed::read_api_keys(&cli.data_dir)?;
            lab_experiment::map::run(&args, &globals, keys).await?;
        }
        Command::Tenants { command } => tenants::run(command, &cli.database_url).await?,
        Command::Flags { command } => flags::run(command, &cli.redis_url, &cli.state_dir).await?,
        Command::Kafka { command } => kafka::run(command, &cli.state_dir).await?,
        Command::Supervise { plan } => supervise::supervise(&plan).await?,
        Command::Watch(args) => watch::run(&args, &cli.state_dir).await?,
        Command::Trace(args) => trace::run(&args, &cli.state_dir).await?,
        Command::Report { dir } => {
            println!("{}", lab_report::html::render(&dir)?.display());
        }
        Command::Rollout {
            command: RolloutCommand::Restart { service },
        } => lab().rollout_restart(service).await?,
        Command::Scale { service, replicas } => lab().scale(service, replicas).await?,
        Command::Limits {
            command: LimitsCommand::Memory { service, limit },
        } => lab().limit_memory(service, limit.0).await?,
    }
    Ok(())
}

/// Entities present in the database and the seed's files present on disk.
async fn already_seeded(database_url: &str, data_dir: &std::path::Path) -> anyhow::Result<bool> {
    lab_db::prepare(database_url).await?;
    let mut conn = lab_db::connect(database_url).await?;
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM (SELECT 1 FROM entities LIMIT 1) t")
        .fetch_one(&mut conn)
        .await?;
    Ok(n > 0 && data_dir.join("api-keys.json").exists() && data_dir.join("corpus.jsonl").exists())
}
