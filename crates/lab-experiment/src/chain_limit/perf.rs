//! CPU profiles at the maximum rate: `perf record` on a few processes at once, `perf report` and
//! `perf script` read back — all as subprocesses (the thin shell); what their text says is
//! parsed and summed here: self time by symbol and object, families of symbols, and (with DWARF
//! stacks) inclusive shares and the lab's own functions.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use regex::Regex;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Families of symbols for self time: what an entry spends on (first match wins; the kernel's
/// by its object).
const FAMILIES: &[(&str, &str)] = &[
    (
        "kernel (syscalls, TCP loopback, scheduler)",
        r"^\[kernel|kallsyms",
    ),
    (
        "allocator (malloc/free/realloc, jemalloc)",
        r"malloc|free|realloc|_int_|alloc::alloc|__rdl_|cfree|arena|_rjem_|\bje_|rallocx|mallocx|sdallocx",
    ),
    (
        "memcpy/memmove/memset/strlen",
        r"mem(cpy|move|set|cmp)|strlen|__memc",
    ),
    ("JSON (serde_json)", r"serde_json|serde::"),
    (
        "tracing / OpenTelemetry / protobuf export",
        r"tracing|opentelemetry|otel|prost|tonic",
    ),
    ("metrics (prometheus)", r"prometheus"),
    (
        "HTTP (hyper, h2, http, reqwest, axum, tower)",
        r"hyper|\bh2::|\bhttp::|reqwest|axum|tower|httparse",
    ),
    (
        "tokio runtime and sync",
        r"tokio|parking_lot|crossbeam|futures|std::sync|std::thread",
    ),
    (
        "PostgreSQL client (tokio-postgres, deadpool)",
        r"postgres|deadpool|postgres_protocol",
    ),
    (
        "hashing / crypto (sha2, hash maps)",
        r"sha2|hashbrown|siphash|SipHasher|ahash|fxhash|hash::",
    ),
    (
        "text (normalize, spans, unicode, regex, jaccard)",
        r"normalize|candidate_spans|guess_kind|unicode|regex|aho_corasick|jaccard|score|char",
    ),
    ("LRU cache", r"lru"),
    ("libc (other)", r"libc|ld-linux"),
    (
        "postgres executor / planner / index",
        r"Exec|exec_|index|btree|_bt_|heap|Plan|plan|tuple|slot|hash_search|LWLock|Snapshot|pq_|PortalRun|postgres$",
    ),
];
const UNRESOLVED: &str = "other (the service's own code, unresolved)";

/// Inclusive families: a sample counts once for each family with a frame on its stack (they
/// overlap and nest). `true`: matched against the frame's object, not its symbol.
const INCLUSIVE: &[(&str, &str, bool)] = &[
    ("syscalls (any kernel frame)", r"kernel", true),
    (
        "scheduler: park / wake / context switch",
        r"finish_task_switch|futex|park|epoll_wait|schedule",
        false,
    ),
    (
        "allocator (malloc / free, jemalloc)",
        r"^(malloc|free|cfree|realloc|calloc|_int_malloc|_int_free|_int_realloc|malloc_consolidate|__libc_malloc|__libc_free|__rust_alloc|__rust_dealloc|__rdl_|_rjem_|do_rallocx|je_|sdallocx|mallocx)",
        false,
    ),
    ("JSON (serde_json)", r"serde_json", false),
    (
        "tracing subscriber + OpenTelemetry (span bookkeeping, export)",
        r"tracing_subscriber|tracing_opentelemetry|opentelemetry|tracing_core::dispatcher",
        false,
    ),
    ("Prometheus metrics", r"prometheus::", false),
    (
        "HTTP client to the next hop (reqwest / hyper client)",
        r"reqwest::|hyper::client|hyper_util::client",
        false,
    ),
    ("Kafka producer (rdkafka)", r"rdkafka|rd_kafka", false),
    (
        "PostgreSQL client (tokio-postgres, deadpool)",
        r"tokio_postgres|postgres_protocol|deadpool",
        false,
    ),
    ("Redis (flags, rate limits)", r"^redis::|<redis::", false),
    ("API key hashing (sha2)", r"sha2", false),
    (
        "document text: spans, normalize, kind",
        r"lab_api::text",
        false,
    ),
    (
        "orchestrator LRU cache",
        r"lru::|orchestrator::cache",
        false,
    ),
    (
        "PostgreSQL: executor",
        r"^Exec|ExecutorRun|standard_ExecutorRun|PortalRun",
        false,
    ),
    (
        "PostgreSQL: planner / plan cache",
        r"planner|GetCachedPlan|BuildCachedPlan|CheckCachedPlan|RevalidateCachedQuery|pg_plan_",
        false,
    ),
    (
        "PostgreSQL: transaction start/commit",
        r"StartTransaction|CommitTransaction|AbortTransaction|exec_simple_query",
        false,
    ),
    (
        "PostgreSQL: protocol (socket read/write, pq_)",
        r"^pq_|secure_read|secure_write|socket_",
        false,
    ),
];
/// The lab's own functions (their inclusive shares are listed by name).
const OWN: &str = r"^<?(orchestrator|entity_service|edge_gateway|lab_api|lab_core|entity_client|entity_client_legacy|lab_flags|lab_kafka|lab_contract|lab_db)::";

