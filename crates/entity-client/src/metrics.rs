//! The metric families BOTH entity clients write — defined here, once.
//!
//! The legacy client (`entity-client-legacy`) re-exports this module instead of defining its own,
//! so the two modes write the *same* series with the *same* label sets: a dashboard or alert built
//! for one mode works for the other, and when the orchestrator switches clients per request the
//! two clients' samples simply add up. Which mode produced a sample is deliberately not a label;
//! the caller's flag metric says which mode is on.
//!
//! # One registration, handed to both clients
//!
//! The orchestrator holds both clients on one [`Metrics`] registry, and a name registered twice in
//! a Prometheus registry is an error. So neither client registers families itself: the process
//! registers them ONCE with [`ClientMetrics::register`] and passes the handles to each client it
//! builds (a clone writes the same series). Probe traffic — the legacy deep readiness check, which
//! resolves through the same client and pool as users — gets its own families from
//! [`ClientMetrics::register_probe`] (`entity_probe_*`), so no probe ever counts as a user's
//! attempt, retry, abandoned call or orphaned span.
//!
//! # Series (all low-cardinality, identical in both crates)
//!
//! | name | labels | fixed client | legacy client |
//! |---|---|---|---|
//! | `entity_requests_total` | `outcome` | every attempt put on the wire, counted when it ends: `ok`, `timeout`, `error_5xx`, `error_4xx`, `transport`, `decode`, `cancelled` (cut mid-flight: the caller went away) | every `client.Do` call, the same outcomes but never `cancelled` (nothing cancels it), plus `slot_timeout`: the 10 s expired while the call still waited for a per-host slot — nothing was sent (Go reports it as a timeout too) |
//! | `entity_request_duration_seconds` | `outcome` | duration of each attempt, [`CALLEE_BUCKETS`] (up to 60 s: this histogram must be able to show 10 s attempts) | same |
//! | `entity_retries_total` | `class` | retries, counted when the retry attempt starts (after every admission check: a retry that is then shed, or whose caller leaves during the backoff, is not a retry), by what failed before: `timeout`, `slot_timeout`, `connect`, `transport`, `status_429`, `status_500`, `status_502`, `status_503`, `status_504`, `status_5xx`, `status_4xx` | the same, counted when the detached loop starts the next `client.Do` |
//! | `entity_failovers_total` | — | attempts that got no answer at all — the connection was refused, or it closed before any byte of an answer (a replica shutting down: the keep-alive race) — sent again to the next replica, at most once per other replica; not retries, no retry-budget token, not counted against `max_attempts` | always 0 (the legacy loop retries every transport error as one of its 3 attempts) |
//! | `entity_abandoned_total` | — | attempts **cut short** because nobody could use their answer any more: the caller dropped the call mid-attempt, or the total deadline ended the attempt. Counted when cut; the connection closes at once | attempts that **completed** after the caller had gone (the awaiting future was dropped). Counted when they finish — having run their whole length |
//! | `otel_span_orphaned_total` | `span` | `entity.Resolve` work that ended after its caller ended. Detected like legacy; 0 by construction (the work *is* the caller's future) | the detached retry loop finishing after the awaiting caller was dropped: one per orphaned `entity.Resolve` |
//! | `entity_shed_total` | `reason` | calls or retries refused before the wire: `retry_budget`, `no_budget`, `breaker_open`, `concurrency_limit` | always 0 — legacy never sheds (the series exist so the panel reads 0, not "no data") |
//! | `entity_retry_budget_tokens` | — | the retry bucket's balance (100 = full) | absent (no series at all, rather than a 0 that would fire `min(entity_retry_budget_tokens) < 20`) |
//! | `entity_breaker_state` | — | 0 = admitting, 1 = probing, 2 = shedding — ordered by severity, so `max()` across pods is the worst; as of the last call (Shedding becomes Probing lazily, at the next call after the 5 s) | absent |
//! | `entity_concurrency_limit` | — | attempts admitted in flight at once, as of the last attempt: the callee policy's ceiling (`max_concurrency_adaptive` × endpoints; `resilience.concurrency_adaptive=callee`, the default, and the value before the first attempt), the adaptive limit's current value (`aimd`, `vegas`), or the static size (`max_concurrency`, `off`) | absent |
//! | `entity_pool_slots` | `state` | `in_use`: concurrency-limiter permits held by in-flight attempts; `waiting`: attempts waiting at the callee policy's ceiling, each for at most its own attempt's budget and dropped with its caller (the static, AIMD and Vegas policies never queue: 0) | `in_use`: per-host connection slots held; `waiting`: attempts parked waiting for a slot (the postmortem's 4,102 goroutines in `roundTrip`) |
//!
//! `entity_abandoned_total / entity_requests_total` is then comparable across modes: the share of
//! attempts whose answer nobody used. In legacy each such attempt ran to its full length; in fixed
//! each was stopped the moment it became useless. The gauges are shared by every client on a
//! registry: `entity_pool_slots` is only ever moved with `inc`/`dec`, so two clients add up; the
//! two fixed-only gauges are `set`, so a registry should carry one fixed client (the orchestrator
//! does).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use lab_core::metrics::{Metrics, CALLEE_BUCKETS};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts,
};

