//! Every quantity a run reports, once: the rows of the Performance Comparison table (in display
//! order; scenario verdicts name them by id), and the lines the charts and `labctl watch` draw.
//! Metric names are the postmortem's and the Grafana dashboards'.

use crate::quantity::{Across, Expr, Filter, FineWhat, Over, Scale, Stream};

/// How a value prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ms,
    /// Milliseconds to the hundredth: a query that takes 0.05 ms.
    FineMs,
    Rps,
    Mb,
    Percent,
    Times,
    Cores,
    /// A count, a state, a 0/1 fact.
    Plain,
    /// A coefficient to the hundredth (an autocorrelation).
    Plain2,
}

impl Unit {
    /// A value as the tables print it.
    pub fn fmt(self, v: Option<f64>) -> String {
        match v {
            None => "—".into(),
            Some(v) => match self {
                Unit::Ms | Unit::Rps | Unit::Mb => format!("{v:.0}"),
                Unit::FineMs => format!("{v:.2}"),
                Unit::Percent => format!("{v:.1}%"),
                Unit::Times => format!("{v:.2}×"),
                Unit::Cores => format!("{v:.2}"),
                Unit::Plain if v.fract() == 0.0 => format!("{v:.0}"),
                Unit::Plain => format!("{v:.1}"),
                Unit::Plain2 => format!("{v:.2}"),
            },
        }
    }
}

pub struct Quantity {
    /// Stable id: the summary's key, the scenario verdicts' name.
    pub id: &'static str,
    pub label: &'static str,
    /// The label where 14 columns is all there is (`labctl watch`).
    pub short: &'static str,
    pub unit: Unit,
    pub expr: Expr,
    /// A row of the phase table (`false`: a chart line only).
    pub row: bool,
}

impl Quantity {
    /// [`Quantity::short`], saying so where the gateway's counters stand in for the load
    /// generator's record ([`Expr::Sent`]): the gateway counts a request when it is answered,
    /// not when it is sent, so in a storm "answered" trails what was offered.
    pub fn short_for(&self, has_load: bool) -> &'static str {
        match self.id {
            "offered_rps" if !has_load => "gw answered",
            "goodput_rps" if !has_load => "gw 200s",
            _ => self.short,
        }
    }
}

/// The quantity `id` (ids are checked by the tests: panels and scenarios name only these).
pub fn find(id: &str) -> Option<&'static Quantity> {
    QUANTITIES.iter().find(|q| q.id == id)
}

/// The table's rows, in display order.
pub fn rows() -> impl Iterator<Item = &'static Quantity> {
    QUANTITIES.iter().filter(|q| q.row)
}

/// What a table may show, in display order: every row, then the quantities only a run's
/// verdicts compute (a table shows one where its summaries hold it).
pub fn in_tables() -> impl Iterator<Item = &'static Quantity> {
    rows().chain(QUANTITIES.iter().filter(|q| !q.row))
}

const fn all(service: &'static str, metric: &'static str) -> Expr {
    Expr::Increase {
        service,
        metric,
        filter: Filter::All,
    }
}
const fn some(service: &'static str, metric: &'static str, filter: Filter) -> Expr {
    Expr::Increase {
        service,
        metric,
        filter,
    }
}
const fn gauge(
    service: &'static str,
    metric: &'static str,
    filter: Filter,
    across: Across,
    over: Over,
) -> Expr {
    Expr::Gauge {
        service,
        metric,
        filter,
        across,
        over,
    }
}
const fn quantile(service: &'static str, metric: &'static str, q: f64) -> Expr {
    Expr::Quantile { service, metric, q }
}
// Sub-expressions are named consts: `&` of a const is 'static, of a call may not be.

const GW: &str = "edge-gateway";
const ORCH: &str = "orchestrator";
const ENT: &str = "entity-service";
const SUP: &str = crate::series::SUPERVISOR;

