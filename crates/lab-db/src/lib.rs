//! The lab database: schema migrations, the pinned planner settings, and connection helpers.
//!
//! Two drivers, each where it is strongest:
//! - `sqlx` runs the migrations (`migrations/`, embedded at compile time, so a binary carries its
//!   schema) and labctl's administrative statements.
//! - `tokio-postgres` behind `deadpool-postgres` is entity-service's hot path: statements are
//!   prepared explicitly and cached per pooled connection (`prepare_cached`), which is exactly the
//!   behaviour the stale-statistics trigger depends on (a per-connection generic plan after five
//!   executions); the pool reports how many callers are *waiting* for a connection, which sqlx's
//!   pool does not; and a query can be cancelled server-side with a cancel token.
//!
//! # Layout
//! - this file: migrations, [`prepare`] (with [`PINNED_SETTINGS`]), pools, [`queries`].
//! - [`inspect`]: the hot statement's plan as pooled connections run it, the statistics and sizes
//!   of `entities` (`labctl db status`, entity-service's `entity_db_*` gauges).

pub mod inspect;

use std::str::FromStr;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Planner settings the lab pins on its database so the stale-statistics plan flip is
/// reproducible (../shared/design/stale-stats-trigger.md). Each is the PostgreSQL default, pinned
/// because a tuned server (SSD `random_page_cost = 1.1`, a large `work_mem`) would not flip.
pub const PINNED_SETTINGS: &[(&str, &str, &str)] = &[
    (
        "random_page_cost",
        "4",
        "the default; at 1.1 (common SSD tuning) the bitmap plan never wins and nothing flips",
    ),
    (
        "plan_cache_mode",
        "auto",
        "the default; pooled connections switch to the generic plan after 5 executions",
    ),
    (
        "work_mem",
        "4MB",
        "the default; states the memory the bitmap and the top-N sort get",
    ),
];

/// The database name in a URL, e.g. `retry_storm_lab` in `postgres://u@h:5432/retry_storm_lab`.
pub fn database_name(url: &str) -> anyhow::Result<String> {
    let opts =
        PgConnectOptions::from_str(url).with_context(|| format!("invalid database URL {url:?}"))?;
    opts.get_database()
        .map(str::to_owned)
        .context("the database URL must name a database, e.g. postgres://postgres@127.0.0.1:5432/retry_storm_lab")
}

/// The services' own database roles (migrations/20261201000001_service_roles.sql): each
/// service's queries need only these grants.
pub const GATEWAY_ROLE: &str = "lab_gateway";
pub const ENTITY_SERVICE_ROLE: &str = "lab_entity_service";
pub const ENRICHMENT_ROLE: &str = "lab_enrichment";

/// `url` with its user replaced by `role` and `password` (None: no password, for PostgreSQL's
/// trust authentication on loopback, as the native lab runs it).
pub fn role_url(url: &str, role: &str, password: Option<&str>) -> anyhow::Result<String> {
    let mut u = url::Url::parse(url).with_context(|| format!("invalid database URL {url:?}"))?;
    u.set_username(role)
        .map_err(|()| anyhow::anyhow!("cannot set a user in the database URL {url:?}"))?;
    u.set_password(password)
        .map_err(|()| anyhow::anyhow!("cannot set a password in the database URL {url:?}"))?;
    Ok(u.to_string())
}

/// Create the database named in `url` if it does not exist (connecting to `postgres` to do so).
pub async fn create_database_if_missing(url: &str) -> anyhow::Result<()> {
    let name = database_name(url)?;
    let admin = PgConnectOptions::from_str(url)?.database("postgres");
    let mut conn = admin
        .connect()
        .await
        .with_context(|| format!("connecting to the postgres database to create {name:?}"))?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut conn)
            .await?;
    if !exists {
        // CREATE DATABASE cannot take a bind parameter; the name is quoted as an identifier.
        let stmt = format!("CREATE DATABASE {}", quote_ident(&name));
        if let Err(e) = conn.execute(stmt.as_str()).await {
            // Two test binaries racing to create the same database is fine.
            let duplicate = e
                .as_database_error()
                .and_then(|d| d.code())
                .is_some_and(|c| c == "42P04" || c == "23505");
            if !duplicate {
                return Err(e).with_context(|| format!("creating database {name:?}"));
            }
        }
    }
    conn.close().await.ok();
    Ok(())
}

