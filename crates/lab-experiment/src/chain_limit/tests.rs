//! The summary's round trip and the report's shape, on a run made up of plausible numbers.

use std::collections::BTreeMap;

use super::cpu::{self, CpuSplit, ThreadGroup};
use super::perf::{ProfileTop, SymEntry};
use super::summary::*;
use super::*;

fn split(rows: &[(&str, f64)], busy: f64) -> CpuSplit {
    CpuSplit {
        seconds: 16.5,
        busy_cores: busy,
        by_process: rows.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        threads: BTreeMap::new(),
    }
}

fn step(name: &str, kind: StepKind, rate: f64, p99: f64, passed: bool) -> StepRow {
    StepRow {
        name: name.into(),
        kind,
        rate,
        seconds: 20,
        sent: (rate * 20.0) as u64,
        ok_rps: rate * 0.99,
        ok_pct: 99.5,
        five: 10,
        p50: 7.5,
        p99,
        by_status: BTreeMap::from([("200".into(), (rate * 19.9) as u64), ("503".into(), 10)]),
        client_overload: 0,
        origins: BTreeMap::from([("orchestrator/concurrency_limited".into(), 10.0)]),
        rates: ChainRates {
            spans_s: rate * 4.5,
            exact_s: rate * 0.94,
            cand_s: rate * 1.27,
            resolves_s: rate * 0.94,
            cand_ms: Some(0.89),
            spans_per_doc: Some(13.6),
            hit_pct: Some(65.1),
            es_spans_per_doc: Some(4.7),
        },
        xacts_s: Some(rate * 1.1),
        cpu: split(
            &[
                (cpu::BROKER, 0.51),
                (cpu::PG_ENTITY, 0.41),
                ("orchestrator-1", 0.14),
                ("edge-gateway-1", 0.17),
                (cpu::LOAD_GENERATOR, 0.16),
                ("other: sshd", 0.001),
            ],
            1.95,
        ),
        passed,
    }
}

fn meta() -> Meta {
    Meta {
        started: 1_796_156_638,
        out: ".lab/reports/chain-limit-1796156638".into(),
        cores: 2,
        cpu_model: "AMD EPYC".into(),
        pg_version: "15.20".into(),
        release_debug: "\"line-tables-only\"".into(),
        lab_db: "retry_storm_lab".into(),
        pgbench_db: "chain_limit_pgbench".into(),
        pgbench_scale: 10,
        pgbench_seconds: 15,
        step_seconds: 20,
        warmup_rate: 500.0,
        warmup_seconds: 60,
        profile_seconds: 15,
        idle_settle_seconds: 30,
        idle_sample_seconds: 60,
        p99_ms: 250.0,
        ok_pct: 99.0,
        hot_params: 2_000,
        hot_per_txn: 8,
        kafka: "127.0.0.1:9092".into(),
        perf_hz: 499,
        fleet: Meta::FLEET_BEFORE_ISSUE_26.into(),
        hot_plan: Some(HotPlanLine {
            shape: "Limit → Index Scan  [index scan: healthy]  0.02 ms".into(),
            state: vec!["entities: 1000339 live".into()],
        }),
    }
}

fn profile() -> Profile {
    Profile {
        sampler: "perf record (cpu-clock, 499 Hz, --call-graph dwarf)".into(),
        command: "perf record -F 499 --call-graph dwarf -p PID -- sleep 15".into(),
        dwarf_probe_samples: 155,
        symbols: "orchestrator: not stripped".into(),
        targets: vec![
            ProfileTarget {
                name: "orchestrator-1".into(),
                pids: "28286".into(),
                top: Some(ProfileTop {
                    samples: 879,
                    sym: vec![SymEntry {
                        pct: 5.35,
                        dso: "[kernel.kallsyms]".into(),
                        sym: "finish_task_switch.isra.0".into(),
                    }],
                    dso: vec![("orchestrator".into(), 68.4)],
                    families: vec![("kernel (syscalls, TCP loopback, scheduler)".into(), 19.2)],
                    stack_samples: 879,
                    inclusive: vec![(
                        "tracing subscriber + OpenTelemetry (span bookkeeping, export)".into(),
                        12.0,
                    )],
                    own: vec![("orchestrator::plan::plan".into(), 13.0)],
                }),
                why: None,
            },
            ProfileTarget {
                name: "tansu".into(),
                pids: "5014".into(),
                top: None,
                why: Some("no perf data".into()),
            },
        ],
    }
}

