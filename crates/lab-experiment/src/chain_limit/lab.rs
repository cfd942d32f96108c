//! The lab under test: a fresh native lab started in process (as the replay starts one), in
//! resilient mode, and what the measurements need of it — its replicas' pids and admin URLs
//! (the supervisor's state: what `labctl status --json` reports), the broker's pid, the lab
//! database's transaction count, CPU snapshots, and the open-loop load.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use lab_load::{DocSource, Docs, LoadArgs, LoadReport, RateControl, TenantMix};
use lab_native::{supervise, UpArgs};
use lab_seed::ApiKeyRecord;

use super::cpu::{self, CpuSplit, Snapshot, Who};
use super::ladder::StepPlan;
use crate::scrape::{self, Scrape, Target};
use crate::Globals;

/// The replicas whose threads are listed during the profile (and the broker's).
pub const PROFILED: [&str; 3] = ["orchestrator-1", "entity-service-1", "edge-gateway-1"];

/// A running lab, started by this run (stopped by [`LabUnderTest::down`]).
pub struct LabUnderTest {
    pub g: Globals,
    /// Every replica, scraped at its admin listener.
    pub targets: Vec<Target>,
    pub who: Who,
    /// The Kafka-protocol broker's pid (scripts/deps.sh's tansu), when one runs.
    pub broker: Option<u32>,
    pub gateway: String,
    pub cores: usize,
    keys: Vec<ApiKeyRecord>,
    http: reqwest::Client,
    db: Option<tokio_postgres::Client>,
}

