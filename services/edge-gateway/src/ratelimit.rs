//! Per-tenant rate limiting in Redis, shared by every gateway replica.
//!
//! GCRA (the generic cell rate algorithm) in one Lua script, so the read-decide-write is atomic on
//! the Redis server and every replica sees one budget per tenant. The clock is Redis's own
//! (`TIME`), so replicas with skewed clocks still agree. A tenant may send `rate_limit_rps`
//! requests per second on average with a burst of `burst_seconds` worth of requests.
//!
//! **When Redis is down or slow the gateway fails open** and counts every such decision
//! (`gateway_ratelimit_decisions_total{decision="fail_open"}`). The limiter protects fairness
//! between tenants, not the fleet's life: failing closed would turn a Redis outage into a full
//! outage of the API — the postmortem's lesson about letting a dependency's health take down
//! everything (runbooks/rate-limiter.md). The limiter gets a small
//! deadline of its own so a slow Redis costs each request at most that much.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec};
use tokio::sync::Mutex;

/// Atomic GCRA. KEYS[1]: the tenant's key. ARGV[1]: emission interval T in microseconds (one
/// request's share of a second). ARGV[2]: burst, in requests. Returns {allowed, retry_after_us}.
/// Numbers stay below 2^53 microseconds, exact in Lua's doubles; they are written with `%.0f`
/// because `tostring` would switch to exponent notation and lose precision.
const GCRA: &str = r#"
local interval = tonumber(ARGV[1])
local tolerance = (tonumber(ARGV[2]) - 1) * interval
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
if tat - now > tolerance then
  return {0, math.floor(tat - now - tolerance)}
end
local new_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, 0}
"#;

/// What the limiter decided for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    Allowed,
    /// Over the tenant's rate: answer 429 and tell the client when to come back.
    Limited {
        retry_after: Duration,
    },
    /// Redis did not answer within the deadline: admitted without a decision (counted).
    FailOpen,
}

/// `[ratelimit]` in the gateway's configuration.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSettings {
    pub redis_url: String,
    /// Key prefix in Redis (`<namespace>:rl:<tenant>`); tests use their own.
    pub namespace: String,
    pub deadline_ms: u64,
    pub burst_seconds: f64,
}

pub struct RateLimiter {
    client: redis::Client,
    conn: Mutex<Option<redis::aio::MultiplexedConnection>>,
    script: redis::Script,
    settings: RateLimitSettings,
    decisions: IntCounterVec,
    limited: IntCounter,
}

impl RateLimiter {
    pub fn new(
        settings: RateLimitSettings,
        metrics: &lab_core::metrics::Metrics,
    ) -> anyhow::Result<Arc<Self>> {
        let client = redis::Client::open(settings.redis_url.as_str())?;
        let decisions = metrics.counter_vec(
            "gateway_ratelimit_decisions_total",
            "Rate-limit decisions, by outcome (allowed, limited, fail_open: Redis did not answer in time)",
            &["decision"],
        );
        let limited = metrics.register(
            IntCounter::new(
                "gateway_rate_limited_total",
                "Requests answered 429 because their tenant was over its rate",
            )
            .expect("valid metric"),
        );
        Ok(Arc::new(Self {
            client,
            conn: Mutex::new(None),
            script: redis::Script::new(GCRA),
            settings,
            decisions,
            limited,
        }))
    }

    /// Decide for one request of `tenant`, allowed `rps` on average.
    pub async fn check(&self, tenant: i64, rps: u32) -> Decision {
        let deadline = Duration::from_millis(self.settings.deadline_ms);
        let decision = match tokio::time::timeout(deadline, self.eval(tenant, rps)).await {
            Ok(Ok((1, _))) => Decision::Allowed,
            Ok(Ok((_, retry_us))) => Decision::Limited {
                retry_after: Duration::from_micros(retry_us.max(0) as u64),
            },
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "rate limiter: Redis failed; failing open");
                self.forget_connection();
                Decision::FailOpen
            }
            Err(_) => {
                // A half-dead connection may be what made us wait: start over next time.
                self.forget_connection();
                Decision::FailOpen
            }
        };
        let label = match decision {
            Decision::Allowed => "allowed",
            Decision::Limited { .. } => {
                self.limited.inc();
                "limited"
            }
            Decision::FailOpen => "fail_open",
        };
        self.decisions.with_label_values(&[label]).inc();
        decision
    }

    /// Drop the shared connection so the next decision connects afresh — without waiting: the
    /// lock is held only by a decision that is connecting (and will store a new connection),
    /// and waiting for it would add ITS deadline to this request's, up to twice `deadline_ms`
    /// against a black-holed Redis (issue 28).
    fn forget_connection(&self) {
        if let Ok(mut conn) = self.conn.try_lock() {
            *conn = None;
        }
    }

    async fn eval(&self, tenant: i64, rps: u32) -> redis::RedisResult<(i64, i64)> {
        let mut conn = {
            let mut guard = self.conn.lock().await;
            match guard.as_ref() {
                Some(c) => c.clone(),
                None => {
                    let c = self.client.get_multiplexed_async_connection().await?;
                    *guard = Some(c.clone());
                    c
                }
            }
        };
        let interval_us = 1_000_000 / u64::from(rps.max(1));
        let burst = ((f64::from(rps) * self.settings.burst_seconds).round() as u64).max(1);
        self.script
            .key(format!("{}:rl:{tenant}", self.settings.namespace))
            .arg(interval_us)
            .arg(burst)
            .invoke_async(&mut conn)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    /// A Redis that accepts connections and never answers (a black-holed host, a wedged
    /// server): its connection handshake hangs, as does every command.
    async fn black_hole() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        url
    }

    /// Paused time: every duration below is the runtime's virtual clock, exact, not a wall-clock
    /// measurement. A decision that started while another was connecting costs its own deadline
    /// and no more: before, its reset waited for the lock the next decision took to connect,
    /// and the first decision took 90 ms of a 50 ms deadline.
    #[tokio::test(start_paused = true)]
    async fn a_black_holed_redis_costs_each_decision_its_deadline_and_no_more() {
        let settings = RateLimitSettings {
            redis_url: black_hole().await,
            namespace: "test".into(),
            deadline_ms: 50,
            burst_seconds: 1.0,
        };
        let limiter = RateLimiter::new(settings, &lab_core::metrics::Metrics::new()).unwrap();
        let mut decisions = Vec::new();
        // Decisions 0, 40, 80, … ms apart: each starts while the one before is connecting.
        for i in 0..6u64 {
            let limiter = limiter.clone();
            decisions.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(40 * i)).await;
                let started = Instant::now();
                let decision = limiter.check(7, 10).await;
                (decision, started.elapsed())
            }));
        }
        for d in decisions {
            let (decision, took) = d.await.unwrap();
            assert_eq!(decision, Decision::FailOpen);
            assert!(
                took <= Duration::from_millis(51),
                "a decision took {took:?} against a 50 ms deadline"
            );
        }
    }
}
