//! API keys: `Authorization: Bearer rsl_<key_id>_<secret>`.
//!
//! PostgreSQL stores the SHA-256 of each key, never the key. A presented key is looked up by its
//! id, hashed, and compared in constant time. Verified, unknown and revoked key ids are cached for
//! `auth.cache_ttl_ms`, so PostgreSQL sees one lookup per key per TTL and is not on every
//! request's path; a revocation takes effect within that TTL. When re-verifying fails, the last
//! answer is used for up to `auth.stale_ttl_ms` more (fail static; see [`KeyStore::new`]).
//!
//! A gateway reads every key once when it starts ([`KeyStore::preload`]): a fresh replica (a
//! rollout, a restart during a flood of random key ids) knows the real tenants' keys before
//! their first request, so those never queue for a first lookup behind the flood.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab_core::http::ApiError;
use prometheus::IntCounterVec;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

/// The verified identity of a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenant {
    pub id: i64,
    /// Requests per second the tenant's plan allows (`tenants.rate_limit_rps`), cached with the
    /// key so the rate limiter needs no query of its own.
    pub rate_limit_rps: u32,
}

#[derive(Clone)]
enum Cached {
    Active {
        tenant: i64,
        rate_limit_rps: u32,
        sha256: [u8; 32],
    },
    /// Unknown or revoked: cached too, so a flood of bad keys cannot reach PostgreSQL.
    Refused,
}

/// A cached answer: when PostgreSQL last confirmed it, and when it was last asked.
#[derive(Clone)]
struct Entry {
    /// Bounds how stale an answer may be used (`stale_ttl`).
    verified_at: Instant,
    /// Bounds how often PostgreSQL is asked (`ttl`): a failed re-verification counts, so while
    /// the store is down each key waits `refresh_timeout` once per `ttl`, not on every request.
    checked_at: Instant,
    answer: Cached,
}

pub struct KeyStore {
    pool: PgPool,
    ttl: Duration,
    /// How long a cached answer may still be used when re-verifying it fails (see [`KeyStore::new`]).
    stale_ttl: Duration,
    /// How long a request waits for re-verifying an expired answer before using it stale.
    refresh_timeout: Duration,
    /// key id → its last answer, for keys PostgreSQL knows (active or revoked).
    cache: Mutex<HashMap<String, Entry>>,
    /// Key ids PostgreSQL does not know, kept apart so that a flood of random ids can neither
    /// grow the known keys' cache nor make its upkeep cost more than O(1) per insert.
    unknown: Mutex<Negative>,
    /// Lookups of key ids in neither cache, at once: a flood of never-seen ids gets at most this
    /// many of the pool's connections; past `refresh_timeout` waiting for one a request is
    /// refused (503, retry later) — while every key already cached keeps authenticating without
    /// asking PostgreSQL.
    first_lookups: tokio::sync::Semaphore,
    /// `auth.flood_guard`: the two bounds above (see [`KeyStore::with_flood_guard`]).
    flood_guard: bool,
    outcomes: IntCounterVec,
    preloaded: prometheus::IntGauge,
}

/// A bounded set of unknown key ids: insertion order in a ring, the oldest out first (O(1)).
struct Negative {
    order: VecDeque<(String, Instant)>,
    ids: HashSet<String>,
    capacity: usize,
}

impl Negative {
    fn new(capacity: usize) -> Self {
        Self {
            order: VecDeque::new(),
            ids: HashSet::new(),
            capacity: capacity.max(1),
        }
    }

    /// Known to be unknown, and asked less than `ttl` ago.
    fn contains(&mut self, id: &str, ttl: Duration) -> bool {
        // Expired entries leave from the front as they are met: each leaves once, O(1) amortised.
        while let Some((front, at)) = self.order.front() {
            if at.elapsed() < ttl {
                break;
            }
            self.ids.remove(front);
            self.order.pop_front();
        }
        self.ids.contains(id)
    }

