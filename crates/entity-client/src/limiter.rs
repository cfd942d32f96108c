//! The concurrency limit in front of entity-service.
//!
//! "Rate limiting: per-tenant at the edge (we had this), plus per-dependency concurrency limits
//! internally (we did not). A semaphore in front of entity-service sized to its actual capacity
//! would have made this incident a partial degradation instead of a collapse."
//!
//! LAB-FIX(pool-exhaustion): the legacy client's per-host cap of 64 *queues* callers with no
//! deadline of the caller's, so a slow dependency turns into thousands of parked tasks, each
//! holding memory (the postmortem's 4,180 goroutines and 3.8 GB per pod). This limiter never
//! queues past the attempt's own budget: the named policies (static, AIMD, Vegas) shed at once
//! when every permit is taken (`Error::ConcurrencyLimited`, microseconds for the caller, nothing
//! for the process); the default ceiling waits for a permit at most as long as the attempt may
//! still take (below).
//!
//! Three sizes, chosen per request (`Controls::adaptive_limit`):
//! - **static**: `max_concurrency` permits, the postmortem's "semaphore sized to its capacity".
//!   By Little's law it also sheds a dependency that is slow but not overloaded: 37.5 rps per
//!   orchestrator × 640 ms is 24 attempts in flight, over a static 16.
//! - **adaptive** (AIMD, as Netflix's concurrency-limits `AIMDLimit` and vector's adaptive request
//!   concurrency): start at `max_concurrency`; every attempt answered in time while the limit
//!   was at least half used adds `1 / limit` (one permit per limit's worth of answers — about one
//!   per round trip, TCP's congestion avoidance); every attempt that timed out or came back as an
//!   overload (a 5xx, a refused connection) multiplies it by [`BACKOFF`]. Bounded by
//!   `[1, max_concurrency_adaptive]`. A slow but healthy dependency earns the permits its latency
//!   needs; an overloaded one loses them as fast as it fails.
//! - **Vegas**: [`Adapt::Vegas`].
//! - **callee** ([`Adapt::Callee`], the default): the capacity is sized where it is known.
//!   entity-service admits a budgeted request only when the wait for one of its PostgreSQL
//!   connections and the query fit in the caller's budget, and refuses at once (503, retryable
//!   on another replica) what cannot (`services/entity-service/src/admission.rs`). This side
//!   keeps a ceiling for its own memory only: `max_concurrency_adaptive` (the postmortem's 64
//!   connection slots per host) for each entity-service endpoint it knows, so it follows the
//!   endpoint set instead of a per-replica share guessed for one fleet size. At the ceiling an
//!   attempt **waits for a slot within its own budget** ([`Limiter::acquire_ceiling_within`]),
//!   as the postmortem's Code After does: it keeps `MaxConnsPerHost: 64`, and Go's transport
//!   waits for a connection only as long as the request's context, whose per-attempt deadline
//!   covers the wait. The bug was the wait with no deadline and no cancellation (10 s a
//!   try, the caller long gone), not the wait: shedding at once here refused what a machine
//!   stalled for a few hundred milliseconds would have answered (issue 27's soak: 135 of the
//!   fixed client's 147 refusals in 6 minutes were this ceiling's, where the buggy client,
//!   queueing, answered every request). The waiters are bounded by the attempt's budget and
//!   dropped with their caller; `entity_pool_slots{state="waiting"}` counts them.
//!
//! LAB-FIX(tenant-share): the ceiling is shared between tenants (`Controls::tenant_share`, flag
//! `resilience.tenant_fairness`). One tenant's huge documents could hold every permit and leave
//! every other tenant `concurrency_limited` (issue 28). As Netflix's partitioned limiter
//! guarantees each partition its share, a tenant holding fewer attempts than its share of the
//! ceiling (the ceiling over the tenants with attempts in flight, itself included) is admitted
//! even when the ceiling is reached; a tenant at or over its share is shed there as before. The
//! ceiling bounds this side's memory, not entity-service's capacity (entity-service sizes that,
//! and takes tenants in turn), so the guarantee may overshoot it, never past twice its size.
//! While one tenant is alone it may use the whole ceiling: nothing is reserved for nobody.
//!
//! Measured (docs/reports/noharm-slow-not-overloaded.md): neither AIMD nor Vegas won both the
//! slow but healthy dependency and the real stale plan; the static limit (16) lost the first,
//! and shed a cold orchestrator's burst during a routine rollout (issue 27). The static limit
//! stays as the named policy `off` of `resilience.concurrency_adaptive`, for comparison.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use prometheus::IntGauge;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};

