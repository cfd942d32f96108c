//! The per-host connection cap — Go's `Transport{MaxConnsPerHost: 64}`.
//!
//! reqwest has no hard per-host cap (its pool only bounds *idle* connections), so the cap is a
//! semaphore per entity-service host, held for the whole of an attempt — exactly what a Go
//! connection slot is while `persistConn.roundTrip` waits for the response.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

// LAB-BUG(pool-exhaustion): "Pool of 64 fills. New requests block on connection acquire.
// Goroutines: 240 → 4,180/pod." A caller that finds every slot taken WAITS — there is no
// shedding, and the wait runs inside the detached task (LAB-BUG(orphaned-work)), so it ignores
// the caller's deadline and cancellation and outlives the caller like everything else. The only
// clock on the wait is the client's own 10 s timeout, as Go's `Client.Timeout` also covers the
// wait for a connection. Every waiter holds its request body and a task. And /readyz queues here
// too (LAB-BUG(deep-readiness)).
/// Per-host slots, one semaphore per `host:port`.
pub struct HostPool {
    /// Slots per host (`MaxConnsPerHost`).
    cap: usize,
    /// One semaphore per entity-service `host:port` (two base URLs on one host share it).
    hosts: HashMap<String, Arc<Semaphore>>,
    /// `entity_pool_slots{state="in_use"}` (inc/dec, shared with the fixed client's limiter).
    in_use: IntGauge,
    /// `entity_pool_slots{state="waiting"}`.
    waiting: IntGauge,
}

impl HostPool {
    /// `cap` slots for each of `hosts`.
    pub fn new(
        cap: usize,
        hosts: impl IntoIterator<Item = String>,
        in_use: IntGauge,
        waiting: IntGauge,
    ) -> Self {
        let hosts = hosts
            .into_iter()
            .map(|h| (h, Arc::new(Semaphore::new(cap))))
            .collect();
        Self {
            cap,
            hosts,
            in_use,
            waiting,
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// A slot for `host`, waiting as long as it takes — no deadline of its own.
    pub async fn acquire(&self, host: &str) -> Slot {
        let sem = self
            .hosts
            .get(host)
            .cloned()
            // Hosts come from the base URLs checked at construction; an unknown host gets an
            // (uncapped-by-sharing) semaphore of its own rather than a panic.
            .unwrap_or_else(|| Arc::new(Semaphore::new(self.cap)));
        let waiting = Waiting::new(&self.waiting);
        let permit = sem
            .acquire_owned()
            .await
            .expect("the pool's semaphores are never closed");
        drop(waiting);
        self.in_use.inc();
        Slot {
            _permit: permit,
            in_use: self.in_use.clone(),
        }
    }
}

/// `waiting` +1 while parked; -1 however the wait ends (slot granted, or the 10 s timeout).
struct Waiting<'a>(&'a IntGauge);

impl<'a> Waiting<'a> {
    fn new(g: &'a IntGauge) -> Self {
        g.inc();
        Self(g)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One connection slot, held until the attempt ends.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    in_use: IntGauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.in_use.dec();
    }
}