/// Values of `entity_requests_total{outcome}` and `entity_request_duration_seconds{outcome}`.
pub mod outcome {
    /// 2xx with a decodable body.
    pub const OK: &str = "ok";
    /// The attempt ran out of time on the wire (its own per-attempt deadline, the total deadline,
    /// or — legacy — the 10 s client timeout while awaiting the answer).
    pub const TIMEOUT: &str = "timeout";
    /// Legacy only: the 10 s client timeout expired while the call still waited for a per-host
    /// connection slot. Nothing was sent; Go reports it as a timeout all the same ("request
    /// canceled while waiting for connection"), and the loop retries it.
    pub const SLOT_TIMEOUT: &str = "slot_timeout";
    /// entity-service answered 5xx.
    pub const ERROR_5XX: &str = "error_5xx";
    /// entity-service answered 4xx (429 included).
    pub const ERROR_4XX: &str = "error_4xx";
    /// Connect failure, reset, or any other error below HTTP.
    pub const TRANSPORT: &str = "transport";
    /// 2xx whose body was not a `ResolveResponse`.
    pub const DECODE: &str = "decode";
    /// Fixed client only: the caller dropped the call while this attempt was in flight; the
    /// request was dropped and its connection closed.
    pub const CANCELLED: &str = "cancelled";
    /// Every value, pre-registered at 0 so `rate()` has a series from the first scrape.
    pub const ALL: &[&str] = &[
        OK,
        TIMEOUT,
        SLOT_TIMEOUT,
        ERROR_5XX,
        ERROR_4XX,
        TRANSPORT,
        DECODE,
        CANCELLED,
    ];

    /// The outcome of an HTTP status that is not a success.
    pub fn for_status(status: u16) -> &'static str {
        if status >= 500 {
            ERROR_5XX
        } else {
            ERROR_4XX
        }
    }
}

/// Values of `entity_retries_total{class}`: what failed before the retry.
pub mod retry_class {
    pub const TIMEOUT: &str = "timeout";
    /// Legacy: the previous call timed out waiting for a connection slot.
    pub const SLOT_TIMEOUT: &str = "slot_timeout";
    pub const CONNECT: &str = "connect";
    pub const TRANSPORT: &str = "transport";

    /// A bounded label for a status: the ones the postmortem argues about by name (429, 500, 502,
    /// 503, 504), everything else folded into `status_5xx` / `status_4xx`.
    pub fn for_status(status: u16) -> &'static str {
        match status {
            429 => "status_429",
            500 => "status_500",
            502 => "status_502",
            503 => "status_503",
            504 => "status_504",
            s if s >= 500 => "status_5xx",
            _ => "status_4xx",
        }
    }
}

