//! The document corpus the load generator replays: contracts, invoices and statements whose
//! capitalized spans are exactly the mentions it records (plus a few noise phrases).
//!
//! Each document belongs to a tenant chosen in proportion to tenant size (traffic follows size,
//! as in the postmortem). Mentioned entities are drawn by popularity rank within the tenant with
//! a Zipf law ([`MENTION_ZIPF_EXPONENT`]), which is what gives the orchestrator's per-process
//! resolution cache its warm hit rate. A quarter of the mentions use a variant surface form
//! (exact match misses, the candidate lookup — the statement the incident degrades — decides).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use lab_api::text::{candidate_spans, guess_kind, normalize};

use super::names::Kind;
use super::plan::{format_timestamp, Plan, ANCHOR_UNIX};
use super::rng::{hash_str, hash_words, Discrete, Rng, Stream};
use super::{CorpusDoc, Mention};

/// Zipf exponent of mentions over an entity's popularity rank within its tenant (and of the
/// `popularity` column): the knob for the orchestrator cache's warm hit rate (larger: mentions
/// concentrate on fewer entities, more hits). 1.15 puts a never-repeating stream of documents
/// like these, through an LRU of [`REFERENCE_CACHE_CAPACITY`] entries, at 70% (the postmortem:
/// 72%; 1.1 gives 66%, 1.2 gives 74%). Replaying the fixed 20k-document corpus is kinder: its
/// ~150k distinct keys fit in 200k entries (97%), and ~75k entries give 72% — the seed report
/// gives both numbers (`cache_hit_rate_estimate`, `cache_capacity_for_postmortem_rate`).
pub(crate) const MENTION_ZIPF_EXPONENT: f64 = 1.15;
/// Share of mentions written as a variant instead of the canonical name: documents refer to a
/// quarter of the parties informally (a swapped suffix, a title). Variants and noise are the
/// spans that reach the candidate lookup, the statement the incident degrades.
const VARIANT_SHARE: f64 = 0.25;
/// Entity mentions per document (inclusive): a one-page contract to a long invoice.
const MENTIONS_PER_DOC: (u64, u64) = (8, 20);
/// Capitalized phrases that are no entity ("Annex B"), per document (inclusive).
const NOISE_PER_DOC: (u64, u64) = (1, 3);
/// Sentences without any name (amounts, dates, terms), per document (inclusive).
const FILLER_PER_DOC: (u64, u64) = (0, 2);
/// Dates in documents fall in the year before the incident.
const DATE_RANGE_SECS: u64 = 365 * 86_400;
/// A paragraph break after every 2..=4 sentences.
const SENTENCES_PER_PARAGRAPH: (u64, u64) = (2, 4);
/// A variant must score at least this token overlap with its canonical name: entity-service's
/// default `resolve.min_confidence` (services/entity-service/config), so a variant of an entity in
/// the tenant's top 20 can resolve through the candidate lookup.
const MIN_VARIANT_OVERLAP: f64 = 0.5;
/// The orchestrator's default `cache.capacity` (services/orchestrator/config), used only to
/// estimate the hit rate the corpus produces.
pub(crate) const REFERENCE_CACHE_CAPACITY: usize = 200_000;

const DOC_TYPES: [&str; 3] = ["contract", "invoice", "statement"];
/// Contracts and invoices dominate a document-intelligence API's traffic (percent).
const DOC_TYPE_WEIGHTS: [u32; 3] = [40, 40, 20];

/// Capitalized phrases documents carry that resolve to nothing. Two tokens each (a one-token span
/// shorter than three characters would be dropped), no digit, no suffix or marker: they are
/// guessed as persons and go to the candidate lookup, where nothing overlaps them.
pub(crate) const NOISE_PHRASES: &[&str] = &[
    "Annex B",
    "Annex C",
    "Section Four",
    "Section Seven",
    "Schedule C",
    "Schedule One",
    "Exhibit A",
    "Exhibit F",
    "Appendix D",
    "Clause Nine",
    "Article Twelve",
    "Part Two",
];