/// Named shares, %, biggest first.
pub type Shares = Vec<(String, f64)>;

/// One self-time entry of `perf report --sort dso,sym`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SymEntry {
    pub pct: f64,
    pub dso: String,
    pub sym: String,
}

/// A profile's top entries, what the report shows of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileTop {
    pub samples: u64,
    pub sym: Vec<SymEntry>,
    pub dso: Vec<(String, f64)>,
    pub families: Vec<(String, f64)>,
    /// Samples with a whole stack (DWARF), what the inclusive shares are of.
    pub stack_samples: u64,
    pub inclusive: Vec<(String, f64)>,
    pub own: Vec<(String, f64)>,
}

/// `  12.74%  [kernel.kallsyms]  [k] _raw_spin_unlock_irqrestore` → an entry.
pub fn parse_sym_report(text: &str) -> Vec<SymEntry> {
    let re = Regex::new(r"^\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$").expect("valid");
    text.lines()
        .filter_map(|l| {
            let c = re.captures(l)?;
            Some(SymEntry {
                pct: c[1].parse().ok()?,
                dso: c[2].to_string(),
                sym: c[4].to_string(),
            })
        })
        .collect()
}

/// `  68.40%  orchestrator` → (object, %).
pub fn parse_dso_report(text: &str) -> Vec<(String, f64)> {
    let re = Regex::new(r"^\s+([\d.]+)%\s+(\S+)\s*$").expect("valid");
    text.lines()
        .filter_map(|l| {
            let c = re.captures(l)?;
            Some((c[2].to_string(), c[1].parse().ok()?))
        })
        .collect()
}

