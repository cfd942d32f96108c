//! The idempotent write of `doc.ingested` events.
//!
//! One transaction: record each event's key (tenant, document, request id), and only for the
//! events whose key that inserted, add their mentions to `tenant_entity_mentions` and their entity
//! pairs to `entity_cooccurrence`. Applied twice, the second transaction finds the ids and changes
//! nothing. Rows are upserted in key order, so two workers applying documents of the same tenant
//! lock shared rows in the same order and do not deadlock each other (a deadlock would still be
//! retried, see [`crate::worker`]).
//!
//! [`apply_batch`] writes many events in one transaction of three statements, their counts summed
//! per row first ([`apply`] is the batch of one). Why (issue 29): one event per transaction made
//! every event five round trips and a commit, and at the chain's maximum rate (600 documents/s)
//! PostgreSQL's enrichment backends took 0.35 of the machine's 2 cores, more than entity-service's
//! own lookups (`docs/reports/chain-limit.md`); the rows a batch changes are the same, the
//! statements and commits are shared.

use lab_api::events::DocIngested;

/// Why an event could not be applied.
#[derive(Debug)]
pub enum ApplyError {
    /// Retrying cannot help: the event's values do not fit the schema (a count beyond `integer`,
    /// a time PostgreSQL cannot represent; SQLSTATE classes 22 and 23). The worker counts it as
    /// `invalid` and moves on, so one bad event cannot stall its partition.
    Permanent(String),
    /// Anything else (PostgreSQL down, a deadlock, a lost connection): retry.
    Transient(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for ApplyError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.code().map(|c| c.code()) {
            Some(code) if code.starts_with("22") || code.starts_with("23") => {
                ApplyError::Permanent(e.to_string())
            }
            _ => ApplyError::Transient(e),
        }
    }
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::Permanent(m) => write!(f, "permanent: {m}"),
            ApplyError::Transient(e) => write!(f, "transient: {e}"),
        }
    }
}

fn int4(what: &str, v: i64) -> Result<i32, ApplyError> {
    i32::try_from(v).map_err(|_| ApplyError::Permanent(format!("{what} = {v} does not fit")))
}

/// What applying an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// First delivery: the counts now include it.
    New,
    /// Already applied (a redelivery): nothing changed.
    Duplicate,
}

/// Every event's key at once; the keys it inserted come back (a key twice in the batch, or
/// already there, is inserted at most once: `DO NOTHING` also skips a row that conflicts with one
/// this statement inserted).
const INSERT_DOCUMENTS: &str = "\
    INSERT INTO enrichment_documents \
        (event_id, tenant_id, doc_id, entities, mentions, unresolved, extracted_at, \
         kafka_partition, kafka_offset) \
    SELECT e, t, d, n, m, u, to_timestamp(x / 1000.0), p, o \
    FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int4[], $5::int4[], $6::int4[], \
                $7::float8[], $8::int4[], $9::int8[]) WITH ORDINALITY \
         AS k(e, t, d, n, m, u, x, p, o, i) \
    ORDER BY i \
    ON CONFLICT (tenant_id, doc_id, event_id) DO NOTHING \
    RETURNING tenant_id, doc_id, event_id";

/// The new events' mentions, summed per (tenant, entity) and sorted by it.
const UPSERT_MENTIONS_SUMMED: &str = "\
    INSERT INTO tenant_entity_mentions AS m (tenant_id, entity_id, documents, mentions, last_seen) \
    SELECT t, e, d, c, to_timestamp(x / 1000.0) \
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::float8[]) \
         AS k(t, e, d, c, x) ORDER BY t, e \
    ON CONFLICT (tenant_id, entity_id) DO UPDATE SET \
        documents = m.documents + EXCLUDED.documents, \
        mentions = m.mentions + EXCLUDED.mentions, \
        last_seen = GREATEST(m.last_seen, EXCLUDED.last_seen)";

/// The new events' pairs, summed per (tenant, a, b) and sorted by it.
const UPSERT_PAIRS_SUMMED: &str = "\
    INSERT INTO entity_cooccurrence AS p (tenant_id, entity_a, entity_b, documents) \
    SELECT t, a, b, d FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) \
         AS k(t, a, b, d) ORDER BY t, a, b \
    ON CONFLICT (tenant_id, entity_a, entity_b) DO UPDATE SET documents = p.documents + EXCLUDED.documents";

/// Where the event was read from (kept with the row).
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    pub partition: i32,
    pub offset: i64,
}