/// Values of `entity_shed_total{reason}`: why the fixed client refused to put a request on the wire.
pub mod shed_reason {
    /// The retry budget (token bucket) had no token for a retry.
    pub const RETRY_BUDGET: &str = "retry_budget";
    /// Less than the minimum attempt budget was left before the deadline.
    pub const NO_BUDGET: &str = "no_budget";
    /// The breaker was shedding (or all probes were taken).
    pub const BREAKER_OPEN: &str = "breaker_open";
    /// The concurrency limit in front of entity-service was full.
    pub const CONCURRENCY_LIMIT: &str = "concurrency_limit";
    pub const ALL: &[&str] = &[RETRY_BUDGET, NO_BUDGET, BREAKER_OPEN, CONCURRENCY_LIMIT];
}

/// Values of `entity_pool_slots{state}`.
pub mod pool_state {
    pub const IN_USE: &str = "in_use";
    pub const WAITING: &str = "waiting";
}

/// The `span` label of `otel_span_orphaned_total` for the clients' work (the postmortem's span name).
pub const RESOLVE_SPAN: &str = "entity.Resolve";

/// Handles to the shared families. Cheap to clone; every clone writes the same series.
#[derive(Clone)]
pub struct ClientMetrics {
    families: Arc<Families>,
    /// Attempts as each started, per 100 ms of wall clock: the legacy client's before it waits
    /// for a per-host slot (the backoff's clock, before anything downstream paces it); the fixed
    /// client's as each goes out, once its limiter admitted the call (it never waits for a
    /// permit: a call it sheds makes no attempt). Served on the orchestrator's admin listener
    /// (`/debug/attempts`), beside entity-service's arrivals.
    starts: lab_core::arrivals::Arrivals,
}

/// The families, registered in a registry as ONE collector (so registration is all-or-nothing).
struct Families {
    requests: IntCounterVec,
    duration: HistogramVec,
    retries: IntCounterVec,
    /// Fixed client only: an unanswered attempt moved to another replica (not a retry).
    failovers: IntCounter,
    abandoned: IntCounter,
    orphaned: IntCounterVec,
    shed: IntCounterVec,
    /// Label-less `GaugeVec`s: no series exists until a fixed client creates one, so a process with
    /// only the legacy client exports no misleading 0.
    retry_tokens: GaugeVec,
    breaker_state: IntGaugeVec,
    pool_slots: IntGaugeVec,
    concurrency_limit: IntGaugeVec,
    /// Probe families register only the attempt-level series; the rest exist, unexported.
    probe: bool,
}

#[derive(Clone)]
struct FamiliesCollector(Arc<Families>);

impl Collector for FamiliesCollector {
    fn desc(&self) -> Vec<&Desc> {
        let f = &self.0;
        let mut d = Vec::new();
        d.extend(f.requests.desc());
        d.extend(f.duration.desc());
        d.extend(f.retries.desc());
        d.extend(f.failovers.desc());
        d.extend(f.abandoned.desc());
        d.extend(f.orphaned.desc());
        if !f.probe {
            d.extend(f.shed.desc());
            d.extend(f.retry_tokens.desc());
            d.extend(f.breaker_state.desc());
            d.extend(f.pool_slots.desc());
            d.extend(f.concurrency_limit.desc());
        }
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let f = &self.0;
        let mut out = Vec::new();
        out.extend(f.requests.collect());
        out.extend(f.duration.collect());
        out.extend(f.retries.collect());
        out.extend(f.failovers.collect());
        out.extend(f.abandoned.collect());
        out.extend(f.orphaned.collect());
        if !f.probe {
            out.extend(f.shed.collect());
            out.extend(f.retry_tokens.collect());
            out.extend(f.breaker_state.collect());
            out.extend(f.pool_slots.collect());
            out.extend(f.concurrency_limit.collect());
        }
        out
    }
}

