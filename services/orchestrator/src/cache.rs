//! The in-process resolution cache.
//!
//! Keyed by tenant + request locale + normalized span (the locale changes what the candidate
//! lookup may return). Negative answers are cached too: an unresolvable span costs a lookup once,
//! not on every document. One mutex around the LRUs: critical sections are a hash lookup and a
//! list splice, far shorter than any contention they could cause at the lab's rates.
//!
//! **One tenant cannot evict the others (issue 28).** Each tenant has its own LRU, and when the
//! cache is full the tenant holding the most entries gives one up — its own least recently used
//! — whoever is putting: max-min fairness over the capacity. A tenant sending document after
//! document of never-seen names fills the cache and then recycles its own entries, while every
//! other tenant keeps what it had; with one tenant, or with room to spare (the default corpus has
//! ~150,000 distinct keys against a capacity of 200,000), it is a plain LRU.
//!
//! An exact match does not depend on the locale (`(tenant, normalized_name)` is the whole key of
//! that lookup), so an entry without a locale holding an exact match answers a request in any
//! locale: that is what the boot warm-up ([`ResolutionCache::warm`]) fills.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use lab_api::wire::Resolution;
use lru::LruCache;
use prometheus::{IntCounter, IntGauge};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub tenant: i64,
    pub locale: Option<String>,
    pub normalized: String,
}

pub struct ResolutionCache {
    lru: Mutex<Shards>,
    hits: IntCounter,
    misses: IntCounter,
    entries: IntGauge,
}

/// Every tenant's LRU, and who holds the most.
struct Shards {
    by_tenant: HashMap<i64, LruCache<CacheKey, Option<Resolution>>>,
    /// (entries, tenant) for every tenant holding any: the largest is the last.
    sizes: BTreeSet<(usize, i64)>,
    len: usize,
    capacity: usize,
}

impl Shards {
    fn new(capacity: usize) -> Self {
        Self {
            by_tenant: HashMap::new(),
            sizes: BTreeSet::new(),
            len: 0,
            capacity: capacity.max(1),
        }
    }

    fn get(&mut self, key: &CacheKey) -> Option<&Option<Resolution>> {
        self.by_tenant.get_mut(&key.tenant)?.get(key)
    }

    fn put(&mut self, key: CacheKey, value: Option<Resolution>) {
        let tenant = key.tenant;
        let lru = self
            .by_tenant
            .entry(tenant)
            .or_insert_with(LruCache::unbounded);
        let before = lru.len();
        lru.put(key, value);
        if lru.len() > before {
            self.len += 1;
            self.resized(tenant, before, before + 1);
        }
        while self.len > self.capacity {
            self.evict_from_the_largest();
        }
    }

    /// The tenant holding the most entries gives up its least recently used one.
    fn evict_from_the_largest(&mut self) {
        let Some(&(n, tenant)) = self.sizes.last() else {
            return;
        };
        let lru = self
            .by_tenant
            .get_mut(&tenant)
            .expect("sized tenants have an LRU");
        lru.pop_lru();
        self.len -= 1;
        self.resized(tenant, n, n - 1);
        if n == 1 {
            self.by_tenant.remove(&tenant);
        }
    }

    fn resized(&mut self, tenant: i64, from: usize, to: usize) {
        if from > 0 {
            self.sizes.remove(&(from, tenant));
        }
        if to > 0 {
            self.sizes.insert((to, tenant));
        }
    }
}

impl ResolutionCache {
    pub fn new(capacity: usize, metrics: &lab_core::metrics::Metrics) -> Self {
        let requests = metrics.counter_vec(
            "orchestrator_cache_requests_total",
            "Span lookups in the in-process resolution cache, by result (hit, miss)",
            &["result"],
        );
        Self {
            lru: Mutex::new(Shards::new(capacity)),
            hits: requests.with_label_values(&["hit"]),
            misses: requests.with_label_values(&["miss"]),
            entries: metrics.gauge(
                "orchestrator_cache_entries",
                "Entries in the in-process resolution cache",
            ),
        }
    }

