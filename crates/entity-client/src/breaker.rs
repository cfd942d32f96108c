//! The circuit breaker, with its states named by what they DO: [`BreakerState::Admitting`],
//! [`BreakerState::Shedding`], [`BreakerState::Probing`] — never "open"/"closed", which mean
//! opposite things to an electrician and to a door.
//!
//! LAB-FIX(pool-exhaustion): with the legacy client a slow entity-service filled every per-host
//! slot, then every task, then the pod's memory. The breaker (together with the limiter) turns
//! that slow cascade into fast, cheap refusals. Cancellation stops individual abandoned
//! requests; the breaker stops us from *starting* requests against a dependency we already know
//! is failing. "During the incident, a breaker would have converted a slow cascade into a fast,
//! clean, obvious failure."
//!
//! ```text
//!             failures/total >= 0.5 over >= 20 outcomes in the rolling window
//!  Admitting ───────────────────────────────────────────────────────────────▶ Shedding
//!      ▲                                                                     │    ▲
//!      │ 3 probes succeeded                                 5 s have passed  │    │ any probe
//!      └───────────────────────────── Probing ◀──────────────────────────────┘    │ failed
//!                                        └────────────────────────────────────────┘
//! ```
//!
//! Outcomes come with a [`Permit`], stamped with the breaker's *generation* (bumped at every
//! transition): an attempt admitted before a transition reports into nothing, so a slow request
//! from the old Admitting phase cannot count as a probe. A probe permit dropped without an outcome
//! (the caller went away, the limiter shed it) gives its probe slot back, so Probing cannot wedge.

use std::sync::Mutex;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::time::Instant;

/// The breaker's thresholds. `Default` is the postmortem's `BreakerConfig{FailureRatio: 0.5,
/// MinRequests: 20, OpenFor: 5s, HalfOpenMax: 3}` plus a window it does not state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Share of failed outcomes in the window at which the breaker starts shedding. 0.5: half the
    /// calls failing is no blip, and retrying into it only adds load.
    pub failure_ratio: f64,
    /// Fewest outcomes in the window before the ratio means anything. 20: below that, two
    /// failures out of three would trip a breaker on a quiet pod.
    pub min_requests: u32,
    /// Length of the rolling window of outcomes (10 buckets). 10 s: long enough to gather 20
    /// outcomes on a quiet pod, short enough that a blip a minute ago does not count.
    pub window: Duration,
    /// How long the breaker sheds before probing. 5 s: the time the postmortem gives entity-service
    /// to recover; requests meanwhile fail in microseconds instead of queueing.
    pub shedding_for: Duration,
    /// Probes admitted while probing; all must succeed to admit everyone again. 3: one success
    /// could be luck, three in a row is a recovered dependency.
    pub probes: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_ratio: 0.5,
            min_requests: 20,
            window: Duration::from_secs(10),
            shedding_for: Duration::from_secs(5),
            probes: 3,
        }
    }
}

impl BreakerConfig {
    /// Consistent values, or why not.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return Err(format!(
                "failure_ratio {} must be in (0, 1]",
                self.failure_ratio
            ));
        }
        if self.min_requests == 0 {
            return Err("min_requests must be >= 1".into());
        }
        if self.window < Duration::from_millis(10) {
            return Err("window must be >= 10 ms (it is cut into 10 buckets)".into());
        }
        if self.shedding_for.is_zero() {
            return Err("shedding_for must be > 0".into());
        }
        if self.probes == 0 {
            return Err("probes must be >= 1: a breaker that never probes never recovers".into());
        }
        Ok(())
    }
}

/// What the breaker currently does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Every call goes through; outcomes are counted.
    Admitting,
    /// A few probe calls go through; the rest are shed.
    Probing,
    /// Every call is refused at once (`Error::BreakerOpen`).
    Shedding,
}

impl BreakerState {
    /// The `entity_breaker_state` encoding: 0 admitting, 1 probing, 2 shedding — ordered by
    /// severity so `max()` over pods reads as "the worst pod".
    pub fn gauge_value(self) -> i64 {
        match self {
            BreakerState::Admitting => 0,
            BreakerState::Probing => 1,
            BreakerState::Shedding => 2,
        }
    }
}

/// The breaker. One mutex, never held across an await.
pub struct Breaker {
    cfg: BreakerConfig,
    inner: Mutex<Inner>,
    /// `entity_breaker_state`, set at every transition (None in unit tests).
    gauge: Option<IntGauge>,
}

struct Inner {
    phase: Phase,
    /// Bumped at every transition; permits from an earlier generation report into nothing.
    generation: u64,
    window: Window,
}

