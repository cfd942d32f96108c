//! The in-process lab for `scripts/schemathesis.sh`: edge-gateway → orchestrator →
//! entity-service over a fresh PostgreSQL database (testkit's rules: `DATABASE_URL`,
//! `REDIS_URL`), with one tenant, its API key and a plan rate high enough that the limiter never
//! gets in the fuzzer's way (429 stays documented; `tests/openapi.rs` drives it for real).
//!
//! Prints `GATEWAY_URL=...` and `API_KEY=...` once serving, then runs until SIGTERM/SIGINT or
//! `--max-seconds` (default 900), whichever comes first; on the way out it drops the lab and
//! the database. Everything listens on 127.0.0.1 only.
//!
//! `cargo run -p lab-e2e --example schemathesis_lab -- [--max-seconds N]`

use std::io::Write;
use std::time::Duration;

use lab_e2e::{Lab, LabOptions};
use testkit::{fixtures, TestDb};

/// 1,000,000 requests/s: the fuzzer sends a few hundred per second at most.
const UNLIMITED_RPS: i32 = 1_000_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut max_seconds = 900u64;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--max-seconds" => {
                max_seconds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| anyhow::anyhow!("--max-seconds takes a number"))?
            }
            other => anyhow::bail!("unknown argument {other} (known: --max-seconds N)"),
        }
    }

    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::set_rate_limit(&db.url, 1, UNLIMITED_RPS).await;
    // A few entities so that some generated texts resolve and 200s carry entities.
    fixtures::entities(
        &db.url,
        &[
            (10, 1, "organization", "Vega Labs", 800),
            (11, 1, "person", "Anna Schmidt", 500),
            (12, 1, "organization", "A", 100),
        ],
    )
    .await;
    let lab = Lab::start(db, LabOptions::default()).await;
    println!("GATEWAY_URL={}", lab.gateway.url);
    println!("GATEWAY_ADMIN_URL={}", lab.gateway.admin);
    println!("API_KEY={}", key.api_key);
    std::io::stdout().flush()?;

    let term = async {
        let mut s = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        s.recv().await;
    };
    tokio::select! {
        _ = term => eprintln!("schemathesis_lab: SIGTERM; stopping"),
        _ = tokio::signal::ctrl_c() => eprintln!("schemathesis_lab: SIGINT; stopping"),
        _ = tokio::time::sleep(Duration::from_secs(max_seconds)) => {
            eprintln!("schemathesis_lab: {max_seconds} s elapsed; stopping")
        }
    }
    // Stops every service and drops the test database.
    drop(lab);
    Ok(())
}
