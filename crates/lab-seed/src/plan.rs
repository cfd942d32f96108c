//! The data set as a pure function of `(seed, entities, tenants)`: tenant sizes and plans, every
//! entity row's content, and the shuffled order in which rows are inserted (which fixes their
//! ids). Nothing here touches the database or the file system.
//!
//! Content is derived per `(tenant, rank)` from its own PRNG stream, so it does not depend on the
//! insertion order; the insertion order is one global Fisher–Yates shuffle, so each tenant's rows
//! are scattered over the whole heap ("ids physically random", the stale-statistics design note).

use std::collections::HashSet;

use anyhow::ensure;
use lab_api::text::{guess_kind, normalize};

use super::corpus::MENTION_ZIPF_EXPONENT;
use super::names::{self, GeneratedName, Kind, Origin};
use super::rng::{hash_str, Discrete, Rng, Stream};

/// Zipf exponent of tenant sizes over tenant rank. 0.75 gives the long tail of a B2B customer
/// base and puts the largest tenant at ~3.4% of rows at the defaults (the postmortem's top tenant
/// was 3% of traffic, and traffic follows size).
pub(crate) const TENANT_SIZE_EXPONENT: f64 = 0.75;
/// Every tenant first gets this share of the mean size (100 rows at 1M / 2,000) before the Zipf
/// split: even the smallest customer has a catalogue that fills a top-20 candidate list per kind.
const TENANT_FLOOR_SHARE_OF_MEAN: f64 = 0.2;
/// The largest 2% of tenants are on the enterprise plan (40 of 2,000): big catalogues are big
/// contracts.
const ENTERPRISE_SHARE: f64 = 0.02;
/// Chance that a tenant in the smaller half is still on a trial (~15% of tenants overall).
const TRIAL_CHANCE_IN_SMALLER_HALF: f64 = 0.3;
/// Requests per second the edge admits, by plan. 200 rps is ~6x the largest tenant's share of
/// the postmortem's 900 rps peak, so the limiter never shapes ordinary lab traffic; 50 is the
/// schema default; 10 keeps a trial from being a load test.
const RATE_LIMIT_ENTERPRISE: i32 = 200;
const RATE_LIMIT_STANDARD: i32 = 50;
const RATE_LIMIT_TRIAL: i32 = 10;

/// Kind mix of a tenant's catalogue (organization, person, location, product), in percent.
const KIND_WEIGHTS: [u32; 4] = [50, 30, 10, 10];
/// Home market of a tenant (en, de, fr, es, jp), in percent. A non-English home is the tenant's
/// dominant foreign origin and the locale its documents carry.
const HOME_WEIGHTS: [u32; 5] = [40, 20, 15, 15, 10];
const HOMES: [Origin; 5] = [Origin::En, Origin::De, Origin::Fr, Origin::Es, Origin::Jp];
/// Each tenant's share of DE/FR/ES/JP rows is uniform in this range: 40% on average, the share the
/// postmortem's backfill populated, and never far from it for any single tenant.
const FOREIGN_SHARE_RANGE: (f64, f64) = (0.30, 0.50);
/// Of a tenant's foreign rows, this share is its home origin (if foreign); the rest are spread
/// evenly over the other foreign origins.
const HOME_SHARE_OF_FOREIGN: f64 = 0.5;
/// English-origin rows are split between these countries (percent).
const EN_COUNTRY_WEIGHTS: [u32; 2] = [65, 35];
const EN_COUNTRIES: [&str; 2] = ["us", "gb"];

/// How often a name is redrawn when it duplicates a name already in the tenant (or, in theory,
/// when its kind would be guessed wrong). The largest tenant fills well under half of any name
/// space, so 16 draws leave 4 duplicates in the default 10^6 rows.
const MAX_NAME_ATTEMPTS: u8 = 16;