enum Phase {
    Admitting,
    Shedding { until: Instant },
    Probing { in_flight: u32, succeeded: u32 },
}

impl Breaker {
    /// An admitting breaker. `cfg` must have passed [`BreakerConfig::validate`].
    pub fn new(cfg: BreakerConfig, gauge: Option<IntGauge>) -> Self {
        let b = Self {
            cfg,
            inner: Mutex::new(Inner {
                phase: Phase::Admitting,
                generation: 0,
                window: Window::new(cfg.window, Instant::now()),
            }),
            gauge,
        };
        b.publish(BreakerState::Admitting);
        b
    }

    /// A permit to make one call, or `None` when the breaker sheds it.
    pub fn admit(&self) -> Option<Permit<'_>> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        self.advance(inner, Instant::now());
        let generation = inner.generation;
        match &mut inner.phase {
            Phase::Admitting => Some(Permit::new(self, generation, false)),
            Phase::Shedding { .. } => None,
            Phase::Probing {
                in_flight,
                succeeded,
            } => {
                if *in_flight + *succeeded < self.cfg.probes {
                    *in_flight += 1;
                    Some(Permit::new(self, generation, true))
                } else {
                    None
                }
            }
        }
    }

    /// The current state (moving Shedding to Probing if its time is up).
    pub fn state(&self) -> BreakerState {
        let mut inner = self.lock();
        self.advance(&mut inner, Instant::now());
        phase_state(&inner.phase)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn advance(&self, inner: &mut Inner, now: Instant) {
        if let Phase::Shedding { until } = inner.phase {
            if now >= until {
                self.transition(
                    inner,
                    Phase::Probing {
                        in_flight: 0,
                        succeeded: 0,
                    },
                );
            }
        }
    }

    fn transition(&self, inner: &mut Inner, to: Phase) {
        inner.phase = to;
        inner.generation += 1;
        inner.window.clear();
        self.publish(phase_state(&inner.phase));
    }

    fn publish(&self, state: BreakerState) {
        if let Some(g) = &self.gauge {
            g.set(state.gauge_value());
        }
    }

    fn record(&self, generation: u64, ok: bool) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if inner.generation != generation {
            return;
        }
        let now = Instant::now();
        match &mut inner.phase {
            Phase::Admitting => {
                inner.window.record(now, ok);
                let (total, failed) = inner.window.totals(now);
                if !ok
                    && total >= self.cfg.min_requests
                    && failed as f64 >= self.cfg.failure_ratio * total as f64
                {
                    let until = now + self.cfg.shedding_for;
                    self.transition(inner, Phase::Shedding { until });
                }
            }
            Phase::Probing {
                in_flight,
                succeeded,
            } => {
                *in_flight = in_flight.saturating_sub(1);
                if !ok {
                    let until = now + self.cfg.shedding_for;
                    self.transition(inner, Phase::Shedding { until });
                } else {
                    *succeeded += 1;
                    if *succeeded >= self.cfg.probes {
                        self.transition(inner, Phase::Admitting);
                    }
                }
            }
            // No permits are issued while shedding, and a permit from before has another generation.
            Phase::Shedding { .. } => {}
        }
    }

    fn release(&self, generation: u64) {
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        if let Phase::Probing { in_flight, .. } = &mut inner.phase {
            *in_flight = in_flight.saturating_sub(1);
        }
    }
}

fn phase_state(p: &Phase) -> BreakerState {
    match p {
        Phase::Admitting => BreakerState::Admitting,
        Phase::Shedding { .. } => BreakerState::Shedding,
        Phase::Probing { .. } => BreakerState::Probing,
    }
}

/// Permission for one call. Report its outcome with [`Permit::success`] or [`Permit::failure`];
/// dropping it unreported (caller gone, shed downstream) counts as neither.
pub struct Permit<'a> {
    breaker: &'a Breaker,
    generation: u64,
    probe: bool,
    reported: bool,
}

impl<'a> Permit<'a> {
    fn new(breaker: &'a Breaker, generation: u64, probe: bool) -> Self {
        Self {
            breaker,
            generation,
            probe,
            reported: false,
        }
    }

    /// The dependency answered usefully (2xx, or a 4xx other than 429: it is healthy, the
    /// request was wrong).
    pub fn success(mut self) {
        self.reported = true;
        self.breaker.record(self.generation, true);
    }

    /// The dependency failed: 5xx, 429, a timeout, a transport error.
    pub fn failure(mut self) {
        self.reported = true;
        self.breaker.record(self.generation, false);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.reported && self.probe {
            self.breaker.release(self.generation);
        }
    }
}

