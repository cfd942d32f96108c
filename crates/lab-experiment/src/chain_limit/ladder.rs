//! The rate ladder: open-loop steps of `lab_load` through the gateway, each bracketed by a
//! scrape of every replica, the lab database's transaction count and two `/proc` snapshots;
//! the highest step within the bound is the chain's maximum sustainable rate.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use lab_core::exposition::{label, split_series};
use lab_load::LoadReport;

use super::cpu::CpuSplit;
use super::lab::LabUnderTest;
use super::perf::Recorded;
use super::profile::Profiler;
use super::summary::{ChainRates, StepKind, StepRow};
use crate::scrape::{Scrape, Target};

/// The bound a step must stay within to count as sustained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// p99 of the 200s, from intended send, ms.
    pub p99_ms: f64,
    /// Share of requests answered 200, %.
    pub ok_pct: f64,
}

/// How a step went against the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    /// Far past the bound (p99 over 4× it, or under 90 % 200s): higher steps would only measure
    /// a deeper queue, so the ladder stops.
    Far,
}

pub fn judge(p99_ms: f64, ok_pct: f64, b: Bound) -> Verdict {
    if p99_ms <= b.p99_ms && ok_pct >= b.ok_pct {
        Verdict::Pass
    } else if p99_ms > 4.0 * b.p99_ms || ok_pct < 90.0 {
        Verdict::Far
    } else {
        Verdict::Fail
    }
}

/// The highest passing rung (a failed rung below a passing one does not lower it: the bound is
/// judged step by step, as the script did).
pub fn max_sustainable<'a>(ladder: impl Iterator<Item = &'a StepRow>) -> Option<&'a StepRow> {
    ladder
        .filter(|s| s.kind == StepKind::Rate && s.passed)
        .max_by(|a, b| a.rate.total_cmp(&b.rate))
}

/// The sum of `name`'s series in one scrape whose labels have every `want`ed value.
fn total(s: &HashMap<String, f64>, name: &str, want: &[(&str, &str)]) -> f64 {
    s.iter()
        .filter(|(k, _)| {
            let (n, l) = split_series(k);
            n == name && want.iter().all(|(k, v)| label(l, k) == Some(v))
        })
        .map(|(_, v)| v)
        .sum()
}

/// Scrapes around a step, target by target.
pub struct Scrapes<'a> {
    pub targets: &'a [Target],
    pub before: &'a [Scrape],
    pub after: &'a [Scrape],
}

impl Scrapes<'_> {
    /// How much `name` grew on `service`'s replicas (a replica missing a scrape counts 0).
    pub fn increase(&self, service: &str, name: &str, want: &[(&str, &str)]) -> f64 {
        let mut sum = 0.0;
        for (i, t) in self.targets.iter().enumerate() {
            if t.service != service {
                continue;
            }
            let (Some(Some(a)), Some(Some(b))) = (self.before.get(i), self.after.get(i)) else {
                continue;
            };
            sum += (total(b, name, want) - total(a, name, want)).max(0.0);
        }
        sum
    }

    /// The gateway's 5xx by `hop/origin` (`lab_errors_total`).
    pub fn origins(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (i, t) in self.targets.iter().enumerate() {
            let (Some(Some(a)), Some(Some(b))) = (self.before.get(i), self.after.get(i)) else {
                continue;
            };
            if t.service != "edge-gateway" {
                continue;
            }
            for (series, v) in b {
                let (n, l) = split_series(series);
                if n != "lab_errors_total"
                    || !label(l, "status").is_some_and(|s| s.starts_with('5'))
                {
                    continue;
                }
                let d = v - a.get(series).copied().unwrap_or(0.0);
                if d > 0.0 {
                    let k = format!(
                        "{}/{}",
                        label(l, "hop").unwrap_or("?"),
                        label(l, "origin").unwrap_or("?")
                    );
                    *out.entry(k).or_insert(0.0) += d;
                }
            }
        }
        out
    }

    /// The chain's per-second rates over `seconds`, for `ok` documents answered 200.
    pub fn rates(&self, seconds: f64, ok: u64) -> ChainRates {
        let es = |name, q: &str| self.increase("entity-service", name, &[("query", q)]);
        let spans = self.increase("entity-service", "entity_service_spans_total", &[]);
        let count = "entity_db_query_duration_seconds_count";
        let (exact, cand, acquire) = (
            es(count, "exact"),
            es(count, "candidate"),
            es(count, "acquire"),
        );
        let cand_sum = es("entity_db_query_duration_seconds_sum", "candidate");
        let cache = "orchestrator_cache_requests_total";
        let hits = self.increase("orchestrator", cache, &[("result", "hit")]);
        let lookups = self.increase("orchestrator", cache, &[]);
        let per_doc = |x: f64| (ok > 0).then(|| x / ok as f64);
        ChainRates {
            spans_s: spans / seconds,
            exact_s: exact / seconds,
            cand_s: cand / seconds,
            resolves_s: acquire / seconds,
            cand_ms: (cand > 0.0).then(|| 1e3 * cand_sum / cand),
            spans_per_doc: per_doc(lookups),
            hit_pct: (lookups > 0.0).then(|| 100.0 * hits / lookups),
            es_spans_per_doc: per_doc(spans),
        }
    }
}

