//! LAB-FIX(tenant-share), issue 28: this replica's PostgreSQL connections shared fairly between
//! tenants.
//!
//! The pool hands a freed connection to whoever has waited longest, so a tenant that sends many
//! requests at once — a huge document's batches, a client retrying — fills the queue and every
//! other tenant waits behind all of it. In front of the pool, budgeted requests (the fixed
//! client's) pass this gate, which holds as many permits as the pool has connections. While a
//! permit is free anyone takes it: a tenant alone may use the whole pool, and nothing is refused
//! here. When one frees up and requests are waiting, it goes to the **waiting tenant served
//! least recently** — round robin between the tenants with work queued, the oldest request of
//! each first (fair queueing, as a scheduler shares a CPU between processes). A flooding tenant
//! then gets one connection in turn with every other tenant waiting, whatever the depth of its
//! own queue; its excess waits out its own budget and is refused by the admission as before
//! (`db_pool_exhausted`, retryable). Tenants that never meet are never reordered.
//!
//! The admission prices a request's wait by the queue ahead of it **in this order**
//! ([`FairGate::ahead_of`]), not by the whole queue: priced first-come-first-served, a tenant
//! arriving behind a flood would be refused at once as "too late" although its turn is next.
//!
//! Requests without a budget (the legacy client) do not pass the gate: they wait in the pool's
//! own queue, first come first served, as in the incident.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The gate; one per replica, sized to its pool.
pub struct FairGate {
    state: Mutex<State>,
}

struct State {
    /// Permits nobody holds.
    free: usize,
    /// Requests waiting, over every tenant.
    waiting: usize,
    /// A counter that grows with every permit handed out: "when" a tenant was served.
    clock: u64,
    /// Tenants holding a permit or waiting for one (forgotten when they do neither).
    tenants: HashMap<i64, Tenant>,
}

#[derive(Default)]
struct Tenant {
    held: usize,
    last_served: u64,
    waiters: VecDeque<oneshot::Sender<Permit>>,
}

/// One of the gate's permits, held while the request holds or awaits its connection and runs
/// its query; dropping it hands it on.
pub struct Permit {
    gate: Arc<FairGate>,
    tenant: i64,
    /// False for a permit the gate took back unsent (its waiter had gone): dropping it then
    /// hands nothing on, the gate has already counted it out.
    armed: bool,
}

impl FairGate {
    /// A gate of `permits` (the pool's size, at least 1).
    pub fn new(permits: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                free: permits.max(1),
                waiting: 0,
                clock: 0,
                tenants: HashMap::new(),
            }),
        })
    }

    /// Requests waiting at the gate now.
    pub fn waiting(&self) -> usize {
        self.state.lock().unwrap().waiting
    }

    /// Requests waiting at the gate that get a turn before a new request of `tenant`: its own
    /// queue, and from every other tenant at most one more than that (round robin gives each
    /// backlogged tenant one turn per round; fewer if it has fewer queued). An upper bound: a
    /// tenant served less recently than the others goes first in its round.
    pub fn ahead_of(&self, tenant: i64) -> usize {
        let s = self.state.lock().unwrap();
        let own = s.tenants.get(&tenant).map_or(0, |t| t.waiters.len());
        s.tenants
            .iter()
            .map(|(id, t)| {
                if *id == tenant {
                    own
                } else {
                    t.waiters.len().min(own + 1)
                }
            })
            .sum()
    }

    /// A permit for one request of `tenant`: at once when one is free and nobody waits, else
    /// in fair turn. Cancel-safe: a request dropped while waiting (its budget spent, its caller
    /// gone) leaves its place, and a permit already sent to it is handed on.
    pub async fn acquire(self: &Arc<Self>, tenant: i64) -> Permit {
        let rx = {
            let mut s = self.state.lock().unwrap();
            // Free permits and waiters never coexist: a freed permit goes to a waiter first.
            if s.free > 0 {
                s.free -= 1;
                s.serve(tenant);
                return Permit {
                    gate: self.clone(),
                    tenant,
                    armed: true,
                };
            }
            let (tx, rx) = oneshot::channel();
            s.tenants.entry(tenant).or_default().waiters.push_back(tx);
            s.waiting += 1;
            rx
        };
        let mut rx = Waiting {
            rx: Some(rx),
            gate: self.clone(),
            tenant,
        };
        rx.wait().await
    }

    fn release(self: &Arc<Self>, tenant: i64) {
        let mut s = self.state.lock().unwrap();
        if let Some(t) = s.tenants.get_mut(&tenant) {
            t.held -= 1;
        }
        s.forget_if_idle(tenant);
        // Hand the permit to the waiting tenant served least recently; a waiter that has gone
        // (its receiver dropped) is skipped.
        while let Some(next) = s.least_recently_served() {
            let tx = {
                let t = s.tenants.get_mut(&next).expect("a waiting tenant");
                t.waiters.pop_front().expect("a waiter")
            };
            s.waiting -= 1;
            s.serve(next);
            let permit = Permit {
                gate: self.clone(),
                tenant: next,
                armed: true,
            };
            match tx.send(permit) {
                Ok(()) => return,
                Err(mut unsent) => {
                    // Gone before its turn: undo here, without re-entering release (the lock is
                    // held).
                    unsent.armed = false;
                    drop(unsent);
                    if let Some(t) = s.tenants.get_mut(&next) {
                        t.held -= 1;
                    }
                    s.forget_if_idle(next);
                }
            }
        }
        s.free += 1;
    }
}

