//! Scoring's cost per span: the candidate lookup's up to 20 candidates scored against every
//! unmatched span of one kind, as `resolve` does it, against the first version (two `HashSet`s
//! built per span × candidate) in the same run, interleaved so that machine noise lands on both.
//!
//!     cargo bench -p entity-service --bench score
//!     BENCH_OUT=score.json BENCH_ROUNDS=40 cargo bench -p entity-service --bench score
//!
//! The names: 2-4 tokens drawn from 300 words, the spans sharing some with the candidates (a
//! candidate list is what PostgreSQL's trigram lookup returned for a similar name), 1 and 4
//! unmatched spans of a kind per batch: 6.6 spans of a document reach entity-service
//! (docs/reports/chain-limit.md), over up to four kinds, and only those without an exact match
//! are scored — one span a kind is the least a candidate list is split for.

use std::collections::HashSet;
use std::hint::black_box;
use std::time::Instant;

use entity_service::score::Tokens;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CANDIDATES: usize = 20;
const BATCHES_PER_ROUND: usize = 20_000;

/// The first version, kept here as the baseline.
fn jaccard_sets(a: &str, b: &str) -> f32 {
    let ta: HashSet<&str> = a.split(' ').filter(|t| !t.is_empty()).collect();
    let tb: HashSet<&str> = b.split(' ').filter(|t| !t.is_empty()).collect();
    if ta.is_empty() || tb.is_empty() {
        return 0.0;
    }
    ta.intersection(&tb).count() as f32 / ta.union(&tb).count() as f32
}

fn name(rng: &mut StdRng, words: &[String]) -> String {
    let n = rng.random_range(2..=4);
    (0..n)
        .map(|_| words[rng.random_range(0..words.len())].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

struct Batch {
    candidates: Vec<String>,
    spans: Vec<String>,
}

fn best_sets(b: &Batch) -> f32 {
    let mut sum = 0.0;
    for span in &b.spans {
        sum += b
            .candidates
            .iter()
            .map(|c| jaccard_sets(span, c))
            .fold(0.0, f32::max);
    }
    sum
}

fn best_tokens(b: &Batch) -> f32 {
    let tokens: Vec<Tokens<'_>> = b.candidates.iter().map(|c| Tokens::new(c)).collect();
    let mut sum = 0.0;
    for span in &b.spans {
        let span = Tokens::new(span);
        sum += tokens.iter().map(|t| span.jaccard(t)).fold(0.0, f32::max);
    }
    sum
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut results = Vec::new();
    for spans in [1usize, 4] {
        let mut rng = StdRng::seed_from_u64(29);
        let words: Vec<String> = (0..300).map(|i| format!("w{i:03}x")).collect();
        let batches: Vec<Batch> = (0..256)
            .map(|_| {
                let base = name(&mut rng, &words);
                let candidates = (0..CANDIDATES)
                    .map(|_| format!("{base} {}", name(&mut rng, &words)))
                    .collect();
                let names = (0..spans).map(|_| name(&mut rng, &words)).collect();
                Batch {
                    candidates,
                    spans: names,
                }
            })
            .collect();
        // Both give the same scores, or the comparison means nothing.
        for b in &batches {
            assert_eq!(best_sets(b), best_tokens(b));
        }

        let (mut sets_ns, mut tokens_ns) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let time = |f: fn(&Batch) -> f32| {
                let t = Instant::now();
                let mut acc = 0.0;
                for i in 0..BATCHES_PER_ROUND {
                    acc += f(black_box(&batches[i % batches.len()]));
                }
                black_box(acc);
                t.elapsed().as_nanos() as f64 / (BATCHES_PER_ROUND * spans) as f64
            };
            // Alternate which goes first.
            if round % 2 == 0 {
                sets_ns.push(time(best_sets));
                tokens_ns.push(time(best_tokens));
            } else {
                tokens_ns.push(time(best_tokens));
                sets_ns.push(time(best_sets));
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (s, t) = (median(&mut sets_ns), median(&mut tokens_ns));
        println!(
            "scoring one span against {CANDIDATES} candidates ({spans} span(s) a kind, median \
             of {rounds} rounds): HashSets per pair {s:.0} ns, tokens split once {t:.0} ns ({:.1}x)",
            s / t
        );
        results.push(serde_json::json!({
            "spans_per_kind": spans,
            "sets_ns_per_span": s,
            "tokens_ns_per_span": t,
            "speedup": s / t,
        }));
    }
    if let Ok(path) = std::env::var("BENCH_OUT") {
        let json = serde_json::json!({
            "candidates": CANDIDATES,
            "rounds": rounds,
            "results": results,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).expect("BENCH_OUT");
        println!("wrote {path}");
    }
}
