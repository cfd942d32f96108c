//! Game-day scenario files (`load/scenarios/<name>.yaml`): a prose header, phases on a timeline
//! with a rate and the flags to set at their start, and expected ranges per client mode.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::action::{Action, Step};
use lab_report::summary::PhaseReport;
use lab_report::verdict::{Check, Verdict};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// One line for listings.
    pub summary: String,
    /// The prose header: what this reproduces from the postmortem, what to watch.
    pub description: String,
    /// Requests per second at the gateway unless a phase says otherwise.
    pub rate: f64,
    /// `size` (traffic in proportion to tenant size) or `uniform`.
    #[serde(default = "default_tenants")]
    pub tenants: String,
    /// Seconds to keep scraping after the load ends, so orphaned work finishing late is counted.
    #[serde(default = "default_settle")]
    pub settle_seconds: u64,
    pub phases: Vec<Phase>,
    /// The phase that stands for the postmortem's peak (10:15, after the scale-up) in the
    /// Performance Comparison's "peak" column. Absent: the phase with the highest 5xx rate, and
    /// the report says so.
    #[serde(default)]
    pub peak: Option<String>,
    /// Actions run after the last phase (e.g. `backfill --reset`), in order, waited for.
    #[serde(default)]
    pub cleanup: Vec<Action>,
    /// Expected ranges, by mode (`legacy`, `resilient`).
    #[serde(default)]
    pub expect: BTreeMap<String, BTreeMap<String, Expectation>>,
}

fn default_tenants() -> String {
    "size".into()
}

fn default_settle() -> u64 {
    // The legacy client's orphaned loops end at most ~3.4 s after their caller gave up (1 s
    // gateway attempt + 200 + 400 + 800 ms sleeps + attempts); 5 s catches them.
    5
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub name: String,
    pub seconds: u64,
    /// Rate for this phase (requests/s); the scenario's rate if absent.
    #[serde(default)]
    pub rate: Option<f64>,
    /// Flags set when the phase starts: flag name → variant name.
    #[serde(default)]
    pub flags: BTreeMap<String, String>,
    /// Actions started when the phase starts (e.g. `backfill --only populate`), in the
    /// background, in order: the load does not wait for them, as production did not wait for the
    /// 03:00 backfill. Written as labctl's words; checked, whole, when the scenario loads. An
    /// action that must fail is written `{ action: <words>, expect: fails }`.
    #[serde(default)]
    pub run: Vec<Step>,
    /// Where the phase's verdict window starts. `phase` (default): at the phase's start — for an
    /// action whose progress is the phenomenon (a rollback's restarts). `after-run`: once every
    /// `run` command of the phase has finished — for an action whose RESULT is judged (ANALYZE:
    /// the seconds it runs are still stale ones).
    #[serde(default)]
    pub window: Window,
    /// When the phase ends. `seconds` (default): its (scaled) seconds after it began, whatever
    /// its `run` is doing — a rollback's restarts may go on into the next phase. `after-run`:
    /// its seconds count from when every `run` command finished, so the next phase starts only
    /// after them — for a step the postmortem's next one came after (the rollback completed at
    /// 10:07, the scale-up at 10:12; the rollout completed at 11:26, ANALYZE at 11:31). The
    /// timeline waits at most [`crate::engine::HOLD_MAX`] for a run.
    #[serde(default)]
    pub ends: Ends,
    /// The postmortem's line this phase replays (the replay's timeline table).
    #[serde(default)]
    pub postmortem: Option<Postmortem>,
    /// What the lab must show in this phase for the postmortem's observation to count as
    /// reproduced, by mode (`legacy`, `resilient`).
    #[serde(default)]
    pub verdict: BTreeMap<String, Vec<VerdictCheck>>,
}

/// Where a phase's verdict window starts ([`Phase::window`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Window {
    #[default]
    Phase,
    AfterRun,
}

/// When a phase ends ([`Phase::ends`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ends {
    #[default]
    Seconds,
    AfterRun,
}

/// One line of the postmortem's timeline.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Postmortem {
    /// Its clock time (`10:07`).
    pub time: String,
    /// What the postmortem says happened, in its words.
    pub observation: String,
}