/// The multiplicative decrease on an overload signal: Netflix's AIMDLimit default (0.9), also
/// vector's adaptive concurrency `decrease_ratio`.
pub const BACKOFF: f64 = 0.9;

/// A non-queueing concurrency limit.
pub struct Limiter {
    /// One permit per attempt allowed in flight to entity-service at once (static size).
    permits: Semaphore,
    /// The configured size, for errors and logs; the adaptive limit's starting point.
    limit: usize,
    /// [`Adapt::Callee`]'s ceiling: `max_concurrency_adaptive` per entity-service endpoint,
    /// and who holds its permits.
    ceiling: Mutex<Holders>,
    ceiling_size: usize,
    /// One wake-up per ceiling permit given back, for an attempt waiting at the ceiling.
    released: Notify,
    /// `entity_pool_slots{state="waiting"}` (inc/dec), when the client registered it.
    waiting: Option<IntGauge>,
    adaptive: Adaptive,
    /// `entity_pool_slots{state="in_use"}`, moved with inc/dec so it adds up with the legacy
    /// client's slots on a shared registry.
    in_use: IntGauge,
    /// `entity_concurrency_limit`: the size of whichever limit admitted the last attempt.
    current: IntGauge,
}

/// The ceiling's permits in use, in all and per tenant (a tenant appears while it holds any).
#[derive(Default)]
struct Holders {
    total: usize,
    by_tenant: HashMap<i64, usize>,
}

struct Adaptive {
    limit: Mutex<f64>,
    in_flight: AtomicUsize,
    max: f64,
    /// Vegas: the smallest round trip seen in the current and the previous [`RTT_WINDOW`]
    /// (the no-load round trip, re-learned as conditions change).
    rtt: Mutex<RttFloor>,
}

/// How long a minimum round trip counts as "no load": long enough to hold an unqueued answer at
/// 37.5 attempts a second per orchestrator (~75 of them), short enough that a dependency that
/// became slower for everyone (injected latency, a slower plan at low load) is re-learned in
/// seconds rather than taken for a queue forever.
pub const RTT_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

struct RttFloor {
    current: Option<std::time::Duration>,
    previous: Option<std::time::Duration>,
    since: tokio::time::Instant,
}

impl RttFloor {
    fn observe(&mut self, rtt: std::time::Duration) -> std::time::Duration {
        if self.since.elapsed() >= RTT_WINDOW {
            self.previous = self.current.take();
            self.since = tokio::time::Instant::now();
        }
        self.current = Some(self.current.map_or(rtt, |c| c.min(rtt)));
        self.previous
            .map_or(rtt, |p| p.min(self.current.unwrap_or(rtt)))
    }
}

/// Which size adapts, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapt {
    /// Additive increase per answer, ×[`BACKOFF`] per overload (timeouts and 5xx only).
    Aimd,
    /// TCP Vegas, as Netflix's `VegasLimit`: the queue the limit builds is estimated from the
    /// round trip, `limit × (1 − rtt_noload / rtt)`; below `3·log10(limit)` it grows, above
    /// `6·log10(limit)` it shrinks, by `log10(limit)` per limit's worth of answers (about one
    /// step per round trip); an overload shrinks it as well. A dependency that got slower for
    /// everyone (no queue: every round trip near the floor) keeps its permits; one that
    /// queues loses them before the timeouts start.
    Vegas,
    /// Not sized here: entity-service admits what fits its pool within the caller's budget and
    /// refuses the rest at once; this side only caps its own in-flight attempts at
    /// `max_concurrency_adaptive` per endpoint (memory, never capacity).
    Callee,
}

