//! The process collector, its CPU counter read to the kernel's tick.
//!
//! prometheus 0.14's `ProcessCollector` keeps `process_cpu_seconds_total` as an integer counter:
//! whole seconds. An orchestrator uses ~0.02 cores, so over an 18 s phase its CPU read 0 or 1 s
//! (0.00 or 0.06 cores) and the replay's CPU row was mostly rounding. This collector reports every
//! other process metric as the crate does and sets that one counter from `/proc/self/stat`
//! (user + system time in clock ticks, 10 ms on Linux), the same source, unrounded.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;

/// `ProcessCollector::for_self()` with `process_cpu_seconds_total` to the tick.
pub struct Process {
    inner: prometheus::process_collector::ProcessCollector,
    ticks_per_second: f64,
}

impl Process {
    pub fn for_self() -> Self {
        // SAFETY: sysconf reads a constant of the running system.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self {
            inner: prometheus::process_collector::ProcessCollector::for_self(),
            ticks_per_second: if tck > 0 { tck as f64 } else { 100.0 },
        }
    }
}

/// User + system CPU seconds from the text of `/proc/<pid>/stat`: fields 14 and 15 (utime,
/// stime), counted after the command name, which is in parentheses and may hold spaces.
pub fn cpu_seconds(stat: &str, ticks_per_second: f64) -> Option<f64> {
    let after_comm = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // fields[0] is field 3 (state): utime (14) and stime (15) are fields[11] and fields[12].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_second)
}

impl Collector for Process {
    fn desc(&self) -> Vec<&Desc> {
        self.inner.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.inner.collect();
        let precise = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| cpu_seconds(&s, self.ticks_per_second));
        if let Some(seconds) = precise {
            for f in families
                .iter_mut()
                .filter(|f| f.name() == "process_cpu_seconds_total")
            {
                for m in f.mut_metric() {
                    let mut c = prometheus::proto::Counter::default();
                    c.set_value(seconds);
                    m.set_counter(c);
                }
            }
        }
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_user_and_system_ticks_after_a_command_name_with_spaces() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        let stat =
            "4242 (tokio rt (w) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 56 0 0 20 0 9 0 1 2 3";
        assert_eq!(cpu_seconds(stat, 100.0), Some(12.9));
        assert_eq!(cpu_seconds("garbage", 100.0), None);
    }

    #[test]
    fn this_process_cpu_counter_keeps_its_fraction() {
        // Burn some CPU so the counter is not 0.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(120) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let p = Process::for_self();
        let own = cpu_seconds(
            &std::fs::read_to_string("/proc/self/stat").unwrap(),
            p.ticks_per_second,
        )
        .unwrap();
        let reported = p
            .collect()
            .into_iter()
            .find(|f| f.name() == "process_cpu_seconds_total")
            .expect("the process collector reports CPU")
            .get_metric()[0]
            .get_counter()
            .get_value();
        // Read just after `own`, to the tick: never less, a few ticks more at most. Rounded down
        // to whole seconds (the crate's counter) it would be up to a second less.
        assert!(
            reported >= own && reported - own < 0.05,
            "{own} s by /proc, {reported} s reported"
        );
    }
}
