//! The metric families BOTH entity clients write — defined here, once.
//!
//! The legacy client (`entity-client-legacy`) re-exports this module instead of defining its own,
//! so the two modes write the *same* series with the *same* label sets: a dashboard or alert built
//! for one mode works for the other, and when the orchestrator switches clients per request the
//! two clients' samples simply add up. Which mode produced a sample is deliberately not a label;
//! the caller's flag metric says which mode is on.
//!
//! # One registration per registry, two clients per process
//!
//! The orchestrator holds both clients on one [`Metrics`] registry, and a name registered twice in
//! a Prometheus registry is an error. So neither client registers families itself; both call
//! [`ClientMetrics::get_or_register`], which registers the families the first time it sees a
//! registry and hands back the very same families every later time. prometheus 0.14 cannot look
//! a registered collector up again, and a `Registry` has no identity we could key on (it is a
//! clonable `Arc` with private fields), so the registry is *tagged*: the families are registered
//! as one collector whose descriptors include a unique, sample-less name
//! `entity_client_families_tag_<n>`. Finding the families of a registry means asking it which tag
//! it holds — registering a probe with the tag's descriptor answers `AlreadyReg` for exactly that
//! tag (the probe is unregistered otherwise). The tag yields no samples, so `/metrics` never shows
//! it. The process-wide table of tags holds one entry per registry ever seen (one in a service; a
//! few dozen in a test binary).
//!
//! # Series (all low-cardinality, identical in both crates)
//!
//! | name | labels | fixed client | legacy client |
//! |---|---|---|---|
//! | `entity_requests_total` | `outcome` | every attempt put on the wire: `ok`, `timeout`, `error_5xx`, `error_4xx`, `transport`, `decode`, `cancelled` (the caller went away mid-attempt) | the same, never `cancelled` (nothing cancels it); an attempt whose 10 s expired while waiting for a per-host slot counts as `timeout`, as Go's `client.Do` reports it |
//! | `entity_request_duration_seconds` | `outcome` | duration of each attempt, [`CALLEE_BUCKETS`] (up to 60 s: this histogram must be able to show 10 s attempts) | same |
//! | `entity_retries_total` | `class` | retries actually started, by what failed before: `timeout`, `connect`, `transport`, `status_429`, `status_500`, `status_502`, `status_503`, `status_504`, `status_5xx`, `status_4xx` | same |
//! | `entity_abandoned_total` | — | attempts **cut short** because nobody could use their answer any more: the caller dropped the call mid-attempt, or the total deadline ended the attempt. Counted when cut; the connection closes at once | attempts that **completed** after the caller had gone (the awaiting future was dropped). Counted when they finish — having run their whole length |
//! | `otel_span_orphaned_total` | `span` | `entity.Resolve` work that ended after its caller ended. Detected like legacy; 0 by construction (the work *is* the caller's future) | the detached retry loop finishing after the awaiting caller was dropped: one per orphaned `entity.Resolve` |
//! | `entity_shed_total` | `reason` | calls or retries refused before the wire: `retry_budget`, `no_budget`, `breaker_open`, `concurrency_limit` | always 0 — legacy never sheds (the series exist so the panel reads 0, not "no data") |
//! | `entity_retry_budget_tokens` | — | the retry bucket's balance (100 = full) | absent (no series at all, rather than a 0 that would fire `min(entity_retry_budget_tokens) < 20`) |
//! | `entity_breaker_state` | — | 0 = admitting, 1 = probing, 2 = shedding — ordered by severity, so `max()` across pods is the worst; as of the last call (Shedding becomes Probing lazily, at the next call after the 5 s) | absent |
//! | `entity_pool_slots` | `state` | `in_use`: concurrency-limiter permits held by in-flight attempts; `waiting`: always 0 (the limiter never queues — it sheds) | `in_use`: per-host connection slots held; `waiting`: attempts parked waiting for a slot (the postmortem's 4,102 goroutines in `roundTrip`) |
//!
//! `entity_abandoned_total / entity_requests_total` is then comparable across modes: the share of
//! attempts whose answer nobody used. In legacy each such attempt ran to its full length; in fixed
//! each was stopped the moment it became useless. The gauges are shared by every client on a
//! registry: `entity_pool_slots` is only ever moved with `inc`/`dec`, so two clients add up; the
//! two fixed-only gauges are `set`, so a registry should carry one fixed client (the orchestrator
//! does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use lab_core::metrics::{Metrics, CALLEE_BUCKETS};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry,
};