/// `popularity` of the tenant's rank-0 entity; rank r gets SCALE / (r + 1)^MENTION_ZIPF_EXPONENT,
/// i.e. popularity is proportional to how often the corpus mentions the entity. 10^6 keeps the
/// tail above 1 for tenants up to ~160k rows at exponent 1.15 (the largest default is 34k).
const POPULARITY_SCALE: f64 = 1_000_000.0;

/// Where the data comes from (`source`) with weights in percent: mostly synced systems.
const SOURCES: [&str; 5] = ["crm", "erp", "registry", "import", "manual"];
const SOURCE_WEIGHTS: [u32; 5] = [40, 30, 10, 15, 5];

/// Timestamps are relative to the incident's date (2026-06-11T00:00:00Z), not to "now", so the
/// same seed always gives the same rows.
pub(crate) const ANCHOR_UNIX: i64 = 1_781_136_000;
/// Entities were created over the two years before the anchor.
const ENTITY_AGE_MAX_SECS: u64 = 730 * 86_400;
/// Tenants signed up two to four years before the anchor (before their entities).
const TENANT_AGE_SECS: (u64, u64) = (730 * 86_400, 1_460 * 86_400);

/// One tenant of the data set.
#[derive(Debug, Clone)]
pub(crate) struct TenantSpec {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) plan: &'static str,
    pub(crate) rate_limit_rps: i32,
    /// Rows in this tenant.
    pub(crate) size: u64,
    /// Index of the tenant's rank-0 row in the plan's per-row arrays.
    pub(crate) offset: u64,
    pub(crate) home: Origin,
    pub(crate) foreign_share: f64,
    pub(crate) created_at: i64,
    /// Mixed into `external_ref` so refs look opaque.
    salt: u32,
}

/// The parts of a row that do not depend on its name.
#[derive(Debug, Clone)]
pub(crate) struct RowSpec {
    pub(crate) kind: Kind,
    pub(crate) origin: Origin,
    pub(crate) country: &'static str,
    pub(crate) source: &'static str,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

/// A complete `entities` row.
#[derive(Debug, Clone)]
pub(crate) struct EntityRow {
    pub(crate) id: i64,
    pub(crate) tenant_id: i64,
    pub(crate) kind: Kind,
    pub(crate) canonical_name: String,
    pub(crate) normalized_name: String,
    pub(crate) external_ref: String,
    pub(crate) source: &'static str,
    pub(crate) popularity: i32,
    pub(crate) attributes: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

/// Aggregates computed while planning, for the report.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlanStats {
    pub(crate) kinds: [u64; 4],
    pub(crate) foreign_rows: u64,
    /// Rows whose normalized name equals an earlier row's in the same tenant.
    pub(crate) duplicate_names: u64,
    /// Rows whose name `guess_kind` would classify as another kind.
    pub(crate) kind_mismatches: u64,
    /// Names drawn more than once to avoid a duplicate.
    pub(crate) redrawn_names: u64,
}

#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) seed: u64,
    pub(crate) tenants: Vec<TenantSpec>,
    /// Per row (indexed by `tenant.offset + rank`): which name draw was kept.
    name_attempts: Vec<u8>,
    /// Per row: its `id`.
    ids: Vec<u32>,
    /// Insertion order: `(tenant index, rank)` of the row with id `position + 1`.
    order: Vec<(u32, u32)>,
    /// Per tenant: sorted fingerprints of its normalized names (variant collision checks).
    name_fingerprints: Vec<Vec<u64>>,
    pub(crate) stats: PlanStats,
}