/// Create (if needed), migrate and pin the lab database. Idempotent; safe on every start.
pub async fn prepare(url: &str) -> anyhow::Result<()> {
    create_database_if_missing(url).await?;
    let name = database_name(url)?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .with_context(|| format!("connecting to {name:?}"))?;
    run_migrations(url, &pool)
        .await
        .with_context(|| format!("migrating {name:?}"))?;
    for (setting, value, _why) in PINNED_SETTINGS {
        let stmt = format!(
            "ALTER DATABASE {} SET {setting} = '{value}'",
            quote_ident(&name)
        );
        pool.execute(stmt.as_str())
            .await
            .with_context(|| format!("pinning {setting}"))?;
    }
    pool.close().await;
    Ok(())
}

/// Apply the migrations not yet applied to an existing database (no create, no pinning): what
/// `labctl up` does so that a database prepared by an older checkout has the services' roles.
pub async fn migrate(url: &str) -> anyhow::Result<()> {
    let name = database_name(url)?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .with_context(|| {
            format!("connecting to {name:?} (prepare and seed it first: labctl seed)")
        })?;
    run_migrations(url, &pool)
        .await
        .with_context(|| format!("migrating {name:?}"))?;
    pool.close().await;
    Ok(())
}

/// The advisory lock every migration run holds on the cluster's `postgres` database.
const MIGRATIONS_LOCK: i64 = 0x7273_6c5f_726f_6c65; // "rsl_role"

/// Run the migrations on `pool` (the database in `url`) one database at a time across the
/// cluster. sqlx locks each database's migrations, but roles and their memberships are
/// cluster-wide: 20261201000001 grants pg_read_all_stats and 20261205000001 revokes it, and a
/// GRANT racing a REVOKE of the same membership in another database fails with "tuple
/// concurrently updated" (a test run migrates a database per test, in parallel). Advisory
/// locks are per database, so the lock is taken on the maintenance database, on a connection
/// of its own, for as long as the run lasts.
async fn run_migrations(url: &str, pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let admin = PgConnectOptions::from_str(url)?.database("postgres");
    let mut lock = admin
        .connect()
        .await
        .context("connecting to the cluster's postgres database for the migrations' lock")?;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATIONS_LOCK)
        .execute(&mut lock)
        .await
        .context("taking the migrations' lock")?;
    let result = match accept_amended(pool).await {
        Ok(()) => MIGRATOR.run(pool).await.map_err(anyhow::Error::from),
        Err(e) => Err(e),
    };
    // Closing the session releases the lock whatever happened.
    lock.close().await.ok();
    result
}

/// Migrations whose text changed after databases had applied it, each with the checksum
/// (SHA-384, hex) of every earlier text. sqlx refuses to run on a database whose applied
/// checksum differs from the embedded one ("was previously applied but has been modified");
/// an amendment listed here changes nothing a database that applied the earlier text lacks,
/// so such a database takes the new checksum instead (`git show REV:migrations/FILE | sha384sum`).
///
/// - 20261201000001: creates a service role only where it does not exist (an owner without
///   CREATEROLE, compose's and kind's `lab_owner`, is refused CREATE ROLE even for an existing
///   one); comments.
/// - 20261205000001: a comment (who owns the counting function).
pub const AMENDED: &[(i64, &str)] = &[
    (
        20261201000001,
        "9116e0fffe252ee8fd8ec720606b92599fb8cd506dc680bbb1059ff0660604afd782d65d208a9711bf52485e9d54fa67",
    ),
    (
        20261205000001,
        "1f57026b65adb0aaed3d32bf610718e4ac0dfb9b10e47b1016e91e2dcc4974e168b5f5dc50cd45be939d0f66a8c23eff",
    ),
];

