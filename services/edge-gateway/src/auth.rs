//! API keys: `Authorization: Bearer rsl_<key_id>_<secret>`.
//!
//! PostgreSQL stores the SHA-256 of each key, never the key. A presented key is looked up by its
//! id, hashed, and compared in constant time. Verified, unknown and revoked key ids are cached for
//! `auth.cache_ttl_ms`, so PostgreSQL sees one lookup per key per TTL and is not on every
//! request's path; a revocation takes effect within that TTL. When re-verifying fails, the last
//! answer is used for up to `auth.stale_ttl_ms` more (fail static; see [`KeyStore::new`]).

use std::collections::HashMap;
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
    /// key id → its last answer.
    cache: Mutex<HashMap<String, Entry>>,
    outcomes: IntCounterVec,
}

/// Longest `Authorization` value considered; anything longer is not one of our keys.
const MAX_KEY_LEN: usize = 128;

impl KeyStore {
    /// `ttl`: how long an answer is trusted without asking PostgreSQL again. `stale_ttl`: when
    /// asking fails (PostgreSQL down, or saturated — in this lab it is the same database whose
    /// overload IS the incident), an answer younger than this is used anyway, counted as
    /// `gateway_auth_total{result="stale"}`: the key store being slow must not turn into an
    /// outage of the public API (fail static, as the rate limiter fails open), and revocation can
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
            outcomes: metrics.counter_vec(
                "gateway_auth_total",
                "Authentication decisions, by result (ok, stale: verified from a cached answer while \
                 the key store could not be read, missing, malformed, refused, unavailable)",
                &["result"],
            ),
        }
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
        let mut cache = self.cache.lock().expect("auth cache lock");
        // Bound the cache: a scan of random key ids must not grow it without limit.
        if cache.len() > 100_000 {
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
