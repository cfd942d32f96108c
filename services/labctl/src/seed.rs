//! `labctl seed`: the deterministic data set, API keys and document corpus (crates/lab-seed).

use anyhow::Context;

use crate::Globals;

#[derive(clap::Args)]
pub struct SeedCli {
    /// Laptop size: 100k entities / 200 tenants / 5k documents.
    #[arg(long)]
    small: bool,
    /// Entities (default 1,000,000; 100,000 with --small).
    #[arg(long)]
    entities: Option<u64>,
    /// Tenants (default 2,000; 200 with --small).
    #[arg(long)]
    tenants: Option<u64>,
    /// Documents in the corpus (default 20,000; 5,000 with --small).
    #[arg(long)]
    documents: Option<u64>,
    /// PRNG seed: the same seed gives the same data (20260611: the incident's date).
    #[arg(long, default_value_t = 20_260_611)]
    seed: u64,
    /// Wipe existing data first, enrichment's tables included (without it, seed refuses a
    /// non-empty database; with it, a lab up in this state directory).
    #[arg(long)]
    force: bool,
    /// Do nothing if the data set is there: the database holds entities AND the data dir holds
    /// the seed's files (for scripts). A seeded database without the files is seeded again:
    /// the API keys' secrets exist only in the files (a reseed as with --force).
    #[arg(long, conflicts_with = "force")]
    if_empty: bool,
}