/// What an attempt's outcome says about entity-service's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Answered in time (a 2xx, or a 4xx: the request was wrong, the service is fine).
    Answered,
    /// Timed out, or a 5xx or transport failure: a sign of overload.
    Overloaded,
}

impl Limiter {
    /// `limit` must be >= 1 and `adaptive_max >= limit` (checked by the client's constructor);
    /// `endpoints`: the entity-service endpoints this client calls (at least one).
    pub fn new(
        limit: usize,
        adaptive_max: usize,
        endpoints: usize,
        in_use: IntGauge,
        current: IntGauge,
    ) -> Self {
        let ceiling_size = adaptive_max.max(limit) * endpoints.max(1);
        // Before the first attempt: the size the default controls use (`Controls::default()`:
        // the callee sizes the capacity, this side caps at the ceiling). Which policy the flags
        // choose is known only per attempt, so under another one the gauge reads this until
        // the first attempt.
        current.set(match crate::Controls::default().adaptive_limit {
            Some(Adapt::Callee) => ceiling_size,
            _ => limit,
        } as i64);
        Self {
            permits: Semaphore::new(limit),
            limit,
            ceiling: Mutex::new(Holders::default()),
            ceiling_size,
            released: Notify::new(),
            waiting: None,
            adaptive: Adaptive {
                limit: Mutex::new(limit as f64),
                in_flight: AtomicUsize::new(0),
                max: adaptive_max.max(limit) as f64,
                rtt: Mutex::new(RttFloor {
                    current: None,
                    previous: None,
                    since: tokio::time::Instant::now(),
                }),
            },
            in_use,
            current,
        }
    }

    /// Count the attempts waiting at the ceiling in `waiting` (`entity_pool_slots{state="waiting"}`).
    pub fn with_waiting_gauge(mut self, waiting: IntGauge) -> Self {
        self.waiting = Some(waiting);
        self
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The adaptive limit's current size (whole permits).
    pub fn adaptive_limit(&self) -> usize {
        *self.adaptive.limit.lock().unwrap() as usize
    }

    /// A permit of the static limit, or `None` at once when it is reached — no queue, no wait.
    pub fn try_acquire(&self) -> Option<LimiterPermit<'_>> {
        let permit = self.permits.try_acquire().ok()?;
        self.in_use.inc();
        self.current.set(self.limit as i64);
        Some(LimiterPermit {
            kind: Kind::Static(permit),
            limiter: self,
            signal: None,
        })
    }

