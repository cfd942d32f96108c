//! The lab's text rules: how a document becomes candidate spans, how a span is normalized, and
//! how its kind is guessed.
//!
//! This is deliberately simple, deterministic text processing (no model): a candidate span is a
//! run of capitalized tokens, the way names look in contracts and invoices. The seed generator
//! writes names and documents that follow these rules, and a test in `labctl` checks that every
//! mention it writes is found again here.

/// Longest span considered, in tokens. Company names in the seed have at most 5 tokens; 6 leaves
/// room for a title ("Dr") without letting a run of headings swallow a paragraph.
pub const MAX_SPAN_TOKENS: usize = 6;

/// A candidate span in a document. Offsets count `char`s (Unicode scalar values), `end` exclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub text: String,
}

/// Capitalized words that start sentences or headings and are never part of a name. A run that
/// begins with one of these starts after it.
const LEADING_STOPWORDS: &[&str] = &[
    "the",
    "a",
    "an",
    "in",
    "on",
    "at",
    "for",
    "our",
    "this",
    "that",
    "these",
    "per",
    "under",
    "with",
    "from",
    "by",
    "as",
    "to",
    "and",
    "der",
    "die",
    "das",
    "le",
    "la",
    "les",
    "el",
    "los",
    "las",
    "see",
    "dear",
    "between",
    "re",
    "each",
    "all",
    "any",
    "if",
    "when",
    "upon",
    "following",
];

/// Lower-case words allowed *inside* a name ("Bank of Osaka", "Casa de Campo", "Haus von Berg").
const CONNECTORS: &[&str] = &[
    "of", "de", "del", "von", "van", "der", "la", "&", "y", "et", "und",
];

const ORG_SUFFIXES: &[&str] = &[
    "gmbh",
    "ag",
    "kg",
    "se",
    "sa",
    "sarl",
    "sas",
    "sl",
    "srl",
    "kk",
    "inc",
    "ltd",
    "llc",
    "plc",
    "corp",
    "group",
    "holdings",
    "partners",
    "bank",
    "labs",
    "systems",
    "industries",
    "trading",
];
const LOCATION_MARKERS: &[&str] = &[
    "street", "strasse", "platz", "avenue", "avenida", "calle", "rue", "plaza", "port", "park",
    "harbour", "hafen", "station", "district", "quarter", "valley", "bay",
];

/// Lowercase, fold the Latin diacritics the seed uses, turn punctuation into separators and
/// collapse whitespace. `"Müller  Logistik GmbH,"` → `"muller logistik gmbh"`.
pub fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut pending_space = false;
    for c in s.chars() {
        let folded: &str = match c {
            'ä' | 'Ä' | 'à' | 'À' | 'á' | 'Á' | 'â' | 'Â' => "a",
            'ö' | 'Ö' | 'ó' | 'Ó' | 'ò' | 'Ò' | 'ô' | 'Ô' => "o",
            'ü' | 'Ü' | 'ú' | 'Ú' | 'ù' | 'Ù' | 'û' | 'Û' => "u",
            'é' | 'É' | 'è' | 'È' | 'ê' | 'Ê' | 'ë' | 'Ë' => "e",
            'í' | 'Í' | 'ì' | 'Ì' | 'î' | 'Î' | 'ï' | 'Ï' => "i",
            'ñ' | 'Ñ' => "n",
            'ç' | 'Ç' => "c",
            'ß' => "ss",
            '&' => "&",
            _ => "",
        };
        if !folded.is_empty() {
            if pending_space && !out.is_empty() {
                out.push(' ');
            }
            pending_space = false;
            out.push_str(folded);
        } else if c.is_alphanumeric() {
            if pending_space && !out.is_empty() {
                out.push(' ');
            }
            pending_space = false;
            out.extend(c.to_lowercase());
        } else {
            pending_space = true;
        }
    }
    out
}

/// Guess an entity kind from a *normalized* span: legal suffixes mean an organization, street
/// and place words a location, a token with a digit a product ("Vector 3000"), anything else a
/// person. Wrong guesses are allowed; they only make the candidate lookup miss.
pub fn guess_kind(normalized: &str) -> &'static str {
    let tokens: Vec<&str> = normalized.split(' ').filter(|t| !t.is_empty()).collect();
    let Some(last) = tokens.last() else {
        return "person";
    };
    if ORG_SUFFIXES.contains(last) {
        "organization"
    } else if tokens.iter().any(|t| LOCATION_MARKERS.contains(t)) {
        "location"
    } else if tokens.iter().any(|t| t.chars().any(|c| c.is_ascii_digit())) {
        "product"
    } else {
        "person"
    }
}

/// Split a document into candidate spans: maximal runs of capitalized tokens (a leading digit is
/// allowed after the first token, for model numbers), with connectors allowed inside, broken at
/// sentence punctuation, without leading stopwords, at most [`MAX_SPAN_TOKENS`] long.
/// Single-token spans shorter than three characters are dropped ("A", "EU").
pub fn candidate_spans(text: &str) -> Vec<Span> {
    let chars: Vec<char> = text.chars().collect();
    let mut spans = Vec::new();
    let mut run: Vec<Token> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
            continue;
        }
        let raw_start = i;
        while i < chars.len() && !chars[i].is_whitespace() {
            i += 1;
        }
        let token = Token::from_raw(&chars, raw_start, i);
        match token {
            None => flush(&chars, &mut run, &mut spans),
            Some(tok) => {
                let joins = if run.is_empty() {
                    tok.capitalized
                } else {
                    tok.capitalized || tok.digit_led || tok.connector
                };
                if joins {
                    let breaks_after = tok.breaks_after;
                    run.push(tok);
                    if breaks_after {
                        flush(&chars, &mut run, &mut spans);
                    }
                } else {
                    flush(&chars, &mut run, &mut spans);
                }
            }
        }
    }
    flush(&chars, &mut run, &mut spans);
    spans
}

