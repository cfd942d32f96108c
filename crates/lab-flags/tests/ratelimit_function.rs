//! The operator's rate-limit function (`crates/lab-flags/redis/ratelimit.lua`) against the real
//! Redis: GCRA, and the requests a gateway admitted on its own bucket charged before the decision
//! (`LAB-FIX(one-account)`, issue 28), at most one burst's worth.

use lab_flags::acl;

/// `FCALL lab_gcra 1 <key> 1000000 5 <owed>`: a 1 rps plan with a burst of 5 (intervals of a
/// second, so a test's own pauses between calls refill nothing). Returns
/// `(allowed, retry_after_us)`.
async fn gcra(c: &mut redis::aio::MultiplexedConnection, key: &str, owed: u32) -> (i64, i64) {
    redis::cmd("FCALL")
        .arg(acl::RATELIMIT_FUNCTION)
        .arg(1)
        .arg(key)
        .arg(1_000_000)
        .arg(5)
        .arg(owed)
        .query_async(c)
        .await
        .expect("the function answers")
}

fn key() -> String {
    format!("rlfn-test-{:016x}:rl:1", rand::random::<u64>())
}

#[tokio::test]
async fn what_a_gateway_admitted_on_its_own_is_charged_and_at_most_a_burst() {
    let url = testkit::redis_url().await;
    acl::load_functions(&url).await.unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();

    // Three admitted locally, then two more decided here: the burst of five is spent, the
    // sixth is refused. Without the charge the burst would still hold three.
    let k = key();
    assert_eq!(gcra(&mut c, &k, 3).await.0, 1, "the 4th of a burst of 5");
    assert_eq!(gcra(&mut c, &k, 0).await.0, 1, "the 5th");
    assert_eq!(
        gcra(&mut c, &k, 0).await.0,
        0,
        "the 6th: the burst is spent"
    );

    // A long outage's admissions (1,000 at a 1 rps plan: 1,000 s of it) cost the tenant its
    // burst, not 1,000 s of refusals: refused now for about one interval (1 s), no longer.
    let k = key();
    let (allowed, retry_after_us) = gcra(&mut c, &k, 1_000).await;
    assert_eq!(allowed, 0, "the debt spent the burst");
    assert!(
        retry_after_us > 0 && retry_after_us <= 1_000_000,
        "refused for {retry_after_us} µs: at most one interval"
    );
    // The charge is kept even though this call was refused: the next one is too.
    assert_eq!(gcra(&mut c, &k, 0).await.0, 0, "the charge was kept");

    // A call without the argument (an older gateway) is plain GCRA.
    let k = key();
    for i in 0..5 {
        let (allowed, _) = redis::cmd("FCALL")
            .arg(acl::RATELIMIT_FUNCTION)
            .arg(1)
            .arg(&k)
            .arg(1_000_000)
            .arg(5)
            .query_async::<(i64, i64)>(&mut c)
            .await
            .unwrap();
        assert_eq!(allowed, 1, "request {i} of a burst of 5");
    }
}
