//! The retry budget: a token bucket in the spirit of gRPC retry throttling and linkerd's budgets.
//!
//! LAB-FIX(retry-amplification): a retry is a *loan* against the recent success rate, not a
//! right. Healthy: successes keep the bucket full and the occasional retry is free. Failing:
//! nothing deposits, the bucket drains in about 100 retries, and every retry after that is
//! refused at once — amplification collapses from 3× (9× with the gateway's retries) to 1×
//! "automatically, in under a second, without a human, without a deploy, without a feature flag".
//! The postmortem calls it "the single control that would have prevented our outage on its own".
//! Used as deposit-on-success / withdraw-before-retry, as in linkerd's outbound retry.
//!
//! Tokens are kept in integer thousandths so that five 0.2 deposits make exactly one token
//! (in `f64`, 0.2 + 0.2 + 0.2 is 0.6000000000000001).

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::Gauge;

/// The bucket's shape. `Default` is the postmortem's `NewRetryBudget(100, 0.2)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudgetConfig {
    /// Size of the bucket, and its balance at start: how many retries a burst of failures may
    /// spend before retries switch off. 100 drains in well under a second at the incident's rate
    /// of failing requests, yet covers any realistic blip at steady state (~0.04% of requests retry).
    pub max_tokens: f64,
    /// Tokens one retry costs. 1: every retry is one extra request at entity-service.
    pub retry_cost: f64,
    /// Tokens one successful call earns. 0.2: sustained retries can never exceed ~20% of
    /// successes, so retries add at most 1.2× load even when the bucket is in use.
    pub success_credit: f64,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        Self {
            max_tokens: 100.0,
            retry_cost: 1.0,
            success_credit: 0.2,
        }
    }
}

impl RetryBudgetConfig {
    /// Consistent values, or why not.
    pub fn validate(&self) -> Result<(), String> {
        let finite = [self.max_tokens, self.retry_cost, self.success_credit]
            .iter()
            .all(|v| v.is_finite());
        if !finite {
            return Err("retry budget values must be finite".into());
        }
        if self.retry_cost <= 0.0 {
            return Err("retry_cost must be > 0: free retries are no budget".into());
        }
        if self.max_tokens < self.retry_cost {
            return Err(format!(
                "max_tokens {} is below retry_cost {}: no retry could ever be afforded",
                self.max_tokens, self.retry_cost
            ));
        }
        if self.success_credit < 0.0 {
            return Err("success_credit must be >= 0".into());
        }
        Ok(())
    }
}

const MILLI: f64 = 1000.0;

fn to_milli(v: f64) -> u64 {
    (v * MILLI).round() as u64
}

/// The bucket. Lock-free: one compare-and-swap per retry or success.
#[derive(Debug)]
pub struct RetryBudget {
    /// Current balance, thousandths of a token.
    milli: AtomicU64,
    /// Capacity, thousandths of a token.
    max: u64,
    /// Cost of one retry, thousandths.
    cost: u64,
    /// Credit of one success, thousandths.
    credit: u64,
    /// `entity_retry_budget_tokens`, set on every change (None in unit tests).
    gauge: Option<Gauge>,
}

impl RetryBudget {
    /// A full bucket. `cfg` must have passed [`RetryBudgetConfig::validate`].
    pub fn new(cfg: RetryBudgetConfig, gauge: Option<Gauge>) -> Self {
        let b = Self {
            milli: AtomicU64::new(to_milli(cfg.max_tokens)),
            max: to_milli(cfg.max_tokens),
            cost: to_milli(cfg.retry_cost).max(1),
            credit: to_milli(cfg.success_credit),
            gauge,
        };
        b.publish(b.max);
        b
    }

