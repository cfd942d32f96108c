//! The fixed client's overhead against the legacy one on a healthy path, in the same run.
//!
//! Both clients call the same in-process stub entity-service on loopback (200 at once), one call
//! at a time, in interleaved rounds so that machine noise lands on both alike. The fixed client
//! does more per call — breaker and limiter bookkeeping, a deadline per attempt, the budget header,
//! a retry-budget deposit — and this prints what that costs as a ratio of mean latencies.
//!
//!     cargo bench -p entity-client-legacy --bench overhead
//!     BENCH_OUT=overhead.json BENCH_ROUNDS=40 cargo bench -p entity-client-legacy --bench overhead

use std::time::{Duration, Instant};

use entity_client::test_support::{ctx, request, Reply, Stub};
use entity_client::{hop_table, ClientConfig, Controls};
use lab_core::metrics::Metrics;

/// Calls per client per round; rounds alternate which client goes first.
const CALLS_PER_ROUND: usize = 1_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Stats {
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    calls: usize,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let q = |p: f64| us(samples[((samples.len() - 1) as f64 * p).round() as usize]);
    Stats {
        mean_us: samples.iter().map(|d| us(*d)).sum::<f64>() / samples.len() as f64,
        p50_us: q(0.5),
        p99_us: q(0.99),
        calls: samples.len(),
    }
}

fn main() {
    let rounds = env_usize("BENCH_ROUNDS", 20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let stub = Stub::start(Reply::ok()).await;
        let metrics = Metrics::new();
        let families = entity_client::metrics::ClientMetrics::register(&metrics)
            .expect("entity-client families");
        let legacy = entity_client_legacy::Client::new(vec![stub.url.clone()], families.clone())
            .expect("legacy client");
        let fixed = entity_client::Client::new(
            ClientConfig {
                base_urls: vec![stub.url.clone()],
                budget: hop_table().entity,
                retry_budget: Default::default(),
                breaker: Default::default(),
                max_concurrency: 16,
                max_concurrency_adaptive: 16,
            },
            families,
        )
        .expect("fixed client");
        let (req, ctx, controls) = (request(), ctx(), Controls::default());

        // Warm both connection pools and code paths.
        for _ in 0..200 {
            legacy
                .resolve(&ctx, &req, true)
                .await
                .expect("legacy warm-up");
            fixed
                .resolve(&ctx, &req, &controls)
                .await
                .expect("fixed warm-up");
        }
        let (mut l, mut f) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for turn in 0..2 {
                let legacy_turn = (round + turn) % 2 == 0;
                for _ in 0..CALLS_PER_ROUND {
                    let t = Instant::now();
                    if legacy_turn {
                        legacy.resolve(&ctx, &req, true).await.expect("legacy call");
                        l.push(t.elapsed());
                    } else {
                        fixed
                            .resolve(&ctx, &req, &controls)
                            .await
                            .expect("fixed call");
                        f.push(t.elapsed());
                    }
                }
            }
        }
        let (l, f) = (stats(l), stats(f));
        let ratio = f.mean_us / l.mean_us;
        println!(
            "healthy path, {} calls each, same run, loopback stub answering at once:",
            l.calls
        );
        println!(
            "  legacy  mean {:7.1} us  p50 {:7.1} us  p99 {:7.1} us",
            l.mean_us, l.p50_us, l.p99_us
        );
        println!(
            "  fixed   mean {:7.1} us  p50 {:7.1} us  p99 {:7.1} us",
            f.mean_us, f.p50_us, f.p99_us
        );
        println!("  fixed / legacy mean latency: {ratio:.3}");
        if let Ok(path) = std::env::var("BENCH_OUT") {
            let json = serde_json::json!({
                "calls_each": l.calls,
                "legacy": {"mean_us": l.mean_us, "p50_us": l.p50_us, "p99_us": l.p99_us},
                "fixed": {"mean_us": f.mean_us, "p50_us": f.p50_us, "p99_us": f.p99_us},
                "ratio_fixed_over_legacy_mean": ratio,
            });
            std::fs::write(&path, serde_json::to_vec_pretty(&json).expect("json"))
                .expect("write BENCH_OUT");
            println!("  written to {path}");
        }
    });
}
