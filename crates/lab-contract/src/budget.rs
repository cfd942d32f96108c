//! Timing budgets, and the hop table of the synchronous path — in ONE file.
//!
//! LAB-FIX(timeout-inversion): the legacy client's `DEFAULT_TIMEOUT` of 10 s sat under a 3 s
//! gateway budget — "every timeout on that path was a lie" for three weeks.
//!
//! The postmortem's root cause was a number nobody chose for the call that used it: a package
//! default (`httpx.DefaultTimeout`, 800 ms → 10 s in commit b7c3a91, "to stop entity-service
//! contract tests flaking in CI") that only the orchestrator inherited. So here:
//!
//! - a [`Budget`] is a REQUIRED argument of the client (there is no `Default` for it anywhere),
//!   validated when it is built;
//! - every hop's budget sits in [`hop_table`], next to its parent's, with the arithmetic written
//!   down; [`HopTable::validate`] refuses a table in which a child could outlive its parent and
//!   names BOTH budgets in the error, so the person reading it knows which two numbers to reconcile
//!   (postmortem, "Lessons Learned" 2: `child.Total < parent.PerAttempt`. Write it down. Test it.)
//!
//! The invariant, per hop: `child.total + child.guard_band < parent.per_attempt`. A parent
//! attempt gives up after `per_attempt`; a child that may still be working then is working for
//! nobody (the postmortem's 3.0 s gateway span with its 9.8 s child).

use std::time::Duration;

/// No attempt starts with less than this left (after the guard band). An attempt that cannot
/// finish still costs entity-service a full request's work and returns nothing; failing 120 ms
/// early and telling the truth is strictly better ("Every Change, Explained": per-attempt deadline
/// derived from remaining budget). 120 ms is the postmortem's value: about entity-service's
/// steady-state p99 (120 ms), so an attempt with less than that left would mostly time out.
pub const MIN_ATTEMPT_BUDGET: Duration = Duration::from_millis(120);

/// The timing contract for one hop. Four fields because they answer four different questions;
/// collapsing them into one `timeout` is what let the incident happen.
///
/// There is deliberately no `Default`: a default budget is a decision made by whoever edited it
/// last, applied to callers they have never heard of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Names the hop (`entity.resolve`) in every error and log line, so an inversion or a shed
    /// says *which* budget to look at rather than "a timeout".
    pub name: String,
    /// The promise to the caller: the whole call — every attempt and every backoff — ends by
    /// `start + total`. Authoritative; attempts are best-effort inside it.
    pub total: Duration,
    /// The load-shedding threshold: one attempt is abandoned after this long, so a slow dependency
    /// releases our connection, memory and its own work instead of holding them hostage.
    pub per_attempt: Duration,
    /// Reserved at the end of `total` for what happens after the last byte arrives (decoding the
    /// answer, building our own response): attempts may only use `remaining - guard_band`.
    pub guard_band: Duration,
    /// Attempts including the first; 1 means "no retries at this layer". Retries live at exactly
    /// one layer of the path.
    pub max_attempts: u32,
}

/// Why a budget or a hop table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// One budget is inconsistent on its own.
    #[error("budget {name:?} is invalid: {reason}")]
    Invalid { name: String, reason: String },
    /// A child budget could outlive its parent's attempt (the postmortem's root cause).
    #[error(
        "timeout inversion: {child} total budget {}ms + guard band {}ms = {}ms is not below \
         {parent} per-attempt budget {}ms. A child that can outlive its parent produces abandoned \
         work under load: lower {child}.total or raise {parent}.per_attempt — and redo the \
         arithmetic for the whole chain (crates/lab-contract/src/budget.rs, hop_table)",
        .child_total.as_millis(),
        .child_guard_band.as_millis(),
        (*.child_total + *.child_guard_band).as_millis(),
        .parent_per_attempt.as_millis()
    )]
    Inverted {
        child: String,
        child_total: Duration,
        child_guard_band: Duration,
        parent: String,
        parent_per_attempt: Duration,
    },
}

impl Budget {
    /// A validated budget.
    pub fn new(
        name: impl Into<String>,
        total: Duration,
        per_attempt: Duration,
        guard_band: Duration,
        max_attempts: u32,
    ) -> Result<Self, BudgetError> {
        let b = Self {
            name: name.into(),
            total,
            per_attempt,
            guard_band,
            max_attempts,
        };
        b.validate()?;
        Ok(b)
    }

    /// [`Budget::new`] from milliseconds, the unit configuration files use.
    pub fn from_millis(
        name: impl Into<String>,
        total_ms: u64,
        per_attempt_ms: u64,
        guard_band_ms: u64,
        max_attempts: u32,
    ) -> Result<Self, BudgetError> {
        Self::new(
            name,
            Duration::from_millis(total_ms),
            Duration::from_millis(per_attempt_ms),
            Duration::from_millis(guard_band_ms),
            max_attempts,
        )
    }