const GW_P50: Expr = quantile(GW, "gateway_request_duration_seconds", 0.50);
const GW_P95: Expr = quantile(GW, "gateway_request_duration_seconds", 0.95);
const GW_P99: Expr = quantile(GW, "gateway_request_duration_seconds", 0.99);
const ENT_P50: Expr = quantile(ENT, "entity_service_request_duration_seconds", 0.50);
const ENT_P99: Expr = quantile(ENT, "entity_service_request_duration_seconds", 0.99);
// Observation only (X-Lab-Observe-Sent-Unix-Us): the part of a caller's attempt entity-service
// never sees, and the budgeted answers that were ready only after the caller had given up.
const ENT_TRANSIT_P99: Expr = quantile(ENT, "entity_service_transit_seconds", 0.99);
const BUDGETED: &str = "entity_service_budgeted_requests_total";
const BUDGETED_ALL: Expr = all(ENT, BUDGETED);
const CALLER_GONE: Expr = some(
    ENT,
    BUDGETED,
    Filter::Either(
        &Filter::Is("outcome", "answered_late"),
        &Filter::Is("outcome", "dropped"),
    ),
);
const CANDIDATE: Filter = Filter::Is("query", "candidate");
const CAND_SUM: Expr = some(ENT, "entity_db_query_duration_seconds_sum", CANDIDATE);
const CAND_N: Expr = some(ENT, "entity_db_query_duration_seconds_count", CANDIDATE);
// The plan probe's facts count only where their source was up in every second: a gauge keeps
// its last value (0 before the first success) while entity_db_stats_up is 0, so a probe refused
// a grant would otherwise read as "the plan flipped" (issue 24).
const STATS_UP: Expr = gauge(
    ENT,
    "entity_db_stats_up",
    Filter::All,
    Across::Min,
    Over::Min,
);
const PLAN: &str = "entity_db_hot_plan_index_scan";
const PLAN_MIN: Expr = gauge(ENT, PLAN, Filter::All, Across::Min, Over::Min);
// The plan as the window's last scrape read it: the probe refreshes every 5 s, so the first
// seconds after ANALYZE still show the stale plan and a minimum cannot say "it came back".
const PLAN_LAST: Expr = gauge(ENT, PLAN, Filter::All, Across::Min, Over::Last);
const DEAD: Expr = gauge(
    ENT,
    "entity_db_dead_tuples",
    Filter::All,
    Across::Max,
    Over::Max,
);
// A kill switch took effect: every replica of the hop applies the flag's `off` variant at the
// window's last scrape (`lab_flag_variant`, exported by each process from the flags it applies).
// Not attempts per first attempt: in legacy mode, loops started before the flip keep retrying
// for up to ~31 s, so that ratio measures the orphans' drain, not the switch.
const OFF: Filter = Filter::Is("variant", "off");
const ENTITY_RETRIES_OFF: Expr = gauge(
    ORCH,
    "lab_flag_variant",
    Filter::Both(&Filter::Is("flag", "retries.entity.enabled"), &OFF),
    Across::Min,
    Over::Last,
);
const GATEWAY_RETRIES_OFF: Expr = gauge(
    GW,
    "lab_flag_variant",
    Filter::Both(&Filter::Is("flag", "retries.gateway.enabled"), &OFF),
    Across::Min,
    Over::Last,
);
pub(crate) const GW_REQUESTS: Expr = all(GW, "gateway_requests_total");
/// The gateway's 200s: in budget, since the gateway answers 504 at 3 s.
pub(crate) const GW_200: Expr = some(GW, "gateway_requests_total", Filter::Is("status", "200"));
const GW_5XX: Expr = some(
    GW,
    "gateway_requests_total",
    Filter::StartsWith("status", "5"),
);
const ENT_INBOUND: Expr = all(ENT, "entity_service_requests_total");
const ENT_SERVED: Expr = some(
    ENT,
    "entity_service_requests_total",
    Filter::Is("status", "200"),
);
const AMPLIFICATION: Expr = Expr::Ratio {
    a: &ENT_INBOUND,
    b: &GW_REQUESTS,
    times: 1.0,
};
// Gateway hop: every attempt sent to an orchestrator is counted once when it ends (cut by the
// budget included); retries when they are sent; failovers after a refused connection are neither.
const GW_ATTEMPTS: Expr = all(GW, "gateway_upstream_attempts_total");
const GW_RETRIES: Expr = all(GW, "gateway_upstream_retries_total");
const ORCH_ATTEMPTS: Expr = all(ORCH, "entity_requests_total");
const ORCH_RETRIES: Expr = all(ORCH, "entity_retries_total");
const BUSY: Expr = all(ENT, "entity_service_busy_seconds_total");
const ABANDONED: Expr = all(ENT, "entity_service_abandoned_seconds_total");
const CACHE: &str = "orchestrator_cache_requests_total";
const CACHE_HITS: Expr = some(ORCH, CACHE, Filter::Is("result", "hit"));
const CACHE_LOOKUPS: Expr = all(ORCH, CACHE);
const ORCH_ONLY: Filter = Filter::Is("binary", "orchestrator");
const CPU_SECONDS: Expr = all(ORCH, "process_cpu_seconds_total");
const RUNQUEUE: &str = "lab_supervisor_runqueue_wait_seconds_total";
const ENT_RUNQUEUE: Expr = some(SUP, RUNQUEUE, Filter::Is("binary", "entity-service"));
const ORCH_RUNQUEUE: Expr = some(SUP, RUNQUEUE, ORCH_ONLY);
const ENT_RUNQUEUE_RATE: Expr = Expr::PerSecond(&ENT_RUNQUEUE);
const ORCH_RUNQUEUE_RATE: Expr = Expr::PerSecond(&ORCH_RUNQUEUE);
const CPU: Expr = Expr::PerSecond(&CPU_SECONDS);
const RSS: Expr = gauge(
    ORCH,
    "process_resident_memory_bytes",
    Filter::All,
    Across::Max,
    Over::Max,
);
const ORPHANS: Expr = all(ORCH, "otel_span_orphaned_total");
const SHED: Expr = all(ORCH, "entity_shed_total");
const APPLIED: Expr = some(
    "enrichment",
    "enrichment_events_total",
    Filter::Is("outcome", "applied"),
);