    /// `Some(answer)` on a hit (the answer itself may be "no entity").
    pub fn get(&self, key: &CacheKey) -> Option<Option<Resolution>> {
        let found = {
            let mut lru = self.lru.lock().expect("cache lock");
            match lru.get(key).cloned() {
                Some(v) => Some(v),
                // A locale-free exact match answers every locale (never a candidate or a "no").
                None if key.locale.is_some() => {
                    let any = CacheKey {
                        locale: None,
                        ..key.clone()
                    };
                    lru.get(&any)
                        .filter(|v| {
                            v.as_ref()
                                .is_some_and(|r| r.method == lab_api::wire::MatchMethod::Exact)
                        })
                        .cloned()
                }
                None => None,
            }
        };
        match found {
            Some(_) => self.hits.inc(),
            None => self.misses.inc(),
        }
        found
    }

    pub fn put(&self, key: CacheKey, value: Option<Resolution>) {
        let mut lru = self.lru.lock().expect("cache lock");
        lru.put(key, value);
        self.entries.set(lru.len as i64);
    }

    /// Pre-populate with exact matches (locale-free: they answer every locale), oldest first so
    /// the most popular end up most recently used. Returns how many went in.
    pub fn warm(&self, entries: Vec<lab_api::wire::PopularEntity>) -> usize {
        let n = entries.len();
        let mut lru = self.lru.lock().expect("cache lock");
        for e in entries.into_iter().rev() {
            lru.put(
                CacheKey {
                    tenant: e.tenant,
                    locale: None,
                    normalized: e.normalized,
                },
                Some(Resolution {
                    entity: e.entity,
                    confidence: 1.0,
                    method: lab_api::wire::MatchMethod::Exact,
                }),
            );
        }
        self.entries.set(lru.len as i64);
        n
    }

    pub fn len(&self) -> usize {
        self.lru.lock().expect("cache lock").len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: i64, name: &str) -> CacheKey {
        CacheKey {
            tenant,
            locale: Some("en".into()),
            normalized: name.into(),
        }
    }

    fn cache(capacity: usize) -> ResolutionCache {
        ResolutionCache::new(capacity, &lab_core::metrics::Metrics::new())
    }

    #[test]
    fn a_tenant_flooding_never_seen_names_evicts_only_its_own_entries() {
        let c = cache(1_000);
        for i in 0..100 {
            c.put(key(2, &format!("b{i}")), None);
        }
        // Tenant 1: ten times the capacity of distinct names, as one huge document would.
        for i in 0..10_000 {
            c.put(key(1, &format!("a{i}")), None);
        }
        assert_eq!(c.len(), 1_000);
        let b_hits = (0..100)
            .filter(|i| c.get(&key(2, &format!("b{i}"))).is_some())
            .count();
        assert_eq!(b_hits, 100, "tenant 2 kept every entry");
        // Tenant 1 recycled its own: its newest are there, its oldest gone.
        assert!(c.get(&key(1, "a9999")).is_some());
        assert!(c.get(&key(1, "a0")).is_none());
    }

    #[test]
    fn one_tenant_is_a_plain_lru_and_the_largest_tenant_gives_way() {
        let c = cache(3);
        for n in ["x", "y", "z"] {
            c.put(key(1, n), None);
        }
        c.get(&key(1, "x")); // x is now the most recently used
        c.put(key(1, "w"), None);
        assert!(
            c.get(&key(1, "y")).is_none(),
            "y was the least recently used"
        );
        assert!(c.get(&key(1, "x")).is_some() && c.get(&key(1, "w")).is_some());
        // A second tenant's first entry takes the room from the first tenant (3 against 0).
        c.put(key(2, "p"), None);
        assert_eq!(c.len(), 3);
        assert!(c.get(&key(2, "p")).is_some());
        // Re-putting a key held does not grow the cache or evict anything.
        c.put(key(2, "p"), None);
        assert_eq!(c.len(), 3);
    }
}
