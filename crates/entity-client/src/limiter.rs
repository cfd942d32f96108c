//! The concurrency limit in front of entity-service.
//!
//! "Rate limiting: per-tenant at the edge (we had this), plus per-dependency concurrency limits
//! internally (we did not). A semaphore in front of entity-service sized to its actual capacity
//! would have made this incident a partial degradation instead of a collapse."
//!
//! LAB-FIX(pool-exhaustion): the legacy client's per-host cap of 64 *queues* callers with no
//! deadline of the caller's, so a slow dependency turns into thousands of parked tasks, each
//! holding memory (the postmortem's 4,180 goroutines and 3.8 GB per pod). This limiter never
//! queues: when every permit is taken the attempt is shed at once (`try_acquire`) with
//! `Error::ConcurrencyLimited`, which costs the caller microseconds and the process nothing.

use prometheus::IntGauge;
use tokio::sync::{Semaphore, SemaphorePermit};

/// A non-queueing concurrency limit.
pub struct Limiter {
    /// One permit per attempt allowed in flight to entity-service at once.
    permits: Semaphore,
    /// The configured size, for errors and logs.
    limit: usize,
    /// `entity_pool_slots{state="in_use"}`, moved with inc/dec so it adds up with the legacy
    /// client's slots on a shared registry.
    in_use: IntGauge,
}

impl Limiter {
    /// `limit` must be >= 1 (checked by the client's constructor).
    pub fn new(limit: usize, in_use: IntGauge) -> Self {
        Self {
            permits: Semaphore::new(limit),
            limit,
            in_use,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A permit, or `None` at once when the limit is reached — no queue, no wait.
    pub fn try_acquire(&self) -> Option<LimiterPermit<'_>> {
        let permit = self.permits.try_acquire().ok()?;
        self.in_use.inc();
        Some(LimiterPermit {
            _permit: permit,
            in_use: &self.in_use,
        })
    }
}

/// Held for the duration of one attempt; the gauge goes down with it however the attempt ends
/// (answered, timed out, or dropped because the caller went away).
pub struct LimiterPermit<'a> {
    _permit: SemaphorePermit<'a>,
    in_use: &'a IntGauge,
}

impl Drop for LimiterPermit<'_> {
    fn drop(&mut self) {
        self.in_use.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_sheds_at_once_when_full_and_recovers_on_release() {
        let gauge = IntGauge::new("t", "t").unwrap();
        let l = Limiter::new(2, gauge.clone());
        let a = l.try_acquire().expect("first");
        let b = l.try_acquire().expect("second");
        assert_eq!(gauge.get(), 2);
        assert!(l.try_acquire().is_none(), "third is shed, not queued");
        drop(a);
        assert_eq!(gauge.get(), 1);
        assert!(l.try_acquire().is_some());
        drop(b);
    }
}