    /// A permit of the adaptive limit, or `None` at once when it is reached.
    pub fn try_acquire_adaptive(&self) -> Option<LimiterPermit<'_>> {
        self.try_acquire_adapting(Adapt::Aimd)
    }

    /// [`Adapt::Callee`]'s ceiling (`max_concurrency_adaptive` × endpoints).
    pub fn ceiling(&self) -> usize {
        self.ceiling_size
    }

    /// A permit of the adaptive limit, adapted by `how`, or `None` at once when it is reached.
    /// Under [`Adapt::Callee`] the ceiling is shared as [`Self::try_acquire_ceiling`] with
    /// tenant 0 and no share: use that one where the tenant is known.
    pub fn try_acquire_adapting(&self, how: Adapt) -> Option<LimiterPermit<'_>> {
        if how == Adapt::Callee {
            return self.try_acquire_ceiling(0, false);
        }
        let a = &self.adaptive;
        let limit = (*a.limit.lock().unwrap() as usize).max(1);
        let mut now = a.in_flight.load(Ordering::Acquire);
        loop {
            if now >= limit {
                return None;
            }
            match a.in_flight.compare_exchange_weak(
                now,
                now + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => now = actual,
            }
        }
        self.in_use.inc();
        self.current.set(limit as i64);
        Some(LimiterPermit {
            kind: Kind::Adaptive {
                in_flight_at_start: now + 1,
                how,
                started: tokio::time::Instant::now(),
            },
            limiter: self,
            signal: None,
        })
    }

    /// A permit of [`Adapt::Callee`]'s ceiling for `tenant`, or `None` at once. With `share`
    /// (LAB-FIX(tenant-share)), a tenant holding fewer than its share — the ceiling over the
    /// tenants holding permits, itself included, and at least one — is admitted past the ceiling, up to twice it;
    /// without, everyone is shed at the ceiling.
    pub fn try_acquire_ceiling(&self, tenant: i64, share: bool) -> Option<LimiterPermit<'_>> {
        let mut h = self.ceiling.lock().unwrap();
        let held = h.by_tenant.get(&tenant).copied().unwrap_or(0);
        let admitted = h.total < self.ceiling_size
            || (share && h.total < 2 * self.ceiling_size && {
                let tenants = h.by_tenant.len() + usize::from(held == 0);
                held < (self.ceiling_size / tenants).max(1)
            });
        if !admitted {
            return None;
        }
        h.total += 1;
        *h.by_tenant.entry(tenant).or_default() += 1;
        drop(h);
        self.in_use.inc();
        self.current.set(self.ceiling_size as i64);
        Some(LimiterPermit {
            kind: Kind::Ceiling(tenant),
            limiter: self,
            signal: None,
        })
    }

    /// A permit of [`Adapt::Callee`]'s ceiling as [`Self::try_acquire_ceiling`], waiting for one
    /// to be given back for at most `wait` (the attempt's own budget, less what the request
    /// needs): `None` only when none was free in that time. Cancel-safe: dropped while waiting,
    /// the attempt leaves the queue, and a wake-up it had been handed goes to the next waiter.
    pub async fn acquire_ceiling_within(
        &self,
        tenant: i64,
        share: bool,
        wait: std::time::Duration,
    ) -> Option<LimiterPermit<'_>> {
        if let Some(p) = self.try_acquire_ceiling(tenant, share) {
            return Some(p);
        }
        if wait.is_zero() {
            return None;
        }
        let _waiting = self.waiting.as_ref().map(|g| {
            g.inc();
            WaitingGuard(g)
        });
        let until = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the check, so a permit given back between the two is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(p) = self.try_acquire_ceiling(tenant, share) {
                return Some(p);
            }
            if tokio::time::timeout_at(until, released).await.is_err() {
                // One last look: a permit given back as the wait ended is still ours to take.
                return self.try_acquire_ceiling(tenant, share);
            }
        }
    }

    /// The ceiling's permits `tenant` holds now.
    pub fn held_by(&self, tenant: i64) -> usize {
        let h = self.ceiling.lock().unwrap();
        h.by_tenant.get(&tenant).copied().unwrap_or(0)
    }
}

/// Decrements the waiting gauge when the wait ends, however it ends (a permit, the wait's end,
/// or the caller dropping the attempt).
struct WaitingGuard<'a>(&'a IntGauge);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

enum Kind<'a> {
    Static(#[allow(dead_code)] SemaphorePermit<'a>),
    /// [`Adapt::Callee`]'s ceiling, held for this tenant.
    Ceiling(i64),
    Adaptive {
        in_flight_at_start: usize,
        how: Adapt,
        started: tokio::time::Instant,
    },
}

/// Held for the duration of one attempt; the gauge goes down with it however the attempt ends
/// (answered, timed out, or dropped because the caller went away — which says nothing about
/// entity-service's capacity, so an adaptive permit dropped without a [`Signal`] leaves the limit
/// as it was).
pub struct LimiterPermit<'a> {
    kind: Kind<'a>,
    limiter: &'a Limiter,
    signal: Option<Signal>,
}