impl State {
    fn serve(&mut self, tenant: i64) {
        self.clock += 1;
        let clock = self.clock;
        let t = self.tenants.entry(tenant).or_default();
        t.held += 1;
        t.last_served = clock;
    }

    fn least_recently_served(&self) -> Option<i64> {
        self.tenants
            .iter()
            .filter(|(_, t)| !t.waiters.is_empty())
            .min_by_key(|(_, t)| t.last_served)
            .map(|(id, _)| *id)
    }

    fn forget_if_idle(&mut self, tenant: i64) {
        if self
            .tenants
            .get(&tenant)
            .is_some_and(|t| t.held == 0 && t.waiters.is_empty())
        {
            self.tenants.remove(&tenant);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.armed {
            self.gate.release(self.tenant);
        }
    }
}

/// A request's place in its tenant's queue; dropped before its turn, it gives the place up.
struct Waiting {
    rx: Option<oneshot::Receiver<Permit>>,
    gate: Arc<FairGate>,
    tenant: i64,
}

impl Waiting {
    async fn wait(&mut self) -> Permit {
        let rx = self.rx.as_mut().expect("waited once");
        let permit = rx
            .await
            .expect("the gate never drops a waiter's sender unsent");
        self.rx = None;
        permit
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        rx.close();
        match rx.try_recv() {
            // Sent just before we left: hand it on (the permit's drop does).
            Ok(permit) => drop(permit),
            // Still queued: leave its tenant's queue. Every closed place found there is counted
            // out here (a request of the same tenant dropped at the same moment then finds its
            // own already gone); other tenants' queues are not this request's to scan.
            Err(_) => {
                let mut s = self.gate.state.lock().unwrap();
                let left = s.tenants.get_mut(&self.tenant).map_or(0, |t| {
                    let before = t.waiters.len();
                    t.waiters.retain(|tx| !tx.is_closed());
                    before - t.waiters.len()
                });
                s.waiting -= left;
                s.forget_if_idle(self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Whether the task `h` has finished once the runtime ran everything else it could.
    async fn ready<T>(h: &tokio::task::JoinHandle<T>) -> bool {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        h.is_finished()
    }

    #[tokio::test]
    async fn a_tenant_alone_takes_every_permit_without_waiting() {
        let gate = FairGate::new(3);
        let mut held = Vec::new();
        for _ in 0..3 {
            // A gate that made it wait would hang here: bounded, it fails instead.
            let p = tokio::time::timeout(Duration::from_secs(5), gate.acquire(1)).await;
            held.push(p.expect("a free permit is taken at once"));
        }
        assert_eq!(held.len(), 3);
        assert_eq!(gate.waiting(), 0);
    }

    /// One permit, tenant 1 holding it with four more queued, then tenant 2 queues one: tenant
    /// 2 is served next, not after tenant 1's whole queue (first come first served would serve
    /// it fifth).
    #[tokio::test]
    async fn a_freed_permit_goes_to_the_waiting_tenant_served_least_recently() {
        let gate = FairGate::new(1);
        let first = gate.acquire(1).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for tenant in [1, 1, 1, 1, 2] {
            let (g, order) = (gate.clone(), order.clone());
            let h = tokio::spawn(async move {
                let p = g.acquire(tenant).await;
                order.lock().unwrap().push(tenant);
                tokio::task::yield_now().await;
                drop(p);
            });
            // Queued in this order.
            while gate.waiting() < handles.len() + 1 {
                tokio::task::yield_now().await;
            }
            handles.push(h);
        }
        drop(first);
        for h in handles {
            h.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [2, 1, 1, 1, 1]);
        assert_eq!(gate.waiting(), 0);
        assert!(
            gate.state.lock().unwrap().tenants.is_empty(),
            "nothing left behind"
        );
    }

    /// Two tenants both backlogged share in turn.
    #[tokio::test]
    async fn backlogged_tenants_alternate() {
        let gate = FairGate::new(1);
        let first = gate.acquire(1).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for tenant in [1, 1, 1, 2, 2, 2] {
            let (g, order) = (gate.clone(), order.clone());
            handles.push(tokio::spawn(async move {
                let p = g.acquire(tenant).await;
                order.lock().unwrap().push(tenant);
                drop(p);
            }));
            while gate.waiting() < handles.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for h in handles {
            h.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [2, 1, 2, 1, 2, 1]);
    }

    /// The queue ahead of a newcomer in fair order: one turn per other backlogged tenant, not
    /// the whole flood; the flooder's own next request is behind all of its queue.
    #[tokio::test]
    async fn the_queue_ahead_is_counted_in_fair_order() {
        let gate = FairGate::new(1);
        let _held = gate.acquire(1).await;
        let mut queued = Vec::new();
        for tenant in [1, 1, 1, 1, 3] {
            let g = gate.clone();
            queued.push(tokio::spawn(async move { drop(g.acquire(tenant).await) }));
            while gate.waiting() < queued.len() {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(gate.waiting(), 5);
        // A first request of tenant 2: one of tenant 1's four, tenant 3's one.
        assert_eq!(gate.ahead_of(2), 2);
        // Tenant 3 (one queued): up to two of tenant 1's, and its own.
        assert_eq!(gate.ahead_of(3), 3);
        // Tenant 1: its own four, and tenant 3's one.
        assert_eq!(gate.ahead_of(1), 5);
        for q in queued {
            q.abort();
        }
    }

    /// A permit sent to a waiter already gone is taken back whole: it goes to the next waiter,
    /// and nothing of it lingers (the gate's only owner at the end is the test).
    #[tokio::test]
    async fn a_permit_for_a_waiter_already_gone_goes_to_the_next_and_leaks_nothing() {
        let gate = FairGate::new(1);
        let first = gate.acquire(1).await;
        {
            // Tenant 5's waiter left between closing its place and counting itself out.
            let (tx, rx) = oneshot::channel();
            drop(rx);
            let mut s = gate.state.lock().unwrap();
            s.tenants.entry(5).or_default().waiters.push_back(tx);
            s.waiting += 1;
        }
        let next = {
            let gate = gate.clone();
            tokio::spawn(async move { drop(gate.acquire(6).await) })
        };
        while gate.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        drop(first);
        next.await.unwrap();
        let s = gate.state.lock().unwrap();
        assert_eq!((s.free, s.waiting), (1, 0));
        assert!(s.tenants.is_empty());
        drop(s);
        assert_eq!(
            Arc::strong_count(&gate),
            1,
            "a permit taken back still holds the gate"
        );
    }

    /// A waiter whose budget ends leaves the queue, and the permit goes to the next one.
    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_its_place() {
        let gate = FairGate::new(1);
        let first = gate.acquire(1).await;
        let quitter = {
            let gate = gate.clone();
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(10), gate.acquire(2))
                    .await
                    .is_ok()
            })
        };
        let patient = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.acquire(3).await })
        };
        assert!(!quitter.await.unwrap(), "timed out waiting");
        assert_eq!(gate.waiting(), 1, "only the patient one waits");
        assert!(!ready(&patient).await);
        drop(first);
        let p = patient.await.unwrap();
        drop(p);
        let s = gate.state.lock().unwrap();
        assert_eq!((s.free, s.waiting), (1, 0));
        assert!(s.tenants.is_empty());
    }
}
