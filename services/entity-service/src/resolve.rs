//! `POST /v1/resolve`: one batch of normalized spans for one tenant.
//!
//! Two prepared statements, cached per pooled connection (`prepare_cached`): the exact match for
//! the whole batch in one round trip, then — for spans without an exact match — the locale-aware
//! candidate lookup once per distinct kind, each candidate scored against each span. The
//! candidate lookup is the statement the incident's trigger degrades.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use deadpool_postgres::{Pool, PoolError};
use lab_api::headers;
use lab_api::wire::{
    EntityRef, MatchMethod, PopularEntity, PopularResponse, Resolution, ResolveRequest,
    ResolveResponse,
};
use lab_contract::errors;
use lab_core::http::{ApiError, JsonBody};
use lab_db::queries;
use tracing::Instrument as _;

use crate::admission::Refusal;
use crate::configuration::ResolveSettings;
use crate::score::Tokens;
use crate::session::Timeout;
use crate::telemetry::{ServiceMetrics, WorkGuard};

/// The kinds the schema allows (its CHECK constraint).
pub const KINDS: &[&str] = &["organization", "person", "location", "product"];
/// Longest normalized span accepted: far above any name, far below anything that hurts.
const MAX_SPAN_CHARS: usize = 256;

/// A running estimate of what one request's database work costs on this replica (EWMA of the
/// time from holding a pooled connection to the answer, the wait for the connection excluded),
/// used to refuse work whose caller's budget cannot cover it and to price the queue ahead of a
/// request (`admission::admit`).
///
/// It learns only from requests it admitted, so on its own it could lock itself in: slow traffic
/// pushes it above every caller's budget, every budgeted request is then refused, and nothing
/// admitted could ever bring it down again. So it also forgets: after [`CostEstimate::GRACE`]
/// without a single observation the estimate decays with a half-life of
/// [`CostEstimate::HALF_LIFE`] (never sooner, so steady traffic reads an unbiased average). A
/// refusal costs the database nothing,
/// so the price of a stale estimate is at most a second or two of refusals, after which requests
/// are admitted again and measure the real cost — high if the database really is slow (and the
/// refusals resume), low if the queue that made it slow has drained.
#[derive(Default)]
pub struct CostEstimate(std::sync::Mutex<Option<(f64, Instant)>>);

impl CostEstimate {
    /// Weight of the newest sample: 0.1 follows a change within ~20 requests (the stale-stats
    /// plan flip makes every request slower at once) without jumping on one outlier.
    const ALPHA: f64 = 0.1;
    /// After a second without any sample the estimate halves every second: the fixed client's
    /// largest per-attempt budget is 700 ms, so an estimate stuck at even 10 s admits again
    /// within ~5 s. Under traffic a replica sees a sample every few milliseconds, so the grace
    /// only ever runs out when everything is being refused (or nothing arrives at all).
    pub const GRACE: Duration = Duration::from_secs(1);
    pub const HALF_LIFE: Duration = Duration::from_secs(1);

    pub fn get(&self) -> Duration {
        self.get_at(Instant::now())
    }

    /// The estimate as of `now`, decayed since the last sample.
    pub fn get_at(&self, now: Instant) -> Duration {
        let state = *self.0.lock().expect("cost estimate lock");
        Duration::from_secs_f64(Self::decayed(state, now) / 1e6)
    }

    pub fn observe(&self, took: Duration) {
        self.observe_at(took, Instant::now());
    }

    pub fn observe_at(&self, took: Duration, now: Instant) {
        let mut state = self.0.lock().expect("cost estimate lock");
        let sample = took.as_secs_f64() * 1e6;
        let next = match *state {
            None => sample,
            Some(_) => {
                let old = Self::decayed(*state, now);
                old + Self::ALPHA * (sample - old)
            }
        };
        *state = Some((next, now));
    }