/// Sentence templates by document type. `{}` is a name slot; `{amount}`, `{date}` and `{n}` are
/// filled with numbers. Every template starts with a capitalized leading stopword of lab-api
/// ("The", "This", "Under", ...) and has no other capitalized word, so its only spans are the
/// slots; a slot is never directly followed by a connector, a digit or a capitalized word.
/// Indexed by number of slots (0..=3).
type Templates = [&'static [&'static str]; 4];

const CONTRACT: Templates = [
    &[
        "The term of this agreement is {n} months from the effective date.",
        "This agreement takes effect on {date}.",
    ],
    &[
        "The supplier {} warrants that all services meet the agreed standard.",
        "Any notice to {} must be sent in writing.",
        "Each party, including {}, shall keep the terms of this agreement confidential.",
        "Under this agreement the goods remain the property of {} until paid in full.",
        "Our counsel has reviewed the obligations of {} in detail.",
    ],
    &[
        "This agreement is made between {} and {}.",
        "Under this agreement, {} shall deliver the goods to {} within thirty days.",
        "The parties agree that {} acts on behalf of {}.",
        "As guarantor, {} accepts joint liability with {}.",
        "In witness whereof, {} and {} have signed this agreement.",
        "For the avoidance of doubt, {} is not a party to the contract with {}.",
    ],
    &[
        "Upon termination, {} will return all materials to {} and notify {}.",
        "When requested, {} shall provide the licence for {} to {}.",
        "This agreement binds {}, {} and {} jointly.",
    ],
];

const INVOICE: Templates = [
    &[
        "The total amount of {amount} euros is due on {date}.",
        "This invoice covers {n} items delivered before {date}.",
    ],
    &[
        "Our payment terms are thirty days to the account of {}.",
        "All prices include delivery to {}.",
        "Each item was inspected by {} before dispatch.",
        "The remaining balance is payable by {} on receipt.",
    ],
    &[
        "This invoice is issued by {} to {}.",
        "The goods were shipped from {} to {}.",
        "Under the framework contract, {} invoices {} for consulting services.",
        "Following delivery to {}, the carrier {} confirmed receipt.",
        "With reference to the order placed by {}, we confirm the shipment of {}.",
    ],
    &[
        "Per the purchase order, {} supplied {} to {}.",
        "Our records show that {} ordered {} on behalf of {}.",
    ],
];

const STATEMENT: Templates = [
    &[
        "The closing balance was {amount} euros on {date}.",
        "This statement covers {n} transactions up to {date}.",
    ],
    &[
        "The opening balance for {} was carried forward.",
        "Any discrepancy concerning {} should be reported within fourteen days.",
        "All fees charged to {} are listed below.",
    ],
    &[
        "This statement lists transactions between {} and {}.",
        "Our records show a transfer from {} to {}.",
        "Each transaction with {} was reconciled by {}.",
        "The custodian {} holds the securities on behalf of {}.",
        "From the branch at {}, funds were transferred to {}.",
    ],
    &[
        "In this period, {} received payments from {}, {} and others.",
        "If {} disputes a charge, {} will review it with {}.",
    ],
];

/// One-slot sentences for noise phrases (the same rules as the templates above).
const NOISE_TEMPLATES: &[&str] = &[
    "See {} for the full terms.",
    "The schedule in {} applies to all deliveries.",
    "As set out in {}, late payments accrue interest.",
    "This clause is subject to {}.",
    "The details are given in {}.",
];

fn templates(doc_type: &str) -> &'static Templates {
    match doc_type {
        "contract" => &CONTRACT,
        "invoice" => &INVOICE,
        _ => &STATEMENT,
    }
}

/// Aggregates for the report.
#[derive(Debug, Clone, Default)]
pub(crate) struct CorpusStats {
    pub(crate) documents: u64,
    pub(crate) mentions: u64,
    pub(crate) variant_mentions: u64,
    pub(crate) noise_spans: u64,
    pub(crate) chars: u64,
}

/// An entity as the corpus mentions it.
struct Mentionable {
    id: i64,
    canonical: String,
    /// Variants that pass every check in [`usable_variant`].
    variants: Vec<String>,
}

