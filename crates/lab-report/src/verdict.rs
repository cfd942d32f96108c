//! One verdict type for every experiment: a [`Check`] is one measured condition (a value, what
//! it was compared with, whether it held — or `None`: not measured); a [`Verdict`] is a step's
//! checks and what they came to, an [`Outcome`]. The replay's postmortem steps, a game day's
//! expectations and a run's own bookkeeping (its counts add up) are all written with them.
//!
//! The rule that makes a verdict believable (issue 24): a value that is missing, or a
//! precondition that did not hold, is *not measured* — never reproduced, never failed.

use serde::{Deserialize, Serialize};

use crate::quantities::{self, Unit};

/// What a step came to. In legacy mode, whether the postmortem's step was reproduced; for the
/// fixed client, whether the fix held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Reproduced,
    NotReproduced,
    NotMeasured,
}

impl Outcome {
    /// The words for the buggy client (`fix: false`: reproduces the postmortem) or the fixed
    /// one (its fix holds).
    pub fn words(self, fix: bool) -> &'static str {
        match (self, fix) {
            (Outcome::Reproduced, false) => "reproduced",
            (Outcome::NotReproduced, false) => "not reproduced",
            (Outcome::Reproduced, true) => "fix held",
            (Outcome::NotReproduced, true) => "fix did not hold",
            (Outcome::NotMeasured, _) => "not measured",
        }
    }

    /// The words for a claim that is not the postmortem's (an `expect:` range, a fault
    /// check): it held or it did not, in either mode.
    pub fn plain_words(self) -> &'static str {
        match self {
            Outcome::Reproduced => "held",
            Outcome::NotReproduced => "did not hold",
            Outcome::NotMeasured => "not measured",
        }
    }

    pub fn mark(self) -> &'static str {
        match self {
            Outcome::Reproduced => "✔",
            Outcome::NotReproduced => "✘",
            Outcome::NotMeasured => "?",
        }
    }

    /// Preconditions first: any not holding makes the step not measured; then the verdict's
    /// checks: any missing value is not measured, all holding is reproduced. No verdict check
    /// at all: not measured (a step that claims nothing proves nothing).
    pub fn of(checks: &[Check]) -> Outcome {
        if checks.iter().any(|c| c.precondition && c.ok != Some(true)) {
            return Outcome::NotMeasured;
        }
        let verdict: Vec<&Check> = checks.iter().filter(|c| !c.precondition).collect();
        if verdict.is_empty() || verdict.iter().any(|c| c.ok.is_none()) {
            Outcome::NotMeasured
        } else if verdict.iter().all(|c| c.ok == Some(true)) {
            Outcome::Reproduced
        } else {
            Outcome::NotReproduced
        }
    }
}

/// One measured condition. Summaries written before the one type named a consistency check's
/// fields `name`, `got` and `expected`: they read back as `check`, `value` and `reference`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    /// The condition in words (`amplification_ratio ≥ 6`), its first word the quantity's id
    /// where it is about one.
    #[serde(alias = "name")]
    pub check: String,
    #[serde(alias = "got")]
    pub value: Option<f64>,
    /// What the value was compared with (another phase's value, the count it must equal).
    #[serde(alias = "expected")]
    pub reference: Option<f64>,
    /// `None`: a value was missing (not measured).
    pub ok: Option<bool>,
    /// A precondition (the command ran, the flag took effect, the trigger happened), not the
    /// verdict itself.
    #[serde(default)]
    pub precondition: bool,
}

impl Check {
    /// Two independent counts of the same thing, which must agree exactly (a run's bookkeeping).
    pub fn counts_agree(name: &str, expected: f64, got: f64) -> Check {
        Check {
            check: name.to_string(),
            value: Some(got),
            reference: Some(expected),
            ok: Some((expected - got).abs() < 0.5),
            precondition: false,
        }
    }

    /// A count that must not fall below `floor` (a bound, where two counts may differ by what
    /// one of them cannot see), or a measure in units where half of one is noise (ms); the
    /// tolerance is half a unit.
    pub fn at_least(name: &str, floor: f64, got: f64) -> Check {
        Check {
            check: name.to_string(),
            value: Some(got),
            reference: Some(floor),
            ok: Some(got > floor - 0.5),
            precondition: false,
        }
    }

    /// A count that must not exceed `ceiling` (the tolerance as in [`Check::at_least`]).
    pub fn at_most(name: &str, ceiling: f64, got: f64) -> Check {
        Check {
            check: name.to_string(),
            value: Some(got),
            reference: Some(ceiling),
            ok: Some(got < ceiling + 0.5),
            precondition: false,
        }
    }