/// Give every migration in [`AMENDED`] applied with an earlier text its current checksum.
async fn accept_amended(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let applied: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    if !applied {
        return Ok(());
    }
    for &(version, earlier) in AMENDED {
        let now = MIGRATOR
            .iter()
            .find(|m| m.version == version)
            .with_context(|| format!("amended migration {version} is not embedded"))?;
        sqlx::query(
            "UPDATE _sqlx_migrations SET checksum = $1 \
             WHERE version = $2 AND encode(checksum, 'hex') = $3",
        )
        .bind(now.checksum.as_ref())
        .bind(version)
        .bind(earlier)
        .execute(pool)
        .await
        .with_context(|| format!("accepting the amended migration {version}"))?;
    }
    Ok(())
}

/// Drop the database named in `url` (tests clean up with this).
pub async fn drop_database(url: &str) -> anyhow::Result<()> {
    let name = database_name(url)?;
    let admin = PgConnectOptions::from_str(url)?.database("postgres");
    let mut conn = admin.connect().await?;
    let stmt = format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        quote_ident(&name)
    );
    conn.execute(stmt.as_str()).await?;
    conn.close().await.ok();
    Ok(())
}

/// Whether a service may connect as a PostgreSQL superuser. Services run as their own
/// least-privilege roles ([`GATEWAY_ROLE`], [`ENTITY_SERVICE_ROLE`], [`ENRICHMENT_ROLE`]): a
/// superuser's connection in an internet-facing process is every table, every role's password
/// hash and `COPY ... TO PROGRAM` away from an attacker. `Allow` is for test harnesses that run a
/// service against a database without the roles (`database.allow_superuser = true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Superuser {
    Refuse,
    Allow,
}

impl Superuser {
    /// From a service's `database.allow_superuser` setting.
    pub fn allowed(allow: bool) -> Self {
        if allow {
            Superuser::Allow
        } else {
            Superuser::Refuse
        }
    }
}

/// A connection was opened as a superuser by a service that refuses to run as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuperuserRefused {
    pub role: String,
}

impl std::fmt::Display for SuperuserRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "connected to PostgreSQL as {:?}, a superuser: a service runs as its own \
             least-privilege role ({GATEWAY_ROLE}, {ENTITY_SERVICE_ROLE} or {ENRICHMENT_ROLE}, \
             created by `labctl db prepare`); put that role in database.url \
             (database.allow_superuser = true is for test harnesses only)",
            self.role
        )
    }
}

impl std::error::Error for SuperuserRefused {}

/// The session's role, and whether PostgreSQL counts it a superuser (its own `is_superuser`
/// setting, which also covers a role that became one by `SET ROLE`).
const WHO_AM_I: &str = "SELECT current_user::text, current_setting('is_superuser') = 'on'";

/// `Err` when the tokio-postgres session `client` is a superuser's and `policy` refuses it.
pub async fn check_superuser(
    client: &tokio_postgres::Client,
    policy: Superuser,
) -> Result<(), CheckError> {
    if policy == Superuser::Allow {
        return Ok(());
    }
    let row = client
        .query_one(WHO_AM_I, &[])
        .await
        .map_err(CheckError::Db)?;
    if row.get::<_, bool>(1) {
        return Err(CheckError::Refused(SuperuserRefused { role: row.get(0) }));
    }
    Ok(())
}

/// `Err` when the sqlx connection `conn` is a superuser's and `policy` refuses it (the gateway's
/// pool checks every new connection with this, in `after_connect`).
pub async fn check_superuser_sqlx(
    conn: &mut PgConnection,
    policy: Superuser,
) -> Result<(), sqlx::Error> {
    if policy == Superuser::Allow {
        return Ok(());
    }
    let (role, superuser): (String, bool) = sqlx::query_as(WHO_AM_I).fetch_one(conn).await?;
    if superuser {
        return Err(sqlx::Error::Configuration(Box::new(SuperuserRefused {
            role,
        })));
    }
    Ok(())
}

/// Why a connection check did not pass.
#[derive(Debug)]
pub enum CheckError {
    Refused(SuperuserRefused),
    Db(tokio_postgres::Error),
}

