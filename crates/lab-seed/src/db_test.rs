//! The one test of `run` against a real PostgreSQL: a tiny data set in a fresh database.
//!
//! The server comes from `DATABASE_URL` (any database on it; default the local trust-auth
//! server); the test creates `lab_test_seed_<random>` there and drops it at the end.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::*;

const LOCAL_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Replace the database name in a PostgreSQL URL (keeping any query string).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |i| i + after_scheme);
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Drops the test database even when an assertion fails.
struct DropDatabase(String);

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let url = self.0.clone();
        // A fresh runtime on a plain thread: Drop may run inside the test's runtime.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(lab_db::drop_database(&url)))
        })
        .join();
    }
}

/// Index and constraint definitions of `entities`, sorted.
async fn entity_schema(client: &tokio_postgres::Client) -> Vec<String> {
    let rows = client
        .query(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'entities'
             UNION ALL
             SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'entities'::regclass
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    rows.into_iter().map(|r| r.get(0)).collect()
}

#[test]
fn with_database_replaces_only_the_name() {
    assert_eq!(
        with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "x"),
        "postgres://u:p@h:5432/x?sslmode=disable"
    );
    assert_eq!(
        with_database("postgres://h:5432", "x"),
        "postgres://h:5432/x"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_seeds_a_fresh_database_and_refuses_a_second_time_without_force() {
    let server = std::env::var("DATABASE_URL").unwrap_or_else(|_| LOCAL_POSTGRES.to_string());
    let name = format!("lab_test_seed_{:016x}", rand::random::<u64>());
    let url = with_database(&server, &name);
    let _cleanup = DropDatabase(url.clone());
    let data_dir = std::env::temp_dir().join(&name);
    // Sizes from the environment let the same test time a bigger load (see the report).
    let env = |key: &str, default: u64| {
        std::env::var(key)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let args = SeedArgs {
        entities: env("SEED_TEST_ENTITIES", 5_000),
        tenants: env("SEED_TEST_TENANTS", 20),
        documents: env("SEED_TEST_DOCUMENTS", 200),
        seed: 20260611,
        data_dir: data_dir.clone(),
        force: false,
        progress: false,
    };

    // The schema as the migrations create it, to compare after the bulk load's index rebuild.
    lab_db::prepare(&url)
        .await
        .expect("preparing the test database");
    let client = load::connect(&url).await.unwrap();
    let schema_before = entity_schema(&client).await;

    let report = run(&url, &args).await.expect("seeding a fresh database");
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report.entities, args.entities);
    assert_eq!(report.tenants, args.tenants);
    assert_eq!(report.documents, args.documents);
    assert_eq!(report.locale_null_frac, Some(1.0));

    let count = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) as u64 }
    };
    assert_eq!(count("SELECT count(*) FROM entities").await, args.entities);
    assert_eq!(count("SELECT count(*) FROM tenants").await, args.tenants);
    assert_eq!(count("SELECT count(*) FROM api_keys").await, args.tenants);
    assert_eq!(
        count("SELECT count(*) FROM entities WHERE locale IS NOT NULL").await,
        0
    );
    assert_eq!(count("SELECT max(id) FROM entities").await, args.entities);
    // The bulk load rebuilt every index and constraint exactly as the migrations made them.
    let schema_after = entity_schema(&client).await;
    assert_eq!(schema_before, schema_after);
    assert!(schema_after
        .iter()
        .any(|d| d.contains("(tenant_id, kind, popularity DESC)")));
    assert!(schema_after
        .iter()
        .any(|d| d.starts_with("FOREIGN KEY (tenant_id)")));
    // `locale` has statistics, taken while it was entirely NULL.
    let null_frac: f32 = client
        .query_one(
            "SELECT null_frac FROM pg_stats WHERE tablename = 'entities' AND attname = 'locale'",
            &[],
        )
        .await
        .expect("entities.locale has a pg_stats row")
        .get(0);
    assert_eq!(null_frac, 1.0);

    // Every key in api-keys.json verifies against the stored hash, for the right tenant.
    let keys = read_api_keys(&data_dir).unwrap();
    assert_eq!(keys.len() as u64, args.tenants);
    let stored: HashMap<String, (i64, Vec<u8>)> = client
        .query("SELECT key_id, tenant_id, key_sha256 FROM api_keys", &[])
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    for k in &keys {
        let (tenant, hash) = &stored[&k.key_id];
        assert_eq!(*tenant, k.tenant_id);
        assert_eq!(
            hash.as_slice(),
            Sha256::digest(k.api_key.as_bytes()).as_slice()
        );
    }
    assert_eq!(keys.iter().map(|k| k.entities).sum::<u64>(), args.entities);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data_dir.join(API_KEYS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "api-keys.json must be owner-only");
    }

    // Corpus mentions point at entities of the document's tenant, named as recorded.
    let corpus = read_corpus(&data_dir).unwrap();
    assert_eq!(corpus.len() as u64, args.documents);
    let doc = &corpus[0];
    let m = &doc.mentions[0];
    let row = client
        .query_one(
            "SELECT tenant_id, canonical_name, normalized_name FROM entities WHERE id = $1",
            &[&m.entity_id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), doc.tenant_id);
    let surface: String = doc
        .text
        .chars()
        .skip(m.start)
        .take(m.end - m.start)
        .collect();
    if !m.variant {
        assert_eq!(surface, row.get::<_, String>(1));
    }
    let names_before: Vec<String> = client
        .query(
            "SELECT canonical_name FROM entities ORDER BY id LIMIT 50",
            &[],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.get(0))
        .collect();

    // A second run without --force refuses and changes nothing.
    let err = run(&url, &args)
        .await
        .expect_err("a seeded database is refused");
    assert!(format!("{err:#}").contains("--force"), "{err:#}");
    assert_eq!(count("SELECT count(*) FROM entities").await, args.entities);

    // What enrichment wrote about the old data set is there before a forced reseed, gone after.
    client
        .batch_execute(
            "INSERT INTO enrichment_documents (event_id, tenant_id, doc_id, entities, mentions, \
                 unresolved, extracted_at, kafka_partition, kafka_offset) \
                 VALUES ('e-old', 1, 'd-old', 2, 2, 0, now(), 0, 0); \
             INSERT INTO tenant_entity_mentions VALUES (1, 1, 1, 1, now()); \
             INSERT INTO entity_cooccurrence VALUES (1, 1, 2, 1);",
        )
        .await
        .unwrap();
    let enrichment_rows = "SELECT (SELECT count(*) FROM enrichment_documents) \
         + (SELECT count(*) FROM tenant_entity_mentions) + (SELECT count(*) FROM entity_cooccurrence)";
    assert_eq!(count(enrichment_rows).await, 3);

    // With --force it reseeds, and the same seed gives the same rows.
    let forced = SeedArgs {
        force: true,
        ..args.clone()
    };
    run(&url, &forced).await.expect("reseeding with --force");
    assert_eq!(
        count(enrichment_rows).await,
        0,
        "enrichment of the old data set left"
    );
    let names_after: Vec<String> = client
        .query(
            "SELECT canonical_name FROM entities ORDER BY id LIMIT 50",
            &[],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(names_before, names_after);
    let keys_after = read_api_keys(&data_dir).unwrap();
    assert_ne!(
        keys[0].api_key, keys_after[0].api_key,
        "secrets are fresh on every seed"
    );

    drop(client);
    std::fs::remove_dir_all(&data_dir).ok();
}
