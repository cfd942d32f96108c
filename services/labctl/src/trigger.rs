//! `labctl backfill` (the incident's real trigger) and `labctl remediate` (what the DBA ran),
//! from crates/lab-trigger.

use lab_trigger::backfill::{self, Job};
use lab_trigger::remediate::{self, Remedy};

use crate::Globals;

#[derive(clap::Args)]
pub struct BackfillCli {
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
pub struct RemediateCli {
    #[command(subcommand)]
    remedy: Remedy,
    #[arg(long, global = true)]
    json: bool,
}

pub async fn backfill(b: BackfillCli, g: &Globals) -> anyhow::Result<()> {
    let job = if b.reset {
        Job::Reset
    } else {
        Job::Backfill(b.only)
    };
    let r = backfill::run(&g.database_url, job, b.batch_ids, !b.json).await?;
    show(&r, b.json)
}

pub async fn remediate(r: RemediateCli, g: &Globals) -> anyhow::Result<()> {
    let report = remediate::run(&g.database_url, r.remedy).await?;
    show(&report, r.json)
}

/// The report as JSON, or as the lines an operator reads.
fn show<R: serde::Serialize + std::fmt::Display>(r: &R, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        print!("{r}");
    }
    Ok(())
}
