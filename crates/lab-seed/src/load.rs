//! Loading the planned data set into PostgreSQL in one transaction.
//!
//! `COPY ... FROM STDIN` (text format) through tokio-postgres, with rows generated on a blocking
//! thread and streamed in chunks while PostgreSQL parses the previous ones. Before the entity
//! COPY the table's secondary indexes and foreign key are dropped and afterwards recreated from
//! their own catalog definitions (`pg_get_indexdef`, `pg_get_constraintdef`), all inside the same
//! transaction: a bulk index build is several times faster than a million random B-tree inserts,
//! and if anything fails the rollback restores the schema exactly as the migrations left it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use futures::SinkExt;
use indicatif::{ProgressBar, ProgressStyle};
use tokio_postgres::{Client, NoTls, Transaction};

use super::keys::IssuedKey;
use super::plan::{format_timestamp, Plan};

/// Rows per COPY chunk: ~2 MB of text, large enough to amortize the channel and small enough
/// for a smooth progress bar.
const ROWS_PER_CHUNK: usize = 10_000;
/// Chunks buffered between the generator thread and the COPY stream (~8 MB in flight).
const CHUNKS_IN_FLIGHT: usize = 4;
/// Sort memory for the index rebuild, this transaction only: one 1M-row index sorts in memory
/// instead of spilling (PostgreSQL's default is 64MB).
const MAINTENANCE_WORK_MEM: &str = "256MB";

const ENTITY_COLUMNS: &str = "id, tenant_id, kind, canonical_name, normalized_name, external_ref, \
                              source, popularity, attributes, created_at, updated_at";

/// How long each part of the load took.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadTimings {
    pub(crate) tenants_and_keys: Duration,
    pub(crate) entities_copy: Duration,
    pub(crate) indexes: Duration,
}

/// Open a tokio-postgres connection; the connection task ends when the client is dropped.
pub(crate) async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.context(
        "connecting to PostgreSQL to load the seed; check --database-url and that the server is up",
    )?;
    // The connection future drives the socket; it finishes (and this task with it) when the
    // client is dropped, so nothing outlives the seed run.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("seed: PostgreSQL connection closed with an error: {e}");
        }
    });
    Ok(client)
}

/// Load tenants, API key hashes and entities in one transaction.
pub(crate) async fn load(
    client: &mut Client,
    plan: &Arc<Plan>,
    keys: &[IssuedKey],
    force: bool,
    progress: bool,
) -> anyhow::Result<LoadTimings> {
    let mut timings = LoadTimings::default();
    let tx = client
        .transaction()
        .await
        .context("starting the seed transaction")?;
    // Serialize concurrent seeds and keep readers off half-loaded tables.
    tx.batch_execute("LOCK TABLE tenants, api_keys, entities IN ACCESS EXCLUSIVE MODE")
        .await
        .context(
            "locking tenants, api_keys and entities; is another seed or a backfill running?",
        )?;
    if force {
        // What enrichment derived from the old data set goes with it: its rows name entity ids
        // that a reseed of another size or seed gives to other entities, and its tables only
        // grow (after a day of runs the co-occurrence pairs were 962 MB against 128 MB of shared
        // buffers, and every upsert of them made PostgreSQL dearer for the lookups too: issue 29).
        tx.batch_execute(
            "TRUNCATE entities, api_keys, tenants, \
             enrichment_documents, tenant_entity_mentions, entity_cooccurrence",
        )
        .await
        .context(
            "wiping entities, api_keys, tenants and the enrichment tables (--force); if another \
             table references them, empty it first or seed a fresh database",
        )?;
    } else {
        refuse_if_seeded(&tx).await?;
    }

    let started = Instant::now();
    copy_chunk(
        &tx,
        "COPY tenants (id, name, plan, rate_limit_rps, created_at) FROM STDIN",
        tenants_text(plan),
    )
    .await
    .context("loading tenants")?;
    copy_chunk(
        &tx,
        "COPY api_keys (key_id, tenant_id, key_sha256, created_at) FROM STDIN",
        keys_text(plan, keys),
    )
    .await
    .context("loading api_keys")?;
    timings.tenants_and_keys = started.elapsed();

    let saved = drop_secondary_structures(&tx).await?;
    let started = Instant::now();
    copy_entities(&tx, plan, progress).await?;
    timings.entities_copy = started.elapsed();

    let started = Instant::now();
    let spinner = spinner(
        progress,
        "rebuilding entity indexes and the tenant foreign key",
    );
    tx.batch_execute(&format!(
        "SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'"
    ))
    .await
    .context("raising maintenance_work_mem for the index rebuild")?;
    for statement in &saved {
        tx.batch_execute(statement)
            .await
            .with_context(|| format!("recreating the schema after the bulk load: {statement}"))?;
    }
    tx.commit()
        .await
        .context("committing the seed transaction")?;
    spinner.finish_and_clear();
    timings.indexes = started.elapsed();
    Ok(timings)
}

