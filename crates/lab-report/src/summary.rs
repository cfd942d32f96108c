//! The game day's summary: one column per phase, rows shaped like the postmortem's Performance
//! Comparison table. Every number is computed from what was scraped or measured in this run.

use std::collections::BTreeMap;

use crate::doc::{Block, Cell, Doc, Table};
use crate::quantities;
use crate::quantity::{Frame, Window};
use crate::series::Series;
pub use crate::verdict::Check;

pub type PhaseSummary = BTreeMap<String, f64>;

/// One phase of a run as its `summary.json` records it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PhaseReport {
    pub name: String,
    /// As run (scaled).
    pub seconds: u64,
    /// Seconds since the start of the run when the phase began.
    pub start: f64,
    /// With `window: after-run`: when the phase's commands had finished (seconds since the
    /// start of the run), where its summary starts; `None`: the whole phase.
    pub judged_from: Option<f64>,
    pub summary: PhaseSummary,
    /// The gateway's 5xx in this phase by the error-table row that decided them.
    pub errors_5xx_by_origin: BTreeMap<String, f64>,
}

impl PhaseReport {
    /// The window its summary was computed over.
    pub fn window(&self, ticks: &[crate::series::Tick], index: usize) -> Window {
        match self.judged_from {
            None => Window::phase(ticks, index, self.seconds as f64, self.start),
            Some(from) => Window::phase_from(
                ticks,
                index,
                from,
                (self.start + self.seconds as f64 - from).max(0.0),
            ),
        }
    }
}

/// Every phase's summary over its window; amplification against the first phase's. `judged`:
/// quantities that are not rows of every table but that this run's verdicts name (a fault
/// scenario's flag-store and database facts): computed too.
pub fn summarize_phases(
    series: &Series,
    load: &[lab_load::SecondSample],
    fine: Option<&crate::quantity::Fine>,
    phases: &mut [PhaseReport],
    judged: &[&str],
) {
    let windows: Vec<Window> = phases
        .iter()
        .enumerate()
        .map(|(i, p)| p.window(series.ticks, i))
        .collect();
    let frame = Frame {
        series: Series {
            targets: series.targets,
            ticks: series.ticks,
        },
        load,
        first: windows.first().copied(),
        fine,
    };
    for (p, w) in phases.iter_mut().zip(&windows) {
        p.summary = summarize(&frame, w, judged);
    }
}

/// Every row of the table over `w`, and the `judged` quantities (one not measurable there is
/// left out).
pub fn summarize(frame: &Frame, w: &Window, judged: &[&str]) -> PhaseSummary {
    quantities::QUANTITIES
        .iter()
        .filter(|q| q.row || judged.contains(&q.id))
        .filter_map(|q| Some((q.id.to_string(), frame.eval(&q.expr, w)?)))
        .collect()
}

/// The per-phase table (every quantity measured in some phase), under a heading `title`.
pub fn phases_doc(
    doc: &mut Doc,
    title: &str,
    phases: &[(String, u64)],
    summaries: &[PhaseSummary],
) {
    let mut head = vec!["Metric".to_string()];
    head.extend(
        phases
            .iter()
            .map(|(name, secs)| format!(">{name} ({secs} s)")),
    );
    let mut t = Table::new(&head);
    for q in quantities::in_tables() {
        if summaries.iter().all(|s| !s.contains_key(q.id)) {
            continue;
        }
        let mut row = vec![Cell::text(q.label)];
        row.extend(
            summaries
                .iter()
                .map(|s| Cell::text(q.unit.fmt(s.get(q.id).copied()))),
        );
        t.row(row);
    }
    doc.h3(title).table(t);
}

/// The 5xx the gateway answered in `phase`, by the error-table row that decided them
/// (`hop/origin` → count), from `lab_errors_total` at the gateway: where the errors came from.
pub fn origins(s: &Series, phase: usize) -> BTreeMap<String, f64> {
    s.increase_by(phase, "edge-gateway", "lab_errors_total", origin_of_5xx)
}