// Faults: what every replica shows while a dependency is away, and what the run's documents
// left in the database (the `database` pseudo-target, scraped only for a scenario judging it).
const ANY: &str = crate::series::ANY;
const DB: &str = crate::series::DATABASE;
const STORE: &str = "lab_flags_store_reachable";
const STORE_ALL: Expr = gauge(ANY, STORE, Filter::All, Across::Min, Over::Last);
const STORE_ANY: Expr = gauge(ANY, STORE, Filter::All, Across::Max, Over::Last);
const MODE_FLAG: Filter = Filter::Is("flag", "client.mode");
const IS_LEGACY: Filter = Filter::Is("variant", "legacy");
const IS_RESILIENT: Filter = Filter::Is("variant", "resilient");
/// A flag's variant applied by every replica, at the window's last scrape.
const fn applied_everywhere(flag: &'static Filter, variant: &'static Filter) -> Expr {
    gauge(
        ANY,
        "lab_flag_variant",
        Filter::Both(flag, variant),
        Across::Min,
        Over::Last,
    )
}
const LEGACY_ALL: Expr = applied_everywhere(&MODE_FLAG, &IS_LEGACY);
const RESILIENT_ALL: Expr = applied_everywhere(&MODE_FLAG, &IS_RESILIENT);
const FRACTION_FLAG: Filter = Filter::Is("flag", "fault.entity.latency_fraction");
const HALF: Filter = Filter::Is("variant", "0.5");
const QUARTER: Filter = Filter::Is("variant", "0.25");
const FRACTION_HALF_ALL: Expr = applied_everywhere(&FRACTION_FLAG, &HALF);
const FRACTION_QUARTER_ALL: Expr = applied_everywhere(&FRACTION_FLAG, &QUARTER);
// Decided by a replica's own bucket because Redis did not answer in time (local_allowed,
// local_limited).
const WITHOUT_REDIS: Expr = some(
    GW,
    "gateway_ratelimit_decisions_total",
    Filter::StartsWith("decision", "local_"),
);
const LAG: Expr = gauge(
    "enrichment",
    "enrichment_consumer_lag",
    Filter::All,
    Across::Max,
    Over::Last,
);
const ROWS: Expr = gauge(
    DB,
    "lab_run_enrichment_rows",
    Filter::All,
    Across::Sum,
    Over::Last,
);
const DOCS: Expr = gauge(
    DB,
    "lab_run_enrichment_documents",
    Filter::All,
    Across::Sum,
    Over::Last,
);
const OK_SO_FAR: Expr = Expr::SinceStart(&Expr::Answered200);

const fn row(id: &'static str, label: &'static str, unit: Unit, expr: Expr) -> Quantity {
    Quantity {
        id,
        label,
        short: id,
        unit,
        expr,
        row: true,
    }
}

/// A quantity a fault scenario judges: in a run's table only where a verdict names it.
const fn fault(id: &'static str, short: &'static str, label: &'static str, expr: Expr) -> Quantity {
    Quantity {
        short,
        row: false,
        ..row(id, label, Unit::Plain, expr)
    }
}