/// Outcomes in a rolling time window: 10 buckets of `window / 10`.
struct Window {
    buckets: Vec<Bucket>,
    width: Duration,
    origin: Instant,
}

#[derive(Clone, Copy, Default)]
struct Bucket {
    /// Which bucket-width slot since `origin` this bucket counts (None: never used).
    slot: Option<u64>,
    ok: u32,
    failed: u32,
}

const BUCKETS: u64 = 10;

impl Window {
    fn new(window: Duration, origin: Instant) -> Self {
        Self {
            buckets: vec![Bucket::default(); BUCKETS as usize],
            width: window / BUCKETS as u32,
            origin,
        }
    }

    fn slot(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.origin).as_nanos() / self.width.as_nanos().max(1))
            as u64
    }

    fn record(&mut self, now: Instant, ok: bool) {
        let slot = self.slot(now);
        let b = &mut self.buckets[(slot % BUCKETS) as usize];
        if b.slot != Some(slot) {
            *b = Bucket {
                slot: Some(slot),
                ok: 0,
                failed: 0,
            };
        }
        if ok {
            b.ok += 1;
        } else {
            b.failed += 1;
        }
    }

    /// (outcomes, failures) in the last `window`.
    fn totals(&self, now: Instant) -> (u32, u32) {
        let current = self.slot(now);
        self.buckets
            .iter()
            .filter(|b| matches!(b.slot, Some(s) if s <= current && current - s < BUCKETS))
            .fold((0, 0), |(t, f), b| (t + b.ok + b.failed, f + b.failed))
    }

    fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(BreakerConfig::default(), None)
    }

    fn fail(b: &Breaker, n: u32) {
        for _ in 0..n {
            b.admit().expect("admitted").failure();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_sheds_after_half_of_twenty_fail() {
        let b = breaker();
        // 10 successes, 9 failures: 19 outcomes, below the minimum.
        for _ in 0..10 {
            b.admit().unwrap().success();
        }
        fail(&b, 9);
        assert_eq!(b.state(), BreakerState::Admitting);
        // The 20th outcome, a failure: 10/20 = 0.5 → shedding.
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Shedding);
        assert!(b.admit().is_none(), "shedding admits nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_ignores_failures_that_left_the_window() {
        let b = breaker();
        fail(&b, 19);
        tokio::time::sleep(Duration::from_secs(11)).await;
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Admitting, "old failures expired");
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_goes_admitting_shedding_probing_admitting() {
        let b = breaker();
        fail(&b, 20);
        assert_eq!(b.state(), BreakerState::Shedding);
        tokio::time::sleep(Duration::from_millis(4999)).await;
        assert_eq!(b.state(), BreakerState::Shedding);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(b.state(), BreakerState::Probing);
        let probes: Vec<_> = (0..3).map(|_| b.admit().expect("probe")).collect();
        assert!(b.admit().is_none(), "only 3 probes while probing");
        let mut probes = probes.into_iter();
        probes.next().unwrap().success();
        probes.next().unwrap().success();
        assert_eq!(b.state(), BreakerState::Probing);
        probes.next().unwrap().success();
        assert_eq!(b.state(), BreakerState::Admitting);
        assert!(b.admit().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_goes_probing_to_shedding_on_a_failed_probe() {
        let b = breaker();
        fail(&b, 20);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let p1 = b.admit().expect("probe");
        let p2 = b.admit().expect("probe");
        p1.success();
        p2.failure();
        assert_eq!(b.state(), BreakerState::Shedding);
        assert!(b.admit().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_probe_dropped_unreported_frees_its_slot() {
        let b = breaker();
        fail(&b, 20);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let held: Vec<_> = (0..3).map(|_| b.admit().unwrap()).collect();
        assert!(b.admit().is_none());
        drop(held); // e.g. every caller went away mid-probe
        assert!(b.admit().is_some(), "probe slots come back");
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_ignores_outcomes_from_an_earlier_phase() {
        let b = breaker();
        let stale = b.admit().unwrap(); // admitted while admitting...
        fail(&b, 20); // ...the breaker trips meanwhile
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(b.state(), BreakerState::Probing);
        stale.success(); // must not count as a probe success
        let probes: Vec<_> = (0..3).map(|_| b.admit().expect("3 probes still")).collect();
        drop(probes);
    }

    #[test]
    fn breaker_gauge_encoding_is_ordered_by_severity() {
        assert_eq!(BreakerState::Admitting.gauge_value(), 0);
        assert_eq!(BreakerState::Probing.gauge_value(), 1);
        assert_eq!(BreakerState::Shedding.gauge_value(), 2);
    }
}
