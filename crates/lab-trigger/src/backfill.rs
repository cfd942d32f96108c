//! `labctl backfill`: the postmortem's 03:00 job, the incident's real trigger.
//!
//! Three steps, as the job ran them (../shared/design/stale-stats-trigger.md):
//! 1. **autovacuum off** on `entities` ("autovacuum is behind"): without it, autoanalyze would
//!    refresh the statistics within a minute of the populate (40% of rows modified is far above
//!    the 10% threshold) and nothing would ever flip.
//! 2. **populate** `locale` from `attributes->>'country'` for the DE/FR/ES/JP rows (~40%), in
//!    committed batches by id range. Each updated row leaves a dead tuple (and, on the seed's
//!    full pages, a new entry in every index). Harmless on its own: `locale` still has the
//!    statistics it got while it was all NULL, which estimate the OR at 100%.
//! 3. **invalidate**: `ALTER COLUMN locale TYPE varchar(35)`. Widening a varchar is
//!    metadata-only (milliseconds, no rewrite), but it deletes the column's statistics and
//!    invalidates every cached plan on every connection: the next execution of the hot lookup
//!    re-plans from built-in guesses (0.5% per condition) and picks the bitmap heap scan.
//!
//! `--only populate` / `--only invalidate` run one step (the replay wants them hours apart: the
//! postmortem's 03:00 and 09:41). `--reset` restores the pre-incident state for the next game
//! day.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio_postgres::Client;

/// Ids per committed batch. At 1M rows that is 100 batches of ~4,000 updated rows, each a
/// sub-second transaction: row locks stay short and the progress bar moves, as a production
/// backfill is written.
pub const DEFAULT_BATCH_IDS: i64 = 10_000;

/// How long a DDL step waits for its ACCESS EXCLUSIVE lock. The ALTERs take it only for
/// milliseconds, but queued behind a long transaction they would block every query on
/// `entities` for as long as they wait; 5 s is far above a healthy hot query (< 50 ms).
const DDL_LOCK_TIMEOUT: &str = "5s";

/// The backfill's mapping: the seed's origin country → the locale tags the corpus sends
/// (`lab_api` requests carry `de-DE`, `fr-FR`, `es-ES`, `ja-JP` or none). `us`/`gb` stay NULL.
pub const COUNTRY_LOCALES: &[(&str, &str)] = &[
    ("de", "de-DE"),
    ("fr", "fr-FR"),
    ("es", "es-ES"),
    ("jp", "ja-JP"),
];

