//! The game day's summary: one column per phase, rows shaped like the postmortem's Performance
//! Comparison table. Every number is computed from what was scraped or measured in this run.

use std::collections::BTreeMap;

use crate::series::Series;
use lab_load::SecondSample;

/// Rows in display order: key (used by scenario expectations), label, unit.
pub const ROWS: &[(&str, &str, &str)] = &[
    ("gateway_p50_ms", "Gateway p50 (gateway's view)", "ms"),
    ("gateway_p95_ms", "Gateway p95 (gateway's view)", "ms"),
    (
        "gateway_p99_ms",
        "Gateway p99 (gateway's view, clamped at the budget)",
        "ms",
    ),
    ("entity_p50_ms", "entity-service p50 (callee's view)", "ms"),
    ("entity_p99_ms", "entity-service p99 (callee's view)", "ms"),
    (
        "candidate_query_mean_ms",
        "Hot candidate lookup, mean (PostgreSQL, entity-service's view)",
        "ms2",
    ),
    (
        "hot_plan_index_scan_min",
        "Hot plan is an index scan (min; 0 = bitmap heap scan)",
        "",
    ),
    (
        "hot_plan_index_scan_last",
        "Hot plan is an index scan (at the window's last scrape)",
        "",
    ),
    ("dead_tuples_max", "Dead tuples in entities (max)", ""),
    (
        "db_stats_up_min",
        "entity-service's database facts up (min; 0 = the plan probe failed: the two rows above not measured)",
        "",
    ),
    (
        "entity_retries_off_last",
        "Kill switch retries.entity.enabled=off applied by every orchestrator (last scrape)",
        "",
    ),
    (
        "gateway_retries_off_last",
        "Kill switch retries.gateway.enabled=off applied by every gateway (last scrape)",
        "",
    ),
    ("gateway_rps", "Gateway accepted rps", "rps"),
    (
        "entity_inbound_rps",
        "entity-service inbound rps (attempted)",
        "rps",
    ),
    (
        "entity_served_rps",
        "entity-service served rps (200)",
        "rps",
    ),
    (
        "amplification",
        "Amplification: entity-service inbound / gateway accepted",
        "x",
    ),
    (
        "amplification_ratio",
        "Amplification vs. the first phase (A_retry)",
        "x",
    ),
    (
        "gateway_attempts_per_first",
        "Attempts per first attempt: gateway → orchestrator",
        "x",
    ),
    (
        "orchestrator_attempts_per_first",
        "Attempts per first attempt: orchestrator → entity-service",
        "x",
    ),
    (
        "abandoned_pct",
        "Abandoned work (% of entity-service handler time)",
        "%",
    ),
    ("error_5xx_pct", "Error rate (5xx at the gateway)", "%"),
    (
        "offered_rps",
        "Offered load (requests sent per second)",
        "rps",
    ),
    ("goodput_rps", "Goodput (200 within 3 s, per second)", "rps"),
    (
        "goodput_pct",
        "Goodput share of the offered load (200 within 3 s)",
        "%",
    ),
    ("cache_hit_pct", "Orchestrator cache hit rate", "%"),
    (
        "orchestrator_tasks_max",
        "orchestrator tasks alive (max per replica)",
        "",
    ),
    (
        "orchestrator_rss_mb_max",
        "orchestrator memory (max RSS per replica)",
        "MB",
    ),
    (
        "orchestrator_replicas_max",
        "orchestrator replicas running (max)",
        "",
    ),
    (
        "oom_kills",
        "orchestrator replicas OOMKilled (the memory limit's kernel kills)",
        "",
    ),
    (
        "rollouts",
        "orchestrator replicas replaced by a rollout (deliberate restarts)",
        "",
    ),
    (
        "crash_restarts",
        "Replicas restarted after exiting on their own (crash, kill, OOM)",
        "",
    ),
    (
        "orchestrator_cpu_cores",
        "orchestrator CPU (cores, mean per replica)",
        "cores",
    ),
    (
        "db_connections_max",
        "PostgreSQL connections in use (max, all entity-services; the pools' view)",
        "",
    ),
    (
        "db_backends_active_max",
        "PostgreSQL backends active (max, all entity-services; pg_stat_activity's view)",
        "",
    ),
    (
        "orphaned_spans",
        "Child work that outlived its caller (otel_span_orphaned_total)",
        "",
    ),
    (
        "shed_rps",
        "Calls shed by the fixed client (retry budget, breaker, limit, no budget)",
        "rps",
    ),
    (
        "breaker_state_max",
        "Breaker state (max; 0 admitting, 1 probing, 2 shedding)",
        "",
    ),
    ("retry_budget_tokens_min", "Retry budget tokens (min)", ""),
    (
        "enrichment_lag_max",
        "Enrichment consumer lag, sum over partitions (max; off the request path)",
        "",
    ),
    (
        "enrichment_eps",
        "Enrichment events applied per second",
        "rps",
    ),
];

