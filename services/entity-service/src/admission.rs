//! LAB-FIX(pool-exhaustion), the callee's half: admission sized to this replica's actual
//! capacity, with the caller's deadline.
//!
//! The postmortem: "a semaphore in front of entity-service sized to its actual capacity would
//! have made this incident a partial degradation instead of a collapse". The capacity is this
//! replica's PostgreSQL pool, and only this replica knows how full it is and how long its
//! queries take right now: a caller-side constant cannot (a static 16 per orchestrator admitted
//! 80 calls onto 32 connections after a scale-up, and shed a cold orchestrator's burst during a
//! rollout while the connections were free). So a request that carries its budget
//! (`X-Request-Budget-Ms`, the fixed client) is
//! - **served** when the wait for a connection plus the query fits in what is left of it: the
//!   queue ahead of it drains at `pool size / query cost` connections a second;
//! - **refused at once** when it cannot fit (`db_pool_exhausted`, 503, retryable: another replica
//!   may have room, and the client's retry budget bounds how often that is tried);
//! - and if it was admitted but the queue moved slower than estimated, it stops waiting when the
//!   time left could no longer cover the query (the same refusal, at the end of the wait).
//!
//! Requests without a budget (the legacy client) wait for a connection as long as they live,
//! as in the incident (`database.pool_wait_ms`, 0 by default). This is Envoy's adaptive
//! concurrency idea turned around: the limit is measured where the capacity is, not guessed at
//! the caller.

use std::time::Duration;

/// The smallest wait bound handed to the pool: deadpool treats a zero wait as "do not wait at
/// all", which would refuse a request whose connection frees up a microsecond later.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// Why a budgeted request is not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The query alone, at its recent cost, does not fit in what is left of the budget.
    Budget,
    /// The query would fit, but not after the wait for a connection. `pushback`: by how much
    /// the queue is too long for this budget (the expected wait + the query − what is left),
    /// the soonest a retry with the same budget could fit if nothing else arrived; zero when
    /// not estimated (a request admitted whose queue then moved slower than estimated).
    Queue { pushback: Duration },
}

/// The pool as the admission sees it (from `deadpool::Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolState {
    /// Connections the pool may hold at most: the replica's capacity.
    pub max_size: usize,
    /// Connections open now.
    pub size: usize,
    /// Open connections nobody holds.
    pub available: usize,
    /// Requests already waiting for a connection.
    pub waiting: usize,
}

impl From<deadpool_postgres::Status> for PoolState {
    fn from(s: deadpool_postgres::Status) -> Self {
        Self {
            max_size: s.max_size,
            size: s.size,
            available: s.available,
            waiting: s.waiting,
        }
    }
}

impl PoolState {
    /// Requests that will get a connection before a new one does (0: one is free, or the pool
    /// may still open one).
    pub fn ahead(&self) -> usize {
        let users = self.size - self.available.min(self.size) + self.waiting;
        (users + 1).saturating_sub(self.max_size.max(1))
    }
}

/// Admit a budgeted request with `left` of its budget, given the query's recent cost and the
/// pool: `Ok(how long it may wait for a connection)` or why it is refused.
pub fn admit(left: Duration, query_cost: Duration, pool: PoolState) -> Result<Duration, Refusal> {
    if left.is_zero() || query_cost > left {
        return Err(Refusal::Budget);
    }
    // Connections free up at `max_size` per query cost (every held connection is running one
    // query of about that cost): the request in position k waits ~k / max_size query costs.
    let ahead = pool.ahead() as u32;
    let expected_wait = query_cost * ahead / pool.max_size.max(1) as u32;
    if expected_wait + query_cost > left {
        return Err(Refusal::Queue {
            pushback: expected_wait + query_cost - left,
        });
    }
    Ok((left - query_cost).max(MIN_WAIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn pool(size: usize, available: usize, waiting: usize) -> PoolState {
        PoolState {
            max_size: 16,
            size,
            available,
            waiting,
        }
    }

    #[test]
    fn a_free_or_openable_connection_means_no_queue() {
        assert_eq!(pool(16, 3, 0).ahead(), 0);
        // Not every connection opened yet: the pool opens one for the newcomer.
        assert_eq!(pool(4, 0, 0).ahead(), 0);
        // All 16 held: the newcomer is first in line.
        assert_eq!(pool(16, 0, 0).ahead(), 1);
        assert_eq!(pool(16, 0, 31).ahead(), 32);
    }

    #[test]
    fn serves_what_fits_in_the_budget() {
        // 32 ahead at 10 ms a query on 16 connections: ~20 ms of wait + 10 ms of query.
        assert_eq!(admit(MS(700), MS(10), pool(16, 0, 31)), Ok(MS(690)));
        // Nobody ahead: the whole budget but the query's cost may be spent waiting.
        assert_eq!(admit(MS(100), MS(10), pool(16, 2, 0)), Ok(MS(90)));
    }

    #[test]
    fn refuses_at_once_what_the_queue_makes_too_late() {
        // 160 ahead at 100 ms a query on 16 connections: 1 s of wait, over a 700 ms budget.
        // It says by how much: 1,000 + 100 - 700 ms, the soonest a retry could fit.
        assert_eq!(
            admit(MS(700), MS(100), pool(16, 0, 159)),
            Err(Refusal::Queue { pushback: MS(400) })
        );
        // One request fewer ahead is ~6 ms sooner: the pushback follows the queue.
        assert_eq!(
            admit(MS(700), MS(100), pool(16, 0, 158)),
            Err(Refusal::Queue {
                pushback: Duration::from_micros(393_750)
            })
        );
        // The same queue at 10 ms a query is 100 ms of wait: served.
        assert!(admit(MS(700), MS(10), pool(16, 0, 159)).is_ok());
    }

    #[test]
    fn refuses_work_that_cannot_fit_even_without_a_queue() {
        assert_eq!(
            admit(MS(300), MS(400), pool(16, 5, 0)),
            Err(Refusal::Budget)
        );
        // A spent budget, before any cost is known.
        assert_eq!(admit(MS(0), MS(0), pool(16, 5, 0)), Err(Refusal::Budget));
    }

    #[test]
    fn the_wait_bound_is_never_zero() {
        // deadpool reads a zero wait as "never wait".
        assert_eq!(admit(MS(10), MS(10), pool(16, 1, 0)), Ok(MIN_WAIT));
    }
}
