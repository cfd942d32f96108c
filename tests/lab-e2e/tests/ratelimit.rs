//! Per-tenant rate limiting against the real Redis: exactly the allowed burst passes under
//! concurrency, two gateways share one budget, tenants are isolated, and a Redis that goes away
//! mid-test leaves each gateway limiting on its own buckets (counted) until it is back.

use futures::future::join_all;
use lab_e2e::{Lab, LabOptions};
use serde_json::json;
use testkit::proxy::CuttableProxy;
use testkit::{fixtures, TestDb};

const DOC: &str = "The payee Vega Labs confirmed.";

/// Tenant 1 limited to 1 rps with a 5 s burst (5 requests at once), tenant 2 at the default 50.
async fn lab(opts: LabOptions) -> (Lab, String, String) {
    let db = TestDb::new().await;
    let a = fixtures::tenant_with_key(&db.url, 1).await;
    let b = fixtures::tenant_with_key(&db.url, 2).await;
    fixtures::set_rate_limit(&db.url, 1, 1).await;
    fixtures::entities(&db.url, &[(10, 1, "organization", "Vega Labs", 100)]).await;
    (Lab::start(db, opts).await, a.api_key, b.api_key)
}

fn burst5() -> LabOptions {
    LabOptions::default()
}

/// Send `n` requests at once to `gateway`; return how many the limiter admitted (any answer
/// but 429 — a large burst may also meet the fixed client's concurrency limit downstream, 503)
/// and how many it refused (429).
async fn burst(gateway: &str, key: &str, n: usize) -> (usize, usize) {
    let client = testkit::http();
    let calls = (0..n).map(|i| {
        client
            .post(format!("{gateway}/v1/extract"))
            .bearer_auth(key)
            .json(&json!({"doc_id": format!("d{i}"), "text": DOC}))
            .send()
    });
    let mut ok = 0;
    let mut limited = 0;
    for r in join_all(calls).await {
        let r = r.expect("answered");
        match r.status().as_u16() {
            200 | 503 => ok += 1,
            429 => {
                assert!(
                    r.headers().get("retry-after").is_some(),
                    "429 carries Retry-After"
                );
                limited += 1;
            }
            s => panic!("unexpected status {s}"),
        }
    }
    (ok, limited)
}

#[tokio::test]
async fn concurrent_requests_of_one_tenant_pass_exactly_the_burst_and_tenants_are_isolated() {
    let (lab, a, b) = lab(burst5()).await;
    // 1 rps x burst_seconds (1.0) = a burst of 1 at the plan's 1 rps.
    let (ok, limited) = burst(&lab.gateway.url, &a, 12).await;
    assert_eq!((ok, limited), (1, 11), "exactly the burst passes");
    // Tenant 2 (50 rps, burst 50) is untouched by tenant 1's exhaustion.
    let (ok, limited) = burst(&lab.gateway.url, &b, 12).await;
    assert_eq!((ok, limited), (12, 0));
    let limited_total = Lab::metric(&lab.gateway.admin, "gateway_rate_limited_total", "").await;
    assert_eq!(limited_total, 11.0);
}

#[tokio::test]
async fn two_gateways_share_one_budget_per_tenant() {
    let opts = LabOptions {
        extra_gateways: 1,
        ..LabOptions::default()
    };
    let (lab, _, b) = lab(opts).await;
    // Tenant 2: 50 rps, burst 50. 40 through one gateway and 40 through the other, at once.
    let t0 = std::time::Instant::now();
    let (g1, g2) = tokio::join!(
        burst(&lab.gateway.url, &b, 40),
        burst(&lab.extra_gateways[0].url, &b, 40)
    );
    // One budget: 50 of 80, plus what refilled while the burst lasted (1 per 20 ms at 50 rps).
    // The refill is computed from the burst's measured duration, not assumed: on a loaded
    // machine the same 80 requests take longer and the bucket really does refill more (a fixed
    // bound of 55 failed once at 57). Two separate budgets would admit 80.
    let refilled = (t0.elapsed().as_secs_f64() * 50.0).ceil() as usize;
    let ok = g1.0 + g2.0;
    assert!(
        (50..=50 + refilled).contains(&ok) && ok < 80,
        "{ok} of 80 admitted across two gateways (one budget: 50 + {refilled} refilled)"
    );
    assert!(g1.0 > 0 && g2.0 > 0, "both gateways admitted some");
}

#[tokio::test]
async fn redis_down_keeps_the_tenant_limited_on_the_gateways_own_bucket_and_counts_it() {
    let proxy = CuttableProxy::start(&testkit::redis_url().await).await;
    let opts = LabOptions {
        ratelimit_redis_url: Some(proxy.url.clone()),
        ..LabOptions::default()
    };
    let (lab, a, _) = lab(opts).await;
    assert_eq!(
        burst(&lab.gateway.url, &a, 6).await,
        (1, 5),
        "limited while Redis is up"
    );

    proxy.set_up(false);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let (ok, limited) = burst(&lab.gateway.url, &a, 6).await;
    // The tenant's plan is 1 rps with a burst of 1, and the gateway's bucket followed what Redis
    // admitted a moment ago: at most one more (if a second has passed), never the six that
    // failing open admitted (issue 28).
    assert!(
        ok <= 1 && ok + limited == 6,
        "Redis down: still limited on the gateway's own bucket, got {ok} admitted, {limited} 429"
    );
    let mut local = 0.0;
    for decision in ["local_allowed", "local_limited"] {
        local += Lab::metric(
            &lab.gateway.admin,
            "gateway_ratelimit_decisions_total",
            &format!("decision=\"{decision}\""),
        )
        .await;
    }
    assert_eq!(local, 6.0, "every decision made without Redis is counted");

    proxy.set_up(true);
    // The tenant's earlier state is still in Redis; wait out its bucket, then it is limited again.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        burst(&lab.gateway.url, &a, 6).await,
        (1, 5),
        "Redis back: limiting resumes"
    );
}
