//! CPU per process from `/proc`: a snapshot of every process's `utime + stime` (and the threads
//! of a few), and the split of two snapshots' difference by what each process is to the lab —
//! a replica (by the supervisor's pid table, what `labctl status --json` reports), the broker,
//! PostgreSQL's backends by the role that connected, the load generator, the rest.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The split's names that the report reads back.
pub const BROKER: &str = "tansu (Kafka protocol broker)";
pub const LOAD_GENERATOR: &str = "labctl chain-limit (the load generator, in process)";
pub const PGBENCH_CLIENT: &str = "pgbench (its client)";
pub const PERF: &str = "perf (the profiler itself)";
pub const SUPERVISOR: &str = "labctl supervise (supervisor + OTLP receiver)";
pub const REDIS: &str = "redis";
pub const PG_LAB_PREFIX: &str = "postgres backends of the lab database";
pub const PG_ENTITY: &str = "postgres backends of the lab database: entity-service";
pub const PG_PGBENCH: &str = "postgres backends of the pgbench database";
pub const PG_OTHER: &str = "postgres (other: background workers, autovacuum)";
pub const PG_OTHER_DBS: &str = "postgres backends of other databases (not this run's)";

/// One `/proc/<pid>/stat` (or a task's): its name, CPU ticks so far, start time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    pub comm: String,
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    /// Start time after boot, in clock ticks: a pid reused by another process starts later.
    pub start: u64,
}

/// Parse a `stat` line: `pid (comm) state ppid … utime stime … starttime …`. The name may hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?.to_string();
    let f: Vec<&str> = line.get(close + 2..)?.split_whitespace().collect();
    // After the name: state is field 3 of stat(5), so utime (14) is f[11], stime f[12],
    // starttime (22) f[19].
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(Stat {
        comm,
        ticks: num(11)? + num(12)?,
        start: num(19)?,
    })
}

/// The `cpu` line of `/proc/stat`: user nice system idle iowait irq softirq steal, in ticks.
pub fn parse_cpu_line(line: &str) -> Option<[u64; 8]> {
    let mut it = line.split_whitespace();
    if it.next()? != "cpu" {
        return None;
    }
    let mut out = [0u64; 8];
    for slot in &mut out {
        *slot = it.next()?.parse().ok()?;
    }
    Some(out)
}

/// One process in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proc {
    pub stat: Stat,
    /// Its command line, spaces for NULs, at most 200 characters (empty: a kernel thread).
    pub cmd: String,
}

/// Every process's CPU at one instant, and the threads of the processes asked for.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Seconds since the epoch.
    pub t: f64,
    pub cpu: [u64; 8],
    pub procs: BTreeMap<u32, Proc>,
    pub tasks: BTreeMap<u32, BTreeMap<u32, Stat>>,
}

/// Read `/proc` now (blocking: a few milliseconds per hundred processes).
pub fn snapshot(threads_of: &[u32]) -> Snapshot {
    let read = |p: String| std::fs::read_to_string(p).ok();
    let mut s = Snapshot {
        t: crate::chain_limit::unix_now(),
        cpu: read("/proc/stat".into())
            .and_then(|t| t.lines().next().and_then(parse_cpu_line))
            .unwrap_or_default(),
        ..Snapshot::default()
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return s;
    };
    for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        let Some(stat) = read(format!("/proc/{pid}/stat")).and_then(|l| parse_stat(&l)) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd: String = String::from_utf8_lossy(&cmd)
            .replace('\0', " ")
            .trim()
            .chars()
            .take(200)
            .collect();
        if threads_of.contains(&pid) {
            s.tasks.insert(pid, tasks(pid));
        }
        s.procs.insert(pid, Proc { stat, cmd });
    }
    s
}

fn tasks(pid: u32) -> BTreeMap<u32, Stat> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return BTreeMap::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|tid| {
            let l = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            Some((tid, parse_stat(&l)?))
        })
        .collect()
}