/// How long a service waits at start for its first connection, to refuse a superuser before it
/// serves. PostgreSQL not answering within it does not stop the service (it starts and connects
/// lazily: shallow readiness), and every connection opened later is checked all the same. 2 s: a
/// local or in-cluster connection takes milliseconds; a database still starting is not waited
/// for longer than a readiness probe's period.
pub const START_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// At start: open one pooled connection (checked by the pool's hook) and stop with
/// [`SuperuserRefused`] if it is a superuser's; any other outcome lets the service start.
pub async fn refuse_superuser_at_start(pool: &deadpool_postgres::Pool) -> anyhow::Result<()> {
    use deadpool_postgres::{HookError, PoolError};
    let found = tokio::time::timeout(START_CHECK, pool.get()).await;
    start_check(found.map(|r| match r {
        Ok(_) => Ok(()),
        Err(PoolError::PostCreateHook(HookError::Message(m))) => Err(Found::Refused(m.into())),
        Err(e) => Err(Found::Unreachable(e.to_string())),
    }))
}

/// [`refuse_superuser_at_start`] for a sqlx pool whose `after_connect` runs
/// [`check_superuser_sqlx`] (the gateway's). One connection of the pool's own options, outside
/// the pool: sqlx retries a failed `after_connect` until its acquire timeout and then says only
/// "timed out", which would hide the reason.
pub async fn refuse_superuser_at_start_sqlx(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let check = async {
        let mut conn = pool.connect_options().connect().await?;
        let checked = check_superuser_sqlx(&mut conn, Superuser::Refuse).await;
        conn.close().await.ok();
        checked
    };
    let found = tokio::time::timeout(START_CHECK, check).await;
    start_check(found.map(|r| match r {
        Ok(()) => Ok(()),
        Err(sqlx::Error::Configuration(e)) if e.is::<SuperuserRefused>() => {
            Err(Found::Refused(e.to_string()))
        }
        Err(e) => Err(Found::Unreachable(e.to_string())),
    }))
}

/// What a start-up check found short of a checked connection.
enum Found {
    Refused(String),
    Unreachable(String),
}

/// A superuser refused stops the service; PostgreSQL unreachable or silent lets it start (every
/// later connection is checked all the same).
fn start_check(
    found: Result<Result<(), Found>, tokio::time::error::Elapsed>,
) -> anyhow::Result<()> {
    match found {
        Ok(Ok(())) => Ok(()),
        Ok(Err(Found::Refused(why))) => anyhow::bail!("{why}"),
        Ok(Err(Found::Unreachable(e))) => {
            tracing::warn!(error = %e, "PostgreSQL not reachable at start; the role is checked on every connection");
            Ok(())
        }
        Err(_) => {
            tracing::warn!(
                "PostgreSQL did not answer at start; the role is checked on every connection"
            );
            Ok(())
        }
    }
}