enum Item {
    Mention {
        surface: String,
        entity_id: i64,
        variant: bool,
    },
    Noise(&'static str),
}

/// Generate `documents` documents. Pure: same plan, same corpus.
pub(crate) fn generate(plan: &Plan, documents: u64) -> (Vec<CorpusDoc>, CorpusStats) {
    // Tenants first, in document order, so a document's tenant does not depend on how the
    // others are generated.
    let sampler = plan.tenant_sampler();
    let mut rng = Rng::stream(plan.seed, Stream::CorpusTenants, &[]);
    let doc_tenants: Vec<usize> = (0..documents).map(|_| sampler.sample(&mut rng)).collect();
    let mut by_tenant: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (d, &t) in doc_tenants.iter().enumerate() {
        by_tenant.entry(t).or_default().push(d);
    }

    let mut docs: Vec<Option<CorpusDoc>> = (0..documents).map(|_| None).collect();
    let mut stats = CorpusStats {
        documents,
        ..CorpusStats::default()
    };
    for (t, doc_indexes) in by_tenant {
        let zipf = Discrete::zipf(plan.tenants[t].size as usize, MENTION_ZIPF_EXPONENT);
        let mut entities: HashMap<u64, Mentionable> = HashMap::new();
        for (n, &d) in doc_indexes.iter().enumerate() {
            let doc = document(
                plan,
                t,
                n as u64 + 1,
                d as u64,
                &zipf,
                &mut entities,
                &mut stats,
            );
            docs[d] = Some(doc);
        }
    }
    let docs = docs
        .into_iter()
        .map(|d| d.expect("every document index belongs to a tenant"))
        .collect();
    (docs, stats)
}

/// Documents generated on demand, never repeating: document `index` is a pure function of the
/// plan and the index (its tenant from a per-index stream, its content from the same per-index
/// stream the corpus uses), so a load run can draw as many fresh documents as it needs. Replaying
/// the fixed corpus instead warms the orchestrators' caches far beyond production's hit rate on
/// long runs (every span of the corpus ends up cached); a stream keeps the cache honest.
pub(crate) struct DocStream {
    plan: Arc<Plan>,
    uniform: bool,
    sampler: Discrete,
    /// Per tenant: the Zipf sampler over its ranks and the entities already rendered.
    tenants: HashMap<usize, (Discrete, HashMap<u64, Mentionable>)>,
    stats: CorpusStats,
}

impl DocStream {
    /// `uniform`: every tenant equally often; otherwise in proportion to tenant size.
    pub(crate) fn new(plan: Arc<Plan>, uniform: bool) -> Self {
        let sampler = plan.tenant_sampler();
        Self {
            plan,
            uniform,
            sampler,
            tenants: HashMap::new(),
            stats: CorpusStats::default(),
        }
    }

    /// Switch the tenant mix from the next document on.
    pub(crate) fn set_uniform(&mut self, uniform: bool) {
        self.uniform = uniform;
    }