/// One step to run.
#[derive(Debug, Clone)]
pub struct StepPlan {
    pub name: String,
    pub kind: StepKind,
    pub rate: f64,
    pub seconds: u64,
    pub seed: u64,
}

/// A step's row from what was measured around it.
pub fn step_row(
    plan: &StepPlan,
    load: &LoadReport,
    scrapes: &Scrapes<'_>,
    (seconds, xacts): (f64, Option<f64>),
    cpu: CpuSplit,
    bound: Bound,
) -> StepRow {
    let sent = load.sent.max(1);
    let ok = load.by_status.get("200").copied().unwrap_or(0);
    let five = load
        .by_status
        .iter()
        .filter(|(k, _)| k.starts_with('5'))
        .map(|(_, n)| n)
        .sum();
    let ok_pct = 100.0 * ok as f64 / sent as f64;
    let p99 = load.ok_latency_ms.p99;
    StepRow {
        name: plan.name.clone(),
        kind: plan.kind,
        rate: plan.rate,
        seconds: plan.seconds,
        sent: load.sent,
        ok_rps: load.ok_rps,
        ok_pct,
        five,
        p50: load.ok_latency_ms.p50,
        p99,
        by_status: load.by_status.clone(),
        client_overload: load.client_overload,
        origins: scrapes.origins(),
        rates: scrapes.rates(seconds, ok),
        xacts_s: xacts.map(|x| x / seconds),
        cpu,
        passed: judge(p99, ok_pct, bound) == Verdict::Pass,
    }
}