pub type PhaseSummary = BTreeMap<String, f64>;

fn max(a: f64, b: f64) -> f64 {
    a.max(b)
}
fn min(a: f64, b: f64) -> f64 {
    a.min(b)
}

/// Compute every row for `phase` lasting `seconds`.
pub fn summarize(
    s: &Series,
    phase: usize,
    seconds: f64,
    load: &[SecondSample],
    phase_start: f64,
) -> PhaseSummary {
    let mut out = PhaseSummary::new();
    let mut put = |k: &str, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.insert(k.to_string(), v);
        }
    };
    let all = |_: &str| true;
    let ms = |v: Option<f64>| v.map(|v| v * 1000.0);
    put(
        "gateway_p50_ms",
        ms(s.quantile(
            phase,
            "edge-gateway",
            "gateway_request_duration_seconds",
            0.50,
        )),
    );
    put(
        "gateway_p95_ms",
        ms(s.quantile(
            phase,
            "edge-gateway",
            "gateway_request_duration_seconds",
            0.95,
        )),
    );
    put(
        "gateway_p99_ms",
        ms(s.quantile(
            phase,
            "edge-gateway",
            "gateway_request_duration_seconds",
            0.99,
        )),
    );
    put(
        "entity_p50_ms",
        ms(s.quantile(
            phase,
            "entity-service",
            "entity_service_request_duration_seconds",
            0.50,
        )),
    );
    let cand_sum = s.increase(
        phase,
        "entity-service",
        "entity_db_query_duration_seconds_sum",
        |l| crate::series::label(l, "query") == Some("candidate"),
    );
    let cand_n = s.increase(
        phase,
        "entity-service",
        "entity_db_query_duration_seconds_count",
        |l| crate::series::label(l, "query") == Some("candidate"),
    );
    if cand_n > 0.0 {
        put("candidate_query_mean_ms", Some(1000.0 * cand_sum / cand_n));
    }
    // The plan probe's facts count only where their source was up in every second: a gauge
    // keeps its last value (0 before the first success) while entity_db_stats_up is 0, so a
    // probe refused a grant would otherwise read as "the plan flipped" (issue 24).
    let stats_up = s.gauge(
        phase,
        "entity-service",
        "entity_db_stats_up",
        all,
        true,
        min,
    );
    put("db_stats_up_min", stats_up);
    let probed = |v: Option<f64>| v.filter(|_| stats_up == Some(1.0));
    put(
        "hot_plan_index_scan_min",
        probed(s.gauge(
            phase,
            "entity-service",
            "entity_db_hot_plan_index_scan",
            all,
            true,
            min,
        )),
    );
    // The plan as the window's last scrape read it: the probe refreshes every 5 s, so the first
    // seconds after ANALYZE still show the stale plan and a minimum cannot say "it came back".
    put(
        "hot_plan_index_scan_last",
        probed(s.gauge_last(
            phase,
            "entity-service",
            "entity_db_hot_plan_index_scan",
            all,
            min,
        )),
    );
    // A kill switch took effect: every replica of the hop applies the flag's `off` variant at
    // the window's last scrape (`lab_flag_variant`, exported by each process from the flags it
    // applies). Not attempts per first attempt: in legacy mode, loops started before the flip
    // keep retrying for up to ~31 s, so that ratio measures the orphans' drain, not the switch.
    for (key, service, flag) in [
        (
            "entity_retries_off_last",
            "orchestrator",
            "retries.entity.enabled",
        ),
        (
            "gateway_retries_off_last",
            "edge-gateway",
            "retries.gateway.enabled",
        ),
    ] {
        put(
            key,
            s.gauge_last(
                phase,
                service,
                "lab_flag_variant",
                |l| {
                    crate::series::label(l, "flag") == Some(flag)
                        && crate::series::label(l, "variant") == Some("off")
                },
                min,
            ),
        );
    }
    put(
        "dead_tuples_max",
        probed(s.gauge(
            phase,
            "entity-service",
            "entity_db_dead_tuples",
            all,
            true,
            max,
        )),
    );
    put(
        "entity_p99_ms",
        ms(s.quantile(
            phase,
            "entity-service",
            "entity_service_request_duration_seconds",
            0.99,
        )),
    );
    let gateway = s.increase(phase, "edge-gateway", "gateway_requests_total", all);
    let gateway_5xx = s.increase(phase, "edge-gateway", "gateway_requests_total", |l| {
        crate::series::label(l, "status").is_some_and(|st| st.starts_with('5'))
    });
    let inbound = s.increase(
        phase,
        "entity-service",
        "entity_service_requests_total",
        all,
    );
    let served = s.increase(
        phase,
        "entity-service",
        "entity_service_requests_total",
        |l| crate::series::label(l, "status") == Some("200"),
    );
    put("gateway_rps", Some(gateway / seconds));
    put("entity_inbound_rps", Some(inbound / seconds));
    put("entity_served_rps", Some(served / seconds));
    if gateway > 0.0 {
        put("amplification", Some(inbound / gateway));
        put("error_5xx_pct", Some(100.0 * gateway_5xx / gateway));
    }
    // Gateway hop: every attempt sent to an orchestrator is counted once when it ends (cut by
    // the budget included); retries when they are sent; failovers after a refused connection
    // are neither.
    let gw_attempts = s.increase(
        phase,
        "edge-gateway",
        "gateway_upstream_attempts_total",
        all,
    );
    let gw_retries = s.increase(phase, "edge-gateway", "gateway_upstream_retries_total", all);
    if gw_attempts > gw_retries && gw_attempts > 0.0 {
        put(
            "gateway_attempts_per_first",
            Some(gw_attempts / (gw_attempts - gw_retries)),
        );
    }
    let attempts = s.increase(phase, "orchestrator", "entity_requests_total", all);
    let retries = s.increase(phase, "orchestrator", "entity_retries_total", all);
    if attempts > retries && attempts > 0.0 {
        put(
            "orchestrator_attempts_per_first",
            Some(attempts / (attempts - retries)),
        );
    }
    let busy = s.increase(
        phase,
        "entity-service",
        "entity_service_busy_seconds_total",
        all,
    );
    let abandoned = s.increase(
        phase,
        "entity-service",
        "entity_service_abandoned_seconds_total",
        all,
    );
    if busy > 0.0 {
        put("abandoned_pct", Some(100.0 * abandoned / busy));
    }
    let hits = s.increase(
        phase,
        "orchestrator",
        "orchestrator_cache_requests_total",
        |l| crate::series::label(l, "result") == Some("hit"),
    );
    let lookups = s.increase(
        phase,
        "orchestrator",
        "orchestrator_cache_requests_total",
        all,
    );
    if lookups > 0.0 {
        put("cache_hit_pct", Some(100.0 * hits / lookups));
    }
    let good: u64 = load
        .iter()
        .filter(|x| {
            let t = x.second as f64;
            t >= phase_start && t < phase_start + seconds
        })
        .map(|x| x.good)
        .sum();
    put("goodput_rps", Some(good as f64 / seconds));
    let offered: u64 = load
        .iter()
        .filter(|x| {
            let t = x.second as f64;
            t >= phase_start && t < phase_start + seconds
        })
        .map(|x| x.sent)
        .sum();
    put("offered_rps", Some(offered as f64 / seconds));
    if offered > 0 {
        put("goodput_pct", Some(100.0 * good as f64 / offered as f64));
    }
    // The native lab's supervisor (absent for labs labctl did not start).
    if s.targets
        .iter()
        .any(|t| t.service == crate::series::SUPERVISOR)
    {
        let orch = |l: &str| crate::series::label(l, "binary") == Some("orchestrator");
        let sup = crate::series::SUPERVISOR;
        put(
            "orchestrator_replicas_max",
            s.gauge(phase, sup, "lab_supervisor_replicas", orch, true, max),
        );
        put(
            "oom_kills",
            Some(s.increase(phase, sup, "lab_supervisor_oom_kills_total", orch)),
        );
        put(
            "rollouts",
            Some(s.increase(phase, sup, "lab_supervisor_rollouts_total", orch)),
        );
        put(
            "crash_restarts",
            Some(s.increase(phase, sup, "lab_supervisor_restarts_total", all)),
        );
    }
    put(
        "orchestrator_tasks_max",
        s.gauge(phase, "orchestrator", "tokio_alive_tasks", all, true, max),
    );
    put(
        "orchestrator_rss_mb_max",
        s.gauge(
            phase,
            "orchestrator",
            "process_resident_memory_bytes",
            all,
            true,
            max,
        )
        .map(|b| b / 1e6),
    );
    let cpu = s.increase_by(phase, "orchestrator", "process_cpu_seconds_total", |_| {
        Some(())
    });
    if !cpu.is_empty() {
        // CPU seconds summed over the replicas, per second of phase, per replica.
        let per_replica = s
            .targets
            .iter()
            .filter(|t| t.service == "orchestrator")
            .count()
            .max(1) as f64;
        put(
            "orchestrator_cpu_cores",
            Some(cpu.values().sum::<f64>() / seconds / per_replica),
        );
    }
    put(
        "db_connections_max",
        s.gauge(
            phase,
            "entity-service",
            "entity_db_pool_connections",
            |l| crate::series::label(l, "state") == Some("in_use"),
            false,
            max,
        ),
    );
    put(
        "db_backends_active_max",
        s.gauge(
            phase,
            "entity-service",
            "entity_db_backends",
            |l| crate::series::label(l, "state") == Some("active"),
            false,
            max,
        ),
    );
    put(
        "orphaned_spans",
        Some(s.increase(phase, "orchestrator", "otel_span_orphaned_total", all)),
    );
    put(
        "shed_rps",
        Some(s.increase(phase, "orchestrator", "entity_shed_total", all) / seconds),
    );
    put(
        "breaker_state_max",
        s.gauge(
            phase,
            "orchestrator",
            "entity_breaker_state",
            all,
            true,
            max,
        ),
    );
    put(
        "retry_budget_tokens_min",
        s.gauge(
            phase,
            "orchestrator",
            "entity_retry_budget_tokens",
            all,
            true,
            min,
        ),
    );
    // Every worker reports the group's lag on every partition: summed over partitions per worker
    // (the group's total backlog, what `kafka-consumer-groups.sh --describe` adds up), then the
    // max over workers and ticks. The postmortem's false lead 3.
    put(
        "enrichment_lag_max",
        s.gauge(
            phase,
            "enrichment",
            "enrichment_consumer_lag",
            all,
            true,
            max,
        ),
    );
    if s.targets.iter().any(|t| t.service == "enrichment") {
        put(
            "enrichment_eps",
            Some(
                s.increase(phase, "enrichment", "enrichment_events_total", |l| {
                    crate::series::label(l, "outcome") == Some("applied")
                }) / seconds,
            ),
        );
    }
    out
}

