//! Scoring a candidate entity against a span: token-set overlap (Jaccard).
//!
//! Deliberately cheap and explainable: "Müller Logistik AG" vs "Müller Logistik GmbH" shares two
//! of four distinct tokens (0.5); "Dr Anna Schmidt" vs "Anna Schmidt" two of three (0.67).

use std::collections::HashSet;

pub fn jaccard(a: &str, b: &str) -> f32 {
    let ta: HashSet<&str> = a.split(' ').filter(|t| !t.is_empty()).collect();
    let tb: HashSet<&str> = b.split(' ').filter(|t| !t.is_empty()).collect();
    if ta.is_empty() || tb.is_empty() {
        return 0.0;
    }
    let inter = ta.intersection(&tb).count() as f32;
    let union = ta.union(&tb).count() as f32;
    inter / union
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaccard_scores_shared_tokens() {
        assert_eq!(jaccard("muller logistik ag", "muller logistik gmbh"), 0.5);
        assert!((jaccard("dr anna schmidt", "anna schmidt") - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(jaccard("a b", "a b"), 1.0);
        assert_eq!(jaccard("a", "b"), 0.0);
        assert_eq!(jaccard("", "b"), 0.0);
    }
}
