//! `labctl seed`: the lab's data set — tenants, their API keys, a million entities, and the
//! document corpus the load generator replays.
//!
//! The shape of the data is what makes the incident reproducible
//! (../shared/design/stale-stats-trigger.md): tenant sizes are heavily skewed (the hot lookup
//! reads a whole `(tenant, kind)` range once the plan flips, so big tenants suffer most), every
//! tenant's rows are scattered over the heap (ids in a globally shuffled order), ~40% of rows have
//! a DE/FR/ES/JP origin recorded in `attributes` for the later backfill to turn into `locale`, and
//! `locale` itself stays NULL and is analyzed while NULL. Names and documents follow the shared
//! text rules (`lab_api::text`) so the orchestrator finds every mention again.
//!
//! # Layout
//! - [`rng`]: the seed's own PRNG (SplitMix64 + xoshiro256**) and Zipf/discrete samplers, so a
//!   seed gives the same data set on every toolchain.
//! - [`names`]: name generators per kind and origin, with variant forms; [`words`] their word
//!   lists.
//! - [`plan`]: the data set as a pure function of the seed: tenant sizes and plans, every row,
//!   the insertion order.
//! - [`corpus`]: documents, mentions and their offsets; the cache hit-rate estimate.
//! - [`keys`]: API keys and the atomic, private writing of output files.
//! - [`load`]: the COPY-based load, the index rebuild and ANALYZE.
//!
//! Everything except API key secrets is deterministic for a given `seed`.

mod corpus;
mod keys;
mod load;
mod names;
mod plan;
mod rng;
// Dense word tables; rustfmt would put every word on its own line.
#[rustfmt::skip]
mod words;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use self::keys::PendingFile;
use self::names::Kind;
use self::plan::Plan;

/// File name of the API keys (the lab's "customers"), inside `data_dir`.
const API_KEYS_FILE: &str = "api-keys.json";
/// File name of the corpus (one JSON document per line), inside `data_dir`.
const CORPUS_FILE: &str = "corpus.jsonl";
/// The parameters the data set was generated from, so the load generator can rebuild the plan and
/// stream fresh documents about the same entities.
const PARAMS_FILE: &str = "seed-params.json";

/// What to seed and where.
#[derive(Debug, Clone)]
pub struct SeedArgs {
    /// Entity rows in total (default 1,000,000; `--small`: 100,000).
    pub entities: u64,
    /// Tenants, ids 1..=tenants, tenant 1 the largest (default 2,000; `--small`: 200).
    pub tenants: u64,
    /// Documents in the corpus (default 20,000; `--small`: 5,000).
    pub documents: u64,
    /// Seed of every generated value except API key secrets (default 20260611, the incident's
    /// date).
    pub seed: u64,
    /// Where `api-keys.json` and `corpus.jsonl` go (created if missing).
    pub data_dir: PathBuf,
    /// Wipe existing tenants, api_keys and entities first; without it, refuse a seeded database.
    pub force: bool,
    /// Show progress bars on stderr (false in tests).
    pub progress: bool,
}

/// What `run` did, for the operator and for the lab's notes. Durations are in seconds; shares
/// are fractions in 0..=1.
#[derive(Debug, Clone, Serialize)]
pub struct SeedReport {
    /// Database name (never the URL, which may carry credentials).
    pub database: String,
    pub seed: u64,
    pub tenants: u64,
    pub entities: u64,
    pub api_keys: u64,
    pub entities_by_kind: KindCounts,
    pub tenants_by_plan: PlanCounts,
    pub tenant_size_min: u64,
    pub tenant_size_median: u64,
    pub tenant_size_max: u64,
    /// The largest tenant's share of all rows.
    pub largest_tenant_share: f64,
    /// Share of rows with a DE/FR/ES/JP origin (what the locale backfill will populate).
    pub foreign_origin_share: f64,
    /// Share of rows whose normalized name repeats an earlier one in the same tenant.
    pub duplicate_name_rate: f64,
    /// Share of rows whose name `guess_kind` classifies as another kind.
    pub kind_mismatch_rate: f64,
    /// `pg_stats.null_frac` of `entities.locale` after ANALYZE (1.0 expected: analyzed while NULL).
    pub locale_null_frac: Option<f64>,
    pub documents: u64,
    pub mentions: u64,
    pub variant_mentions: u64,
    /// Capitalized phrases in the corpus that are no entity ("Annex B").
    pub noise_spans: u64,
    pub corpus_chars: u64,
    /// Zipf exponent of mentions (and `popularity`) over rank within a tenant.
    pub mention_zipf_exponent: f64,
    /// Warm hit rate of an LRU of `cache_reference_capacity` entries (the orchestrator's default)
    /// when the load generator replays this corpus (documents drawn uniformly at random).
    pub cache_hit_rate_estimate: f64,
    pub cache_reference_capacity: u64,
    /// The LRU capacity at which that replay hits the postmortem's 72%.
    pub cache_capacity_for_postmortem_rate: Option<u64>,
    /// Distinct (tenant, locale, normalized span) keys in the corpus.
    pub distinct_cache_keys: u64,
    pub durations: PhaseDurations,
    pub api_keys_path: PathBuf,
    pub corpus_path: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct KindCounts {
    pub organization: u64,
    pub person: u64,
    pub location: u64,
    pub product: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanCounts {
    pub enterprise: u64,
    pub standard: u64,
    pub trial: u64,
}

/// Seconds spent in each phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseDurations {
    /// Create/migrate the database and pin its planner settings.
    pub prepare: f64,
    /// Plan tenants, names (with duplicate redraws) and the insertion order.
    pub plan: f64,
    /// Issue API keys and COPY tenants and api_keys.
    pub tenants_and_keys: f64,
    /// COPY entities.
    pub entities_copy: f64,
    /// Recreate the entity indexes and foreign key, and commit.
    pub indexes: f64,
    pub analyze: f64,
    /// Generate, check and write the corpus.
    pub corpus: f64,
    pub total: f64,
}

/// One tenant's API key as its "customer" holds it (`api-keys.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    pub tenant_id: i64,
    pub key_id: String,
    /// `rsl_<key_id>_<secret>`; the database stores only its SHA-256.
    pub api_key: String,
    /// Entity rows of the tenant (the load generator weights traffic by it).
    pub entities: u64,
}

