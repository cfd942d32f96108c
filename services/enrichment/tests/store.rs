//! The idempotent write, against the real PostgreSQL: an event applied twice changes nothing.

use enrichment::store::{apply, apply_batch, Applied, ApplyError, Origin};
use lab_api::events::{DocIngested, Mention};
use testkit::TestDb;

fn event(id: &str, entities: &[(i64, u32)]) -> DocIngested {
    DocIngested {
        event_id: id.into(),
        doc_id: format!("doc-{id}"),
        tenant_id: 7,
        locale: None,
        mentions: entities
            .iter()
            .map(|&(entity_id, count)| Mention { entity_id, count })
            .collect(),
        unresolved: 1,
        spans: 3,
        cache_hits: 1,
        duration_ms: 2.0,
        extracted_at_unix_ms: 1_700_000_000_000,
    }
}

async fn state(db: &str) -> (i64, Vec<(i64, i64, i64)>, Vec<(i64, i64, i64)>) {
    let mut c = lab_db::connect(db).await.unwrap();
    let docs: i64 = sqlx::query_scalar("SELECT count(*) FROM enrichment_documents")
        .fetch_one(&mut c)
        .await
        .unwrap();
    let mentions = sqlx::query_as(
        "SELECT entity_id, documents, mentions FROM tenant_entity_mentions ORDER BY entity_id",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    let pairs = sqlx::query_as(
        "SELECT entity_a, entity_b, documents FROM entity_cooccurrence ORDER BY 1, 2",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    (docs, mentions, pairs)
}

#[tokio::test]
async fn an_event_applied_twice_changes_nothing_the_second_time() {
    let db = TestDb::new().await;
    let pool = lab_db::hot_path_pool(&db.url, "test", 1, None, lab_db::Superuser::Allow).unwrap();
    let mut client = pool.get().await.unwrap();
    let origin = Origin {
        partition: 3,
        offset: 41,
    };
    let a = event("req-a", &[(1, 2), (2, 1), (3, 1)]);
    let b = event("req-b", &[(1, 1), (3, 4)]);

    assert_eq!(
        apply(&mut client, &a, origin, 64).await.unwrap(),
        Applied::New
    );
    assert_eq!(
        apply(&mut client, &b, origin, 64).await.unwrap(),
        Applied::New
    );
    let once = state(&db.url).await;
    assert_eq!(once.0, 2);
    assert_eq!(once.1, vec![(1, 2, 3), (2, 1, 1), (3, 2, 5)]);
    assert_eq!(once.2, vec![(1, 2, 1), (1, 3, 2), (2, 3, 1)]);

    // Redelivered (a killed worker's uncommitted events, a producer retry): no change at all.
    assert_eq!(
        apply(&mut client, &a, origin, 64).await.unwrap(),
        Applied::Duplicate
    );
    assert_eq!(
        apply(&mut client, &b, origin, 64).await.unwrap(),
        Applied::Duplicate
    );
    assert_eq!(state(&db.url).await, once);

    // The same request id from another tenant, or for another document (a client reusing its
    // X-Request-Id values), is another extraction.
    let mut other_tenant = event("req-a", &[(1, 1)]);
    other_tenant.tenant_id = 8;
    let mut other_doc = event("req-a", &[(1, 1)]);
    other_doc.doc_id = "another-document".into();
    assert_eq!(
        apply(&mut client, &other_tenant, origin, 64).await.unwrap(),
        Applied::New
    );
    assert_eq!(
        apply(&mut client, &other_doc, origin, 64).await.unwrap(),
        Applied::New
    );
    assert_eq!(state(&db.url).await.0, 4);
}

/// What the fault scenarios count as a run's enrichment rows (`lab_db::enrichment_rows`, read
/// by the engine's `database` pseudo-target): the rows of the documents whose index is in the
/// run's range, and the distinct documents among them — the same document extracted twice (two
/// request ids) is two rows and one document.
#[tokio::test]
async fn a_runs_rows_are_counted_by_its_documents_and_a_document_twice_shows() {
    let db = TestDb::new().await;
    let pool = lab_db::hot_path_pool(&db.url, "test", 1, None, lab_db::Superuser::Allow).unwrap();
    let mut client = pool.get().await.unwrap();
    let origin = Origin {
        partition: 0,
        offset: 1,
    };
    let doc = |id: &str, index: u64| DocIngested {
        doc_id: format!("doc_7_{index}"),
        ..event(id, &[(1, 1)])
    };
    let run = 1_000..2_000;
    for (id, index) in [
        ("r1", 1_001),
        ("r2", 1_002),
        ("r3", 1_002),
        ("other", 2_000),
    ] {
        apply(&mut client, &doc(id, index), origin, 64)
            .await
            .unwrap();
    }
    // Not a load document at all: never counted.
    apply(&mut client, &event("corpus", &[(1, 1)]), origin, 64)
        .await
        .unwrap();
    let mut c = lab_db::connect(&db.url).await.unwrap();
    assert_eq!(
        lab_db::enrichment_rows(&mut c, run).await.unwrap(),
        (3, 2),
        "3 rows of the run's documents, 2 documents: one of them twice"
    );
    assert_eq!(
        lab_db::enrichment_rows(&mut c, 3_000..4_000).await.unwrap(),
        (0, 0)
    );
}

/// Everything the enrichment tables hold, every column a write sets.
async fn everything(db: &str) -> Vec<String> {
    let mut c = lab_db::connect(db).await.unwrap();
    let mut out: Vec<String> = sqlx::query_scalar(
        "SELECT format('doc %s %s %s %s %s %s %s', tenant_id, doc_id, event_id, entities, mentions, \
                unresolved, extracted_at) FROM enrichment_documents \
         UNION ALL SELECT format('mention %s %s %s %s %s', tenant_id, entity_id, documents, \
                mentions, last_seen) FROM tenant_entity_mentions \
         UNION ALL SELECT format('pair %s %s %s %s', tenant_id, entity_a, entity_b, documents) \
                FROM entity_cooccurrence",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    out.sort();
    out
}

/// Issue 29: a batch is one transaction of three statements, its counts summed per row; the
/// tables must end exactly as applying its events one by one leaves them — duplicates in the
/// batch and already-applied events included, and an event the schema cannot hold skipped alone.
#[tokio::test]
async fn a_batch_leaves_the_tables_as_its_events_applied_one_by_one() {
    let (one, batched) = (TestDb::new().await, TestDb::new().await);
    let pool =
        |url: &str| lab_db::hot_path_pool(url, "test", 1, None, lab_db::Superuser::Allow).unwrap();
    let (p1, p2) = (pool(&one.url), pool(&batched.url));
    let (mut c1, mut c2) = (p1.get().await.unwrap(), p2.get().await.unwrap());
    let at = |offset| Origin {
        partition: 1,
        offset,
    };
    let mut events: Vec<DocIngested> = (0..40)
        .map(|i| {
            let mut e = event(
                &format!("req-{i}"),
                &[
                    (1, 1),
                    (2 + i % 5, 2),
                    (10 + i % 3, 1),
                    (2 + (i + 1) % 5, 1),
                ],
            );
            e.tenant_id = 7 + i % 2;
            e.extracted_at_unix_ms += i * 1_000;
            e
        })
        .collect();
    events.push(events[3].clone()); // a duplicate inside the batch
    events.push(event("too-many-unresolved", &[(1, 1)]));
    events.last_mut().unwrap().unresolved = u32::MAX as usize + 1;
    let already = events[0].clone(); // applied before the batch, on both sides

    apply(&mut c1, &already, at(0), 64).await.unwrap();
    let mut expected = Vec::new();
    for (i, e) in events.iter().enumerate() {
        expected.push(
            apply(&mut c1, e, at(i as i64 + 1), 64)
                .await
                .map_err(|e| e.to_string()),
        );
    }

    apply(&mut c2, &already, at(0), 64).await.unwrap();
    let batch: Vec<(&DocIngested, Origin)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| (e, at(i as i64 + 1)))
        .collect();
    let got = apply_batch(&mut c2, &batch, 64).await.unwrap();

    let outcome = |r: &Result<Applied, String>| match r {
        Ok(a) => format!("{a:?}"),
        Err(_) => "refused".to_string(),
    };
    assert_eq!(
        got.iter().map(outcome).collect::<Vec<_>>(),
        expected.iter().map(outcome).collect::<Vec<_>>(),
        "the same outcome per event"
    );
    assert_eq!(outcome(&got[0]), "Duplicate", "applied before the batch");
    assert_eq!(
        outcome(&got[40]),
        "Duplicate",
        "its twin came first in the batch"
    );
    assert_eq!(outcome(&got[41]), "refused");
    let (a, b) = (everything(&one.url).await, everything(&batched.url).await);
    assert!(
        a.len() > 100,
        "the comparison has rows to compare: {}",
        a.len()
    );
    assert_eq!(b, a, "the tables as one by one leaves them");
}

/// A batch PostgreSQL refuses for one event's values (a time it cannot represent) writes nothing
/// and says it is permanent, so the worker applies that batch one by one and skips that event
/// alone (`worker::apply_until_done`).
#[tokio::test]
async fn a_batch_the_database_refuses_writes_nothing_and_is_permanent() {
    let db = TestDb::new().await;
    let pool = lab_db::hot_path_pool(&db.url, "test", 1, None, lab_db::Superuser::Allow).unwrap();
    let mut client = pool.get().await.unwrap();
    let good = event("good", &[(1, 1), (2, 1)]);
    let mut bad = event("bad", &[(1, 1)]);
    bad.extracted_at_unix_ms = i64::MAX;
    let at = Origin {
        partition: 0,
        offset: 0,
    };
    let err = apply_batch(&mut client, &[(&good, at), (&bad, at)], 64)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApplyError::Permanent(_)),
        "refused for its values, not retryable: {err}"
    );
    assert!(everything(&db.url).await.is_empty(), "nothing written");
    assert_eq!(
        apply(&mut client, &good, at, 64).await.unwrap(),
        Applied::New
    );
    assert!(matches!(
        apply(&mut client, &bad, at, 64).await,
        Err(ApplyError::Permanent(_))
    ));
}