impl ClientMetrics {
    /// The user-traffic families, registered in `metrics`' registry. Call it once per process and
    /// hand clones to every client: a second call on the same registry fails, naming the family
    /// already there (two components cannot both own `entity_requests_total`).
    pub fn register(metrics: &Metrics) -> anyhow::Result<Self> {
        Self::register_as(metrics, false)
    }

    /// The probe-traffic families (`entity_probe_requests_total`, `..._request_duration_seconds`,
    /// `..._retries_total`, `..._abandoned_total`, `entity_probe_span_orphaned_total`): what a
    /// health probe sends through a client is counted here and never as a user's.
    pub fn register_probe(metrics: &Metrics) -> anyhow::Result<Self> {
        Self::register_as(metrics, true)
    }

    fn register_as(metrics: &Metrics, probe: bool) -> anyhow::Result<Self> {
        let families = Arc::new(Families::new(probe)?);
        metrics
            .registry()
            .register(Box::new(FamiliesCollector(families.clone())))
            .map_err(|e| {
                anyhow!(
                    "cannot register the entity clients' metrics: {e}. Register them once per \
                     process (ClientMetrics::register) and pass the handles to each client; no \
                     other component may register these names"
                )
            })?;
        Ok(ClientMetrics {
            families,
            starts: lab_core::arrivals::Arrivals::new(),
        })
    }

    /// Families registered nowhere: for a client whose metrics nobody reads (benchmarks).
    pub fn unregistered() -> Self {
        ClientMetrics {
            families: Arc::new(Families::new(false).expect("valid metric definitions")),
            starts: lab_core::arrivals::Arrivals::new(),
        }
    }

    /// `entity_requests_total{outcome}` and `entity_request_duration_seconds{outcome}` for one
    /// finished (or cancelled) attempt.
    pub fn record_attempt(&self, outcome: &str, elapsed: Duration) {
        let f = &self.families;
        f.requests.with_label_values(&[outcome]).inc();
        f.duration
            .with_label_values(&[outcome])
            .observe(elapsed.as_secs_f64());
    }

    /// An attempt starts now: counted in its 100 ms bucket ([`Self::attempt_starts`]), before
    /// it waits for anything.
    pub fn record_attempt_start(&self) {
        self.starts.record();
    }

    /// The attempts' start times per 100 ms, to serve (`lab_core::arrivals::admin_router_at`).
    pub fn attempt_starts(&self) -> lab_core::arrivals::Arrivals {
        self.starts.clone()
    }

    /// `entity_retries_total{class}`: a retry is about to be made after a failure of `class`.
    pub fn record_retry(&self, class: &str) {
        self.families.retries.with_label_values(&[class]).inc();
    }

    /// `entity_failovers_total`: an attempt that got no answer at all (connection refused, or
    /// closed before any byte of an answer) is sent again to the next replica — not a retry.
    pub fn record_failover(&self) {
        self.families.failovers.inc();
    }

    /// `entity_shed_total{reason}`.
    pub fn record_shed(&self, reason: &str) {
        self.families.shed.with_label_values(&[reason]).inc();
    }

    /// `entity_abandoned_total` (semantics per client: see the module table).
    pub fn record_abandoned(&self) {
        self.families.abandoned.inc();
    }

    /// The `entity_retry_budget_tokens` gauge (creates the series).
    pub fn retry_budget_tokens(&self) -> Gauge {
        self.families.retry_tokens.with_label_values::<&str>(&[])
    }

    /// The `entity_breaker_state` gauge (creates the series).
    pub fn breaker_state(&self) -> IntGauge {
        self.families.breaker_state.with_label_values::<&str>(&[])
    }

