//! Exponential backoff with full jitter.
//!
//! LAB-FIX(no-jitter): the legacy client sleeps exactly `200ms << attempt` — identical on every
//! pod, so every request that failed together retries together, "8,100 rps arriving in pulses,
//! with quiet gaps between ... a self-sustaining oscillator". Here a retry waits a uniformly
//! random time in `[0, min(cap, base · 2^(retry-1)))`: the AWS "full jitter" strategy the
//! postmortem adopts (`rand.Float64() * capped`), which spreads a wave of retries over the whole
//! window instead of clustering them at its edge, and so produces both fewer calls and earlier
//! completion than "exponential plus a small random offset".

use std::time::Duration;

use rand::Rng;

/// First retry waits up to 40 ms (postmortem `baseBackoff`): long enough to step out of a
/// momentary queue at entity-service, short against a 1800 ms total that must fit two 700 ms
/// attempts.
pub const BASE_BACKOFF: Duration = Duration::from_millis(40);
/// No retry waits more than 400 ms (postmortem `maxBackoff`). With 3 attempts the cap is never
/// reached (40, 80); it bounds the schedule if `max_attempts` is ever raised.
pub const MAX_BACKOFF: Duration = Duration::from_millis(400);

/// A backoff schedule, validated at construction (linkerd's `ExponentialBackoff::try_new`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Upper bound of the first retry's wait; doubles per retry.
    base: Duration,
    /// Upper bound of any wait, however many retries.
    cap: Duration,
}

impl Backoff {
    /// `base > 0` and `cap >= base`, or an error saying which.
    pub fn try_new(base: Duration, cap: Duration) -> Result<Self, String> {
        if base.is_zero() {
            return Err("backoff base must be > 0 (a zero wait is a lock-step retry)".into());
        }
        if cap < base {
            return Err(format!(
                "backoff cap {}ms is below its base {}ms",
                cap.as_millis(),
                base.as_millis()
            ));
        }
        Ok(Self { base, cap })
    }

    /// The postmortem's schedule: base 40 ms, cap 400 ms.
    pub fn entity() -> Self {
        Self {
            base: BASE_BACKOFF,
            cap: MAX_BACKOFF,
        }
    }

    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// `min(cap, base · 2^(retry-1))` for retry 1, 2, ... (retry 0 — the first attempt — and
    /// retry 1 both give `base`). Saturates instead of overflowing for absurd retry numbers.
    pub fn upper_bound(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.base
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.cap)
            .min(self.cap)
    }

    /// Full jitter: uniform in `[0, upper_bound(retry))`, drawn in whole nanoseconds so the upper
    /// bound itself is never returned.
    pub fn full_jitter(&self, retry: u32) -> Duration {
        let upper = self.upper_bound(retry).as_nanos() as u64;
        if upper == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(rand::rng().random_range(0..upper))
    }

    /// The wait before retry number `retry`: full jitter, or — when the `jitter` control is off,
    /// for ablation only — the deterministic upper bound, which puts every pod back in lock-step.
    pub fn delay(&self, retry: u32, jitter: bool) -> Duration {
        if jitter {
            self.full_jitter(retry)
        } else {
            self.upper_bound(retry)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_try_new_refuses_zero_base_and_low_cap() {
        assert!(Backoff::try_new(Duration::ZERO, MAX_BACKOFF).is_err());
        assert!(Backoff::try_new(BASE_BACKOFF, Duration::from_millis(10)).is_err());
        assert!(Backoff::try_new(BASE_BACKOFF, MAX_BACKOFF).is_ok());
    }

    #[test]
    fn backoff_upper_bound_doubles_then_caps() {
        let b = Backoff::entity();
        let got: Vec<u128> = (1..=6).map(|r| b.upper_bound(r).as_millis()).collect();
        assert_eq!(got, vec![40, 80, 160, 320, 400, 400]);
        assert_eq!(b.upper_bound(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn backoff_full_jitter_draws_spread_over_the_window() {
        let b = Backoff::entity();
        let retry = 10; // at the cap: the window is [0, 400 ms)
        let draws: Vec<f64> = (0..1000)
            .map(|_| b.full_jitter(retry).as_secs_f64() * 1000.0)
            .collect();
        assert!(
            draws.iter().all(|d| (0.0..400.0).contains(d)),
            "outside [0, cap)"
        );
        let mut distinct = draws.clone();
        distinct.sort_by(|a, b| a.partial_cmp(b).unwrap());
        distinct.dedup();
        assert!(
            distinct.len() > 990,
            "lock-step: {} distinct",
            distinct.len()
        );
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let sd =
            (draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64).sqrt();
        // Uniform on [0, 400): mean 200, sd 115.5. Floors far below, so this never flakes.
        assert!((150.0..250.0).contains(&mean), "mean {mean}");
        assert!(sd > 80.0, "sd {sd}");
        // p95 inside the window, and the window actually used (not clustered at one edge).
        let p95 = distinct[(distinct.len() as f64 * 0.95) as usize];
        assert!((300.0..400.0).contains(&p95), "p95 {p95}");
    }

    #[test]
    fn backoff_delay_without_jitter_is_the_upper_bound() {
        let b = Backoff::entity();
        assert_eq!(b.delay(1, false), Duration::from_millis(40));
        assert_eq!(b.delay(2, false), Duration::from_millis(80));
        assert!(b.delay(1, true) < Duration::from_millis(40));
    }
}