#[derive(Debug)]
struct Token {
    start: usize,
    end: usize,
    lower: String,
    capitalized: bool,
    digit_led: bool,
    connector: bool,
    breaks_after: bool,
}

impl Token {
    /// Trim punctuation from a whitespace-delimited token; `None` for a token with no letters or
    /// digits at all (a dash, a bullet), which ends any run.
    fn from_raw(chars: &[char], raw_start: usize, raw_end: usize) -> Option<Token> {
        let is_core = |c: char| c.is_alphanumeric() || c == '&';
        let mut s = raw_start;
        while s < raw_end && !is_core(chars[s]) {
            s += 1;
        }
        let mut e = raw_end;
        while e > s && !is_core(chars[e - 1]) {
            e -= 1;
        }
        if s == e {
            return None;
        }
        let trailing: String = chars[e..raw_end].iter().collect();
        let leading_punct = s > raw_start;
        let first = chars[s];
        let word: String = chars[s..e].iter().collect();
        let lower = word.to_lowercase();
        Some(Token {
            start: s,
            end: e,
            capitalized: first.is_uppercase() && !leading_punct,
            digit_led: first.is_ascii_digit(),
            connector: CONNECTORS.contains(&lower.as_str()),
            breaks_after: trailing.chars().any(|c| ".,;:!?)\"".contains(c)),
            lower,
        })
    }
}

fn flush(chars: &[char], run: &mut Vec<Token>, spans: &mut Vec<Span>) {
    let mut toks: &[Token] = run;
    while let Some(first) = toks.first() {
        if LEADING_STOPWORDS.contains(&first.lower.as_str()) || first.connector {
            toks = &toks[1..];
        } else {
            break;
        }
    }
    while let Some(last) = toks.last() {
        if last.connector {
            toks = &toks[..toks.len() - 1];
        } else {
            break;
        }
    }
    // Runs longer than the limit are headings or tables, not names: keep the first window only.
    if toks.len() > MAX_SPAN_TOKENS {
        toks = &toks[..MAX_SPAN_TOKENS];
    }
    if let (Some(first), Some(last)) = (toks.first(), toks.last()) {
        let single_short = toks.len() == 1 && (last.end - first.start) < 3;
        if !single_short {
            spans.push(Span {
                start: first.start,
                end: last.end,
                text: chars[first.start..last.end].iter().collect(),
            });
        }
    }
    run.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<String> {
        candidate_spans(s).into_iter().map(|s| s.text).collect()
    }

    #[test]
    fn normalize_folds_case_diacritics_and_punctuation() {
        assert_eq!(normalize("Müller  Logistik GmbH,"), "muller logistik gmbh");
        assert_eq!(normalize("Société Générale SA"), "societe generale sa");
        assert_eq!(normalize("  Straße-Nord "), "strasse nord");
        assert_eq!(normalize("Tanaka & Sons"), "tanaka & sons");
        assert_eq!(normalize(""), "");
    }

    #[test]
    fn candidate_spans_finds_names_and_drops_sentence_starts() {
        let doc = "The supplier Müller Logistik GmbH shipped goods to Anna Schmidt in Berlin. \
                   Our invoice names Bank of Osaka as payee; see Annex B.";
        assert_eq!(
            texts(doc),
            vec![
                "Müller Logistik GmbH",
                "Anna Schmidt",
                "Berlin",
                "Bank of Osaka",
                "Annex B"
            ]
        );
    }

    #[test]
    fn candidate_spans_offsets_are_char_indices_into_the_text() {
        let doc = "Zahlung an Jürgen Weiß über Straße";
        for span in candidate_spans(doc) {
            let sliced: String = doc
                .chars()
                .skip(span.start)
                .take(span.end - span.start)
                .collect();
            assert_eq!(sliced, span.text);
        }
        let spans = candidate_spans(doc);
        assert_eq!(spans[0].text, "Zahlung");
        assert_eq!(spans[1].text, "Jürgen Weiß");
        assert_eq!((spans[1].start, spans[1].end), (11, 22));
    }

    #[test]
    fn candidate_spans_keeps_model_numbers_and_breaks_at_punctuation() {
        assert_eq!(
            texts("ordered Vector 3000 units, Vega Labs."),
            vec!["Vector 3000", "Vega Labs"]
        );
        assert_eq!(texts("A, B and C"), Vec::<String>::new());
    }

    #[test]
    fn candidate_spans_caps_long_runs() {
        let spans = texts("One Two Three Four Five Six Seven Eight");
        assert_eq!(spans, vec!["One Two Three Four Five Six"]);
    }

    #[test]
    fn guess_kind_uses_suffixes_markers_and_digits() {
        assert_eq!(guess_kind("muller logistik gmbh"), "organization");
        assert_eq!(guess_kind("hafen strasse"), "location");
        assert_eq!(guess_kind("vector 3000"), "product");
        assert_eq!(guess_kind("anna schmidt"), "person");
        assert_eq!(guess_kind(""), "person");
    }
}