/// Values of `entity_requests_total{outcome}` and `entity_request_duration_seconds{outcome}`.
pub mod outcome {
    /// 2xx with a decodable body.
    pub const OK: &str = "ok";
    /// The attempt ran out of time (its own per-attempt deadline, the total deadline, or — legacy —
    /// the 10 s client timeout, including time spent waiting for a pool slot).
    pub const TIMEOUT: &str = "timeout";
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
        OK, TIMEOUT, ERROR_5XX, ERROR_4XX, TRANSPORT, DECODE, CANCELLED,
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
}

/// The families, registered in a registry as ONE collector (so registration is all-or-nothing)
/// together with the registry's tag.
struct Families {
    /// Sample-less descriptor that identifies the registry these families were registered in.
    tag: Desc,
    requests: IntCounterVec,
    duration: HistogramVec,
    retries: IntCounterVec,
    abandoned: IntCounter,
    orphaned: IntCounterVec,
    shed: IntCounterVec,
    /// Label-less `GaugeVec`s: no series exists until a fixed client creates one, so a process with
    /// only the legacy client exports no misleading 0.
    retry_tokens: GaugeVec,
    breaker_state: IntGaugeVec,
    pool_slots: IntGaugeVec,
}

#[derive(Clone)]
struct FamiliesCollector(Arc<Families>);

impl Collector for FamiliesCollector {
    fn desc(&self) -> Vec<&Desc> {
        let f = &self.0;
        let mut d = vec![&f.tag];
        d.extend(f.requests.desc());
        d.extend(f.duration.desc());
        d.extend(f.retries.desc());
        d.extend(f.abandoned.desc());
        d.extend(f.orphaned.desc());
        d.extend(f.shed.desc());
        d.extend(f.retry_tokens.desc());
        d.extend(f.breaker_state.desc());
        d.extend(f.pool_slots.desc());
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let f = &self.0;
        let mut out = Vec::new();
        out.extend(f.requests.collect());
        out.extend(f.duration.collect());
        out.extend(f.retries.collect());
        out.extend(f.abandoned.collect());
        out.extend(f.orphaned.collect());
        out.extend(f.shed.collect());
        out.extend(f.retry_tokens.collect());
        out.extend(f.breaker_state.collect());
        out.extend(f.pool_slots.collect());
        out
    }
}

/// A collector with only a tag descriptor: registering it asks a registry "do you hold this tag?".
struct TagProbe(Desc);

impl Collector for TagProbe {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.0]
    }
    fn collect(&self) -> Vec<MetricFamily> {
        Vec::new()
    }
}

/// Every registry this process has registered the families in: (tag descriptor, families).
static REGISTERED: Mutex<Vec<(Desc, ClientMetrics)>> = Mutex::new(Vec::new());
static NEXT_TAG: AtomicU64 = AtomicU64::new(0);

const TAG_HELP: &str =
    "Identifies the registry holding the entity clients' families; never has samples";

