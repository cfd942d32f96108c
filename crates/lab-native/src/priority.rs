//! The load generator's CPU priority over the lab it measures.
//!
//! In production the users are other machines: however saturated the fleet, the requests keep
//! arriving on schedule. On one 2-core machine the open-loop generator shares the cores with the
//! whole fleet, PostgreSQL and the broker, and in a storm it fell behind its own schedule: the
//! full-size map of 2026-12-07 had every legacy cell invalid on the generator's dispatch lag
//! (1.4 s at 0.5x the healthy capacity, 8.9-11.5 s at 0.8-0.95x; `docs/replay.md`). So an
//! experiment's own process runs at a higher priority than its lab ([`GENERATOR_NICE`]), and
//! everything it starts — the supervisor and through it every replica, a restarted PostgreSQL
//! or Redis — is put back at the ordinary priority first ([`ordinary_in_child`]), so the lab's
//! services share the machine among themselves exactly as before. The dispatch lag is measured
//! either way (`lab_load`), and a run whose generator fell behind is still refused.
//!
//! Raising a priority needs `CAP_SYS_NICE` (root has it); without it the experiment runs as
//! before and says so.

/// The experiment's nice value. CFS weighs a thread at nice -10 as ~9.3 at nice 0: the
/// generator's threads are served first when they are runnable, and they only ever need a small
/// share (the load generator took 0.16 cores at 600 rps, docs/reports/chain-limit.md).
pub const GENERATOR_NICE: i32 = -10;

/// Set every thread of this process to `nice` (Linux keeps a nice value per thread, and a new
/// thread takes its creator's, so the runtime's threads started before this call are set one by
/// one, and the listing is read again until it shows no thread not yet set: one started during a
/// pass by a thread not yet set would otherwise keep the old value). Returns how many threads
/// were set.
pub fn set_own(nice: i32) -> std::io::Result<usize> {
    let mut set = std::collections::HashSet::new();
    loop {
        let mut new = 0;
        for entry in std::fs::read_dir("/proc/self/task")? {
            let Ok(tid) = entry?.file_name().to_string_lossy().parse::<libc::id_t>() else {
                continue;
            };
            if set.contains(&tid) {
                continue;
            }
            // SAFETY: setpriority only changes a scheduling attribute of the given thread.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
                let err = std::io::Error::last_os_error();
                // A thread that ended since the listing is no failure.
                if err.raw_os_error() != Some(libc::ESRCH) {
                    return Err(err);
                }
            }
            set.insert(tid);
            new += 1;
        }
        if new == 0 {
            return Ok(set.len());
        }
    }
}

/// This thread's nice value. (`getpriority` may return -1 as a value, so errors are told by
/// errno; for the calling thread it cannot fail.)
pub fn own() -> i32 {
    // SAFETY: getpriority reads a scheduling attribute of the calling thread.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

/// In a child between fork and exec: back to the ordinary priority (nice 0) when the parent's
/// was raised (negative). Lowering one's priority is always allowed; a positive nice value is
/// left as it is (going back to 0 from it would need `CAP_SYS_NICE`, and a user who ran labctl
/// under `nice` meant the lab too).
pub fn ordinary_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpriority and setpriority are async-signal-safe system calls, and nothing else
    // runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::getpriority(libc::PRIO_PROCESS, 0) < 0
                && libc::setpriority(libc::PRIO_PROCESS, 0, 0) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child of a process at a raised nice value starts at 0, and the process's own threads
    /// keep the raised value. `set_own` changes every thread of the process it runs in, so the
    /// test runs itself again in a process of its own.
    #[test]
    fn a_child_started_from_a_higher_priority_process_runs_at_the_ordinary_one() {
        if std::env::var_os("LAB_PRIORITY_CHILD").is_none() {
            // Run this same test in a process of its own, so `set_own` touches nothing else.
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "priority::tests::a_child_started_from_a_higher_priority_process_runs_at_the_ordinary_one",
                    "--nocapture",
                ])
                .env("LAB_PRIORITY_CHILD", "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            // As root the test must have run; elsewhere it may say why it could not.
            let tested = text.contains("children at nice 0, this process at -5");
            // SAFETY: geteuid cannot fail.
            let root = unsafe { libc::geteuid() } == 0;
            assert!(
                tested || (!root && text.contains("not tested: no CAP_SYS_NICE")),
                "{text}"
            );
            return;
        }
        // The generator's -5 needs CAP_SYS_NICE (root has it; CI and this lab's machines run as
        // root). Without it there is nothing this process could raise, and nothing to test.
        if let Err(e) = set_own(-5) {
            println!("not tested: no CAP_SYS_NICE ({e})");
            return;
        }
        assert_eq!(own(), -5);
        let nice_of = |cmd: &mut std::process::Command| -> i32 {
            let out = cmd
                .args(["-c", "cut -d' ' -f19 /proc/self/stat"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        // Without the reset the child inherits -5 (the test can fail)...
        assert_eq!(nice_of(&mut std::process::Command::new("sh")), -5);
        // ...with it, 0.
        let mut cmd = std::process::Command::new("sh");
        ordinary_in_child(&mut cmd);
        assert_eq!(nice_of(&mut cmd), 0);
        // A thread started after set_own inherits it.
        assert_eq!(std::thread::spawn(own).join().unwrap(), -5);
        println!("children at nice 0, this process at -5");
    }
}
