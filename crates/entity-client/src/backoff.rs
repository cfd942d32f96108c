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

/// How a wait is drawn inside its window `[0, upper_bound)` (a policy's choice; the lab's fix
/// is [`Jitter::Full`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Uniform over the whole window (AWS "full jitter", the postmortem's fix; gRPC's A6 retry
    /// design draws the same way).
    #[default]
    Full,
    /// Half the window fixed, half random (AWS "equal jitter"): never retries at once, spreads
    /// half as much.
    Equal,
    /// No randomness: the window's upper bound, in lock-step across replicas (what the
    /// `resilience.jitter` flag's off does, for ablation).
    None,
}

/// A backoff schedule, validated at construction (linkerd's `ExponentialBackoff::try_new`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Upper bound of the first retry's wait; doubles per retry.
    base: Duration,
    /// Upper bound of any wait, however many retries.
    cap: Duration,
    jitter: Jitter,
}

impl std::str::FromStr for Jitter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "full" => Ok(Jitter::Full),
            "equal" => Ok(Jitter::Equal),
            "none" => Ok(Jitter::None),
            other => Err(format!("jitter {other:?}: use full, equal or none")),
        }
    }
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
        Ok(Self {
            base,
            cap,
            jitter: Jitter::Full,
        })
    }

    /// The same schedule, its waits drawn the `jitter` way.
    pub fn with_jitter(self, jitter: Jitter) -> Self {
        Self { jitter, ..self }
    }

    /// The postmortem's schedule: base 40 ms, cap 400 ms, full jitter.
    pub fn entity() -> Self {
        Self {
            base: BASE_BACKOFF,
            cap: MAX_BACKOFF,
            jitter: Jitter::Full,
        }
    }

    pub fn cap(&self) -> Duration {
        self.cap
    }

    pub fn base(&self) -> Duration {
        self.base
    }

    pub fn jitter(&self) -> Jitter {
        self.jitter
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

    /// Equal jitter: `upper/2 + uniform[0, upper/2)`.
    pub fn equal_jitter(&self, retry: u32) -> Duration {
        let half = self.upper_bound(retry).as_nanos() as u64 / 2;
        if half == 0 {
            return self.upper_bound(retry);
        }
        Duration::from_nanos(half + rand::rng().random_range(0..half))
    }

    /// The wait before retry number `retry`, drawn the schedule's way — or, when the `jitter`
    /// control is off (ablation only), the deterministic upper bound, which puts every pod back
    /// in lock-step.
    pub fn delay(&self, retry: u32, jitter: bool) -> Duration {
        match (jitter, self.jitter) {
            (false, _) | (true, Jitter::None) => self.upper_bound(retry),
            (true, Jitter::Full) => self.full_jitter(retry),
            (true, Jitter::Equal) => self.equal_jitter(retry),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_jitter_kind_draws_inside_its_own_part_of_the_window() {
        let b = Backoff::entity();
        let upper = b.upper_bound(2); // 80 ms
        let equal = b.with_jitter(Jitter::Equal);
        let none = b.with_jitter(Jitter::None);
        for _ in 0..200 {
            let e = equal.delay(2, true);
            assert!(e >= upper / 2 && e < upper, "{e:?}");
            assert_eq!(none.delay(2, true), upper);
            assert!(b.delay(2, true) < upper);
            // The flag's off wins over any kind.
            assert_eq!(equal.delay(2, false), upper);
        }
    }

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