impl ClientMetrics {
    /// The families of `metrics`' registry: registered on the first call for a registry, the same
    /// handles on every later call (from either client). Fails — rather than panicking, and
    /// without registering anything — when another component already registered one of these
    /// names in that registry (e.g. the orchestrator's plain `EntityClient`, which registers
    /// `entity_requests_total` and `entity_request_duration_seconds` itself).
    pub fn get_or_register(metrics: &Metrics) -> anyhow::Result<Self> {
        let registry = metrics.registry();
        // One lock around find-or-register: two clients constructed concurrently must not both
        // register.
        let mut table = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
        for (tag, families) in table.iter() {
            if holds_tag(registry, tag) {
                return Ok(families.clone());
            }
        }
        let n = NEXT_TAG.fetch_add(1, Ordering::Relaxed);
        let tag = Desc::new(
            format!("entity_client_families_tag_{n}"),
            TAG_HELP.to_string(),
            vec![],
            HashMap::new(),
        )
        .context("tag descriptor")?;
        let families = Arc::new(Families::new(tag.clone())?);
        if let Err(e) = registry.register(Box::new(FamiliesCollector(families.clone()))) {
            return Err(anyhow!(
                "cannot register the entity clients' metrics: {e}; {} is already registered in \
                 this registry by another component — the entity clients own these names (see \
                 entity_client::metrics), so the other registration must go",
                conflicting_names(registry, &families).join(", ")
            ));
        }
        let cm = ClientMetrics { families };
        table.push((tag, cm.clone()));
        Ok(cm)
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

    /// `entity_retries_total{class}`: a retry is about to be made after a failure of `class`.
    pub fn record_retry(&self, class: &str) {
        self.families.retries.with_label_values(&[class]).inc();
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
        let parent_ended = Arc::new(AtomicBool::new(false));
        (
            ParentSpan {
                ended: parent_ended.clone(),
            },
            ChildSpan {
                parent_ended,
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

/// Asks `registry` whether it holds `tag`: registering a collector whose descriptor is already
/// registered answers `AlreadyReg`; anything else means "no" (and the probe is taken back out).
fn holds_tag(registry: &Registry, tag: &Desc) -> bool {
    match registry.register(Box::new(TagProbe(tag.clone()))) {
        Err(prometheus::Error::AlreadyReg) => true,
        Ok(()) => {
            let _ = registry.unregister(Box::new(TagProbe(tag.clone())));
            false
        }
        Err(_) => false,
    }
}

/// Which of the families' names `registry` already holds (for the registration error message).
/// Each family is registered alone; the ones that fail are the conflicts, the others are taken
/// straight back out (registration failed, nothing of ours may stay registered).
fn conflicting_names(registry: &Registry, families: &Families) -> Vec<String> {
    fn check<C: Collector + Clone + 'static>(registry: &Registry, c: &C, names: &mut Vec<String>) {
        match registry.register(Box::new(c.clone())) {
            Ok(()) => {
                let _ = registry.unregister(Box::new(c.clone()));
            }
            Err(_) => names.extend(c.desc().iter().map(|d| d.fq_name.clone())),
        }
    }
    let mut names = Vec::new();
    check(registry, &families.requests, &mut names);
    check(registry, &families.duration, &mut names);
    check(registry, &families.retries, &mut names);
    check(registry, &families.abandoned, &mut names);
    check(registry, &families.orphaned, &mut names);
    check(registry, &families.shed, &mut names);
    check(registry, &families.retry_tokens, &mut names);
    check(registry, &families.breaker_state, &mut names);
    check(registry, &families.pool_slots, &mut names);
    names
}

impl Families {
    fn new(tag: Desc) -> anyhow::Result<Self> {
        let requests = IntCounterVec::new(
            Opts::new(
                "entity_requests_total",
                "Attempts sent to entity-service, by outcome (every attempt, retries included)",
            ),
            &["outcome"],
        )?;
        for o in outcome::ALL {
            requests.with_label_values(&[o]);
        }
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "entity_request_duration_seconds",
                "Duration of each attempt to entity-service as the client saw it, by outcome",
            )
            .buckets(CALLEE_BUCKETS.to_vec()),
            &["outcome"],
        )?;
        let retries = IntCounterVec::new(
            Opts::new(
                "entity_retries_total",
                "Retries started against entity-service, by the failure that caused them",
            ),
            &["class"],
        )?;
        let abandoned = IntCounter::new(
            "entity_abandoned_total",
            "Attempts whose answer nobody could use any more (fixed: cut short when the caller \
             left or the total deadline passed; legacy: completed after the caller had gone)",
        )?;
        let orphaned = IntCounterVec::new(
            Opts::new(
                "otel_span_orphaned_total",
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
                 cap; the fixed limiter never queues)",
            ),
            &["state"],
        )?;
        pool_slots.with_label_values(&[pool_state::IN_USE]);
        pool_slots.with_label_values(&[pool_state::WAITING]);
        Ok(Self {
            tag,
            requests,
            duration,
            retries,
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
    orphaned: IntCounter,
}

impl ChildSpan {
    /// Has the caller already gone? (Legacy counts attempts completing after this as abandoned.)
    pub fn parent_ended(&self) -> bool {
        self.parent_ended.load(Ordering::Acquire)
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