/// One measurable condition of a verdict: `metric` in this phase, against its value in the
/// phase `vs` (default: the previous one). Every condition given must hold.
///
/// A check is either the step's verdict (the postmortem's observation as a measured bound, or
/// for the fixed client the fix's own expectation) or, with `precondition: true`, a fact the
/// verdict needs to mean anything (the scenario's command ran, the flag took effect, the trigger
/// happened): a precondition that fails or is not measured makes the step *not measured*, never
/// reproduced and never failed.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictCheck {
    pub metric: String,
    #[serde(default)]
    pub vs: Option<String>,
    /// More than 10% above the reference AND at least `by` above it.
    #[serde(default)]
    pub rises: bool,
    /// More than 10% below the reference AND at least `by` below it.
    #[serde(default)]
    pub falls: bool,
    /// The absolute floor of `rises`/`falls`, in the metric's unit (required with them): a
    /// relative change alone makes one 5xx after a 0.0% step "rise".
    #[serde(default)]
    pub by: Option<f64>,
    /// A precondition, not the verdict (see above).
    #[serde(default)]
    pub precondition: bool,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    /// `value / reference` at least this.
    #[serde(default)]
    pub min_ratio: Option<f64>,
    /// `value / reference` at most this.
    #[serde(default)]
    pub max_ratio: Option<f64>,
}

impl VerdictCheck {
    pub fn needs_reference(&self) -> bool {
        self.rises || self.falls || self.min_ratio.is_some() || self.max_ratio.is_some()
    }

    /// Does `value` (against `reference`) satisfy every condition? `None` when a value needed is
    /// missing (the metric was not measured).
    pub fn holds(&self, value: Option<f64>, reference: Option<f64>) -> Option<bool> {
        let v = value?;
        let mut ok = true;
        if let Some(m) = self.min {
            ok &= v >= m;
        }
        if let Some(m) = self.max {
            ok &= v <= m;
        }
        if self.needs_reference() {
            let r = reference?;
            let by = self.by.unwrap_or(0.0);
            if self.rises {
                ok &= v > r * 1.1 + 1e-9 && v - r >= by;
            }
            if self.falls {
                ok &= v < r / 1.1 - 1e-9 && r - v >= by;
            }
            if let Some(x) = self.min_ratio {
                ok &= r > 0.0 && v / r >= x;
            }
            if let Some(x) = self.max_ratio {
                ok &= if r > 0.0 { v / r <= x } else { v <= 0.0 };
            }
        }
        Some(ok)
    }

    /// Refuse a check that names no row of the report, states no condition, or compares with a
    /// phase that is not an earlier one (`i`: its phase's index in `sc`).
    pub fn validate(&self, sc: &Scenario, i: usize, known: &[&str]) -> anyhow::Result<()> {
        if !known.contains(&self.metric.as_str()) {
            bail!(
                "verdict metric {:?} is not a quantity of the report ({})",
                self.metric,
                known.join(", ")
            );
        }
        let any = self.needs_reference() || self.min.is_some() || self.max.is_some();
        if !any {
            bail!("verdict on {} states no condition", self.metric);
        }
        if (self.rises || self.falls) && !self.by.map(|b| b > 0.0).unwrap_or(false) {
            bail!(
                "verdict on {}: rises/falls needs `by`, an absolute floor \
                 > 0 in the metric's unit (a 10% change of nearly nothing is not a \
                 change)",
                self.metric
            );
        }
        if self.by.is_some() && !(self.rises || self.falls) {
            bail!(
                "verdict on {}: `by` only goes with rises or falls",
                self.metric
            );
        }
        if self.needs_reference() {
            match &self.vs {
                Some(v) if !sc.phases[..i].iter().any(|q| &q.name == v) => {
                    bail!("verdict vs {v:?}: no earlier phase of that name")
                }
                None if i == 0 => bail!("the first phase has no previous one to compare with"),
                _ => {}
            }
        }
        Ok(())
    }

    /// The check against phase `i`'s summary (and its reference phase's, where it compares).
    pub fn evaluate(&self, sc: &Scenario, i: usize, phases: &[PhaseReport]) -> Check {
        let value = phases[i].summary.get(&self.metric).copied();
        // A reference only where the check compares with one (an absolute bound shown as
        // "0.0% → 0.0%" read as a comparison it is not).
        let r = sc.reference(i, self).filter(|_| self.needs_reference());
        let reference = r.and_then(|r| phases[r].summary.get(&self.metric).copied());
        let ref_name = r.map_or("—", |r| sc.phases[r].name.as_str());
        Check {
            check: self.describe(ref_name),
            value,
            reference,
            ok: self.holds(value, reference),
            precondition: self.precondition,
        }
    }