pub(super) fn sample() -> Summary {
    let mut profile_step = step("profile", StepKind::Profile, 1_000.0, 171.0, false);
    profile_step.cpu.threads.insert(
        "orchestrator-1".into(),
        BTreeMap::from([(
            "tokio-rt-worker".into(),
            ThreadGroup {
                threads: 2,
                cores: 0.12,
            },
        )]),
    );
    Summary {
        meta: meta(),
        pgbench: vec![
            PgbenchRow {
                script: pgbench::SELECT_ONLY.into(),
                clients: 2,
                tps: 63_170.0,
                lookups_per_txn: 1,
                lookups_s: 63_170.0,
                latency_ms: 0.032,
                stmt_ms: None,
                pick_ms: None,
                cpu: Some(split(
                    &[
                        ("postgres backends of the pgbench database", 1.21),
                        (cpu::PGBENCH_CLIENT, 0.74),
                    ],
                    2.0,
                )),
            },
            PgbenchRow {
                script: pgbench::HOT.into(),
                clients: 2,
                tps: 1_904.0,
                lookups_per_txn: 8,
                lookups_s: 15_232.0,
                latency_ms: 1.05,
                stmt_ms: Some(0.121),
                pick_ms: Some(0.065),
                cpu: None,
            },
        ],
        lab_processes: BTreeMap::from([
            ("orchestrator-1".into(), 28286),
            (cpu::BROKER.into(), 5014),
        ]),
        idle: Some(split(
            &[
                (cpu::BROKER, 0.110),
                ("orchestrator-1", 0.011),
                (cpu::SUPERVISOR, 0.004),
            ],
            0.16,
        )),
        steps: vec![
            step("warmup", StepKind::Warmup, 500.0, 53.0, true),
            step("rate-00600", StepKind::Rate, 600.0, 65.0, true),
            step("rate-01000", StepKind::Rate, 1_000.0, 72.0, true),
            step("rate-01600", StepKind::Rate, 1_600.0, 1_198.0, false),
            profile_step,
        ],
        max_sustainable_rps: Some(1_000.0),
        stopped_early: Some("rate-1600".into()),
        profile: Some(profile()),
    }
}

