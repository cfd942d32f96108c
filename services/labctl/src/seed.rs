//! `labctl seed`: the deterministic data set, API keys and document corpus (crates/lab-seed).

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
    /// Wipe existing data first (without it, seed refuses a non-empty database).
    #[arg(long)]
    force: bool,
    /// Do nothing if the data set is there: the database holds entities AND the data dir holds
    /// the seed's files (for scripts). A seeded database without the files is seeded again:
    /// the API keys' secrets exist only in the files.
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

async fn seeded(database_url: &str, data_dir: &std::path::Path) -> anyhow::Result<Seeded> {
    use sha2::{Digest, Sha256};
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
    let stored: std::collections::HashMap<String, Vec<u8>> =
        sqlx::query_as::<_, (String, Vec<u8>)>("SELECT key_id, key_sha256 FROM api_keys")
            .fetch_all(&mut conn)
            .await?
            .into_iter()
            .collect();
    let keys = lab_seed::read_api_keys(data_dir)?;
    let matching = keys
        .iter()
        .filter(|k| {
            stored
                .get(&k.key_id)
                .is_some_and(|h| h.as_slice() == Sha256::digest(k.api_key.as_bytes()).as_slice())
        })
        .count();
    Ok(if matching == keys.len() && !keys.is_empty() {
        Seeded::Both
    } else {
        Seeded::Mismatched {
            matching,
            keys: keys.len(),
        }
    })
}