/// Who the lab's processes are, for naming a pid.
#[derive(Debug, Clone, Default)]
pub struct Who {
    /// Replica pids → `orchestrator-1`, …, from the supervisor's state.
    pub replicas: BTreeMap<u32, String>,
    pub supervisor: Option<u32>,
    /// The process generating the load and what to call it.
    pub load: Option<(u32, &'static str)>,
    pub lab_db: String,
    pub pgbench_db: String,
}

/// The service a PostgreSQL role stands for (each service connects as its own role:
/// migrations/*_service_roles.sql).
fn service_of_role(role: &str) -> &'static str {
    match role {
        "lab_gateway" => "edge-gateway",
        "lab_entity_service" => "entity-service",
        "lab_enrichment" => "enrichment",
        _ => "other clients",
    }
}

/// What `pid` is to the lab: the name of its row in the split.
pub fn category(who: &Who, pid: u32, p: &Proc) -> String {
    if let Some(name) = who.replicas.get(&pid) {
        return name.clone();
    }
    if let Some((_, label)) = who.load.filter(|(l, _)| *l == pid) {
        return label.to_string();
    }
    let comm = p.stat.comm.as_str();
    if comm == "postgres" || p.cmd.starts_with("postgres") {
        return postgres_category(who, &p.cmd);
    }
    if comm.starts_with("tansu") {
        return BROKER.into();
    }
    if comm.starts_with("redis-server") {
        return REDIS.into();
    }
    if who.supervisor == Some(pid) || (comm == "labctl" && p.cmd.contains(" supervise")) {
        return SUPERVISOR.into();
    }
    if comm == "perf" {
        return PERF.into();
    }
    if p.cmd.is_empty() {
        return format!("kernel threads: {}", kernel_family(comm));
    }
    format!("other: {comm}")
}

/// A client backend's title is `postgres: [<cluster>:] <role> <database> <host>(<port>) <state>`
/// (Debian names the cluster, `15/main:`); any other title is the server's own process
/// (checkpointer, walwriter, an autovacuum worker, the postmaster).
pub fn backend_of(cmd: &str) -> Option<(&str, &str)> {
    let rest = cmd.strip_prefix("postgres:")?;
    let mut words = rest.split_whitespace().skip_while(|w| w.ends_with(':'));
    let (role, db, client) = (words.next()?, words.next()?, words.next()?);
    let is_client = client == "[local]" || (client.ends_with(')') && client.contains('('));
    is_client.then_some((role, db))
}

fn postgres_category(who: &Who, cmd: &str) -> String {
    match backend_of(cmd) {
        Some((role, db)) if !who.lab_db.is_empty() && db == who.lab_db => {
            format!("{PG_LAB_PREFIX}: {}", service_of_role(role))
        }
        Some((_, db)) if !who.pgbench_db.is_empty() && db == who.pgbench_db => PG_PGBENCH.into(),
        Some(_) => PG_OTHER_DBS.into(),
        None => PG_OTHER.into(),
    }
}

/// `kworker/1:2-events` → `events`; `ksoftirqd/0` → `ksoftirqd`.
fn kernel_family(comm: &str) -> String {
    if comm.starts_with("kworker") {
        if let Some((_, q)) = comm.split_once('-') {
            return q.to_string();
        }
    }
    let end = comm.find(['/', '.', ':']).unwrap_or(comm.len());
    comm[..end].to_string()
}

/// Threads of one process, grouped by name without its number: count and cores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadGroup {
    pub threads: u32,
    pub cores: f64,
}

/// The CPU of an interval, split by process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSplit {
    /// The interval's length.
    pub seconds: f64,
    /// The whole machine's busy cores (`/proc/stat`).
    pub busy_cores: f64,
    /// Cores per row of the split.
    pub by_process: BTreeMap<String, f64>,
    /// Per process asked for (by its row's name): its threads by name.
    pub threads: BTreeMap<String, BTreeMap<String, ThreadGroup>>,
}

impl CpuSplit {
    /// Cores of one row (0 when absent).
    pub fn cores(&self, row: &str) -> f64 {
        self.by_process.get(row).copied().unwrap_or(0.0)
    }

    /// Cores of every row whose name starts with `prefix`.
    pub fn cores_with_prefix(&self, prefix: &str) -> f64 {
        self.by_process
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .fold(0.0, |a, (_, v)| a + v)
    }

