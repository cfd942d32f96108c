//! Flags against the real Redis: a change reaches a watcher without a restart, and an
//! unreachable store keeps the last-known values.

use std::sync::Arc;
use std::time::Duration;

use lab_flags::{Definitions, Flags, Store};
use rand::Rng;

fn namespace() -> String {
    format!("lab-test-{:016x}", rand::rng().random::<u64>())
}

/// Poll (bounded) until `cond` holds; returns the number of polls it took.
async fn eventually(mut cond: impl FnMut() -> bool) -> usize {
    for i in 0..200 {
        if cond() {
            return i;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not reached within 200 polls");
}

#[tokio::test]
async fn set_reaches_every_watcher_without_a_restart() {
    let url = testkit::redis_url().await;
    let ns = namespace();
    let defs = Arc::new(Definitions::embedded());
    let store = Store::with_namespace(&url, &ns).unwrap();
    let a = Flags::watch(
        store.clone(),
        defs.clone(),
        &lab_core::metrics::Metrics::new(),
    )
    .await;
    let b = Flags::watch(
        store.clone(),
        defs.clone(),
        &lab_core::metrics::Metrics::new(),
    )
    .await;
    assert_eq!(
        a.snapshot().variant("client.mode"),
        "resilient",
        "the default before any set"
    );

    store.set("client.mode", "legacy").await.unwrap();
    store.set("retries.entity.enabled", "off").await.unwrap();
    eventually(|| a.snapshot().variant("client.mode") == "legacy").await;
    eventually(|| !b.snapshot().enabled("retries.entity.enabled")).await;

    store.unset("client.mode").await.unwrap();
    eventually(|| a.snapshot().variant("client.mode") == "resilient").await;
    assert!(
        !store.read_all().await.unwrap().contains_key("client.mode"),
        "unset removes the value"
    );
    assert!(
        !b.snapshot().enabled("retries.entity.enabled"),
        "unset touches one flag only"
    );

    store.reset().await.unwrap();
    eventually(|| b.snapshot().enabled("retries.entity.enabled")).await;
}

#[tokio::test]
async fn unreachable_store_keeps_defaults_and_says_so() {
    // Nothing listens on port 1.
    let store = Store::with_namespace("redis://127.0.0.1:1", &namespace()).unwrap();
    let metrics = lab_core::metrics::Metrics::new();
    let flags = Flags::watch(store, Arc::new(Definitions::embedded()), &metrics).await;
    assert_eq!(flags.snapshot().variant("client.mode"), "resilient");
    let text = metrics.render();
    assert!(text.contains("lab_flags_store_reachable 0"), "{text}");
    assert!(text.contains("lab_flag_variant{flag=\"client.mode\",variant=\"resilient\"} 1"));
}

#[tokio::test]
async fn unknown_variants_in_the_store_fall_back_to_the_default() {
    let url = testkit::redis_url().await;
    let ns = namespace();
    let store = Store::with_namespace(&url, &ns).unwrap();
    // Written behind the definitions' back (an older labctl, a hand-edited hash).
    store.set("client.mode", "chaos").await.unwrap();
    store.set("retries.gateway.enabled", "off").await.unwrap();
    let flags = Flags::watch(
        store.clone(),
        Arc::new(Definitions::embedded()),
        &lab_core::metrics::Metrics::new(),
    )
    .await;
    assert_eq!(flags.snapshot().variant("client.mode"), "resilient");
    assert!(!flags.snapshot().enabled("retries.gateway.enabled"));
    store.reset().await.unwrap();
}

/// Redis restarted without persistence answers with an empty hash: that is not "every flag at
/// its default" (a reset), and the replicas keep what they apply, saying so, until the next set.
#[tokio::test]
async fn a_store_that_comes_back_empty_keeps_last_known_values_and_says_so() {
    let url = testkit::redis_url().await;
    let store = Store::with_namespace(&url, &namespace()).unwrap();
    let metrics = lab_core::metrics::Metrics::new();
    let flags = Flags::watch(store.clone(), Arc::new(Definitions::embedded()), &metrics).await;
    store.set("client.mode", "legacy").await.unwrap();
    eventually(|| flags.snapshot().variant("client.mode") == "legacy").await;

    store.forget().await.unwrap(); // what a restarted, empty Redis holds
    flags.reload(&store).await;
    assert_eq!(
        flags.snapshot().variant("client.mode"),
        "legacy",
        "an empty store does not flip the mode"
    );
    assert!(metrics.render().contains("lab_flags_store_empty 1"));

    // The next write is the source of truth again: what it does not name is at its default.
    store.set("retries.entity.enabled", "off").await.unwrap();
    flags.reload(&store).await;
    assert!(metrics.render().contains("lab_flags_store_empty 0"));
    assert!(!flags.snapshot().enabled("retries.entity.enabled"));
    assert_eq!(flags.snapshot().variant("client.mode"), "resilient");

    // A reset is "all defaults" on purpose, not a loss.
    store.set("client.mode", "legacy").await.unwrap();
    flags.reload(&store).await;
    store.reset().await.unwrap();
    flags.reload(&store).await;
    assert_eq!(flags.snapshot().variant("client.mode"), "resilient");
    assert!(metrics.render().contains("lab_flags_store_empty 0"));
    store.forget().await.unwrap();
}

/// A replica restarted while Redis is down (or back empty) runs what its peers run: the values it
/// last read, from its last-known file — not the defaults, which made a legacy lab half
/// resilient (issue 28). Without such a file it does not know, and says so (its `/readyz` waits).
#[tokio::test]
async fn a_restart_during_a_store_outage_applies_the_last_known_values() {
    let url = testkit::redis_url().await;
    let ns = namespace();
    let dir = std::env::temp_dir().join(format!("lab-flags-{ns}"));
    let file = dir.join("flags-orchestrator-1.json");
    let defs = Arc::new(Definitions::embedded());
    let store = Store::with_namespace(&url, &ns).unwrap();
    store.set("client.mode", "legacy").await.unwrap();
    store.set("retries.entity.enabled", "off").await.unwrap();

    // The first life: reads the store, keeps what it read.
    let metrics = lab_core::metrics::Metrics::new();
    let first =
        Flags::watch_keeping(store.clone(), defs.clone(), &metrics, Some(file.clone())).await;
    assert!(first.known());
    assert_eq!(first.snapshot().variant("client.mode"), "legacy");
    let kept = std::fs::read_to_string(&file).expect("the last-known file is written");
    assert!(kept.contains("\"client.mode\": \"legacy\""), "{kept}");
    drop(first);

    // Restarted with the store unreachable (nothing listens on port 1): the file's values.
    let down = Store::with_namespace("redis://127.0.0.1:1", &ns).unwrap();
    let metrics = lab_core::metrics::Metrics::new();
    let again =
        Flags::watch_keeping(down.clone(), defs.clone(), &metrics, Some(file.clone())).await;
    assert_eq!(again.snapshot().variant("client.mode"), "legacy");
    assert!(!again.snapshot().enabled("retries.entity.enabled"));
    assert!(again.known());
    let text = metrics.render();
    assert!(text.contains("lab_flags_known 1"), "{text}");
    assert!(text.contains("lab_flags_store_reachable 0"), "{text}");

    // Restarted against a store that came back empty: the file's values too.
    store.forget().await.unwrap();
    let empty =
        Flags::watch_keeping(store.clone(), defs.clone(), &Default::default(), Some(file)).await;
    assert_eq!(empty.snapshot().variant("client.mode"), "legacy");

    // No file: the defaults, and not known — the process cannot tell which client it runs.
    let metrics = lab_core::metrics::Metrics::new();
    let blind = Flags::watch_keeping(down, defs, &metrics, None).await;
    assert_eq!(blind.snapshot().variant("client.mode"), "resilient");
    assert!(!blind.known());
    assert!(metrics.render().contains("lab_flags_known 0"));
    let _ = std::fs::remove_dir_all(dir);
}

/// `/readyz` names why a replica that does not know its flags takes no traffic, and passes once
/// the store has answered.
#[tokio::test]
async fn readiness_waits_for_known_flags() {
    let health = lab_core::health::Health::new();
    health.mark_started();
    let down = Store::with_namespace("redis://127.0.0.1:1", &namespace()).unwrap();
    let flags = Flags::watch(down, Arc::new(Definitions::embedded()), &Default::default()).await;
    flags.gate(&health);
    assert_eq!(health.ready(), Err("flags_unknown"));

    let url = testkit::redis_url().await;
    let up = Store::with_namespace(&url, &namespace()).unwrap();
    flags.reload(&up).await; // the store answers (empty: nobody asked for anything else)
    assert_eq!(health.ready(), Ok(()));
}

/// A replica's reloads reuse one connection: a read is one `HGETALL`, not a connect, AUTH and
/// the client's setup before it, inside the same 500 ms timeout (on a machine starved by a storm
/// the gateway's per-read connections timed out for 15 s and the gateway kill switch arrived a
/// step late). A connection that fails is replaced by the next read.
#[tokio::test]
async fn reads_keep_one_connection_and_replace_it_after_a_failure() {
    use testkit::resp::{fake_redis, Reply};
    // An empty flag hash for every HGETALL but the 6th, where the connection is dropped.
    let (url, accepted) = fake_redis(|name, n| match name.to_ascii_uppercase().as_str() {
        "HGETALL" if n == 6 => Reply::Close,
        "HGETALL" => Reply::Raw(b"*0\r\n"),
        _ => Reply::Raw(b"+OK\r\n"),
    })
    .await;
    let store = Store::with_namespace(&url, &namespace()).unwrap();
    let clone = store.clone();
    for _ in 0..5 {
        assert!(store.read().await.unwrap().values.is_empty());
    }
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "five reads, one connection"
    );
    assert!(
        clone.read().await.is_err(),
        "the dropped connection fails that read"
    );
    for _ in 0..3 {
        assert!(clone.read().await.unwrap().values.is_empty());
        assert!(store.read().await.unwrap().values.is_empty());
    }
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one new connection after the failure, shared by the store's clones"
    );
}

