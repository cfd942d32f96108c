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
pub fn consistency(s: &Series, load: &lab_load::LoadReport) -> Vec<Check> {
    let answered = load.answered();
    let by_status: u64 = load.by_status.values().sum();
    let load_5xx: u64 = load
        .by_status
        .iter()
        .filter(|(k, _)| k.starts_with('5') && k.parse::<u16>().is_ok())
        .map(|(_, v)| v)
        .sum();
    let gateway_requests = s.increase_run("edge-gateway", "gateway_requests_total", |_| true);
    let gateway_5xx = s.increase_run("edge-gateway", "gateway_requests_total", |l| {
        crate::series::label(l, "status").is_some_and(|st| st.starts_with('5'))
    });
    let origins: f64 = origins_run(s).values().sum();
    let check = Check::counts_agree;
    vec![
        check(
            "load: sent = answered by status (incl. client timeouts)",
            load.sent as f64,
            by_status as f64,
        ),
        check(
            "load: every request got an HTTP answer (no client timeout or error)",
            load.sent as f64,
            answered as f64,
        ),
        check(
            "gateway requests = load's answers",
            answered as f64,
            gateway_requests,
        ),
        check("gateway 5xx = load's 5xx", load_5xx as f64, gateway_5xx),
        check(
            "load's 5xx = sum of origins at the gateway",
            load_5xx as f64,
            origins,
        ),
    ]
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
                    "{} {}: expected {:.0}, got {:.0}",
                    if c.holds() { "OK  " } else { "FAIL" },
                    c.check,
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
}
