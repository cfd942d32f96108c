//! What a DBA looks at when the hot lookup gets slow: the plan pooled connections run, how stale
//! the statistics of `entities` are, and how big it has grown. `labctl db status` prints these
//! facts and entity-service exports them as metrics, so both read the same queries.
//!
//! The plan is the one a long-lived pooled connection runs: the *exact* text of
//! [`crate::queries::CANDIDATE_LOOKUP`] is prepared, executed [`WARMUP_EXECUTIONS`] times (with
//! `plan_cache_mode = auto` PostgreSQL considers the generic plan from the 6th execution on), and
//! then `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE` shows the plan the next execution uses. Whether
//! that plan was the generic one is read from `pg_prepared_statements.generic_plans`.
//! (../shared/design/stale-stats-trigger.md, postmortem "Step 2: Is the datastore healthy?")

use anyhow::Context;
use serde::Serialize;
use tokio_postgres::{Client, NoTls};

use crate::queries;

/// Executions before the EXPLAIN: `plan_cache_mode = auto` plans the first five custom and only
/// then compares the generic plan's cost, so the 6th execution on is what a pooled connection
/// runs for the rest of its life.
pub const WARMUP_EXECUTIONS: usize = 6;

/// The SQL-level name of the statement this module prepares (deallocated afterwards).
const STATEMENT: &str = "lab_inspect_candidate_lookup";

/// Human-readable bytes (binary units, as `pg_size_pretty`).
pub fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 4] = ["B", "kB", "MB", "GB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Open a tokio-postgres connection whose driver task ends when the client is dropped.
pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.with_context(|| {
        format!(
            "connecting to {}; check the database URL and that PostgreSQL is up",
            crate::database_name(url).unwrap_or_else(|_| "the lab database".into())
        )
    })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "inspection connection closed");
        }
    });
    Ok(client)
}

/// The arguments the hot statement is executed with.
#[derive(Debug, Clone, Serialize)]
pub struct HotParams {
    pub tenant: i64,
    pub kind: String,
    pub locale: Option<String>,
}

impl HotParams {
    /// A real, typical request: the median-sized tenant (by id order the seed's tenants shrink
    /// from tenant 1, the largest, so the middle id is the median; its custom plans cost about
    /// what the generic plan does, so `auto` settles on the generic plan as it does for the
    /// service's mixed traffic), the commonest kind, and a locale the corpus sends.
    pub async fn typical(client: &Client) -> anyhow::Result<Self> {
        let row = client
            .query_opt(
                "SELECT id FROM tenants ORDER BY id
                 OFFSET (SELECT count(*) / 2 FROM tenants) LIMIT 1",
                &[],
            )
            .await
            .context("choosing a tenant for the hot statement")?
            .context("the database has no tenants; run `labctl seed` first")?;
        Ok(Self {
            tenant: row.get(0),
            kind: "organization".into(),
            locale: Some("de-DE".into()),
        })
    }
}

/// One node on the plan's main path (the first child of each node, from the top).
#[derive(Debug, Clone, Serialize)]
pub struct PlanNode {
    /// `Limit`, `Index Scan`, `Sort`, `Bitmap Heap Scan`, ...
    pub node_type: String,
    /// The index a scan uses, if any.
    pub index: Option<String>,
    /// The planner's row estimate.
    pub estimated_rows: f64,
    /// Rows the node really returned (per loop).
    pub actual_rows: f64,
    /// Rows thrown away by the node's filter or recheck.
    pub rows_removed: f64,
}

/// The plan of the hot statement as a pooled connection runs it.
#[derive(Debug, Clone, Serialize)]
pub struct HotPlan {
    pub params: HotParams,
    /// Was the explained execution the generic plan (true) or a custom one?
    pub generic: bool,
    pub nodes: Vec<PlanNode>,
    /// Server-side execution time of the explained execution.
    pub execution_ms: f64,
}

impl HotPlan {
    /// `Limit → Index Scan` / `Limit → Sort → Bitmap Heap Scan → Bitmap Index Scan`.
    pub fn shape(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.node_type.as_str())
            .collect::<Vec<_>>()
            .join(" → ")
    }

    /// The healthy plan: the ordered index is walked and the walk stops after 20 rows (no Sort).
    pub fn is_index_scan(&self) -> bool {
        let scan = self
            .nodes
            .iter()
            .any(|n| matches!(n.node_type.as_str(), "Index Scan" | "Index Only Scan"));
        scan && !self.nodes.iter().any(|n| n.node_type == "Sort")
    }

    /// The incident's plan: the tenant's whole (tenant, kind) range through a bitmap, then a
    /// top-N sort.
    pub fn is_bitmap_heap_scan(&self) -> bool {
        self.nodes.iter().any(|n| n.node_type == "Bitmap Heap Scan")
    }
}

