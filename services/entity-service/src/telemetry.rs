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
    /// From the client's send (`X-Lab-Observe-Sent-Unix-Us`) to the handler's start, where
    /// this replica starts counting the caller's budget: the part of the budget the header does
    /// not cover. Requests that reached the handler only.
    pub transit: prometheus::Histogram,
    /// Budgeted `/v1/resolve` requests with a send stamp, by how they ended for their caller
    /// ([`CallerWatch`]).
    pub budgeted: prometheus::IntCounterVec,
    /// `SET statement_timeout` sent ahead of a lookup, by what it set (`budget`: a budgeted
    /// request's; `default`: a request without a budget on a connection that had one or was
    /// new): what keeping the timeout on the connection costs, against one per budgeted request
    /// (and a BEGIN and a ROLLBACK) before (crate::session).
    pub session_sets: prometheus::IntCounterVec,
}

/// How a budgeted request ended, seen from its caller's attempt (sent + `X-Request-Budget-Ms`,
/// wall clock): `answered_in_time`; `answered_late` (the answer was ready only after the
/// caller's attempt had ended: work nobody was waiting for); `dropped` (the handler was dropped
/// before it answered: its caller hung up, which the fixed client does when its attempt's time
/// is up); `error` (an error answer: refused, shed or failed).
pub const BUDGETED_OUTCOMES: [&str; 4] = ["answered_in_time", "answered_late", "dropped", "error"];

/// Transit samples outside `0..=MAX_TRANSIT` are a clock's error, not a transit, and are not
/// observed: one host's clock on both sides in the native lab never gives one; across hosts a
/// skewed clock could, in either direction. An hour is far past any attempt's budget.
const MAX_TRANSIT: Duration = Duration::from_secs(3600);

/// Observe the transit of a request the client stamped at `sent` (observation only).
pub fn observe_transit(metrics: &ServiceMetrics, sent: SystemTime) {
    if let Ok(transit) = SystemTime::now().duration_since(sent) {
        if transit <= MAX_TRANSIT {
            metrics.transit.observe(transit.as_secs_f64());
        }
    }
}

/// Counts one budgeted request in `entity_service_budgeted_requests_total{outcome}` when it
/// ends ([`BUDGETED_OUTCOMES`]); dropped unfinished (its handler cancelled), it counts
/// `dropped`. Observation only.
pub struct CallerWatch {
    counter: prometheus::IntCounterVec,
    /// The caller's attempt ended here (`None`: past what the clock can hold, never).
    caller_end: Option<SystemTime>,
    outcome: Option<&'static str>,
}

impl CallerWatch {
    /// `None` unless the request carries both a budget and a send stamp.
    pub fn new(
        metrics: &ServiceMetrics,
        sent: Option<SystemTime>,
        budget: Option<Duration>,
    ) -> Option<Self> {
        let (sent, budget) = (sent?, budget?);
        Some(Self {
            counter: metrics.budgeted.clone(),
            caller_end: sent.checked_add(budget),
            outcome: None,
        })
    }

    /// The handler answered: with a 2xx (`ok`) or an error.
    pub fn finish(mut self, ok: bool) {
        let late = self.caller_end.is_some_and(|end| SystemTime::now() > end);
        self.outcome = Some(match (ok, late) {
            (false, _) => "error",
            (true, false) => "answered_in_time",
            (true, true) => "answered_late",
        });
    }
}

impl Drop for CallerWatch {
    fn drop(&mut self) {
        self.counter
            .with_label_values(&[self.outcome.unwrap_or("dropped")])
            .inc();
    }
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
            session_sets: {
                let v = metrics.counter_vec(
                    "entity_service_session_timeout_sets_total",
                    "SET statement_timeout sent ahead of a lookup, by what it set (budget: a budgeted request's time left, rounded up to 50 ms; default: the server's, for a request without a budget on a connection that had one or is new)",
                    &["to"],
                );
                for to in ["budget", "default"] {
                    v.with_label_values(&[to]);
                }
                v
            },
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
            transit: metrics.register(
                prometheus::Histogram::with_opts(
                    prometheus::HistogramOpts::new(
                        "entity_service_transit_seconds",
                        "Time from the client's send (X-Lab-Observe-Sent-Unix-Us, wall clock) to the start of entity-service's handler, where it starts counting the caller's X-Request-Budget-Ms: the part of the budget the header does not account for (a wait for a CPU included). Observation only",
                    )
                    .buckets(CALLEE_BUCKETS.to_vec()),
                )
                .expect("valid metric"),
            ),
            budgeted: {
                let c = metrics.counter_vec(
                    "entity_service_budgeted_requests_total",
                    "Budgeted /v1/resolve requests with a send stamp, by how they ended for their caller's attempt (sent + X-Request-Budget-Ms, wall clock): answered_in_time, answered_late (ready only after the attempt had ended: work nobody was waiting for), dropped (the handler was cancelled with its caller's hang-up before it answered), error. Observation only",
                    &["outcome"],
                );
                // Every outcome from the start, so a rate over them is defined before the first
                // late one.
                for o in BUDGETED_OUTCOMES {
                    c.with_label_values(&[o]);
                }
                c
            },
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