/// Apply `event` once: [`apply_batch`] of one event. An event the schema cannot hold is
/// [`ApplyError::Permanent`].
pub async fn apply(
    client: &mut deadpool_postgres::Client,
    event: &DocIngested,
    origin: Origin,
    max_pairs_entities: usize,
) -> Result<Applied, ApplyError> {
    let mut out = apply_batch(client, &[(event, origin)], max_pairs_entities).await?;
    match out.pop() {
        Some(Ok(applied)) => Ok(applied),
        Some(Err(why)) => Err(ApplyError::Permanent(why)),
        None => unreachable!("one result per event"),
    }
}

/// One event's row of `enrichment_documents`, and where it stands in the batch.
struct DocumentRow<'a> {
    at: usize,
    event: &'a DocIngested,
    origin: Origin,
    entities: i32,
    mentions: i32,
    unresolved: i32,
}

/// Apply each of `events` once, in one transaction: one result per event, in order, `Err(why)`
/// for an event refused before the write because the schema cannot hold its values (the others
/// are applied). An event whose key is already there, or appears earlier in the batch, is
/// [`Applied::Duplicate`] and adds nothing. The counts of the new events are summed per row before
/// the upserts, so a batch leaves the tables exactly as applying its events one by one would.
/// `Err` for the whole batch when the transaction fails: nothing of it was written (a
/// [`ApplyError::Permanent`] one means some event's values reached the database and were refused
/// there; apply the events one by one to find it).
pub async fn apply_batch(
    client: &mut deadpool_postgres::Client,
    events: &[(&DocIngested, Origin)],
    max_pairs_entities: usize,
) -> Result<Vec<Result<Applied, String>>, ApplyError> {
    let mut out: Vec<Result<Applied, String>> = vec![Ok(Applied::Duplicate); events.len()];
    let mut rows = Vec::with_capacity(events.len());
    for (at, &(event, origin)) in events.iter().enumerate() {
        let (entity_ids, counts) = mention_columns(event);
        let checked = (|| {
            Ok::<_, ApplyError>((
                int4("entities", entity_ids.len() as i64)?,
                int4("mentions", counts.iter().sum())?,
                int4("unresolved", event.unresolved as i64)?,
            ))
        })();
        match checked {
            Ok((entities, mentions, unresolved)) => rows.push(DocumentRow {
                at,
                event,
                origin,
                entities,
                mentions,
                unresolved,
            }),
            Err(ApplyError::Permanent(why)) => out[at] = Err(why),
            Err(other) => out[at] = Err(other.to_string()),
        }
    }
    if rows.is_empty() {
        return Ok(out);
    }

    let tx = client.transaction().await?;
    let docs = tx.prepare_cached(INSERT_DOCUMENTS).await?;
    let column = |f: &dyn Fn(&DocumentRow<'_>) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
    let column4 = |f: &dyn Fn(&DocumentRow<'_>) -> i32| rows.iter().map(f).collect::<Vec<i32>>();
    let text = |f: &dyn Fn(&DocumentRow<'_>) -> String| rows.iter().map(f).collect::<Vec<_>>();
    let inserted = tx
        .query(
            &docs,
            &[
                &text(&|r| r.event.event_id.clone()),
                &column(&|r| r.event.tenant_id),
                &text(&|r| r.event.doc_id.clone()),
                &column4(&|r| r.entities),
                &column4(&|r| r.mentions),
                &column4(&|r| r.unresolved),
                &rows
                    .iter()
                    .map(|r| r.event.extracted_at_unix_ms as f64)
                    .collect::<Vec<f64>>(),
                &column4(&|r| r.origin.partition),
                &column(&|r| r.origin.offset),
            ],
        )
        .await?;
    let mut new_keys: std::collections::HashSet<(i64, String, String)> = inserted
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    if new_keys.is_empty() {
        // Nothing else is written; ending the transaction either way is the same.
        tx.rollback().await?;
        return Ok(out);
    }

    // (tenant, entity) -> (documents, mentions, latest extraction ms); (tenant, a, b) -> documents.
    let mut mentions: std::collections::BTreeMap<(i64, i64), (i64, i64, f64)> = Default::default();
    let mut pair_docs: std::collections::BTreeMap<(i64, i64, i64), i64> = Default::default();
    for row in &rows {
        let e = row.event;
        // The first event of the batch with a key inserted it; a later one with the same key is
        // a duplicate, as it would be applied after it.
        if !new_keys.remove(&(e.tenant_id, e.doc_id.clone(), e.event_id.clone())) {
            continue;
        }
        out[row.at] = Ok(Applied::New);
        let at = e.extracted_at_unix_ms as f64;
        let (ids, counts) = mention_columns(e);
        for (id, count) in ids.into_iter().zip(counts) {
            let m = mentions.entry((e.tenant_id, id)).or_insert((0, 0, at));
            m.0 += 1;
            m.1 += count;
            m.2 = m.2.max(at);
        }
        let (a, b) = pairs(e, max_pairs_entities);
        for (a, b) in a.into_iter().zip(b) {
            *pair_docs.entry((e.tenant_id, a, b)).or_default() += 1;
        }
    }
    if !mentions.is_empty() {
        let st = tx.prepare_cached(UPSERT_MENTIONS_SUMMED).await?;
        let keys: Vec<_> = mentions.keys().collect();
        let values: Vec<_> = mentions.values().collect();
        tx.execute(
            &st,
            &[
                &keys.iter().map(|k| k.0).collect::<Vec<i64>>(),
                &keys.iter().map(|k| k.1).collect::<Vec<i64>>(),
                &values.iter().map(|v| v.0).collect::<Vec<i64>>(),
                &values.iter().map(|v| v.1).collect::<Vec<i64>>(),
                &values.iter().map(|v| v.2).collect::<Vec<f64>>(),
            ],
        )
        .await?;
    }
    if !pair_docs.is_empty() {
        let st = tx.prepare_cached(UPSERT_PAIRS_SUMMED).await?;
        tx.execute(
            &st,
            &[
                &pair_docs.keys().map(|k| k.0).collect::<Vec<i64>>(),
                &pair_docs.keys().map(|k| k.1).collect::<Vec<i64>>(),
                &pair_docs.keys().map(|k| k.2).collect::<Vec<i64>>(),
                &pair_docs.values().copied().collect::<Vec<i64>>(),
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(out)
}

/// Distinct entities and their mention counts, sorted by entity id (a well-formed event already
/// is; a hand-made one is normalized rather than trusted).
fn mention_columns(event: &DocIngested) -> (Vec<i64>, Vec<i64>) {
    let mut m: std::collections::BTreeMap<i64, i64> = Default::default();
    for x in &event.mentions {
        *m.entry(x.entity_id).or_default() += i64::from(x.count.max(1));
    }
    m.into_iter().unzip()
}

/// Every unordered pair (a < b) of the document's distinct entities, capped to its `max` most
/// mentioned ones, in (a, b) order.
pub fn pairs(event: &DocIngested, max: usize) -> (Vec<i64>, Vec<i64>) {
    let (ids, counts) = mention_columns(event);
    let mut ranked: Vec<(i64, i64)> = ids.into_iter().zip(counts).collect();
    if ranked.len() > max {
        // Most mentioned first, ties by id so the choice is deterministic.
        ranked.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        ranked.truncate(max);
    }
    let mut ids: Vec<i64> = ranked.into_iter().map(|(id, _)| id).collect();
    ids.sort_unstable();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (i, &x) in ids.iter().enumerate() {
        for &y in &ids[i + 1..] {
            a.push(x);
            b.push(y);
        }
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_api::events::Mention;

    fn event(mentions: &[(i64, u32)]) -> DocIngested {
        DocIngested {
            event_id: "e".into(),
            doc_id: "d".into(),
            tenant_id: 1,
            locale: None,
            mentions: mentions
                .iter()
                .map(|&(entity_id, count)| Mention { entity_id, count })
                .collect(),
            unresolved: 0,
            spans: 0,
            cache_hits: 0,
            duration_ms: 0.0,
            extracted_at_unix_ms: 0,
        }
    }

    #[test]
    fn pairs_are_unordered_distinct_and_sorted() {
        let (a, b) = pairs(&event(&[(30, 1), (10, 2), (20, 1), (10, 1)]), 64);
        assert_eq!(a, vec![10, 10, 20]);
        assert_eq!(b, vec![20, 30, 30]);
    }

    #[test]
    fn pairs_keep_the_most_mentioned_entities() {
        let (a, b) = pairs(&event(&[(1, 1), (2, 5), (3, 4), (4, 1)]), 2);
        assert_eq!((a, b), (vec![2], vec![3]));
    }

    #[test]
    fn mentions_are_merged_per_entity() {
        assert_eq!(
            mention_columns(&event(&[(7, 2), (3, 1), (7, 1)])),
            (vec![3, 7], vec![1, 3])
        );
    }
}