/// A value as the tables print it, by unit.
pub fn fmt_value(v: Option<&f64>, unit: &str) -> String {
    match v {
        None => "—".into(),
        Some(v) => match unit {
            "ms" | "rps" | "MB" => format!("{v:.0}"),
            "ms2" => format!("{v:.2}"),
            "%" => format!("{v:.1}%"),
            "x" => format!("{v:.2}×"),
            "cores" => format!("{v:.2}"),
            _ if v.fract() == 0.0 => format!("{v:.0}"),
            _ => format!("{v:.1}"),
        },
    }
}

pub fn markdown(title: &str, phases: &[(String, u64)], summaries: &[PhaseSummary]) -> String {
    let mut md = format!("### {title}\n\n| Metric |");
    for (name, secs) in phases {
        md.push_str(&format!(" {name} ({secs} s) |"));
    }
    md.push_str("\n|---|");
    for _ in phases {
        md.push_str("---:|");
    }
    md.push('\n');
    for (key, label, unit) in ROWS {
        if summaries.iter().all(|s| !s.contains_key(*key)) {
            continue;
        }
        md.push_str(&format!("| {label} |"));
        for s in summaries {
            md.push_str(&format!(" {} |", fmt_value(s.get(*key), unit)));
        }
        md.push('\n');
    }
    md
}