    /// The `entity_concurrency_limit` gauge (creates the series): the attempts the fixed client
    /// admits in flight at once right now — the static size, or the adaptive limit's current one.
    pub fn concurrency_limit(&self) -> IntGauge {
        self.families
            .concurrency_limit
            .with_label_values::<&str>(&[])
    }

    /// `entity_pool_slots{state="in_use"}` — move it with `inc`/`dec` only, so clients add up.
    pub fn pool_in_use(&self) -> IntGauge {
        self.families
            .pool_slots
            .with_label_values(&[pool_state::IN_USE])
    }

    /// `entity_pool_slots{state="waiting"}` — `inc`/`dec` only.
    pub fn pool_waiting(&self) -> IntGauge {
        self.families
            .pool_slots
            .with_label_values(&[pool_state::WAITING])
    }

    /// The `otel_span_orphaned_total` family, for a caller that wants to count orphans of its own
    /// spans under another `span` label value (registering the name again would fail).
    pub fn span_orphaned(&self) -> IntCounterVec {
        self.families.orphaned.clone()
    }

    /// A parent/child pair for one `entity.Resolve`, for work that runs apart from its caller
    /// (legacy): the [`ParentSpan`] stays in the caller's future, the [`ChildSpan`] goes with the
    /// work. When the child ends after the parent has ended, `otel_span_orphaned_total` counts it.
    pub fn span_pair(&self) -> (ParentSpan, ChildSpan) {
        self.span_pair_with(None)
    }

    /// The same, where the caller can also leave before the parent ends (`caller_gone`, set at
    /// its hang-up: a handler that runs on as a Go handler does): the child ending after either
    /// is an orphan.
    pub fn span_pair_with(&self, caller_gone: Option<Arc<AtomicBool>>) -> (ParentSpan, ChildSpan) {
        let parent_ended = Arc::new(AtomicBool::new(false));
        (
            ParentSpan {
                ended: parent_ended.clone(),
            },
            ChildSpan {
                parent_ended,
                caller_gone,
                orphaned: self.families.orphaned.with_label_values(&[RESOLVE_SPAN]),
            },
        )
    }

    /// The same pair for work that IS the caller's future (fixed): both end in the same drop, the
    /// child first (struct fields drop in declaration order), so the detection runs and finds
    /// nothing — by construction, not by omission.
    pub fn span_scope(&self) -> SpanScope {
        let (parent, child) = self.span_pair();
        SpanScope {
            _child: child,
            _parent: parent,
        }
    }
}