/// Self time summed by family, biggest first.
pub fn families(sym: &[SymEntry]) -> Vec<(String, f64)> {
    let fam: Vec<(&str, Regex)> = FAMILIES
        .iter()
        .map(|(k, rx)| (*k, Regex::new(rx).expect("valid")))
        .collect();
    let mut sums: BTreeMap<&str, f64> = BTreeMap::new();
    for e in sym {
        let key = fam
            .iter()
            .find(|(k, rx)| {
                rx.is_match(if k.starts_with("kernel") {
                    &e.dso
                } else {
                    &e.sym
                })
            })
            .map_or(UNRESOLVED, |(k, _)| k);
        *sums.entry(key).or_default() += e.pct;
    }
    sorted(sums.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn sorted(mut v: Vec<(String, f64)>) -> Vec<(String, f64)> {
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// Inclusive shares from `perf script -F ip,sym,dso` output: samples are blocks of frame lines
/// (`\t    55d0c1 orchestrator::plan::plan+0x12 (/path/orchestrator)`) separated by blank lines.
pub struct Stacks {
    frame: Regex,
    offset: Regex,
    closure: Regex,
    own_rx: Regex,
    incl: Vec<(&'static str, Regex, bool)>,
    frames: Vec<(String, String)>,
    samples: u64,
    hits: BTreeMap<&'static str, u64>,
    own: BTreeMap<String, u64>,
}

impl Default for Stacks {
    fn default() -> Self {
        Stacks {
            frame: Regex::new(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$").expect("valid"),
            offset: Regex::new(r"\+0x[0-9a-f]+$").expect("valid"),
            closure: Regex::new(r"::\{\{closure\}\}").expect("valid"),
            own_rx: Regex::new(OWN).expect("valid"),
            incl: INCLUSIVE
                .iter()
                .map(|(k, rx, dso)| (*k, Regex::new(rx).expect("valid"), *dso))
                .collect(),
            frames: Vec::new(),
            samples: 0,
            hits: BTreeMap::new(),
            own: BTreeMap::new(),
        }
    }
}

impl Stacks {
    pub fn line(&mut self, line: &str) {
        if let Some(c) = self.frame.captures(line) {
            let sym = self.offset.replace(&c[1], "").to_string();
            self.frames.push((sym, c[2].to_string()));
        } else if line.trim().is_empty() {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.frames.is_empty() {
            return;
        }
        self.samples += 1;
        for (k, rx, on_dso) in &self.incl {
            if self
                .frames
                .iter()
                .any(|(s, d)| rx.is_match(if *on_dso { d } else { s }))
            {
                *self.hits.entry(k).or_default() += 1;
            }
        }
        let own: HashSet<String> = self
            .frames
            .iter()
            .filter(|(s, _)| self.own_rx.is_match(s))
            .map(|(s, _)| self.closure.replace_all(s, "").to_string())
            .collect();
        for k in own {
            *self.own.entry(k).or_default() += 1;
        }
        self.frames.clear();
    }

    /// (samples, inclusive shares %, the lab's own functions %, top 12).
    pub fn finish(mut self) -> (u64, Shares, Shares) {
        self.flush();
        let n = self.samples.max(1) as f64;
        let pct = |v: u64| 100.0 * v as f64 / n;
        let incl = sorted(
            self.hits
                .iter()
                .map(|(k, v)| (k.to_string(), pct(*v)))
                .collect(),
        );
        let mut own = sorted(self.own.iter().map(|(k, v)| (k.clone(), pct(*v))).collect());
        own.truncate(12);
        (self.samples, incl, own)
    }
}

/// One profile target: a name and the pids `perf record -p` takes (comma-separated).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub name: String,
    pub pids: String,
}

/// What a profile run recorded, before it is read back.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub dir: PathBuf,
    pub targets: Vec<Target>,
    /// `-g`, or `--call-graph dwarf`.
    pub call_graph: Vec<String>,
    pub dwarf_probe_samples: u64,
    pub hz: u32,
    pub seconds: u64,
}

impl Recorded {
    pub fn dwarf(&self) -> bool {
        self.call_graph.iter().any(|a| a == "dwarf")
    }

    pub fn command(&self) -> String {
        format!(
            "perf record -F {} {} -p PID -- sleep {}",
            self.hz,
            self.call_graph.join(" "),
            self.seconds
        )
    }
}

/// `perf record` of `pids` for `seconds` into `data` (its stderr into `<data>.record.log`).
fn record_cmd(
    hz: u32,
    call_graph: &[String],
    pids: &str,
    seconds: u64,
    data: &Path,
) -> anyhow::Result<Command> {
    let log = std::fs::File::create(data.with_extension("record.log"))?;
    let mut c = Command::new("perf");
    c.arg("record")
        .args(["-F", &hz.to_string()])
        .args(call_graph)
        .arg("-o")
        .arg(data)
        .args(["-p", pids, "--", "sleep", &seconds.to_string()])
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    Ok(c)
}

/// Lines of a perf subcommand's stdout, streamed to `each` (empty when perf fails).
async fn perf_lines(args: &[&str], data: &Path, mut each: impl FnMut(&str)) {
    let Ok(mut child) = Command::new("perf")
        .args(args)
        .arg("-i")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
    else {
        return;
    };
    if let Some(out) = child.stdout.take() {
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            each(&l);
        }
    }
    let _ = child.wait().await;
}

/// Samples a 2 s DWARF probe on `pid` got: some kernels in VMs drop every sample that carries a
/// user stack, and then only `-g` (frame pointers: the first Rust frame) is left.
pub async fn dwarf_probe(dir: &Path, hz: u32, pid: u32) -> u64 {
    let data = dir.join("dwarf-probe.data");
    let cg = ["--call-graph".to_string(), "dwarf".to_string()];
    let Ok(mut c) = record_cmd(hz, &cg, &pid.to_string(), 2, &data) else {
        return 0;
    };
    if !c.status().await.is_ok_and(|s| s.success()) {
        return 0;
    }
    let mut n = 0;
    perf_lines(&["script", "-F", "tid"], &data, |_| n += 1).await;
    n
}

/// Record every target at once for `seconds` (perf's own cost is in the step's CPU split).
pub async fn record_all(
    dir: &Path,
    targets: &[Target],
    hz: u32,
    seconds: u64,
    dwarf_probe_samples: u64,
) -> anyhow::Result<(Recorded, Vec<tokio::process::Child>)> {
    let call_graph: Vec<String> = if dwarf_probe_samples > 0 {
        vec!["--call-graph".into(), "dwarf".into()]
    } else {
        vec!["-g".into()]
    };
    let mut children = Vec::new();
    for t in targets {
        let data = dir.join(format!("{}.data", t.name));
        children.push(record_cmd(hz, &call_graph, &t.pids, seconds, &data)?.spawn()?);
    }
    let rec = Recorded {
        dir: dir.to_path_buf(),
        targets: targets.to_vec(),
        call_graph,
        dwarf_probe_samples,
        hz,
        seconds,
    };
    Ok((rec, children))
}

/// Read one target's recording back; `Err(why)` when perf got nothing (its record log's first
/// line: permissions, an unsupported event).
pub async fn analyse(rec: &Recorded, name: &str) -> Result<ProfileTop, String> {
    let data = rec.dir.join(format!("{name}.data"));
    let log = std::fs::read_to_string(data.with_extension("record.log")).unwrap_or_default();
    let empty = std::fs::metadata(&data).map_or(true, |m| m.len() == 0);
    let refused = ["permission", "not supported", "paranoid"]
        .iter()
        .any(|w| log.to_lowercase().contains(w));
    if empty || refused {
        return Err(log
            .lines()
            .next()
            .unwrap_or("no perf data")
            .trim()
            .to_string());
    }
    let mut sym_text = String::new();
    let report = ["report", "--stdio", "--no-children", "-g", "none"];
    let sym_args = [
        &report[..],
        &["--sort", "dso,sym", "--percent-limit", "0.01"],
    ]
    .concat();
    perf_lines(&sym_args, &data, |l| sym_text.push_str(&format!("{l}\n"))).await;
    let mut dso_text = String::new();
    perf_lines(&[&report[..], &["--sort", "dso"]].concat(), &data, |l| {
        dso_text.push_str(&format!("{l}\n"))
    })
    .await;
    let mut samples = 0;
    perf_lines(&["script", "-F", "tid"], &data, |_| samples += 1).await;
    let mut stacks = Stacks::default();
    if rec.dwarf() {
        // --no-inline: resolving inlined frames would take minutes and adds nothing here.
        perf_lines(&["script", "-F", "ip,sym,dso", "--no-inline"], &data, |l| {
            stacks.line(l)
        })
        .await;
    }
    let (stack_samples, inclusive, own) = stacks.finish();
    let mut sym = parse_sym_report(&sym_text);
    let fams = families(&sym);
    sym.truncate(40);
    let mut dso = parse_dso_report(&dso_text);
    dso.truncate(10);
    Ok(ProfileTop {
        samples,
        sym,
        dso,
        families: fams,
        stack_samples,
        inclusive,
        own,
    })
}

/// The service binaries' symbols: `stripped` or not, and their debug sections (`readelf -S`).
pub async fn symbols(bin_dir: &Path) -> String {
    let mut out = Vec::new();
    for b in ["orchestrator", "entity-service", "edge-gateway"] {
        let path = bin_dir.join(b);
        let Ok(o) = Command::new("readelf")
            .args(["-S", "-W"])
            .arg(&path)
            .output()
            .await
        else {
            out.push(format!("{b}: ?"));
            continue;
        };
        let text = String::from_utf8_lossy(&o.stdout);
        let mut debug: Vec<&str> = text
            .split_whitespace()
            .filter(|w| w.starts_with(".debug_"))
            .collect();
        debug.sort_unstable();
        debug.dedup();
        let stripped = if text.contains(".symtab") {
            "not stripped"
        } else {
            "stripped"
        };
        out.push(format!("{b}: {stripped}, {}", debug.join(" ")));
    }
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYM: &str = "\
# Samples: 879  of event 'cpu-clock:pppH'
#
# Overhead  Shared Object      Symbol
# ........  .................  ......
#
     5.35%  [kernel.kallsyms]  [k] finish_task_switch.isra.0
     4.89%  libc.so.6          [.] __memmove_avx512_unaligned_erms
     4.78%  orchestrator       [.] hashbrown::map::HashMap<K,V,S,A>::get_mut
     1.37%  orchestrator       [.] _rjem_malloc
     0.90%  orchestrator       [.] orchestrator::plan::plan
";

    #[test]
    fn parse_sym_report_reads_every_entry_and_skips_the_header() {
        let s = parse_sym_report(SYM);
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].pct, 5.35);
        assert_eq!(s[0].dso, "[kernel.kallsyms]");
        assert_eq!(s[0].sym, "finish_task_switch.isra.0");
        assert_eq!(s[2].sym, "hashbrown::map::HashMap<K,V,S,A>::get_mut");
    }

    #[test]
    fn parse_dso_report_reads_objects() {
        let d = parse_dso_report(
            "# Overhead  Shared Object\n    68.40%  orchestrator\n    19.30%  [kernel.kallsyms]\n",
        );
        assert_eq!(
            d,
            vec![
                ("orchestrator".into(), 68.4),
                ("[kernel.kallsyms]".into(), 19.3)
            ]
        );
    }

    #[test]
    fn families_put_the_kernel_by_object_and_the_rest_by_symbol() {
        let f: BTreeMap<String, f64> = families(&parse_sym_report(SYM)).into_iter().collect();
        assert_eq!(f["kernel (syscalls, TCP loopback, scheduler)"], 5.35);
        assert_eq!(f["memcpy/memmove/memset/strlen"], 4.89);
        assert_eq!(f["hashing / crypto (sha2, hash maps)"], 4.78);
        assert_eq!(f["allocator (malloc/free/realloc, jemalloc)"], 1.37);
        assert!(!f.contains_key(UNRESOLVED));
    }

    #[test]
    fn stacks_count_each_family_once_per_sample() {
        let text = "\
orchestrator 123/456 [000] 1.0: cpu-clock:
\t    55d0c1 orchestrator::cache::ResolutionCache::get+0x12 (/b/orchestrator)
\t    55d0c2 lru::LruCache::get+0x1 (/b/orchestrator)
\t    55d0c3 orchestrator::plan::plan::{{closure}}+0x9 (/b/orchestrator)
\t    55d0c4 orchestrator::plan::plan+0x9 (/b/orchestrator)

orchestrator 123/456 [000] 1.1: cpu-clock:
\t    ffff01 finish_task_switch.isra.0+0x5 ([kernel.kallsyms])
";
        let mut s = Stacks::default();
        for l in text.lines() {
            s.line(l);
        }
        let (n, incl, own) = s.finish();
        assert_eq!(n, 2);
        let incl: BTreeMap<String, f64> = incl.into_iter().collect();
        assert_eq!(incl["orchestrator LRU cache"], 50.0);
        assert_eq!(incl["syscalls (any kernel frame)"], 50.0);
        assert_eq!(incl["scheduler: park / wake / context switch"], 50.0);
        let own: BTreeMap<String, f64> = own.into_iter().collect();
        assert_eq!(
            own["orchestrator::plan::plan"], 50.0,
            "closures fold into their function once"
        );
        assert_eq!(own.len(), 2);
    }
}
