//! Fidelity in CI with the real trigger (issue 14): the whole path in one process over a seeded
//! `--small` database, the plan flipped by the real backfill and invalidation, a load chosen by a
//! closed-loop probe of the stale capacity (so a slower or faster machine gets a load of the same
//! meaning), and then the two clients under it. Counts and ratios only, never times:
//! - legacy: far more requests fail, and its work goes on for callers already gone;
//! - resilient: goodput near the stale database's capacity, no abandoned work.
//!
//! The load is 1.5× the stale capacity — past it, where the two clients part ways most clearly.
//! (The replay itself runs at 1.02×: just past the edge, where the postmortem was when the plan
//! flipped.)

use std::time::Duration;

use lab_e2e::{Lab, LabOptions};
use testkit::TestDb;

use lab_load::{DocSource, Docs, LoadArgs, LoadReport, RateControl, TenantMix};
use lab_trigger::backfill;

/// The `--small` data set: the design note measured 11.5× (skewed traffic) on it.
const ENTITIES: u64 = 100_000;
const TENANTS: u64 = 200;
/// How far past the stale capacity the comparison runs.
const OVERLOAD: f64 = 1.5;
/// Seconds of each open-loop run.
const RUN_SECONDS: u64 = 10;
/// The first second of the steady state the failure shares are judged on. A legacy request can
/// only fail once the gateway's 3 s budget has run out, while the fixed client sheds from the
/// first second: counted over the whole run, the first 3 s flatter the fixed client's share by
/// up to a third of the run. From second 4 on, both clients are in the state they stay in.
const STEADY_FROM: u64 = 4;

/// What entity-service has done so far: requests and handler seconds, all and those that ended
/// after the end user's request had already ended at the gateway.
#[derive(Clone, Default)]
struct Work {
    requests: f64,
    abandoned_requests: f64,
    seconds: f64,
    abandoned_seconds: f64,
    /// Orchestrator handlers that ran on after the gateway had hung up (legacy only: Go's
    /// lifetime; a fixed handler is cancelled with its caller).
    orphaned_handlers: f64,
    /// The gateway's error answers by the row that decided them (`hop/origin`).
    origins: std::collections::BTreeMap<String, f64>,
}

impl Work {
    async fn read(lab: &Lab) -> Self {
        let es = &lab.entity_services[0].admin;
        Self {
            requests: Lab::metric(es, "entity_service_requests_total", "").await,
            abandoned_requests: Lab::metric(es, "entity_service_abandoned_requests_total", "")
                .await,
            seconds: Lab::metric(es, "entity_service_busy_seconds_total", "").await,
            abandoned_seconds: Lab::metric(es, "entity_service_abandoned_seconds_total", "").await,
            orphaned_handlers: Lab::metric(
                &lab.orchestrators[0].admin,
                "orchestrator_handlers_orphaned_total",
                "",
            )
            .await,
            origins: origins(&lab.gateway.admin).await,
        }
    }
}

/// `lab_errors_total` at the gateway summed by `hop/origin`.
async fn origins(admin: &str) -> std::collections::BTreeMap<String, f64> {
    let resp = reqwest::get(format!("{admin}/metrics")).await.unwrap();
    assert!(
        resp.status().is_success(),
        "{admin}/metrics: {}",
        resp.status()
    );
    let text = resp.text().await.unwrap();
    let mut by = std::collections::BTreeMap::new();
    for s in lab_core::exposition::samples(&text).filter(|s| s.name == "lab_errors_total") {
        let label = |k| lab_core::exposition::label(s.labels, k).unwrap_or_default();
        *by.entry(format!("{}/{}", label("hop"), label("origin")))
            .or_insert(0.0) += s.value;
    }
    by
}