    /// Is this budget consistent on its own? (The fields are public so a config loader can build
    /// one; everything that uses a budget calls this first.)
    pub fn validate(&self) -> Result<(), BudgetError> {
        let invalid = |reason: String| {
            Err(BudgetError::Invalid {
                name: self.name.clone(),
                reason,
            })
        };
        if self.name.trim().is_empty() {
            return invalid("name must not be empty: errors and logs name budgets".into());
        }
        if self.total.is_zero() {
            return invalid("total must be > 0 — there is no \"no timeout\"".into());
        }
        if self.per_attempt.is_zero() {
            return invalid("per_attempt must be > 0".into());
        }
        if self.per_attempt > self.total {
            return invalid(format!(
                "per_attempt {}ms exceeds total {}ms: an attempt cannot outlive the call",
                self.per_attempt.as_millis(),
                self.total.as_millis()
            ));
        }
        if self.max_attempts == 0 {
            return invalid("max_attempts must be >= 1 (1 = no retries)".into());
        }
        // Not in the brief's list but implied by it: a budget that can never start an attempt
        // (every call would be shed as no_budget) is a misconfiguration, not a policy.
        if self.total.saturating_sub(self.guard_band) < MIN_ATTEMPT_BUDGET {
            return invalid(format!(
                "total {}ms minus guard band {}ms leaves less than the minimum attempt budget \
                 {}ms: no attempt could ever start",
                self.total.as_millis(),
                self.guard_band.as_millis(),
                MIN_ATTEMPT_BUDGET.as_millis()
            ));
        }
        Ok(())
    }

    /// The hop invariant: `self.total + self.guard_band < parent.per_attempt`. The error names
    /// both budgets.
    pub fn fits_inside(&self, parent: &Budget) -> Result<(), BudgetError> {
        if self.total + self.guard_band < parent.per_attempt {
            Ok(())
        } else {
            Err(BudgetError::Inverted {
                child: self.name.clone(),
                child_total: self.total,
                child_guard_band: self.guard_band,
                parent: parent.name.clone(),
                parent_per_attempt: parent.per_attempt,
            })
        }
    }
}

/// Every budget on the synchronous path, parent first: client → edge-gateway → orchestrator →
/// entity-service. Built by [`hop_table`] with the lab's values, or by [`HopTable::new`] from
/// configuration — either way validated, so a process can refuse to start on an inverted table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopTable {
    /// `gateway.request`: what edge-gateway promises the end user, and its (single) attempt
    /// against the orchestrator.
    pub gateway: Budget,
    /// `orchestrator.dispatch`: what the orchestrator promises the gateway for one extract, and
    /// the window (`per_attempt`) inside which its one call into the entity client must fit.
    pub orchestrator: Budget,
    /// `entity.resolve`: the fixed entity client's budget against entity-service.
    pub entity: Budget,
}

impl HopTable {
    /// A validated table (each budget, then each hop).
    pub fn new(gateway: Budget, orchestrator: Budget, entity: Budget) -> Result<Self, BudgetError> {
        let t = Self {
            gateway,
            orchestrator,
            entity,
        };
        t.validate()?;
        Ok(t)
    }

    /// `(parent, child)` for every hop, outermost first.
    pub fn hops(&self) -> [(&Budget, &Budget); 2] {
        [
            (&self.gateway, &self.orchestrator),
            (&self.orchestrator, &self.entity),
        ]
    }

    /// Each budget is valid on its own, and no child can outlive its parent's attempt. The error
    /// of an inversion names both budgets.
    pub fn validate(&self) -> Result<(), BudgetError> {
        self.gateway.validate()?;
        self.orchestrator.validate()?;
        self.entity.validate()?;
        for (parent, child) in self.hops() {
            child.fits_inside(parent)?;
        }
        Ok(())
    }
}

