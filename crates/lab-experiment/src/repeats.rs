//! `labctl replay --repeat N`: the main job's verdict as "k of N".
//!
//! Each repetition is a whole replay (a calibration, then every mode on a fresh lab) in
//! `<out>/rep-<i>/`, with its own report. This module reads them together: each step's outcome
//! per repetition, a step counted as reproduced (the fix as held) only when it was in EVERY
//! repetition, the calibration's spread (how far the healthy and stale capacity, and so the
//! replay's rate, moved between repetitions, and each probe's slowest and fastest second), and
//! for every step that did not hold in all of them, the measured reason, repetition by
//! repetition. A repetition that failed, or whose counts do not add up, gives "not measured"
//! for its steps: its numbers cannot be trusted either way.

use serde::{Deserialize, Serialize};

use crate::replay::{Calibration, ReplayArgs, Replayed};
use crate::scenario::Scenario;
use crate::Mode;
use lab_report::doc::{Cell, Doc, Table, Tone};
use lab_report::verdict::{Check, Outcome, Verdict};

/// The replay's rate may move this much between calibrations ((max − min) / mean): more, and a
/// repetition replays a different operating point, not the same morning again.
pub const RATE_STABILITY_MAX: f64 = 0.10;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepMode {
    pub mode: Mode,
    pub steps: Vec<Verdict>,
    pub fix_quality: Option<f64>,
    /// The run's own counts added up (report::consistency): otherwise its steps are not measured.
    pub consistent: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Repetition {
    /// Where its own report is (`rep-<i>`).
    pub dir: String,
    /// Why it failed, when it did.
    pub error: Option<String>,
    pub calibration: Option<Calibration>,
    pub modes: Vec<RepMode>,
}

/// One step of one mode across the repetitions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepTally {
    pub phase: String,
    pub mode: Mode,
    /// Per repetition, in order.
    pub outcomes: Vec<Outcome>,
    pub reproduced: usize,
    pub not_reproduced: usize,
    pub not_measured: usize,
    /// Reproduced (legacy) / the fix held (resilient) in every repetition.
    pub every: bool,
}

/// min, max, mean and `(max − min) / mean` of one quantity over the repetitions.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub relative: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        Some(Spread {
            min,
            max,
            mean,
            relative: if mean > 0.0 { (max - min) / mean } else { 0.0 },
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CalibrationSpread {
    pub calibrations: usize,
    pub healthy_capacity_rps: Spread,
    pub stale_capacity_rps: Spread,
    pub rate: Spread,
    /// The rate moved less than [`RATE_STABILITY_MAX`] over at least two calibrations (one
    /// calibration cannot show it: false).
    pub rate_stable: bool,
}

/// `repeats.json`: everything `replay.md` of a repeat is written from (the report can be
/// regenerated from it alone: [`Repeats::markdown`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Repeats {
    pub scenario: Scenario,
    pub repeat: usize,
    pub time_scale: f64,
    pub repetitions: Vec<Repetition>,
    pub steps: Vec<StepTally>,
    /// `None` under `--rate` (no calibration) or when no repetition calibrated.
    pub calibration: Option<CalibrationSpread>,
}

