//! Memory limits that kill — the kernel's own mechanism, as a pod's `resources.limits.memory`.
//!
//! The postmortem's "7 orchestrator pods OOMKilled. Memory per pod had gone from 380 MB to 3.8 GB
//! against a 4 Gi limit." Kubernetes enforces that limit with a memory cgroup per container; the
//! native lab does the same per replica: a group under `retry-storm-lab/<replica>` whose limit the
//! kernel enforces, its OOM killer choosing the replica's process when it is exceeded. The
//! supervisor then sees a SIGKILL, reads the group's OOM-kill counter, and reports `OOMKilled`.
//!
//! cgroup v1 (`/sys/fs/cgroup/memory/…/memory.limit_in_bytes`, `memory.oom_control`) is what the
//! lab's development machines have; v2 (`memory.max`, `memory.events`) is used where the unified
//! hierarchy is mounted at `/sys/fs/cgroup` with the memory controller. Neither: [`available`]
//! says so plainly and no limit is applied.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context};

/// The lab's groups live under this name in the memory hierarchy.
const PARENT: &str = "retry-storm-lab";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

fn v1_root() -> PathBuf {
    PathBuf::from("/sys/fs/cgroup/memory")
}

fn v2_root() -> PathBuf {
    PathBuf::from("/sys/fs/cgroup")
}

/// Which memory controller this machine offers us, or why none.
pub fn available() -> anyhow::Result<Version> {
    if v1_root().join("memory.limit_in_bytes").exists() {
        let parent = v1_root().join(PARENT);
        fs::create_dir_all(&parent).with_context(|| {
            format!(
                "cgroup v1 memory controller found but {} cannot be created (run as root, or \
                 give this user the memory hierarchy)",
                parent.display()
            )
        })?;
        return Ok(Version::V1);
    }
    let controllers = v2_root().join("cgroup.controllers");
    if fs::read_to_string(&controllers).is_ok_and(|c| c.split_whitespace().any(|w| w == "memory")) {
        let parent = v2_root().join(PARENT);
        fs::create_dir_all(&parent).with_context(|| {
            format!("cgroup v2 found but {} cannot be created", parent.display())
        })?;
        // Children of PARENT get the memory controller only if PARENT delegates it.
        fs::write(parent.join("cgroup.subtree_control"), "+memory")
            .context("enabling the memory controller below retry-storm-lab (cgroup v2)")?;
        return Ok(Version::V2);
    }
    bail!(
        "no writable memory cgroup on this machine (neither cgroup v1 /sys/fs/cgroup/memory nor a \
         cgroup v2 hierarchy with the memory controller): memory limits cannot be enforced here"
    )
}

/// Remove the lab's empty groups (left by a supervisor that was killed): `rmdir` only ever
/// removes a group without processes, so this cannot disturb a running lab.
pub fn remove_stale() {
    for root in [v1_root(), v2_root()] {
        if let Ok(dir) = fs::read_dir(root.join(PARENT)) {
            for e in dir.flatten() {
                if e.path().is_dir() {
                    let _ = fs::remove_dir(e.path());
                }
            }
        }
    }
}

/// One replica's memory group.
#[derive(Debug)]
pub struct MemoryGroup {
    path: PathBuf,
    version: Version,
    /// OOM kills already reported, so each kill is reported once.
    oom_seen: AtomicU64,
}

impl MemoryGroup {
    /// The group of replica `name` (created if missing) with `limit` bytes.
    pub fn create(name: &str, limit: u64) -> anyhow::Result<Self> {
        let version = available()?;
        let root = match version {
            Version::V1 => v1_root(),
            Version::V2 => v2_root(),
        };
        let path = root.join(PARENT).join(name);
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        let g = MemoryGroup {
            path,
            version,
            oom_seen: AtomicU64::new(0),
        };
        g.oom_seen
            .store(g.oom_kills().unwrap_or(0), Ordering::Relaxed);
        g.set_limit(Some(limit))?;
        Ok(g)
    }

    fn file(&self, v1: &str, v2: &str) -> PathBuf {
        self.path.join(match self.version {
            Version::V1 => v1,
            Version::V2 => v2,
        })
    }

    /// Move `pid` into the group. Memory the process already holds stays charged to its old
    /// group (v2 always; v1 unless `memory.move_charge_at_immigrate` is honoured, which recent
    /// kernels refuse — it is deprecated), so the supervisor moves a replica right after starting
    /// it, before it has allocated anything that matters, and `labctl replay` sets the limit
    /// before its warm-up fills the caches.
    pub fn add(&self, pid: u32) -> anyhow::Result<()> {
        if self.version == Version::V1 {
            // Best effort (see above): where the kernel still honours it, a limit applied to a
            // running replica counts what it already holds too.
            let _ = fs::write(self.path.join("memory.move_charge_at_immigrate"), "3");
        }
        write(&self.path.join("cgroup.procs"), &pid.to_string())
    }

    /// Set (or lift, `None`) the limit.
    pub fn set_limit(&self, bytes: Option<u64>) -> anyhow::Result<()> {
        let value = match (bytes, self.version) {
            (Some(b), _) => b.to_string(),
            (None, Version::V1) => "-1".to_string(),
            (None, Version::V2) => "max".to_string(),
        };
        write(&self.file("memory.limit_in_bytes", "memory.max"), &value)
    }

    /// The limit in force, in bytes (`None`: unlimited or unreadable).
    pub fn limit(&self) -> Option<u64> {
        let text = fs::read_to_string(self.file("memory.limit_in_bytes", "memory.max")).ok()?;
        let v: u64 = text.trim().parse().ok()?;
        // v1 reports "no limit" as a page-rounded i64::MAX.
        (v < (1u64 << 62)).then_some(v)
    }

    /// How many processes of this group the OOM killer has killed, ever.
    fn oom_kills(&self) -> anyhow::Result<u64> {
        let text = fs::read_to_string(self.file("memory.oom_control", "memory.events"))?;
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0))
    }

    /// Did the OOM killer kill in this group since the last call? (Reports each kill once.)
    pub fn take_oom_kill(&self) -> bool {
        let now = self.oom_kills().unwrap_or(0);
        now > self.oom_seen.swap(now, Ordering::Relaxed)
    }

    /// Remove the group (only possible once no process is left in it).
    pub fn remove(&self) {
        let _ = fs::remove_dir(&self.path);
    }
}

fn write(path: &Path, value: &str) -> anyhow::Result<()> {
    fs::write(path, value).with_context(|| format!("writing {value} to {}", path.display()))
}

/// `700M`, `1G`, `734003200`: bytes from a size with an optional K/M/G (binary) suffix.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => bail!("{s:?}: use a byte count or a K, M or G suffix"),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("{s:?} is not a size"))?;
    anyhow::ensure!(n > 0.0, "{s:?}: a memory limit must be positive");
    Ok((n * mult as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_size_reads_the_units_a_pod_spec_would() {
        assert_eq!(parse_size("734003200").unwrap(), 734_003_200);
        assert_eq!(parse_size("700M").unwrap(), 700 << 20);
        assert_eq!(parse_size("4G").unwrap(), 4 << 30);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        for bad in ["", "0", "-1M", "12X", "lots"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