/// The lab's hop table. Read top to bottom; each line's comment is why the number is what it is.
///
/// ```text
/// hop                     total  per_attempt  guard  attempts   child.total+guard < parent.per_attempt
/// gateway.request          3000         2800    200         1
/// orchestrator.dispatch    2600         2400    150         1   2600 + 150 = 2750 < 2800   (50 ms slack)
/// entity.resolve           1800          700     80         3   1800 +  80 = 1880 < 2400  (520 ms slack)
/// ```
pub fn hop_table() -> HopTable {
    let ms = Duration::from_millis;
    HopTable {
        gateway: Budget {
            name: "gateway.request".into(),
            // The end user's 3 s request budget, enforced at the edge (postmortem: `budget_ms: 3000`).
            total: ms(3000),
            // The gateway's single attempt at the orchestrator; 200 ms under total for writing
            // the user's response (postmortem "Code After", GatewayRequest).
            per_attempt: ms(2800),
            guard_band: ms(200),
            // Retries live at exactly one layer, and it is not this one: 3 gateway attempts × 3
            // entity attempts was the 9× of the incident.
            max_attempts: 1,
        },
        // The postmortem's test names `OrchestratorDispatch` but never prints its values; these
        // are ours. Both hops around it must satisfy the invariant, so it is squeezed from two
        // sides: its total + guard must fit in the gateway's 2800 ms attempt, and its per_attempt
        // must hold the whole entity budget (1800 + 80).
        orchestrator: Budget {
            name: "orchestrator.dispatch".into(),
            // 2600 + 150 = 2750 < 2800: the orchestrator answers (or gives up) 50 ms before the
            // gateway's attempt ends — 50 ms is the gateway ↔ orchestrator round trip on a
            // cluster network with room to spare (sub-millisecond on loopback).
            total: ms(2600),
            // The window for the one entity-client call of an extract: 1880 < 2400 leaves 520 ms
            // for the orchestrator's own work around that call (splitting, cache lookups,
            // assembly — single-digit ms normally, a few hundred under CPU saturation, the
            // postmortem's 1.98/2 cores). total - per_attempt = 200 ms more for the same.
            per_attempt: ms(2400),
            // Serializing and writing the extract response for a large document.
            guard_band: ms(150),
            // The orchestrator calls the entity client once per batch; the retries live inside
            // the entity client, the layer closest to the failure.
            max_attempts: 1,
        },
        entity: Budget {
            name: "entity.resolve".into(),
            // The postmortem's EntityResolve: at most two 700 ms attempts plus jittered backoff
            // and a short third (see the fixed sequence diagram: "entity unavailable @ 1,780ms").
            total: ms(1800),
            // ~5.5× entity-service's steady-state p99 of 120-130 ms: room for a bad moment, and
            // it still sheds at the incident's 640 ms p99 plus headroom, where 10 s shed nothing.
            per_attempt: ms(700),
            // Decoding a ResolveResponse and handing it back.
            guard_band: ms(80),
            // The one retrying layer; the retry budget caps what 3 attempts can add in aggregate.
            max_attempts: 3,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_table_is_not_inverted() {
        let t = hop_table();
        t.validate()
            .expect("the lab's hop table must be consistent");
        for (parent, child) in t.hops() {
            assert!(
                child.total + child.guard_band < parent.per_attempt,
                "{} must fit inside {}",
                child.name,
                parent.name
            );
            assert!(child.per_attempt <= child.total);
        }
    }

    #[test]
    fn hop_table_matches_the_postmortem_values() {
        let t = hop_table();
        let ms = |b: &Budget| {
            (
                b.total.as_millis(),
                b.per_attempt.as_millis(),
                b.guard_band.as_millis(),
                b.max_attempts,
            )
        };
        assert_eq!(ms(&t.gateway), (3000, 2800, 200, 1));
        assert_eq!(ms(&t.entity), (1800, 700, 80, 3));
    }

    #[test]
    fn hop_table_new_refuses_inversion_naming_both_budgets() {
        let t = hop_table();
        // The incident: the entity client's budget grows to 10 s under a 2.4 s parent attempt.
        let entity = Budget::from_millis("entity.resolve", 10_000, 10_000, 80, 3).unwrap();
        let err = HopTable::new(t.gateway.clone(), t.orchestrator.clone(), entity).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, BudgetError::Inverted { .. }), "{msg}");
        assert!(msg.contains("entity.resolve"), "{msg}");
        assert!(msg.contains("orchestrator.dispatch"), "{msg}");
        assert!(msg.contains("10080ms"), "{msg}");
        assert!(msg.contains("2400ms"), "{msg}");
    }

    #[test]
    fn hop_table_validate_refuses_inversion_at_the_upper_hop() {
        let mut t = hop_table();
        // Equal is already inverted: the child must end strictly before the parent's attempt.
        t.orchestrator.total = Duration::from_millis(2650);
        let msg = t.validate().unwrap_err().to_string();
        assert!(msg.contains("orchestrator.dispatch"), "{msg}");
        assert!(msg.contains("gateway.request"), "{msg}");
    }

    #[test]
    fn budget_new_refuses_inconsistent_values() {
        let ms = Duration::from_millis;
        let bad = [
            Budget::new("x", ms(0), ms(100), ms(0), 1),
            Budget::new("x", ms(1000), ms(0), ms(0), 1),
            Budget::new("x", ms(1000), ms(1001), ms(0), 1),
            Budget::new("x", ms(1000), ms(500), ms(0), 0),
            Budget::new("x", ms(200), ms(200), ms(100), 1),
            Budget::new(" ", ms(1000), ms(500), ms(0), 1),
        ];
        for b in bad {
            let err = b.unwrap_err();
            assert!(matches!(err, BudgetError::Invalid { .. }), "{err}");
        }
        Budget::new("ok", ms(1000), ms(1000), ms(0), 1).expect("per_attempt == total is fine");
    }
}