    /// Document number `index` of the stream.
    pub(crate) fn document(&mut self, index: u64) -> CorpusDoc {
        let mut rng = Rng::stream(self.plan.seed, Stream::CorpusTenants, &[index]);
        let t = if self.uniform {
            rng.index(self.plan.tenants.len())
        } else {
            self.sampler.sample(&mut rng)
        };
        let plan = &self.plan;
        let (zipf, entities) = self.tenants.entry(t).or_insert_with(|| {
            (
                Discrete::zipf(plan.tenants[t].size as usize, MENTION_ZIPF_EXPONENT),
                HashMap::new(),
            )
        });
        document(plan, t, index, index, zipf, entities, &mut self.stats)
    }
}

fn document(
    plan: &Plan,
    t: usize,
    ordinal: u64,
    index: u64,
    zipf: &Discrete,
    entities: &mut HashMap<u64, Mentionable>,
    stats: &mut CorpusStats,
) -> CorpusDoc {
    let tenant = &plan.tenants[t];
    let mut rng = Rng::stream(plan.seed, Stream::Document, &[index]);
    let doc_type = DOC_TYPES[rng.weighted(&DOC_TYPE_WEIGHTS)];
    let templates = templates(doc_type);

    let mut mentions: Vec<Item> = Vec::new();
    for _ in 0..rng.between(MENTIONS_PER_DOC.0, MENTIONS_PER_DOC.1) {
        let rank = zipf.sample(&mut rng) as u64;
        let entity = entities
            .entry(rank)
            .or_insert_with(|| mentionable(plan, t, rank));
        let wants_variant = rng.chance(VARIANT_SHARE);
        let pick = rng.next_u64() as usize;
        let (surface, variant) = if wants_variant && !entity.variants.is_empty() {
            (entity.variants[pick % entity.variants.len()].clone(), true)
        } else {
            (entity.canonical.clone(), false)
        };
        mentions.push(Item::Mention {
            surface,
            entity_id: entity.id,
            variant,
        });
    }

    // Sentences: groups of 1..=3 mentions, then noise and filler sentences at random places.
    let mut sentences: Vec<Vec<Item>> = Vec::new();
    let mut queue = mentions.into_iter().peekable();
    while queue.peek().is_some() {
        let size = rng.between(1, 3) as usize;
        sentences.push(queue.by_ref().take(size).collect());
    }
    for _ in 0..rng.between(NOISE_PER_DOC.0, NOISE_PER_DOC.1) {
        let at = rng.index(sentences.len() + 1);
        let phrase = *rng.pick(NOISE_PHRASES);
        sentences.insert(at, vec![Item::Noise(phrase)]);
    }
    for _ in 0..rng.between(FILLER_PER_DOC.0, FILLER_PER_DOC.1) {
        let at = rng.index(sentences.len() + 1);
        sentences.insert(at, Vec::new());
    }

    let mut text = Text::default();
    let mut recorded = Vec::new();
    let mut until_break = rng.between(SENTENCES_PER_PARAGRAPH.0, SENTENCES_PER_PARAGRAPH.1);
    for (i, items) in sentences.into_iter().enumerate() {
        if i > 0 {
            until_break -= 1;
            if until_break == 0 {
                text.push("\n\n");
                until_break = rng.between(SENTENCES_PER_PARAGRAPH.0, SENTENCES_PER_PARAGRAPH.1);
            } else {
                text.push(" ");
            }
        }
        let template = match items.first() {
            Some(Item::Noise(_)) => *rng.pick(NOISE_TEMPLATES),
            _ => *rng.pick(templates[items.len()]),
        };
        render(template, items, &mut text, &mut rng, &mut recorded, stats);
    }
    stats.chars += text.chars as u64;

    CorpusDoc {
        tenant_id: tenant.id,
        doc_id: format!("doc_{}_{ordinal}", tenant.id),
        locale: tenant.home.locale_tag().map(str::to_owned),
        doc_type: doc_type.to_owned(),
        text: text.text,
        mentions: recorded,
    }
}

/// Fill a template's placeholders in order, recording where each mention lands.
fn render(
    template: &str,
    items: Vec<Item>,
    text: &mut Text,
    rng: &mut Rng,
    recorded: &mut Vec<Mention>,
    stats: &mut CorpusStats,
) {
    let mut items = items.into_iter();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        text.push(&rest[..open]);
        let close = open + rest[open..].find('}').expect("templates close every brace");
        match &rest[open + 1..close] {
            "" => match items.next().expect("one item per slot") {
                Item::Mention {
                    surface,
                    entity_id,
                    variant,
                } => {
                    let start = text.chars;
                    text.push(&surface);
                    recorded.push(Mention {
                        entity_id,
                        start,
                        end: text.chars,
                        variant,
                    });
                    stats.mentions += 1;
                    stats.variant_mentions += u64::from(variant);
                }
                Item::Noise(phrase) => {
                    text.push(phrase);
                    stats.noise_spans += 1;
                }
            },
            // Amounts between 100.00 and 99,999.99 euros, with thousands separators.
            "amount" => {
                let cents = rng.between(10_000, 9_999_999);
                let euros = cents / 100;
                let grouped = if euros >= 1_000 {
                    format!("{},{:03}", euros / 1_000, euros % 1_000)
                } else {
                    euros.to_string()
                };
                text.push(&format!("{grouped}.{:02}", cents % 100));
            }
            // ISO dates in the year before the incident.
            "date" => {
                let day = ANCHOR_UNIX - rng.below(DATE_RANGE_SECS) as i64;
                text.push(&format_timestamp(day)[..10]);
            }
            // Small counts: months of a term, items, transactions.
            "n" => text.push(&rng.between(2, 48).to_string()),
            other => unreachable!("unknown placeholder {{{other}}}"),
        }
        rest = &rest[close + 1..];
    }
    text.push(rest);
}

