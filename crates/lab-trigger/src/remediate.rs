//! `labctl remediate analyze|vacuum`: what the DBA ran at 11:31, and what does not help.
//!
//! - `analyze`: `ANALYZE entities` gives `locale` statistics again (60% NULL, four tags), the
//!   plan cache of every connection is invalidated by the new statistics, and the next execution
//!   re-plans to the index scan — running connections recover without a reconnect. It also
//!   resets the backfill's `autovacuum_enabled = false`.
//! - `vacuum`: `VACUUM entities` removes the dead tuples but collects no column statistics, so
//!   the plan stays a bitmap heap scan. Autovacuum is deliberately left off: re-enabling it would
//!   let autoanalyze cure the table within a minute and blur the demonstration.

use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tokio_postgres::Client;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Subcommand)]
pub enum Remedy {
    /// ANALYZE entities and reset autovacuum_enabled (the 11:31 fix).
    Analyze,
    /// VACUUM entities only (removes dead tuples; does not cure the plan).
    Vacuum,
}

#[derive(Debug, Clone, Serialize)]
pub struct RemedyReport {
    pub remedy: &'static str,
    pub seconds: f64,
    pub n_dead_tup_before: i64,
    pub n_dead_tup_after: i64,
    pub locale_has_stats_after: bool,
    pub autovacuum_enabled_after: bool,
    /// The hot statement's plan after the remedy, as a pooled connection runs it.
    pub plan_after: lab_db::inspect::HotPlan,
}

pub async fn apply(client: &Client, remedy: Remedy) -> anyhow::Result<RemedyReport> {
    let before = lab_db::inspect::table_status(client).await?;
    let started = Instant::now();
    let name = match remedy {
        Remedy::Analyze => {
            client
                .batch_execute("ANALYZE entities")
                .await
                .context("ANALYZE entities")?;
            client
                .batch_execute("ALTER TABLE entities RESET (autovacuum_enabled)")
                .await
                .context("resetting autovacuum_enabled on entities")?;
            "analyze"
        }
        Remedy::Vacuum => {
            client
                .batch_execute("VACUUM entities")
                .await
                .context("VACUUM entities")?;
            "vacuum"
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    client
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .context("flushing table statistics")?;
    let after = lab_db::inspect::table_status(client).await?;
    let params = lab_db::inspect::HotParams::typical(client).await?;
    let plan_after = lab_db::inspect::hot_plan(client, &params).await?;
    Ok(RemedyReport {
        remedy: name,
        seconds,
        n_dead_tup_before: before.n_dead_tup,
        n_dead_tup_after: after.n_dead_tup,
        locale_has_stats_after: after.locale_has_stats,
        autovacuum_enabled_after: after.autovacuum_enabled,
        plan_after,
    })
}

/// `labctl remediate <remedy>` (and a scenario's `remediate` action) against `database_url`.
pub async fn run(database_url: &str, remedy: Remedy) -> anyhow::Result<RemedyReport> {
    let client = lab_db::inspect::connect(database_url).await?;
    apply(&client, remedy).await
}

/// What the remedy did and the hot statement's plan after it, as the operator reads it.
impl std::fmt::Display for RemedyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self;
        writeln!(
            f,
            "{}: {:.2} s; n_dead_tup {} → {}; locale statistics {}; autovacuum {}",
            r.remedy,
            r.seconds,
            r.n_dead_tup_before,
            r.n_dead_tup_after,
            if r.locale_has_stats_after {
                "present"
            } else {
                "ABSENT"
            },
            if r.autovacuum_enabled_after {
                "on"
            } else {
                "off"
            },
        )?;
        writeln!(
            f,
            "hot statement now: {} ({:.2} ms){}",
            r.plan_after.shape(),
            r.plan_after.execution_ms,
            if r.plan_after.is_index_scan() {
                ""
            } else {
                " — still not an index scan: run `labctl remediate analyze`"
            }
        )
    }
}