impl Families {
    fn new(probe: bool) -> anyhow::Result<Self> {
        // Probe traffic's families: the same meanings under `entity_probe_*` names.
        let name = |user: &str| {
            if probe {
                user.replacen("entity_", "entity_probe_", 1)
            } else {
                user.to_string()
            }
        };
        let requests = IntCounterVec::new(
            Opts::new(
                name("entity_requests_total"),
                "Attempts at entity-service, by outcome, counted when they end (every attempt, \
                 retries included; legacy slot_timeout: the call never got a connection slot and \
                 nothing was sent)",
            ),
            &["outcome"],
        )?;
        for o in outcome::ALL {
            requests.with_label_values(&[o]);
        }
        let duration = HistogramVec::new(
            HistogramOpts::new(
                name("entity_request_duration_seconds"),
                "Duration of each attempt to entity-service as the client saw it, by outcome",
            )
            .buckets(CALLEE_BUCKETS.to_vec()),
            &["outcome"],
        )?;
        let retries = IntCounterVec::new(
            Opts::new(
                name("entity_retries_total"),
                "Retries at entity-service, counted when the retry attempt starts, by the failure \
                 that caused them",
            ),
            &["class"],
        )?;
        let failovers = IntCounter::new(
            name("entity_failovers_total"),
            "Attempts that got no answer at all (connection refused, or closed before any byte of \
             an answer: a replica shutting down) and were sent again to the next replica; a \
             failover is not a retry and spends no retry-budget token (fixed client only)",
        )?;
        let abandoned = IntCounter::new(
            name("entity_abandoned_total"),
            "Attempts whose answer nobody could use any more (fixed: cut short when the caller \
             left or the total deadline passed; legacy: completed after the caller had gone)",
        )?;
        let orphaned = IntCounterVec::new(
            Opts::new(
                if probe {
                    "entity_probe_span_orphaned_total"
                } else {
                    "otel_span_orphaned_total"
                },
                "Child work that ended after its parent (the caller) had ended, by span name",
            ),
            &["span"],
        )?;
        orphaned.with_label_values(&[RESOLVE_SPAN]);
        let shed = IntCounterVec::new(
            Opts::new(
                "entity_shed_total",
                "Calls or retries the entity client refused before sending, by reason",
            ),
            &["reason"],
        )?;
        for r in shed_reason::ALL {
            shed.with_label_values(&[r]);
        }
        let retry_tokens = GaugeVec::new(
            Opts::new(
                "entity_retry_budget_tokens",
                "Tokens in the entity client's retry budget (a retry costs 1, a success earns 0.2)",
            ),
            &[],
        )?;
        let breaker_state = IntGaugeVec::new(
            Opts::new(
                "entity_breaker_state",
                "Entity client breaker: 0 admitting, 1 probing, 2 shedding (as of the last call)",
            ),
            &[],
        )?;
        let pool_slots = IntGaugeVec::new(
            Opts::new(
                "entity_pool_slots",
                "Slots in front of entity-service: in_use, and waiting for one (legacy per-host \
                 cap, no deadline; the fixed client's ceiling, within the attempt's budget)",
            ),
            &["state"],
        )?;
        pool_slots.with_label_values(&[pool_state::IN_USE]);
        pool_slots.with_label_values(&[pool_state::WAITING]);
        let concurrency_limit = IntGaugeVec::new(
            Opts::new(
                "entity_concurrency_limit",
                "Attempts the fixed entity client admits in flight at once: the static size, or \
                 the adaptive (AIMD) limit's current value",
            ),
            &[],
        )?;
        Ok(Self {
            concurrency_limit,
            probe,
            requests,
            duration,
            retries,
            failovers,
            abandoned,
            orphaned,
            shed,
            retry_tokens,
            breaker_state,
            pool_slots,
        })
    }
}

/// The caller's end of an `entity.Resolve` span: dropping it (the caller finished or went away)
/// marks the parent as ended.
pub struct ParentSpan {
    ended: Arc<AtomicBool>,
}

impl Drop for ParentSpan {
    fn drop(&mut self) {
        self.ended.store(true, Ordering::Release);
    }
}

/// The work's end of an `entity.Resolve` span: when it is dropped (the work ended) after the
/// parent, `otel_span_orphaned_total{span="entity.Resolve"}` counts one orphan.
pub struct ChildSpan {
    parent_ended: Arc<AtomicBool>,
    /// The caller's hang-up, where the parent itself runs on after it (see
    /// [`ClientMetrics::span_pair_with`]).
    caller_gone: Option<Arc<AtomicBool>>,
    orphaned: IntCounter,
}

impl ChildSpan {
    /// Has the caller already gone? (Legacy counts attempts completing after this as abandoned.)
    pub fn parent_ended(&self) -> bool {
        self.parent_ended.load(Ordering::Acquire)
            || self
                .caller_gone
                .as_ref()
                .is_some_and(|g| g.load(Ordering::Acquire))
    }
}

impl Drop for ChildSpan {
    fn drop(&mut self) {
        if self.parent_ended() {
            self.orphaned.inc();
        }
    }
}

/// A parent and child that end together (see [`ClientMetrics::span_scope`]).
pub struct SpanScope {
    // Field order is drop order: the child ends first, then the parent.
    _child: ChildSpan,
    _parent: ParentSpan,
}