/// One document of `corpus.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CorpusDoc {
    pub tenant_id: i64,
    /// `doc_<tenant>_<n>`, n counting the tenant's documents from 1.
    pub doc_id: String,
    /// The tenant's home locale (`de-DE`, `fr-FR`, `es-ES`, `ja-JP`), None for English-home
    /// tenants.
    pub locale: Option<String>,
    /// `contract`, `invoice` or `statement`.
    pub doc_type: String,
    pub text: String,
    /// Every entity mention, in text order. Noise phrases are candidate spans but no mention.
    pub mentions: Vec<Mention>,
}

/// Where an entity is mentioned: `text` chars `start..end` (Unicode scalar values, end
/// exclusive), exactly the offsets `lab_api::text::candidate_spans` returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Mention {
    pub entity_id: i64,
    pub start: usize,
    pub end: usize,
    /// Written as a variant (normalizes differently from the canonical name).
    pub variant: bool,
}

/// Seed the database at `database_url` and write `api-keys.json` and `corpus.jsonl` to
/// `args.data_dir`.
pub async fn run(database_url: &str, args: &SeedArgs) -> anyhow::Result<SeedReport> {
    let started = Instant::now();
    let database = lab_db::database_name(database_url)?;

    let phase = Instant::now();
    lab_db::prepare(database_url).await.with_context(|| {
        format!("preparing database {database:?} (create, migrate, pin settings)")
    })?;
    let prepare = phase.elapsed().as_secs_f64();

    let phase = Instant::now();
    let plan = {
        let spinner = load::spinner(args.progress, "planning tenants, names and ids");
        let (seed, entities, tenants) = (args.seed, args.entities, args.tenants);
        let plan = tokio::task::spawn_blocking(move || Plan::build(seed, entities, tenants))
            .await
            .context("the planner panicked")??;
        spinner.finish_and_clear();
        Arc::new(plan)
    };
    let plan_secs = phase.elapsed().as_secs_f64();

    std::fs::create_dir_all(&args.data_dir).with_context(|| {
        format!(
            "creating the data directory {}; choose a writable --data-dir",
            args.data_dir.display()
        )
    })?;
    let phase = Instant::now();
    let keys = keys::issue(&plan)?;
    let api_keys_file = PendingFile::write(&args.data_dir.join(API_KEYS_FILE), true, |out| {
        keys::write_records(out, &keys)
    })?;
    let issue_secs = phase.elapsed();

    let mut client = load::connect(database_url).await?;
    let timings = load::load(&mut client, &plan, &keys, args.force, args.progress).await?;
    // The database now holds these keys' hashes: publish the keys.
    let api_keys_path = api_keys_file.commit()?;

    let phase = Instant::now();
    let locale_null_frac = {
        let spinner = load::spinner(args.progress, "analyzing tenants, api_keys and entities");
        let frac = load::analyze(&client).await?;
        spinner.finish_and_clear();
        frac
    };
    let analyze = phase.elapsed().as_secs_f64();
    drop(client);

    let phase = Instant::now();
    let corpus_plan = Arc::clone(&plan);
    let documents = args.documents;
    let (docs, stats) =
        tokio::task::spawn_blocking(move || corpus::generate(&corpus_plan, documents))
            .await
            .context("the corpus generator panicked")?;
    let corpus_file = PendingFile::write(&args.data_dir.join(CORPUS_FILE), false, |out| {
        for doc in &docs {
            serde_json::to_writer(&mut *out, doc)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    })?;
    let corpus_path = corpus_file.commit()?;
    std::fs::write(
        args.data_dir.join(PARAMS_FILE),
        serde_json::to_vec_pretty(&SeedParams {
            seed: args.seed,
            entities: args.entities,
            tenants: args.tenants,
        })?,
    )
    .with_context(|| format!("writing {PARAMS_FILE} in {}", args.data_dir.display()))?;
    let cache = corpus::estimate_cache(&docs, corpus::REFERENCE_CACHE_CAPACITY, args.seed);
    let corpus_secs = phase.elapsed().as_secs_f64();

    let mut sizes: Vec<u64> = plan.tenants.iter().map(|t| t.size).collect();
    sizes.sort_unstable();
    let n = plan.entity_count();
    let share = |count: u64| count as f64 / n as f64;
    let by_plan = |name: &str| plan.tenants.iter().filter(|t| t.plan == name).count() as u64;
    let kinds = plan.stats.kinds;
    Ok(SeedReport {
        database,
        seed: args.seed,
        tenants: plan.tenants.len() as u64,
        entities: n,
        api_keys: keys.len() as u64,
        entities_by_kind: KindCounts {
            organization: kinds[Kind::Organization as usize],
            person: kinds[Kind::Person as usize],
            location: kinds[Kind::Location as usize],
            product: kinds[Kind::Product as usize],
        },
        tenants_by_plan: PlanCounts {
            enterprise: by_plan("enterprise"),
            standard: by_plan("standard"),
            trial: by_plan("trial"),
        },
        tenant_size_min: sizes[0],
        tenant_size_median: sizes[sizes.len() / 2],
        tenant_size_max: sizes[sizes.len() - 1],
        largest_tenant_share: share(sizes[sizes.len() - 1]),
        foreign_origin_share: share(plan.stats.foreign_rows),
        duplicate_name_rate: share(plan.stats.duplicate_names),
        kind_mismatch_rate: share(plan.stats.kind_mismatches),
        locale_null_frac,
        documents: stats.documents,
        mentions: stats.mentions,
        variant_mentions: stats.variant_mentions,
        noise_spans: stats.noise_spans,
        corpus_chars: stats.chars,
        mention_zipf_exponent: corpus::MENTION_ZIPF_EXPONENT,
        cache_hit_rate_estimate: cache.hit_rate,
        cache_reference_capacity: corpus::REFERENCE_CACHE_CAPACITY as u64,
        cache_capacity_for_postmortem_rate: cache.capacity_for_postmortem_rate,
        distinct_cache_keys: cache.distinct_keys,
        durations: PhaseDurations {
            prepare,
            plan: plan_secs,
            tenants_and_keys: (issue_secs + timings.tenants_and_keys).as_secs_f64(),
            entities_copy: timings.entities_copy.as_secs_f64(),
            indexes: timings.indexes.as_secs_f64(),
            analyze,
            corpus: corpus_secs,
            total: started.elapsed().as_secs_f64(),
        },
        api_keys_path,
        corpus_path,
    })
}

/// What the data set was generated from (`seed-params.json`).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct SeedParams {
    pub seed: u64,
    pub entities: u64,
    pub tenants: u64,
}

