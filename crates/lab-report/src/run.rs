//! One run summary schema: every `summary.json` an experiment writes — a game day, a replay, an
//! ablation, a map, a chain-limit run — starts with the same [`Header`] under the key `run`:
//! what ran, the schema version, every verdict it reached (grouped by mode or by what they
//! judge) and its own bookkeeping. The index, scripts and any reader take what a run concluded
//! from there, without knowing the kind; the rest of the file is the kind's own body (its
//! phases, cells or ladder), beside the header, as before.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::verdict::{Check, Outcome, Verdict};

/// The header's version: raised when a field changes meaning (a reader refuses a newer one).
pub const SCHEMA: u32 = 1;

/// The file every run directory holds.
pub const FILE: &str = "summary.json";

/// What ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    GameDay,
    Replay,
    Ablation,
    Map,
    ChainLimit,
}

/// Verdicts judged together: one mode's postmortem steps, its `expect:` ranges, an ablation's
/// claims.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Judged {
    /// What they are of (`legacy`, `resilient (expect)`, `claims`).
    pub of: String,
    /// Judged for the fixed client: a reproduced postmortem step reads "fix held".
    pub fix: bool,
    pub verdicts: Vec<Verdict>,
}

impl Judged {
    /// `legacy: 7 reproduced, 1 not reproduced, 2 not measured` (words of the postmortem where
    /// the verdicts are about its lines, else held / did not hold). `None`: no verdict.
    pub fn tally(&self) -> Option<String> {
        let first = self.verdicts.first()?;
        let words = |o: Outcome| {
            if first.postmortem.is_some() {
                o.words(self.fix)
            } else {
                o.plain_words()
            }
        };
        let n = |o: Outcome| self.verdicts.iter().filter(|v| v.outcome == o).count();
        Some(format!(
            "{}: {} {}, {} {}, {} not measured",
            self.of,
            n(Outcome::Reproduced),
            words(Outcome::Reproduced),
            n(Outcome::NotReproduced),
            words(Outcome::NotReproduced),
            n(Outcome::NotMeasured)
        ))
    }
}

/// What every run's `summary.json` says first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub schema: u32,
    pub kind: RunKind,
    /// The scenario's or the experiment's name.
    pub name: String,
    /// Every verdict of the run (empty: it judges nothing, as a map or a chain-limit run).
    pub verdicts: Vec<Judged>,
    /// The run's own bookkeeping (its counts add up); empty: it keeps none.
    pub consistency: Vec<Check>,
}

impl Header {
    pub fn new(kind: RunKind, name: &str) -> Header {
        Header {
            schema: SCHEMA,
            kind,
            name: name.to_string(),
            verdicts: Vec::new(),
            consistency: Vec::new(),
        }
    }

    /// With `verdicts`, judged as `of` (nothing added when there are none).
    pub fn judged(mut self, of: &str, fix: bool, verdicts: &[Verdict]) -> Header {
        if !verdicts.is_empty() {
            self.verdicts.push(Judged {
                of: of.to_string(),
                fix,
                verdicts: verdicts.to_vec(),
            });
        }
        self
    }

    /// With these checks of its own bookkeeping added.
    pub fn consistency(mut self, checks: &[Check]) -> Header {
        self.consistency.extend_from_slice(checks);
        self
    }

    /// Read from a summary, if it has one: `None` for a summary written before the schema
    /// (the index reads those by their keys), an error for a header that cannot be read or is of
    /// a newer schema than this reader's.
    pub fn of(summary: &Value) -> Option<anyhow::Result<Header>> {
        let v = summary.get("run")?;
        Some(
            serde_json::from_value::<Header>(v.clone())
                .context("its `run` header")
                .and_then(|h| {
                    anyhow::ensure!(
                        h.schema <= SCHEMA,
                        "its `run` header is schema {}, newer than this reader's {SCHEMA}",
                        h.schema
                    );
                    Ok(h)
                }),
        )
    }
}

#[derive(Serialize)]
struct Written<'a, B: Serialize> {
    run: &'a Header,
    #[serde(flatten)]
    body: &'a B,
}

/// `body` as `dir/summary.json`, under the run's `header`. `body` must serialize as a map with
/// no `run` key of its own.
pub fn write<B: Serialize>(dir: &Path, header: &Header, body: &B) -> anyhow::Result<PathBuf> {
    let path = dir.join(FILE);
    let bytes = serde_json::to_vec_pretty(&Written { run: header, body })
        .with_context(|| format!("serializing {}", path.display()))?;
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Body {
        mode: String,
        phases: Vec<u32>,
    }

    #[test]
    fn a_summary_carries_the_header_beside_its_own_body_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("lab_run_{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let step = Verdict::of(
            "stale",
            vec![Check::counts_agree("amplification_ratio ≥ 6", 1.0, 1.0)],
        )
        .about("900 rps → 8,100");
        let h = Header::new(RunKind::GameDay, "incident")
            .judged("legacy", false, std::slice::from_ref(&step))
            .judged("legacy (expect)", false, &[])
            .consistency(&[Check::counts_agree("sent = answered", 10.0, 9.0)]);
        let body = Body {
            mode: "legacy".into(),
            phases: vec![1, 2],
        };
        let path = write(&dir, &h, &body).unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        // The body reads back as it was (its readers need not know the header).
        assert_eq!(serde_json::from_value::<Body>(v.clone()).unwrap(), body);
        let back = Header::of(&v).unwrap().unwrap();
        assert_eq!(
            (back.schema, back.kind, back.name.as_str()),
            (SCHEMA, RunKind::GameDay, "incident")
        );
        assert_eq!(
            back.verdicts.len(),
            1,
            "a group with no verdict is not written"
        );
        assert_eq!(
            back.verdicts[0].tally().unwrap(),
            "legacy: 1 reproduced, 0 not reproduced, 0 not measured"
        );
        assert!(!back.consistency[0].holds());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_header_is_none_and_a_newer_or_broken_one_is_an_error() {
        assert!(Header::of(&serde_json::json!({"mode": "legacy"})).is_none());
        let mut h = serde_json::to_value(Header::new(RunKind::Map, "map")).unwrap();
        h["schema"] = (SCHEMA + 1).into();
        let err = Header::of(&serde_json::json!({ "run": h }))
            .unwrap()
            .unwrap_err();
        assert!(format!("{err:#}").contains("newer"), "{err:#}");
        let broken = serde_json::json!({"run": {"schema": 1, "kind": "séance"}});
        assert!(Header::of(&broken).unwrap().is_err());
    }

    #[test]
    fn the_fixed_clients_steps_read_as_fixes_and_plain_checks_as_held() {
        let v = |pm: bool| {
            let v = Verdict::of("x", vec![Check::counts_agree("a", 1.0, 1.0)]);
            if pm {
                v.about("line")
            } else {
                v
            }
        };
        let j = |fix, pm| Judged {
            of: "m".into(),
            fix,
            verdicts: vec![v(pm)],
        };
        assert!(j(true, true).tally().unwrap().contains("1 fix held"));
        assert!(j(false, true).tally().unwrap().contains("1 reproduced"));
        assert!(j(true, false).tally().unwrap().contains("1 held"));
    }
}