    fn insert(&mut self, id: &str) {
        if !self.ids.insert(id.to_string()) {
            return;
        }
        self.order.push_back((id.to_string(), Instant::now()));
        while self.order.len() > self.capacity {
            if let Some((old, _)) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.ids.len()
    }
}

/// Unknown key ids remembered: at the lab's TTL of a few seconds, a flood of 20,000 random ids a
/// second is still answered from memory; ~100 bytes each, 2 MB at most.
const UNKNOWN_CAPACITY: usize = 20_000;
/// Lookups of never-seen key ids at once: half the gateway's 4 key-store connections, so a flood
/// of them leaves the other half to refreshing the keys of real tenants.
const FIRST_LOOKUPS: usize = 2;
/// Known keys cached at most (real tenants' keys: the lab seeds 2,000 tenants).
const KNOWN_CAPACITY: usize = 100_000;

/// Longest `Authorization` value considered; anything longer is not one of our keys.
const MAX_KEY_LEN: usize = 128;

impl KeyStore {
    /// `ttl`: how long an answer is trusted without asking PostgreSQL again. `stale_ttl`: when
    /// asking fails (PostgreSQL down, or saturated — in this lab it is the same database whose
    /// overload IS the incident), an answer younger than this is used anyway, counted as
    /// `gateway_auth_total{result="stale"}`: the key store being slow must not turn into an
    /// outage of the public API (fail static, as the rate limiter falls back to its local buckets), and revocation can
    /// take at most `stale_ttl` while the store is unreachable. `refresh_timeout`: the longest a
    /// request waits to re-verify an expired answer before falling back to it.
    pub fn new(
        pool: PgPool,
        ttl: Duration,
        stale_ttl: Duration,
        refresh_timeout: Duration,
        metrics: &lab_core::metrics::Metrics,
    ) -> Self {
        Self {
            pool,
            ttl,
            stale_ttl,
            refresh_timeout,
            cache: Mutex::new(HashMap::new()),
            unknown: Mutex::new(Negative::new(UNKNOWN_CAPACITY)),
            first_lookups: tokio::sync::Semaphore::new(FIRST_LOOKUPS),
            flood_guard: true,
            outcomes: metrics.counter_vec(
                "gateway_auth_total",
                "Authentication decisions, by result (ok, stale: verified from a cached answer while \
                 the key store could not be read, missing, malformed, refused, unavailable, \
                 busy: a never-seen key id refused after waiting refresh_timeout for one of the \
                 few lookups such ids may make at once)",
                &["result"],
            ),
            preloaded: metrics.register(
                prometheus::IntGauge::new(
                    "gateway_auth_keys_preloaded",
                    "API keys read into the cache when the gateway started (0 until the read \
                     succeeded)",
                )
                .expect("valid metric"),
            ),
        }
    }

    /// Read every key (up to [`KNOWN_CAPACITY`]) into the cache, as verified now; returns how
    /// many were read. Issue 28: a fresh gateway under 5,000 never-seen ids a second served real tenants'
    /// first requests 503 `auth_busy`, their lookups queued for the 2 first-lookup permits
    /// behind the flood's; preloaded, a real key is a cache hit from the first request and the
    /// permits are the flood's alone. The same columns the per-key lookup reads (its grant).
    pub async fn preload(&self) -> Result<usize, sqlx::Error> {
        let rows = sqlx::query_as::<_, (String, i64, Vec<u8>, bool, i32)>(
            "SELECT k.key_id, k.tenant_id, k.key_sha256, k.revoked_at IS NOT NULL, t.rate_limit_rps
             FROM api_keys k JOIN tenants t ON t.id = k.tenant_id LIMIT $1",
        )
        .bind(KNOWN_CAPACITY as i64)
        .fetch_all(&self.pool)
        .await?;
        let now = Instant::now();
        let read = rows.len();
        let mut cache = self.cache.lock().expect("auth cache lock");
        for (key_id, tenant, hash, revoked, rps) in rows {
            let answer = match hash.try_into() {
                Ok(sha256) if !revoked => Cached::Active {
                    tenant,
                    rate_limit_rps: rps.max(1) as u32,
                    sha256,
                },
                _ => Cached::Refused,
            };
            // A key a request verified meanwhile keeps that answer: it is as fresh.
            cache.entry(key_id).or_insert(Entry {
                verified_at: now,
                checked_at: now,
                answer,
            });
        }
        self.preloaded.set(read as i64);
        Ok(read)
    }

