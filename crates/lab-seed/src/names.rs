//! Entity names shaped around the lab's text rules (`lab_api::text`).
//!
//! Every generated name is built so that, embedded in a sentence between lowercase words:
//! - `candidate_spans` finds it again as exactly one span: every token starts with a capital
//!   letter (or is a connector such as `de`/`von`/`&` in the middle, or a model number after the
//!   first token), no token is a leading stopword ("The", "A", "La", ...) in first position, and
//!   no name carries periods or commas;
//! - `guess_kind(normalize(name))` is the entity's kind: organizations end in a legal suffix,
//!   locations contain a street/place marker token, products contain a token with a digit, and
//!   persons have neither;
//! - it has at most 5 tokens, so a title in front still fits `MAX_SPAN_TOKENS`.
//!
//! Each name also comes with up to two *variant* surface forms, the way documents really refer
//! to things: a swapped legal suffix, a dropped descriptor, a title in front of a person, a
//! dropped house number. The corpus uses them for ~25% of mentions; they normalize differently
//! from the canonical name (so the exact match misses) but share most tokens with it (so the
//! candidate lookup can still find the entity). The corpus validates each variant before use.

use super::rng::Rng;
use super::words::*;

/// The entity kinds of the schema's CHECK constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Organization,
    Person,
    Location,
    Product,
}

impl Kind {
    pub(crate) const ALL: [Kind; 4] = [
        Kind::Organization,
        Kind::Person,
        Kind::Location,
        Kind::Product,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Organization => "organization",
            Kind::Person => "person",
            Kind::Location => "location",
            Kind::Product => "product",
        }
    }
}

/// Where an entity comes from, which decides the style of its name. `En` rows get a `us`/`gb`
/// country; the other four are the ~40% that the later locale backfill populates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Origin {
    En,
    De,
    Fr,
    Es,
    Jp,
}

impl Origin {
    pub(crate) const FOREIGN: [Origin; 4] = [Origin::De, Origin::Fr, Origin::Es, Origin::Jp];

    pub(crate) fn is_foreign(self) -> bool {
        self != Origin::En
    }

    /// ISO 639-1 language of names in this style.
    pub(crate) fn lang(self) -> &'static str {
        match self {
            Origin::En => "en",
            Origin::De => "de",
            Origin::Fr => "fr",
            Origin::Es => "es",
            Origin::Jp => "ja",
        }
    }

    /// BCP 47 tag a document in this style carries (`None` for English: the lab's documents
    /// without a locale). Fits the schema's original `varchar(8)`.
    pub(crate) fn locale_tag(self) -> Option<&'static str> {
        match self {
            Origin::En => None,
            Origin::De => Some("de-DE"),
            Origin::Fr => Some("fr-FR"),
            Origin::Es => Some("es-ES"),
            Origin::Jp => Some("ja-JP"),
        }
    }
}

/// A canonical name and the variant surface forms documents may use instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GeneratedName {
    pub(crate) canonical: String,
    pub(crate) variants: Vec<String>,
}

/// Draw a name of `kind` in the style of `origin`. The canonical name is drawn before any
/// variant, so changing how variants are made never changes a canonical name.
pub(crate) fn generate(kind: Kind, origin: Origin, rng: &mut Rng) -> GeneratedName {
    match kind {
        Kind::Organization => organization(origin, rng),
        Kind::Person => person(origin, rng),
        Kind::Location => location(origin, rng),
        Kind::Product => product(origin, rng),
    }
}

/// A tenant's display name: an organization in the style of its home market.
pub(crate) fn tenant_name(origin: Origin, rng: &mut Rng) -> String {
    organization(origin, rng).canonical
}

fn join(parts: &[&str]) -> String {
    parts.join(" ")
}

// ---------------------------------------------------------------------------------------------
// Organizations
// ---------------------------------------------------------------------------------------------

