//! A client policy file (`labctl up --policy FILE`, loaded as the orchestrator's
//! `LAB_CONFIG_FILE`) reaches the running fixed client: the same dead dependency, the same
//! requests, and the attempts follow the policy's numbers, not the lab's. Counts only.

use lab_e2e::{Lab, LabOptions};
use serde_json::json;
use testkit::{fixtures, TestDb};

/// One span, so one user request is one batch: one entity call per attempt.
const DOC: &str = "The payee Vega Labs confirmed.";
/// Fewer than the breaker's 20-call minimum in the first attempts, so it cannot shed them all.
const USERS: usize = 8;

/// `(attempts, retries)` at the orchestrator for USERS requests against a dependency that
/// answers 503 to everything, in resilient mode.
async fn attempts(config: Option<std::path::PathBuf>) -> (f64, f64) {
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let lab = Lab::start(
        db,
        LabOptions {
            cache_capacity: Some(1),
            orchestrator_config_file: config,
            ..LabOptions::default()
        },
    )
    .await;
    lab.set_flag("client.mode", "resilient").await;
    lab.set_flag("fault.entity.error_fraction", "1").await;
    for i in 0..USERS {
        let resp = lab
            .extract(
                &key.api_key,
                json!({"doc_id": format!("p{i}"), "text": DOC}),
            )
            .await;
        assert!(resp.status().is_server_error(), "{}", resp.status());
    }
    let orch = &lab.orchestrators[0].admin;
    (
        Lab::metric(orch, "entity_requests_total", "").await,
        Lab::metric(orch, "entity_retries_total", "").await,
    )
}

#[tokio::test]
async fn a_policy_file_sets_the_running_clients_attempts_and_retry_budget() {
    let (a, r) = attempts(None).await;
    assert!(
        r >= USERS as f64,
        "the lab's own policy retries a 503 (3 attempts): {a} attempts, {r} retries"
    );

    let dir = std::env::temp_dir().join(format!("lab-policy-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    // One attempt: no retries at all, whatever the budget holds.
    let one = dir.join("one-attempt.toml");
    std::fs::write(&one, "[budget]\nentity_max_attempts = 1\n").unwrap();
    let (a1, r1) = attempts(Some(one)).await;
    assert_eq!(r1, 0.0, "one attempt per call: {a1} attempts, {r1} retries");
    assert_eq!(a1, USERS as f64, "every request still made its one attempt");

    // A retry budget of 2 tokens that successes never refill (every call fails): 2 retries in
    // all, however many requests — the lab's 100-token budget allows every one of them.
    let tight = dir.join("tight-budget.toml");
    std::fs::write(
        &tight,
        "[policy]\nretry_budget_max_tokens = 2\nretry_budget_retry_cost = 1\n",
    )
    .unwrap();
    let (a2, r2) = attempts(Some(tight)).await;
    assert_eq!(
        r2, 2.0,
        "the policy's budget, not the lab's: {a2} attempts, {r2} retries"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