impl Repeats {
    pub fn of(sc: &Scenario, args: &ReplayArgs, reps: &[Result<Replayed, String>]) -> Repeats {
        let repetitions: Vec<Repetition> = reps
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let dir = format!("rep-{}", i + 1);
                match r {
                    Ok(r) => Repetition {
                        dir,
                        error: None,
                        calibration: Some(r.calibration.clone()),
                        modes: r
                            .modes
                            .iter()
                            .map(|m| RepMode {
                                mode: m.mode,
                                steps: m.steps.clone(),
                                fix_quality: m.fix_quality,
                                consistent: m.consistency.iter().all(|c| c.holds()),
                            })
                            .collect(),
                    },
                    Err(e) => Repetition {
                        dir,
                        error: Some(e.clone()),
                        calibration: None,
                        modes: Vec::new(),
                    },
                }
            })
            .collect();
        let steps = tally(sc, &args.modes(), &repetitions);
        let calibration = spread(&repetitions);
        Repeats {
            scenario: sc.clone(),
            repeat: reps.len(),
            time_scale: args.time_scale,
            repetitions,
            steps,
            calibration,
        }
    }

    /// The command fails (after the report) when a repetition failed or its counts did not add
    /// up: its steps were counted as not measured, and the user must know why.
    pub fn ensure_complete(&self) -> anyhow::Result<()> {
        let mut bad = Vec::new();
        let mut reps = 0;
        for r in &self.repetitions {
            let before = bad.len();
            if let Some(e) = &r.error {
                bad.push(format!("{} failed: {e}", r.dir));
            }
            for m in r.modes.iter().filter(|m| !m.consistent) {
                bad.push(format!(
                    "{} {}: counts do not add up",
                    r.dir,
                    m.mode.variant()
                ));
            }
            reps += usize::from(bad.len() > before);
        }
        anyhow::ensure!(
            bad.is_empty(),
            "{reps} of {} repetitions are incomplete ({}); their steps are counted as not \
             measured in the report",
            self.repeat,
            bad.join("; ")
        );
        Ok(())
    }

    pub fn markdown(&self) -> String {
        self.doc().markdown()
    }

    /// The repeat's report, from `repeats.json` alone.
    pub fn doc(&self) -> Doc {
        let sc = &self.scenario;
        let n = self.repeat;
        let mut d = if self.steps.is_empty() {
            let mut d = Doc::new(format!(
                "Calibration ×{n}: {} — how far the operating point moves",
                sc.name
            ));
            // The share the calibrations ran with (0.9 before issue 26's operating point).
            let share = self
                .repetitions
                .iter()
                .find_map(|r| r.calibration.as_ref())
                .map_or("a share".to_string(), |c| {
                    format!("{}", c.stale_utilisation)
                });
            d.para(format!(
                "`labctl replay --calibrate-only --repeat {n}`: {n} calibrations, each on a fresh \
                 lab (a closed-loop warm-up whose last seconds give the healthy capacity, the plan \
                 flip, a closed-loop probe of the stale capacity, ANALYZE), and how far the \
                 replay's rate ({share} × the stale capacity) moved between them."
            ));
            d
        } else {
            let mut d = Doc::new(format!(
                "Replay ×{n}: {} — each step's verdict, k of {n}",
                sc.name
            ));
            d.para(sc.summary.trim_end()).para(format!(
                "Each repetition is a whole replay: a fresh calibration, then every mode on a \
                 fresh lab, at time scale {}× (its own report in `rep-<i>/replay.md`). A step \
                 counts as reproduced (legacy) or as the fix holding (resilient) only when it did \
                 in all {n}; a repetition that failed or whose counts did not add up gives \"not \
                 measured\". Every repetition replays the same document stream (the same \
                 `--seed`): what moves between them is the system, not the input.",
                self.time_scale
            ));
            d
        };
        self.calibrations_doc(&mut d);
        if self.steps.is_empty() {
            // `--calibrate-only`: the calibrations are the report.
            d.para("Calibration only (`--calibrate-only`): no mode was replayed.");
            return d;
        }
        let modes = self.modes();
        self.timeline_doc(&mut d, &modes);
        self.fix_doc(&mut d, &modes);
        self.reasons_doc(&mut d);
        d
    }

    /// Each repetition's calibration, and how far the rate moved between them.
    fn calibrations_doc(&self, d: &mut Doc) {
        let n = self.repeat;
        let mut t = Table::new(&[
            "repetition",
            ">healthy capacity (slowest–fastest second)",
            ">stale capacity (slowest–fastest second)",
            ">stale probe",
            ">stale / healthy",
            ">replay rate",
            ">healthy utilisation",
        ]);
        let range =
            |r: Option<[f64; 2]>| r.map_or(String::new(), |[a, b]| format!(" ({a:.0}–{b:.0})"));
        for r in &self.repetitions {
            let cells: Vec<String> = match &r.calibration {
                Some(c) if c.healthy_capacity_rps.is_finite() => vec![
                    r.dir.clone(),
                    format!(
                        "{:.0} rps{}",
                        c.healthy_capacity_rps,
                        range(c.healthy_per_second)
                    ),
                    format!(
                        "{:.0} rps{}",
                        c.stale_capacity_rps,
                        range(c.stale_per_second)
                    ),
                    // Runs before the per-second series was recorded: not known here.
                    match c.stale_probe_goodput.len() {
                        0 => "—".to_string(),
                        s => format!("{s} s"),
                    },
                    format!("{:.2}×", c.stale_over_healthy),
                    format!("{:.0} rps", c.rate),
                    format!("{:.0}%", 100.0 * c.healthy_utilisation),
                ],
                Some(c) => [
                    r.dir.as_str(),
                    "—",
                    "—",
                    "—",
                    "—",
                    &format!("{:.0} rps (--rate)", c.rate),
                    "—",
                ]
                .map(String::from)
                .into(),
                None => vec![
                    r.dir.clone(),
                    format!(
                        "failed: {}",
                        r.error.as_deref().unwrap_or("?").replace('\n', " ")
                    ),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ],
            };
            t.row(cells.into_iter().map(Cell::text).collect());
        }
        d.h2("Calibration, repetition by repetition").table(t);
        match &self.calibration {
            Some(c) if c.calibrations < 2 => d.para(format!(
                "One calibration ({} of {n} repetitions calibrated): how far the rate moves \
                 between calibrations is not assessed.",
                c.calibrations
            )),
            Some(c) => {
                let s = |x: &Spread| {
                    format!(
                        "{:.0}–{:.0} rps (mean {:.0}; moves {:.1}%)",
                        x.min,
                        x.max,
                        x.mean,
                        100.0 * x.relative
                    )
                };
                d.para(format!(
                    "Over {} calibrations: healthy capacity {}; stale capacity {}; replay rate \
                     {} — {} the {:.0}% the repetitions need to replay the same operating point \
                     (moves = (max − min) / mean).",
                    c.calibrations,
                    s(&c.healthy_capacity_rps),
                    s(&c.stale_capacity_rps),
                    s(&c.rate),
                    if c.rate_stable {
                        "within"
                    } else {
                        "**beyond**"
                    },
                    100.0 * RATE_STABILITY_MAX
                ))
            }
            None if self.repetitions.iter().any(|r| r.calibration.is_some()) => {
                d.para("No calibration spread: the rate was given (`--rate`), not calibrated.")
            }
            None => d.para("No calibration spread: no repetition calibrated."),
        };
    }

    /// The modes replayed, in order.
    fn modes(&self) -> Vec<Mode> {
        let mut m: Vec<Mode> = self.steps.iter().map(|t| t.mode).collect();
        m.sort();
        m.dedup();
        m
    }

    /// The verdict table: one row per step, k of N per mode and each repetition's outcome.
    fn timeline_doc(&self, d: &mut Doc, modes: &[Mode]) {
        let (sc, n) = (&self.scenario, self.repeat);
        let mut head = vec!["time".to_string(), "step".into(), "the postmortem".into()];
        for m in modes {
            head.push(format!(
                "{}: {}",
                m.variant(),
                Outcome::Reproduced.words(m.is_fix())
            ));
            head.push("per repetition".into());
        }
        let mut t = Table::new(&head);
        let mark = |o: Outcome| match o {
            Outcome::Reproduced => "✔",
            Outcome::NotReproduced => "✘",
            Outcome::NotMeasured => "?",
        };
        for p in &sc.phases {
            let (time, obs) = p
                .postmortem
                .as_ref()
                .map_or(("", ""), |pm| (pm.time.as_str(), pm.observation.as_str()));
            let mut row: Vec<Cell> = vec![time.into(), p.name.as_str().into(), obs.into()];
            for m in modes {
                match self.step(&p.name, *m) {
                    Some(t) => row.extend([
                        Cell {
                            lines: vec![format!("{} of {n}", t.reproduced)],
                            tone: if t.every { Tone::Plain } else { Tone::Bad },
                        },
                        t.outcomes
                            .iter()
                            .map(|o| mark(*o))
                            .collect::<Vec<_>>()
                            .join(" ")
                            .into(),
                    ]),
                    None => row.extend(["—".into(), "".into()]),
                }
            }
            t.row(row);
        }
        d.h2(format!("The timeline: each step's verdict, k of {n}"))
            .table(t)
            .para("✔ reproduced / fix held, ✘ not reproduced / fix did not hold, ? not measured.");
        let mut lines = Vec::new();
        for m in modes {
            let of_mode: Vec<&StepTally> = self.steps.iter().filter(|t| t.mode == *m).collect();
            let every = of_mode.iter().filter(|t| t.every).count();
            let none = of_mode.iter().filter(|t| t.reproduced == 0).count();
            let unmeasured = of_mode.iter().filter(|t| t.not_measured == n).count();
            lines.push(format!(
                "{}: {every} of {} steps {} in all {n} repetitions; {} in some but not all; {none} in none ({unmeasured} of them not measured in any)",
                m.variant(),
                of_mode.len(),
                Outcome::Reproduced.words(m.is_fix()),
                of_mode.len() - every - none,
            ));
        }
        d.list(lines);
    }

    /// The fix in one number, per mode and repetition.
    fn fix_doc(&self, d: &mut Doc, modes: &[Mode]) {
        let mut lines = Vec::new();
        for m in modes {
            let q: Vec<String> = self
                .repetitions
                .iter()
                .map(|r| {
                    r.modes
                        .iter()
                        .find(|x| x.mode == *m)
                        .map_or("not measured".into(), |x| match x.fix_quality {
                            _ if !x.consistent => "not measured (counts did not add up)".into(),
                            Some(q) => format!("{q:.2}"),
                            None => "not measured".into(),
                        })
                })
                .collect();
            lines.push(format!("{}: {}", m.variant(), q.join(", ")));
        }
        d.h2("How good is the fix, in one number, repetition by repetition")
            .list(lines);
    }

    /// Every step that did not come out the same in all repetitions, with the measured reason.
    fn reasons_doc(&self, d: &mut Doc) {
        let n = self.repeat;
        d.h2(format!(
            "Steps that did not come out the same in all {n}: the measured reason"
        ))
        .para("For each repetition where the step was not reproduced (legacy) or the fix did not hold (resilient): the checks that did not hold or were not measured, with their values (reference → value where the check has one).");
        let mut any = false;
        for t in self.steps.iter().filter(|t| !t.every) {
            any = true;
            let mut lines = Vec::new();
            for (i, r) in self.repetitions.iter().enumerate() {
                let o = t.outcomes.get(i).copied().unwrap_or(Outcome::NotMeasured);
                if o == Outcome::Reproduced {
                    continue;
                }
                lines.push(format!(
                    "{}: {} — {}",
                    r.dir,
                    o.words(t.mode.is_fix()),
                    reason(r, t)
                ));
            }
            d.h3(format!(
                "{} — {} ({} of {n})",
                t.mode.variant(),
                t.phase,
                t.reproduced
            ))
            .list(lines);
        }
        if !any {
            d.para("None.");
        }
    }

    fn step(&self, phase: &str, mode: Mode) -> Option<&StepTally> {
        self.steps
            .iter()
            .find(|t| t.phase == phase && t.mode == mode)
    }
}

