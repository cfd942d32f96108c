//! LAB-FIX(round-trips): a budgeted lookup's `statement_timeout`, kept on its pooled connection
//! instead of in a transaction opened for it.
//!
//! A budgeted lookup must be bounded inside PostgreSQL: dropping a query's future does not stop
//! the query. It used to be bounded by a transaction of its own — `BEGIN` (waited for),
//! `SET LOCAL statement_timeout` (sent ahead of the lookup), the lookups, `ROLLBACK` (queued
//! behind them) — three statements the legacy lookup does not send. Measured at 1,051 rps on
//! 2 cores, the two clients alternating on one lab every 5 minutes (`scripts/lib/mode_ab.py`,
//! 2026-12-07): PostgreSQL +0.07-0.09 cores and entity-service +0.04-0.05 for the fixed client,
//! every request answered in both modes.
//!
//! A session's `SET statement_timeout` lasts as long as its connection, so each connection
//! remembers the value it was last given, and a lookup sends `SET` only when it needs another:
//! its time left rounded **up** to [`STEP`] (a query is never cancelled before its caller's
//! budget ends, and runs at most one step past it), or the server's `DEFAULT` for a request
//! without a budget (the legacy client's lookups stay unbounded, as in the incident). The `SET`
//! shares its lookup's round trip (`resolve::lookup`). A connection whose value is not known — a
//! new one, one whose `SET` was sent but not confirmed (its request dropped on the way), one
//! forgotten to bound the map — gets a `SET` whatever it needs: never a guess.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use deadpool_postgres::ObjectId;

/// What a budget is rounded up to. 50 ms: the entity hop's attempt budget is 700 ms and the time
/// a request has left when it reaches the pool varies by a few tens of ms from one to the next
/// (transit, the wait for a connection), so most lookups find the value they need already set;
/// and a query past its caller's budget runs at most 50 ms (7% of that budget) before
/// PostgreSQL cancels it.
pub const STEP: Duration = Duration::from_millis(50);

/// Connections remembered at most; the oldest (lowest id: deadpool's ids only grow) are forgotten
/// first, never the one just set, and a forgotten one only pays one `SET` more. A pool's connections are replaced when
/// they break (a PostgreSQL restart replaces all of them), so without a bound the map would keep
/// one entry per connection ever made.
const REMEMBERED: usize = 1024;

/// The `statement_timeout` a lookup runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// The server's own (`SET statement_timeout TO DEFAULT`): no budget sent.
    Default,
    /// This many milliseconds: a multiple of [`STEP`], or PostgreSQL's largest.
    Ms(u64),
}