/// The 5xx the gateway answered in `phase`, by the error-table row that decided them
/// (`hop/origin` → count), from `lab_errors_total` at the gateway: where the errors came from.
pub fn origins(s: &Series, phase: usize) -> BTreeMap<String, f64> {
    s.increase_by(phase, "edge-gateway", "lab_errors_total", origin_of_5xx)
}

/// The same over the whole run (baseline scrape to the last one after the settle time).
pub fn origins_run(s: &Series) -> BTreeMap<String, f64> {
    s.increase_by_run("edge-gateway", "lab_errors_total", origin_of_5xx)
}

fn origin_of_5xx(labels: &str) -> Option<String> {
    let status = crate::series::label(labels, "status")?;
    if !status.starts_with('5') {
        return None;
    }
    Some(format!(
        "{}/{}",
        crate::series::label(labels, "hop")?,
        crate::series::label(labels, "origin")?
    ))
}

/// One check of the run's own bookkeeping: two independent counts that must agree exactly.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Check {
    pub name: String,
    pub expected: f64,
    pub got: f64,
    pub ok: bool,
}

/// The run checks itself: what the load generator sent was answered (by status) and seen by
/// the gateway, and every 5xx it received is named by exactly one origin at the gateway. A report
/// whose counts do not add up says so, loudly, rather than publishing numbers nobody can trust.
pub fn consistency(s: &Series, load: &lab_load::LoadReport) -> Vec<Check> {
    let answered: u64 = load
        .by_status
        .iter()
        .filter(|(k, _)| k.parse::<u16>().is_ok())
        .map(|(_, v)| v)
        .sum();
    let by_status: u64 = load.by_status.values().sum();
    let load_5xx: u64 = load
        .by_status
        .iter()
        .filter(|(k, _)| k.starts_with('5') && k.parse::<u16>().is_ok())
        .map(|(_, v)| v)
        .sum();
    let gateway_requests = s.increase_run("edge-gateway", "gateway_requests_total", |_| true);
    let gateway_5xx = s.increase_run("edge-gateway", "gateway_requests_total", |l| {
        crate::series::label(l, "status").is_some_and(|st| st.starts_with('5'))
    });
    let origins: f64 = origins_run(s).values().sum();
    let check = |name: &str, expected: f64, got: f64| Check {
        name: name.to_string(),
        expected,
        got,
        ok: (expected - got).abs() < 0.5,
    };
    vec![
        check(
            "load: sent = answered by status (incl. client timeouts)",
            load.sent as f64,
            by_status as f64,
        ),
        check(
            "load: every request got an HTTP answer (no client timeout or error)",
            load.sent as f64,
            answered as f64,
        ),
        check(
            "gateway requests = load's answers",
            answered as f64,
            gateway_requests,
        ),
        check("gateway 5xx = load's 5xx", load_5xx as f64, gateway_5xx),
        check(
            "load's 5xx = sum of origins at the gateway",
            load_5xx as f64,
            origins,
        ),
    ]
}