/// The same over the whole run (baseline scrape to the last one after the settle time).
pub fn origins_run(s: &Series) -> BTreeMap<String, f64> {
    s.increase_by_run("edge-gateway", "lab_errors_total", origin_of_5xx)
}

fn origin_of_5xx(labels: &str) -> Option<String> {
    let status = crate::series::label(labels, "status")?;
    if !status.starts_with('5') {
        return None;
    }
    Some(format!(
        "{}/{}",
        crate::series::label(labels, "hop")?,
        crate::series::label(labels, "origin")?
    ))
}

/// The run checks itself: what the load generator sent was answered (by status) and seen by
/// the gateway, and every 5xx it received is named by exactly one origin at the gateway. A report
/// whose counts do not add up says so, loudly, rather than publishing numbers nobody can trust.
///
/// A request the client gave up on (its 10 s timeout; a reset connection) is a failed request,
/// not a broken count, when the generator kept its schedule: then its lag cannot explain the
/// silence (see [`lab_load::LoadReport::max_dispatch_lag_ms`]). The gateway may still have
/// answered it, later, and counted it, so its counts are bounded by the load's, not equal to
/// them: answered ≤ gateway requests ≤ sent, and for the 5xx and the other answers apart, the
/// load's ≤ the gateway's ≤ the load's + unanswered. With every request answered the bounds
/// close to the equalities they were.
pub fn consistency(s: &Series, load: &lab_load::LoadReport) -> Vec<Check> {
    let answered = load.answered() as f64;
    let unanswered = load.unanswered() as f64;
    let sent = load.sent as f64;
    let by_status: u64 = load.by_status.values().sum();
    let load_5xx: u64 = load
        .by_status
        .iter()
        .filter(|(k, _)| k.starts_with('5') && k.parse::<u16>().is_ok())
        .map(|(_, v)| v)
        .sum();
    let load_5xx = load_5xx as f64;
    let gateway_requests = s.increase_run("edge-gateway", "gateway_requests_total", |_| true);
    let gateway_5xx = s.increase_run("edge-gateway", "gateway_requests_total", |l| {
        crate::series::label(l, "status").is_some_and(|st| st.starts_with('5'))
    });
    let origins: f64 = origins_run(s).values().sum();
    let mut checks = vec![Check::counts_agree(
        "load: sent = answered by status (incl. client timeouts)",
        sent,
        by_status as f64,
    )];
    // Only a request the client gave up on needs the schedule: every other count is exact
    // whatever the generator's lag (which the latencies, timed from the intended send, include).
    if unanswered > 0.0 {
        checks.push(Check::at_most(
            "load: the requests it gave up on are the lab's: the generator kept its schedule \
             (dispatch lag ≤ a tenth of its timeout, ms)",
            load.max_dispatch_lag_ms(),
            load.dispatch_lag_ms.max,
        ));
    }
    checks.extend([
        Check::at_least(
            "gateway requests ≥ load's answers (every answer counted)",
            answered,
            gateway_requests,
        ),
        Check::at_most(
            "gateway requests ≤ load's sent (no other traffic)",
            sent,
            gateway_requests,
        ),
        Check::at_least("gateway 5xx ≥ load's 5xx", load_5xx, gateway_5xx),
        Check::at_least(
            "gateway's other answers ≥ load's other answers (not 5xx)",
            answered - load_5xx,
            gateway_requests - gateway_5xx,
        ),
        Check::at_most(
            "gateway's other answers ≤ load's other answers + unanswered",
            answered - load_5xx + unanswered,
            gateway_requests - gateway_5xx,
        ),
        Check::at_most(
            "gateway 5xx ≤ load's 5xx + unanswered",
            load_5xx + unanswered,
            gateway_5xx,
        ),
        Check::counts_agree(
            "gateway 5xx = sum of origins at the gateway",
            gateway_5xx,
            origins,
        ),
    ]);
    checks
}

