//! Events per 100 ms — requests arrived at entity-service, attempts started by the
//! orchestrator's entity client: what a Prometheus counter scraped every second cannot show.
//!
//! The postmortem's legacy backoff is "200ms, 400ms, 800ms. Identical on every pod. No jitter":
//! requests that failed together come back together, in waves 200, 400 and 800 ms apart. A
//! wave that short is averaged away by a 1 s scrape, and a scraper polling faster would add its
//! own timing jitter. So the service counts its arrivals itself, in 100 ms buckets by wall clock
//! (the same buckets on every replica of the machine, so the fleet's counts add up bucket by
//! bucket), and serves the complete buckets on its admin listener (`GET /debug/arrivals`);
//! `labctl` reads them every second and judges the waves by their autocorrelation.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Query, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Json;
use serde::{Deserialize, Serialize};

/// A bucket's width: half the shortest backoff sleep (200 ms), so a wave at that period is two
/// buckets apart, not smeared into one.
pub const BUCKET_MS: u64 = 100;

/// Buckets kept: 60 s. A reader polling every second has a minute to catch up after a stall
/// before it loses buckets; 600 counters are 5 KB.
pub const KEPT: usize = 600;

/// The arrival counts of one process, by wall-clock bucket.
#[derive(Clone, Default)]
pub struct Arrivals(Arc<Mutex<Ring>>);

#[derive(Default)]
struct Ring {
    /// The bucket id (`unix ms / BUCKET_MS`) of `counts[0]`.
    first: u64,
    counts: VecDeque<u64>,
}

impl Ring {
    /// Make `id` the newest bucket kept (zeros for the buckets nothing arrived in).
    fn advance(&mut self, id: u64) {
        let next = self.first + self.counts.len() as u64;
        if self.counts.is_empty() || id >= next + KEPT as u64 {
            self.first = id;
            self.counts = VecDeque::from([0]);
            return;
        }
        for _ in next..=id {
            self.counts.push_back(0);
        }
        while self.counts.len() > KEPT {
            self.counts.pop_front();
            self.first += 1;
        }
    }
}

/// What `GET /debug/arrivals?after=<id>` answers: the complete buckets after `after` (all kept
/// ones without it), oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Buckets {
    pub bucket_ms: u64,
    /// The id (`unix ms / bucket_ms`) of `counts[0]`.
    pub first: u64,
    pub counts: Vec<u64>,
}

#[derive(Debug, Deserialize)]
pub struct After {
    pub after: Option<u64>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Arrivals {
    /// A ring whose first bucket is now: the buckets from the process's start on are all
    /// served (zeros where nothing happened), so a reader can tell a quiet replica from one that
    /// was not there.
    pub fn new() -> Self {
        let a = Self::default();
        a.0.lock()
            .expect("arrivals lock")
            .advance(unix_ms() / BUCKET_MS);
        a
    }

    /// One request arrived now.
    pub fn record(&self) {
        self.record_at(unix_ms());
    }

    fn record_at(&self, ms: u64) {
        let id = ms / BUCKET_MS;
        let mut r = self.0.lock().expect("arrivals lock");
        if id < r.first {
            // The wall clock stepped back past the kept buckets: nowhere to count it.
            return;
        }
        r.advance(id);
        let i = (id - r.first) as usize;
        r.counts[i] += 1;
    }

    /// The buckets complete at `now_ms` (every one before the current), after `after`.
    pub fn complete(&self, after: Option<u64>, now_ms: u64) -> Buckets {
        let current = now_ms / BUCKET_MS;
        let mut r = self.0.lock().expect("arrivals lock");
        r.advance(current);
        let from = after.map_or(r.first, |a| (a + 1).max(r.first));
        let counts = (from..current)
            .map(|id| r.counts[(id - r.first) as usize])
            .collect();
        Buckets {
            bucket_ms: BUCKET_MS,
            first: from,
            counts,
        }
    }
}

/// Middleware: count every request as it arrives, before anything else is done with it.
pub async fn count(State(a): State<Arrivals>, req: Request, next: Next) -> Response {
    a.record();
    next.run(req).await
}

/// `GET /debug/arrivals?after=<id>` (admin listener).
pub async fn handler(State(a): State<Arrivals>, Query(q): Query<After>) -> Json<Buckets> {
    Json(a.complete(q.after, unix_ms()))
}

/// The admin route serving `a` at `/debug/arrivals` (entity-service: requests arrived).
pub fn admin_router(a: Arrivals) -> axum::Router {
    admin_router_at("/debug/arrivals", a)
}

/// The admin route serving `a` at `path` (the orchestrator: `/debug/attempts`, its entity
/// client's attempts as each started).
pub fn admin_router_at(path: &str, a: Arrivals) -> axum::Router {
    axum::Router::new()
        .route(path, axum::routing::get(handler))
        .with_state(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_counted_per_bucket_with_zeros_for_quiet_ones_and_served_once_complete() {
        let a = Arrivals::new();
        let t0 = 1_800_000_000_000; // a bucket boundary
        for ms in [t0, t0 + 5, t0 + 99, t0 + 250, t0 + 251] {
            a.record_at(ms);
        }
        // At t0 + 250 the buckets t0 and t0+100 are complete; t0+200 is not.
        let b = a.complete(None, t0 + 250);
        assert_eq!(b.first, t0 / 100);
        assert_eq!(b.counts, vec![3, 0]);
        // Later, only what followed `after`.
        let b = a.complete(Some(t0 / 100 + 1), t0 + 420);
        assert_eq!((b.first, b.counts), (t0 / 100 + 2, vec![2, 0]));
        assert_eq!(
            a.complete(Some(t0 / 100 + 3), t0 + 420).counts,
            Vec::<u64>::new()
        );
    }

    #[test]
    fn a_new_ring_serves_its_quiet_buckets_from_its_start() {
        let before = unix_ms() / BUCKET_MS;
        let a = Arrivals::new();
        let b = a.complete(None, unix_ms() + 350);
        // From the process's start (a reader can tell "nothing happened" from "not there").
        assert!(b.first >= before && b.first <= before + 1, "{b:?}");
        assert!(
            b.counts.len() >= 3 && b.counts.iter().all(|c| *c == 0),
            "{b:?}"
        );
    }

    #[test]
    fn only_the_last_minute_is_kept() {
        let a = Arrivals::new();
        let t0 = 1_800_000_000_000;
        a.record_at(t0);
        a.record_at(t0 + 30_000);
        // 70 s later the first bucket is gone, the second still kept.
        let b = a.complete(None, t0 + 70_000);
        assert_eq!(b.counts.len(), KEPT - 1);
        assert_eq!(b.first, (t0 + 70_000) / 100 - (KEPT as u64 - 1));
        assert_eq!(b.counts.iter().sum::<u64>(), 1);
        // After a long silence (past what is kept) the ring starts again.
        a.record_at(t0 + 500_000);
        assert_eq!(a.complete(None, t0 + 500_100).counts, vec![1]);
    }
}