/// Why `t` was not reproduced in `r`: the failure, the counts, or the checks that did not hold.
fn reason(r: &Repetition, t: &StepTally) -> String {
    if let Some(e) = &r.error {
        return format!("the repetition failed: {e}");
    }
    let Some(m) = r.modes.iter().find(|m| m.mode == t.mode) else {
        return "the mode did not run".into();
    };
    if !m.consistent {
        return "its counts did not add up (report::consistency): its numbers are not trusted"
            .into();
    }
    let Some(step) = m.steps.iter().find(|s| s.phase == t.phase) else {
        return "no verdict recorded".into();
    };
    step.checks
        .iter()
        .filter(|c| c.ok != Some(true))
        .map(Check::markdown)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every step with a verdict in `modes`, with its outcome per repetition.
fn tally(sc: &Scenario, modes: &[Mode], reps: &[Repetition]) -> Vec<StepTally> {
    let mut out = Vec::new();
    for mode in modes {
        for p in sc
            .phases
            .iter()
            .filter(|p| p.verdict.contains_key(mode.variant()))
        {
            let outcomes: Vec<Outcome> = reps
                .iter()
                .map(|r| {
                    r.modes
                        .iter()
                        .find(|m| m.mode == *mode && m.consistent)
                        .and_then(|m| m.steps.iter().find(|s| s.phase == p.name))
                        .map_or(Outcome::NotMeasured, |s| s.outcome)
                })
                .collect();
            let count = |o: Outcome| outcomes.iter().filter(|x| **x == o).count();
            out.push(StepTally {
                phase: p.name.clone(),
                mode: *mode,
                reproduced: count(Outcome::Reproduced),
                not_reproduced: count(Outcome::NotReproduced),
                not_measured: count(Outcome::NotMeasured),
                every: !outcomes.is_empty() && outcomes.iter().all(|o| *o == Outcome::Reproduced),
                outcomes,
            });
        }
    }
    out
}

fn spread(reps: &[Repetition]) -> Option<CalibrationSpread> {
    let cals: Vec<&Calibration> = reps
        .iter()
        .filter_map(|r| r.calibration.as_ref())
        .filter(|c| c.healthy_capacity_rps.is_finite())
        .collect();
    let of =
        |f: fn(&Calibration) -> f64| Spread::of(&cals.iter().map(|c| f(c)).collect::<Vec<_>>());
    let rate = of(|c| c.rate)?;
    Some(CalibrationSpread {
        calibrations: cals.len(),
        healthy_capacity_rps: of(|c| c.healthy_capacity_rps)?,
        stale_capacity_rps: of(|c| c.stale_capacity_rps)?,
        rate_stable: cals.len() >= 2 && rate.relative < RATE_STABILITY_MAX,
        rate,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Steps that held in every repetition, by mode.
    fn every_by_mode(r: &Repeats) -> BTreeMap<Mode, usize> {
        let mut m = BTreeMap::new();
        for t in &r.steps {
            *m.entry(t.mode).or_insert(0) += usize::from(t.every);
        }
        m
    }

    fn sc() -> Scenario {
        let y = "name: x\nsummary: s\ndescription: d\nrate: 0\nphases:\n\
          - {name: steady, seconds: 5, verdict: {legacy: [{metric: error_5xx_pct, max: 1}], resilient: [{metric: error_5xx_pct, max: 1}]}}\n\
          - {name: storm, seconds: 5, verdict: {legacy: [{metric: error_5xx_pct, min: 10}], resilient: [{metric: error_5xx_pct, max: 10}]}}\n";
        serde_norway::from_str(y).unwrap()
    }

    fn cal(healthy: f64, stale: f64) -> Calibration {
        Calibration {
            healthy_capacity_rps: healthy,
            stale_capacity_rps: stale,
            healthy_per_second: Some([healthy - 5.0, healthy + 5.0]),
            stale_per_second: Some([stale - 3.0, stale + 3.0]),
            healthy_probe_goodput: vec![],
            stale_probe_goodput: vec![],
            stale_lookups_rps: None,
            stale_over_healthy: stale / healthy,
            stale_utilisation: 0.9,
            rate: 0.9 * stale,
            healthy_utilisation: 0.9 * stale / healthy,
            healthy_utilisation_ok: true,
            steady_rss_mb: None,
            memory_limit_bytes: None,
            backfill_ran: false,
            seconds: 1.0,
            notes: vec![],
        }
    }

    /// A repetition whose legacy storm read `storm_5xx` (steady 0.1%) and whose counts added up
    /// or not.
    fn rep(i: usize, c: Calibration, storm_5xx: f64, consistent: bool) -> Repetition {
        let sc = sc();
        let step = |phase: &str, mode: Mode, v: f64| {
            let p = sc.phases.iter().find(|p| p.name == phase).unwrap();
            let checks: Vec<Check> = p.verdict[mode.variant()]
                .iter()
                .map(|c| Check {
                    check: c.describe("—"),
                    value: Some(v),
                    reference: None,
                    ok: c.holds(Some(v), None),
                    precondition: c.precondition,
                })
                .collect();
            Verdict::of(phase, checks)
        };
        Repetition {
            dir: format!("rep-{i}"),
            error: None,
            calibration: Some(c),
            modes: vec![
                RepMode {
                    mode: Mode::Legacy,
                    steps: vec![
                        step("steady", Mode::Legacy, 0.1),
                        step("storm", Mode::Legacy, storm_5xx),
                    ],
                    fix_quality: Some(0.3),
                    consistent,
                },
                RepMode {
                    mode: Mode::Resilient,
                    steps: vec![
                        step("steady", Mode::Resilient, 0.1),
                        step("storm", Mode::Resilient, 4.0),
                    ],
                    fix_quality: Some(0.8),
                    consistent: true,
                },
            ],
        }
    }

    fn repeats(reps: Vec<Repetition>) -> Repeats {
        let modes = [Mode::Legacy, Mode::Resilient];
        Repeats {
            scenario: sc(),
            repeat: reps.len(),
            time_scale: 1.0,
            steps: tally(&sc(), &modes, &reps),
            calibration: spread(&reps),
            repetitions: reps,
        }
    }

    #[test]
    fn a_step_counts_as_reproduced_only_when_it_reproduced_in_every_repetition() {
        // The storm reproduced in two of three: 2 of 3, NOT reproduced overall.
        let r = repeats(vec![
            rep(1, cal(500.0, 160.0), 40.0, true),
            rep(2, cal(510.0, 165.0), 5.0, true),
            rep(3, cal(505.0, 162.0), 35.0, true),
        ]);
        let storm = r.step("storm", Mode::Legacy).unwrap();
        assert_eq!(
            (storm.reproduced, storm.not_reproduced, storm.not_measured),
            (2, 1, 0)
        );
        assert!(!storm.every);
        assert!(r.step("steady", Mode::Legacy).unwrap().every);
        assert_eq!(every_by_mode(&r)[&Mode::Legacy], 1);
        assert_eq!(every_by_mode(&r)[&Mode::Resilient], 2);
        let md = r.markdown();
        assert!(md.contains("**2 of 3**"), "{md}");
        assert!(md.contains("✔ ✘ ✔"), "{md}");
        // The measured reason of the repetition that did not reproduce, with its value.
        assert!(md.contains("### legacy — storm (2 of 3)"), "{md}");
        assert!(
            md.contains("- rep-2: not reproduced — ✘ `error_5xx_pct ≥ 10`: 5.0%"),
            "{md}"
        );
        assert!(r.ensure_complete().is_ok());
    }

    #[test]
    fn a_repetition_that_failed_or_does_not_add_up_is_not_measured_and_fails_the_command() {
        let mut failed = rep(2, cal(500.0, 160.0), 40.0, true);
        failed.error = Some("lab did not boot".into());
        failed.calibration = None;
        failed.modes.clear();
        let r = repeats(vec![
            rep(1, cal(500.0, 160.0), 40.0, true),
            failed,
            rep(3, cal(500.0, 160.0), 40.0, false),
        ]);
        let storm = r.step("storm", Mode::Legacy).unwrap();
        assert_eq!(
            storm.outcomes,
            vec![
                Outcome::Reproduced,
                Outcome::NotMeasured,
                Outcome::NotMeasured
            ]
        );
        assert!(!storm.every);
        // Resilient in rep-3 added up: it counts.
        assert_eq!(r.step("storm", Mode::Resilient).unwrap().reproduced, 2);
        let err = r.ensure_complete().unwrap_err().to_string();
        assert!(err.contains("rep-2 failed: lab did not boot"), "{err}");
        assert!(err.contains("rep-3 legacy: counts do not add up"), "{err}");
        let md = r.markdown();
        assert!(
            md.contains("the repetition failed: lab did not boot"),
            "{md}"
        );
    }

    #[test]
    fn repeats_json_reads_back_into_the_same_report_even_without_a_calibration() {
        // `--rate`: the calibration's capacities are NaN, written as null.
        let mut given = cal(500.0, 160.0);
        given.healthy_capacity_rps = f64::NAN;
        given.stale_capacity_rps = f64::NAN;
        given.stale_over_healthy = f64::NAN;
        given.healthy_utilisation = f64::NAN;
        let r = repeats(vec![
            rep(1, given.clone(), 40.0, true),
            rep(2, given, 5.0, true),
        ]);
        let json = serde_json::to_vec(&r).unwrap();
        let back: Repeats = serde_json::from_slice(&json).expect("repeats.json reads back");
        assert_eq!(back.markdown(), r.markdown());
        assert!(back.repetitions[0]
            .calibration
            .as_ref()
            .unwrap()
            .healthy_capacity_rps
            .is_nan());
        let md = r.markdown();
        assert!(md.contains("the rate was given (`--rate`)"), "{md}");
    }

    #[test]
    fn a_calibration_only_repeat_reports_the_calibrations_and_no_verdicts() {
        let mut a = rep(1, cal(600.0, 181.0), 40.0, true);
        let mut b = rep(2, cal(610.0, 197.0), 40.0, true);
        a.modes.clear();
        b.modes.clear();
        let mut r = repeats(vec![a, b]);
        r.steps = tally(&sc(), &[], &r.repetitions);
        assert!(r.steps.is_empty());
        let md = r.markdown();
        assert!(md.contains("no mode was replayed"), "{md}");
        assert!(!md.contains("## The timeline"), "{md}");
        assert!(md.contains("moves 8.5%"), "{md}");
        assert!(r.calibration.as_ref().unwrap().rate_stable);
    }

    #[test]
    fn one_calibration_cannot_show_the_rate_is_stable() {
        let mut failed = rep(2, cal(500.0, 160.0), 40.0, true);
        failed.error = Some("lab did not boot\nat all".into());
        failed.calibration = None;
        failed.modes.clear();
        let r = repeats(vec![rep(1, cal(500.0, 160.0), 40.0, true), failed]);
        let c = r.calibration.as_ref().unwrap();
        assert_eq!((c.calibrations, c.rate.relative), (1, 0.0));
        assert!(
            !c.rate_stable,
            "a spread of 0 over one calibration is not stability"
        );
        let md = r.markdown();
        assert!(md.contains("is not assessed"), "{md}");
        assert!(
            md.contains("| rep-2 | failed: lab did not boot at all |"),
            "{md}"
        );
        let err = r.ensure_complete().unwrap_err().to_string();
        assert!(
            err.starts_with("1 of 2 repetitions are incomplete"),
            "{err}"
        );
    }

    #[test]
    fn the_calibration_spread_says_whether_the_rate_moved_more_than_10_percent() {
        let stable = repeats(vec![
            rep(1, cal(520.0, 160.0), 40.0, true),
            rep(2, cal(530.0, 166.0), 40.0, true),
            rep(3, cal(500.0, 170.0), 40.0, true),
        ]);
        let c = stable.calibration.as_ref().unwrap();
        assert_eq!(c.calibrations, 3);
        assert!(
            (c.rate.relative - 10.0 / (496.0 / 3.0)).abs() < 1e-9,
            "{c:?}"
        );
        assert!(c.rate_stable);
        assert_eq!(c.healthy_capacity_rps.min, 500.0);
        let moved = repeats(vec![
            rep(1, cal(520.0, 140.0), 40.0, true),
            rep(2, cal(530.0, 170.0), 40.0, true),
        ]);
        assert!(!moved.calibration.as_ref().unwrap().rate_stable);
        let md = moved.markdown();
        assert!(md.contains("**beyond** the 10%"), "{md}");
        assert!(
            md.contains("| rep-1 | 520 rps (515–525) | 140 rps (137–143)"),
            "{md}"
        );
    }
}
