//! The report's last section: what is cheap to fix on the hot path — each item written only
//! where this run's numbers show it (for the lead; nothing here is changed by the run).

use std::fmt::Write;

use super::cpu;
use super::perf::ProfileTop;
use super::pgbench::{HOT, SELECT_ONLY};
use super::report::{num, origins_text, services_cores};
use super::summary::{StepRow, Summary};
use lab_report::doc::{Block, Doc};

fn top<'a>(s: &'a Summary, name: &str) -> Option<&'a ProfileTop> {
    s.profile
        .as_ref()?
        .targets
        .iter()
        .find(|t| t.name == name)?
        .top
        .as_ref()
}

/// A family's inclusive share in `name`'s profile (0 when not measured).
fn incl(s: &Summary, name: &str, family: &str) -> f64 {
    top(s, name)
        .and_then(|t| t.inclusive.iter().find(|(k, _)| k.starts_with(family)))
        .map_or(0.0, |(_, v)| *v)
}

fn own(s: &Summary, name: &str, function: &str) -> f64 {
    top(s, name)
        .and_then(|t| t.own.iter().find(|(k, _)| k == function))
        .map_or(0.0, |(_, v)| *v)
}

const SERVICES: [&str; 3] = ["edge-gateway-1", "orchestrator-1", "entity-service-1"];

pub fn section(d: &mut Doc, s: &Summary) {
    let Some(r) = s.reference() else {
        return;
    };
    let items: Vec<String> = [
        broker(s, r),
        concurrency_limit(s),
        jaccard(s),
        tracing(s),
        allocator(s),
        Some(caveat(s, r)),
        Some(profiling(s)),
    ]
    .into_iter()
    .flatten()
    .collect();
    d.h2("7. What is cheap to fix on the hot path (for the lead; nothing here was changed)")
        .push(Block::Ordered(items));
}

fn broker(s: &Summary, r: &StepRow) -> Option<String> {
    let cores = s.meta.cores as f64;
    let tansu = r.cpu.cores(cpu::BROKER);
    if tansu < 0.2 * cores {
        return None;
    }
    let idle = s.idle.as_ref().map(|i| i.cores(cpu::BROKER));
    let threads: u32 = s
        .profile_step()
        .and_then(|p| p.cpu.threads.get(cpu::BROKER))
        .map_or(0, |t| t.values().map(|g| g.threads).sum());
    let mut t = format!(
        "**The Kafka broker, not the chain, is the biggest consumer of the machine**: tansu used {tansu:.2} cores at {} rps ({:.0} % of the machine){}",
        num(Some(r.rate), 0),
        100.0 * tansu / cores,
        idle.map(|i| format!(" and {i:.2} with no load at all")).unwrap_or_default()
    );
    if threads > 0 {
        let _ = write!(t, ", on {threads} threads");
    }
    let _ = write!(
        t,
        "; the services together used {:.2}. ",
        services_cores(&r.cpu)
    );
    if idle.is_some_and(|i| i >= 0.8 * tansu) {
        t.push_str("Its cost does not come from the traffic (as much or more with no load than at the maximum): an idle cost, not a per-event one. ");
    }
    let _ = write!(
        t,
        "It is off the request path (nothing waits on it), so it only competes for CPU. Cheap levers: measure the chain without it \
         (`labctl chain-limit --kafka ''`); and the producers' batching against tansu (`LAB_KAFKA__BATCH_MAX_EVENTS`, `LAB_KAFKA__LINGER_MS`: \
         fewer, fuller batches cost the broker less; rdkafka is {:.0} % of orchestrator-1's samples).",
        incl(s, "orchestrator-1", "Kafka")
    );
    Some(t)
}

/// The first rung where the fixed client's admission 503s (the static limit's
/// `concurrency_limited`, entity-service's `db_pool_exhausted`) pass 0.5 % of the requests.
fn concurrency_limit(s: &Summary) -> Option<String> {
    let first = s.ladder().find(|r| {
        r.origins
            .keys()
            .any(|k| k.contains("concurrency_limited") || k.contains("db_pool_exhausted"))
            && r.origins.values().sum::<f64>() >= 0.005 * r.sent as f64
    })?;
    let cores = s.meta.cores;
    let hot = s.pgbench_best(HOT).and_then(|h| h.stmt_ms);
    let what = origins_text(first);
    Some(if first.cpu.busy_cores >= 0.9 * cores as f64 {
        format!(
            "**The maximum is set by the CPU; the fixed client's admission is only what fails first**: its 503s first pass 0.5 % \
             of the requests at {} rps ({what}), with the machine {:.2} of {cores} cores busy; the hot lookup took {} ms inside the chain \
             against {} ms in pgbench — waiting for a core, not PostgreSQL work (its backends for entity-service used {:.2} cores). The \
             admission (entity-service's pool within each request's budget, or with `resilience.concurrency_adaptive=off` the static \
             `[resilient] max_concurrency` per orchestrator) turns that queueing into fast 503s, as designed; loosening it would \
             trade the 503s for latency. What raises the maximum is CPU given back: the items below.",
            num(Some(first.rate), 0), first.cpu.busy_cores, num(first.rates.cand_ms, 2), num(hot, 3), first.cpu.cores(cpu::PG_ENTITY)
        )
    } else {
        format!(
            "**The fixed client's admission sheds before the machine is busy**: its 503s first pass 0.5 % of the requests at {} rps \
             ({what}), with {:.2} of {cores} cores busy and the hot lookup at {} ms. `concurrency_limited` is the orchestrators' own \
             limit (static or adaptive, `resilience.concurrency_adaptive`), sized without measuring the callee; `db_pool_exhausted` is \
             entity-service finding that its pool's queue would not clear within the requests' budgets (its query cost estimate, \
             `services/entity-service/src/admission.rs`).",
            num(Some(first.rate), 0), first.cpu.busy_cores, num(first.rates.cand_ms, 2)
        )
    })
}

