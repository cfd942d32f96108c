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