/// Markdown: the 5xx by origin, one column per phase, and the run's consistency checks.
pub fn origins_markdown(
    phases: &[(String, u64)],
    per_phase: &[BTreeMap<String, f64>],
    checks: &[Check],
) -> String {
    let mut keys: Vec<&String> = per_phase.iter().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut md = String::from("\n#### Where the 5xx came from (gateway, by error-table row)\n\n");
    if keys.is_empty() {
        md.push_str("No 5xx in any phase.\n");
    } else {
        md.push_str("| hop/origin |");
        for (name, _) in phases {
            md.push_str(&format!(" {name} |"));
        }
        md.push_str("\n|---|");
        for _ in phases {
            md.push_str("---:|");
        }
        md.push('\n');
        for k in keys {
            md.push_str(&format!("| {k} |"));
            for m in per_phase {
                md.push_str(&format!(
                    " {} |",
                    m.get(k).map_or("—".into(), |v| format!("{v:.0}"))
                ));
            }
            md.push('\n');
        }
    }
    md.push_str("\nConsistency of this run's counts (whole run, baseline to settle):\n\n");
    for c in checks {
        md.push_str(&format!(
            "- {} {}: expected {:.0}, got {:.0}\n",
            if c.ok { "OK  " } else { "FAIL" },
            c.name,
            c.expected,
            c.got
        ));
    }
    md
}
