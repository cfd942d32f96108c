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
/// one). Returns how many threads were set.
pub fn set_own(nice: i32) -> std::io::Result<usize> {
    let mut set = 0;
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Ok(tid) = entry?.file_name().to_string_lossy().parse::<libc::id_t>() else {
            continue;
        };
        // SAFETY: setpriority only changes a scheduling attribute of the given thread.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
            let err = std::io::Error::last_os_error();
            // A thread that ended since the listing is no failure.
            if err.raw_os_error() != Some(libc::ESRCH) {
                return Err(err);
            }
        } else {
            set += 1;
        }
    }
    Ok(set)
}

/// This thread's nice value.
pub fn own() -> i32 {
    // SAFETY: getpriority reads a scheduling attribute; -1 is a valid answer, so errno decides,
    // and for the calling thread it cannot fail.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

/// In a child between fork and exec: back to the ordinary priority (nice 0). Lowering one's own
/// priority is always allowed.
pub fn ordinary_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setpriority is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setpriority(libc::PRIO_PROCESS, 0, 0) != 0 {
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
            assert!(
                text.contains("children at nice 0, this process at 5"),
                "{text}"
            );
            return;
        }
        // Nice 5 stands in for the generator's -10 (which needs CAP_SYS_NICE): what is tested
        // is that the child does not inherit it.
        assert!(set_own(5).unwrap() >= 1);
        assert_eq!(own(), 5);
        let nice_of = |cmd: &mut std::process::Command| -> i32 {
            let out = cmd
                .args(["-c", "cut -d' ' -f19 /proc/self/stat"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        // Without the reset the child inherits 5 (the test can fail)...
        assert_eq!(nice_of(&mut std::process::Command::new("sh")), 5);
        // ...with it, 0.
        let mut cmd = std::process::Command::new("sh");
        ordinary_in_child(&mut cmd);
        assert_eq!(nice_of(&mut cmd), 0);
        // A thread started after set_own inherits it.
        assert_eq!(std::thread::spawn(own).join().unwrap(), 5);
        println!("children at nice 0, this process at 5");
    }
}