async fn refuse_if_seeded(tx: &Transaction<'_>) -> anyhow::Result<()> {
    let row = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM entities), EXISTS (SELECT 1 FROM tenants), \
                    EXISTS (SELECT 1 FROM api_keys)",
            &[],
        )
        .await
        .context("checking whether the database is already seeded")?;
    let (entities, tenants, keys): (bool, bool, bool) = (row.get(0), row.get(1), row.get(2));
    if entities || tenants || keys {
        bail!(
            "the database is already seeded (entities: {}, tenants: {}, api_keys: {}); re-run \
             with --force to wipe and reseed it, or point --database-url at a fresh database",
            non_empty(entities),
            non_empty(tenants),
            non_empty(keys)
        );
    }
    Ok(())
}

fn non_empty(b: bool) -> &'static str {
    if b {
        "rows present"
    } else {
        "empty"
    }
}

/// Drop the entity table's indexes that back no constraint, and its foreign keys; return the
/// statements that recreate them exactly (indexes first, then the foreign keys).
async fn drop_secondary_structures(tx: &Transaction<'_>) -> anyhow::Result<Vec<String>> {
    let indexes = tx
        .query(
            "SELECT quote_ident(n.nspname) || '.' || quote_ident(i.relname), pg_get_indexdef(i.oid)
             FROM pg_index x
             JOIN pg_class i ON i.oid = x.indexrelid
             JOIN pg_namespace n ON n.oid = i.relnamespace
             WHERE x.indrelid = 'entities'::regclass
               AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)
             ORDER BY i.relname",
            &[],
        )
        .await
        .context("reading the entity indexes from the catalog")?;
    let foreign_keys = tx
        .query(
            "SELECT quote_ident(conname), pg_get_constraintdef(oid)
             FROM pg_constraint
             WHERE conrelid = 'entities'::regclass AND contype = 'f'
             ORDER BY conname",
            &[],
        )
        .await
        .context("reading the entity foreign keys from the catalog")?;
    let mut recreate = Vec::with_capacity(indexes.len() + foreign_keys.len());
    for row in &indexes {
        let (name, definition): (String, String) = (row.get(0), row.get(1));
        tx.batch_execute(&format!("DROP INDEX {name}"))
            .await
            .with_context(|| format!("dropping {name} for the bulk load"))?;
        recreate.push(definition);
    }
    for row in &foreign_keys {
        let (name, definition): (String, String) = (row.get(0), row.get(1));
        tx.batch_execute(&format!("ALTER TABLE entities DROP CONSTRAINT {name}"))
            .await
            .with_context(|| format!("dropping {name} for the bulk load"))?;
        recreate.push(format!(
            "ALTER TABLE entities ADD CONSTRAINT {name} {definition}"
        ));
    }
    Ok(recreate)
}

async fn copy_chunk(tx: &Transaction<'_>, statement: &str, data: Bytes) -> anyhow::Result<u64> {
    let sink = tx.copy_in::<_, Bytes>(statement).await?;
    futures::pin_mut!(sink);
    sink.send(data).await?;
    Ok(sink.as_mut().finish().await?)
}

/// Stream every entity row in id order: rows are rendered on a blocking thread while this task
/// feeds the previous chunks to PostgreSQL.
async fn copy_entities(
    tx: &Transaction<'_>,
    plan: &Arc<Plan>,
    progress: bool,
) -> anyhow::Result<()> {
    let total = plan.entity_count();
    let bar = if progress {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{msg:9} [{bar:40}] {human_pos}/{human_len} rows  {per_sec}  eta {eta}",
            )
            .expect("a valid progress template")
            .progress_chars("=> "),
        );
        bar.set_message("entities");
        bar
    } else {
        ProgressBar::hidden()
    };

    let (sender, mut receiver) = tokio::sync::mpsc::channel::<(Bytes, u64)>(CHUNKS_IN_FLIGHT);
    let producer_plan = Arc::clone(plan);
    let producer = tokio::task::spawn_blocking(move || {
        let plan = producer_plan;
        let total = plan.entity_count() as usize;
        let mut position = 0;
        while position < total {
            let end = (position + ROWS_PER_CHUNK).min(total);
            let mut buf = BytesMut::with_capacity((end - position) * 256);
            for p in position..end {
                let (t, rank) = plan.at_position(p);
                write_entity_line(&mut buf, &plan, t, rank);
            }
            if sender
                .blocking_send((buf.freeze(), (end - position) as u64))
                .is_err()
            {
                // The COPY side failed and dropped the receiver; its error is the one to report.
                return;
            }
            position = end;
        }
    });

    let sink = tx
        .copy_in::<_, Bytes>(&format!("COPY entities ({ENTITY_COLUMNS}) FROM STDIN"))
        .await
        .context("starting COPY entities")?;
    futures::pin_mut!(sink);
    while let Some((chunk, rows)) = receiver.recv().await {
        sink.send(chunk)
            .await
            .context("streaming entity rows to COPY")?;
        bar.inc(rows);
    }
    let copied = sink
        .as_mut()
        .finish()
        .await
        .context("finishing COPY entities")?;
    producer
        .await
        .context("the entity row generator panicked")?;
    bar.finish_and_clear();
    anyhow::ensure!(
        copied == total,
        "COPY entities stored {copied} rows, expected {total}"
    );
    Ok(())
}