/// A deadpool of tokio-postgres connections, `size` connections at most, waiting at most
/// `wait_timeout` for a free one (None: wait as long as the caller's future lives).
/// Connections carry `application_name` so `pg_stat_activity` tells whose query is running.
/// Every new connection is checked against `superuser` before the pool hands it out.
pub fn hot_path_pool(
    url: &str,
    application_name: &str,
    size: usize,
    wait_timeout: Option<std::time::Duration>,
    superuser: Superuser,
) -> anyhow::Result<deadpool_postgres::Pool> {
    let mut pg: tokio_postgres::Config = url
        .parse()
        .with_context(|| format!("invalid database URL {url:?}"))?;
    if pg.get_application_name().is_none() {
        pg.application_name(application_name);
    }
    let mgr = deadpool_postgres::Manager::from_config(
        pg,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            // Fast: the pool only checks that the connection is not closed. A round trip per
            // checkout would add a query per request to the service under study. And it keeps
            // the session as it was: entity-service remembers each connection's
            // statement_timeout (services/entity-service/src/session.rs), which a recycling
            // that resets sessions (`Clean`: DISCARD ALL) would silently undo.
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let pool = deadpool_postgres::Pool::builder(mgr)
        .max_size(size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(wait_timeout)
        .create_timeout(Some(std::time::Duration::from_secs(5)))
        .post_create(deadpool_postgres::Hook::async_fn(move |client, _| {
            Box::pin(async move {
                match check_superuser(client, superuser).await {
                    Ok(()) => Ok(()),
                    Err(CheckError::Refused(r)) => {
                        tracing::error!(role = %r.role, "{r}");
                        Err(deadpool_postgres::HookError::message(r.to_string()))
                    }
                    Err(CheckError::Db(e)) => Err(deadpool_postgres::HookError::Backend(e)),
                }
            })
        }))
        .build()
        .context("building the PostgreSQL pool")?;
    Ok(pool)
}

/// Quote an SQL identifier (`"` doubled).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Open one sqlx connection (administrative statements, labctl).
pub async fn connect(url: &str) -> anyhow::Result<PgConnection> {
    PgConnection::connect(url)
        .await
        .with_context(|| format!("connecting to {url}"))
}

pub use sqlx::PgConnection;

/// Enrichment rows, and distinct (tenant, document) among them, of the documents whose
/// `doc_<tenant>_<index>` index is in `docs` (one load run's documents, `lab_load`'s
/// `stream_documents`): what the run left in the database, for counting against its 200s.
pub async fn enrichment_rows(
    conn: &mut PgConnection,
    docs: std::ops::Range<u64>,
) -> anyhow::Result<(i64, i64)> {
    let lo = i64::try_from(docs.start).context("document index range beyond bigint")?;
    let hi = i64::try_from(docs.end).context("document index range beyond bigint")?;
    let row: (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT (tenant_id, doc_id)) FROM enrichment_documents \
         WHERE doc_id ~ '^doc_[0-9]+_[0-9]+$' \
         AND split_part(doc_id, '_', 3)::numeric >= $1 \
         AND split_part(doc_id, '_', 3)::numeric < $2",
    )
    .bind(lo)
    .bind(hi)
    .fetch_one(conn)
    .await
    .context("counting the run's enrichment rows")?;
    Ok(row)
}

/// The statements entity-service prepares on every pooled connection. They live here so that
/// labctl can `EXPLAIN` the very text the service runs (a plan belongs to a statement's text).
pub mod queries {
    /// Exact match of a batch of normalized spans for one tenant; the most popular entity wins
    /// when two share a normalized name. Index: `(tenant_id, normalized_name)`.
    pub const EXACT_MATCH: &str = "\
SELECT DISTINCT ON (normalized_name) normalized_name, id, canonical_name, kind
FROM entities
WHERE tenant_id = $1 AND normalized_name = ANY($2)
ORDER BY normalized_name, popularity DESC";

    /// The hot candidate lookup: the tenant's 20 most popular entities of a kind in the request's
    /// locale (or with none). With statistics on `locale` the planner walks
    /// `(tenant_id, kind, popularity DESC)` and stops after 20 rows; without them it expects ~1
    /// row, stops trusting the early exit and reads the tenant's whole (tenant, kind) range with a
    /// Bitmap Heap Scan and a top-N sort (../shared/design/stale-stats-trigger.md). Columns are
    /// named: a cached `SELECT *` fails with "cached plan must not change result type" after
    /// `ADD COLUMN` instead of slowing down.
    /// The orchestrators' boot warm-up: the most popular entities of all tenants (postmortem: "a
    /// warm-up path that pre-populates the top 5,000 entities on boot"). No index orders by
    /// popularity alone, so this is one sequential scan with a top-N sort — the same plan with or
    /// without `locale`'s statistics, once per orchestrator start.
    pub const POPULAR: &str = "\
SELECT tenant_id, normalized_name, id, canonical_name, kind
FROM entities
ORDER BY popularity DESC, id
LIMIT $1";

    pub const CANDIDATE_LOOKUP: &str = "\
SELECT id, canonical_name, normalized_name, kind, popularity
FROM entities
WHERE tenant_id = $1 AND kind = $2 AND (locale = $3 OR locale IS NULL)
ORDER BY popularity DESC
LIMIT 20";
}

#[cfg(test)]
mod tests {
    #[test]
    fn role_url_replaces_the_user_and_the_password() {
        assert_eq!(
            super::role_url(
                "postgres://postgres:secret@127.0.0.1:5432/lab?sslmode=disable",
                "lab_gateway",
                None
            )
            .unwrap(),
            "postgres://lab_gateway@127.0.0.1:5432/lab?sslmode=disable"
        );
        assert_eq!(
            super::role_url("postgres://postgres@h/lab", "lab_enrichment", Some("p w")).unwrap(),
            "postgres://lab_enrichment:p%20w@h/lab"
        );
        assert!(super::role_url("not a url", "r", None).is_err());
    }
}
