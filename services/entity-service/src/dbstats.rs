//! What the postmortem's DBA found at 11:29 ("Step 2: Is the datastore healthy?"), exported
//! continuously so a dashboard shows it at 09:41: how stale the statistics of `entities` are,
//! its dead tuples, whether the hot statement's plan is still an index scan, and how many
//! connections to the lab database are busy.
//!
//! A background task refreshes the gauges every [`REFRESH`] on a connection of its own (never a
//! pooled one: it must not take a slot from requests, nor touch their statement caches), with a
//! short `statement_timeout`, so a scrape never waits on PostgreSQL and a slow database cannot
//! pile up probes. The facts come from [`lab_db::inspect`], the same code as `labctl db status`.

use std::time::Duration;

use lab_core::metrics::Metrics;
use lab_db::inspect;
use prometheus::{Gauge, IntGauge, IntGaugeVec};

/// How often the facts are refreshed. A plan flip shows within one refresh; each refresh costs
/// seven executions of the hot statement plus two catalog queries (< 10 ms even when the plan
/// is the slow one), so every 5 s is noise next to the service's own traffic.
pub const REFRESH: Duration = Duration::from_secs(5);

/// How often this replica's own backends are counted in `pg_stat_activity`: every second, like
/// the game day's scrape, because the pool's gauge can lie exactly when it matters — a query
/// whose caller went away (no statement_timeout: legacy) keeps running in PostgreSQL after its
/// pooled connection was handed back. One catalog query, well under a millisecond.
pub const BACKENDS_REFRESH: Duration = Duration::from_secs(1);

/// Bound on each probe query: a healthy probe takes milliseconds; 2 s keeps a stuck database
/// from holding the probe connection (and a server backend) for longer than a refresh or two.
const STATEMENT_TIMEOUT: &str = "2s";

#[derive(Clone)]
pub struct DbStatsMetrics {
    seconds_since_analyze: Gauge,
    dead_tuples: IntGauge,
    modified_since_analyze: IntGauge,
    hot_plan_index_scan: IntGauge,
    active_connections: IntGauge,
    /// `entity_db_backends{state}`: this replica's own PostgreSQL backends, by
    /// `pg_stat_activity.state` (`active`, `idle_in_transaction`, `idle`).
    backends: IntGaugeVec,
    up: IntGauge,
}

impl DbStatsMetrics {
    pub fn new(metrics: &Metrics) -> Self {
        let gauge = |name: &str, help: &str| {
            metrics.register(Gauge::new(name, help).expect("valid metric"))
        };
        Self {
            seconds_since_analyze: gauge(
                "entity_db_seconds_since_analyze",
                "Seconds since entities was last analyzed (manual or auto); +Inf if never",
            ),
            dead_tuples: metrics.gauge(
                "entity_db_dead_tuples",
                "Dead tuples in entities (pg_stat_user_tables.n_dead_tup)",
            ),
            modified_since_analyze: metrics.gauge(
                "entity_db_modified_since_analyze",
                "Rows of entities modified since its last analyze (n_mod_since_analyze)",
            ),
            hot_plan_index_scan: metrics.gauge(
                "entity_db_hot_plan_index_scan",
                "1 when the hot candidate lookup's plan (prepared, after 6 executions) is an index scan, 0 when not",
            ),
            active_connections: metrics.gauge(
                "entity_db_active_connections",
                "Client connections to the lab database that are not idle (pg_stat_activity), this probe excluded",
            ),
            backends: metrics.register(
                IntGaugeVec::new(
                    prometheus::Opts::new(
                        "entity_db_backends",
                        "This replica's PostgreSQL backends by pg_stat_activity state (PostgreSQL's \
                         own view: a query still running after its pooled connection was handed \
                         back counts here, not in entity_db_pool_connections)",
                    ),
                    &["state"],
                )
                .expect("valid metric"),
            ),
            up: metrics.gauge(
                "entity_db_stats_up",
                "1 when the last refresh of the entity_db_* database facts succeeded, the plan probe's included (the last full one, every 5 s); the other gauges keep their last values while 0",
            ),
        }
    }
}

/// Start the refresh task. It lives as long as the runtime (the service's process); it holds
/// no pooled connection and reconnects after any error. `application_name`: the name this
/// replica's pool gives its connections, whose backends it counts.
pub fn spawn(metrics: &Metrics, database_url: String, application_name: String) {
    let m = DbStatsMetrics::new(metrics);
    for state in ["active", "idle_in_transaction", "idle"] {
        m.backends.with_label_values(&[state]);
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(BACKENDS_REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut client: Option<tokio_postgres::Client> = None;
        let mut failing = false;
        // Did the last FULL refresh (the plan probe, the table's staleness) succeed? The 1 s
        // backends-only refreshes between two full ones cannot vouch for those gauges: they set
        // `up` from this, never to 1 on their own (a plan probe refused a grant every 5 s read
        // `up` 1 four seconds in five — issue 24).
        let mut full_ok = false;
        let every = (REFRESH.as_secs_f64() / BACKENDS_REFRESH.as_secs_f64()).round() as u64;
        let mut n: u64 = 0;
        loop {
            tick.tick().await;
            let full = n.is_multiple_of(every.max(1));
            n += 1;
            match refresh(&m, &database_url, &application_name, full, &mut client).await {
                Ok(()) => {
                    if failing {
                        tracing::info!("database facts (entity_db_*) refresh again");
                    }
                    failing = false;
                    full_ok |= full;
                    m.up.set(i64::from(full_ok));
                }
                Err(e) => {
                    // Once per outage, not every 5 s: the pool's own errors already page.
                    if !failing {
                        tracing::warn!(error = %format!("{e:#}"), "cannot refresh the entity_db_* database facts; they keep their last values and entity_db_stats_up is 0 until PostgreSQL answers");
                    }
                    failing = true;
                    full_ok = false; // up again only once a full refresh has succeeded
                    client = None;
                    m.up.set(0);
                }
            }
        }
    });
}

async fn refresh(
    m: &DbStatsMetrics,
    url: &str,
    application_name: &str,
    full: bool,
    client: &mut Option<tokio_postgres::Client>,
) -> anyhow::Result<()> {
    if client.as_ref().is_none_or(|c| c.is_closed()) {
        let c = inspect::connect(url).await?;
        c.batch_execute(&format!(
            "SET statement_timeout = '{STATEMENT_TIMEOUT}'; \
             SET application_name = 'entity-service dbstats'"
        ))
        .await?;
        *client = Some(c);
    }
    let c = client.as_ref().expect("connected above");
    let b = inspect::backends(c, application_name).await?;
    m.backends.with_label_values(&["active"]).set(b.active);
    m.backends
        .with_label_values(&["idle_in_transaction"])
        .set(b.idle_in_transaction);
    m.backends.with_label_values(&["idle"]).set(b.idle);
    if !full {
        return Ok(());
    }
    let table = inspect::table_status(c).await?;
    m.seconds_since_analyze
        .set(table.seconds_since_analyze.unwrap_or(f64::INFINITY));
    m.dead_tuples.set(table.n_dead_tup);
    m.modified_since_analyze.set(table.n_mod_since_analyze);
    m.active_connections
        .set(inspect::busy_connections(c).await?);
    let params = inspect::HotParams::typical(c).await?;
    let plan = inspect::hot_plan(c, &params).await?;
    m.hot_plan_index_scan.set(i64::from(plan.is_index_scan()));
    Ok(())
}