/// A store that answers slowly is waited for: the reload is nobody's request, and on a machine
/// starved by the replay's storm the gateway's round trip to Redis took longer than the 500 ms
/// that both this crate and the redis crate used to allow (the kill switch arrived 15–18 s late).
#[tokio::test]
async fn a_slow_store_is_waited_for() {
    use testkit::resp::{fake_redis, Reply};
    let (url, _) = fake_redis(|name, _| match name.to_ascii_uppercase().as_str() {
        "HGETALL" => Reply::Late(
            Duration::from_millis(1500),
            b"*4\r\n$11\r\nclient.mode\r\n$6\r\nlegacy\r\n$8\r\n_written\r\n$1\r\n1\r\n",
        ),
        _ => Reply::Raw(b"+OK\r\n"),
    })
    .await;
    let store = Store::with_namespace(&url, &namespace()).unwrap();
    let contents = store.read().await.expect("a read answered in 1.5 s");
    assert_eq!(
        contents.values.get("client.mode").map(String::as_str),
        Some("legacy")
    );
    assert!(contents.written);
}

/// A read a change's message asked for, and that failed, is tried again at once, not at the next
/// re-read: here the re-read is an hour away, so the change arrives by the retry or not at all.
#[tokio::test]
async fn a_failed_read_after_a_change_is_retried_before_the_next_re_read() {
    use testkit::resp::{fake_redis, Reply};
    let ns = namespace();
    let channel = format!("{ns}:flags:changed");
    // The subscription's confirmation, and a change message right behind it.
    let subscribed: &'static [u8] = Box::leak(
        format!(
            "*3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:1\r\n\
             *3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n$11\r\nclient.mode\r\n",
            channel.len(),
            channel.len()
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    // HGETALL 1 (start) and 2 (after subscribing): never written. 3 (the message's): the
    // connection drops. From 4 on: client.mode=legacy.
    let (url, _) = fake_redis(move |name, n| match name.to_ascii_uppercase().as_str() {
        "HGETALL" if n <= 2 => Reply::Raw(b"*0\r\n"),
        "HGETALL" if n == 3 => Reply::Close,
        "HGETALL" => {
            Reply::Raw(b"*4\r\n$11\r\nclient.mode\r\n$6\r\nlegacy\r\n$8\r\n_written\r\n$1\r\n1\r\n")
        }
        "SUBSCRIBE" => Reply::Raw(subscribed),
        _ => Reply::Raw(b"+OK\r\n"),
    })
    .await;
    let store = Store::with_namespace(&url, &ns).unwrap();
    let metrics = lab_core::metrics::Metrics::new();
    let flags = Flags::watch_refreshing(
        store,
        Arc::new(Definitions::embedded()),
        &metrics,
        None,
        Duration::from_secs(3600),
    )
    .await;
    eventually(|| flags.snapshot().variant("client.mode") == "legacy").await;
    let errors = metrics
        .render()
        .lines()
        .find(|l| l.starts_with("lab_flags_reloads_total{result=\"error\"}"))
        .map(str::to_owned);
    assert_eq!(
        errors.as_deref(),
        Some("lab_flags_reloads_total{result=\"error\"} 1"),
        "the message's read failed once, and the retry read the change"
    );
}

/// The watcher does not share the runtime of the process that watches: with the caller's one
/// worker busy and never yielding (a runtime full of request tasks in a storm), a change still
/// reaches the flags. On the caller's runtime it would wait for the worker (and this test would
/// end at its bound).
#[tokio::test] // a current-thread runtime: one worker, which the test then keeps busy
async fn a_change_arrives_while_the_watching_runtime_is_busy() {
    let url = testkit::redis_url().await;
    let store = Store::with_namespace(&url, &namespace()).unwrap();
    let flags = Flags::watch(
        store.clone(),
        Arc::new(Definitions::embedded()),
        &lab_core::metrics::Metrics::new(),
    )
    .await;
    assert_eq!(flags.snapshot().variant("client.mode"), "resilient");
    // The change, from a thread and runtime of its own (an operator's labctl).
    let operator = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(store.set("client.mode", "legacy"))
            .unwrap()
    });
    // This runtime's only worker does not yield until the change is seen, or 20 s have passed.
    let bound = std::time::Instant::now() + Duration::from_secs(20);
    while flags.snapshot().variant("client.mode") != "legacy" {
        assert!(
            std::time::Instant::now() < bound,
            "the change did not arrive while the watching runtime was busy"
        );
        #[allow(
            clippy::disallowed_methods,
            reason = "blocking this runtime's only worker is the test's point"
        )]
        std::thread::sleep(Duration::from_millis(10));
    }
    operator.join().unwrap();
}

/// A write to a store that accepts the connection and never answers fails after its timeout: a
/// kill switch's `labctl flags set` says the store is not answering, it does not hang (the redis
/// crate's own response timeout is off, so the store's is the only one).
#[tokio::test]
async fn a_write_to_a_silent_store_fails_instead_of_hanging() {
    use testkit::resp::{fake_redis, Reply};
    let (url, _) = fake_redis(|name, _| match name.to_ascii_uppercase().as_str() {
        "EXEC" => Reply::Late(Duration::from_secs(600), b"*0\r\n"),
        _ => Reply::Raw(b"+OK\r\n"),
    })
    .await;
    let store = Store::with_namespace(&url, &namespace()).unwrap();
    let set = tokio::time::timeout(Duration::from_secs(20), store.set("client.mode", "legacy"))
        .await
        .expect("the write ended by itself, within its own timeout");
    let err = format!("{:#}", set.expect_err("nobody answered it"));
    assert!(err.contains("timed out"), "{err}");
}