impl Timeout {
    /// The timeout for `left` of a caller's budget: rounded up to [`STEP`], at least one step,
    /// at most what PostgreSQL can apply (`statement_timeout` is an int of milliseconds: the
    /// largest budget a caller may send, `lab_api::headers::MAX_REQUEST_BUDGET_MS`, rounded up
    /// would be refused).
    pub fn for_budget(left: Duration) -> Self {
        let step = STEP.as_millis() as u64;
        let ms = u64::try_from(left.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
        Timeout::Ms(
            ms.div_ceil(step)
                .max(1)
                .saturating_mul(step)
                .min(lab_api::headers::MAX_REQUEST_BUDGET_MS),
        )
    }

    /// The statement that sets it. An integer formatted here: nothing user-controlled reaches SQL.
    pub fn sql(self) -> String {
        match self {
            Timeout::Default => "SET statement_timeout TO DEFAULT".to_owned(),
            Timeout::Ms(ms) => format!("SET statement_timeout = {ms}"),
        }
    }
}

/// What each pooled connection's session was last set to (`K`: the pool's id of a connection).
pub struct SessionTimeouts<K = ObjectId> {
    known: Mutex<BTreeMap<K, Timeout>>,
}

impl<K: Ord> Default for SessionTimeouts<K> {
    fn default() -> Self {
        Self {
            known: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<K: Ord + Copy> SessionTimeouts<K> {
    /// The `SET` to send ahead of a lookup on connection `id` that must run under `want`, or
    /// `None` when the connection already has it. When one is returned, the connection's value
    /// is unknown until [`SessionTimeouts::set`] confirms it.
    pub fn needs(&self, id: K, want: Timeout) -> Option<Timeout> {
        let mut known = self.known.lock().expect("session timeouts lock");
        if known.get(&id) == Some(&want) {
            return None;
        }
        known.remove(&id);
        Some(want)
    }

    /// PostgreSQL answered the `SET`: connection `id` now runs under `to`.
    pub fn set(&self, id: K, to: Timeout) {
        let mut known = self.known.lock().expect("session timeouts lock");
        known.insert(id, to);
        // The oldest other than the one just set: a long-lived connection with a low id must
        // not be forgotten on every SET it makes.
        while known.len() > REMEMBERED {
            let Some(&oldest) = known.keys().find(|k| **k != id) else {
                break;
            };
            known.remove(&oldest);
        }
    }

    /// Connections whose value is known.
    pub fn len(&self) -> usize {
        self.known.lock().expect("session timeouts lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_rounded_up_to_a_step_and_never_to_zero() {
        let ms = |m| Timeout::for_budget(Duration::from_millis(m));
        assert_eq!(ms(700), Timeout::Ms(700));
        assert_eq!(ms(651), Timeout::Ms(700));
        assert_eq!(ms(650), Timeout::Ms(650));
        assert_eq!(ms(1), Timeout::Ms(50));
        assert_eq!(ms(0), Timeout::Ms(50));
        assert_eq!(
            Timeout::for_budget(Duration::from_micros(650_001)),
            Timeout::Ms(700),
            "650.001 ms is not 650"
        );
        let max = lab_api::headers::MAX_REQUEST_BUDGET_MS;
        assert_eq!(
            Timeout::for_budget(Duration::from_millis(max)),
            Timeout::Ms(max),
            "PostgreSQL's largest statement_timeout, not rounded past it"
        );
        assert_eq!(Timeout::Ms(700).sql(), "SET statement_timeout = 700");
        assert_eq!(Timeout::Default.sql(), "SET statement_timeout TO DEFAULT");
    }

    #[test]
    fn a_set_is_sent_only_when_the_connection_needs_another_value() {
        let t = SessionTimeouts::<u32>::default();
        let ms700 = Timeout::Ms(700);
        // A connection never seen: whatever it needs, even the default, is sent.
        assert_eq!(t.needs(1, Timeout::Default), Some(Timeout::Default));
        t.set(1, Timeout::Default);
        assert_eq!(t.needs(1, Timeout::Default), None);
        assert_eq!(t.needs(1, ms700), Some(ms700));
        // Sent but not confirmed (the request was dropped on the way): the session may hold
        // 700 ms now, so a legacy request must take it off, though DEFAULT was last confirmed.
        assert_eq!(t.needs(1, Timeout::Default), Some(Timeout::Default));
        assert_eq!(t.needs(1, ms700), Some(ms700));
        t.set(1, ms700);
        assert_eq!(t.needs(1, ms700), None);
        assert_eq!(
            t.needs(2, ms700),
            Some(ms700),
            "another connection has its own"
        );
        // A legacy request after a budgeted one on the same connection takes the budget off.
        assert_eq!(t.needs(1, Timeout::Default), Some(Timeout::Default));
    }

    #[test]
    fn the_oldest_connections_are_forgotten_past_the_bound_and_then_set_again() {
        let t = SessionTimeouts::<usize>::default();
        for id in 0..REMEMBERED + 10 {
            t.set(id, Timeout::Ms(700));
        }
        assert_eq!(t.len(), REMEMBERED);
        assert_eq!(t.needs(9, Timeout::Ms(700)), Some(Timeout::Ms(700)));
        assert_eq!(t.needs(REMEMBERED + 9, Timeout::Ms(700)), None);
        // The oldest connection set again stays remembered: the next oldest goes instead.
        t.set(0, Timeout::Ms(700));
        assert_eq!(t.len(), REMEMBERED);
        assert_eq!(t.needs(0, Timeout::Ms(700)), None);
    }
}