/// Run one step on `lab`: scrapes and the transaction count around it, the load in process, and
/// the CPU snapshots 1 s after it starts and ~2.5 s before it ends (an exited process's ticks
/// are lost to /proc) — or, for the profile step, around perf's window, 5 s into the load.
pub async fn run_step(
    lab: &LabUnderTest,
    plan: &StepPlan,
    bound: Bound,
    profiler: Option<&Profiler<'_>>,
) -> anyhow::Result<(StepRow, Option<Recorded>)> {
    let before = lab.scrape().await;
    let x0 = lab.xacts().await;
    let t0 = std::time::Instant::now();
    let load = tokio::spawn(lab.load(plan));
    let (a, b, recorded) = match profiler {
        Some(p) => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let (a, b, rec) = p.run().await?;
            (a, b, Some(rec))
        }
        None => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let a = lab.snapshot().await;
            let rest = (plan.seconds as f64 - 3.5).max(0.5);
            tokio::time::sleep(Duration::from_secs_f64(rest)).await;
            (a, lab.snapshot().await, None)
        }
    };
    let report = load.await??;
    let after = lab.scrape().await;
    let x1 = lab.xacts().await;
    let seconds = t0.elapsed().as_secs_f64();
    let scrapes = Scrapes {
        targets: &lab.targets,
        before: &before,
        after: &after,
    };
    let xacts = x0.zip(x1).map(|(a, b)| (b - a) as f64);
    let split = lab.split(&a, &b);
    let row = step_row(plan, &report, &scrapes, (seconds, xacts), split, bound);
    Ok((row, recorded))
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bound = Bound {
        p99_ms: 250.0,
        ok_pct: 99.0,
    };

    #[test]
    fn judge_passes_within_both_bounds_only() {
        assert_eq!(judge(72.0, 99.2, B), Verdict::Pass);
        assert_eq!(judge(250.0, 99.0, B), Verdict::Pass);
        assert_eq!(judge(180.0, 98.9, B), Verdict::Fail);
        assert_eq!(judge(251.0, 99.9, B), Verdict::Fail);
    }

    #[test]
    fn judge_stops_the_ladder_far_past_the_bound() {
        assert_eq!(judge(1_198.0, 53.2, B), Verdict::Far);
        assert_eq!(judge(1_001.0, 99.9, B), Verdict::Far);
        assert_eq!(judge(100.0, 89.9, B), Verdict::Far);
    }

    fn step(name: &str, kind: StepKind, rate: f64, passed: bool) -> StepRow {
        StepRow {
            name: name.into(),
            kind,
            rate,
            seconds: 20,
            sent: 0,
            ok_rps: 0.0,
            ok_pct: 0.0,
            five: 0,
            p50: 0.0,
            p99: 0.0,
            by_status: BTreeMap::new(),
            client_overload: 0,
            origins: BTreeMap::new(),
            rates: ChainRates::default(),
            xacts_s: None,
            cpu: CpuSplit::default(),
            passed,
        }
    }

    #[test]
    fn max_sustainable_is_the_highest_passing_rung_not_the_warm_up() {
        let steps = [
            step("warmup", StepKind::Warmup, 2_000.0, true),
            step("rate-00600", StepKind::Rate, 600.0, true),
            step("rate-00800", StepKind::Rate, 800.0, false),
            step("rate-01000", StepKind::Rate, 1_000.0, true),
            step("rate-01200", StepKind::Rate, 1_200.0, false),
            step("profile", StepKind::Profile, 5_000.0, true),
        ];
        assert_eq!(max_sustainable(steps.iter()).unwrap().rate, 1_000.0);
        assert!(max_sustainable(steps[..1].iter()).is_none());
        let failing = [step("rate-00600", StepKind::Rate, 600.0, false)];
        assert!(max_sustainable(failing.iter()).is_none());
    }

    fn scrape(pairs: &[(&str, f64)]) -> Scrape {
        Some(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect())
    }

    fn target(service: &str, n: usize) -> Target {
        Target {
            service: service.into(),
            replica: format!("{service}-{n}"),
            url: String::new(),
        }
    }

    #[test]
    fn scrapes_sum_increases_by_label_and_skip_a_missing_replica() {
        let targets = [
            target("entity-service", 1),
            target("entity-service", 2),
            target("edge-gateway", 1),
        ];
        let c = "entity_db_query_duration_seconds_count";
        let before = [
            scrape(&[(&format!("{c}{{query=\"candidate\"}}"), 10.0), ("entity_service_spans_total", 5.0)]),
            None,
            scrape(&[("lab_errors_total{hop=\"orchestrator\",origin=\"concurrency_limited\",status=\"503\"}", 1.0)]),
        ];
        let after = [
            scrape(&[(&format!("{c}{{query=\"candidate\"}}"), 30.0), (&format!("{c}{{query=\"exact\"}}"), 4.0), ("entity_service_spans_total", 45.0)]),
            scrape(&[("entity_service_spans_total", 1_000.0)]),
            scrape(&[
                ("lab_errors_total{hop=\"orchestrator\",origin=\"concurrency_limited\",status=\"503\"}", 4.0),
                ("lab_errors_total{hop=\"gateway\",origin=\"auth\",status=\"401\"}", 9.0),
            ]),
        ];
        let s = Scrapes {
            targets: &targets,
            before: &before,
            after: &after,
        };
        let r = s.rates(2.0, 10);
        assert_eq!(r.spans_s, 20.0);
        assert_eq!(r.cand_s, 10.0);
        assert_eq!(r.exact_s, 2.0);
        assert_eq!(r.es_spans_per_doc, Some(4.0));
        assert_eq!(r.hit_pct, None);
        assert_eq!(
            s.origins(),
            BTreeMap::from([("orchestrator/concurrency_limited".to_string(), 3.0)])
        );
    }
}