/// The word lists and habits of one market's company names.
pub(crate) struct OrgStyle {
    pub(crate) stems: &'static [&'static str],
    pub(crate) descriptors: &'static [&'static str],
    /// Legal suffixes (each ends in a token of lab-api's ORG_SUFFIXES), with weights.
    pub(crate) suffixes: &'static [&'static str],
    pub(crate) suffix_weights: &'static [u32],
    /// Joins two founders' names ("Müller & Schäfer GmbH"); None where that is not the habit.
    pub(crate) pair_connector: Option<&'static str>,
    /// "& Söhne", "et Fils", "Hermanos": a family firm.
    pub(crate) family: Option<&'static str>,
    /// A leading word some firms carry ("Pacific", "Groupe", "Grupo").
    pub(crate) qualifiers: &'static [&'static str],
}

fn org_style(origin: Origin) -> &'static OrgStyle {
    match origin {
        Origin::En => &EN_ORG,
        Origin::De => &DE_ORG,
        Origin::Fr => &FR_ORG,
        Origin::Es => &ES_ORG,
        Origin::Jp => &JP_ORG,
    }
}

fn organization(origin: Origin, rng: &mut Rng) -> GeneratedName {
    let style = org_style(origin);
    let stem = *rng.pick(style.stems);
    let suffix = style.suffixes[rng.weighted(style.suffix_weights)];
    // Shapes: 0 stem+descriptor, 1 descriptor+stem, 2 stem only, 3 two founders, 4 family firm,
    // 5 qualifier+stem+descriptor. Weights: descriptor names dominate real registries.
    let weights: [u32; 6] = [
        45,
        // Descriptor first ("Brauerei Köhler GmbH") is a continental habit, not an English one.
        if matches!(origin, Origin::En | Origin::Jp) {
            0
        } else {
            15
        },
        10,
        if style.pair_connector.is_some() {
            12
        } else {
            0
        },
        if style.family.is_some() { 6 } else { 0 },
        if style.qualifiers.is_empty() { 0 } else { 12 },
    ];
    let shape = rng.weighted(&weights);
    // `lead` is every token before the legal suffix; `desc_at` where the descriptor sits in it.
    let mut lead: Vec<&str> = Vec::with_capacity(4);
    let mut desc_at: Option<usize> = None;
    match shape {
        0 => {
            lead.push(stem);
            desc_at = Some(lead.len());
            lead.push(*rng.pick(style.descriptors));
        }
        1 => {
            desc_at = Some(0);
            lead.push(*rng.pick(style.descriptors));
            lead.push(stem);
        }
        2 => lead.push(stem),
        3 => {
            let mut other = *rng.pick(style.stems);
            if other == stem {
                other = style.stems[(style.stems.iter().position(|s| *s == stem).unwrap_or(0) + 1)
                    % style.stems.len()];
            }
            lead.extend([stem, style.pair_connector.unwrap_or("&"), other]);
        }
        4 => {
            lead.push(stem);
            lead.extend(style.family.unwrap_or("").split(' '));
        }
        _ => {
            lead.push(*rng.pick(style.qualifiers));
            lead.push(stem);
            desc_at = Some(lead.len());
            lead.push(*rng.pick(style.descriptors));
        }
    }
    let mut tokens = lead.clone();
    tokens.push(suffix);
    let canonical = join(&tokens);

    // Variants, drawn after the canonical name.
    let mut variants = Vec::with_capacity(2);
    let other_suffix = {
        let mut s = suffix;
        for _ in 0..4 {
            s = *rng.pick(style.suffixes);
            if s != suffix {
                break;
            }
        }
        s
    };
    match desc_at {
        Some(at) => {
            // A dropped descriptor ("Northwind Inc") and a swapped legal suffix.
            let mut dropped = lead.clone();
            dropped.remove(at);
            dropped.push(suffix);
            variants.push(join(&dropped));
            let mut swapped = lead.clone();
            swapped.push(other_suffix);
            variants.push(join(&swapped));
        }
        None => {
            // An added descriptor ("Kestrel Logistics Inc") and a swapped legal suffix.
            let mut added = lead.clone();
            added.push(*rng.pick(style.descriptors));
            added.push(suffix);
            let added = join(&added);
            if added.split(' ').count() <= 5 {
                variants.push(added);
            }
            let mut swapped = lead;
            swapped.push(other_suffix);
            variants.push(join(&swapped));
        }
    }
    GeneratedName {
        canonical,
        variants,
    }
}

// ---------------------------------------------------------------------------------------------
// Persons
// ---------------------------------------------------------------------------------------------