impl LimiterPermit<'_> {
    /// What the attempt's outcome said; the adaptive limit learns from it when the permit drops.
    pub fn signal(&mut self, s: Signal) {
        self.signal = Some(s);
    }
}

impl Drop for LimiterPermit<'_> {
    fn drop(&mut self) {
        self.limiter.in_use.dec();
        if let Kind::Ceiling(tenant) = self.kind {
            let mut h = self.limiter.ceiling.lock().unwrap();
            h.total -= 1;
            if let Some(n) = h.by_tenant.get_mut(&tenant) {
                *n -= 1;
                if *n == 0 {
                    h.by_tenant.remove(&tenant);
                }
            }
            drop(h);
            // One waiter looks again (a permit given back while nobody waits is kept for the
            // next one to look, who finds the ceiling as it is then).
            self.limiter.released.notify_one();
            return;
        }
        if let Kind::Adaptive {
            in_flight_at_start,
            how,
            started,
        } = self.kind
        {
            let a = &self.limiter.adaptive;
            a.in_flight.fetch_sub(1, Ordering::AcqRel);
            // Grow only while the limit is being used: an idle limit proves nothing.
            let used = |limit: f64| in_flight_at_start as f64 * 2.0 >= limit;
            let rtt = started.elapsed();
            let floor = match (how, self.signal) {
                (Adapt::Vegas, Some(Signal::Answered)) => Some(a.rtt.lock().unwrap().observe(rtt)),
                _ => None,
            };
            let mut limit = a.limit.lock().unwrap();
            let l = *limit;
            *limit = match (how, self.signal) {
                (Adapt::Aimd, Some(Signal::Answered)) if used(l) => l + 1.0 / l,
                (Adapt::Aimd, Some(Signal::Overloaded)) => l * BACKOFF,
                (Adapt::Vegas, Some(Signal::Answered)) => {
                    let floor = floor.unwrap_or(rtt).as_secs_f64();
                    let queue = l * (1.0 - floor / rtt.as_secs_f64().max(1e-6));
                    let step = l.log10().max(1.0) / l;
                    if queue > 6.0 * l.log10().max(1.0) {
                        l - step
                    } else if queue < 3.0 * l.log10().max(1.0) && used(l) {
                        l + step
                    } else {
                        l
                    }
                }
                (Adapt::Vegas, Some(Signal::Overloaded)) => l - l.log10().max(1.0),
                _ => l,
            }
            .clamp(1.0, a.max);
            self.limiter.current.set(*limit as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn gauges() -> (IntGauge, IntGauge) {
        (
            IntGauge::new("t", "t").unwrap(),
            IntGauge::new("c", "c").unwrap(),
        )
    }

    #[test]
    fn limiter_sheds_at_once_when_full_and_recovers_on_release() {
        let (gauge, current) = gauges();
        let l = Limiter::new(2, 8, 1, gauge.clone(), current);
        let a = l.try_acquire().expect("first");
        let b = l.try_acquire().expect("second");
        assert_eq!(gauge.get(), 2);
        assert!(l.try_acquire().is_none(), "third is shed, not queued");
        drop(a);
        assert_eq!(gauge.get(), 1);
        assert!(l.try_acquire().is_some());
        drop(b);
    }

    #[test]
    fn the_adaptive_limit_grows_while_used_and_answered_up_to_its_ceiling() {
        let (gauge, current) = gauges();
        let l = Limiter::new(4, 6, 1, gauge.clone(), current.clone());
        // 4 in flight (the limit fully used), all answered: +1/4 each.
        for _ in 0..40 {
            let mut held: Vec<_> = (0..4).map(|_| l.try_acquire_adaptive().unwrap()).collect();
            for p in held.iter_mut() {
                p.signal(Signal::Answered);
            }
        }
        assert_eq!(l.adaptive_limit(), 6, "capped at the ceiling");
        assert_eq!(current.get(), 6);
        assert_eq!(gauge.get(), 0);
        // Now 6 fit, the 7th is shed.
        let held: Vec<_> = (0..6).map(|_| l.try_acquire_adaptive().unwrap()).collect();
        assert!(l.try_acquire_adaptive().is_none());
        drop(held);
    }

    #[test]
    fn an_idle_limit_does_not_grow_and_overload_shrinks_it_to_no_less_than_one() {
        let (gauge, current) = gauges();
        let l = Limiter::new(8, 64, 1, gauge, current);
        // One at a time (1 of 8 in use): answers prove nothing about capacity.
        for _ in 0..100 {
            l.try_acquire_adaptive().unwrap().signal(Signal::Answered);
        }
        assert_eq!(l.adaptive_limit(), 8);
        for _ in 0..100 {
            l.try_acquire_adaptive().unwrap().signal(Signal::Overloaded);
        }
        assert_eq!(l.adaptive_limit(), 1);
        // A permit dropped without a signal (the caller left) leaves the limit alone.
        drop(l.try_acquire_adaptive().unwrap());
        assert_eq!(l.adaptive_limit(), 1);
    }

    #[test]
    fn the_callee_ceiling_follows_the_endpoint_set_and_learns_nothing() {
        let (gauge, current) = gauges();
        // 16 static, 64 per endpoint, 3 endpoints: 192 in flight before this side sheds.
        let l = Limiter::new(16, 64, 3, gauge.clone(), current.clone());
        assert_eq!(l.ceiling(), 192);
        assert_eq!(
            current.get(),
            192,
            "before any attempt: the default policy's size"
        );
        let take = |n| -> Vec<_> {
            (0..n)
                .map_while(|_| l.try_acquire_adapting(Adapt::Callee))
                .collect()
        };
        let mut held = take(500);
        assert_eq!(held.len(), 192, "shed at the ceiling, not queued");
        assert_eq!(gauge.get(), 192);
        assert_eq!(current.get(), 192);
        // Overload signals do not shrink it: entity-service sizes the capacity, not this side.
        for p in held.iter_mut() {
            p.signal(Signal::Overloaded);
        }
        drop(held);
        assert_eq!(gauge.get(), 0);
        assert_eq!(take(500).len(), 192);
        // One endpoint, one endpoint's ceiling.
        let (g, c) = gauges();
        assert_eq!(Limiter::new(16, 64, 1, g, c).ceiling(), 64);
    }

    #[test]
    fn a_tenant_below_its_share_is_admitted_when_another_fills_the_ceiling() {
        let (gauge, current) = gauges();
        let l = Limiter::new(16, 8, 1, gauge.clone(), current);
        // Tenant 2 alone takes the whole ceiling (nothing is reserved for nobody), then is shed.
        let flood: Vec<_> = (0..20)
            .map_while(|_| l.try_acquire_ceiling(2, true))
            .collect();
        assert_eq!(flood.len(), 16, "max(limit, adaptive max) x 1 endpoint");
        // Tenant 1 arrives: two tenants, a share of 8 each; it holds none, so it is admitted
        // past the ceiling up to its share, and tenant 2, over its share, stays shed.
        let own: Vec<_> = (0..20)
            .map_while(|_| l.try_acquire_ceiling(1, true))
            .collect();
        assert_eq!(own.len(), 8, "tenant 1 gets its share, no more");
        assert!(l.try_acquire_ceiling(2, true).is_none());
        assert_eq!((l.held_by(1), l.held_by(2)), (8, 16));
        assert_eq!(gauge.get(), 24);
        // A third tenant: a share of 16 / 3 = 5, but the overshoot stops at twice the ceiling.
        let third: Vec<_> = (0..20)
            .map_while(|_| l.try_acquire_ceiling(3, true))
            .collect();
        assert_eq!(third.len(), 5);
        drop((flood, own, third));
        assert_eq!((l.held_by(1), l.held_by(2), gauge.get()), (0, 0, 0));
        // Without the share (the flag off): first come, first served at the ceiling.
        let flood: Vec<_> = (0..20)
            .map_while(|_| l.try_acquire_ceiling(2, false))
            .collect();
        assert_eq!(flood.len(), 16);
        assert!(
            l.try_acquire_ceiling(1, false).is_none(),
            "shed behind the flood"
        );
        drop(flood);
    }

    #[test]
    fn the_shared_ceiling_never_admits_past_twice_its_size() {
        let (gauge, current) = gauges();
        let l = Limiter::new(4, 4, 1, gauge.clone(), current);
        // Many tenants arriving one after another, each first holding none.
        let held: Vec<_> = (0..100)
            .filter_map(|t| l.try_acquire_ceiling(t, true))
            .collect();
        assert_eq!(
            held.len(),
            8,
            "4, then one each past the ceiling while the share allows"
        );
        assert_eq!(gauge.get(), 8);
    }

    /// Code After's wait for one of its 64 connections: bounded by the attempt's own time, and
    /// over as soon as a permit is given back.
    #[tokio::test(start_paused = true)]
    async fn at_the_ceiling_an_attempt_waits_within_its_budget_for_a_slot() {
        let (gauge, current) = gauges();
        let waiting = IntGauge::new("w", "w").unwrap();
        let l = Limiter::new(1, 2, 1, gauge, current).with_waiting_gauge(waiting.clone());
        let a = l.try_acquire_ceiling(1, false).unwrap();
        let b = l.try_acquire_ceiling(1, false).unwrap();

        // Nothing given back: the wait ends at its bound, with nothing.
        let start = tokio::time::Instant::now();
        assert!(l
            .acquire_ceiling_within(1, false, Duration::from_millis(580))
            .await
            .is_none());
        assert_eq!(start.elapsed(), Duration::from_millis(580));
        assert_eq!(waiting.get(), 0, "a wait that ended is not counted");

        // A permit given back 200 ms into the wait is taken then, not at the wait's end.
        let start = tokio::time::Instant::now();
        let (slot, ()) = tokio::join!(
            l.acquire_ceiling_within(1, false, Duration::from_millis(580)),
            async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                assert_eq!(waiting.get(), 1, "the attempt waits, counted");
                drop(a);
            }
        );
        assert!(slot.is_some(), "the permit given back goes to the waiter");
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        assert_eq!(waiting.get(), 0);
        drop(b);
        drop(slot);

        // A zero wait is the old shed-at-once.
        let _a = l.try_acquire_ceiling(1, false).unwrap();
        let _b = l.try_acquire_ceiling(1, false).unwrap();
        assert!(l
            .acquire_ceiling_within(1, false, Duration::ZERO)
            .await
            .is_none());
    }

    /// A waiter whose caller leaves is gone from the queue and from the gauge, and the permit
    /// given back goes to the next waiter, not to nobody.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_dropped_by_its_caller_leaves_the_permit_to_the_next() {
        let (gauge, current) = gauges();
        let waiting = IntGauge::new("w", "w").unwrap();
        let l = Limiter::new(1, 1, 1, gauge, current).with_waiting_gauge(waiting.clone());
        let held = l.try_acquire_ceiling(1, false).unwrap();
        let wait = Duration::from_secs(1);
        let mut first = Box::pin(l.acquire_ceiling_within(1, false, wait));
        let second = l.acquire_ceiling_within(2, false, wait);
        tokio::pin!(second);
        // Both queue, the first one first.
        assert!(futures::poll!(first.as_mut()).is_pending());
        assert!(futures::poll!(second.as_mut()).is_pending());
        assert_eq!(waiting.get(), 2);
        // The permit is given back, which wakes the first; its caller leaves before it runs.
        drop(held);
        drop(first);
        assert_eq!(waiting.get(), 1);
        let start = tokio::time::Instant::now();
        let slot = second.await;
        assert!(slot.is_some(), "the wake-up went on to the second waiter");
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "at once, not at the end of its wait"
        );
        assert_eq!(l.held_by(2), 1);
    }
}