    /// The rows, biggest first; rows under `min` folded into one.
    pub fn rows(&self, min: f64) -> Vec<(String, f64)> {
        let mut all: Vec<(String, f64)> = self
            .by_process
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let rest = all
            .iter()
            .filter(|(_, v)| *v < min)
            .fold(0.0, |a, (_, v)| a + v);
        all.retain(|(_, v)| *v >= min);
        if rest >= 0.005 {
            all.push((format!("everything else (each < {min:.2} cores)"), rest));
        }
        all
    }
}

/// `tokio-rt-worker-3` → `tokio-rt-worker`.
fn thread_family(comm: &str) -> String {
    let t = comm.trim_end_matches(|c: char| c.is_ascii_digit());
    let t = t.trim_end_matches(['-', '_', ' ']);
    if t.is_empty() {
        comm.to_string()
    } else {
        t.to_string()
    }
}

/// The split of `b - a`: each process's ticks since `a` (a pid whose start time changed is a
/// new process: all its ticks count), over `clk` ticks a second and `cores` cores.
pub fn split(a: &Snapshot, b: &Snapshot, who: &Who, clk: f64, cores: usize) -> CpuSplit {
    let dt = (b.t - a.t).max(1e-3);
    let mut out = CpuSplit {
        seconds: dt,
        ..CpuSplit::default()
    };
    for (pid, p) in &b.procs {
        let before = a
            .procs
            .get(pid)
            .filter(|q| q.stat.start == p.stat.start)
            .map_or(0, |q| q.stat.ticks);
        let d = p.stat.ticks.saturating_sub(before);
        if d > 0 {
            *out.by_process.entry(category(who, *pid, p)).or_default() += d as f64 / clk / dt;
        }
        if let Some(tasks) = b.tasks.get(pid) {
            let before = a.tasks.get(pid);
            let mut g: BTreeMap<String, ThreadGroup> = BTreeMap::new();
            for (tid, t) in tasks {
                let t0 = before.and_then(|m| m.get(tid)).map_or(0, |s| s.ticks);
                let e = g.entry(thread_family(&t.comm)).or_default();
                e.threads += 1;
                e.cores += t.ticks.saturating_sub(t0) as f64 / clk / dt;
            }
            out.threads.insert(category(who, *pid, p), g);
        }
    }
    let total: u64 = b.cpu.iter().sum::<u64>().saturating_sub(a.cpu.iter().sum());
    let idle = (b.cpu[3] + b.cpu[4]).saturating_sub(a.cpu[3] + a.cpu[4]);
    if total > 0 {
        out.busy_cores = (total - idle) as f64 / total as f64 * cores as f64;
    }
    out
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant of the running system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (tokio rt) (x) S 1 4242 4242 0 -1 4194560 2117 0 0 0 \
        150 50 0 0 20 0 4 0 987654 100000000 2000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1";

    #[test]
    fn parse_stat_counts_fields_after_the_last_parenthesis() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(s.comm, "tokio rt) (x");
        assert_eq!(s.ticks, 200);
        assert_eq!(s.start, 987654);
    }

    #[test]
    fn parse_stat_refuses_a_truncated_line() {
        assert!(parse_stat("4242 (x) S 1 2 3").is_none());
        assert!(parse_stat("no parenthesis at all").is_none());
    }

    #[test]
    fn parse_cpu_line_reads_the_aggregate_line_only() {
        let l = "cpu  100 0 50 800 20 0 5 0 0 0";
        assert_eq!(parse_cpu_line(l).unwrap(), [100, 0, 50, 800, 20, 0, 5, 0]);
        assert!(parse_cpu_line("cpu0 1 2 3 4 5 6 7 8").is_none());
        assert!(parse_cpu_line("cpu 1 2 3").is_none());
    }

    fn proc(comm: &str, cmd: &str, ticks: u64, start: u64) -> Proc {
        Proc {
            stat: Stat {
                comm: comm.into(),
                ticks,
                start,
            },
            cmd: cmd.into(),
        }
    }

    fn who() -> Who {
        Who {
            replicas: BTreeMap::from([(10, "orchestrator-1".to_string())]),
            supervisor: Some(9),
            load: Some((11, LOAD_GENERATOR)),
            lab_db: "lab".into(),
            pgbench_db: "bench".into(),
        }
    }

    #[test]
    fn category_names_backends_by_their_role_and_database() {
        let w = who();
        let be = |cmd| category(&w, 99, &proc("postgres", cmd, 0, 0));
        assert_eq!(
            be("postgres: lab_entity_service lab 127.0.0.1(5) idle"),
            PG_ENTITY
        );
        assert_eq!(
            be("postgres: 15/main: lab_entity_service lab 127.0.0.1(55320) idle in transaction"),
            PG_ENTITY
        );
        assert_eq!(
            be("postgres: 15/main: lab_enrichment other_lab 127.0.0.1(1) idle"),
            PG_OTHER_DBS
        );
        assert_eq!(be("postgres: 15/main: autovacuum worker lab"), PG_OTHER);
        assert_eq!(be("postgres: 15/main: checkpointer"), PG_OTHER);
        assert_eq!(
            be("postgres: postgres lab 127.0.0.1(5) idle"),
            "postgres backends of the lab database: other clients"
        );
        assert_eq!(be("postgres: postgres bench [local] SELECT"), PG_PGBENCH);
        assert_eq!(be("postgres: autovacuum launcher"), PG_OTHER);
    }

    #[test]
    fn category_prefers_the_lab_s_own_pid_table() {
        let w = who();
        assert_eq!(
            category(&w, 10, &proc("orchestrator", "x", 0, 0)),
            "orchestrator-1"
        );
        assert_eq!(
            category(&w, 11, &proc("labctl", "labctl c", 0, 0)),
            LOAD_GENERATOR
        );
        assert_eq!(category(&w, 9, &proc("labctl", "labctl", 0, 0)), SUPERVISOR);
        assert_eq!(category(&w, 5, &proc("tansu", "tansu", 0, 0)), BROKER);
        assert_eq!(
            category(&w, 6, &proc("kworker/1:2-events", "", 0, 0)),
            "kernel threads: events"
        );
        assert_eq!(
            category(&w, 7, &proc("sshd", "sshd: x", 0, 0)),
            "other: sshd"
        );
    }

    #[test]
    fn split_counts_a_reused_pid_from_zero_and_the_machine_from_proc_stat() {
        let mut a = Snapshot {
            t: 100.0,
            cpu: [100, 0, 0, 900, 0, 0, 0, 0],
            ..Snapshot::default()
        };
        a.procs.insert(10, proc("orchestrator", "x", 1000, 5));
        a.procs.insert(12, proc("old", "old", 5000, 6));
        let mut b = Snapshot {
            t: 102.0,
            cpu: [300, 0, 0, 1100, 0, 0, 0, 0],
            ..Snapshot::default()
        };
        b.procs.insert(10, proc("orchestrator", "x", 1100, 5));
        b.procs.insert(12, proc("new", "new", 40, 7));
        let s = split(&a, &b, &who(), 100.0, 2);
        assert!((s.cores("orchestrator-1") - 0.5).abs() < 1e-9);
        assert!((s.cores("other: new") - 0.2).abs() < 1e-9);
        assert!((s.busy_cores - 1.0).abs() < 1e-9);
    }

    #[test]
    fn rows_fold_the_small_ones_and_keep_the_order() {
        let s = CpuSplit {
            by_process: BTreeMap::from([
                ("a".into(), 0.5),
                ("b".into(), 0.004),
                ("c".into(), 0.003),
                ("d".into(), 0.9),
            ]),
            ..CpuSplit::default()
        };
        let rows = s.rows(0.01);
        assert_eq!(rows[0].0, "d");
        assert_eq!(rows[1].0, "a");
        assert!(rows[2].0.starts_with("everything else"));
        assert_eq!(rows.len(), 3);
    }

    #[test]
    fn thread_family_drops_the_number() {
        assert_eq!(thread_family("tokio-rt-worker-3"), "tokio-rt-worker");
        assert_eq!(thread_family("rdk:main"), "rdk:main");
        assert_eq!(thread_family("42"), "42");
    }
}