    /// Take the cost of one retry; `false` (and nothing taken) when the bucket cannot afford it.
    pub fn withdraw(&self) -> bool {
        let cost = self.cost;
        match self
            .milli
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_sub(cost))
        {
            Ok(before) => {
                self.publish(before - cost);
                true
            }
            Err(_) => false,
        }
    }

    /// Withdraw the cost of one retry as a reservation: the caller learns at once whether the
    /// retry is affordable (before sleeping towards it), and the token is only spent if the retry
    /// really goes out ([`Reservation::spend`]). A reservation dropped unspent — the retry was shed
    /// by another control, ran out of budget, or its caller went away during the backoff — gives
    /// the token back, so the bucket counts retries that happened, not retries that were planned.
    pub fn reserve(&self) -> Option<Reservation<'_>> {
        // `then`, not `then_some`: a reservation built eagerly and dropped would refund a token
        // that was never withdrawn.
        self.withdraw().then(|| Reservation {
            budget: self,
            spent: false,
        })
    }

    /// Give back the cost of one retry that never happened (up to the capacity).
    fn refund(&self) {
        let (cost, max) = (self.cost, self.max);
        let before = self
            .milli
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some((t + cost).min(max))
            })
            .unwrap_or_else(|t| t);
        self.publish((before + cost).min(max));
    }

    /// Credit one success, up to the capacity.
    pub fn deposit(&self) {
        let (credit, max) = (self.credit, self.max);
        let before = self
            .milli
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some((t + credit).min(max))
            })
            .unwrap_or_else(|t| t);
        self.publish((before + credit).min(max));
    }

    /// Current balance in tokens.
    pub fn tokens(&self) -> f64 {
        self.milli.load(Ordering::Acquire) as f64 / MILLI
    }

    fn publish(&self, milli: u64) {
        if let Some(g) = &self.gauge {
            g.set(milli as f64 / MILLI);
        }
    }
}

/// One retry's token, withdrawn but not yet spent: dropped unspent, it is refunded.
#[must_use = "dropping a reservation refunds its token at once"]
pub struct Reservation<'a> {
    budget: &'a RetryBudget,
    spent: bool,
}

impl Reservation<'_> {
    /// The retry goes out: the token stays spent.
    pub fn spend(mut self) {
        self.spent = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.spent {
            self.budget.refund();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_budget_reservation_refunds_unless_spent() {
        let b = RetryBudget::new(RetryBudgetConfig::default(), None);
        let r = b.reserve().expect("a full bucket affords a retry");
        assert_eq!(b.tokens(), 99.0, "reserved at once");
        drop(r);
        assert_eq!(b.tokens(), 100.0, "an unspent reservation is refunded");
        b.reserve().unwrap().spend();
        assert_eq!(b.tokens(), 99.0, "a spent one is not");
        while b.withdraw() {}
        assert!(b.reserve().is_none(), "an empty bucket reserves nothing");
        assert_eq!(b.tokens(), 0.0);
    }

    #[test]
    fn retry_budget_refuses_the_101st_retry_without_successes() {
        let b = RetryBudget::new(RetryBudgetConfig::default(), None);
        for i in 0..100 {
            assert!(b.withdraw(), "retry {} refused", i + 1);
        }
        assert!(!b.withdraw(), "the 101st retry must be refused");
        assert_eq!(b.tokens(), 0.0);
    }

    #[test]
    fn retry_budget_refills_one_token_per_five_successes() {
        let b = RetryBudget::new(RetryBudgetConfig::default(), None);
        while b.withdraw() {}
        for _ in 0..4 {
            b.deposit();
        }
        assert!(
            !b.withdraw(),
            "four successes (0.8 tokens) do not buy a retry"
        );
        b.deposit();
        assert_eq!(b.tokens(), 1.0);
        assert!(b.withdraw(), "five successes buy exactly one retry");
        assert!(!b.withdraw());
    }

    #[test]
    fn retry_budget_never_exceeds_its_capacity() {
        let b = RetryBudget::new(RetryBudgetConfig::default(), None);
        for _ in 0..1000 {
            b.deposit();
        }
        assert_eq!(b.tokens(), 100.0);
    }

    #[test]
    fn retry_budget_config_validate_refuses_free_or_unaffordable_retries() {
        let ok = RetryBudgetConfig::default();
        assert!(ok.validate().is_ok());
        for bad in [
            RetryBudgetConfig {
                retry_cost: 0.0,
                ..ok
            },
            RetryBudgetConfig {
                max_tokens: 0.5,
                ..ok
            },
            RetryBudgetConfig {
                success_credit: -1.0,
                ..ok
            },
            RetryBudgetConfig {
                max_tokens: f64::NAN,
                ..ok
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