/// `locale`'s type after the invalidating step: wide enough for any BCP 47 tag the API accepts
/// (`resolve` validates 1..=35 characters).
const WIDE_TYPE: &str = "character varying(35)";
/// `locale`'s type as the schema creates it.
const NARROW_TYPE: &str = "character varying(8)";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Step {
    /// Take autovacuum off `entities` and populate `locale` in committed batches.
    Populate,
    /// Take autovacuum off and widen `locale` (drops its statistics, invalidates cached plans).
    Invalidate,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct PopulateReport {
    pub rows_updated: u64,
    pub batches: u64,
    pub seconds: f64,
    /// `n_dead_tup` of `entities` after the last batch.
    pub n_dead_tup_after: i64,
    pub table_bytes_after: i64,
    pub index_bytes_after: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct InvalidateReport {
    pub type_before: String,
    pub type_after: String,
    /// False when the column was already widened: the same ALTER was applied again, which still
    /// drops the statistics and invalidates plans.
    pub widened: bool,
    /// True if PostgreSQL rewrote the table (relfilenode changed); never expected here.
    pub rewrote_table: bool,
    pub seconds: f64,
    pub locale_has_stats_after: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ResetReport {
    /// The rewrite that sets every `locale` to NULL and narrows the column back.
    pub rewrite_seconds: f64,
    pub analyze_seconds: f64,
    pub table_bytes_after: i64,
    pub index_bytes_after: i64,
}

/// Take autovacuum off `entities` (idempotent).
pub async fn disable_autovacuum(client: &Client) -> anyhow::Result<()> {
    ddl(
        client,
        "ALTER TABLE entities SET (autovacuum_enabled = false)",
    )
    .await
    .context("taking autovacuum off entities")
}

/// Run one DDL statement with a bounded lock wait.
async fn ddl(client: &Client, statement: &str) -> anyhow::Result<()> {
    client
        .batch_execute(&format!(
            "SET lock_timeout = '{DDL_LOCK_TIMEOUT}'; {statement}; RESET lock_timeout"
        ))
        .await
        .map_err(|e| {
            if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
                anyhow::anyhow!(
                    "{statement}: waited {DDL_LOCK_TIMEOUT} for the lock on entities; a long \
                     transaction holds it (see pg_stat_activity, `labctl db status`): let it \
                     finish or cancel it, then run this step again"
                )
            } else {
                anyhow::Error::new(e).context(statement.to_owned())
            }
        })
}

/// The CASE expression mapping `attributes->>'country'` to a locale tag.
fn locale_expr() -> String {
    let arms: String = COUNTRY_LOCALES
        .iter()
        .map(|(c, l)| format!(" WHEN '{c}' THEN '{l}'"))
        .collect();
    format!("CASE attributes->>'country'{arms} END")
}

/// Populate `locale` for the DE/FR/ES/JP rows in committed batches of `batch_ids` ids.
/// Idempotent: rows that already hold their locale are not touched again (no new dead tuples).
pub async fn populate(
    client: &Client,
    batch_ids: i64,
    progress: bool,
) -> anyhow::Result<PopulateReport> {
    anyhow::ensure!(batch_ids > 0, "--batch-ids must be positive");
    disable_autovacuum(client).await?;
    let row = client
        .query_one("SELECT min(id), max(id) FROM entities", &[])
        .await
        .context("reading the id range of entities")?;
    let (Some(min), Some(max)): (Option<i64>, Option<i64>) = (row.get(0), row.get(1)) else {
        bail!("entities is empty; run `labctl seed` first");
    };
    let countries: Vec<String> = COUNTRY_LOCALES.iter().map(|(c, _)| c.to_string()).collect();
    let update = client
        .prepare(&format!(
            "UPDATE entities SET locale = {expr}
             WHERE id BETWEEN $1 AND $2 AND attributes->>'country' = ANY($3)
               AND locale IS DISTINCT FROM {expr}",
            expr = locale_expr()
        ))
        .await
        .context("preparing the backfill UPDATE")?;
    let batches = ((max - min) / batch_ids + 1) as u64;
    let bar = if progress {
        ProgressBar::new(batches)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "backfill locale {bar:40} {pos}/{len} batches, {msg} rows updated, eta {eta}",
        )
        .expect("valid template"),
    );
    let started = Instant::now();
    let mut report = PopulateReport::default();
    let mut lo = min;
    while lo <= max {
        let hi = lo.saturating_add(batch_ids - 1).min(max);
        // One statement per batch, autocommitted: each batch is its own transaction.
        let n = client
            .execute(&update, &[&lo, &hi, &countries])
            .await
            .with_context(|| {
                format!(
                    "updating ids {lo}..={hi}; batches before it are committed, so running \
                     `labctl backfill --only populate` again resumes"
                )
            })?;
        report.rows_updated += n;
        report.batches += 1;
        bar.inc(1);
        bar.set_message(report.rows_updated.to_string());
        lo = hi + 1;
    }
    bar.finish_and_clear();
    report.seconds = started.elapsed().as_secs_f64();
    flush_stats(client).await?;
    let t = lab_db::inspect::table_status(client).await?;
    report.n_dead_tup_after = t.n_dead_tup;
    report.table_bytes_after = t.table_bytes;
    report.index_bytes_after = t.index_bytes();
    Ok(report)
}

/// Make this backend publish its pending table statistics now (they are otherwise flushed at
/// most once a second), so the counters read next include our own updates.
async fn flush_stats(client: &Client) -> anyhow::Result<()> {
    client
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .context("flushing table statistics (needs PostgreSQL 15 or newer)")?;
    // The flush happens when the backend goes idle after that statement; give it a moment.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

/// `locale`'s declared type and the table's relfilenode (which changes only on a rewrite).
async fn locale_type(client: &Client) -> anyhow::Result<(String, u32)> {
    let row = client
        .query_one(
            "SELECT format_type(a.atttypid, a.atttypmod), c.relfilenode
             FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
             WHERE c.oid = 'entities'::regclass AND a.attname = 'locale' AND NOT a.attisdropped",
            &[],
        )
        .await
        .context("reading the type of entities.locale; migrate with `labctl db prepare`")?;
    Ok((row.get(0), row.get(1)))
}

/// Widen `locale` to varchar(35): metadata-only, drops its statistics, invalidates every cached
/// plan. On an already widened column the same ALTER is applied again, which does the same.
pub async fn invalidate(client: &Client) -> anyhow::Result<InvalidateReport> {
    let (before, relfile_before) = locale_type(client).await?;
    if before != NARROW_TYPE && before != WIDE_TYPE {
        bail!(
            "entities.locale is {before}; the invalidating step needs {NARROW_TYPE} (the schema) \
             or {WIDE_TYPE} (already invalidated) to stay metadata-only. Restore the schema's \
             type with `labctl backfill --reset` (rewrites the table) and run it again"
        );
    }
    // Autoanalyze must not repair the statistics the ALTER is about to drop.
    disable_autovacuum(client).await?;
    let started = Instant::now();
    ddl(
        client,
        "ALTER TABLE entities ALTER COLUMN locale TYPE varchar(35)",
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    let (after, relfile_after) = locale_type(client).await?;
    let has_stats: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_stats WHERE tablename = 'entities' AND attname = 'locale')",
            &[],
        )
        .await?
        .get(0);
    Ok(InvalidateReport {
        widened: before == NARROW_TYPE,
        type_before: before,
        type_after: after,
        rewrote_table: relfile_before != relfile_after,
        seconds,
        locale_has_stats_after: has_stats,
    })
}

/// Restore the pre-incident state for the next game day: every `locale` NULL, the column back
/// to varchar(8), autovacuum back to the server's setting, fresh statistics.
///
/// Narrowing a varchar cannot be metadata-only (PostgreSQL must check every value), so this is
/// one deliberate table rewrite: `USING NULL` writes every row once with `locale` NULL — no
/// UPDATE, no dead tuples — and rebuilds every index, leaving the table as compact as the seed
/// left it. It holds an ACCESS EXCLUSIVE lock for the rewrite: the hot lookup waits meanwhile.
pub async fn reset(client: &Client) -> anyhow::Result<ResetReport> {
    let started = Instant::now();
    ddl(
        client,
        "ALTER TABLE entities ALTER COLUMN locale TYPE varchar(8) USING NULL",
    )
    .await
    .context("rewriting entities with locale NULL as varchar(8)")?;
    ddl(client, "ALTER TABLE entities RESET (autovacuum_enabled)").await?;
    let rewrite_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    client
        .batch_execute("ANALYZE entities")
        .await
        .context("analyzing entities")?;
    let analyze_seconds = started.elapsed().as_secs_f64();
    flush_stats(client).await?;
    let t = lab_db::inspect::table_status(client).await?;
    anyhow::ensure!(
        t.locale_type == NARROW_TYPE && t.locale_null_frac == Some(1.0),
        "reset left locale as {} with null_frac {:?}; expected {NARROW_TYPE}, all NULL",
        t.locale_type,
        t.locale_null_frac
    );
    Ok(ResetReport {
        rewrite_seconds,
        analyze_seconds,
        table_bytes_after: t.table_bytes,
        index_bytes_after: t.index_bytes(),
    })
}

/// What one `labctl backfill` did: the steps it ran, each with its measured report.
#[derive(Debug, Clone, Serialize, Default)]
pub struct BackfillReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset: Option<ResetReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub populate: Option<PopulateReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalidate: Option<InvalidateReport>,
}