/// A string that also counts its `char`s (mention offsets are char indices).
#[derive(Default)]
struct Text {
    text: String,
    chars: usize,
}

impl Text {
    fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.chars += s.chars().count();
    }
}

fn mentionable(plan: &Plan, t: usize, rank: u64) -> Mentionable {
    let spec = plan.row_spec(t, rank);
    let name = plan.name(t, rank, &spec);
    let canonical_norm = normalize(&name.canonical);
    let variants = name
        .variants
        .into_iter()
        .filter(|v| usable_variant(plan, t, spec.kind, &canonical_norm, v))
        .collect();
    Mentionable {
        id: plan.id_of(t, rank),
        canonical: name.canonical,
        variants,
    }
}

/// A variant is usable when the exact match misses it (it normalizes to no name of the tenant),
/// the orchestrator guesses the same kind, it overlaps the canonical name enough to be resolved,
/// and the text rules find it as exactly one span.
fn usable_variant(plan: &Plan, t: usize, kind: Kind, canonical_norm: &str, variant: &str) -> bool {
    let norm = normalize(variant);
    norm != canonical_norm
        && guess_kind(&norm) == kind.as_str()
        && !plan.tenant_has_name(t, &norm)
        && token_overlap(&norm, canonical_norm) >= MIN_VARIANT_OVERLAP
        && is_single_span(variant)
}

/// Jaccard overlap of two normalized names' token sets (entity-service's score).
fn token_overlap(a: &str, b: &str) -> f64 {
    let ta: std::collections::HashSet<&str> = a.split(' ').collect();
    let tb: std::collections::HashSet<&str> = b.split(' ').collect();
    let inter = ta.intersection(&tb).count() as f64;
    let union = ta.union(&tb).count() as f64;
    if union == 0.0 {
        0.0
    } else {
        inter / union
    }
}

fn is_single_span(surface: &str) -> bool {
    let doc = format!("see {surface} here");
    let spans = candidate_spans(&doc);
    spans.len() == 1 && spans[0].start == 4 && spans[0].end == 4 + surface.chars().count()
}

/// Documents drawn to warm the simulated cache, as a multiple of the corpus size: enough for the
/// LRU's contents to stop depending on where the replay started.
const CACHE_WARMUP_PASSES: usize = 2;
/// The postmortem's warm hit rate of the orchestrator's resolution cache.
pub(crate) const POSTMORTEM_WARM_HIT_RATE: f64 = 0.72;

/// What a warm per-process resolution cache hits when this corpus is replayed.
#[derive(Debug, Clone)]
pub(crate) struct CacheEstimate {
    /// Hit rate of an LRU of the reference capacity.
    pub(crate) hit_rate: f64,
    /// Smallest LRU capacity reaching [`POSTMORTEM_WARM_HIT_RATE`] (None: unreachable, e.g. an
    /// empty corpus).
    pub(crate) capacity_for_postmortem_rate: Option<u64>,
    /// Distinct cache keys in the corpus.
    pub(crate) distinct_keys: u64,
}

