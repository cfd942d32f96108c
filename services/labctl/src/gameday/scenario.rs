//! Game-day scenario files (`load/scenarios/<name>.yaml`): a prose header, phases on a timeline
//! with a rate and the flags to set at their start, and expected ranges per client mode.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

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
    /// labctl commands run after the last phase (e.g. `backfill --reset`), in order, waited for.
    #[serde(default)]
    pub cleanup: Vec<String>,
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
    /// labctl commands started when the phase starts (e.g. `backfill --only populate`), in the
    /// background, in order: the load does not wait for them, as production did not wait for the
    /// 03:00 backfill.
    #[serde(default)]
    pub run: Vec<String>,
}

/// labctl subcommands a scenario may run: the database trigger and its remediation.
pub const RUNNABLE: &[&str] = &["backfill", "remediate", "db"];

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
        if total == 0 || total > 3_600 {
            bail!("phases must last 1..=3600 s in all (bounded game days), not {total}");
        }
        let runnable = |cmd: &str| RUNNABLE.contains(&cmd.split_whitespace().next().unwrap_or(""));
        for cmd in self
            .cleanup
            .iter()
            .chain(self.phases.iter().flat_map(|p| p.run.iter()))
        {
            if !runnable(cmd) {
                bail!(
                    "run/cleanup {cmd:?}: only `labctl {}` commands may run",
                    RUNNABLE.join("|")
                );
            }
        }
        for p in &self.phases {
            if p.seconds == 0 {
                bail!("phase {}: seconds must be at least 1", p.name);
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
        for (mode, checks) in &self.expect {
            if !["legacy", "resilient"].contains(&mode.as_str()) {
                bail!("expect: unknown mode {mode:?}");
            }
            for (metric, e) in checks {
                if !self.phases.iter().any(|p| p.name == e.phase) {
                    bail!("expect.{mode}.{metric}: no phase named {:?}", e.phase);
                }
            }
        }
        Ok(())
    }

    pub fn total_seconds(&self) -> u64 {
        self.phases.iter().map(|p| p.seconds).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_parses_and_validates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../load/scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                parse_file(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
                n += 1;
            }
        }
        assert!(
            n >= 3,
            "dependency-dead, black-hole and slow-dependency at least"
        );
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