    /// The condition in words (`rises`, `≥ 2× steady`, `in [0.5, 10]`).
    pub fn describe(&self, reference_phase: &str) -> String {
        let mut parts = Vec::new();
        let by = self.by.map_or(String::new(), |b| format!(" by ≥ {b}"));
        if self.rises {
            parts.push(format!("rises{by} vs {reference_phase}"));
        }
        if self.falls {
            parts.push(format!("falls{by} vs {reference_phase}"));
        }
        if let Some(x) = self.min_ratio {
            parts.push(format!("≥ {x}× {reference_phase}"));
        }
        if let Some(x) = self.max_ratio {
            parts.push(format!("≤ {x}× {reference_phase}"));
        }
        match (self.min, self.max) {
            (Some(a), Some(b)) => parts.push(format!("in [{a}, {b}]")),
            (Some(a), None) => parts.push(format!("≥ {a}")),
            (None, Some(b)) => parts.push(format!("≤ {b}")),
            _ => {}
        }
        format!("{} {}", self.metric, parts.join(", "))
    }
}

/// `metric: {phase, min, max}`: the summary's `metric` in `phase` must fall in [min, max].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    pub phase: String,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
}

/// Where scenarios live: `LAB_SCENARIO_DIR`, else `load/scenarios` under the current directory.
pub fn scenario_dir() -> PathBuf {
    std::env::var_os("LAB_SCENARIO_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("load/scenarios"))
}

/// A scenario by name (`dependency-dead`) or by path (`./my.yaml`).
pub fn load(name_or_path: &str) -> anyhow::Result<Scenario> {
    let path = if name_or_path.ends_with(".yaml") || name_or_path.contains('/') {
        PathBuf::from(name_or_path)
    } else {
        scenario_dir().join(format!("{name_or_path}.yaml"))
    };
    parse_file(&path)
}

pub fn parse_file(path: &Path) -> anyhow::Result<Scenario> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading scenario {} (run from the repository root, or set LAB_SCENARIO_DIR)",
            path.display()
        )
    })?;
    let s: Scenario =
        serde_norway::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    s.validate(&lab_flags::Definitions::embedded())
        .with_context(|| format!("invalid scenario {}", path.display()))?;
    Ok(s)
}

impl Scenario {
    pub fn validate(&self, defs: &lab_flags::Definitions) -> anyhow::Result<()> {
        if self.phases.is_empty() {
            bail!("a scenario needs at least one phase");
        }
        if !["size", "uniform"].contains(&self.tenants.as_str()) {
            bail!("tenants: {:?} is not size or uniform", self.tenants);
        }
        let total: u64 = self.phases.iter().map(|p| p.seconds).sum();
        if self.rate < 0.0 {
            bail!("rate must be >= 0 (0: chosen by `labctl replay`'s calibration, or --rate)");
        }
        if total == 0 || total > 3_600 {
            bail!("phases must last 1..=3600 s in all (bounded game days), not {total}");
        }
        let known: Vec<&str> = lab_report::quantities::QUANTITIES
            .iter()
            .map(|q| q.id)
            .collect();
        for (i, p) in self.phases.iter().enumerate() {
            if p.seconds == 0 {
                bail!("phase {}: seconds must be at least 1", p.name);
            }
            if self.phases[..i].iter().any(|q| q.name == p.name) {
                bail!("phase {}: two phases share this name", p.name);
            }
            for (mode, checks) in &p.verdict {
                if !["legacy", "resilient"].contains(&mode.as_str()) {
                    bail!("phase {}: verdict for unknown mode {mode:?}", p.name);
                }
                for c in checks {
                    c.validate(self, i, &known)
                        .with_context(|| format!("phase {}", p.name))?;
                }
            }
            for (flag, variant) in &p.flags {
                defs.check(flag, variant)
                    .with_context(|| format!("phase {}", p.name))?;
                if flag == "client.mode" {
                    bail!(
                        "phase {}: client.mode is chosen with --mode, not by the scenario",
                        p.name
                    );
                }
            }
        }
        if let Some(peak) = &self.peak {
            if !self.phases.iter().any(|p| &p.name == peak) {
                bail!("peak: no phase named {peak:?}");
            }
        }
        for p in &self.phases {
            if p.window == Window::AfterRun && p.run.is_empty() {
                bail!(
                    "phase {}: window after-run needs a `run` command to wait for",
                    p.name
                );
            }
            if p.ends == Ends::AfterRun && p.run.is_empty() {
                bail!(
                    "phase {}: ends after-run needs a `run` command to wait for",
                    p.name
                );
            }
        }
        for (mode, checks) in &self.expect {
            if !["legacy", "resilient"].contains(&mode.as_str()) {
                bail!("expect: unknown mode {mode:?}");
            }
            for (metric, e) in checks {
                if !self.phases.iter().any(|p| p.name == e.phase) {
                    bail!("expect.{mode}.{metric}: no phase named {:?}", e.phase);
                }
                if !known.contains(&metric.as_str()) {
                    bail!(
                        "expect.{mode}.{metric}: not a quantity of the report ({})",
                        known.join(", ")
                    );
                }
            }
        }
        Ok(())
    }

