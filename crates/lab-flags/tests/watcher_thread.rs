//! The flag watcher's thread ends with its flags (a file of its own: it counts this process's
//! threads by name, which other tests' watchers would change).

use std::sync::Arc;
use std::time::Duration;

use lab_flags::{Definitions, Flags, Store};
use testkit::resp::{fake_redis, Reply};

/// This process's threads named `lab-flags` (Linux: /proc/self/task/*/comm).
fn watcher_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "lab-flags")
        .count()
}

/// Dropped flags stop their watcher at once, not at its next wake-up (here an hour away: a
/// re-read interval of an hour and no change message): a process that makes and drops flags
/// does not keep a thread and two Redis connections for each.
#[tokio::test]
async fn the_watcher_thread_ends_when_its_flags_are_dropped() {
    let (url, _) = fake_redis(|name, _| match name.to_ascii_uppercase().as_str() {
        "HGETALL" => Reply::Raw(b"*0\r\n"),
        "SUBSCRIBE" => {
            Reply::Raw(b"*3\r\n$9\r\nsubscribe\r\n$22\r\nlab-test:flags:changed\r\n:1\r\n")
        }
        _ => Reply::Raw(b"+OK\r\n"),
    })
    .await;
    let store = Store::with_namespace(&url, "lab-test").unwrap();
    let flags = Flags::watch_refreshing(
        store,
        Arc::new(Definitions::embedded()),
        &lab_core::metrics::Metrics::new(),
        None,
        Duration::from_secs(3600),
    )
    .await;
    assert!(flags.known(), "the first read answered");
    assert_eq!(watcher_threads(), 1);
    drop(flags);
    for _ in 0..200 {
        if watcher_threads() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the watcher's thread outlived its flags by 5 s");
}
