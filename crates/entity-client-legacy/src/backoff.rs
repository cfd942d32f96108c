//! The wait between attempts — the postmortem's `backoff(attempt)`.

use std::time::Duration;

/// Base of the doubling: `time.Duration(1<<attempt) * 200 * time.Millisecond`.
pub const BASE: Duration = Duration::from_millis(200);

// LAB-BUG(no-jitter): "200 ms, 400 ms, 800 ms. Identical on every pod. No jitter." Every request
// that failed in the same instant retries in the same instant, on every pod: "not 8,100 rps
// smeared evenly — 8,100 rps arriving in pulses, with quiet gaps between", which let
// entity-service recover just enough to be knocked over by the next pulse. The caller sleeps this
// after EVERY failed attempt, the last one included (`time.Sleep(backoff(attempt)); continue`),
// so a request that will fail anyway fails 800 ms later still.
/// `200ms << attempt` for attempt 0, 1, 2, ... (saturating far beyond any real attempt count).
pub fn backoff(attempt: u32) -> Duration {
    BASE.checked_mul(1u32 << attempt.min(20))
        .unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_200_400_800_every_time() {
        for _ in 0..3 {
            let got: Vec<u128> = (0..3).map(|a| backoff(a).as_millis()).collect();
            assert_eq!(
                got,
                vec![200, 400, 800],
                "deterministic: the same on every call"
            );
        }
    }
}
