//! The idempotent write of one `doc.ingested` event.
//!
//! One transaction: record the event's key (tenant, document, request id), and only if that
//! inserted a row, add its mentions to
//! `tenant_entity_mentions` and its entity pairs to `entity_cooccurrence`. Applied twice, the
//! second transaction finds the id and changes nothing. Rows are upserted in key order, so two
//! workers applying documents of the same tenant lock shared rows in the same order and do not
//! deadlock each other (a deadlock would still be retried, see [`crate::worker`]).

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

const INSERT_DOCUMENT: &str = "\
    INSERT INTO enrichment_documents \
        (event_id, tenant_id, doc_id, entities, mentions, unresolved, extracted_at, \
         kafka_partition, kafka_offset) \
    VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7::float8 / 1000.0), $8, $9) \
    ON CONFLICT (tenant_id, doc_id, event_id) DO NOTHING";

const UPSERT_MENTIONS: &str = "\
    INSERT INTO tenant_entity_mentions AS m (tenant_id, entity_id, documents, mentions, last_seen) \
    SELECT $1, e, 1, c, to_timestamp($4::float8 / 1000.0) \
    FROM unnest($2::bigint[], $3::bigint[]) AS t(e, c) ORDER BY e \
    ON CONFLICT (tenant_id, entity_id) DO UPDATE SET \
        documents = m.documents + 1, \
        mentions = m.mentions + EXCLUDED.mentions, \
        last_seen = GREATEST(m.last_seen, EXCLUDED.last_seen)";

const UPSERT_PAIRS: &str = "\
    INSERT INTO entity_cooccurrence AS p (tenant_id, entity_a, entity_b, documents) \
    SELECT $1, a, b, 1 FROM unnest($2::bigint[], $3::bigint[]) AS t(a, b) ORDER BY a, b \
    ON CONFLICT (tenant_id, entity_a, entity_b) DO UPDATE SET documents = p.documents + 1";

/// Where the event was read from (kept with the row).
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    pub partition: i32,
    pub offset: i64,
}

/// Apply `event` once. `max_pairs_entities` bounds the co-occurrence work of one document (its
/// most mentioned entities are kept).
pub async fn apply(
    client: &mut deadpool_postgres::Client,
    event: &DocIngested,
    origin: Origin,
    max_pairs_entities: usize,
) -> Result<Applied, ApplyError> {
    let (entity_ids, counts) = mention_columns(event);
    let (a, b) = pairs(event, max_pairs_entities);
    let entities = int4("entities", entity_ids.len() as i64)?;
    let mentions = int4("mentions", counts.iter().sum())?;
    let unresolved = int4("unresolved", event.unresolved as i64)?;

    let tx = client.transaction().await?;
    let doc = tx.prepare_cached(INSERT_DOCUMENT).await?;
    let inserted = tx
        .execute(
            &doc,
            &[
                &event.event_id,
                &event.tenant_id,
                &event.doc_id,
                &entities,
                &mentions,
                &unresolved,
                &(event.extracted_at_unix_ms as f64),
                &origin.partition,
                &origin.offset,
            ],
        )
        .await?;
    if inserted == 0 {
        // Nothing else was written; ending the transaction either way is the same.
        tx.rollback().await?;
        return Ok(Applied::Duplicate);
    }
    if !entity_ids.is_empty() {
        let st = tx.prepare_cached(UPSERT_MENTIONS).await?;
        tx.execute(
            &st,
            &[
                &event.tenant_id,
                &entity_ids,
                &counts,
                &(event.extracted_at_unix_ms as f64),
            ],
        )
        .await?;
    }
    if !a.is_empty() {
        let st = tx.prepare_cached(UPSERT_PAIRS).await?;
        tx.execute(&st, &[&event.tenant_id, &a, &b]).await?;
    }
    tx.commit().await?;
    Ok(Applied::New)
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