fn person(origin: Origin, rng: &mut Rng) -> GeneratedName {
    let mut tokens: Vec<&str> = Vec::with_capacity(4);
    match origin {
        Origin::En => {
            tokens.push(*rng.pick(EN_FIRST));
            // 25% carry a middle initial, 8% a double-barrelled surname: common in registries.
            if rng.chance(0.25) {
                tokens.push(*rng.pick(INITIALS));
            }
            tokens.push(*rng.pick(EN_LAST));
            if rng.chance(0.08) {
                tokens.push(*rng.pick(EN_LAST));
            }
        }
        Origin::De => {
            tokens.push(*rng.pick(DE_FIRST));
            // 5%: nobiliary "von" (a connector, allowed inside a name).
            if rng.chance(0.05) {
                tokens.push("von");
            }
            tokens.push(*rng.pick(DE_SURNAMES));
        }
        Origin::Fr => {
            tokens.push(*rng.pick(FR_FIRST));
            // 8%: particle "de" ("Hélène de Beaulieu").
            if rng.chance(0.08) {
                tokens.push("de");
            }
            tokens.push(*rng.pick(FR_SURNAMES));
        }
        Origin::Es => {
            tokens.push(*rng.pick(ES_FIRST));
            tokens.push(*rng.pick(ES_SURNAMES));
            // 70% use both surnames (paternal, maternal), as Spanish documents usually do.
            if rng.chance(0.7) {
                tokens.push(*rng.pick(ES_SURNAMES));
            }
        }
        Origin::Jp => {
            // Given name first: the order Japanese names take in English-language contracts.
            tokens.push(*rng.pick(JP_GIVEN));
            tokens.push(*rng.pick(JP_FAMILY));
        }
    }
    let canonical = join(&tokens);
    let title = *rng.pick(TITLES);
    let mut with_title = vec![title];
    with_title.extend(&tokens);
    let shortened = if tokens.len() >= 3 {
        // First name reduced to its initial: "J García López".
        let initial: String = tokens[0].chars().take(1).collect();
        let mut t = vec![initial];
        t.extend(tokens[1..].iter().map(|s| s.to_string()));
        t.join(" ")
    } else {
        // Surname alone, as a second reference in a document does.
        tokens[tokens.len() - 1].to_string()
    };
    GeneratedName {
        canonical,
        variants: vec![join(&with_title), shortened],
    }
}

// ---------------------------------------------------------------------------------------------
// Locations
// ---------------------------------------------------------------------------------------------