/// Every quantity, rows in display order.
pub static QUANTITIES: &[Quantity] = &[
    Quantity {
        short: "gateway p50",
        ..row(
            "gateway_p50_ms",
            "Gateway p50 (gateway's view)",
            Unit::Ms,
            Expr::Scaled(&GW_P50, Scale::Times(1000.0)),
        )
    },
    Quantity {
        short: "gateway p95",
        ..row(
            "gateway_p95_ms",
            "Gateway p95 (gateway's view)",
            Unit::Ms,
            Expr::Scaled(&GW_P95, Scale::Times(1000.0)),
        )
    },
    Quantity {
        short: "gateway p99",
        ..row(
            "gateway_p99_ms",
            "Gateway p99 (gateway's view, clamped at the budget)",
            Unit::Ms,
            Expr::Scaled(&GW_P99, Scale::Times(1000.0)),
        )
    },
    Quantity {
        short: "entity p50",
        ..row(
            "entity_p50_ms",
            "entity-service p50 (callee's view)",
            Unit::Ms,
            Expr::Scaled(&ENT_P50, Scale::Times(1000.0)),
        )
    },
    Quantity {
        short: "entity p99",
        ..row(
            "entity_p99_ms",
            "entity-service p99 (callee's view)",
            Unit::Ms,
            Expr::Scaled(&ENT_P99, Scale::Times(1000.0)),
        )
    },
    Quantity {
        short: "candidate ms",
        ..row(
            "candidate_query_mean_ms",
            "Hot candidate lookup, mean (PostgreSQL, entity-service's view)",
            Unit::FineMs,
            Expr::Ratio {
                a: &CAND_SUM,
                b: &CAND_N,
                times: 1000.0,
            },
        )
    },
    Quantity {
        short: "hot lookups/s",
        ..row(
            "candidate_lookups_rps",
            "Hot candidate lookups per second (PostgreSQL, all entity-services; the work the plan flip makes dear)",
            Unit::Rps,
            Expr::PerSecond(&CAND_N),
        )
    },
    Quantity {
        short: "index scan?",
        ..row(
            "hot_plan_index_scan_min",
            "Hot plan is an index scan (min; 0 = bitmap heap scan)",
            Unit::Plain,
            Expr::Only {
                gate: &STATS_UP,
                is: 1.0,
                then: &PLAN_MIN,
            },
        )
    },
    Quantity {
        short: "index scan now",
        ..row(
            "hot_plan_index_scan_last",
            "Hot plan is an index scan (at the window's last scrape)",
            Unit::Plain,
            Expr::Only {
                gate: &STATS_UP,
                is: 1.0,
                then: &PLAN_LAST,
            },
        )
    },
    Quantity {
        short: "dead tuples",
        ..row(
            "dead_tuples_max",
            "Dead tuples in entities (max)",
            Unit::Plain,
            Expr::Only {
                gate: &STATS_UP,
                is: 1.0,
                then: &DEAD,
            },
        )
    },
    Quantity {
        short: "db facts up",
        ..row(
            "db_stats_up_min",
            "entity-service's database facts up (min; 0 = the plan probe failed: the two rows \
             above not measured)",
            Unit::Plain,
            STATS_UP,
        )
    },
    Quantity {
        short: "entity retry off",
        ..row(
            "entity_retries_off_last",
            "Kill switch retries.entity.enabled=off applied by every orchestrator (last scrape)",
            Unit::Plain,
            ENTITY_RETRIES_OFF,
        )
    },
    Quantity {
        short: "gw retry off",
        ..row(
            "gateway_retries_off_last",
            "Kill switch retries.gateway.enabled=off applied by every gateway (last scrape)",
            Unit::Plain,
            GATEWAY_RETRIES_OFF,
        )
    },
    Quantity {
        short: "accepted rps",
        ..row(
            "gateway_rps",
            "Gateway accepted rps",
            Unit::Rps,
            Expr::PerSecond(&GW_REQUESTS),
        )
    },
    Quantity {
        short: "entity inbound",
        ..row(
            "entity_inbound_rps",
            "entity-service inbound rps (arrived: its own count)",
            Unit::Rps,
            Expr::PerSecond(&ENT_INBOUND),
        )
    },
    // The postmortem's "8,100 attempted / 1,430 served" and its amplification alert count the
    // callers' attempts (`sum(rate(entity_requests_total[1m]))`), not what reached entity-service:
    // its 60 orchestrators had 64 connections each to entity-service, and at its 6.9 s p99 no
    // more than a few thousand requests a second could even arrive (Little's law). An attempt
    // still waiting for a connection slot counts here (`slot_timeout` when the 10 s ran out
    // there), and never in the arrivals above.
    Quantity {
        short: "entity attempted",
        ..row(
            "entity_attempted_rps",
            "entity-service attempted rps (the orchestrators' attempts: the postmortem's count)",
            Unit::Rps,
            Expr::PerSecond(&ORCH_ATTEMPTS),
        )
    },
    Quantity {
        short: "attempts started",
        ..row(
            "entity_attempt_starts_rps",
            "entity-service attempts started per second (the orchestrators' own 100 ms counts: an attempt counted when it was made, not when it ended)",
            Unit::Rps,
            Expr::Fine {
                of: Stream::AttemptStarts,
                what: FineWhat::Rate,
            },
        )
    },
    Quantity {
        short: "entity served",
        ..row(
            "entity_served_rps",
            "entity-service served rps (200)",
            Unit::Rps,
            Expr::PerSecond(&ENT_SERVED),
        )
    },
    Quantity {
        short: "amplification",
        ..row(
            "amplification",
            "Amplification: entity-service inbound / gateway accepted",
            Unit::Times,
            AMPLIFICATION,
        )
    },
    Quantity {
        short: "A attempted",
        ..row(
            "amplification_attempted",
            "Amplification as the postmortem's alert computes it: orchestrator attempts / gateway accepted",
            Unit::Times,
            Expr::Ratio {
                a: &ORCH_ATTEMPTS,
                b: &GW_REQUESTS,
                times: 1.0,
            },
        )
    },
    Quantity {
        short: "A_retry",
        ..row(
            "amplification_ratio",
            "Amplification vs. the first phase (A_retry)",
            Unit::Times,
            Expr::VsFirst(&AMPLIFICATION),
        )
    },
    Quantity {
        short: "gw attempts/1st",
        ..row(
            "gateway_attempts_per_first",
            "Attempts per first attempt: gateway → orchestrator",
            Unit::Times,
            Expr::PerFirst {
                attempts: &GW_ATTEMPTS,
                retries: &GW_RETRIES,
            },
        )
    },
    Quantity {
        short: "orch attempts/1st",
        ..row(
            "orchestrator_attempts_per_first",
            "Attempts per first attempt: orchestrator → entity-service",
            Unit::Times,
            Expr::PerFirst {
                attempts: &ORCH_ATTEMPTS,
                retries: &ORCH_RETRIES,
            },
        )
    },
    // The legacy backoff's waves (issue 26): "200ms, 400ms, 800ms. Identical on every pod. No
    // jitter." Requests that failed together come back 200, 400 and 800 ms later together;
    // 300 ms is none of the sleeps nor a sum of two of them (200+400 = 600, 400+800 = 1200),
    // so it is the floor a wave must stand above. Full jitter spreads each retry over its whole
    // window and leaves no lag standing out.
    Quantity {
        short: "arrivals r(200ms)",
        ..row(
            "entity_arrivals_acf_200ms",
            "entity-service arrivals per 100 ms: autocorrelation at 200 ms (the first backoff sleep)",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::Arrivals,
                what: FineWhat::Autocorrelation { lag_ms: 200 },
            },
        )
    },
    Quantity {
        short: "arrivals r(400ms)",
        ..row(
            "entity_arrivals_acf_400ms",
            "entity-service arrivals per 100 ms: autocorrelation at 400 ms (the second)",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::Arrivals,
                what: FineWhat::Autocorrelation { lag_ms: 400 },
            },
        )
    },
    Quantity {
        short: "arrivals r(800ms)",
        ..row(
            "entity_arrivals_acf_800ms",
            "entity-service arrivals per 100 ms: autocorrelation at 800 ms (the third)",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::Arrivals,
                what: FineWhat::Autocorrelation { lag_ms: 800 },
            },
        )
    },
    Quantity {
        short: "arrivals r(300ms)",
        ..row(
            "entity_arrivals_acf_300ms",
            "entity-service arrivals per 100 ms: autocorrelation at 300 ms (no backoff lag: the floor)",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::Arrivals,
                what: FineWhat::Autocorrelation { lag_ms: 300 },
            },
        )
    },
    // Pulses, whatever their period: the postmortem's "8,100 rps arriving in pulses, with quiet
    // gaps between". Measured at the callee and at the callers' source.
    Quantity {
        short: "arrivals burstiness",
        ..row(
            "entity_arrivals_cv",
            "entity-service arrivals per 100 ms: coefficient of variation (Poisson at 200/s: 0.22)",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::Arrivals,
                what: FineWhat::Cv,
            },
        )
    },
    Quantity {
        short: "starts burstiness",
        ..row(
            "orch_attempt_starts_cv",
            "orchestrator attempts started per 100 ms: coefficient of variation",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::AttemptStarts,
                what: FineWhat::Cv,
            },
        )
    },
    // The same lags at the source (issue 26): the orchestrators' attempts as each started,
    // before the legacy client waits for one of its 64 per-host slots. Waves here and none in
    // the arrivals above mean the slots pace what reaches entity-service by its completions,
    // not by the backoff's clock; no waves here either mean the retries are not synchronized.
    Quantity {
        short: "starts r(200ms)",
        ..row(
            "orch_attempt_starts_acf_200ms",
            "orchestrator attempts started per 100 ms (before the slot wait): autocorrelation at 200 ms",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::AttemptStarts,
                what: FineWhat::Autocorrelation { lag_ms: 200 },
            },
        )
    },
    Quantity {
        short: "starts r(400ms)",
        ..row(
            "orch_attempt_starts_acf_400ms",
            "orchestrator attempts started per 100 ms: autocorrelation at 400 ms",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::AttemptStarts,
                what: FineWhat::Autocorrelation { lag_ms: 400 },
            },
        )
    },
    Quantity {
        short: "starts r(800ms)",
        ..row(
            "orch_attempt_starts_acf_800ms",
            "orchestrator attempts started per 100 ms: autocorrelation at 800 ms",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::AttemptStarts,
                what: FineWhat::Autocorrelation { lag_ms: 800 },
            },
        )
    },
    Quantity {
        short: "starts r(300ms)",
        ..row(
            "orch_attempt_starts_acf_300ms",
            "orchestrator attempts started per 100 ms: autocorrelation at 300 ms (the floor)",
            Unit::Plain2,
            Expr::Fine {
                of: Stream::AttemptStarts,
                what: FineWhat::Autocorrelation { lag_ms: 300 },
            },
        )
    },
    Quantity {
        short: "transit p99",
        ..row(
            "entity_transit_p99_ms",
            "entity-service: from the client's send to the handler's start, p99 (wall clock; the time a budget header cannot count)",
            Unit::Ms,
            Expr::Scaled(&ENT_TRANSIT_P99, Scale::Times(1000.0)),
        )
    },
    Quantity {
        short: "caller gone %",
        ..row(
            "budgeted_caller_gone_pct",
            "Budgeted entity-service requests whose caller's attempt ended first: answered late or dropped at the hang-up (%)",
            Unit::Percent,
            Expr::Ratio {
                a: &CALLER_GONE,
                b: &BUDGETED_ALL,
                times: 100.0,
            },
        )
    },
    Quantity {
        short: "abandoned %",
        ..row(
            "abandoned_pct",
            "Abandoned work (% of entity-service handler time)",
            Unit::Percent,
            Expr::Ratio {
                a: &ABANDONED,
                b: &BUSY,
                times: 100.0,
            },
        )
    },
    Quantity {
        short: "5xx %",
        ..row(
            "error_5xx_pct",
            "Error rate (5xx at the gateway)",
            Unit::Percent,
            Expr::Ratio {
                a: &GW_5XX,
                b: &GW_REQUESTS,
                times: 100.0,
            },
        )
    },
    Quantity {
        short: "offered",
        ..row(
            "offered_rps",
            "Offered load (requests sent per second)",
            Unit::Rps,
            Expr::PerSecond(&Expr::Sent),
        )
    },
    Quantity {
        short: "goodput",
        ..row(
            "goodput_rps",
            "Goodput (200 within 3 s, per second)",
            Unit::Rps,
            Expr::PerSecond(&Expr::Good),
        )
    },
    Quantity {
        short: "failed",
        ..row(
            "failed_requests",
            "Requests that got no 200 (5xx, 429, client timeouts; by intended send time)",
            Unit::Plain,
            Expr::Minus(&Expr::Sent, &Expr::Answered200),
        )
    },
    Quantity {
        short: "goodput %",
        ..row(
            "goodput_pct",
            "Goodput share of the offered load (200 within 3 s)",
            Unit::Percent,
            Expr::Ratio {
                a: &Expr::Good,
                b: &Expr::Sent,
                times: 100.0,
            },
        )
    },
    Quantity {
        short: "cache hit %",
        ..row(
            "cache_hit_pct",
            "Orchestrator cache hit rate",
            Unit::Percent,
            Expr::Ratio {
                a: &CACHE_HITS,
                b: &CACHE_LOOKUPS,
                times: 100.0,
            },
        )
    },
    Quantity {
        short: "tasks (max)",
        ..row(
            "orchestrator_tasks_max",
            "orchestrator tasks alive (max per replica)",
            Unit::Plain,
            gauge(
                ORCH,
                "tokio_alive_tasks",
                Filter::All,
                Across::Max,
                Over::Max,
            ),
        )
    },
    Quantity {
        short: "RSS MB (max)",
        ..row(
            "orchestrator_rss_mb_max",
            "orchestrator memory (max RSS per replica)",
            Unit::Mb,
            Expr::Scaled(&RSS, Scale::Per(1e6)),
        )
    },
    // The native lab's supervisor (absent for labs labctl did not start: not measured).
    Quantity {
        short: "replicas",
        ..row(
            "orchestrator_replicas_max",
            "orchestrator replicas running (max)",
            Unit::Plain,
            gauge(
                SUP,
                "lab_supervisor_replicas",
                ORCH_ONLY,
                Across::Max,
                Over::Max,
            ),
        )
    },
    Quantity {
        short: "in rotation (min)",
        ..row(
            "orchestrators_in_rotation_min",
            "orchestrator replicas in the gateway's rotation (min; the deep-readiness cascade \
             takes them out, issue 26)",
            Unit::Plain,
            // Per gateway, its ready endpoints (each 1 while in rotation); the fewest any gateway
            // had, at the emptiest second of the window.
            gauge(
                GW,
                "gateway_upstream_ready",
                Filter::All,
                Across::Min,
                Over::Min,
            ),
        )
    },
    Quantity {
        short: "OOM kills",
        ..row(
            "oom_kills",
            "orchestrator replicas OOMKilled (the memory limit's kernel kills)",
            Unit::Plain,
            some(SUP, "lab_supervisor_oom_kills_total", ORCH_ONLY),
        )
    },
    Quantity {
        short: "rollouts",
        ..row(
            "rollouts",
            "orchestrator replicas replaced by a rollout (deliberate restarts)",
            Unit::Plain,
            some(SUP, "lab_supervisor_rollouts_total", ORCH_ONLY),
        )
    },
    Quantity {
        short: "restarts",
        ..row(
            "crash_restarts",
            "Replicas restarted after exiting on their own (crash, kill, OOM)",
            Unit::Plain,
            all(SUP, "lab_supervisor_restarts_total"),
        )
    },
    // The machine's stalls (issue 26): time the replicas' threads were ready to run and waited
    // for one of the machine's cores, per second, mean per replica — the kernel's own
    // scheduler accounting. What turns a steady arrival rate into empty 100 ms buckets beside
    // full ones, whatever the client does.
    Quantity {
        short: "entity CPU wait",
        ..row(
            "entity_runqueue_wait",
            "entity-service threads waiting for a CPU (s per s, mean per replica; the kernel's run-queue time)",
            Unit::Plain2,
            Expr::PerReplica(ENT, &ENT_RUNQUEUE_RATE),
        )
    },
    Quantity {
        short: "orch CPU wait",
        ..row(
            "orchestrator_runqueue_wait",
            "orchestrator threads waiting for a CPU (s per s, mean per replica)",
            Unit::Plain2,
            Expr::PerReplica(ORCH, &ORCH_RUNQUEUE_RATE),
        )
    },
    Quantity {
        short: "CPU cores",
        ..row(
            "orchestrator_cpu_cores",
            "orchestrator CPU (cores, mean per replica)",
            Unit::Cores,
            Expr::PerReplica(ORCH, &CPU),
        )
    },
    Quantity {
        short: "pool in use",
        ..row(
            "db_connections_max",
            "PostgreSQL connections in use (max, all entity-services; the pools' view)",
            Unit::Plain,
            gauge(
                ENT,
                "entity_db_pool_connections",
                Filter::Is("state", "in_use"),
                Across::Sum,
                Over::Max,
            ),
        )
    },
    Quantity {
        short: "pg active",
        ..row(
            "db_backends_active_max",
            "PostgreSQL backends active (max, all entity-services; pg_stat_activity's view)",
            Unit::Plain,
            gauge(
                ENT,
                "entity_db_backends",
                Filter::Is("state", "active"),
                Across::Sum,
                Over::Max,
            ),
        )
    },
    Quantity {
        short: "orphaned spans",
        ..row(
            "orphaned_spans",
            "Child work that outlived its caller (otel_span_orphaned_total)",
            Unit::Plain,
            ORPHANS,
        )
    },
    Quantity {
        short: "shed /s",
        ..row(
            "shed_rps",
            "Calls shed by the fixed client (retry budget, breaker, limit, no budget)",
            Unit::Rps,
            Expr::PerSecond(&SHED),
        )
    },
    Quantity {
        short: "breaker (2=shed)",
        ..row(
            "breaker_state_max",
            "Breaker state (max; 0 admitting, 1 probing, 2 shedding)",
            Unit::Plain,
            gauge(
                ORCH,
                "entity_breaker_state",
                Filter::All,
                Across::Max,
                Over::Max,
            ),
        )
    },
    Quantity {
        short: "retry tokens",
        ..row(
            "retry_budget_tokens_min",
            "Retry budget tokens (min)",
            Unit::Plain,
            gauge(
                ORCH,
                "entity_retry_budget_tokens",
                Filter::All,
                Across::Min,
                Over::Min,
            ),
        )
    },
    // Every worker reports the group's lag on every partition: summed over partitions per worker
    // (the group's total backlog, what `kafka-consumer-groups.sh --describe` adds up), then the
    // max over workers and ticks. The postmortem's false lead 3.
    Quantity {
        short: "enrich lag",
        ..row(
            "enrichment_lag_max",
            "Enrichment consumer lag, sum over partitions (max; off the request path)",
            Unit::Plain,
            gauge(
                "enrichment",
                "enrichment_consumer_lag",
                Filter::All,
                Across::Max,
                Over::Max,
            ),
        )
    },
    Quantity {
        short: "enriched /s",
        ..row(
            "enrichment_eps",
            "Enrichment events applied per second",
            Unit::Rps,
            Expr::PerSecond(&APPLIED),
        )
    },
    // Chart lines only: rates where the table counts or shares.
    Quantity {
        short: "orphans /s",
        row: false,
        ..row(
            "orphaned_spans_per_s",
            "orphaned spans per second",
            Unit::Rps,
            Expr::PerSecond(&ORPHANS),
        )
    },
    Quantity {
        short: "abandoned s/s",
        row: false,
        ..row(
            "abandoned_seconds_per_s",
            "abandoned entity-service seconds per second",
            Unit::Rps,
            Expr::PerSecond(&ABANDONED),
        )
    },
    // Faults (load/scenarios/faults/): not rows of every table, only of a run whose verdicts
    // name them.
    fault(
        "flags_store_reachable_all",
        "store ok (all)",
        "Flag store (Redis) reachable from every replica (min, at the window's last scrape)",
        STORE_ALL,
    ),
    fault(
        "flags_store_reachable_any",
        "store ok (any)",
        "Flag store (Redis) reachable from any replica (max, at the window's last scrape)",
        STORE_ANY,
    ),
    fault(
        "client_mode_legacy_all",
        "all legacy",
        "client.mode=legacy applied by every replica (at the window's last scrape)",
        LEGACY_ALL,
    ),
    fault(
        "client_mode_resilient_all",
        "all resilient",
        "client.mode=resilient applied by every replica (at the window's last scrape)",
        RESILIENT_ALL,
    ),
    fault(
        "latency_fraction_half_all",
        "marker 0.5",
        "fault.entity.latency_fraction=0.5 applied by every replica (last scrape; inert while \
         fault.entity.latency_ms is 0: a marker)",
        FRACTION_HALF_ALL,
    ),
    fault(
        "latency_fraction_quarter_all",
        "marker 0.25",
        "fault.entity.latency_fraction=0.25 applied by every replica (last scrape; a marker)",
        FRACTION_QUARTER_ALL,
    ),
    fault(
        "ratelimit_without_redis",
        "limited locally",
        "Gateway rate-limit decisions made without Redis (each replica's own bucket decided)",
        WITHOUT_REDIS,
    ),
    fault(
        "enrichment_lag",
        "lag",
        "Enrichment group lag, events (max over workers, at the window's last scrape)",
        LAG,
    ),
    fault(
        "enrichment_rows_missing",
        "rows missing",
        "The run's 200s so far with no enrichment row (200s − rows of the run's documents, \
         last scrape)",
        Expr::Minus(&OK_SO_FAR, &ROWS),
    ),
    fault(
        "enrichment_rows_duplicated",
        "rows twice",
        "Enrichment rows beyond one per document of the run (rows − distinct documents, last \
         scrape)",
        Expr::Minus(&ROWS, &DOCS),
    ),
];
