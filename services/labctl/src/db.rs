//! `labctl db prepare`: create, migrate and pin the lab database. `labctl db status`: the
//! postmortem's "Step 2: Is the datastore healthy?" in one command — the hot statement's plan as
//! pooled connections run it, how stale the statistics of `entities` are, and how big it has
//! grown (../shared/design/stale-stats-trigger.md).

use clap::Subcommand;
use lab_db::inspect::{self, human_bytes as bytes, DbStatus, HotParams};

use crate::Globals;

#[derive(Subcommand)]
pub enum DbCommand {
    /// Create the database if missing, run migrations, pin the planner settings.
    Prepare,
    /// The hot statement's generic plan as pooled connections run it, the statistics and sizes
    /// of entities.
    Status(StatusArgs),
}

#[derive(clap::Args)]
pub struct StatusArgs {
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

pub async fn run(cmd: DbCommand, g: &Globals) -> anyhow::Result<()> {
    match cmd {
        DbCommand::Prepare => {
            lab_db::prepare(&g.database_url).await?;
            println!("database ready: {}", g.database_url);
            Ok(())
        }
        DbCommand::Status(s) => {
            let params = s.tenant.map(|tenant| HotParams {
                tenant,
                kind: s.kind,
                locale: (s.locale != "none").then_some(s.locale),
            });
            status(&g.database_url, params, s.json).await
        }
    }
}

fn ago(seconds: Option<f64>) -> String {
    match seconds {
        None => "never".into(),
        Some(s) if s < 120.0 => format!("{s:.0} s ago"),
        Some(s) if s < 7_200.0 => format!("{:.0} min ago", s / 60.0),
        Some(s) => format!("{:.1} h ago", s / 3_600.0),
    }
}

fn print(s: &DbStatus) {
    let p = &s.hot_plan;
    println!("database {}", s.database);
    println!(
        "hot statement (lab_db::queries::CANDIDATE_LOOKUP; tenant {}, {}, locale {}; {} plan after {} executions):",
        p.params.tenant,
        p.params.kind,
        p.params.locale.as_deref().unwrap_or("NULL"),
        if p.generic { "generic" } else { "custom" },
        inspect::WARMUP_EXECUTIONS,
    );
    println!(
        "  {}  [{}]  {:.2} ms",
        p.shape(),
        if p.is_index_scan() {
            "index scan: healthy"
        } else if p.is_bitmap_heap_scan() {
            "BITMAP HEAP SCAN: stale statistics — run `labctl remediate analyze`"
        } else {
            "unexpected plan"
        },
        p.execution_ms
    );
    for n in &p.nodes {
        println!(
            "    {:<20} {:<40} est {:>8.0} rows, actual {:>8.0}{}",
            n.node_type,
            n.index.as_deref().unwrap_or(""),
            n.estimated_rows,
            n.actual_rows,
            if n.rows_removed > 0.0 {
                format!(", removed {:.0}", n.rows_removed)
            } else {
                String::new()
            }
        );
    }
    let t = &s.entities;
    let dead_pct = 100.0 * t.n_dead_tup as f64 / (t.n_live_tup.max(1)) as f64;
    println!(
        "entities: {} live, {} dead ({dead_pct:.0}% of live), {} modified since analyze, {} HOT updates",
        t.n_live_tup, t.n_dead_tup, t.n_mod_since_analyze, t.n_tup_hot_upd
    );
    println!(
        "  last analyze {} ({}), last autoanalyze {}, last vacuum {}, last autovacuum {}; autovacuum {}",
        t.last_analyze.as_deref().unwrap_or("never"),
        ago(t.seconds_since_analyze),
        t.last_autoanalyze.as_deref().unwrap_or("never"),
        t.last_vacuum.as_deref().unwrap_or("never"),
        t.last_autovacuum.as_deref().unwrap_or("never"),
        if t.autovacuum_enabled {
            "on"
        } else {
            "OFF on this table"
        }
    );
    println!(
        "  locale {}: {}",
        t.locale_type,
        match (t.locale_has_stats, t.locale_null_frac) {
            (true, Some(f)) => format!("statistics present (null_frac {f:.2})"),
            (true, None) => "statistics present".into(),
            (false, _) => "NO statistics — the planner guesses 0.5% per condition".into(),
        }
    );
    println!(
        "  heap {}, indexes {} ({})",
        bytes(t.table_bytes),
        bytes(t.index_bytes()),
        t.indexes
            .iter()
            .map(|i| format!("{} {}", i.name, bytes(i.bytes)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "enrichment's tables: {} (they grow until `labctl seed --force`)",
        bytes(s.enrichment_bytes)
    );
    println!(
        "connections to {} not idle (others): {}",
        s.database, s.busy_connections
    );
}

async fn status(database_url: &str, params: Option<HotParams>, json: bool) -> anyhow::Result<()> {
    let client = inspect::connect(database_url).await?;
    let database = lab_db::database_name(database_url)?;
    let status = inspect::status(&client, &database, params).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print(&status);
    }
    Ok(())
}
