//! The run's `summary.json`: everything `chain-limit.md` is drawn from, typed, so a run
//! directory can be drawn again (`labctl chain-limit --report-only DIR`) without measuring.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::cpu::CpuSplit;
use super::perf::ProfileTop;

/// The file name of the summary in a run directory.
pub const FILE: &str = lab_report::run::FILE;

/// One run of `labctl chain-limit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub meta: Meta,
    /// pgbench with the lab down, one row per script and client count.
    pub pgbench: Vec<PgbenchRow>,
    /// The lab up and settled, no load.
    pub idle: Option<CpuSplit>,
    /// The lab's processes by their row in the CPU split: each replica's pid from the
    /// supervisor's table (what `labctl status --json` reports), the supervisor's, the broker's.
    #[serde(default)]
    pub lab_processes: BTreeMap<String, u32>,
    /// Warm-up, the ladder's steps and the profile step, in the order they ran.
    pub steps: Vec<StepRow>,
    /// The highest ladder step within the bound (offered rps).
    pub max_sustainable_rps: Option<f64>,
    /// The step after which the ladder stopped, far past the bound.
    pub stopped_early: Option<String>,
    pub profile: Option<Profile>,
}

/// What the run was and where: the machine, the knobs, the database's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Unix seconds.
    pub started: u64,
    pub out: String,
    pub cores: usize,
    pub cpu_model: String,
    pub pg_version: String,
    /// `[profile.release] debug` as Cargo.toml says it.
    pub release_debug: String,
    pub lab_db: String,
    pub pgbench_db: String,
    pub pgbench_scale: u32,
    pub pgbench_seconds: u64,
    pub step_seconds: u64,
    pub warmup_rate: f64,
    pub warmup_seconds: u64,
    pub profile_seconds: u64,
    pub idle_settle_seconds: u64,
    pub idle_sample_seconds: u64,
    pub p99_ms: f64,
    pub ok_pct: f64,
    pub hot_params: usize,
    pub hot_per_txn: usize,
    /// Empty: the lab ran without Kafka and enrichment.
    pub kafka: String,
    pub perf_hz: u32,
    /// The lab's shape (`labctl up`'s replicas and how the orchestrators address
    /// entity-service). Absent from runs before issue 26, which all ran
    /// [`Meta::FLEET_BEFORE_ISSUE_26`].
    #[serde(default = "Meta::fleet_before_issue_26")]
    pub fleet: String,
    /// The hot statement's plan and the table's state before the run (`labctl db status`).
    pub hot_plan: Option<HotPlanLine>,
}

impl Meta {
    /// What `labctl up` ran before issue 26 (each orchestrator given both replicas' URLs).
    pub const FLEET_BEFORE_ISSUE_26: &'static str =
        "1 gateway, 2 orchestrators, 2 entity-services (every replica's address)";

    fn fleet_before_issue_26() -> String {
        Self::FLEET_BEFORE_ISSUE_26.into()
    }

    /// `lab`'s shape in words.
    pub fn fleet_of(lab: &lab_native::UpArgs) -> String {
        let address = match lab.entity_address {
            lab_native::fleet::EntityAddress::Service => "behind one Service address",
            lab_native::fleet::EntityAddress::Replicas => "every replica's address",
        };
        format!(
            "{} gateway(s), {} orchestrators, {} entity-services ({address})",
            lab.gateways, lab.orchestrators, lab.entity_services
        )
    }
}

/// `labctl db status` in one line: the generic plan's shape, and the table's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotPlanLine {
    pub shape: String,
    pub state: Vec<String>,
}

/// One pgbench run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PgbenchRow {
    /// `select-only` or `hot-candidate-lookup`.
    pub script: String,
    pub clients: u32,
    pub tps: f64,
    pub lookups_per_txn: usize,
    pub lookups_s: f64,
    pub latency_ms: f64,
    /// The hot lookup's own latency (`-r`), mean over the script's lookups.
    pub stmt_ms: Option<f64>,
    /// The parameter pick's latency (`-r`).
    pub pick_ms: Option<f64>,
    pub cpu: Option<CpuSplit>,
}

/// What a step of load is: the warm-up, a rung of the ladder, the profiled run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    Warmup,
    Rate,
    Profile,
}

