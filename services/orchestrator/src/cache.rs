//! The in-process resolution cache.
//!
//! Keyed by tenant + request locale + normalized span (the locale changes what the candidate
//! lookup may return). Negative answers are cached too: an unresolvable span costs a lookup once,
//! not on every document. One mutex around the LRU: critical sections are a hash lookup and a
//! list splice, far shorter than any contention they could cause at the lab's rates.
//!
//! An exact match does not depend on the locale (`(tenant, normalized_name)` is the whole key of
//! that lookup), so an entry without a locale holding an exact match answers a request in any
//! locale: that is what the boot warm-up ([`ResolutionCache::warm`]) fills.

use std::num::NonZeroUsize;
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
    lru: Mutex<LruCache<CacheKey, Option<Resolution>>>,
    hits: IntCounter,
    misses: IntCounter,
    entries: IntGauge,
}

impl ResolutionCache {
    pub fn new(capacity: usize, metrics: &lab_core::metrics::Metrics) -> Self {
        let requests = metrics.counter_vec(
            "orchestrator_cache_requests_total",
            "Span lookups in the in-process resolution cache, by result (hit, miss)",
            &["result"],
        );
        Self {
            lru: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity.max(1)).expect("non-zero"),
            )),
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
        self.entries.set(lru.len() as i64);
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
        self.entries.set(lru.len() as i64);
        n
    }

    pub fn len(&self) -> usize {
        self.lru.lock().expect("cache lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
