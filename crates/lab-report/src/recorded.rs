//! A run read back from its directory: the phases and the load its `summary.json` recorded, the
//! scrapes its `series.jsonl` kept — and the check that its table recomputes from them.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::charts::RunSeries;
use crate::summary::{self, PhaseReport};
use lab_load::SecondSample;

/// One run: a game day's, or one mode of a replay.
pub struct Recorded {
    /// The mode, lower case (`legacy`, `resilient`).
    pub mode: String,
    pub run: RunSeries,
    pub phases: Vec<PhaseReport>,
}

fn parse<T: serde::de::DeserializeOwned + Default>(v: &Value, what: &str) -> anyhow::Result<T> {
    if v.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(v.clone()).with_context(|| format!("reading {what}"))
}

fn one(dir: &Path, mode: &Value, phases: &Value, load: &Value) -> anyhow::Result<Recorded> {
    let phases: Vec<PhaseReport> = parse(phases, "the phases")?;
    let load: Vec<SecondSample> = parse(load, "the load's seconds")?;
    let bands = phases
        .iter()
        .map(|p| (p.name.clone(), p.start, p.seconds as f64))
        .collect();
    Ok(Recorded {
        mode: mode.as_str().unwrap_or("?").to_lowercase(),
        run: RunSeries::read(&dir.join("series.jsonl"), load, bands)?,
        phases,
    })
}

/// Every run in `dir`: a game day's (`summary.json` with phases and the load), or each mode of
/// a replay (`summary.json` with a calibration and modes, `<mode>/series.jsonl`).
pub fn read(dir: &Path) -> anyhow::Result<(Value, Vec<Recorded>)> {
    let summary: Value = serde_json::from_slice(
        &std::fs::read(dir.join("summary.json"))
            .with_context(|| format!("reading {}/summary.json", dir.display()))?,
    )
    .with_context(|| format!("{}/summary.json is not JSON", dir.display()))?;
    let runs = if summary.get("calibration").is_some() {
        summary["modes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                let mode = m["mode"].as_str().unwrap_or("?").to_lowercase();
                one(
                    &dir.join(mode),
                    &m["mode"],
                    &m["phases"],
                    &m["load_per_second"],
                )
            })
            .collect::<anyhow::Result<_>>()?
    } else {
        vec![one(
            dir,
            &summary["mode"],
            &summary["phases"],
            &summary["load"]["per_second"],
        )?]
    };
    Ok((summary, runs))
}

impl Recorded {
    /// Every phase's rows recomputed from the series and the load, against what the run
    /// recorded: one line per recorded row that differs (beyond the order of a floating-point
    /// sum) or is no longer computed. A row the run did not record (the code has grown one since)
    /// is not a difference. Empty: the table is what its own data says.
    pub fn differences(&self) -> Vec<String> {
        let mut again = self.phases.clone();
        // The quantities beyond the rows that the run's verdicts had it compute.
        let judged: Vec<&str> = crate::quantities::QUANTITIES
            .iter()
            .filter(|q| !q.row && self.phases.iter().any(|p| p.summary.contains_key(q.id)))
            .map(|q| q.id)
            .collect();
        summary::summarize_phases(
            &self.run.frame().series,
            &self.run.load,
            self.run.fine.as_ref(),
            &mut again,
            &judged,
        );
        let mut out = Vec::new();
        for (was, now) in self.phases.iter().zip(&again) {
            for (k, a) in &was.summary {
                let b = now.summary.get(k);
                if !b.is_some_and(|b| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)) {
                    out.push(format!(
                        "{} {}/{k}: recorded {a:?}, recomputed {b:?}",
                        self.mode, was.name
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture was recorded by the code before the quantities were one list (ROWS and a
    /// `summarize` of 330 lines, PANELS apart): every row of both phases recomputes from its
    /// series, so the move changed no number.
    #[test]
    fn the_recorded_fixture_recomputes_its_own_table() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/gameday-fixture");
        let (_, runs) = read(&dir).unwrap();
        assert_eq!(runs.len(), 1);
        let rows: usize = runs[0].phases.iter().map(|p| p.summary.len()).sum();
        assert!(rows > 60, "both phases' rows are recorded: {rows}");
        assert_eq!(runs[0].differences(), Vec::<String>::new());
        // And the check can fail: a recorded number edited is found.
        let mut edited = runs.into_iter().next().unwrap();
        *edited.phases[1].summary.get_mut("error_5xx_pct").unwrap() += 0.01;
        let found = edited.differences();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("dependency-dead/error_5xx_pct"),
            "{found:?}"
        );
    }

    /// Runs recorded by `labctl` (not the fixture only): `RECORDED_RUNS=dir1:dir2 cargo test -p
    /// lab-report recorded`, each a game day's or a replay's directory, or a directory of them.
    #[test]
    fn every_recorded_run_named_in_the_environment_recomputes_its_own_table() {
        let Some(dirs) = std::env::var_os("RECORDED_RUNS") else {
            return;
        };
        let mut checked = 0;
        let mut bad = Vec::new();
        for dir in std::env::split_paths(&dirs) {
            let mut runs = vec![dir.clone()];
            if !dir.join("summary.json").exists() {
                runs = std::fs::read_dir(&dir)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.join("summary.json").exists())
                    .collect();
            }
            for run in runs {
                let (_, recorded) = read(&run).unwrap();
                for r in recorded {
                    checked += r.phases.len();
                    bad.extend(
                        r.differences()
                            .into_iter()
                            .map(|d| format!("{}: {d}", run.display())),
                    );
                }
            }
        }
        eprintln!("{checked} phases recomputed, {} rows differ", bad.len());
        assert!(checked > 0, "no recorded run under RECORDED_RUNS");
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}
