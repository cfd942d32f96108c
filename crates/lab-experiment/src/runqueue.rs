//! How long each replica's threads were runnable but waiting for a CPU: the kernel's own
//! scheduler accounting (`/proc/<pid>/task/<tid>/schedstat`, its second field), summed over the
//! process's threads into one counter that never goes back when a thread exits.
//!
//! What it is for: on a saturated machine a process is descheduled for tens or hundreds of
//! milliseconds at a time and then catches up, and what it counts per 100 ms (entity-service's
//! arrivals) turns into empty buckets beside full ones. This is the measurement that tells those
//! pulses from a backoff's waves.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// One process's threads as last read, and its total so far.
#[derive(Default)]
struct Proc {
    /// Thread id → its run-queue wait (ns) at the last read.
    threads: HashMap<u32, u64>,
    total_ns: u64,
}

impl Proc {
    /// Add what each thread waited since it was last read (all of it for a thread not seen
    /// before: it was born since); a thread that exited adds nothing more.
    fn observe(&mut self, now: &[(u32, u64)]) -> u64 {
        let mut threads = HashMap::with_capacity(now.len());
        for &(tid, ns) in now {
            let before = self.threads.get(&tid).copied().unwrap_or(0);
            self.total_ns += ns.saturating_sub(before);
            threads.insert(tid, ns);
        }
        self.threads = threads;
        self.total_ns
    }
}

fn procs() -> &'static Mutex<HashMap<u32, Proc>> {
    static P: OnceLock<Mutex<HashMap<u32, Proc>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

/// Every thread of `pid`: (tid, run-queue wait in ns). `None`: no such process (or no
/// scheduler statistics on this kernel).
fn read_threads(pid: u32) -> Option<Vec<(u32, u64)>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        // A thread that exits between the listing and the read is skipped.
        let Ok(text) = std::fs::read_to_string(e.path().join("schedstat")) else {
            continue;
        };
        if let Some(wait) = text.split_whitespace().nth(1).and_then(|w| w.parse().ok()) {
            out.push((tid, wait));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Seconds `pid`'s threads have waited for a CPU since this process first read it
/// (monotonic: a new pid — a restarted replica — starts again from its threads' own totals).
pub(crate) fn wait_seconds(pid: u32) -> Option<f64> {
    let threads = read_threads(pid)?;
    let mut procs = procs().lock().expect("runqueue lock");
    // Forget processes that are gone (their pid may come back as another process).
    procs.retain(|p, _| *p == pid || std::path::Path::new(&format!("/proc/{p}")).exists());
    Some(procs.entry(pid).or_default().observe(&threads) as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_exits_does_not_take_its_wait_back() {
        let mut p = Proc::default();
        assert_eq!(p.observe(&[(1, 100), (2, 50)]), 150);
        // Thread 2 exited; thread 3 was born and has waited 30.
        assert_eq!(p.observe(&[(1, 160), (3, 30)]), 240);
        // Nothing new.
        assert_eq!(p.observe(&[(1, 160), (3, 30)]), 240);
    }

    #[test]
    fn this_process_has_a_wait_that_never_decreases() {
        let pid = std::process::id();
        let a = wait_seconds(pid).expect("schedstat on Linux");
        // Threads come and go.
        std::thread::spawn(|| (0..1_000_000u64).sum::<u64>())
            .join()
            .unwrap();
        let b = wait_seconds(pid).unwrap();
        assert!(a >= 0.0 && b >= a, "{a} then {b}");
        assert_eq!(wait_seconds(u32::MAX), None);
    }
}
