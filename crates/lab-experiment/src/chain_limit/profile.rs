//! The profile step's perf window: one orchestrator, one entity-service, the gateway, the lab
//! database's PostgreSQL backends and the broker, recorded at once while the load runs, the CPU
//! snapshots bracketing the window (perf's own cost included); then each read back.

use std::path::PathBuf;
use std::time::Duration;

use super::cpu::{Snapshot, BROKER};
use super::lab::{LabUnderTest, PROFILED};
use super::perf::{self, Recorded, Target};
use super::summary::{Profile, ProfileTarget};

pub struct Profiler<'a> {
    pub lab: &'a LabUnderTest,
    /// `<out>/profile`.
    pub dir: PathBuf,
    pub hz: u32,
    pub seconds: u64,
}

/// The name a profile target has in the CPU split's thread lists.
pub fn split_name(target: &str) -> &str {
    if target == "tansu" {
        BROKER
    } else {
        target
    }
}

impl Profiler<'_> {
    async fn targets(&self) -> Vec<Target> {
        let mut t: Vec<Target> = PROFILED
            .iter()
            .filter_map(|r| {
                Some(Target {
                    name: r.to_string(),
                    pids: self.lab.pid_of(r)?.to_string(),
                })
            })
            .collect();
        let backends = self.lab.backends().await;
        if !backends.is_empty() {
            t.push(Target {
                name: "postgres-lab-backends".into(),
                pids: backends
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            });
        }
        if let Some(b) = self.lab.broker {
            t.push(Target {
                name: "tansu".into(),
                pids: b.to_string(),
            });
        }
        t
    }

    /// The DWARF probe, then every target recorded for `seconds`; the snapshots bracket it.
    pub async fn run(&self) -> anyhow::Result<(Snapshot, Snapshot, Recorded)> {
        std::fs::create_dir_all(&self.dir)?;
        let probe = match self.lab.pid_of(PROFILED[0]) {
            Some(pid) => perf::dwarf_probe(&self.dir, self.hz, pid).await,
            None => 0,
        };
        let targets = self.targets().await;
        let (rec, children) =
            perf::record_all(&self.dir, &targets, self.hz, self.seconds, probe).await?;
        let a = self.lab.snapshot().await;
        tokio::time::sleep(Duration::from_secs(self.seconds.saturating_sub(1).max(1))).await;
        let b = self.lab.snapshot().await;
        for mut c in children {
            let _ = c.wait().await;
        }
        Ok((a, b, rec))
    }
}

/// Every target read back, and how the sampling went.
pub async fn read_back(rec: &Recorded, symbols: String) -> Profile {
    let mut targets = Vec::new();
    for t in &rec.targets {
        let (top, why) = match perf::analyse(rec, &t.name).await {
            Ok(top) => (Some(top), None),
            Err(why) => (None, Some(why)),
        };
        targets.push(ProfileTarget {
            name: t.name.clone(),
            pids: t.pids.clone(),
            top,
            why,
        });
    }
    let sampler = if !targets.is_empty() && targets.iter().all(|t| t.top.is_none()) {
        "/proc per-thread CPU only (perf could not sample: see profile/*.record.log)".to_string()
    } else {
        format!(
            "perf record (cpu-clock, {} Hz, {})",
            rec.hz,
            rec.call_graph.join(" ")
        )
    };
    Profile {
        sampler,
        command: rec.command(),
        dwarf_probe_samples: rec.dwarf_probe_samples,
        symbols,
        targets,
    }
}