    /// Microseconds, decayed from the last sample to `now`.
    fn decayed(state: Option<(f64, Instant)>, now: Instant) -> f64 {
        match state {
            None => 0.0,
            Some((us, at)) => {
                let idle = now
                    .saturating_duration_since(at)
                    .saturating_sub(Self::GRACE);
                us * 0.5f64.powf(idle.as_secs_f64() / Self::HALF_LIFE.as_secs_f64())
            }
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub cost: std::sync::Arc<CostEstimate>,
    /// Budgeted requests' turn at the pool, fair between tenants (LAB-FIX(tenant-share)).
    pub gate: std::sync::Arc<crate::fair::FairGate>,
    pub flags: std::sync::Arc<lab_flags::Flags>,
    pub pool: Pool,
    /// The `statement_timeout` each pooled connection runs under (LAB-FIX(round-trips)).
    pub sessions: std::sync::Arc<crate::session::SessionTimeouts>,
    pub metrics: ServiceMetrics,
    pub settings: ResolveSettings,
}

/// The caller's `X-Request-Budget-Ms`, if it sent one; a value that cannot be read or applied
/// is a 400, not a request served as if unbounded.
fn request_budget(h: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    headers::request_budget(h.get(headers::REQUEST_BUDGET_MS).map(|v| v.as_bytes()))
        .map_err(ApiError::bad_request)
}

pub async fn resolve(
    State(st): State<AppState>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<ResolveRequest>,
) -> Result<Json<ResolveResponse>, ApiError> {
    // The caller's budget counts from when it sent the request; this replica can only count it
    // from the request's arrival here, so time spent before the work (a game day's injected
    // latency) comes out of it, and the time before the arrival (the transit, a wait for a CPU
    // included) does not: that part is measured (entity_service_transit_seconds), not guessed.
    let arrived = Instant::now();
    // Observation only: when the client sent this attempt, by the wall clock.
    let sent = headers::sent_at(
        headers
            .get(headers::OBSERVE_SENT_UNIX_US)
            .map(|v| v.as_bytes()),
    );
    if let Some(sent) = sent {
        crate::telemetry::observe_transit(&st.metrics, sent);
    }
    let budget = request_budget(&headers)?;
    let watch = crate::telemetry::CallerWatch::new(&st.metrics, sent, budget);
    let result = resolve_work(&st, &headers, req, arrived, budget).await;
    if let Some(w) = watch {
        w.finish(result.is_ok());
    }
    result
}

/// [`resolve`]'s work: dropped with it when the caller hangs up.
async fn resolve_work(
    st: &AppState,
    headers: &HeaderMap,
    req: ResolveRequest,
    arrived: Instant,
    budget: Option<Duration>,
) -> Result<Json<ResolveResponse>, ApiError> {
    let user_deadline = headers
        .get(headers::OBSERVE_USER_DEADLINE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let _work = WorkGuard::new(st.metrics.clone(), user_deadline);
    let flags = st.flags.snapshot();
    crate::fault::inject(&flags, &st.metrics.faults).await?;
    validate(&req, &st.settings)?;
    if req.spans.is_empty() {
        return Ok(Json(ResolveResponse { results: vec![] }));
    }

    // LAB-FIX(orphaned-work), the server's half of the contract: the fixed client says how long
    // it will wait (X-Request-Budget-Ms). Work that cannot finish in time is refused at once, and
    // every query is bounded by statement_timeout, because dropping a query future does not stop
    // PostgreSQL. Requests without the header (the legacy client) get neither: they wait for a
    // connection and their queries run to completion whoever is still waiting, as in the incident.
    let deadline = budget.map(|b| arrived + b);

    let acquire = Instant::now();
    // A budgeted request's turn at the pool, held until its query is done.
    let mut _turn = None;
    // Its own span: under the incident's load the wait for a pooled connection, not the query,
    // is where the time went.
    let client = match deadline {
        None => st
            .pool
            .get()
            .instrument(tracing::info_span!("db.pool.acquire"))
            .await
            .map_err(pool_error),
        Some(deadline) => {
            // LAB-FIX(pool-exhaustion): admitted only if the wait and the query fit (admission).
            let left = deadline.saturating_duration_since(acquire);
            // LAB-FIX(tenant-share): its tenant's turn first (resilience.tenant_fairness; off:
            // the pool's own first-come-first-served queue). Ahead of it: the pool's own queue,
            // and the requests waiting for a turn that come before it in fair order.
            let fair = flags.enabled("resilience.tenant_fairness");
            let mut pool: crate::admission::PoolState = st.pool.status().into();
            pool.waiting += if fair {
                st.gate.ahead_of(req.tenant)
            } else {
                st.gate.waiting()
            };
            let wait = crate::admission::admit(left, st.cost.get(), pool)
                .map_err(|why| refused(st, why, left))?;
            let until = Instant::now() + wait;
            if fair {
                _turn = Some(
                    tokio::time::timeout(wait, st.gate.acquire(req.tenant))
                        .instrument(tracing::info_span!("db.turn"))
                        .await
                        .map_err(|_| {
                            refused(
                                st,
                                Refusal::Queue {
                                    pushback: Duration::ZERO,
                                },
                                left,
                            )
                        })?,
                );
            }
            let wait = until.saturating_duration_since(Instant::now());
            acquire_within(st, wait, left)
                .instrument(tracing::info_span!("db.pool.acquire"))
                .await
        }
    }?;
    observe(&st.metrics, "acquire", acquire);
    // The query's own cost, without the wait: what the admission prices the next request's work
    // and its queue with.
    let started_work = Instant::now();
    let timeout = match deadline {
        None => Timeout::Default,
        Some(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.metrics.shed.with_label_values(&["budget"]).inc();
                return Err(budget_gone());
            }
            // LAB-FIX(round-trips): the budget costs the legacy request's statements and,
            // only when its connection was last given another value, one `SET` sent ahead of
            // the exact match in the same round trip (crate::session) — not a transaction
            // (BEGIN waited for, SET LOCAL, ROLLBACK: +0.07-0.09 cores of PostgreSQL at
            // 1,051 rps, measured). Every round trip is a point where this task waits for a CPU
            // while its pooled connection sits idle (the soak's pulses began with 12-15 of 32
            // connections idle in a transaction).
            Timeout::for_budget(left)
        }
    };
    let results = lookup(&client, st, &req, timeout).await?;
    st.cost.observe(started_work.elapsed());

    for r in &results {
        let method = match r.as_ref().map(|r| r.method) {
            Some(MatchMethod::Exact) => "exact",
            Some(MatchMethod::Candidate) => "candidate",
            None => "none",
        };
        st.metrics.spans.with_label_values(&[method]).inc();
    }
    Ok(Json(ResolveResponse { results }))
}

/// `?limit=N` of `GET /v1/popular`.
#[derive(Debug, serde::Deserialize)]
pub struct PopularQuery {
    pub limit: i64,
}

/// The most popular entities wanted at once, at most: the postmortem's warm-up took 5,000;
/// 10,000 bounds a request's memory (~1 MB of JSON).
const MAX_POPULAR: i64 = 10_000;

/// `GET /v1/popular?limit=N`: the `N` most popular entities of every tenant, each as the exact
/// match of its own normalized name — what an orchestrator pre-populates its cache with on boot.
/// Bounded like a resolve: by the caller's `X-Request-Budget-Ms` when it sends one.
pub async fn popular(
    State(st): State<AppState>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<PopularQuery>,
) -> Result<Json<PopularResponse>, ApiError> {
    if !(1..=MAX_POPULAR).contains(&q.limit) {
        return Err(ApiError::bad_request(format!(
            "limit: must be 1..={MAX_POPULAR}"
        )));
    }
    let budget = request_budget(&headers)?;
    let mut client = st.pool.get().await.map_err(pool_error)?;
    let tx = client.transaction().await.map_err(db_error)?;
    // Inside this transaction only, whatever the connection's session has: the caller's budget,
    // or the server's default without one (a budgeted resolve leaves its own value on the
    // connection, crate::session, and a warm-up of 10,000 rows must not run under it).
    let timeout = match budget {
        Some(b) => format!("SET LOCAL statement_timeout = {}", b.as_millis().max(1)),
        None => "SET LOCAL statement_timeout TO DEFAULT".to_owned(),
    };
    tx.batch_execute(&timeout).await.map_err(db_error)?;
    let rows = tx
        .query(queries::POPULAR, &[&q.limit])
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    let entities = rows
        .iter()
        .map(|r| PopularEntity {
            tenant: r.get(0),
            normalized: r.get(1),
            entity: EntityRef {
                id: r.get(2),
                name: r.get(3),
                kind: r.get(4),
            },
        })
        .collect();
    Ok(Json(PopularResponse { entities }))
}

/// The two lookups on a pooled connection, under `timeout`: when the connection was last given
/// another value, its `SET` goes out ahead of the exact match in the same round trip.
async fn lookup(
    client: &deadpool_postgres::Object,
    st: &AppState,
    req: &ResolveRequest,
    timeout: Timeout,
) -> Result<Vec<Option<Resolution>>, ApiError> {
    let id = deadpool_postgres::Object::id(client);
    let set = st.sessions.needs(id, timeout);
    // Exact matches for the whole batch in one round trip.
    let started = Instant::now();
    let names: Vec<&str> = req.spans.iter().map(|s| s.normalized.as_str()).collect();
    let rows = async {
        let exact = async {
            // On a connection's first use the statement is prepared first, and parsing it
            // takes a lock on `entities`: the timeout must already be in force for that too.
            let exact_stmt = client.prepare_cached(queries::EXACT_MATCH).await?;
            client.query(&exact_stmt, &[&req.tenant, &names]).await
        };
        match set {
            // tokio-postgres sends a request when its future is first polled and answers in
            // order, so two futures polled together share one round trip (a cached statement
            // needs no round trip of its own); `biased` polls the `SET` first, so it is in
            // force for what follows (the tests hold `entities` locked and see the exact match
            // cancelled, on a fresh connection and on a used one). The connection's value is
            // recorded as soon as PostgreSQL has answered the `SET`, whatever the lookup comes
            // to, even if the caller hangs up while the lookup runs.
            Some(to) => {
                let sql = to.sql();
                let set = async {
                    client.batch_execute(&sql).await?;
                    st.sessions.set(id, to);
                    let label = match to {
                        Timeout::Default => "default",
                        Timeout::Ms(_) => "budget",
                    };
                    st.metrics.session_sets.with_label_values(&[label]).inc();
                    Ok::<(), tokio_postgres::Error>(())
                };
                let (done, rows) = tokio::join!(biased; set, exact);
                done?;
                rows
            }
            None => exact.await,
        }
    }
    .instrument(db_span("exact_match", queries::EXACT_MATCH))
    .await
    .map_err(db_error)?;
    observe(&st.metrics, "exact", started);
    let mut exact: HashMap<String, EntityRef> = HashMap::with_capacity(rows.len());
    for row in rows {
        exact.insert(
            row.get::<_, String>(0),
            EntityRef {
                id: row.get(1),
                name: row.get(2),
                kind: row.get(3),
            },
        );
    }

    let mut results: Vec<Option<Resolution>> = vec![None; req.spans.len()];
    let mut unmatched: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, span) in req.spans.iter().enumerate() {
        match exact.get(&span.normalized) {
            Some(entity) => {
                results[i] = Some(Resolution {
                    entity: entity.clone(),
                    confidence: 1.0,
                    method: MatchMethod::Exact,
                })
            }
            None => unmatched.entry(span.kind.as_str()).or_default().push(i),
        }
    }

    // The hot statement: once per distinct kind among the spans without an exact match.
    if !unmatched.is_empty() {
        let cand_stmt = client
            .prepare_cached(queries::CANDIDATE_LOOKUP)
            .await
            .map_err(db_error)?;
        for (kind, idxs) in unmatched {
            let started = Instant::now();
            let rows = client
                .query(&cand_stmt, &[&req.tenant, &kind, &req.locale])
                .instrument(db_span("candidate_lookup", queries::CANDIDATE_LOOKUP))
                .await
                .map_err(db_error)?;
            observe(&st.metrics, "candidate", started);
            let candidates: Vec<(EntityRef, String)> = rows
                .iter()
                .map(|r| {
                    (
                        EntityRef {
                            id: r.get(0),
                            name: r.get(1),
                            kind: r.get(3),
                        },
                        r.get::<_, String>(2),
                    )
                })
                .collect();
            // Each candidate's name split once for all the spans of its kind (crate::score).
            let tokens: Vec<Tokens<'_>> = candidates.iter().map(|(_, n)| Tokens::new(n)).collect();
            for i in idxs {
                let span = Tokens::new(&req.spans[i].normalized);
                let best = candidates
                    .iter()
                    .zip(&tokens)
                    .map(|((e, _), t)| (e, span.jaccard(t)))
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                if let Some((entity, score)) = best {
                    if score >= st.settings.min_confidence {
                        results[i] = Some(Resolution {
                            entity: entity.clone(),
                            confidence: score,
                            method: MatchMethod::Candidate,
                        });
                    }
                }
            }
        }
    }
    Ok(results)
}

fn validate(req: &ResolveRequest, settings: &ResolveSettings) -> Result<(), ApiError> {
    if req.spans.len() > settings.max_spans {
        return Err(ApiError::bad_request(format!(
            "spans: {} spans in one batch, at most {} allowed",
            req.spans.len(),
            settings.max_spans
        )));
    }
    for (i, s) in req.spans.iter().enumerate() {
        if s.normalized.is_empty() || s.normalized.chars().count() > MAX_SPAN_CHARS {
            return Err(ApiError::bad_request(format!(
                "spans[{i}].normalized: must be 1..={MAX_SPAN_CHARS} characters"
            )));
        }
        if !KINDS.contains(&s.kind.as_str()) {
            return Err(ApiError::bad_request(format!(
                "spans[{i}].kind: {:?} is not one of {KINDS:?}",
                s.kind
            )));
        }
    }
    if let Some(l) = &req.locale {
        if l.is_empty() || l.len() > 35 {
            return Err(ApiError::bad_request("locale: must be 1..=35 characters"));
        }
    }
    Ok(())
}

/// The span of one statement, with OpenTelemetry's database attributes (and the older
/// `db.statement`, which Jaeger's UI still shows by name). The text is the prepared statement with
/// its `$n` placeholders: no tenant data reaches a span.
fn db_span(summary: &'static str, statement: &'static str) -> tracing::Span {
    tracing::info_span!(
        "db.query",
        otel.kind = "client",
        db.system.name = "postgresql",
        db.operation.name = "SELECT",
        db.query.summary = summary,
        db.query.text = statement,
        db.statement = statement,
    )
}

fn observe(m: &ServiceMetrics, query: &str, since: Instant) {
    m.query_duration
        .with_label_values(&[query])
        .observe(since.elapsed().as_secs_f64());
}

/// How often a budgeted request that found PostgreSQL unreachable tries again: a refused connect
/// costs both sides a fraction of a millisecond, and a restart here takes 1-3 s (pg_ctlcluster
/// fast restart), so 100 ms adds at most a tenth of a second once it is back, at <= 10 connects a
/// second per waiting request (the waiting requests are themselves bounded by the admission).
const RECONNECT_EVERY: Duration = Duration::from_millis(100);

/// LAB-FIX(pool-exhaustion) and the short-outage half of issue 27: a pooled connection for a
/// budgeted request, waited for at most `wait`. A database that is unreachable for less than that
/// (a restart, a failover) is waited out here, once, instead of being answered 503 at once and
/// retried by every layer above; if it is not back in time the request fails as before
/// (`db_unavailable`, retryable). Connection creation is bounded by the same wait.
async fn acquire_within(
    st: &AppState,
    wait: Duration,
    left: Duration,
) -> Result<deadpool_postgres::Object, ApiError> {
    let until = Instant::now() + wait;
    let mut waited = false;
    loop {
        let now = Instant::now();
        let bound = until
            .saturating_duration_since(now)
            .max(Duration::from_millis(1));
        let timeouts = deadpool_postgres::Timeouts {
            wait: Some(bound),
            create: Some(bound),
            ..st.pool.timeouts()
        };
        match st.pool.timeout_get(&timeouts).await {
            Ok(client) => {
                if waited {
                    st.metrics
                        .db_waits
                        .with_label_values(&["reconnected"])
                        .inc();
                }
                return Ok(client);
            }
            Err(PoolError::Timeout(deadpool_postgres::TimeoutType::Wait)) => {
                return Err(refused(
                    st,
                    Refusal::Queue {
                        pushback: Duration::ZERO,
                    },
                    left,
                ));
            }
            Err(e) if Instant::now() + RECONNECT_EVERY < until => {
                if !waited {
                    tracing::warn!(error = %e, "PostgreSQL unreachable; waiting for it inside the request's budget");
                }
                waited = true;
                tokio::time::sleep(RECONNECT_EVERY).await;
            }
            Err(e) => {
                if waited {
                    st.metrics.db_waits.with_label_values(&["gave_up"]).inc();
                }
                return Err(pool_error(e));
            }
        }
    }
}

/// A budgeted request not started (or no longer waiting): counted by why, answered by the row
/// that tells the caller whether another replica may do better.
fn refused(st: &AppState, why: Refusal, left: Duration) -> ApiError {
    let cost = st.cost.get().as_millis();
    let left = left.as_millis();
    match why {
        Refusal::Budget => {
            st.metrics.shed.with_label_values(&["budget"]).inc();
            ApiError::from_failure(
                &errors::ES_BUDGET_REFUSED,
                format!(
                    "the caller's budget ({left} ms left) cannot cover this work (recent cost \
                     {cost} ms); not started"
                ),
            )
        }
        Refusal::Queue { pushback } => {
            st.metrics.shed.with_label_values(&["queue"]).inc();
            let pool = st.pool.status();
            // Budgeted requests wait for their tenant's turn before the pool (crate::fair).
            let waiting = pool.waiting + st.gate.waiting();
            let e = ApiError::from_failure(
                &errors::ES_DB_POOL_EXHAUSTED,
                format!(
                    "no PostgreSQL connection would be free in time: {} waiting for {} \
                     connections at {cost} ms a query, {left} ms left; not started",
                    waiting, pool.max_size
                ),
            );
            // LAB-FIX(pushback): say how much too long the queue is, so that a retry comes when
            // it could fit rather than into the same queue a few tens of milliseconds later.
            if pushback.is_zero() {
                e
            } else {
                e.with_retry_pushback(pushback)
            }
        }
    }
}

fn budget_gone() -> ApiError {
    ApiError::from_failure(
        &errors::ES_BUDGET_REFUSED,
        "the caller's budget ran out before the work could start",
    )
}

fn pool_error(e: PoolError) -> ApiError {
    match e {
        // Waiting for a connection someone else holds: the pool is full.
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => ApiError::from_failure(
            &errors::ES_DB_POOL_EXHAUSTED,
            "no PostgreSQL connection became free within the pool's wait bound",
        ),
        // Opening (or checking) a connection did not finish in time: PostgreSQL is not
        // answering, which is a failing dependency, not a full one (the fixed client's breaker
        // counts this row and not the one above: entity_client::retryability).
        PoolError::Timeout(_) => ApiError::from_failure(
            &errors::ES_DB_UNAVAILABLE,
            "a PostgreSQL connection could not be opened within the request's wait bound",
        ),
        other => {
            tracing::warn!(error = %other, "cannot get a PostgreSQL connection");
            ApiError::from_failure(&errors::ES_DB_UNAVAILABLE, "PostgreSQL is unreachable")
        }
    }
}

fn db_error(e: tokio_postgres::Error) -> ApiError {
    // 57014 query_canceled: statement_timeout or a cancel request — the time ran out.
    if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) {
        return ApiError::from_failure(
            &errors::ES_QUERY_CANCELLED,
            "the query was cancelled when its time budget ran out",
        );
    }
    if e.is_closed() || e.code().is_none() {
        tracing::warn!(error = %e, "PostgreSQL connection failed");
        return ApiError::from_failure(
            &errors::ES_DB_UNAVAILABLE,
            "the PostgreSQL connection failed",
        );
    }
    tracing::error!(error = %e, "query failed");
    ApiError::from_failure(&errors::ES_QUERY_FAILED, "a database query failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn cost_estimate_recovers_after_refusing_everything() {
        // Slow traffic drives the estimate far above the fixed client's 700 ms attempts...
        let cost = CostEstimate::default();
        let t0 = Instant::now();
        for i in 0..50 {
            cost.observe_at(MS(3_000), t0 + MS(i));
        }
        let stuck = cost.get_at(t0 + MS(50));
        assert!(stuck > MS(2_900), "{stuck:?}");
        // ...every budgeted request is now refused, so nothing is observed. The estimate must
        // still come down below a 700 ms budget on its own, within a few half-lives.
        let t1 = t0 + MS(50) + CostEstimate::GRACE + CostEstimate::HALF_LIFE * 3;
        let later = cost.get_at(t1);
        assert!(
            later < MS(700),
            "{later:?}: refusals must not lock themselves in"
        );
        assert!(
            cost.get_at(t0 + MS(50) + CostEstimate::GRACE) > MS(2_900),
            "no decay within the grace"
        );
        // Then one admitted fast request pulls it further down, one slow one back up.
        cost.observe_at(MS(2), t1);
        let after_fast = cost.get_at(t1);
        assert!(after_fast < later);
        cost.observe_at(MS(5_000), t1 + MS(1));
        assert!(cost.get_at(t1 + MS(1)) > after_fast);
    }

    #[test]
    fn cost_estimate_follows_steady_traffic_without_decaying_noticeably() {
        let cost = CostEstimate::default();
        let t0 = Instant::now();
        assert_eq!(
            cost.get_at(t0),
            Duration::ZERO,
            "no samples: admit everything"
        );
        // 100 requests/s of 40 ms each: the estimate converges on 40 ms, not below it.
        for i in 0..500 {
            cost.observe_at(MS(40), t0 + MS(10 * i));
        }
        let est = cost.get_at(t0 + MS(4_990)).as_secs_f64() * 1e3;
        assert!((39.9..=40.1).contains(&est), "{est} ms");
    }
}