/// Replay the corpus the way the load generator does (`labctl load`: documents drawn uniformly at
/// random, so tenants in proportion to size) through a simulated LRU keyed like the
/// orchestrator's: (tenant, locale, normalized span) for every candidate span, noise included,
/// since negative answers are cached. `CACHE_WARMUP_PASSES` corpus-sizes of draws warm it, one
/// more is measured.
///
/// Computes each lookup's LRU stack distance (distinct keys used since the key's previous use,
/// counted with a Fenwick tree over time): an LRU of capacity C hits exactly the lookups with
/// distance < C, so one replay gives the hit rate at `capacity` and the capacity that reaches the
/// postmortem's rate.
pub(crate) fn estimate_cache(docs: &[CorpusDoc], capacity: usize, seed: u64) -> CacheEstimate {
    let keys: Vec<Vec<u64>> = docs
        .iter()
        .map(|d| {
            let locale = d.locale.as_deref().map_or(0, hash_str);
            candidate_spans(&d.text)
                .into_iter()
                .map(|s| hash_words(&[d.tenant_id as u64, locale, hash_str(&normalize(&s.text))]))
                .collect()
        })
        .collect();
    let distinct_keys = {
        let mut all: Vec<u64> = keys.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        all.len() as u64
    };
    if docs.is_empty() {
        return CacheEstimate {
            hit_rate: 0.0,
            capacity_for_postmortem_rate: None,
            distinct_keys,
        };
    }
    let mut rng = Rng::stream(seed, Stream::CacheEstimate, &[]);
    let draws: Vec<usize> = (0..docs.len() * (CACHE_WARMUP_PASSES + 1))
        .map(|_| rng.index(docs.len()))
        .collect();
    let measured_from = docs.len() * CACHE_WARMUP_PASSES;
    let ticks: usize = draws.iter().map(|&d| keys[d].len()).sum();
    let mut latest = Fenwick::new(ticks);
    let mut last_use: HashMap<u64, usize> = HashMap::with_capacity(distinct_keys as usize);
    let mut distances: Vec<u64> = Vec::new();
    let mut clock = 0;
    for (i, &d) in draws.iter().enumerate() {
        for &key in &keys[d] {
            let distance = match last_use.insert(key, clock) {
                Some(previous) => {
                    latest.add(previous, -1);
                    (latest.prefix(clock) - latest.prefix(previous + 1)) as u64
                }
                None => u64::MAX,
            };
            latest.add(clock, 1);
            if i >= measured_from {
                distances.push(distance);
            }
            clock += 1;
        }
    }
    let hits = distances.iter().filter(|&&d| d < capacity as u64).count();
    let hit_rate = hits as f64 / distances.len().max(1) as f64;
    distances.sort_unstable();
    let needed = (POSTMORTEM_WARM_HIT_RATE * distances.len() as f64).ceil() as usize;
    let capacity_for_postmortem_rate = match needed.checked_sub(1).map(|i| distances[i]) {
        Some(d) if d != u64::MAX => Some(d + 1),
        _ => None,
    };
    CacheEstimate {
        hit_rate,
        capacity_for_postmortem_rate,
        distinct_keys,
    }
}

/// A Fenwick (binary indexed) tree of counts over `0..n`.
struct Fenwick {
    tree: Vec<i64>,
}

impl Fenwick {
    fn new(n: usize) -> Self {
        Self {
            tree: vec![0; n + 1],
        }
    }