/// The 5xx by origin, one column per phase, and the run's consistency checks.
pub fn origins_doc(
    doc: &mut Doc,
    phases: &[(String, u64)],
    per_phase: &[BTreeMap<String, f64>],
    checks: &[Check],
) {
    let mut keys: Vec<&String> = per_phase.iter().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    doc.push(Block::Heading(
        4,
        "Where the 5xx came from (gateway, by error-table row)".into(),
    ));
    if keys.is_empty() {
        doc.para("No 5xx in any phase.");
    } else {
        let mut head = vec!["hop/origin".to_string()];
        head.extend(phases.iter().map(|(name, _)| format!(">{name}")));
        let mut t = Table::new(&head);
        for k in keys {
            let mut row = vec![Cell::text(k.as_str())];
            row.extend(
                per_phase
                    .iter()
                    .map(|m| Cell::text(m.get(k).map_or("—".into(), |v| format!("{v:.0}")))),
            );
            t.row(row);
        }
        doc.table(t);
    }
    doc.para("Consistency of this run's counts (whole run, baseline to settle):");
    doc.list(
        checks
            .iter()
            .map(|c| {
                format!(
                    "{} {}: {} {:.0}, got {:.0}",
                    if c.holds() { "OK  " } else { "FAIL" },
                    c.check,
                    c.reference_word(),
                    c.reference.unwrap_or(f64::NAN),
                    c.value.unwrap_or(f64::NAN)
                )
            })
            .collect(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::{Target, Tick};

    #[test]
    fn a_quantity_beyond_the_rows_is_computed_and_shown_only_where_a_verdict_judges_it() {
        let targets = [Target {
            service: "edge-gateway".into(),
            replica: "edge-gateway-1".into(),
            url: String::new(),
        }];
        let fail_open = |v: f64| {
            Some(
                [(
                    r#"gateway_ratelimit_decisions_total{decision="local_allowed"}"#.to_string(),
                    v,
                )]
                .into(),
            )
        };
        let ticks = [
            Tick {
                t: 0.0,
                phase: 0,
                scrapes: vec![fail_open(0.0)],
            },
            Tick {
                t: 1.0,
                phase: 0,
                scrapes: vec![fail_open(40.0)],
            },
        ];
        let frame = Frame {
            series: Series {
                targets: &targets,
                ticks: &ticks,
            },
            load: &[],
            first: None,
            fine: None,
        };
        let w = Window::phase(&ticks, 0, 1.0, 0.0);
        let plain = summarize(&frame, &w, &[]);
        assert!(!plain.contains_key("ratelimit_without_redis"));
        let judged = summarize(&frame, &w, &["ratelimit_without_redis"]);
        assert_eq!(judged.get("ratelimit_without_redis"), Some(&40.0));
        let label = crate::quantities::find("ratelimit_without_redis")
            .unwrap()
            .label;
        let phases = [("outage".to_string(), 1)];
        let md = |s: PhaseSummary| {
            let mut d = Doc::new("t");
            phases_doc(&mut d, "t", &phases, &[s]);
            d.markdown()
        };
        assert!(!md(plain).contains(label));
        assert!(md(judged).contains(label));
    }

    /// The load as a report: `by_status` counts, `lag_max` ms of dispatch lag, 10 s timeout.
    fn load_of(by_status: &[(&str, u64)], lag_max: f64) -> lab_load::LoadReport {
        let by_status: BTreeMap<String, u64> =
            by_status.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        lab_load::LoadReport {
            target_rate: 100.0,
            duration_s: 1,
            tenants: lab_load::TenantMix::Uniform,
            sent: by_status.values().sum(),
            client_overload: 0,
            by_status,
            achieved_rps: 100.0,
            ok_rps: 90.0,
            ok_latency_ms: Default::default(),
            all_latency_ms: Default::default(),
            first_by_status: BTreeMap::new(),
            first_good: 0,
            per_second: Vec::new(),
            dispatch_lag_ms: lag(lag_max),
            timeout_ms: 10_000,
        }
    }

    fn lag(max: f64) -> lab_load::Percentiles {
        lab_load::Percentiles {
            max,
            ..Default::default()
        }
    }

    /// The gateway's counters at the end of a run (from 0): requests by status, 5xx by origin.
    fn gateway(ok: f64, err503: f64, origins: f64) -> Vec<Tick> {
        let end: std::collections::HashMap<String, f64> = [
            (r#"gateway_requests_total{status="200"}"#.to_string(), ok),
            (
                r#"gateway_requests_total{status="503"}"#.to_string(),
                err503,
            ),
            (
                r#"lab_errors_total{hop="gateway",origin="upstream_timeout",status="503"}"#
                    .to_string(),
                origins,
            ),
        ]
        .into();
        let start = end.keys().map(|k| (k.clone(), 0.0)).collect();
        vec![
            Tick {
                t: 0.0,
                phase: 0,
                scrapes: vec![Some(start)],
            },
            Tick {
                t: 1.0,
                phase: 0,
                scrapes: vec![Some(end)],
            },
        ]
    }

    fn failed(load: &lab_load::LoadReport, ticks: &[Tick]) -> Vec<String> {
        let targets = [Target {
            service: "edge-gateway".into(),
            replica: "edge-gateway-1".into(),
            url: String::new(),
        }];
        let s = Series {
            targets: &targets,
            ticks,
        };
        consistency(&s, load)
            .into_iter()
            .filter(|c| !c.holds())
            .map(|c| c.check)
            .collect()
    }

    /// With every request answered the checks are the equalities they always were; a request
    /// the client timed out, which the gateway answered later (a 200 or a 503), loosens them to
    /// bounds that still catch other traffic, lost counts and a generator that fell behind.
    #[test]
    fn consistency_bounds_the_gateway_by_the_load_when_requests_go_unanswered() {
        let all = load_of(&[("200", 90), ("503", 10)], 5.0);
        assert!(failed(&all, &gateway(90.0, 10.0, 10.0)).is_empty());
        let one_more = failed(&all, &gateway(91.0, 10.0, 10.0));
        assert_eq!(one_more.len(), 2, "{one_more:?}");
        assert!(one_more[0].contains("no other traffic"), "{one_more:?}");
        assert!(one_more[1].contains("+ unanswered"), "{one_more:?}");
        let one_less = failed(&all, &gateway(89.0, 10.0, 10.0));
        assert!(one_less[0].contains("every answer counted"), "{one_less:?}");

        // 5 timed out: the gateway answered 3 of them 200 and 2 of them 503, later.
        let timeouts = load_of(&[("200", 87), ("503", 8), ("client_timeout", 5)], 40.0);
        assert!(failed(&timeouts, &gateway(90.0, 10.0, 10.0)).is_empty());
        // More 5xx than the load's and its unanswered can hold; origins that miss one.
        let f = failed(&timeouts, &gateway(86.0, 14.0, 14.0));
        assert!(f.iter().any(|c| c.contains("unanswered")), "{f:?}");
        let f = failed(&timeouts, &gateway(90.0, 10.0, 9.0));
        assert_eq!(f, vec!["gateway 5xx = sum of origins at the gateway"]);
        // Two 200s the load got, missing at the gateway, hidden by 5xx it counted instead.
        let f = failed(&timeouts, &gateway(85.0, 13.0, 13.0));
        assert_eq!(
            f,
            vec!["gateway's other answers ≥ load's other answers (not 5xx)"]
        );

        // The same counts from a generator 1.5 s behind its schedule: not a valid run.
        let behind = load_of(&[("200", 87), ("503", 8), ("client_timeout", 5)], 1_500.0);
        let f = failed(&behind, &gateway(90.0, 10.0, 10.0));
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("kept its schedule"), "{f:?}");
        // Behind, but every request answered: the counts are exact, the run stands.
        let late = load_of(&[("200", 90), ("503", 10)], 1_500.0);
        assert!(failed(&late, &gateway(90.0, 10.0, 10.0)).is_empty());
    }
}