/// The broker: the pid scripts/deps.sh wrote, else the first process named `tansu…`.
pub fn broker_pid(state_dir: &Path) -> Option<u32> {
    let from_file = std::fs::read_to_string(state_dir.join("run/tansu.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|p| comm(*p).is_some_and(|c| c.starts_with("tansu")));
    from_file.or_else(|| {
        std::fs::read_dir("/proc")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|p| comm(*p).is_some_and(|c| c.starts_with("tansu")))
    })
}

fn comm(pid: u32) -> Option<String> {
    Some(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()?
            .trim()
            .to_string(),
    )
}

/// Refuse to start while another native lab is up in the same state dir: it is not this run's
/// to stop, and it would be measured as this run's.
pub fn ensure_no_lab(state_dir: &Path) -> anyhow::Result<()> {
    if let Some(s) = supervise::read_state(state_dir)? {
        anyhow::ensure!(
            !supervise::process_alive(s.supervisor_pid),
            "a native lab is up in {} (supervisor {}): not this run's; stop it first (`labctl down`)",
            state_dir.display(),
            s.supervisor_pid
        );
    }
    Ok(())
}

impl LabUnderTest {
    /// A fresh lab of `lab`'s shape, every replica in resilient mode.
    pub async fn up(
        lab: &UpArgs,
        g: &Globals,
        keys: Vec<ApiKeyRecord>,
        cores: usize,
    ) -> anyhow::Result<Self> {
        let store = lab_flags::Store::new(&g.redis_url)?;
        store.reset().await?;
        store.set("client.mode", "resilient").await?;
        lab_native::up(lab, &g.database_url, &g.redis_url, &g.state_dir).await?;
        let (mut targets, state) = crate::engine::native_targets(&g.state_dir)?;
        targets.retain(|t| t.service != crate::scrape::SUPERVISOR);
        let who = Who {
            replicas: state
                .procs
                .iter()
                .filter_map(|p| Some((p.pid?, p.name.clone())))
                .collect(),
            supervisor: Some(state.supervisor_pid),
            load: Some((std::process::id(), cpu::LOAD_GENERATOR)),
            lab_db: lab_db::database_name(&g.database_url)?,
            pgbench_db: String::new(),
        };
        let http = scrape::client();
        let chain: Vec<Target> = targets
            .iter()
            .filter(|t| t.service != "enrichment")
            .cloned()
            .collect();
        crate::wait_applied(&http, &chain, "client.mode", "resilient").await?;
        Ok(LabUnderTest {
            broker: broker_pid(&g.state_dir),
            gateway: format!("http://127.0.0.1:{}", lab.gateway_port),
            db: lab_db::inspect::connect(&g.database_url).await.ok(),
            g: g.clone(),
            targets,
            who,
            cores,
            keys,
            http,
        })
    }

    /// Stop the lab and reset the flags it ran with.
    pub async fn down(&self) -> anyhow::Result<()> {
        lab_native::down(&self.g.state_dir).await?;
        lab_flags::Store::new(&self.g.redis_url)?.reset().await
    }

    /// The lab's processes by their row in the CPU split: replicas, supervisor, broker.
    pub fn processes(&self) -> std::collections::BTreeMap<String, u32> {
        let mut m: std::collections::BTreeMap<String, u32> = self
            .who
            .replicas
            .iter()
            .map(|(p, n)| (n.clone(), *p))
            .collect();
        if let Some(p) = self.who.supervisor {
            m.insert(cpu::SUPERVISOR.into(), p);
        }
        if let Some(p) = self.broker {
            m.insert(cpu::BROKER.into(), p);
        }
        m
    }

    pub fn pid_of(&self, replica: &str) -> Option<u32> {
        self.who
            .replicas
            .iter()
            .find(|(_, n)| *n == replica)
            .map(|(p, _)| *p)
    }

    /// Every replica's `/metrics`, in target order.
    pub async fn scrape(&self) -> Vec<Scrape> {
        scrape::scrape_all(&self.http, &self.targets).await
    }

    /// Transactions PostgreSQL has finished in the lab database (every resolve is one).
    pub async fn xacts(&self) -> Option<i64> {
        let db = self.db.as_ref()?;
        let row = db
            .query_one(
                "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1",
                &[&self.who.lab_db],
            )
            .await
            .ok()?;
        row.try_get(0).ok()
    }

    /// The processes whose threads a snapshot lists: the profiled replicas and the broker.
    pub fn threads_of(&self) -> Vec<u32> {
        PROFILED
            .iter()
            .filter_map(|r| self.pid_of(r))
            .chain(self.broker)
            .collect()
    }

    pub async fn snapshot(&self) -> Snapshot {
        let pids = self.threads_of();
        tokio::task::spawn_blocking(move || cpu::snapshot(&pids))
            .await
            .unwrap_or_default()
    }

    pub fn split(&self, a: &Snapshot, b: &Snapshot) -> CpuSplit {
        cpu::split(a, b, &self.who, cpu::clock_ticks(), self.cores)
    }

    /// The lab with no load: `settle` seconds, then CPU over `sample` seconds.
    pub async fn idle(&self, settle: u64, sample: u64) -> CpuSplit {
        tokio::time::sleep(Duration::from_secs(settle)).await;
        let a = self.snapshot().await;
        tokio::time::sleep(Duration::from_secs(sample)).await;
        let b = self.snapshot().await;
        self.split(&a, &b)
    }

    /// `plan`'s open-loop load, to run beside the measurements (Poisson arrivals, fresh
    /// never-repeating documents, the size tenant mix).
    pub fn load(
        &self,
        plan: &StepPlan,
    ) -> impl std::future::Future<Output = anyhow::Result<LoadReport>> + Send + 'static {
        let args = LoadArgs::stream(
            &self.gateway,
            plan.rate,
            plan.seconds,
            TenantMix::Size,
            plan.seed,
        );
        let (keys, data_dir) = (self.keys.clone(), self.g.data_dir.clone());
        async move {
            let source = DocSource::open(Docs::Stream, &data_dir, TenantMix::Size)?;
            let control = RateControl::new(args.rate)?;
            lab_load::run_with(&args, control, keys, source)
                .await
                .context("the open-loop load")
        }
    }
}

impl LabUnderTest {
    /// The lab database's long-lived client backends (the pools'), each still alive: `perf -p`
    /// refuses the whole list when one pid in it has gone.
    pub async fn backends(&self) -> Vec<u32> {
        let Some(db) = self.db.as_ref() else {
            return Vec::new();
        };
        let rows = db
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' \
                 AND pid <> pg_backend_pid() AND backend_start < now() - interval '10 seconds'",
                &[&self.who.lab_db],
            )
            .await
            .unwrap_or_default();
        rows.iter()
            .filter_map(|r| r.try_get::<_, i32>(0).ok())
            .map(|p| p as u32)
            .filter(|p| supervise::process_alive(*p))
            .collect()
    }
}