#[test]
fn summary_round_trips_through_its_json_file() {
    let dir = std::env::temp_dir().join(format!("chain-limit-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = sample();
    s.write(&dir).unwrap();
    let back = Summary::read(&dir).unwrap();
    assert_eq!(back, s);
    let md = report_only(&dir).unwrap();
    assert_eq!(md, report::markdown(&s), "a redraw gives the same report");
    assert!(dir.join(REPORT).is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn summary_read_of_a_directory_without_one_names_the_command() {
    let err = Summary::read(Path::new("/nonexistent-run"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("labctl chain-limit"), "{err}");
}

#[test]
fn report_keeps_every_table_of_the_published_report_and_adds_the_idle_lab() {
    let md = report::markdown(&sample());
    for heading in [
        "## 1. What PostgreSQL serves alone (pgbench, lab down)",
        "## 2. What the whole chain sustains (open loop through the gateway)",
        "## 3. The ratio",
        "## 4. Where the CPU goes at 1,000 rps",
        "## 5. The idle lab",
        "## 6. CPU profiles at that rate",
        "## 7. What is cheap to fix on the hot path",
        "| script | clients | TPS |",
        "| step | offered rps | answered 200/s |",
        "| chain at its maximum | per second |",
        "| process | cores at the max rate | share of the machine | cores, idle lab |",
        "| process | pid | cores, idle | threads (cores) |",
        "| orchestrator-1 | 28286 | 0.011 |",
        "| self % | object | symbol |",
        "### orchestrator-1 (pid 28286)",
        "Threads (cores, /proc during the profile): tokio-rt-worker ×2 0.12",
        "**Maximum sustainable rate: 1,000 rps offered**",
        "| 29.5 % of 15,232 |",
        "The ladder stopped after `rate-1600`",
    ] {
        assert!(md.contains(heading), "missing {heading:?} in\n{md}");
    }
    assert!(
        md.contains("0.51 (26 %)"),
        "the broker's share at each step\n{md}"
    );
    assert!(md.contains("| **the lab in all** | | **0.125** |"), "{md}");
    assert!(md.contains("(no perf samples: `no perf data`)"), "{md}");
}

#[test]
fn report_without_a_passing_step_says_so_and_uses_the_lowest() {
    let mut s = sample();
    for st in &mut s.steps {
        st.passed = false;
    }
    let md = report::markdown(&s);
    assert!(md.contains("**No step stayed within the bound**"), "{md}");
    assert!(md.contains("## 4. Where the CPU goes at 600 rps"), "{md}");
    assert!(
        !md.contains("at 600 rps and"),
        "no comparison of a rung with itself\n{md}"
    );
    assert!(
        md.contains("in the -S run, so both sides of the ratio pay for their client."),
        "{md}"
    );
}

#[test]
fn release_debug_reads_the_release_profile_only() {
    let toml = "[profile.dev]\ndebug = 2\n\n[profile.release]\nlto = false\ndebug = \"line-tables-only\"\n";
    assert_eq!(release_debug(toml), "\"line-tables-only\"");
    assert_eq!(release_debug("[profile.dev]\ndebug = 2\n"), "false (unset)");
}

#[test]
fn utc_minute_is_the_civil_date() {
    assert_eq!(utc_minute(0), "1970-01-01 00:00 UTC");
    assert_eq!(utc_minute(951_782_400), "2000-02-29 00:00 UTC");
    assert_eq!(utc_minute(1_796_156_638), "2026-12-01 20:23 UTC");
}

#[test]
fn report_never_prints_negative_zero_and_leaves_other_databases_out_of_the_lab() {
    let mut s = sample();
    s.pgbench[0].cpu = Some(split(&[(cpu::PGBENCH_CLIENT, 0.7)], 1.0));
    s.idle = Some(split(
        &[
            (cpu::BROKER, 0.02),
            (cpu::PG_OTHER_DBS, 0.4),
            (cpu::PG_OTHER, 0.01),
        ],
        0.5,
    ));
    let md = report::markdown(&s);
    assert!(!md.contains("-0.00"), "{md}");
    assert!(md.contains("| 0.00 / 0.70 / 0.00 / 0.30 |"), "{md}");
    assert!(md.contains("| **the lab in all** | | **0.030** |"), "{md}");
}

#[test]
fn idle_bounds_are_judged_only_on_what_was_sampled() {
    let s = sample();
    let idle = s.idle.as_ref().unwrap();
    // Measured and over: the broker at 0.110, the lab at 0.125.
    let (lab, broker) = report::idle_bounds(idle, &s.lab_processes);
    assert_eq!(lab, "0.125 cores, **over**");
    assert_eq!(broker, "0.110 cores, **over**");
    let md = report::markdown(&s);
    assert!(md.contains("The lab in all: 0.125 cores, **over** (issue 29: ≤ 0.05 cores); the broker: 0.110 cores, **over** (≤ 0.01), 88 % of the lab's idle CPU."), "{md}");

    // Within, once the numbers are small.
    let quiet = split(
        &[
            (cpu::BROKER, 0.005),
            ("orchestrator-1", 0.002),
            (cpu::SUPERVISOR, 0.001),
        ],
        0.01,
    );
    let (lab, broker) = report::idle_bounds(&quiet, &s.lab_processes);
    assert_eq!(
        (lab.as_str(), broker.as_str()),
        ("0.008 cores, within", "0.005 cores, within")
    );

    // The broker not found reads 0 cores nowhere: not measured, and "—" in the steps' column.
    let mut no_broker = sample();
    for c in no_broker
        .idle
        .iter_mut()
        .chain(no_broker.steps.iter_mut().map(|r| &mut r.cpu))
    {
        c.by_process.remove(cpu::BROKER);
    }
    let (_, broker) =
        report::idle_bounds(no_broker.idle.as_ref().unwrap(), &no_broker.lab_processes);
    assert_eq!(broker, "not measured (no broker process in the sample)");
    let md = report::markdown(&no_broker);
    assert!(
        !md.contains("within the 0.01") && md.contains("not measured (no broker"),
        "{md}"
    );
    assert!(
        !md.contains("0.00 (0 %)"),
        "a missing broker drawn as zero\n{md}"
    );

    // A lab process missing from the sample: the total would be too small, so not judged.
    let mut gone = sample();
    gone.lab_processes.insert("orchestrator-2".into(), 28290);
    let (lab, _) = report::idle_bounds(gone.idle.as_ref().unwrap(), &gone.lab_processes);
    assert_eq!(lab, "not measured (orchestrator-2 not in the sample)");
}

#[test]
fn the_admission_advice_reads_the_callees_refusals_as_well_as_the_callers() {
    let refusals = |origin: &str, n: f64| {
        let mut s = sample();
        for st in s.steps.iter_mut() {
            st.origins = BTreeMap::from([(origin.to_string(), n)]);
        }
        report::markdown(&s)
    };
    // 200 of 20,000 requests at 1,000 rps: 1 %, over the advice's 0.5 %.
    for origin in [
        "entity-service/db_pool_exhausted",
        "orchestrator/concurrency_limited",
    ] {
        let md = refusals(origin, 200.0);
        assert!(
            md.contains("turns that queueing into fast 503s"),
            "{origin}"
        );
        assert!(md.contains(origin), "{origin} named");
        assert!(md.contains("the fixed client's admission is only what fails first"));
    }
    // Below the threshold, or another origin: no such advice.
    assert!(!refusals("entity-service/db_pool_exhausted", 10.0).contains("fast 503s"));
    assert!(!refusals("edge-gateway/upstream_timeout", 200.0).contains("fast 503s"));
}
