//! labctl's database work as compose's and kind's `lab_owner` does it (issue 28): the database's
//! owner, neither superuser nor CREATEROLE nor CREATEDB, a member of `pg_read_all_stats` (with
//! admin option: the migrations grant and revoke it on entity-service's role). The database's
//! first start creates it, the database and the services' roles as the superuser over the local
//! socket (k8s/overlays/kind/postgres/); this test does the same on the local server, then
//! migrates, seeds, runs the backfill and the remedies as the owner, and asks what it may not do.

use lab_db::inspect;
use tokio_postgres::Client;

use crate::backfill;
use crate::remediate::{self, Remedy};

/// What the database's first start does, as the superuser: the owner, its database, the
/// services' roles (they exist before labctl migrates). An error, not a panic: the test drops
/// what was made either way (a panic here left the role in the cluster).
async fn first_start(superuser: &Client, owner: &str, db: &str) -> anyhow::Result<()> {
    let stmts = [
        format!("CREATE ROLE {owner} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB"),
        format!("GRANT pg_read_all_stats TO {owner} WITH ADMIN OPTION"),
        format!("CREATE DATABASE {db} OWNER {owner}"),
    ];
    for s in stmts {
        superuser.batch_execute(&s).await?;
    }
    for role in [
        lab_db::GATEWAY_ROLE,
        lab_db::ENTITY_SERVICE_ROLE,
        lab_db::ENRICHMENT_ROLE,
    ] {
        // Cluster-wide, possibly made by another test's migration already.
        let s = format!(
            "DO $$ BEGIN CREATE ROLE {role} LOGIN; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
        );
        superuser.batch_execute(&s).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_is_not_a_superuser_migrates_seeds_and_runs_the_trigger() {
    let _heavy = crate::trigger_test::HEAVY_TEST.lock().await;
    let server = testkit::postgres_server_url().await;
    let suffix = format!("{:016x}", rand::random::<u64>());
    let (owner, db) = (
        format!("lab_owner_{suffix}"),
        format!("lab_test_owner_{suffix}"),
    );
    let superuser = inspect::connect(&server).await.unwrap();

    // Everything from the first start on returns its error, so the role and the database are
    // dropped below whatever failed.
    let outcome = async {
        first_start(&superuser, &owner, &db).await?;
        let url = lab_db::role_url(&testkit::with_database(&server, &db), &owner, None)?;
        let data_dir = std::env::temp_dir().join(format!("lab_owner_{suffix}"));
        let args = lab_seed::SeedArgs {
            entities: 20_000,
            tenants: 50,
            documents: 20,
            seed: 20_260_611,
            data_dir: data_dir.clone(),
            force: false,
            progress: false,
        };
        // Seeding prepares the database first: the migrations and the pinned settings.
        let seeded = lab_seed::run(&url, &args).await;
        let _ = std::fs::remove_dir_all(&data_dir);
        seeded?;
        let client = inspect::connect(&url).await?;
        let populated = backfill::populate(&client, backfill::DEFAULT_BATCH_IDS, false).await?;
        anyhow::ensure!(populated.rows_updated > 0, "the backfill updated no row");
        backfill::invalidate(&client).await?;
        remediate::apply(&client, Remedy::Vacuum).await?;
        remediate::apply(&client, Remedy::Analyze).await?;
        backfill::reset(&client).await?;
        // entity-service's busy-connection count runs as the function's owner: this role.
        let busy: i64 = client
            .query_one("SELECT lab_busy_connections()", &[])
            .await?
            .get(0);
        anyhow::ensure!(busy >= 0);
        // And what it may not do: make a role, or give itself a shell on the server.
        for refused in [
            "CREATE ROLE lab_owner_may_not LOGIN",
            "CREATE DATABASE lab_owner_may_not",
            "COPY (SELECT 1) TO PROGRAM 'true'",
        ] {
            let e = client.batch_execute(refused).await.err();
            let code = e
                .as_ref()
                .and_then(|e| e.code())
                .map(|c| c.code().to_owned());
            anyhow::ensure!(
                code.as_deref() == Some("42501"),
                "{refused:?} should be refused for lack of privilege, got {e:?}"
            );
        }
        anyhow::Ok(populated.rows_updated)
    }
    .await;

    for s in [
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        format!("DROP ROLE IF EXISTS {owner}"),
    ] {
        superuser.batch_execute(&s).await.unwrap();
    }
    let rows = outcome.unwrap_or_else(|e| panic!("as {owner}: {e:#}"));
    eprintln!("as a non-superuser owner: migrated, seeded, backfilled {rows} rows, vacuumed, analysed, reset");
}

/// A database that applied an amended migration's earlier text migrates again: it takes the new
/// checksum ([`lab_db::AMENDED`]); a checksum that is not a known earlier text is still refused.
#[tokio::test]
async fn a_database_migrated_with_an_amended_migrations_earlier_text_migrates_again() {
    let db = testkit::TestDb::new().await;
    let conn = inspect::connect(&db.url).await.unwrap();
    let set = |version: i64, hex: &str| {
        format!(
            "UPDATE _sqlx_migrations SET checksum = decode('{hex}', 'hex') WHERE version = {version}"
        )
    };
    for &(version, earlier) in lab_db::AMENDED {
        conn.batch_execute(&set(version, earlier)).await.unwrap();
    }
    lab_db::migrate(&db.url)
        .await
        .expect("an earlier text of an amended migration is accepted");
    for &(version, earlier) in lab_db::AMENDED {
        let now: String = conn
            .query_one(
                "SELECT encode(checksum, 'hex') FROM _sqlx_migrations WHERE version = $1",
                &[&version],
            )
            .await
            .unwrap()
            .get(0);
        let embedded = lab_db::MIGRATOR
            .iter()
            .find(|m| m.version == version)
            .unwrap();
        assert_ne!(now, earlier, "{version} keeps its earlier checksum");
        assert_eq!(decode(&now), embedded.checksum.as_ref());
    }
    let (version, _) = lab_db::AMENDED[0];
    conn.batch_execute(&set(version, &"ab".repeat(48)))
        .await
        .unwrap();
    let refused = lab_db::migrate(&db.url).await;
    assert!(refused.is_err(), "an unknown text must still be refused");
}

fn decode(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}
