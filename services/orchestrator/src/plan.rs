//! Turning a document into work units: distinct span queries, each with every place it occurs.

use lab_api::text::{candidate_spans, guess_kind, normalize};
use lab_api::wire::SpanQuery;

/// One distinct (normalized span, kind) and where it occurs in the document.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkUnit {
    pub query: SpanQuery,
    /// `(start, end, mention text)` for each occurrence, in document order.
    pub occurrences: Vec<(usize, usize, String)>,
}

/// Split `text` into work units, in order of first occurrence.
pub fn plan(text: &str) -> Vec<WorkUnit> {
    let mut units: Vec<WorkUnit> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for span in candidate_spans(text) {
        let normalized = normalize(&span.text);
        if normalized.is_empty() {
            continue;
        }
        let at = *index.entry(normalized.clone()).or_insert_with(|| {
            units.push(WorkUnit {
                query: SpanQuery {
                    kind: guess_kind(&normalized).to_string(),
                    normalized,
                },
                occurrences: Vec::new(),
            });
            units.len() - 1
        });
        units[at]
            .occurrences
            .push((span.start, span.end, span.text));
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_dedupes_repeated_mentions_and_keeps_every_offset() {
        let units =
            plan("The buyer Vega Labs paid Anna Schmidt. Our records show Vega Labs again.");
        assert_eq!(units.len(), 2);
        assert_eq!(units[0].query.normalized, "vega labs");
        assert_eq!(units[0].query.kind, "organization");
        assert_eq!(units[0].occurrences.len(), 2);
        assert_eq!(units[0].occurrences[0], (10, 19, "Vega Labs".to_string()));
        assert_eq!(units[1].query.kind, "person");
    }

    #[test]
    fn plan_of_text_without_names_is_empty() {
        assert!(plan("nothing here but lowercase words.").is_empty());
    }
}
