//! The native lab: the four services as supervised local processes on loopback, and the
//! operations of the postmortem's timeline on them (a rolling restart, a scale-up, a memory
//! limit the kernel enforces).
//!
//! - [`fleet`]: the plan (ports, environment, roles per replica), `up`, `down`, `status`.
//! - [`supervise`]: the supervisor — a kubelet in miniature — and its control channel. It runs
//!   as `<this executable> supervise --plan <file>`: a binary that links this crate must expose
//!   that verb (labctl does).
//! - [`ops`]: rollout restart, scale, memory limits, a replica killed, each waiting until the
//!   fleet has the asked-for shape.
//! - [`deps`]: the lab's dependencies as faults: PostgreSQL restarted under load.
//! - [`cgroup`]: memory limits through the kernel's memory cgroups.
//! - [`priority`]: the load generator's CPU priority over the lab it measures.
//! - [`policy`]: a team's retry policy file, validated by the orchestrator's own types.
//! - [`service`]: a Kubernetes Service — one address, per-connection balancing over the ready
//!   replicas — run inside the supervisor.
//!
//! [`Lab`] is what an experiment needs from a lab; [`NativeLab`] implements it here, and compose
//! or kind could implement it later.

pub mod cgroup;
pub mod deps;
pub mod fleet;
pub mod ops;
pub mod policy;
pub mod priority;
mod redis_fault;
pub mod service;
pub mod supervise;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;

pub use fleet::{down, status, up, UpArgs};

/// A service of the lab, by its binary's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    EdgeGateway,
    Orchestrator,
    EntityService,
    Enrichment,
}

impl Service {
    pub const ALL: [Service; 4] = [
        Service::EdgeGateway,
        Service::Orchestrator,
        Service::EntityService,
        Service::Enrichment,
    ];

    /// The binary's (and the replicas' base) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Service::EdgeGateway => "edge-gateway",
            Service::Orchestrator => "orchestrator",
            Service::EntityService => "entity-service",
            Service::Enrichment => "enrichment",
        }
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Service {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        Service::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no service {s:?}: the lab's services are {}",
                    Service::ALL.map(Service::as_str).join(", ")
                )
            })
    }
}

/// One replica of a service, as the lab names it: `entity-service-1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Replica {
    pub service: Service,
    /// From 1.
    pub index: usize,
}

impl std::fmt::Display for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.service, self.index)
    }
}

impl std::str::FromStr for Replica {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (service, index) = s
            .rsplit_once('-')
            .and_then(|(svc, n)| Some((svc, n.parse::<usize>().ok().filter(|n| *n >= 1)?)))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no replica {s:?}: a replica is <service>-<n>, e.g. entity-service-1"
                )
            })?;
        Ok(Replica {
            service: service.parse()?,
            index,
        })
    }
}

/// What an experiment does to a lab. Each call returns once the lab has the asked-for shape (or
/// fails saying why); none of them touches the database (the trigger is the experiment's own).
/// The futures are `Send`: an experiment runs its timeline's actions beside its load.
pub trait Lab {
    /// Every replica of `service` restarted, one at a time (Argo's rollback: every cache cold).
    fn rollout_restart(&self, service: Service) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// `replicas` replicas of `service`: new ones cold, joining the rotation when ready.
    fn scale(
        &self,
        service: Service,
        replicas: usize,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// A memory limit on every replica of `service` (`None` lifts it), enforced by the kernel.
    fn limit_memory(
        &self,
        service: Service,
        bytes: Option<u64>,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// `replica`'s process killed outright (no drain: a lost node, an OOM kill), and its
    /// restart by the lab awaited until it is ready again.
    fn kill(&self, replica: Replica) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Where the lab's operations say what they do, line by line: stdout for the operator at a
/// terminal, the run's `actions.log` for an experiment (whose console shows its own timeline).
#[derive(Clone, Default)]
pub struct Log(Option<Arc<Mutex<std::fs::File>>>);

impl Log {
    pub fn stdout() -> Self {
        Log(None)
    }

    /// Append to `path` (created if missing).
    pub fn file(path: &Path) -> anyhow::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(Log(Some(Arc::new(Mutex::new(f)))))
    }

    /// `text` and a newline. A log that cannot be written loses the line, never the operation.
    pub fn line(&self, text: impl std::fmt::Display) {
        match &self.0 {
            None => println!("{text}"),
            Some(f) => {
                let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(f, "{text}");
            }
        }
    }
}

/// The lab `labctl up` started in `state_dir`, operated through its supervisor.
#[derive(Clone)]
pub struct NativeLab {
    pub state_dir: PathBuf,
    pub log: Log,
}

impl NativeLab {
    pub fn new(state_dir: &Path, log: Log) -> Self {
        NativeLab {
            state_dir: state_dir.to_path_buf(),
            log,
        }
    }
}

impl Lab for NativeLab {
    async fn rollout_restart(&self, service: Service) -> anyhow::Result<()> {
        ops::rollout_restart(&self.state_dir, service, &self.log).await
    }

    async fn scale(&self, service: Service, replicas: usize) -> anyhow::Result<()> {
        ops::scale(&self.state_dir, service, replicas, &self.log).await
    }

    async fn limit_memory(&self, service: Service, bytes: Option<u64>) -> anyhow::Result<()> {
        ops::limit_memory(&self.state_dir, service, bytes, &self.log).await
    }

    async fn kill(&self, replica: Replica) -> anyhow::Result<()> {
        ops::kill(&self.state_dir, replica, &self.log).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_reads_back_from_its_name_and_nothing_else_parses() {
        for s in Service::ALL {
            assert_eq!(s.as_str().parse::<Service>().unwrap(), s);
        }
        let err = "orchestrators".parse::<Service>().unwrap_err().to_string();
        assert!(err.contains("orchestrator, entity-service"), "{err}");
    }

    #[test]
    fn a_replica_reads_back_from_its_name() {
        let r: Replica = "entity-service-1".parse().unwrap();
        assert_eq!((r.service, r.index), (Service::EntityService, 1));
        assert_eq!(r.to_string(), "entity-service-1");
        for bad in ["entity-service", "entity-service-0", "entity-servic-1", "1"] {
            assert!(bad.parse::<Replica>().is_err(), "{bad}");
        }
    }
}