/// One step of open-loop load through the gateway, and what the lab did during it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub name: String,
    pub kind: StepKind,
    pub rate: f64,
    pub seconds: u64,
    pub sent: u64,
    pub ok_rps: f64,
    pub ok_pct: f64,
    pub five: u64,
    pub p50: f64,
    pub p99: f64,
    pub by_status: BTreeMap<String, u64>,
    pub client_overload: u64,
    /// The gateway's 5xx by `hop/origin`.
    pub origins: BTreeMap<String, f64>,
    /// Counts over the scrapes' interval, per second.
    pub rates: ChainRates,
    /// PostgreSQL transactions/s in the lab database (every client).
    pub xacts_s: Option<f64>,
    pub cpu: CpuSplit,
    pub passed: bool,
}

/// What the replicas' counters say per second of a step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChainRates {
    /// entity-service's resolved spans (`entity_service_spans_total`).
    pub spans_s: f64,
    pub exact_s: f64,
    pub cand_s: f64,
    /// entity-service's resolves (one pool checkout each), `query="acquire"`.
    pub resolves_s: f64,
    /// Mean hot lookup inside the chain, ms.
    pub cand_ms: Option<f64>,
    /// The orchestrators' cache lookups per answered document.
    pub spans_per_doc: Option<f64>,
    pub hit_pct: Option<f64>,
    /// Spans per answered document that reached entity-service.
    pub es_spans_per_doc: Option<f64>,
}

impl StepRow {
    /// Exact-match plus candidate-lookup statements per second.
    pub fn stmts_s(&self) -> f64 {
        self.rates.exact_s + self.rates.cand_s
    }

    /// Machine CPU per answered document, ms.
    pub fn cpu_ms_per_doc(&self) -> Option<f64> {
        (self.ok_rps > 0.0).then(|| 1e3 * self.cpu.busy_cores / self.ok_rps)
    }

    /// PostgreSQL CPU per lookup statement, µs (the backends serving entity-service).
    pub fn pg_us_per_stmt(&self) -> Option<f64> {
        let pg = self.cpu.cores(super::cpu::PG_ENTITY);
        (self.stmts_s() > 0.0).then(|| 1e6 * pg / self.stmts_s())
    }
}

/// The profiled run's sampler and each target's top entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// `perf record (cpu-clock, 499 Hz, --call-graph dwarf)`, or why there was none.
    pub sampler: String,
    pub command: String,
    /// Samples the 2 s DWARF probe got (0: DWARF stacks unusable here, `-g`).
    pub dwarf_probe_samples: u64,
    /// The binaries' symbols (stripped or not, debug sections).
    pub symbols: String,
    pub targets: Vec<ProfileTarget>,
}

/// One profiled process (or the lab's PostgreSQL backends together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileTarget {
    pub name: String,
    /// Comma-separated, as `perf record -p` took them.
    pub pids: String,
    /// None: perf got no samples (`why`).
    pub top: Option<ProfileTop>,
    pub why: Option<String>,
}

impl Summary {
    /// As `dir/summary.json`, under the run header every experiment writes (it judges nothing:
    /// its bounds are drawn in the report).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        use lab_report::run::{Header, RunKind};
        lab_report::run::write(dir, &Header::new(RunKind::ChainLimit, "chain-limit"), self)?;
        Ok(())
    }

    pub fn read(dir: &Path) -> anyhow::Result<Summary> {
        let path = dir.join(FILE);
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "{} has no {FILE}: not a `labctl chain-limit` run directory",
                dir.display()
            )
        })?;
        serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))
    }

    pub fn warmup(&self) -> impl Iterator<Item = &StepRow> {
        self.steps.iter().filter(|s| s.kind == StepKind::Warmup)
    }

    pub fn ladder(&self) -> impl Iterator<Item = &StepRow> {
        self.steps.iter().filter(|s| s.kind == StepKind::Rate)
    }

    pub fn profile_step(&self) -> Option<&StepRow> {
        self.steps.iter().find(|s| s.kind == StepKind::Profile)
    }

    /// The ladder's highest step within the bound.
    pub fn best(&self) -> Option<&StepRow> {
        super::ladder::max_sustainable(self.ladder())
    }

    /// The step the ratio and the CPU split are read at: the best, else the lowest rung.
    pub fn reference(&self) -> Option<&StepRow> {
        self.best().or_else(|| self.ladder().next())
    }

    /// pgbench's best run of `script` (most lookups/s).
    pub fn pgbench_best(&self, script: &str) -> Option<&PgbenchRow> {
        self.pgbench
            .iter()
            .filter(|r| r.script == script)
            .max_by(|a, b| a.lookups_s.total_cmp(&b.lookups_s))
    }
}