/// Quote a string as an SQL literal (`standard_conforming_strings` is on since PostgreSQL 9.1).
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Prepare the hot statement on `client`, warm it up, and EXPLAIN the execution that follows.
/// `client` must be a connection of its own (not one whose statements the caller relies on): the
/// statement is deallocated afterwards.
pub async fn hot_plan(client: &Client, params: &HotParams) -> anyhow::Result<HotPlan> {
    // A statement left behind by an interrupted earlier call would make PREPARE fail.
    if client
        .query_opt(
            "SELECT 1 FROM pg_prepared_statements WHERE name = $1",
            &[&STATEMENT],
        )
        .await
        .context("reading pg_prepared_statements")?
        .is_some()
    {
        client
            .batch_execute(&format!("DEALLOCATE {STATEMENT}"))
            .await
            .context("deallocating a leftover hot statement")?;
    }
    // No parameter types: PostgreSQL infers them from the text, as it does for the service's
    // protocol-level prepare, so the plan cache entry is the same kind of object.
    client
        .batch_execute(&format!(
            "PREPARE {STATEMENT} AS {}",
            queries::CANDIDATE_LOOKUP
        ))
        .await
        .context("preparing the hot statement; is the database migrated (`labctl db prepare`)?")?;
    let args = format!(
        "{STATEMENT}({}, {}, {})",
        params.tenant,
        literal(&params.kind),
        params.locale.as_deref().map_or("NULL".into(), literal)
    );
    for _ in 0..WARMUP_EXECUTIONS {
        client
            .batch_execute(&format!("EXECUTE {args}"))
            .await
            .context("executing the hot statement")?;
    }
    let generic_before = generic_plans(client).await?;
    // EXPLAIN (FORMAT JSON) returns a json column, which tokio-postgres decodes only with its
    // serde feature; the simple-query protocol hands it over as text.
    let messages = client
        .simple_query(&format!("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {args}"))
        .await
        .context("explaining the hot statement")?;
    let generic = generic_plans(client).await? > generic_before;
    client
        .batch_execute(&format!("DEALLOCATE {STATEMENT}"))
        .await
        .context("deallocating the hot statement")?;
    let text = messages
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .context("EXPLAIN returned no rows")?;
    let doc: serde_json::Value = serde_json::from_str(&text).context("parsing EXPLAIN's JSON")?;
    let top = &doc[0];
    let mut nodes = Vec::new();
    let mut node = Some(&top["Plan"]);
    while let Some(n) = node {
        let num = |k: &str| n[k].as_f64().unwrap_or(0.0);
        nodes.push(PlanNode {
            node_type: n["Node Type"].as_str().unwrap_or("?").to_owned(),
            index: n["Index Name"].as_str().map(str::to_owned),
            estimated_rows: num("Plan Rows"),
            actual_rows: num("Actual Rows"),
            rows_removed: num("Rows Removed by Filter") + num("Rows Removed by Index Recheck"),
        });
        node = n["Plans"].get(0);
    }
    Ok(HotPlan {
        params: params.clone(),
        generic,
        nodes,
        execution_ms: top["Execution Time"].as_f64().unwrap_or(f64::NAN),
    })
}

async fn generic_plans(client: &Client) -> anyhow::Result<i64> {
    let row = client
        .query_one(
            "SELECT generic_plans FROM pg_prepared_statements WHERE name = $1",
            &[&STATEMENT],
        )
        .await
        .context("reading pg_prepared_statements")?;
    Ok(row.get(0))
}