/// A never-repeating stream of documents about the seeded entities (see [`corpus::DocStream`]).
pub struct DocumentStream(corpus::DocStream);

impl DocumentStream {
    /// Rebuild the seed's plan from `seed-params.json` (about a second at 1M entities).
    pub fn open(data_dir: &Path, uniform: bool) -> anyhow::Result<Self> {
        let path = data_dir.join(PARAMS_FILE);
        let params: SeedParams =
            serde_json::from_slice(&std::fs::read(&path).with_context(|| {
                format!(
                    "reading {} (seed the lab first: labctl seed)",
                    path.display()
                )
            })?)?;
        let plan = Plan::build(params.seed, params.entities, params.tenants)?;
        Ok(Self(corpus::DocStream::new(Arc::new(plan), uniform)))
    }

    /// Switch the tenant mix (uniform or size-proportional) from the next document on.
    pub fn set_uniform(&mut self, uniform: bool) {
        self.0.set_uniform(uniform);
    }

    /// Document number `index`; the corpus file holds indexes below its length, so streams
    /// should start far above it.
    pub fn document(&mut self, index: u64) -> CorpusDoc {
        self.0.document(index)
    }
}

/// Read `api-keys.json` from a seeded data directory.
pub fn read_api_keys(data_dir: &Path) -> anyhow::Result<Vec<ApiKeyRecord>> {
    let path = data_dir.join(API_KEYS_FILE);
    let file = std::fs::File::open(&path)
        .with_context(|| format!("opening {}; run `labctl seed` first", path.display()))?;
    serde_json::from_reader(std::io::BufReader::new(file)).with_context(|| {
        format!(
            "parsing {}; it is written by `labctl seed` — reseed with --force if it was edited",
            path.display()
        )
    })
}

/// Read `corpus.jsonl` from a seeded data directory.
pub fn read_corpus(data_dir: &Path) -> anyhow::Result<Vec<CorpusDoc>> {
    let path = data_dir.join(CORPUS_FILE);
    let file = std::fs::File::open(&path)
        .with_context(|| format!("opening {}; run `labctl seed` first", path.display()))?;
    let mut docs = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let doc = serde_json::from_str(&line).with_context(|| {
            format!(
                "parsing line {} of {}; reseed with --force if it was edited",
                i + 1,
                path.display()
            )
        })?;
        docs.push(doc);
    }
    Ok(docs)
}

#[cfg(test)]
mod db_test;