/// What to run: the whole job, one step of it, or the pre-incident state restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// Both steps, as the 03:00 job ran them (`None`), or one of them.
    Backfill(Option<Step>),
    /// `--reset`.
    Reset,
}

/// `labctl backfill` as the operator runs it (and a scenario's `backfill` action): the steps
/// `job` names, in order, against `database_url`. `progress`: a progress bar on stderr for the
/// populate's batches.
pub async fn run(
    database_url: &str,
    job: Job,
    batch_ids: i64,
    progress: bool,
) -> anyhow::Result<BackfillReport> {
    let client = lab_db::inspect::connect(database_url).await?;
    let mut out = BackfillReport::default();
    match job {
        Job::Reset => out.reset = Some(reset(&client).await?),
        Job::Backfill(only) => {
            if only != Some(Step::Invalidate) {
                out.populate = Some(populate(&client, batch_ids, progress).await?);
            }
            if only != Some(Step::Populate) {
                out.invalidate = Some(invalidate(&client).await?);
            }
        }
    }
    Ok(out)
}

/// One line per step, as the operator reads it.
impl std::fmt::Display for BackfillReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use lab_db::inspect::human_bytes as bytes;
        if let Some(r) = &self.reset {
            writeln!(
                f,
                "reset: locale NULL and varchar(8) (table rewrite {:.2} s), autovacuum reset, \
                 ANALYZE {:.2} s; heap {}, indexes {}",
                r.rewrite_seconds,
                r.analyze_seconds,
                bytes(r.table_bytes_after),
                bytes(r.index_bytes_after)
            )?;
        }
        if let Some(r) = &self.populate {
            writeln!(
                f,
                "populate: autovacuum off on entities; {} rows got a locale in {} committed \
                 batches, {:.1} s; n_dead_tup now {}; heap {}, indexes {}",
                r.rows_updated,
                r.batches,
                r.seconds,
                r.n_dead_tup_after,
                bytes(r.table_bytes_after),
                bytes(r.index_bytes_after)
            )?;
        }
        if let Some(r) = &self.invalidate {
            let what = if r.widened {
                format!("widened {} → {}", r.type_before, r.type_after)
            } else {
                format!(
                    "was already {}; the same ALTER TYPE was applied again",
                    r.type_after
                )
            };
            writeln!(
                f,
                "invalidate: locale {what} in {:.1} ms ({}); locale statistics {}; every \
                 cached plan of entities is invalid",
                r.seconds * 1e3,
                if r.rewrote_table {
                    "the table was REWRITTEN"
                } else {
                    "metadata-only"
                },
                if r.locale_has_stats_after {
                    "still present (unexpected)"
                } else {
                    "dropped"
                }
            )?;
        }
        Ok(())
    }
}