pub async fn run(s: SeedCli, g: &Globals) -> anyhow::Result<()> {
    let mut args = lab_seed::SeedArgs {
        entities: s
            .entities
            .unwrap_or(if s.small { 100_000 } else { 1_000_000 }),
        tenants: s.tenants.unwrap_or(if s.small { 200 } else { 2_000 }),
        documents: s.documents.unwrap_or(if s.small { 5_000 } else { 20_000 }),
        seed: s.seed,
        data_dir: g.data_dir.clone(),
        force: s.force,
        progress: true,
    };
    if s.if_empty {
        match seeded(&g.database_url, &g.data_dir).await? {
            Seeded::Both => {
                println!("already seeded ({}); use --force to reseed", g.database_url);
                return Ok(());
            }
            // A fresh checkout (or a new data dir) on a machine whose lab database is seeded:
            // the API keys' secrets exist only in the files (the database keeps their hashes),
            // so the data set cannot be completed, only made again.
            Seeded::DatabaseOnly => {
                println!(
                    "the database is seeded but {} lacks api-keys.json or corpus.jsonl (the keys' \
                     secrets live only there): reseeding",
                    g.data_dir.display()
                );
                args.force = true;
            }
            // Another data dir (another checkout) seeded this database since: its keys are not
            // these files' keys, and every request with them would be refused (401).
            Seeded::Mismatched { matching, keys } => {
                println!(
                    "the database is seeded but only {matching} of the {keys} API keys in {} are \
                     its keys (another checkout reseeded it?): reseeding",
                    g.data_dir.display()
                );
                args.force = true;
            }
            Seeded::No => {}
        }
    }
    if args.force {
        // Under a running lab a reseed would empty enrichment's tables while its workers write
        // the old data set's events into them again, and the services keep the old keys and
        // entities in their caches.
        lab_native::fleet::refuse_if_up(&g.state_dir)
            .context("reseeding (--force) needs the lab down: `labctl down`, then seed again")?;
    }
    let report = lab_seed::run(&g.database_url, &args).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// What of the data set exists: the database's entities, the seed's files on disk, and whether
/// the files' API keys are the database's.
enum Seeded {
    Both,
    DatabaseOnly,
    Mismatched { matching: usize, keys: usize },
    No,
}

/// How many of `keys` are the database's own (key id and secret's hash).
async fn matching_keys(
    conn: &mut sqlx::PgConnection,
    keys: &[lab_seed::ApiKeyRecord],
) -> anyhow::Result<usize> {
    use sha2::{Digest, Sha256};
    let stored: std::collections::HashMap<String, Vec<u8>> =
        sqlx::query_as::<_, (String, Vec<u8>)>("SELECT key_id, key_sha256 FROM api_keys")
            .fetch_all(conn)
            .await?
            .into_iter()
            .collect();
    Ok(keys
        .iter()
        .filter(|k| {
            stored
                .get(&k.key_id)
                .is_some_and(|h| h.as_slice() == Sha256::digest(k.api_key.as_bytes()).as_slice())
        })
        .count())
}

/// The seed's API keys for a run on a native lab of this database, refused unless every one is
/// the database's: with another checkout's keys every request is answered 401, and a run
/// measures nothing for minutes (seen: a chain-limit run, 6 minutes of 401s, after a fresh
/// clone's `scripts/lab.sh` had reseeded the shared database).
pub async fn keys_of_this_database(g: &Globals) -> anyhow::Result<Vec<lab_seed::ApiKeyRecord>> {
    let keys = lab_seed::read_api_keys(&g.data_dir)?;
    let mut conn = lab_db::connect(&g.database_url).await?;
    let matching = matching_keys(&mut conn, &keys).await?;
    anyhow::ensure!(
        matching == keys.len() && !keys.is_empty(),
        "only {matching} of the {} API keys in {} are the keys of {} (another checkout reseeded \
         it?): every request would be refused 401. Pass --data-dir of the checkout that seeded it, \
         or reseed: labctl seed --force",
        keys.len(),
        g.data_dir.join("api-keys.json").display(),
        g.database_url
    );
    Ok(keys)
}

async fn seeded(database_url: &str, data_dir: &std::path::Path) -> anyhow::Result<Seeded> {
    lab_db::prepare(database_url).await?;
    let mut conn = lab_db::connect(database_url).await?;
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM (SELECT 1 FROM entities LIMIT 1) t")
        .fetch_one(&mut conn)
        .await?;
    let files = data_dir.join("api-keys.json").exists() && data_dir.join("corpus.jsonl").exists();
    if n == 0 {
        return Ok(Seeded::No);
    }
    if !files {
        return Ok(Seeded::DatabaseOnly);
    }
    let keys = lab_seed::read_api_keys(data_dir)?;
    let matching = matching_keys(&mut conn, &keys).await?;
    Ok(if matching == keys.len() && !keys.is_empty() {
        Seeded::Both
    } else {
        Seeded::Mismatched {
            matching,
            keys: keys.len(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::{fixtures, TestDb};

    fn globals(db: &TestDb, data_dir: &std::path::Path) -> Globals {
        Globals {
            database_url: db.url.clone(),
            state_dir: data_dir.join("state"),
            redis_url: "redis://127.0.0.1:6379".into(),
            data_dir: data_dir.to_path_buf(),
        }
    }

    fn write_keys(dir: &std::path::Path, keys: &[&fixtures::TenantKey]) {
        let records: Vec<lab_seed::ApiKeyRecord> = keys
            .iter()
            .map(|k| lab_seed::ApiKeyRecord {
                tenant_id: k.tenant_id,
                key_id: k.key_id.clone(),
                api_key: k.api_key.clone(),
                entities: 1,
            })
            .collect();
        std::fs::write(
            dir.join("api-keys.json"),
            serde_json::to_vec(&records).unwrap(),
        )
        .unwrap();
    }

    /// A run on a native lab refuses another checkout's keys before it starts, with what to do,
    /// instead of minutes of 401s; the database's own keys pass.
    #[tokio::test]
    async fn a_run_refuses_keys_that_are_not_the_databases() {
        let db = TestDb::new().await;
        let (one, two) = (
            fixtures::tenant_with_key(&db.url, 1).await,
            fixtures::tenant_with_key(&db.url, 2).await,
        );
        let dir = std::env::temp_dir().join(testkit::unique_name("labctl-keys"));
        std::fs::create_dir_all(&dir).unwrap();
        let g = globals(&db, &dir);

        write_keys(&dir, &[&one, &two]);
        assert_eq!(keys_of_this_database(&g).await.unwrap().len(), 2);

        // Same key id, another secret: a key of another seeding.
        let (head, last) = two.api_key.split_at(two.api_key.len() - 1);
        let stale = fixtures::TenantKey {
            api_key: format!("{head}{}", if last == "0" { "1" } else { "0" }),
            ..two.clone()
        };
        write_keys(&dir, &[&one, &stale]);
        let err = keys_of_this_database(&g).await.unwrap_err().to_string();
        assert!(
            err.contains("only 1 of the 2 API keys") && err.contains("--data-dir"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