    fn add(&mut self, index: usize, delta: i64) {
        let mut i = index + 1;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// Sum over `0..end`.
    fn prefix(&self, end: usize) -> i64 {
        let mut i = end;
        let mut sum = 0;
        while i > 0 {
            sum += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn small_corpus(seed: u64) -> (Plan, Vec<CorpusDoc>, CorpusStats) {
        let plan = Plan::build(seed, 20_000, 40).unwrap();
        let (docs, stats) = generate(&plan, 400);
        (plan, docs, stats)
    }

    #[test]
    fn doc_stream_is_deterministic_never_repeats_and_keeps_offsets_true() {
        let plan = Arc::new(Plan::build(7, 20_000, 40).unwrap());
        let mut a = DocStream::new(plan.clone(), false);
        let mut b = DocStream::new(plan.clone(), false);
        let mut texts = std::collections::HashSet::new();
        for index in 1_000_000..1_000_200 {
            let doc = a.document(index);
            assert_eq!(
                doc.text,
                b.document(index).text,
                "same index, same document"
            );
            assert!(
                texts.insert(doc.text.clone()),
                "document {index} repeats an earlier one"
            );
            let spans = candidate_spans(&doc.text);
            for m in &doc.mentions {
                assert!(
                    spans.iter().any(|s| s.start == m.start && s.end == m.end),
                    "mention {m:?} is a candidate span"
                );
            }
        }
        // The uniform mix reaches tenants the size-proportional one rarely does.
        let mut u = DocStream::new(plan, true);
        let tenants: std::collections::HashSet<i64> =
            (0..400).map(|i| u.document(i).tenant_id).collect();
        assert!(
            tenants.len() > 30,
            "uniform over 40 tenants: {} seen",
            tenants.len()
        );
    }

    #[test]
    fn corpus_is_deterministic_for_a_seed() {
        let (_, a, _) = small_corpus(11);
        let (_, b, _) = small_corpus(11);
        let (_, c, _) = small_corpus(12);
        let json = |d: &[CorpusDoc]| serde_json::to_string(d).unwrap();
        assert_eq!(json(&a), json(&b));
        assert_ne!(json(&a), json(&c));
    }

    #[test]
    fn corpus_mentions_are_exactly_the_candidate_spans() {
        let (plan, docs, stats) = small_corpus(20260611);
        let noise: HashSet<&str> = NOISE_PHRASES.iter().copied().collect();
        let names: HashMap<i64, (usize, u64)> = (0..plan.entity_count() as usize)
            .map(|p| {
                let (t, rank) = plan.at_position(p);
                (p as i64 + 1, (t, rank))
            })
            .collect();
        for doc in &docs {
            let spans = candidate_spans(&doc.text);
            let mut mentions = doc.mentions.iter().peekable();
            for span in &spans {
                match mentions.peek() {
                    Some(m) if m.start == span.start => {
                        assert_eq!(m.end, span.end, "{}: {:?}", doc.doc_id, span.text);
                        let (t, rank) = names[&m.entity_id];
                        assert_eq!(
                            plan.tenants[t].id, doc.tenant_id,
                            "mention of another tenant"
                        );
                        let row = plan.row(t, rank);
                        let norm = normalize(&span.text);
                        if m.variant {
                            assert_ne!(norm, row.normalized_name);
                        } else {
                            assert_eq!(span.text, row.canonical_name);
                        }
                        assert_eq!(guess_kind(&norm), row.kind.as_str(), "{:?}", span.text);
                        mentions.next();
                    }
                    _ => assert!(
                        noise.contains(span.text.as_str()),
                        "{}: unexpected span {:?} in {:?}",
                        doc.doc_id,
                        span.text,
                        doc.text
                    ),
                }
            }
            assert!(
                mentions.next().is_none(),
                "{}: a mention is no span",
                doc.doc_id
            );
            assert!((8..=20).contains(&doc.mentions.len()));
            let chars = doc.text.chars().count();
            assert!(
                (250..=2_500).contains(&chars),
                "{} has {chars} chars",
                doc.doc_id
            );
            assert!(doc
                .text
                .split(['.', '\n'])
                .all(|s| !s.trim_start().starts_with(char::is_lowercase)));
        }
        let variant_share = stats.variant_mentions as f64 / stats.mentions as f64;
        assert!(
            (0.18..=0.27).contains(&variant_share),
            "variant share {variant_share}"
        );
        assert!(stats.noise_spans >= docs.len() as u64);
    }

    #[test]
    fn corpus_follows_tenant_size_and_popularity() {
        let plan = Plan::build(5, 50_000, 50).unwrap();
        let (docs, _) = generate(&plan, 4_000);
        let top = docs.iter().filter(|d| d.tenant_id == 1).count() as f64 / docs.len() as f64;
        let expected = plan.tenants[0].size as f64 / 50_000.0;
        assert!(
            (top - expected).abs() < 0.02,
            "tenant 1 has {top} of docs, {expected} of rows"
        );
        // The tenant's rank-0 entity is its most mentioned one.
        let mut counts: HashMap<i64, u32> = HashMap::new();
        for m in docs
            .iter()
            .filter(|d| d.tenant_id == 1)
            .flat_map(|d| &d.mentions)
        {
            *counts.entry(m.entity_id).or_default() += 1;
        }
        let most = counts
            .iter()
            .max_by_key(|(_, c)| **c)
            .map(|(id, _)| *id)
            .unwrap();
        assert_eq!(most, plan.id_of(0, 0));
        // Documents carry their tenant's home locale (or none for English-home tenants).
        for d in &docs {
            let home = plan.tenants[(d.tenant_id - 1) as usize].home;
            assert_eq!(d.locale.as_deref(), home.locale_tag());
        }
    }

    #[test]
    fn templates_have_slots_only_where_their_index_says() {
        for (name, set) in [
            ("contract", &CONTRACT),
            ("invoice", &INVOICE),
            ("statement", &STATEMENT),
        ] {
            for (slots, list) in set.iter().enumerate() {
                assert!(!list.is_empty(), "{name}: no template with {slots} slots");
                for t in list.iter() {
                    assert_eq!(t.matches("{}").count(), slots, "{t}");
                    let filled = t.replace("{}", "Zed Qux").replace("{amount}", "1,200.00");
                    let filled = filled.replace("{date}", "2026-01-02").replace("{n}", "12");
                    let spans: Vec<String> = candidate_spans(&filled)
                        .into_iter()
                        .map(|s| s.text)
                        .collect();
                    assert_eq!(spans, vec!["Zed Qux".to_string(); slots], "{t}");
                }
            }
        }
        for t in NOISE_TEMPLATES {
            let spans: Vec<String> = candidate_spans(&t.replace("{}", "Annex B"))
                .into_iter()
                .map(|s| s.text)
                .collect();
            assert_eq!(spans, vec!["Annex B"], "{t}");
        }
    }

    #[test]
    fn cache_estimate_matches_a_direct_lru_simulation() {
        let (_, docs, _) = small_corpus(3);
        let seed = 4;
        for capacity in [10, 300, 2_000, usize::MAX] {
            let estimate = estimate_cache(&docs, capacity, seed);
            // The same replay through a plain LRU (map of last use + queue by age).
            let mut rng = Rng::stream(seed, Stream::CacheEstimate, &[]);
            let mut last: HashMap<u64, u64> = HashMap::new();
            let mut by_age: BTreeMap<u64, u64> = BTreeMap::new();
            let (mut clock, mut hits, mut lookups) = (0u64, 0u64, 0u64);
            for i in 0..docs.len() * (CACHE_WARMUP_PASSES + 1) {
                let d = &docs[rng.index(docs.len())];
                let locale = d.locale.as_deref().map_or(0, hash_str);
                for s in candidate_spans(&d.text) {
                    let key =
                        hash_words(&[d.tenant_id as u64, locale, hash_str(&normalize(&s.text))]);
                    let measured = i >= docs.len() * CACHE_WARMUP_PASSES;
                    clock += 1;
                    lookups += u64::from(measured);
                    match last.insert(key, clock) {
                        Some(previous) => {
                            by_age.remove(&previous);
                            hits += u64::from(measured);
                        }
                        None if last.len() > capacity => {
                            let (_, oldest) = by_age.pop_first().unwrap();
                            last.remove(&oldest);
                        }
                        None => {}
                    }
                    by_age.insert(clock, key);
                }
            }
            let direct = hits as f64 / lookups as f64;
            assert!(
                (estimate.hit_rate - direct).abs() < 1e-12,
                "capacity {capacity}: {} vs {direct}",
                estimate.hit_rate
            );
        }
        let estimate = estimate_cache(&docs, 10, seed);
        let needed = estimate.capacity_for_postmortem_rate.expect("reachable") as usize;
        assert!(estimate_cache(&docs, needed, seed).hit_rate >= POSTMORTEM_WARM_HIT_RATE);
        assert!(estimate_cache(&docs, needed - 1, seed).hit_rate < POSTMORTEM_WARM_HIT_RATE);
        assert!(estimate.distinct_keys > 100);
    }
}
