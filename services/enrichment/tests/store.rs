//! The idempotent write, against the real PostgreSQL: an event applied twice changes nothing.

use enrichment::store::{apply, Applied, Origin};
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