/// Wait (bounded) until entity-service has no request in flight: the legacy orphans are done.
async fn drained(lab: &Lab) {
    let es = &lab.entity_services[0].admin;
    for _ in 0..120 {
        if Lab::metric(es, "entity_service_requests_in_flight", "").await == 0.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

struct Measured {
    report: LoadReport,
    /// Share of entity-service's requests that finished after their end user's request had
    /// ended at the gateway.
    abandoned_share: f64,
    /// The same in handler seconds (the pool wait included).
    abandoned_seconds_share: f64,
    orphaned_handlers: f64,
    /// The gateway's error answers during the run, by `hop/origin`.
    origins: std::collections::BTreeMap<String, f64>,
}

impl Measured {
    fn fraction(&self, pred: impl Fn(&str) -> bool) -> f64 {
        let n: u64 = self
            .report
            .by_status
            .iter()
            .filter(|(k, _)| pred(k))
            .map(|(_, v)| v)
            .sum();
        n as f64 / self.report.sent.max(1) as f64
    }
    /// Share of the requests sent from [`STEADY_FROM`] on that did not get a 200 (5xx, client
    /// timeouts and overload alike).
    fn steady_failed(&self) -> f64 {
        let (sent, ok) = self
            .report
            .per_second
            .iter()
            .filter(|s| s.second >= STEADY_FROM)
            .fold((0u64, 0u64), |(a, b), s| (a + s.sent, b + s.ok));
        sent.saturating_sub(ok) as f64 / sent.max(1) as f64
    }
    /// `second: sent/ok/good` for every second, for the failure message.
    fn series(&self) -> String {
        self.report
            .per_second
            .iter()
            .map(|s| format!("{}:{}/{}/{}", s.second, s.sent, s.ok, s.good))
            .collect::<Vec<_>>()
            .join(" ")
    }
    /// Goodput per second from [`STEADY_FROM`] on, where the failure share is judged too: the
    /// legacy storm takes a few seconds to build (a CI run on 6162407 had legacy at full goodput
    /// for its first 5 s, and a whole-run mean of 261/s against resilient's 276/s while the
    /// steady state read 155 vs 301).
    fn goodput(&self) -> f64 {
        let good: u64 = self
            .report
            .per_second
            .iter()
            .filter(|s| s.second >= STEADY_FROM)
            .map(|s| s.good)
            .sum();
        good as f64 / RUN_SECONDS.saturating_sub(STEADY_FROM).max(1) as f64
    }
}

async fn open_loop(lab: &Lab, data: &std::path::Path, rate: f64, seed: u64) -> Measured {
    let before = Work::read(lab).await;
    let args = LoadArgs::stream(&lab.gateway.url, rate, RUN_SECONDS, TenantMix::Size, seed);
    let keys = lab_seed::read_api_keys(data).unwrap();
    let source = DocSource::open(Docs::Stream, data, TenantMix::Size).unwrap();
    let report = lab_load::run_with(&args, RateControl::new(rate).unwrap(), keys, source)
        .await
        .unwrap();
    drained(lab).await;
    let after = Work::read(lab).await;
    Measured {
        report,
        abandoned_share: (after.abandoned_requests - before.abandoned_requests)
            / (after.requests - before.requests).max(1.0),
        abandoned_seconds_share: (after.abandoned_seconds - before.abandoned_seconds)
            / (after.seconds - before.seconds).max(1e-9),
        orphaned_handlers: after.orphaned_handlers - before.orphaned_handlers,
        origins: after
            .origins
            .iter()
            .map(|(k, v)| (k.clone(), v - before.origins.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, v)| *v > 0.0)
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_trigger_storms_the_legacy_lab_and_the_fixed_one_absorbs_it() {
    let _heavy = crate::HEAVY_TEST.lock().await;
    let db = TestDb::new().await;
    let data = std::env::temp_dir().join(format!("lab_replay_{:016x}", rand::random::<u64>()));
    lab_seed::run(
        &db.url,
        &lab_seed::SeedArgs {
            entities: ENTITIES,
            tenants: TENANTS,
            documents: 50,
            seed: 20_260_611,
            data_dir: data.clone(),
            force: false,
            progress: false,
        },
    )
    .await
    .expect("seeding");
    let client = lab_db::inspect::connect(&db.url).await.unwrap();
    let lab = Lab::start(db, LabOptions::default()).await;
    // Readiness shallow in both modes: this compares the clients, not the deep-probe cascade.
    lab.set_flag("readiness.depth", "shallow").await;

    // The real trigger: 03:00 backfill, 09:41 invalidation.
    backfill::populate(&client, backfill::DEFAULT_BATCH_IDS, false)
        .await
        .unwrap();
    backfill::invalidate(&client).await.unwrap();

    // Calibrate on this machine: what the stale database serves at most (closed loop, warm
    // caches from a first probe), with the LEGACY client: below its timeouts it neither storms
    // nor sheds, so the probe measures the database. The fixed client's concurrency limit capped
    // the probe below what the database serves: CI once measured 166 rps that way, and at 1.5x
    // that the legacy client served 252/s with 0% failed (no overload at all) while the fixed
    // one shed 17% (issue 27's "harm", not this test's).
    lab.set_flag("client.mode", "legacy").await;
    let keys = lab_seed::read_api_keys(&data).unwrap();
    let probe = |clients: usize, seconds: u64, seed: u64| {
        let args = LoadArgs::stream(&lab.gateway.url, 1.0, seconds, TenantMix::Size, seed);
        let source = DocSource::open(Docs::Stream, &data, TenantMix::Size).unwrap();
        let keys = keys.clone();
        async move { lab_load::run_closed(&args, clients, keys, source).await }
    };
    probe(8, 4, 10).await.unwrap();
    // A closed loop serves at most its clients ÷ the latency: 8 clients measured what 8 requests
    // in flight get through, not what the database can serve. CI on 2026-12-06 measured 169.6 rps
    // with 8 clients, and at 1.5x that (254/s) both clients answered everything (legacy 0%
    // failed). So the probe widens: 8, 16 and 32 clients, the best of them (32 in flight is ~0.13 s
    // of latency at 250 rps, far inside every timeout; a probe slowed by other tests sharing the 2
    // cores under-measures, never over-measures, so the best is the truest).
    let mut capacity = 0.0f64;
    for (clients, seed) in [(8, 11), (16, 12), (32, 13)] {
        let stale = probe(clients, 5, seed).await.unwrap();
        let c = stale.per_second.iter().map(|s| s.good).sum::<u64>() as f64 / 5.0;
        eprintln!("stale capacity probe: {clients} clients, {c:.1} rps");
        capacity = capacity.max(c);
    }
    assert!(capacity > 1.0, "the probe measured a capacity: {capacity}");
    let rate = OVERLOAD * capacity;
    eprintln!("stale capacity {capacity:.1} rps; comparing at {rate:.1} rps");

    lab.set_flag("client.mode", "legacy").await;
    let legacy = open_loop(&lab, &data, rate, 20).await;
    lab.set_flag("client.mode", "resilient").await;
    let fixed = open_loop(&lab, &data, rate, 30).await;
    let _ = std::fs::remove_dir_all(&data);

    let fail = |m: &Measured| m.fraction(|s| s.starts_with('5') || s.starts_with("client"));
    eprintln!(
        "legacy: {:.0}% failed ({:.0}% from second {STEADY_FROM}), goodput {:.1}/s from second \
         {STEADY_FROM}, entity-service requests after the user had gone {:.0}% ({:.0}% of its \
         handler seconds), {} orchestrator handlers orphaned | resilient: {:.0}% failed ({:.0}% \
         from second {STEADY_FROM}), goodput {:.1}/s, after the user had gone {:.1}% ({:.1}%)",
        100.0 * fail(&legacy),
        100.0 * legacy.steady_failed(),
        legacy.goodput(),
        100.0 * legacy.abandoned_share,
        100.0 * legacy.abandoned_seconds_share,
        legacy.orphaned_handlers,
        100.0 * fail(&fixed),
        100.0 * fixed.steady_failed(),
        fixed.goodput(),
        100.0 * fixed.abandoned_share,
        100.0 * fixed.abandoned_seconds_share,
    );
    eprintln!(
        "by status: legacy {:?} | resilient {:?}\nby origin: legacy {:?} | resilient {:?}",
        legacy.report.by_status, fixed.report.by_status, legacy.origins, fixed.origins
    );
    // Every claim is checked, and all that fail are reported together with the per-second series
    // (second:sent/ok/good), so one CI run says which part of the picture did not hold.
    let checks = [
        // The storm still happens in legacy mode (the lab must not quietly heal)... At 1.5x the
        // capacity no server can answer a third of the load; the legacy client loses most of it
        // once its callers' budgets run out: past that third by 10 points.
        // Not compared with the fix by 200s: a 200 counts here however late it came, and the
        // legacy client's come late. CI on a6fec30 (debug build, stale capacity 408.6 rps) read
        // 0.77 for legacy against the fix's 0.81, with legacy's 862 steady 200s holding 100
        // answered within the user's 3 s (the fix: 706 and about as many in time). What tells
        // the bug from the fix is the goodput in time and the orphaned work below (a legacy run
        // on the fixed client fails both). That the fix sheds 53-81% at 1.5x, not the third no
        // server can answer, is issue 27's harm, reported there, not this test's claim.
        (
            legacy.steady_failed() >= (1.0 - 1.0 / OVERLOAD) + 0.10,
            format!(
                "legacy fails past the third no server can answer in the steady state: {:.2} \
                 (the third: {:.2}; the fix {:.2})",
                legacy.steady_failed(),
                1.0 - 1.0 / OVERLOAD,
                fixed.steady_failed(),
            ),
        ),
        (
            legacy.orphaned_handlers > 0.0
                && legacy.abandoned_share > fixed.abandoned_share
                && legacy.abandoned_share > 0.0,
            format!(
                "legacy leaves work for callers already gone: {} handlers orphaned, {:.3} of \
                 entity-service's requests after the user had gone (resilient {:.3})",
                legacy.orphaned_handlers, legacy.abandoned_share, fixed.abandoned_share
            ),
        ),
        // ...and the fix absorbs it: no work for nobody, and more answers in time. Judged in
        // handler seconds, not requests: a fixed handler cancelled at the user's deadline ends a
        // timer tick and a poll after it, so it counts as a request "finished after the user had
        // gone" with microseconds of work in it. A CI run at 749 rps (both cores saturated) read
        // 0.024 of the resilient requests that way; the seconds are what an orphan wastes.
        (
            fixed.abandoned_seconds_share <= 0.02,
            format!(
                "resilient abandons nothing: {:.3} of entity-service's handler seconds after the \
                 user had gone ({:.3} of its requests ended after the deadline)",
                fixed.abandoned_seconds_share, fixed.abandoned_share
            ),
        ),
        (
            fixed.goodput() >= 1.5 * legacy.goodput(),
            format!(
                "resilient goodput {:.1} vs legacy {:.1}",
                fixed.goodput(),
                legacy.goodput()
            ),
        ),
    ];
    let failed: Vec<&String> = checks
        .iter()
        .filter(|(ok, _)| !ok)
        .map(|(_, m)| m)
        .collect();
    assert!(
        failed.is_empty(),
        "at {rate:.1} rps (1.5 x a stale capacity of {capacity:.1}): {failed:#?}\nlegacy    {}\nresilient {}",
        legacy.series(),
        fixed.series()
    );
}