    /// What the reference is to the value, in words: `expected` for counts that must agree,
    /// `bound` for a check whose name states its relation (`≤`, `≥`).
    pub fn reference_word(&self) -> &'static str {
        if self.check.contains(['≤', '≥']) {
            "bound"
        } else {
            "expected"
        }
    }

    /// It was measured and it held.
    pub fn holds(&self) -> bool {
        self.ok == Some(true)
    }

    /// `reference → value` (or `value`), in the unit of the quantity the check names.
    pub fn values(&self) -> String {
        let key = self.check.split_whitespace().next().unwrap_or("");
        let unit = quantities::find(key).map_or(Unit::Plain, |q| q.unit);
        let r = self
            .reference
            .map(|r| format!("{} → ", unit.fmt(Some(r))))
            .unwrap_or_default();
        format!("{r}{}", unit.fmt(self.value))
    }

    /// `✔`, `✘` or `?` (not measured).
    pub fn mark(&self) -> &'static str {
        match self.ok {
            Some(true) => "✔",
            Some(false) => "✘",
            None => "?",
        }
    }

    /// `✔ `check`: reference → value` (marked when a precondition), as the reports show it.
    pub fn markdown(&self) -> String {
        format!(
            "{}{} `{}`: {}",
            if self.precondition {
                "precondition "
            } else {
                ""
            },
            self.mark(),
            self.check,
            self.values()
        )
    }
}

/// A step's checks and what they came to ([`Outcome::of`] them, always).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    /// The phase (or window) the checks are about.
    pub phase: String,
    /// The postmortem's line the verdict is about (a step's observation, a claim quoted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postmortem: Option<String>,
    pub checks: Vec<Check>,
    pub outcome: Outcome,
    /// `outcome == Reproduced` (kept for readers of older summaries).
    #[serde(default)]
    pub reproduced: bool,
    /// What else a reader needs to weigh it (the numbers behind the checks).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence: String,
}

impl Verdict {
    pub fn of(phase: &str, checks: Vec<Check>) -> Verdict {
        let outcome = Outcome::of(&checks);
        Verdict {
            phase: phase.to_string(),
            postmortem: None,
            checks,
            outcome,
            reproduced: outcome == Outcome::Reproduced,
            evidence: String::new(),
        }
    }

    /// The same, about the postmortem's `line`.
    pub fn about(mut self, line: &str) -> Verdict {
        self.postmortem = Some(line.to_string());
        self
    }

    /// The same, with `evidence`.
    pub fn with_evidence(mut self, evidence: String) -> Verdict {
        self.evidence = evidence;
        self
    }

    /// What it came to, in words: a postmortem step (or claim) is reproduced, or for the fixed
    /// client the fix held; any other check held or did not.
    pub fn words(&self, fix: bool) -> &'static str {
        match self.postmortem {
            Some(_) => self.outcome.words(fix),
            None => self.outcome.plain_words(),
        }
    }

    /// The checks in words, `; `-separated (`✔ `goodput_pct ≥ 50`: 61.2%`).
    pub fn checks_markdown(&self) -> String {
        let checks: Vec<String> = self.checks.iter().map(Check::markdown).collect();
        checks.join("; ")
    }
}

impl Check {
    /// A measured condition: `value` (against `reference`) held or not; `None` when the value
    /// was not measured.
    pub fn measured(
        check: impl Into<String>,
        value: Option<f64>,
        reference: Option<f64>,
        holds: impl FnOnce(f64) -> bool,
    ) -> Check {
        Check {
            check: check.into(),
            value,
            reference,
            ok: value.map(holds),
            precondition: false,
        }
    }

    /// The same check as a precondition: not the claim, a fact the claim needs to mean anything.
    pub fn precondition(mut self) -> Check {
        self.precondition = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound holds up to its limit and reads as one; counts that must agree read as expected.
    #[test]
    fn a_bound_holds_to_its_limit_and_says_bound() {
        let at_most = Check::at_most("gateway requests ≤ sent", 10.0, 10.0);
        assert!(at_most.holds());
        assert!(!Check::at_most("gateway requests ≤ sent", 10.0, 11.0).holds());
        assert!(Check::at_least("gateway 5xx ≥ load's", 10.0, 12.0).holds());
        assert!(!Check::at_least("gateway 5xx ≥ load's", 10.0, 9.0).holds());
        assert!(!Check::at_least("gateway 5xx ≥ load's", 10.0, f64::NAN).holds());
        assert_eq!(at_most.reference_word(), "bound");
        assert_eq!(
            Check::counts_agree("sent = answered", 3.0, 3.0).reference_word(),
            "expected"
        );
    }

    fn v(ok: Option<bool>, precondition: bool) -> Check {
        Check {
            check: "x".into(),
            value: None,
            reference: None,
            ok,
            precondition,
        }
    }

    #[test]
    fn a_step_is_reproduced_only_when_its_preconditions_and_every_check_hold() {
        use Outcome::*;
        let t = Some(true);
        let f = Some(false);
        assert_eq!(Outcome::of(&[v(t, true), v(t, false)]), Reproduced);
        assert_eq!(Outcome::of(&[v(t, true), v(f, false)]), NotReproduced);
        // A failed or unmeasured precondition: no verdict either way, whatever the checks say.
        assert_eq!(Outcome::of(&[v(f, true), v(t, false)]), NotMeasured);
        assert_eq!(Outcome::of(&[v(None, true), v(f, false)]), NotMeasured);
        // A check whose source was down (the plan probe refused a grant) is not a pass.
        assert_eq!(Outcome::of(&[v(None, false), v(t, false)]), NotMeasured);
        // Preconditions alone are not a verdict.
        assert_eq!(Outcome::of(&[v(t, true)]), NotMeasured);
        assert_eq!(Reproduced.words(true), "fix held");
        assert_eq!(NotReproduced.words(false), "not reproduced");
    }
}