    /// [`KeyStore::preload`] until it succeeds once, `every` apart (the gateway starts while
    /// PostgreSQL is down; requests meanwhile fill the cache one key at a time).
    pub fn spawn_preload(
        self: &std::sync::Arc<Self>,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                match me.preload().await {
                    Ok(n) => {
                        tracing::info!(keys = n, "API keys preloaded");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "preloading API keys failed; retrying");
                        tokio::time::sleep(every).await;
                    }
                }
            }
        })
    }

    /// `auth.flood_guard = false` puts back the key store as it was before the flood was bounded,
    /// so the lab can measure both on one binary (scripts/flood-check.sh):
    ///
    /// LAB-BUG(auth-flood): every never-seen key id queues for the 4-connection pool alongside
    /// real tenants' refreshes, and unknown ids share the known keys' cache, whose upkeep past
    /// 100,000 entries is an O(n) `retain` under a std mutex on a runtime thread, on every insert.
    ///
    /// LAB-FIX(auth-flood), the default: unknown ids in their own O(1) ring ([`Negative`]); at
    /// most [`FIRST_LOOKUPS`] lookups of never-seen ids at once, each waiting at most
    /// `refresh_timeout` for its turn, then refused `busy`.
    pub fn with_flood_guard(mut self, on: bool) -> Self {
        self.flood_guard = on;
        self
    }

    /// Verify the `Authorization` header value.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Tenant, ApiError> {
        let result = self.check(authorization).await;
        let label = match &result {
            Ok((_, false)) => "ok",
            Ok((_, true)) => "stale",
            Err((label, _)) => label,
        };
        self.outcomes.with_label_values(&[label]).inc();
        result.map(|(tenant, _)| tenant).map_err(|(_, e)| e)
    }

    /// The tenant, and whether it was verified from a stale answer.
    async fn check(
        &self,
        authorization: Option<&str>,
    ) -> Result<(Tenant, bool), (&'static str, ApiError)> {
        let Some(value) = authorization else {
            return Err((
                "missing",
                ApiError::unauthorized("missing credentials: send Authorization: Bearer <api key>"),
            ));
        };
        let invalid = || ("malformed", ApiError::unauthorized("invalid API key"));
        let key = value.strip_prefix("Bearer ").ok_or_else(invalid)?.trim();
        if key.len() > MAX_KEY_LEN {
            return Err(invalid());
        }
        let key_id = parse_key_id(key).ok_or_else(invalid)?;
        let presented: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let (entry, stale) = self.lookup(key_id).await?;
        match entry {
            Cached::Active {
                tenant,
                rate_limit_rps,
                sha256,
            } if constant_time_eq::constant_time_eq_32(&sha256, &presented) => Ok((
                Tenant {
                    id: tenant,
                    rate_limit_rps,
                },
                stale,
            )),
            _ => Err(("refused", ApiError::unauthorized("invalid API key"))),
        }
    }

    /// The answer for `key_id`, and whether it is a stale one (the store could not be read).
    async fn lookup(&self, key_id: &str) -> Result<(Cached, bool), (&'static str, ApiError)> {
        let previous = self
            .cache
            .lock()
            .expect("auth cache lock")
            .get(key_id)
            .cloned();
        if let Some(e) = &previous {
            if e.checked_at.elapsed() < self.ttl {
                // Asked recently: the answer as it stands (stale if that asking failed).
                return Ok((e.answer.clone(), e.verified_at.elapsed() >= self.ttl));
            }
        }
        if previous.is_none()
            && self.flood_guard
            && self
                .unknown
                .lock()
                .expect("auth cache lock")
                .contains(key_id, self.ttl)
        {
            return Ok((Cached::Refused, false));
        }
        // A key id in neither cache takes one of the few first-lookup permits, waiting at most
        // `refresh_timeout` for one, or is refused: a flood of random ids queues here, not on
        // the pool ahead of real tenants' refreshes. (A real key seen for the first time waits
        // its turn too: 2 lookups of ~1 ms each clear ~2,000 new keys a second, a cold
        // gateway's whole key set in about one.)
        let _first = match previous {
            Some(_) => None,
            None if !self.flood_guard => None,
            None => match tokio::time::timeout(self.refresh_timeout, self.first_lookups.acquire())
                .await
            {
                Ok(Ok(p)) => Some(p),
                _ => {
                    // Its own row: the key store is up, a flood of new ids decided this (it was
                    // `auth_unavailable`, the same row as a real database failure — issue 24).
                    return Err((
                        "busy",
                        ApiError::unavailable(
                            "auth_busy",
                            "too many new API keys are being verified at once; retry later",
                        ),
                    ));
                }
            },
        };
        let query = sqlx::query_as::<_, (i64, Vec<u8>, bool, i32)>(
            "SELECT k.tenant_id, k.key_sha256, k.revoked_at IS NOT NULL, t.rate_limit_rps
             FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.key_id = $1",
        )
        .bind(key_id)
        .fetch_optional(&self.pool);
        // An expired answer in hand bounds the wait for a fresh one.
        let usable = previous
            .as_ref()
            .filter(|e| e.verified_at.elapsed() < self.stale_ttl)
            .cloned();
        let fetched = match &usable {
            Some(_) => match tokio::time::timeout(self.refresh_timeout, query).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!(
                    "no answer within {} ms",
                    self.refresh_timeout.as_millis()
                )),
            },
            None => query.await.map_err(|e| e.to_string()),
        };
        let row = match fetched {
            Ok(row) => row,
            Err(e) => {
                if let Some(mut entry) = usable {
                    tracing::debug!(error = %e, "API key re-verification failed; using the last answer");
                    // Asked and failed: do not ask again for a TTL.
                    entry.checked_at = Instant::now();
                    let answer = entry.answer.clone();
                    self.cache
                        .lock()
                        .expect("auth cache lock")
                        .insert(key_id.to_string(), entry);
                    return Ok((answer, true));
                }
                tracing::warn!(error = %e, "API key lookup failed");
                return Err((
                    "unavailable",
                    ApiError::unavailable(
                        "auth_unavailable",
                        "cannot verify the API key right now; retry later",
                    ),
                ));
            }
        };
        let cached = match row {
            Some((tenant, hash, false, rps)) if hash.len() == 32 => Cached::Active {
                tenant,
                rate_limit_rps: rps.max(1) as u32,
                sha256: hash.try_into().expect("length checked"),
            },
            _ => Cached::Refused,
        };
        if matches!(cached, Cached::Refused) && previous.is_none() && self.flood_guard {
            // Not a key PostgreSQL knows: remembered apart, in O(1).
            self.unknown.lock().expect("auth cache lock").insert(key_id);
            return Ok((cached, false));
        }
        let mut cache = self.cache.lock().expect("auth cache lock");
        // Known keys only (real tenants' and revoked ones): this bound is a backstop, not the
        // flood's path.
        if cache.len() > KNOWN_CAPACITY {
            cache.retain(|_, e| e.checked_at.elapsed() < self.ttl);
        }
        let now = Instant::now();
        cache.insert(
            key_id.to_string(),
            Entry {
                verified_at: now,
                checked_at: now,
                answer: cached.clone(),
            },
        );
        Ok((cached, false))
    }
}

