//! The operator's rate-limit function (`crates/lab-flags/redis/ratelimit.lua`) against the real
//! Redis: GCRA, and a gateway's own bucket state taken into the account when it is later than
//! Redis's (`LAB-FIX(one-account)`, issue 28), at most a full bucket's.

use lab_flags::acl;

/// `FCALL lab_gcra 1 <key> 1000000 5 [<ahead µs>]`: a 1 rps plan with a burst of 5 (intervals of
/// a second, so a test's own pauses between calls refill nothing). Returns `allowed`.
async fn gcra(c: &mut redis::aio::MultiplexedConnection, key: &str, ahead_us: Option<u64>) -> i64 {
    gcra_retry(c, key, ahead_us).await.0
}

/// The same, with the retry-after in µs.
async fn gcra_retry(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
    ahead_us: Option<u64>,
) -> (i64, i64) {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(acl::RATELIMIT_FUNCTION)
        .arg(1)
        .arg(key)
        .arg(1_000_000)
        .arg(5);
    if let Some(a) = ahead_us {
        cmd.arg(a);
    }
    cmd.query_async(c).await.expect("the function answers")
}

fn key() -> String {
    format!("rlfn-test-{:016x}:rl:1", rand::random::<u64>())
}

#[tokio::test]
async fn a_gateways_own_bucket_state_is_taken_once_and_at_most_a_full_bucket() {
    let url = testkit::redis_url().await;
    acl::load_functions(&url).await.unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();

    // A bucket full 2.5 s ahead (2.5 of the 5-request burst spent on its own), sent twice (the
    // first call timed out after it ran, say), then a plain call: the account holds 2.5 + 1 +
    // 1 requests and refuses the third. Without the state all three pass; added up as a count,
    // the second would already be refused.
    let k = key();
    let sent = [Some(2_500_000), Some(2_500_000), Some(0)];
    let mut got = Vec::new();
    for ahead in sent {
        got.push(gcra(&mut c, &k, ahead).await);
    }
    assert_eq!(got, [1, 1, 0], "allowed per call, for states {sent:?}");

    // A bucket full 1,000 s ahead (a long outage at this plan could not do that: a full bucket
    // is 5 s ahead) costs the tenant its burst, not 1,000 s of refusals: refused now for about
    // one interval (1 s), no longer.
    let k = key();
    let (allowed, retry_after_us) = gcra_retry(&mut c, &k, Some(1_000_000_000)).await;
    assert_eq!(allowed, 0, "the state spent the burst");
    assert!(
        retry_after_us > 0 && retry_after_us <= 1_000_000,
        "refused for {retry_after_us} µs: at most one interval"
    );
    // The state is kept even though this call was refused: the next one is refused too.
    assert_eq!(gcra(&mut c, &k, None).await, 0, "the state was kept");

    // A call without the argument (an older gateway) is plain GCRA: a burst of 5.
    let k = key();
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(gcra(&mut c, &k, None).await);
    }
    assert_eq!(got, [1, 1, 1, 1, 1, 0]);
}