fn jaccard(s: &Summary) -> Option<String> {
    let j = own(s, "entity-service-1", "entity_service::score::jaccard");
    (j >= 3.0).then(|| format!(
        "**entity-service's scoring allocates on every comparison**: `score::jaccard` is {j:.0} % of entity-service-1's samples \
         (inclusive) — two `HashSet`s (SipHash, heap) per span × candidate, 20 candidates per unmatched span, and each candidate's name \
         re-tokenized for every span. Cheap: tokenize the candidates once per kind, compare small sorted token slices."
    ))
}

fn tracing(s: &Summary) -> Option<String> {
    let tr: Vec<(&str, f64)> = SERVICES
        .iter()
        .map(|n| (*n, incl(s, n, "tracing subscriber")))
        .collect();
    (tr.iter().any(|(_, v)| *v >= 5.0)).then(|| {
        let parts: Vec<String> = tr.iter().map(|(k, v)| format!("{v:.0} % of {k}'s")).collect();
        format!(
            "**Span bookkeeping for unsampled requests**: the tracing subscriber and OpenTelemetry layer are on {} samples (inclusive) \
             with `labctl up`'s 10 % trace sample; spans are built for every request and dropped at export. Cheap to check: one ladder \
             with `labctl chain-limit --trace-sample 0`; if it moves the maximum, skip span creation below the sampling decision.",
            parts.join(", ")
        )
    })
}

fn allocator(s: &Summary) -> Option<String> {
    let al: Vec<(&str, f64)> = SERVICES
        .iter()
        .map(|n| (*n, incl(s, n, "allocator")))
        .collect();
    let jemalloc =
        top(s, "orchestrator-1").is_some_and(|t| t.sym.iter().any(|e| e.sym.contains("_rjem_")));
    (al.iter().any(|(_, v)| *v >= 8.0) && !jemalloc).then(|| {
        let parts: Vec<String> = al.iter().map(|(k, v)| format!("{v:.0} % of {k}'s samples")).collect();
        format!(
            "**malloc/free**: {} (inclusive); a faster global allocator (mimalloc, jemalloc) is a two-line change per binary.",
            parts.join(", ")
        )
    })
}

fn caveat(s: &Summary, r: &StepRow) -> String {
    let cores = s.meta.cores as f64;
    let gen = r.cpu.cores(cpu::LOAD_GENERATOR);
    let mut t = format!(
        "**Not a fix, a caveat**: the load generator took {gen:.2} cores ({:.0} % of the machine) at the maximum",
        100.0 * gen / cores
    );
    let client = s
        .pgbench_best(SELECT_ONLY)
        .and_then(|b| b.cpu.as_ref())
        .map(|c| c.cores(cpu::PGBENCH_CLIENT));
    if let Some(client) = client {
        let _ = write!(
            t,
            " and pgbench's own client {client:.2} cores in the -S run, so both sides of the ratio pay for their client"
        );
    }
    // How CPU per document changes from the lowest rung to the maximum, when they differ.
    if let Some(low) = s.ladder().next().filter(|low| low.rate != r.rate) {
        let _ = write!(
            t,
            "; the chain's CPU per answered document was {} ms at {} rps and {} ms at {} rps: the part of the machine's load \
             that does not grow with the rate is fixed cost",
            num(low.cpu_ms_per_doc(), 2),
            num(Some(low.rate), 0),
            num(r.cpu_ms_per_doc(), 2),
            num(Some(r.rate), 0)
        );
    }
    t.push('.');
    t
}

fn profiling(s: &Summary) -> String {
    let dw = s.profile.as_ref().map_or(0, |p| p.dwarf_probe_samples);
    let how = if dw > 0 {
        format!("DWARF unwinding works on this machine ({dw} samples in the 2 s probe) and was used, at the price of an 8 KB stack copy per sample.")
    } else {
        "DWARF unwinding got no samples here, so only self time is shown.".to_string()
    };
    format!(
        "**Profiling settings** (Cargo.toml unchanged): `[profile.release] debug = {}` keeps what perf needs for names. What the \
         binaries lack is frame pointers, so `perf record -g` stops at the first Rust frame; {how} For cheap whole-stack profiles, a \
         profiling build with `RUSTFLAGS='-C force-frame-pointers=yes'` (no Cargo profile key sets it on stable) would make `-g` work \
         at any frequency.",
        s.meta.release_debug
    )
}