/// `rsl_<key_id>_<secret>` → `key_id` (12 lowercase hex characters).
pub fn parse_key_id(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("rsl_")?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    (id.len() == 12 && hex(id) && !secret.is_empty() && hex(secret)).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_ids_are_bounded_and_evicted_oldest_first() {
        let mut n = Negative::new(3);
        for id in ["a", "b", "c", "d", "e"] {
            n.insert(id);
        }
        assert_eq!(n.len(), 3);
        let ttl = Duration::from_secs(60);
        assert!(!n.contains("a", ttl) && !n.contains("b", ttl));
        assert!(n.contains("c", ttl) && n.contains("e", ttl));
        n.insert("e"); // again: no duplicate, nothing evicted
        assert_eq!(n.len(), 3);
        // Past the TTL every entry leaves on the next look.
        assert!(!n.contains("e", Duration::ZERO));
        assert_eq!(n.len(), 0);
    }

    /// A store over a database holding one tenant's key, with `refresh_timeout` 0 (what is not
    /// admitted to a first lookup at once is counted `busy`, so the bound shows in counts rather
    /// than in timing), and the real key's `Authorization` value, authenticated once (cached).
    async fn flood_store(guard: bool) -> (std::sync::Arc<KeyStore>, String, testkit::TestDb) {
        let db = testkit::TestDb::new().await;
        let key = testkit::fixtures::tenant_with_key(&db.url, 1).await;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect(&db.url)
            .await
            .unwrap();
        let metrics = lab_core::metrics::Metrics::new();
        let store = std::sync::Arc::new(
            KeyStore::new(
                pool,
                Duration::from_secs(60),
                Duration::from_secs(300),
                Duration::ZERO,
                &metrics,
            )
            .with_flood_guard(guard),
        );
        let real = format!("Bearer {}", key.api_key);
        assert_eq!(store.authenticate(Some(&real)).await.unwrap().id, 1);
        (store, real, db)
    }

    /// `n` never-seen, well-formed key ids at once.
    fn spawn_flood(
        store: &std::sync::Arc<KeyStore>,
        n: u64,
    ) -> Vec<tokio::task::JoinHandle<Result<Tenant, ApiError>>> {
        (0..n)
            .map(|i| {
                let s = store.clone();
                tokio::spawn(async move {
                    let k = format!("Bearer rsl_{:012x}_{:064x}", 0xf00000000000u64 + i, i);
                    s.authenticate(Some(&k)).await
                })
            })
            .collect()
    }

    /// A flood of never-seen key ids at once: a few are looked up, the rest refused at once as
    /// `busy`, and a real tenant's cached key keeps authenticating through it without a query.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_of_unknown_keys_is_bounded_and_a_cached_key_goes_on_authenticating() {
        let (store, real, _db) = flood_store(true).await;
        let flood = spawn_flood(&store, 200);
        let mut real_ok = 0;
        for _ in 0..50 {
            if store.authenticate(Some(&real)).await.is_ok() {
                real_ok += 1;
            }
        }
        let mut refused = 0;
        let mut busy_answers = 0;
        for f in flood {
            let e = f
                .await
                .unwrap()
                .expect_err("an unknown key never authenticates");
            // A busy refusal answers its own row, never the key store's failure.
            assert_ne!(e.code, "auth_unavailable", "{e:?}");
            busy_answers += u64::from(e.code == "auth_busy");
            refused += 1;
        }
        assert_eq!(refused, 200);
        assert_eq!(
            real_ok, 50,
            "the cached key authenticated through the flood"
        );
        let count = |r: &str| store.outcomes.with_label_values(&[r]).get();
        let (looked_up, busy) = (count("refused"), count("busy"));
        assert_eq!(looked_up + busy, 200);
        assert!(busy > 0, "some never-seen ids were refused at once");
        assert_eq!(busy_answers, busy, "every busy refusal answered auth_busy");
        let remembered = store.unknown.lock().unwrap().len() as u64;
        assert_eq!(
            remembered, looked_up,
            "every id looked up is remembered apart"
        );
        assert_eq!(
            store.cache.lock().unwrap().len(),
            1,
            "the known keys' cache holds the real key only"
        );
        // A remembered unknown id is refused from memory: no permit, no query, not busy.
        let id = store
            .unknown
            .lock()
            .unwrap()
            .ids
            .iter()
            .next()
            .cloned()
            .expect("at least one id was looked up");
        let (busy_before, refused_before) = (count("busy"), count("refused"));
        let again = format!("Bearer rsl_{id}_{:064x}", 0);
        assert!(store.authenticate(Some(&again)).await.is_err());
        assert_eq!(count("busy"), busy_before);
        assert_eq!(count("refused"), refused_before + 1);
    }

    /// `auth.flood_guard = false` (LAB-BUG(auth-flood)) is the old store, measurably: the same
    /// flood gets no first-lookup bound (every id is looked up, none `busy`), and the unknown
    /// ids land in the known keys' cache rather than in a ring of their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_the_flood_guard_every_unknown_id_is_looked_up_and_cached_with_the_known_keys()
    {
        let (store, _real, _db) = flood_store(false).await;
        let flood = spawn_flood(&store, 200);
        for f in flood {
            assert!(
                f.await.unwrap().is_err(),
                "an unknown key never authenticates"
            );
        }
        let count = |r: &str| store.outcomes.with_label_values(&[r]).get();
        assert_eq!((count("refused"), count("busy")), (200, 0));
        assert_eq!(
            store.unknown.lock().unwrap().len(),
            0,
            "no ring of unknown ids"
        );
        assert_eq!(
            store.cache.lock().unwrap().len(),
            201,
            "the real key and all 200 unknown ids share one cache"
        );
    }

    #[test]
    fn parse_key_id_accepts_only_the_documented_shape() {
        assert_eq!(
            parse_key_id("rsl_0123456789ab_deadbeef"),
            Some("0123456789ab")
        );
        assert_eq!(parse_key_id("rsl_0123456789ab_"), None);
        assert_eq!(parse_key_id("rsl_0123456789AB_deadbeef"), None);
        assert_eq!(parse_key_id("rsl_short_deadbeef"), None);
        assert_eq!(parse_key_id("xyz_0123456789ab_deadbeef"), None);
        assert_eq!(parse_key_id(""), None);
    }
}
