//! Scoring a candidate entity against a span: token-set overlap (Jaccard).
//!
//! Deliberately cheap and explainable: "Müller Logistik AG" vs "Müller Logistik GmbH" shares two
//! of four distinct tokens (0.5); "Dr Anna Schmidt" vs "Anna Schmidt" two of three (0.67).
//!
//! A span is scored against every candidate of its kind (up to 20), and several spans of a batch
//! share one candidate list, so each name is split once ([`Tokens`]) and two sets are compared by
//! merging their sorted tokens: no hashing and no allocation per comparison. (The first version
//! built two `HashSet`s per span × candidate: 5% of entity-service's CPU samples at the chain's
//! maximum, docs/reports/chain-limit.md, issue 29.)

/// A name's distinct tokens, sorted: the set Jaccard compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens<'a>(Vec<&'a str>);

impl<'a> Tokens<'a> {
    /// Split on spaces (names arrive normalized: lowercase, single-spaced), empty tokens dropped.
    pub fn new(name: &'a str) -> Self {
        let mut t: Vec<&str> = name.split(' ').filter(|t| !t.is_empty()).collect();
        t.sort_unstable();
        t.dedup();
        Self(t)
    }

    /// |a ∩ b| / |a ∪ b|; 0 when either set is empty.
    pub fn jaccard(&self, other: &Tokens<'_>) -> f32 {
        let (a, b) = (&self.0, &other.0);
        if a.is_empty() || b.is_empty() {
            return 0.0;
        }
        let (mut i, mut j, mut inter) = (0, 0, 0usize);
        while i < a.len() && j < b.len() {
            match a[i].cmp(b[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    inter += 1;
                    i += 1;
                    j += 1;
                }
            }
        }
        inter as f32 / (a.len() + b.len() - inter) as f32
    }
}

/// Jaccard of two names' token sets (each split on the spot: for one-off comparisons).
pub fn jaccard(a: &str, b: &str) -> f32 {
    Tokens::new(a).jaccard(&Tokens::new(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The definition, with sets: what the merge must agree with.
    fn by_sets(a: &str, b: &str) -> f32 {
        let ta: HashSet<&str> = a.split(' ').filter(|t| !t.is_empty()).collect();
        let tb: HashSet<&str> = b.split(' ').filter(|t| !t.is_empty()).collect();
        if ta.is_empty() || tb.is_empty() {
            return 0.0;
        }
        ta.intersection(&tb).count() as f32 / ta.union(&tb).count() as f32
    }

    #[test]
    fn jaccard_scores_shared_tokens() {
        assert_eq!(jaccard("muller logistik ag", "muller logistik gmbh"), 0.5);
        assert!((jaccard("dr anna schmidt", "anna schmidt") - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(jaccard("a b", "a b"), 1.0);
        assert_eq!(jaccard("a", "b"), 0.0);
        assert_eq!(jaccard("", "b"), 0.0);
        // Repeated tokens count once, in either name; extra spaces are no tokens.
        assert_eq!(jaccard("a a b", "b  a"), 1.0);
        assert_eq!(jaccard("a a a", "a b"), 0.5);
    }

    #[test]
    fn the_merge_agrees_with_the_sets_definition() {
        // Every pair of names over a small alphabet, repeats and empty names included: the
        // sorted merge must give exactly what intersecting and uniting HashSets gives.
        let words = ["a", "b", "c", "ab", "ba"];
        let mut names = vec![String::new()];
        for x in words {
            for y in words {
                names.push(format!("{x} {y}"));
                for z in words {
                    names.push(format!("{x} {y} {z}"));
                }
            }
            names.push(x.to_string());
        }
        let mut compared = 0;
        for a in &names {
            for b in &names {
                assert_eq!(jaccard(a, b), by_sets(a, b), "{a:?} vs {b:?}");
                compared += 1;
            }
        }
        assert!(compared > 20_000);
    }
}