fn write_entity_line(buf: &mut BytesMut, plan: &Plan, t: usize, rank: u64) {
    let row = plan.row(t, rank);
    let fields: [&str; 11] = [
        &row.id.to_string(),
        &row.tenant_id.to_string(),
        row.kind.as_str(),
        &row.canonical_name,
        &row.normalized_name,
        &row.external_ref,
        row.source,
        &row.popularity.to_string(),
        &row.attributes,
        &format_timestamp(row.created_at),
        &format_timestamp(row.updated_at),
    ];
    write_line(buf, &fields);
}

fn tenants_text(plan: &Plan) -> Bytes {
    let mut buf = BytesMut::new();
    for t in &plan.tenants {
        write_line(
            &mut buf,
            &[
                &t.id.to_string(),
                &t.name,
                t.plan,
                &t.rate_limit_rps.to_string(),
                &format_timestamp(t.created_at),
            ],
        );
    }
    buf.freeze()
}

fn keys_text(plan: &Plan, keys: &[IssuedKey]) -> Bytes {
    let mut buf = BytesMut::new();
    for (k, t) in keys.iter().zip(&plan.tenants) {
        // bytea in hex form; `\x` is written as `\\x` because COPY text unescapes backslashes.
        let hash = format!("\\x{}", hex::encode(k.sha256));
        write_line(
            &mut buf,
            &[
                &k.record.key_id,
                &k.record.tenant_id.to_string(),
                &hash,
                &format_timestamp(t.created_at),
            ],
        );
    }
    buf.freeze()
}

/// One line of COPY text format: fields separated by tabs, backslash escapes for the characters
/// the format reserves.
fn write_line(buf: &mut BytesMut, fields: &[&str]) {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            buf.extend_from_slice(b"\t");
        }
        escape_into(buf, field);
    }
    buf.extend_from_slice(b"\n");
}

fn escape_into(buf: &mut BytesMut, field: &str) {
    if !field.contains(['\\', '\t', '\n', '\r']) {
        buf.extend_from_slice(field.as_bytes());
        return;
    }
    for c in field.chars() {
        match c {
            '\\' => buf.extend_from_slice(b"\\\\"),
            '\t' => buf.extend_from_slice(b"\\t"),
            '\n' => buf.extend_from_slice(b"\\n"),
            '\r' => buf.extend_from_slice(b"\\r"),
            c => {
                let mut tmp = [0u8; 4];
                buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
            }
        }
    }
}

/// `ANALYZE` the seeded tables: `entities.locale` gets statistics while it is 100% NULL, the
/// state the stale-statistics trigger starts from.
pub(crate) async fn analyze(client: &Client) -> anyhow::Result<Option<f64>> {
    client
        .batch_execute("ANALYZE tenants, api_keys, entities")
        .await
        .context("analyzing tenants, api_keys and entities")?;
    let row = client
        .query_opt(
            "SELECT null_frac::float8 FROM pg_stats
             WHERE schemaname = current_schema() AND tablename = 'entities' AND attname = 'locale'",
            &[],
        )
        .await
        .context("reading the statistics of entities.locale")?;
    Ok(row.map(|r| r.get(0)))
}

pub(crate) fn spinner(progress: bool, message: &'static str) -> ProgressBar {
    if !progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_message(message);
    // Redraw often enough to look alive, rarely enough to cost nothing.
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_text_escapes_reserved_characters() {
        let mut buf = BytesMut::new();
        write_line(&mut buf, &["a\tb", "c\\d", "e\nf", "Müller GmbH"]);
        assert_eq!(&buf[..], "a\\tb\tc\\\\d\te\\nf\tMüller GmbH\n".as_bytes());
    }

    #[test]
    fn entity_lines_have_eleven_fields() {
        let plan = Plan::build(1, 100, 2).unwrap();
        let mut buf = BytesMut::new();
        write_entity_line(&mut buf, &plan, 0, 0);
        let line = std::str::from_utf8(&buf).unwrap();
        assert_eq!(
            line.trim_end_matches('\n').split('\t').count(),
            11,
            "{line}"
        );
    }
}