/// `entities` as `pg_stat_user_tables`, `pg_stats` and the catalog see it.
#[derive(Debug, Clone, Serialize)]
pub struct TableStatus {
    pub n_live_tup: i64,
    pub n_dead_tup: i64,
    pub n_mod_since_analyze: i64,
    /// `n_tup_hot_upd`: updates that needed no new index entries.
    pub n_tup_hot_upd: i64,
    pub last_analyze: Option<String>,
    pub last_autoanalyze: Option<String>,
    pub last_vacuum: Option<String>,
    pub last_autovacuum: Option<String>,
    /// Seconds since the later of `last_analyze` and `last_autoanalyze`; None if never analyzed.
    pub seconds_since_analyze: Option<f64>,
    /// False when the table's `autovacuum_enabled` storage parameter is off (the backfill's
    /// "autovacuum is behind").
    pub autovacuum_enabled: bool,
    /// `locale`'s declared type (`character varying(8)` as the schema creates it).
    pub locale_type: String,
    /// Does `locale` have a `pg_stats` row? Without one the planner guesses 0.5% per condition.
    pub locale_has_stats: bool,
    pub locale_null_frac: Option<f32>,
    pub table_bytes: i64,
    pub indexes: Vec<IndexSize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct IndexSize {
    pub name: String,
    pub bytes: i64,
}

impl TableStatus {
    pub fn index_bytes(&self) -> i64 {
        self.indexes.iter().map(|i| i.bytes).sum()
    }
}

/// The facts about `entities` (cheap: catalog and statistics views only).
pub async fn table_status(client: &Client) -> anyhow::Result<TableStatus> {
    let row = client
        .query_opt(
            "SELECT s.n_live_tup, s.n_dead_tup, s.n_mod_since_analyze, s.n_tup_hot_upd,
                    s.last_analyze::text, s.last_autoanalyze::text,
                    s.last_vacuum::text, s.last_autovacuum::text,
                    extract(epoch FROM now() - greatest(s.last_analyze, s.last_autoanalyze))::float8,
                    NOT coalesce('autovacuum_enabled=false' = ANY (c.reloptions), false),
                    format_type(a.atttypid, a.atttypmod),
                    st.attname IS NOT NULL, st.null_frac,
                    pg_table_size(c.oid)
             FROM pg_class c
             JOIN pg_stat_user_tables s ON s.relid = c.oid
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'locale' AND NOT a.attisdropped
             LEFT JOIN pg_stats st
                    ON st.schemaname = s.schemaname AND st.tablename = 'entities' AND st.attname = 'locale'
             WHERE c.oid = 'entities'::regclass",
            &[],
        )
        .await
        .context("reading the statistics of entities; is the database migrated (`labctl db prepare`)?")?
        .context("entities has no locale column; migrate the database (`labctl db prepare`)")?;
    let indexes = client
        .query(
            "SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
             FROM pg_index i WHERE i.indrelid = 'entities'::regclass ORDER BY 1",
            &[],
        )
        .await
        .context("reading the index sizes of entities")?
        .into_iter()
        .map(|r| IndexSize {
            name: r.get(0),
            bytes: r.get(1),
        })
        .collect();
    Ok(TableStatus {
        n_live_tup: row.get(0),
        n_dead_tup: row.get(1),
        n_mod_since_analyze: row.get(2),
        n_tup_hot_upd: row.get(3),
        last_analyze: row.get(4),
        last_autoanalyze: row.get(5),
        last_vacuum: row.get(6),
        last_autovacuum: row.get(7),
        seconds_since_analyze: row.get(8),
        autovacuum_enabled: row.get(9),
        locale_type: row.get(10),
        locale_has_stats: row.get(11),
        locale_null_frac: row.get(12),
        table_bytes: row.get(13),
        indexes,
    })
}

/// Client connections to this database that are not idle (postmortem "Step 2": "200 of 200
/// connections active"), this connection excluded: every role's, through
/// `lab_busy_connections()` (migrations/20261205000001: the count without pg_read_all_stats,
/// which would show entity-service every session's query text).
pub async fn busy_connections(client: &Client) -> anyhow::Result<i64> {
    let row = client
        .query_one("SELECT lab_busy_connections()", &[])
        .await
        .context("reading lab_busy_connections() (pg_stat_activity)")?;
    Ok(row.get(0))
}

/// One application's backends in `pg_stat_activity`, by state.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Backends {
    pub active: i64,
    pub idle_in_transaction: i64,
    pub idle: i64,
}

/// The backends whose connections named themselves `application_name` (this connection
/// excluded): PostgreSQL's own view of a pool, which sees queries still running for a caller that
/// already handed its connection back.
pub async fn backends(client: &Client, application_name: &str) -> anyhow::Result<Backends> {
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'active'),
                    count(*) FILTER (WHERE state LIKE 'idle in transaction%'),
                    count(*) FILTER (WHERE state = 'idle')
             FROM pg_stat_activity
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&application_name],
        )
        .await
        .context("reading pg_stat_activity")?;
    Ok(Backends {
        active: row.get(0),
        idle_in_transaction: row.get(1),
        idle: row.get(2),
    })
}

/// Everything `labctl db status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct DbStatus {
    pub database: String,
    pub hot_plan: HotPlan,
    pub entities: TableStatus,
    pub busy_connections: i64,
    /// Bytes on disk of what enrichment has written (its three tables with their indexes): they
    /// only grow between reseeds, and their upserts compete with the lookups for shared buffers.
    pub enrichment_bytes: i64,
}

/// Collect [`DbStatus`] on `client` (`params`: None picks [`HotParams::typical`]).
pub async fn status(
    client: &Client,
    database: &str,
    params: Option<HotParams>,
) -> anyhow::Result<DbStatus> {
    let params = match params {
        Some(p) => p,
        None => HotParams::typical(client).await?,
    };
    Ok(DbStatus {
        database: database.to_owned(),
        hot_plan: hot_plan(client, &params).await?,
        entities: table_status(client).await?,
        busy_connections: busy_connections(client).await?,
        enrichment_bytes: enrichment_bytes(client).await?,
    })
}

/// [`DbStatus::enrichment_bytes`] (0 for a table not there: a database migrated before it).
async fn enrichment_bytes(client: &Client) -> anyhow::Result<i64> {
    let row = client
        .query_one(
            "SELECT coalesce(sum(pg_total_relation_size(t)), 0)::bigint \
             FROM unnest(ARRAY[to_regclass('enrichment_documents'), \
                 to_regclass('tenant_entity_mentions'), to_regclass('entity_cooccurrence')]) AS t",
            &[],
        )
        .await
        .context("reading the enrichment tables' size")?;
    Ok(row.get(0))
}