fn location(origin: Origin, rng: &mut Rng) -> GeneratedName {
    match origin {
        Origin::En => {
            let marker = *rng.pick(EN_LOC_MARKERS);
            let dir = *rng.pick(EN_DIRECTIONS);
            match rng.weighted(&[55, 30, 15]) {
                0 => {
                    let (stem, place) = (*rng.pick(EN_LOC_STEMS), *rng.pick(EN_PLACE_WORDS));
                    GeneratedName {
                        canonical: join(&[stem, place, marker]),
                        variants: vec![join(&[dir, stem, place, marker]), join(&[stem, marker])],
                    }
                }
                1 => {
                    let stem = *rng.pick(EN_LOC_STEMS);
                    GeneratedName {
                        canonical: join(&[stem, marker]),
                        variants: vec![join(&[dir, stem, marker])],
                    }
                }
                _ => {
                    let stem = *rng.pick(EN_ORG_STEMS);
                    GeneratedName {
                        canonical: join(&["Port", stem]),
                        variants: vec![join(&[dir, "Port", stem])],
                    }
                }
            }
        }
        Origin::De => {
            if rng.chance(0.85) {
                // Street or square with a house number: "Goethe Strasse 12".
                let stem = *rng.pick(DE_LOC_STEMS);
                let marker = if rng.chance(0.7) { "Strasse" } else { "Platz" };
                // House numbers 1..=150: the range of a long city street.
                let number = rng.between(1, 150).to_string();
                GeneratedName {
                    canonical: join(&[stem, marker, &number]),
                    variants: vec![join(&[stem, marker])],
                }
            } else {
                let city = *rng.pick(DE_CITIES);
                GeneratedName {
                    canonical: join(&["Hafen", city]),
                    variants: vec![join(&[city, "Hafen"])],
                }
            }
        }
        Origin::Fr => {
            let marker = *rng.pick(&["Rue", "Avenue"]);
            if rng.chance(0.6) {
                let (first, last) = (*rng.pick(FR_FIRST), *rng.pick(FR_SURNAMES));
                GeneratedName {
                    canonical: join(&[marker, first, last]),
                    variants: vec![join(&[marker, last])],
                }
            } else {
                let marker = if rng.chance(0.15) { "Port" } else { marker };
                let place = *rng.pick(FR_PLACES);
                GeneratedName {
                    canonical: join(&[marker, "de", place]),
                    variants: vec![join(&[marker, place])],
                }
            }
        }
        Origin::Es => {
            let marker = *rng.pick(&["Calle", "Avenida", "Plaza"]);
            if rng.chance(0.5) {
                let place = *rng.pick(ES_PLACES);
                GeneratedName {
                    canonical: join(&[marker, "de", place]),
                    variants: vec![join(&[marker, place])],
                }
            } else {
                let (first, last) = (*rng.pick(ES_FIRST), *rng.pick(ES_SURNAMES));
                GeneratedName {
                    canonical: join(&[marker, first, last]),
                    variants: vec![join(&[marker, last])],
                }
            }
        }
        Origin::Jp => {
            let place = if rng.chance(0.6) {
                *rng.pick(JP_PLACES)
            } else {
                *rng.pick(JP_FAMILY)
            };
            if rng.chance(0.7) {
                let marker = *rng.pick(&["Station", "Port", "Bay", "Park"]);
                let prefix = *rng.pick(JP_PREFIXES);
                if rng.chance(0.5) {
                    GeneratedName {
                        canonical: join(&[prefix, place, marker]),
                        variants: vec![join(&[place, marker])],
                    }
                } else {
                    GeneratedName {
                        canonical: join(&[place, marker]),
                        variants: vec![join(&[prefix, place, marker])],
                    }
                }
            } else {
                // Wards numbered 1..=9, as city districts are.
                let number = rng.between(1, 9).to_string();
                GeneratedName {
                    canonical: join(&[place, "District", &number]),
                    variants: vec![join(&[place, "District"])],
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Products
// ---------------------------------------------------------------------------------------------

fn product(origin: Origin, rng: &mut Rng) -> GeneratedName {
    let brand = *rng.pick(match origin {
        Origin::En => EN_BRANDS,
        Origin::De => DE_BRANDS,
        Origin::Fr => FR_BRANDS,
        Origin::Es => ES_BRANDS,
        Origin::Jp => JP_BRANDS,
    });
    // Half plain numbers ("Vector 3000"), half letter-prefixed models ("Nova X7").
    let model = if rng.chance(0.5) {
        // Model numbers 100..=9999: three or four digits, like most catalogues.
        rng.between(100, 9999).to_string()
    } else {
        // Letter + 1..=999: "X7", "S220".
        format!("{}{}", rng.pick(MODEL_LETTERS), rng.between(1, 999))
    };
    // 40% carry an edition word: the catalogue's "Pro" and "Mini" lines.
    let edition = rng.chance(0.4).then(|| *rng.pick(EDITIONS));
    let other_edition = {
        let mut e = *rng.pick(EDITIONS);
        if Some(e) == edition {
            e = EDITIONS[(EDITIONS.iter().position(|x| *x == e).unwrap_or(0) + 1) % EDITIONS.len()];
        }
        e
    };
    match edition {
        Some(ed) => GeneratedName {
            canonical: join(&[brand, &model, ed]),
            variants: vec![
                join(&[brand, &model]),
                join(&[brand, &model, other_edition]),
            ],
        },
        None => GeneratedName {
            canonical: join(&[brand, &model]),
            variants: vec![
                join(&[brand, &model, other_edition]),
                join(&[brand, &model, "Series"]),
            ],
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lab_api::text::{candidate_spans, guess_kind, normalize};

    /// Every list whose words may stand anywhere in a name except the suffix/marker slot.
    fn plain_word_lists() -> Vec<(&'static str, &'static [&'static str])> {
        vec![
            ("EN_ORG_STEMS", EN_ORG_STEMS),
            ("EN descriptors", EN_ORG.descriptors),
            ("EN qualifiers", EN_ORG.qualifiers),
            ("DE_SURNAMES", DE_SURNAMES),
            ("DE descriptors", DE_ORG.descriptors),
            ("FR_SURNAMES", FR_SURNAMES),
            ("FR descriptors", FR_ORG.descriptors),
            ("FR qualifiers", FR_ORG.qualifiers),
            ("ES_SURNAMES", ES_SURNAMES),
            ("ES descriptors", ES_ORG.descriptors),
            ("ES qualifiers", ES_ORG.qualifiers),
            ("JP_CORP_STEMS", JP_CORP_STEMS),
            ("JP descriptors", JP_ORG.descriptors),
            ("JP qualifiers", JP_ORG.qualifiers),
            ("EN_FIRST", EN_FIRST),
            ("EN_LAST", EN_LAST),
            ("DE_FIRST", DE_FIRST),
            ("FR_FIRST", FR_FIRST),
            ("ES_FIRST", ES_FIRST),
            ("JP_GIVEN", JP_GIVEN),
            ("JP_FAMILY", JP_FAMILY),
            ("EN_DIRECTIONS", EN_DIRECTIONS),
            ("EN_LOC_STEMS", EN_LOC_STEMS),
            ("EN_PLACE_WORDS", EN_PLACE_WORDS),
            ("DE_LOC_STEMS", DE_LOC_STEMS),
            ("DE_CITIES", DE_CITIES),
            ("FR_PLACES", FR_PLACES),
            ("ES_PLACES", ES_PLACES),
            ("JP_PLACES", JP_PLACES),
            ("JP_PREFIXES", JP_PREFIXES),
            ("EN_BRANDS", EN_BRANDS),
            ("DE_BRANDS", DE_BRANDS),
            ("FR_BRANDS", FR_BRANDS),
            ("ES_BRANDS", ES_BRANDS),
            ("JP_BRANDS", JP_BRANDS),
            ("EDITIONS", EDITIONS),
            ("TITLES", TITLES),
        ]
    }

    #[test]
    fn word_lists_follow_the_text_rules() {
        for (list, words) in plain_word_lists() {
            for w in words {
                let first = w.chars().next().expect("no empty words");
                assert!(
                    first.is_uppercase(),
                    "{list}: {w:?} must start with a capital"
                );
                assert!(
                    w.chars().all(char::is_alphabetic),
                    "{list}: {w:?} must be letters only"
                );
                // A lone word guessed as a person is neither a legal suffix nor a location marker.
                assert_eq!(
                    guess_kind(&normalize(w)),
                    "person",
                    "{list}: {w:?} is a suffix or marker"
                );
                // A word that is a leading stopword would be stripped in first position.
                let doc = format!("see {w} Zyx here");
                let spans: Vec<String> =
                    candidate_spans(&doc).into_iter().map(|s| s.text).collect();
                assert_eq!(
                    spans,
                    vec![format!("{w} Zyx")],
                    "{list}: {w:?} is a stopword or connector"
                );
            }
        }
    }

    #[test]
    fn surnames_stand_alone_as_spans() {
        // The surname-only person variant is a one-token span, which needs three characters.
        for w in EN_LAST
            .iter()
            .chain(DE_SURNAMES)
            .chain(FR_SURNAMES)
            .chain(ES_SURNAMES)
            .chain(JP_FAMILY)
        {
            assert!(
                w.chars().count() >= 3,
                "{w:?} is too short to be a span on its own"
            );
        }
    }

    #[test]
    fn generated_names_have_at_most_five_tokens() {
        let mut rng = Rng::new(1);
        for i in 0..20_000u64 {
            let kind = Kind::ALL[(i % 4) as usize];
            let origin =
                [Origin::En, Origin::De, Origin::Fr, Origin::Es, Origin::Jp][(i / 4 % 5) as usize];
            let name = generate(kind, origin, &mut rng);
            assert!(name.canonical.split(' ').count() <= 5, "{}", name.canonical);
            assert!(!name.canonical.contains(['.', ',']), "{}", name.canonical);
            for v in &name.variants {
                assert!(v.split(' ').count() <= 6, "{v}");
            }
        }
    }
}