    /// The quantities this scenario's verdicts and expectations name that are not rows of
    /// every table (a fault's flag-store and database facts): the run computes them too.
    pub fn judged(&self) -> Vec<&'static str> {
        let named: Vec<&str> = self
            .phases
            .iter()
            .flat_map(|p| p.verdict.values().flatten().map(|c| c.metric.as_str()))
            .chain(
                self.expect
                    .values()
                    .flat_map(|e| e.keys().map(String::as_str)),
            )
            .collect();
        lab_report::quantities::QUANTITIES
            .iter()
            .filter(|q| !q.row && named.contains(&q.id))
            .map(|q| q.id)
            .collect()
    }

    /// Does a verdict read the database's facts about the run (the `database` pseudo-target)?
    pub fn reads_database(&self) -> bool {
        self.judged().iter().any(|id| {
            lab_report::quantities::find(id)
                .is_some_and(|q| q.expr.services().contains(&lab_report::series::DATABASE))
        })
    }

    /// The phase the report's "peak" column shows: [`Scenario::peak`], else the phase with the
    /// highest `error_5xx_pct` in `summaries` (the first of tied ones); and whether it was named.
    pub fn peak_phase(&self, summaries: &[&lab_report::summary::PhaseSummary]) -> (usize, bool) {
        if let Some(i) = self
            .peak
            .as_ref()
            .and_then(|n| self.phases.iter().position(|p| &p.name == n))
        {
            return (i, true);
        }
        let e = |i: usize| {
            summaries
                .get(i)
                .and_then(|s| s.get("error_5xx_pct").copied())
                .unwrap_or(0.0)
        };
        let mut best = 0;
        for i in 1..summaries.len() {
            if e(i) > e(best) {
                best = i;
            }
        }
        (best, false)
    }

    /// Every phase's verdict for `mode` (`legacy`, `resilient`), against the run's phases.
    pub fn verdicts(&self, mode: &str, phases: &[PhaseReport]) -> Vec<Verdict> {
        self.phases
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let checks = p.verdict.get(mode)?;
                let checks = checks.iter().map(|c| c.evaluate(self, i, phases));
                let v = Verdict::of(&p.name, checks.collect());
                Some(match &p.postmortem {
                    Some(pm) => v.about(&format!("{} {}", pm.time, pm.observation)),
                    None => v,
                })
            })
            .collect()
    }

    /// The `expect:` ranges for `mode`, as verdicts of their phases (one per range: each is a
    /// claim of its own).
    pub fn expectations(&self, mode: &str, phases: &[PhaseReport]) -> Vec<Verdict> {
        let Some(ranges) = self.expect.get(mode) else {
            return Vec::new();
        };
        ranges
            .iter()
            .filter_map(|(metric, e)| {
                let i = self.phases.iter().position(|p| p.name == e.phase)?;
                let check = VerdictCheck {
                    metric: metric.clone(),
                    min: e.min,
                    max: e.max,
                    ..VerdictCheck::default()
                };
                Some(Verdict::of(&e.phase, vec![check.evaluate(self, i, phases)]))
            })
            .collect()
    }

    /// The phase a verdict check of phase `i` compares with.
    pub fn reference(&self, i: usize, check: &VerdictCheck) -> Option<usize> {
        match &check.vs {
            Some(name) => self.phases.iter().position(|p| &p.name == name),
            None => i.checked_sub(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scenario file the lab ships: load/scenarios and its faults/.
    fn shipped() -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../load/scenarios");
        let mut out = Vec::new();
        for d in [dir.clone(), dir.join("faults")] {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "yaml") {
                    out.push(path);
                }
            }
        }
        out
    }

    #[test]
    fn every_shipped_scenario_parses_and_validates() {
        let mut n = 0;
        for path in shipped() {
            parse_file(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            n += 1;
        }
        assert!(
            n >= 5,
            "dependency-dead, black-hole, slow-dependency and the two faults at least"
        );
    }

    fn check(yaml: &str) -> VerdictCheck {
        serde_norway::from_str(yaml).unwrap()
    }

    #[test]
    fn verdict_checks_hold_only_when_every_condition_does() {
        let rises = check("{metric: error_5xx_pct, rises: true, by: 1}");
        assert_eq!(rises.holds(Some(11.0), Some(2.1)), Some(true));
        assert_eq!(
            rises.holds(Some(2.2), Some(2.1)),
            Some(false),
            "within 10% is not a rise"
        );
        assert_eq!(rises.holds(Some(0.0), Some(0.0)), Some(false));
        assert_eq!(
            rises.holds(None, Some(2.1)),
            None,
            "not measured: no verdict"
        );
        assert_eq!(rises.holds(Some(3.0), None), None);
        // The floor: one 5xx after a 0.0% step is not a rise (issue 24), however relative.
        assert_eq!(
            rises.holds(Some(0.05), Some(0.0)),
            Some(false),
            "+0.05 points is below the 1-point floor"
        );
        assert_eq!(rises.holds(Some(1.5), Some(0.4)), Some(true));
        assert_eq!(
            rises.describe("plan-flip"),
            "error_5xx_pct rises by ≥ 1 vs plan-flip"
        );
        let falls = check("{metric: entity_p99_ms, falls: true, by: 50}");
        assert_eq!(falls.holds(Some(130.0), Some(640.0)), Some(true));
        assert_eq!(falls.holds(Some(600.0), Some(640.0)), Some(false));
        assert_eq!(
            falls.holds(Some(737.0), Some(870.0)),
            Some(true),
            "15% and 133 ms: a fall by this rule — which is why analyze is judged against steady now"
        );
        assert_eq!(
            falls.holds(Some(20.0), Some(60.0)),
            Some(false),
            "below the floor"
        );
        let band = check("{metric: error_5xx_pct, min: 0.5, max: 10}");
        assert_eq!(
            band.holds(Some(2.1), None),
            Some(true),
            "no reference needed"
        );
        assert_eq!(band.holds(Some(34.0), None), Some(false));
        assert_eq!(band.holds(Some(0.1), None), Some(false));
        let ratio = check("{metric: entity_p99_ms, min_ratio: 2, vs: steady}");
        assert_eq!(ratio.holds(Some(640.0), Some(120.0)), Some(true));
        assert_eq!(ratio.holds(Some(200.0), Some(120.0)), Some(false));
        assert_eq!(ratio.holds(Some(200.0), Some(0.0)), Some(false));
        assert_eq!(ratio.describe("steady"), "entity_p99_ms ≥ 2× steady");
    }

    #[test]
    fn a_verdict_on_an_unknown_metric_or_a_later_phase_is_refused() {
        let defs = lab_flags::Definitions::embedded();
        let with = |verdict: &str| {
            let y = format!(
                "name: x\nsummary: s\ndescription: d\nrate: 10\nphases:\n  - name: a\n    seconds: 5\n  - name: b\n    seconds: 5\n    verdict: {{legacy: [{verdict}]}}\n"
            );
            serde_norway::from_str::<Scenario>(&y)
                .unwrap()
                .validate(&defs)
        };
        assert!(with("{metric: error_5xx_pct, rises: true, by: 1}").is_ok());
        assert!(with("{metric: error_5xx_pct, rises: true, by: 1, vs: a}").is_ok());
        assert!(with("{metric: no_such_row, rises: true, by: 1}").is_err());
        assert!(with("{metric: error_5xx_pct, rises: true, by: 1, vs: b}").is_err());
        assert!(with("{metric: error_5xx_pct, rises: true, by: 1, vs: zzz}").is_err());
        assert!(
            with("{metric: error_5xx_pct, rises: true}").is_err(),
            "rises without an absolute floor"
        );
        assert!(with("{metric: error_5xx_pct, rises: true, by: 0}").is_err());
        assert!(
            with("{metric: error_5xx_pct, max: 1, by: 1}").is_err(),
            "by without rises/falls"
        );
        assert!(with("{metric: error_5xx_pct}").is_err(), "no condition");
        // The message names the phase and the check.
        let e = format!("{:#}", with("{metric: no_such_row, max: 1}").unwrap_err());
        assert!(
            e.starts_with("phase b: verdict metric \"no_such_row\""),
            "{e}"
        );
        // An expect: range is held to the same rows.
        let expect = |metric: &str| {
            let y = format!(
                "name: x\nsummary: s\ndescription: d\nrate: 10\nphases:\n  - {{name: a, seconds: 5}}\nexpect:\n  legacy:\n    {metric}: {{phase: a, min: 2}}\n"
            );
            serde_norway::from_str::<Scenario>(&y)
                .unwrap()
                .validate(&defs)
        };
        assert!(expect("amplification_ratio").is_ok());
        assert!(
            expect("amplificaton_ratio").is_err(),
            "a typo would never be measured"
        );
    }

    #[test]
    fn the_incident_scenario_has_a_postmortem_line_and_a_verdict_for_every_step_in_both_modes() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../load/scenarios");
        let sc = parse_file(&dir.join("incident.yaml")).unwrap();
        assert_eq!(sc.rate, 0.0, "the replay's rate is chosen by calibration");
        for p in &sc.phases {
            assert!(p.postmortem.is_some(), "{}: no postmortem line", p.name);
            for mode in ["legacy", "resilient"] {
                assert!(
                    p.verdict.get(mode).is_some_and(|v| !v.is_empty()),
                    "{}: no {mode} verdict",
                    p.name
                );
            }
        }
    }

    /// What a metric can be: percentages are 0..=100, the plan gauge 0 or 1, the rest >= 0.
    fn feasible(metric: &str) -> Vec<f64> {
        const GRID: &[f64] = &[
            0.0, 0.001, 0.05, 0.5, 1.0, 1.01, 1.2, 1.5, 2.0, 5.0, 10.0, 34.0, 50.0, 66.7, 70.0,
            90.0, 100.0, 500.0, 1e4, 1e6,
        ];
        match metric {
            m if m.starts_with("hot_plan_index_scan")
                || m.ends_with("_off_last")
                || m == "db_stats_up_min" =>
            {
                vec![0.0, 1.0]
            }
            m if m.ends_with("_pct") => GRID.iter().copied().filter(|v| *v <= 100.0).collect(),
            _ => GRID.to_vec(),
        }
    }

    /// Can `c` fail, whatever its reference turned out to be? For every feasible reference there
    /// must be a feasible value it refuses. (The legacy canary's old `≤ 1.5× kill-switch-gateway`
    /// held for every value once the reference read 66.7% or more.)
    fn can_fail(c: &VerdictCheck) -> bool {
        let values = feasible(&c.metric);
        let bounded = values.last().is_some_and(|top| *top <= 100.0);
        let references: Vec<Option<f64>> = if c.needs_reference() {
            values.iter().map(|r| Some(*r)).collect()
        } else {
            vec![None]
        };
        references.iter().all(|r| {
            // An unbounded quantity can always be ten times its reference.
            let beyond = r.filter(|_| !bounded).map(|r| r * 10.0 + 1.0);
            values
                .iter()
                .copied()
                .chain(beyond)
                .any(|v| c.holds(Some(v), *r) == Some(false))
        })
    }

    /// Quantities that only echo the scenario's own command (a rollout ran, the replicas exist):
    /// a floor on them is a precondition, never the verdict. A ceiling is a claim (no replica
    /// crashed: `crash_restarts ≤ 0` can fail).
    const ECHOES: &[&str] = &[
        "rollouts",
        "orchestrator_replicas_max",
        "crash_restarts",
        // The scenario's own flag write, read back.
        "entity_retries_off_last",
        "gateway_retries_off_last",
    ];
    /// (mode, metric, value): a quantity the mode fixes by construction. The fixed gateway makes
    /// exactly one attempt per request (retries live at one layer, not this one).
    const BY_CONSTRUCTION: &[(&str, &str, f64)] =
        &[("resilient", "gateway_attempts_per_first", 1.0)];

    fn verdict_problems(sc: &Scenario) -> Vec<String> {
        let mut bad = Vec::new();
        for p in &sc.phases {
            for (mode, checks) in &p.verdict {
                let verdict: Vec<_> = checks.iter().filter(|c| !c.precondition).collect();
                if verdict.is_empty() {
                    bad.push(format!("{}/{mode}: only preconditions, no verdict", p.name));
                }
                for c in verdict {
                    let what = format!("{}/{mode}: {}", p.name, c.describe("its reference"));
                    if !can_fail(c) {
                        bad.push(format!("{what}: cannot fail for some reference"));
                    }
                    let floor = c.min.is_some() || c.rises || c.min_ratio.is_some();
                    if ECHOES.contains(&c.metric.as_str()) && floor {
                        bad.push(format!("{what}: echoes the scenario's command"));
                    }
                    for (m, metric, v) in BY_CONSTRUCTION {
                        if m == mode && *metric == c.metric {
                            bad.push(format!("{what}: {metric} is {v} by construction in {m}"));
                        }
                    }
                }
            }
        }
        bad
    }

    #[test]
    fn every_verdict_of_the_shipped_scenarios_can_fail() {
        for path in shipped() {
            let sc = parse_file(&path).unwrap();
            let bad = verdict_problems(&sc);
            assert!(bad.is_empty(), "{}:\n{}", path.display(), bad.join("\n"));
        }
    }

    #[test]
    fn the_verdict_audit_finds_what_the_old_incident_checks_got_wrong() {
        // The checks of incident.yaml as they were at 32f6e66, each a way a verdict could not
        // fail (issue 24). The audit must name every one.
        let old = "name: x\nsummary: s\ndescription: d\nrate: 10\nphases:\n\
          - {name: steady, seconds: 5}\n\
          - {name: rollback, seconds: 5, verdict: {legacy: [{metric: rollouts, min: 1}]}}\n\
          - {name: kill-switch-gateway, seconds: 5, verdict: {resilient: [{metric: gateway_attempts_per_first, max: 1.01}]}}\n\
          - {name: canary, seconds: 5, verdict: {legacy: [{metric: error_5xx_pct, max_ratio: 1.5, vs: kill-switch-gateway}]}}\n";
        let sc: Scenario = serde_norway::from_str(old).unwrap();
        let bad = verdict_problems(&sc);
        let named = |what: &str| bad.iter().any(|b| b.starts_with(what));
        assert!(named("rollback/legacy"), "{bad:?}");
        assert!(named("kill-switch-gateway/resilient"), "{bad:?}");
        assert!(named("canary/legacy"), "{bad:?}");
        assert_eq!(bad.len(), 3, "{bad:?}");
        // And a sound check passes it.
        let sound = check("{metric: error_5xx_pct, max: 10}");
        assert!(can_fail(&sound));
        let floor = check("{metric: error_5xx_pct, rises: true, by: 1}");
        assert!(can_fail(&floor));
    }

    #[test]
    fn the_peak_is_the_named_phase_or_the_first_of_the_worst() {
        let y = "name: x\nsummary: s\ndescription: d\nrate: 10\nphases:\n\
          - {name: a, seconds: 5}\n\
          - {name: b, seconds: 5}\n\
          - {name: c, seconds: 5}\n";
        let mut sc: Scenario = serde_norway::from_str(y).unwrap();
        let s = |e: f64| -> lab_report::summary::PhaseSummary {
            [("error_5xx_pct".to_string(), e)].into_iter().collect()
        };
        let (a, b, c) = (s(1.0), s(100.0), s(100.0));
        assert_eq!(sc.peak_phase(&[&a, &b, &c]), (1, false), "ties: the first");
        sc.peak = Some("a".into());
        assert_eq!(sc.peak_phase(&[&a, &b, &c]), (0, true));
    }

    #[test]
    fn a_scenario_setting_client_mode_or_an_unknown_variant_is_refused() {
        let defs = lab_flags::Definitions::embedded();
        let base = |flags: &str| {
            format!(
                "name: x\nsummary: s\ndescription: d\nrate: 10\nphases:\n  - name: a\n    seconds: 5\n    flags: {flags}\n"
            )
        };
        let ok: Scenario = serde_norway::from_str(&base("{}")).unwrap();
        assert!(ok.validate(&defs).is_ok());
        let mode: Scenario = serde_norway::from_str(&base("{client.mode: legacy}")).unwrap();
        assert!(mode.validate(&defs).is_err());
        let bad: Scenario =
            serde_norway::from_str(&base("{fault.entity.error_fraction: \"0.7\"}")).unwrap();
        assert!(bad.validate(&defs).is_err());
    }
}
