//! entity-service's own view of its work.
//!
//! The callee's duration histogram reaches 60 s (the gateway's view stops at its 3 s budget).
//! Abandoned work is measured here, where the work happens: handler seconds spent after the end
//! user's request had already ended at the gateway, read from the observation-only header
//! [`lab_api::headers::OBSERVE_USER_DEADLINE`] — so it is measurable in legacy mode too.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::Pool;

use crate::fair::FairGate;
use lab_core::metrics::{HttpMetrics, Metrics, CALLEE_BUCKETS};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, HistogramVec, IntCounter, IntGauge, IntGaugeVec, Opts};

#[derive(Clone)]
pub struct ServiceMetrics {
    pub http: HttpMetrics,
    pub query_duration: HistogramVec,
    pub spans: prometheus::IntCounterVec,
    /// Handler seconds, all requests (denominator of the abandoned-work ratio).
    pub busy_seconds: Counter,
    /// Handler seconds after the end user's deadline had passed.
    pub abandoned_seconds: Counter,
    /// Requests that finished after the end user's deadline.
    pub abandoned_requests: IntCounter,
    /// Requests refused before any work, by reason (budget: the caller's X-Request-Budget-Ms
    /// could not cover the work; queue: not after the wait for a connection).
    pub shed: prometheus::IntCounterVec,
    /// Budgeted requests that found PostgreSQL unreachable and waited for it inside their
    /// budget, by outcome (reconnected, gave_up).
    pub db_waits: prometheus::IntCounterVec,
    /// Game-day faults injected, by kind (latency, error_503, error_500, black_hole).
    pub faults: prometheus::IntCounterVec,
}

impl ServiceMetrics {
    /// `gate`: the budgeted requests' turns at `pool` (their waiters count as waiting).
    pub fn new(metrics: &Metrics, pool: Pool, gate: Arc<FairGate>) -> Self {
        metrics.register(PoolCollector::new(pool, gate));
        let busy_seconds = metrics.register(
            Counter::new(
                "entity_service_busy_seconds_total",
                "Handler seconds spent on /v1/resolve, all requests",
            )
            .expect("valid metric"),
        );
        let abandoned_seconds = metrics.register(
            Counter::new(
                "entity_service_abandoned_seconds_total",
                "Handler seconds spent after the end user's request had already ended at the gateway",
            )
            .expect("valid metric"),
        );
        let abandoned_requests = metrics.register(
            IntCounter::new(
                "entity_service_abandoned_requests_total",
                "Requests finished after the end user's request had already ended at the gateway",
            )
            .expect("valid metric"),
        );
        Self {
            http: HttpMetrics::new(metrics, lab_contract::Hop::EntityService, "entity_service", "to /v1/resolve", CALLEE_BUCKETS)
                .with_span_name("entity-service.Resolve"),
            query_duration: metrics.histogram_vec(
                "entity_db_query_duration_seconds",
                "Duration of entity-service's prepared statements, including the wait for a pooled connection",
                &["query"],
                CALLEE_BUCKETS,
            ),
            spans: metrics.counter_vec(
                "entity_service_spans_total",
                "Spans resolved, by how they matched (exact, candidate, none)",
                &["method"],
            ),
            shed: metrics.counter_vec(
                "entity_service_shed_total",
                "Requests refused before any work, by reason (budget: the query alone, at its recent cost, cannot fit the caller's budget; queue: not after the wait for a PostgreSQL connection)",
                &["reason"],
            ),
            db_waits: metrics.counter_vec(
                "entity_service_db_unreachable_waits_total",
                "Budgeted requests that found PostgreSQL unreachable and kept reconnecting inside their budget, by outcome (reconnected: it came back in time; gave_up: it did not)",
                &["outcome"],
            ),
            faults: metrics.counter_vec(
                "entity_service_faults_injected_total",
                "Game-day faults injected from the fault.entity.* flags, by kind",
                &["kind"],
            ),
            busy_seconds,
            abandoned_seconds,
            abandoned_requests,
        }
    }
}

/// Accounts one request's handler time, including when the handler is dropped mid-way.
pub struct WorkGuard {
    metrics: ServiceMetrics,
    started_wall: SystemTime,
    started: std::time::Instant,
    user_deadline: Option<SystemTime>,
}

impl WorkGuard {
    pub fn new(metrics: ServiceMetrics, user_deadline_unix_ms: Option<u64>) -> Self {
        Self {
            metrics,
            started_wall: SystemTime::now(),
            started: std::time::Instant::now(),
            user_deadline: user_deadline_unix_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        }
    }
}

impl Drop for WorkGuard {
    fn drop(&mut self) {
        let elapsed = self.started.elapsed();
        self.metrics.busy_seconds.inc_by(elapsed.as_secs_f64());
        let Some(deadline) = self.user_deadline else {
            return;
        };
        let end = self.started_wall + elapsed;
        if end > deadline {
            let from = deadline.max(self.started_wall);
            let wasted = end.duration_since(from).unwrap_or_default();
            self.metrics.abandoned_seconds.inc_by(wasted.as_secs_f64());
            self.metrics.abandoned_requests.inc();
        }
    }
}

/// Pool occupancy, read at scrape time.
#[derive(Clone)]
struct PoolCollector {
    pool: Pool,
    gate: Arc<FairGate>,
    connections: IntGaugeVec,
    waiting: IntGauge,
    max: IntGauge,
}

impl PoolCollector {
    fn new(pool: Pool, gate: Arc<FairGate>) -> Self {
        Self {
            pool,
            gate,
            connections: IntGaugeVec::new(
                Opts::new(
                    "entity_db_pool_connections",
                    "PostgreSQL connections in this replica's pool, by state",
                ),
                &["state"],
            )
            .expect("valid metric"),
            waiting: IntGauge::new(
                "entity_db_pool_waiting",
                "Requests waiting for a free PostgreSQL connection: in the pool's own queue, or for their tenant's turn at it (budgeted requests)",
            )
            .expect("valid metric"),
            max: IntGauge::new(
                "entity_db_pool_max",
                "Size limit of this replica's PostgreSQL pool",
            )
            .expect("valid metric"),
        }
    }
}

impl Collector for PoolCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut d = self.connections.desc();
        d.extend(self.waiting.desc());
        d.extend(self.max.desc());
        d
    }
    fn collect(&self) -> Vec<MetricFamily> {
        let s = self.pool.status();
        let idle = s.available as i64;
        self.connections.with_label_values(&["idle"]).set(idle);
        self.connections
            .with_label_values(&["in_use"])
            .set(s.size as i64 - idle);
        self.waiting.set((s.waiting + self.gate.waiting()) as i64);
        self.max.set(s.max_size as i64);
        let mut out = self.connections.collect();
        out.extend(self.waiting.collect());
        out.extend(self.max.collect());
        out
    }
}