/// Split `entities` rows over `tenants` tenants: a floor for everyone, the rest Zipf-distributed
/// over tenant rank with [`TENANT_SIZE_EXPONENT`], rounded by largest remainder so the sizes sum
/// exactly. Tenant 1 is the largest.
pub(crate) fn tenant_sizes(entities: u64, tenants: u64) -> Vec<u64> {
    assert!(
        tenants > 0 && entities >= tenants,
        "validated by the caller"
    );
    let mean = entities as f64 / tenants as f64;
    let floor = ((mean * TENANT_FLOOR_SHARE_OF_MEAN) as u64).max(1);
    let rest = entities - floor * tenants;
    let weights: Vec<f64> = (1..=tenants)
        .map(|k| (k as f64).powf(-TENANT_SIZE_EXPONENT))
        .collect();
    let total: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights.iter().map(|w| rest as f64 * w / total).collect();
    let mut sizes: Vec<u64> = exact.iter().map(|e| floor + e.floor() as u64).collect();
    let assigned: u64 = sizes.iter().sum();
    let mut leftover = entities - assigned;
    // Largest remainder first; ties to the larger tenant (lower index) for determinism.
    let mut by_remainder: Vec<usize> = (0..sizes.len()).collect();
    by_remainder.sort_by(|&a, &b| {
        let ra = exact[a] - exact[a].floor();
        let rb = exact[b] - exact[b].floor();
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &i in by_remainder.iter().cycle() {
        if leftover == 0 {
            break;
        }
        sizes[i] += 1;
        leftover -= 1;
    }
    sizes
}

impl Plan {
    /// Plan the whole data set. Costs one name generation per row (~0.5 s per million rows).
    pub(crate) fn build(seed: u64, entities: u64, tenants: u64) -> anyhow::Result<Plan> {
        ensure!(tenants >= 1, "--tenants must be at least 1");
        ensure!(
            entities >= tenants,
            "--entities ({entities}) must be at least --tenants ({tenants}): every tenant needs a row"
        );
        ensure!(
            entities <= u64::from(u32::MAX) && tenants <= u64::from(u32::MAX),
            "--entities and --tenants must fit in 32 bits (the lab plans ids in memory)"
        );
        let sizes = tenant_sizes(entities, tenants);
        let enterprise = ((tenants as f64 * ENTERPRISE_SHARE).round() as u64).max(1);
        let mut specs = Vec::with_capacity(sizes.len());
        let mut offset = 0;
        for (i, &size) in sizes.iter().enumerate() {
            let id = i as i64 + 1;
            let mut rng = Rng::stream(seed, Stream::Tenant, &[id as u64]);
            let home = HOMES[rng.weighted(&HOME_WEIGHTS)];
            let foreign_share = FOREIGN_SHARE_RANGE.0
                + rng.unit() * (FOREIGN_SHARE_RANGE.1 - FOREIGN_SHARE_RANGE.0);
            let (plan, rate_limit_rps) = if (i as u64) < enterprise {
                ("enterprise", RATE_LIMIT_ENTERPRISE)
            } else if (i as u64) >= tenants / 2 && rng.chance(TRIAL_CHANCE_IN_SMALLER_HALF) {
                ("trial", RATE_LIMIT_TRIAL)
            } else {
                ("standard", RATE_LIMIT_STANDARD)
            };
            let created_at = ANCHOR_UNIX - rng.between(TENANT_AGE_SECS.0, TENANT_AGE_SECS.1) as i64;
            let salt = rng.next_u64() as u32;
            let name = names::tenant_name(home, &mut rng);
            specs.push(TenantSpec {
                id,
                name,
                plan,
                rate_limit_rps,
                size,
                offset,
                home,
                foreign_share,
                created_at,
                salt,
            });
            offset += size;
        }

        let mut plan = Plan {
            seed,
            tenants: specs,
            name_attempts: vec![0; entities as usize],
            ids: vec![0; entities as usize],
            order: Vec::with_capacity(entities as usize),
            name_fingerprints: Vec::with_capacity(sizes.len()),
            stats: PlanStats::default(),
        };
        plan.choose_names();
        plan.shuffle();
        Ok(plan)
    }

    /// Draw every row's name, redrawing duplicates within the tenant, and keep which draw won.
    fn choose_names(&mut self) {
        let mut seen: HashSet<u64> = HashSet::new();
        for t in 0..self.tenants.len() {
            let tenant = &self.tenants[t];
            seen.clear();
            seen.reserve(tenant.size as usize);
            for rank in 0..tenant.size {
                let spec = row_spec(self.seed, tenant, rank);
                self.stats.kinds[spec.kind as usize] += 1;
                self.stats.foreign_rows += u64::from(spec.origin.is_foreign());
                let mut chosen: Option<(u8, u64, bool)> = None;
                for attempt in 0..MAX_NAME_ATTEMPTS {
                    let name = entity_name(self.seed, tenant.id, rank, &spec, attempt);
                    let normalized = normalize(&name.canonical);
                    let fingerprint = hash_str(&normalized);
                    let kind_ok = guess_kind(&normalized) == spec.kind.as_str();
                    let fresh = !seen.contains(&fingerprint);
                    chosen = Some((attempt, fingerprint, kind_ok));
                    if kind_ok && fresh {
                        break;
                    }
                }
                let (attempt, fingerprint, kind_ok) = chosen.expect("at least one attempt");
                if attempt > 0 {
                    self.stats.redrawn_names += 1;
                }
                if !seen.insert(fingerprint) {
                    self.stats.duplicate_names += 1;
                }
                if !kind_ok {
                    self.stats.kind_mismatches += 1;
                }
                self.name_attempts[(tenant.offset + rank) as usize] = attempt;
            }
            let mut fingerprints: Vec<u64> = seen.iter().copied().collect();
            fingerprints.sort_unstable();
            self.name_fingerprints.push(fingerprints);
        }
    }

    /// One global Fisher–Yates shuffle of all rows; position p gets id p + 1.
    fn shuffle(&mut self) {
        for (t, tenant) in self.tenants.iter().enumerate() {
            for rank in 0..tenant.size {
                self.order.push((t as u32, rank as u32));
            }
        }
        Rng::stream(self.seed, Stream::Shuffle, &[]).shuffle(&mut self.order);
        for (position, &(t, rank)) in self.order.iter().enumerate() {
            let global = self.tenants[t as usize].offset + u64::from(rank);
            self.ids[global as usize] = position as u32 + 1;
        }
    }

    pub(crate) fn entity_count(&self) -> u64 {
        self.order.len() as u64
    }

    /// `(tenant index, rank)` of the row inserted at `position` (its id is `position + 1`).
    pub(crate) fn at_position(&self, position: usize) -> (usize, u64) {
        let (t, rank) = self.order[position];
        (t as usize, u64::from(rank))
    }

    pub(crate) fn id_of(&self, tenant: usize, rank: u64) -> i64 {
        i64::from(self.ids[(self.tenants[tenant].offset + rank) as usize])
    }

    pub(crate) fn row_spec(&self, tenant: usize, rank: u64) -> RowSpec {
        row_spec(self.seed, &self.tenants[tenant], rank)
    }

    /// The name (with variants) the row kept.
    pub(crate) fn name(&self, tenant: usize, rank: u64, spec: &RowSpec) -> GeneratedName {
        let t = &self.tenants[tenant];
        let attempt = self.name_attempts[(t.offset + rank) as usize];
        entity_name(self.seed, t.id, rank, spec, attempt)
    }

    /// Is `normalized` the normalized name of some entity of this tenant?
    pub(crate) fn tenant_has_name(&self, tenant: usize, normalized: &str) -> bool {
        self.name_fingerprints[tenant]
            .binary_search(&hash_str(normalized))
            .is_ok()
    }

    /// The complete row for `(tenant, rank)`.
    pub(crate) fn row(&self, tenant: usize, rank: u64) -> EntityRow {
        let t = &self.tenants[tenant];
        let spec = self.row_spec(tenant, rank);
        let name = self.name(tenant, rank, &spec);
        let normalized_name = normalize(&name.canonical);
        // Multiplying by an odd constant is a bijection on u32, and so is the XOR: refs are
        // unique per tenant by construction, yet look opaque. (Knuth's golden-ratio multiplier.)
        let opaque = (rank as u32).wrapping_mul(0x9E37_79B1) ^ t.salt;
        let detail = match spec.kind {
            Kind::Organization => ("industry", industry(&normalized_name)),
            Kind::Person => ("role", ROLES[(rank % ROLES.len() as u64) as usize]),
            Kind::Location => ("type", "address"),
            Kind::Product => (
                "category",
                CATEGORIES[(t.salt as u64 + rank) as usize % CATEGORIES.len()],
            ),
        };
        EntityRow {
            id: self.id_of(tenant, rank),
            tenant_id: t.id,
            kind: spec.kind,
            canonical_name: name.canonical,
            normalized_name,
            external_ref: format!("{}-{opaque:08x}", spec.source),
            source: spec.source,
            popularity: popularity(rank),
            attributes: format!(
                r#"{{"country":"{}","lang":"{}","{}":"{}"}}"#,
                spec.country,
                spec.origin.lang(),
                detail.0,
                detail.1
            ),
            created_at: spec.created_at,
            updated_at: spec.updated_at,
        }
    }

    /// A sampler of tenant indexes in proportion to tenant size.
    pub(crate) fn tenant_sampler(&self) -> Discrete {
        Discrete::from_weights(self.tenants.iter().map(|t| t.size as f64))
    }
}

const ROLES: [&str; 5] = ["signatory", "contact", "director", "counsel", "accountant"];
const CATEGORIES: [&str; 5] = [
    "hardware",
    "software",
    "equipment",
    "component",
    "consumable",
];
const INDUSTRIES: [&str; 8] = [
    "logistics",
    "manufacturing",
    "finance",
    "retail",
    "energy",
    "healthcare",
    "technology",
    "construction",
];

/// An organization's industry, stable per name (the descriptor decides it in real registries).
fn industry(normalized: &str) -> &'static str {
    INDUSTRIES[(hash_str(normalized) % INDUSTRIES.len() as u64) as usize]
}

/// Zipf popularity by rank within the tenant (see [`POPULARITY_SCALE`]); at least 1.
pub(crate) fn popularity(rank: u64) -> i32 {
    let p = POPULARITY_SCALE * ((rank + 1) as f64).powf(-MENTION_ZIPF_EXPONENT);
    p.round().max(1.0) as i32
}

fn row_spec(seed: u64, tenant: &TenantSpec, rank: u64) -> RowSpec {
    let mut rng = Rng::stream(seed, Stream::Row, &[tenant.id as u64, rank]);
    let kind = Kind::ALL[rng.weighted(&KIND_WEIGHTS)];
    let origin = if rng.chance(tenant.foreign_share) {
        if tenant.home.is_foreign() && rng.chance(HOME_SHARE_OF_FOREIGN) {
            tenant.home
        } else {
            *rng.pick(&Origin::FOREIGN)
        }
    } else {
        Origin::En
    };
    let country = match origin {
        Origin::En => EN_COUNTRIES[rng.weighted(&EN_COUNTRY_WEIGHTS)],
        Origin::De => "de",
        Origin::Fr => "fr",
        Origin::Es => "es",
        Origin::Jp => "jp",
    };
    let source = SOURCES[rng.weighted(&SOURCE_WEIGHTS)];
    let created_at = ANCHOR_UNIX - rng.below(ENTITY_AGE_MAX_SECS) as i64;
    let updated_at = created_at + rng.below((ANCHOR_UNIX - created_at) as u64 + 1) as i64;
    RowSpec {
        kind,
        origin,
        country,
        source,
        created_at,
        updated_at,
    }
}

fn entity_name(seed: u64, tenant_id: i64, rank: u64, spec: &RowSpec, attempt: u8) -> GeneratedName {
    let mut rng = Rng::stream(
        seed,
        Stream::Name,
        &[tenant_id as u64, rank, u64::from(attempt)],
    );
    names::generate(spec.kind, spec.origin, &mut rng)
}

/// `YYYY-MM-DD HH:MM:SS+00` for a Unix time (UTC), the literal form COPY accepts for timestamptz.
pub(crate) fn format_timestamp(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}+00",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a 400-year era.
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_api::text::candidate_spans;

    #[test]
    fn tenant_sizes_sum_exactly_and_are_skewed() {
        for (entities, tenants) in [
            (1_000_000, 2_000),
            (100_000, 200),
            (5_000, 20),
            (7, 7),
            (10, 3),
        ] {
            let sizes = tenant_sizes(entities, tenants);
            assert_eq!(sizes.len() as u64, tenants);
            assert_eq!(sizes.iter().sum::<u64>(), entities, "{entities}/{tenants}");
            assert!(sizes.iter().all(|&s| s >= 1));
        }
        let sizes = tenant_sizes(1_000_000, 2_000);
        let largest = sizes[0] as f64 / 1e6;
        // "The largest tenant a few % of rows": between 2% and 5%.
        assert!((0.02..=0.05).contains(&largest), "largest share {largest}");
        let mut sorted = sizes.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        // Skewed: the median tenant is well below the mean (500), the top is ~70x the median.
        assert!(median < 400, "median {median}");
        assert!(
            sizes[0] > 50 * median,
            "top {} vs median {median}",
            sizes[0]
        );
        assert!(
            *sorted.first().unwrap() >= 100,
            "every tenant gets the floor"
        );
        // The top 1% of tenants hold ~18% of the rows (a few huge tenants), 18x their head count.
        let top20: u64 = sizes[..20].iter().sum();
        assert!(
            top20 as f64 / 1e6 > 0.15,
            "top 20 share {}",
            top20 as f64 / 1e6
        );
    }

    #[test]
    fn plan_is_deterministic_and_ids_are_a_permutation() {
        let a = Plan::build(7, 5_000, 20).unwrap();
        let b = Plan::build(7, 5_000, 20).unwrap();
        let mut seen = vec![false; 5_000];
        for p in 0..5_000 {
            let (t, rank) = a.at_position(p);
            assert_eq!(a.id_of(t, rank), p as i64 + 1);
            seen[(a.tenants[t].offset + rank) as usize] = true;
            let (ra, rb) = (a.row(t, rank), b.row(t, rank));
            assert_eq!(ra.canonical_name, rb.canonical_name);
            assert_eq!(ra.attributes, rb.attributes);
            assert_eq!(ra.id, rb.id);
        }
        assert!(seen.iter().all(|&s| s));
        // Tenant 1's rows are scattered over the heap, not clustered at the start.
        let ids: Vec<i64> = (0..a.tenants[0].size).map(|r| a.id_of(0, r)).collect();
        let max = *ids.iter().max().unwrap();
        let min = *ids.iter().min().unwrap();
        assert!(max - min > 4_000, "tenant 1 spans ids {min}..{max}");
        let other = Plan::build(8, 5_000, 20).unwrap();
        assert_ne!(a.row(0, 0).canonical_name, other.row(0, 0).canonical_name);
    }

    #[test]
    fn canonical_names_are_single_spans_of_the_right_kind() {
        let plan = Plan::build(20260611, 200_000, 400).unwrap();
        let mut rng = Rng::new(99);
        let sample = 10_000;
        let (mut kind_ok, mut span_ok) = (0, 0);
        for _ in 0..sample {
            let t = rng.index(plan.tenants.len());
            let rank = rng.below(plan.tenants[t].size);
            let row = plan.row(t, rank);
            assert_eq!(row.normalized_name, normalize(&row.canonical_name));
            assert!(!row.canonical_name.contains(['.', ',']));
            if guess_kind(&row.normalized_name) == row.kind.as_str() {
                kind_ok += 1;
            }
            let prefix = "Under the agreement dated today, the supplier ";
            let doc = format!("{prefix}{} shall deliver.", row.canonical_name);
            let spans = candidate_spans(&doc);
            let start = prefix.chars().count();
            let end = start + row.canonical_name.chars().count();
            if spans.len() == 1 && spans[0].start == start && spans[0].end == end {
                span_ok += 1;
            } else {
                panic!("{:?} came back as {spans:?}", row.canonical_name);
            }
            // The sentence start is a span too when the name follows it directly.
            let doc = format!("The {} shall deliver.", row.canonical_name);
            let spans = candidate_spans(&doc);
            assert_eq!(spans.len(), 1, "{doc:?}");
            assert_eq!(
                (spans[0].start, spans[0].end),
                (4, 4 + row.canonical_name.chars().count())
            );
        }
        assert!(
            kind_ok as f64 >= 0.99 * sample as f64,
            "kind guessed right {kind_ok}/{sample}"
        );
        assert_eq!(span_ok, sample);
    }

    #[test]
    fn plan_mix_matches_the_design() {
        let plan = Plan::build(20260611, 100_000, 200).unwrap();
        let n = plan.entity_count() as f64;
        let share = |k: Kind| plan.stats.kinds[k as usize] as f64 / n;
        assert!((share(Kind::Organization) - 0.5).abs() < 0.02);
        assert!((share(Kind::Person) - 0.3).abs() < 0.02);
        assert!((share(Kind::Location) - 0.1).abs() < 0.02);
        assert!((share(Kind::Product) - 0.1).abs() < 0.02);
        let foreign = plan.stats.foreign_rows as f64 / n;
        assert!((0.36..=0.44).contains(&foreign), "foreign share {foreign}");
        let duplicates = plan.stats.duplicate_names as f64 / n;
        assert!(duplicates < 0.02, "duplicate rate {duplicates}");
        assert_eq!(plan.stats.kind_mismatches, 0);
        let plans: Vec<&str> = plan.tenants.iter().map(|t| t.plan).collect();
        assert_eq!(plans[0], "enterprise");
        assert!(plans.contains(&"trial") && plans.contains(&"standard"));
        // external_ref is unique per tenant; attributes are valid JSON with a country.
        for t in 0..3 {
            let mut refs = HashSet::new();
            for rank in 0..plan.tenants[t].size {
                let row = plan.row(t, rank);
                assert!(
                    refs.insert(row.external_ref.clone()),
                    "duplicate ref {}",
                    row.external_ref
                );
                let attrs: serde_json::Value = serde_json::from_str(&row.attributes).unwrap();
                assert!(attrs["country"].is_string());
                assert!(row.popularity >= 1);
                assert!(row.created_at <= row.updated_at && row.updated_at <= ANCHOR_UNIX);
            }
        }
    }

    #[test]
    fn popularity_is_zipf_by_rank() {
        assert_eq!(popularity(0), 1_000_000);
        assert!(popularity(1) < popularity(0) && popularity(9) < popularity(1));
        let expected = (1_000_000.0 * 10f64.powf(-MENTION_ZIPF_EXPONENT)).round() as i32;
        assert_eq!(popularity(9), expected);
    }

    #[test]
    fn timestamps_format_as_utc_literals() {
        assert_eq!(format_timestamp(0), "1970-01-01 00:00:00+00");
        assert_eq!(format_timestamp(ANCHOR_UNIX), "2026-06-11 00:00:00+00");
        assert_eq!(
            format_timestamp(951_782_400 + 3_661),
            "2000-02-29 01:01:01+00"
        );
        assert_eq!(format_timestamp(-86_400), "1969-12-31 00:00:00+00");
    }
}
