//! The rate limiter's cost per request: one GCRA decision against the real Redis on loopback.
//!
//!     cargo bench -p edge-gateway --bench ratelimit           # REDIS_URL or redis://127.0.0.1:6379
//!     BENCH_OUT=ratelimit.json BENCH_CALLS=50000 cargo bench -p edge-gateway --bench ratelimit
//!
//! Sequential decisions give the latency a request pays; 64 concurrent callers give the
//! throughput one gateway process gets from one multiplexed Redis connection.

use std::time::{Duration, Instant};

use edge_gateway::ratelimit::{Decision, RateLimitSettings, RateLimiter};
use lab_core::metrics::Metrics;

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6
}

fn main() {
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // The operator's part: the limiter's function (the gateway only calls it).
        lab_flags::acl::load_functions(&redis_url)
            .await
            .expect("loading the rate limiter's function (Redis 7 at REDIS_URL)");
        let limiter = RateLimiter::new(
            RateLimitSettings {
                redis_url: redis_url.clone(),
                namespace: format!("bench-{}", std::process::id()),
                // Generous: the benchmark measures Redis, not the deadline.
                deadline_ms: 1_000,
                burst_seconds: 1.0,
                fallback_replicas: 1,
            },
            &Metrics::new(),
        )
        .expect("limiter");
        // A rate no benchmark reaches, so every decision is the common "allowed" path.
        let rps = 1_000_000;
        for _ in 0..500 {
            assert_eq!(
                limiter.check(1, rps).await,
                Decision::Allowed,
                "is Redis up at {redis_url}?"
            );
        }
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls {
            let t = Instant::now();
            let d = limiter.check((i % 100) as i64, rps).await;
            samples.push(t.elapsed());
            assert_eq!(d, Decision::Allowed);
        }
        samples.sort();
        let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / calls as f64 * 1e6;
        let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));

        let concurrent = 64;
        let per_task = calls / concurrent;
        let started = Instant::now();
        let limiter = std::sync::Arc::new(limiter);
        let tasks: Vec<_> = (0..concurrent)
            .map(|t| {
                let l = limiter.clone();
                tokio::spawn(async move {
                    for i in 0..per_task {
                        l.check(((t * per_task + i) % 100) as i64, rps).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        let throughput = (per_task * concurrent) as f64 / started.elapsed().as_secs_f64();

        println!("rate limiter, one GCRA decision against Redis on loopback ({calls} sequential):");
        println!("  mean {mean:.1} us  p50 {p50:.1} us  p99 {p99:.1} us per request");
        println!("  {concurrent} concurrent callers: {throughput:.0} decisions/s from one process");
        if let Ok(path) = std::env::var("BENCH_OUT") {
            let json = serde_json::json!({
                "calls": calls, "mean_us": mean, "p50_us": p50, "p99_us": p99,
                "concurrent_callers": concurrent, "decisions_per_second": throughput,
            });
            std::fs::write(&path, serde_json::to_vec_pretty(&json).expect("json"))
                .expect("write BENCH_OUT");
        }
    });
}
