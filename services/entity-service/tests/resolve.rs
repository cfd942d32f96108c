//! entity-service against a real PostgreSQL: exact matches, the candidate lookup, tenant
//! isolation, and JSON errors for bad input.

use entity_service::{Application, Settings};
use lab_api::wire::{MatchMethod, ResolveRequest, ResolveResponse, SpanQuery};
use testkit::{fixtures, TestDb};

/// The service's public (API) and admin (`/metrics`) base URLs.
async fn spawn(db: &TestDb) -> (String, String) {
    spawn_on(&db.url).await
}

/// The same, on the database at `url`.
async fn spawn_on(url: &str) -> (String, String) {
    spawn_with_pool(url, 4).await
}

/// The same, with a pool of `pool_size` connections.
async fn spawn_with_pool(url: &str, pool_size: usize) -> (String, String) {
    let mut s = Settings::defaults().unwrap();
    s.http.port = 0;
    s.admin.port = 0;
    s.database.url = url.to_string();
    // The test database's owner (tests/lab-e2e/tests/privileges.rs runs entity-service as its role).
    s.database.allow_superuser = true;
    s.database.pool_size = pool_size;
    // Its own flag namespace: a game day running on this machine must not inject faults here.
    s.flags.namespace = format!("lab-test-{}", std::process::id());
    s.flags.redis_url = testkit::redis_url().await;
    let app = Application::build(s).await.unwrap();
    let (port, admin) = (app.port(), app.admin_port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    (
        format!("http://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{admin}"),
    )
}

fn span(normalized: &str, kind: &str) -> SpanQuery {
    SpanQuery {
        normalized: normalized.into(),
        kind: kind.into(),
    }
}

/// The one-span request most tests send: tenant 1's "vega labs".
fn vega_labs() -> ResolveRequest {
    ResolveRequest {
        doc_id: "d".into(),
        tenant: 1,
        locale: None,
        spans: vec![span("vega labs", "organization")],
    }
}

/// One metric's value (summed over the series whose labels contain `labels`) on `admin`.
async fn scrape(admin: &str, name: &str, labels: &str) -> f64 {
    let text = reqwest::get(format!("{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    lab_e2e_free_metric(&text, name, labels)
}

/// `req` with `X-Request-Budget-Ms: ms`, as the fixed client sends it. The test's own 10 s
/// timeout turns a request that would wait for a lock forever into a failure, not a hang.
async fn resolve_budgeted(base: &str, req: &ResolveRequest, ms: u64) -> reqwest::Response {
    testkit::http()
        .post(format!("{base}/v1/resolve"))
        .header("x-request-budget-ms", ms.to_string())
        .timeout(std::time::Duration::from_secs(10))
        .json(req)
        .send()
        .await
        .unwrap()
}

async fn seed(db: &TestDb) {
    fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::tenant_with_key(&db.url, 2).await;
    fixtures::entities(
        &db.url,
        &[
            (10, 1, "organization", "Müller Logistik GmbH", 900),
            (11, 1, "organization", "Vega Labs", 800),
            (12, 1, "person", "Anna Schmidt", 500),
            (20, 2, "organization", "Vega Labs", 100),
        ],
    )
    .await;
}

async fn resolve(base: &str, req: &ResolveRequest) -> reqwest::Response {
    testkit::http()
        .post(format!("{base}/v1/resolve"))
        .json(req)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn resolve_matches_exact_then_candidate_and_isolates_tenants() {
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, _) = spawn(&db).await;

    let req = ResolveRequest {
        doc_id: "d1".into(),
        tenant: 1,
        locale: Some("de".into()),
        spans: vec![
            span("muller logistik gmbh", "organization"),
            span("muller logistik ag", "organization"),
            span("vega labs", "organization"),
            span("nobody known", "person"),
        ],
    };
    let resp = resolve(&base, &req).await;
    assert_eq!(resp.status(), 200);
    let body: ResolveResponse = resp.json().await.unwrap();
    assert_eq!(body.results.len(), 4);
    let r0 = body.results[0].as_ref().expect("exact match");
    assert_eq!(
        (r0.entity.id, r0.method, r0.confidence),
        (10, MatchMethod::Exact, 1.0)
    );
    let r1 = body.results[1].as_ref().expect("candidate match");
    assert_eq!((r1.entity.id, r1.method), (10, MatchMethod::Candidate));
    assert_eq!(r1.confidence, 0.5);
    assert_eq!(
        body.results[2].as_ref().unwrap().entity.id,
        11,
        "tenant 1's Vega Labs"
    );
    assert!(body.results[3].is_none());

    // Tenant 2 never sees tenant 1's entities.
    let req2 = ResolveRequest {
        tenant: 2,
        spans: vec![
            span("anna schmidt", "person"),
            span("vega labs", "organization"),
        ],
        ..req.clone()
    };
    let body: ResolveResponse = resolve(&base, &req2).await.json().await.unwrap();
    assert!(body.results[0].is_none());
    assert_eq!(body.results[1].as_ref().unwrap().entity.id, 20);
}

#[tokio::test]
async fn resolve_rejects_bad_input_with_json_errors() {
    let db = TestDb::new().await;
    let (base, admin) = spawn(&db).await;
    let client = testkit::http();

    let bad_kind = ResolveRequest {
        doc_id: "d".into(),
        tenant: 1,
        locale: None,
        spans: vec![span("x", "planet")],
    };
    let resp = resolve(&base, &bad_kind).await;
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request");
    assert!(body["error"]["message"].as_str().unwrap().contains("kind"));

    let resp = client
        .post(format!("{base}/v1/resolve"))
        .header("content-type", "application/json")
        .body(r#"{"doc_id":"d","tenant":1,"spans":[],"extra":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400, "unknown fields are rejected");

    let resp = client.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");

    let metrics = client
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("entity_service_requests_total{status=\"400\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("entity_db_pool_max 4"));
}

/// entity-service's own queries (its pool sets application_name) still running in PostgreSQL.
/// A session holding `entities` locked (ACCESS EXCLUSIVE, in an open transaction): every lookup
/// blocks inside PostgreSQL with its pooled connection until `ROLLBACK` on it.
async fn lock_entities(db_url: &str) -> sqlx::PgConnection {
    use sqlx::{Connection, Executor};
    let mut locker = sqlx::PgConnection::connect(db_url).await.unwrap();
    locker.execute("BEGIN").await.unwrap();
    // Bounded: a transaction left open on entity-service's side (it holds a share lock on
    // `entities`) fails the test here, instead of hanging it.
    locker
        .execute("SET LOCAL lock_timeout = '5s'")
        .await
        .unwrap();
    locker
        .execute("LOCK TABLE entities IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("entities locked within 5 s: is a transaction left open on it?");
    locker
}

async fn running_lookups(db_url: &str) -> i64 {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(db_url).await.unwrap();
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND state = 'active' AND query LIKE '%FROM entities%'
           AND application_name LIKE 'entity-service/%'",
    )
    .fetch_one(&mut c)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_budgeted_request_stops_its_query_in_postgres_and_an_unbudgeted_one_does_not() {
    use sqlx::Executor;
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn(&db).await;
    // Hold the table so every lookup blocks inside PostgreSQL — a slow query, for real.
    let mut locker = lock_entities(&db.url).await;
    let req = vega_labs();

    // The fixed client's request: 300 ms of budget. statement_timeout ends the query there.
    let resp = resolve_budgeted(&base, &req, 300).await;
    assert_eq!(resp.status(), 504);
    assert_eq!(
        resp.headers()["x-lab-error-origin"],
        "entity-service/query_cancelled"
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "query_cancelled");
    assert_eq!(
        running_lookups(&db.url).await,
        0,
        "nothing left running in PostgreSQL"
    );

    // The legacy client's request: no budget; its caller gives up after 300 ms, but dropping
    // the query future does not stop PostgreSQL — the lookup is still there, waiting.
    let gave_up = testkit::http()
        .post(format!("{base}/v1/resolve"))
        .timeout(std::time::Duration::from_millis(300))
        .json(&req)
        .send()
        .await;
    assert!(gave_up.is_err(), "the caller timed out");
    let mut orphaned = 0;
    for _ in 0..40 {
        orphaned = running_lookups(&db.url).await;
        if orphaned > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(
        orphaned, 1,
        "the abandoned lookup is still running in PostgreSQL"
    );
    // The pool has taken its connection back — its gauge says nothing is in use — while
    // PostgreSQL's own view, exported per replica, still shows the backend working.
    let (mut active, mut in_use) = (0.0, -1.0);
    for _ in 0..60 {
        let text = reqwest::get(format!("{admin}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        active = lab_e2e_free_metric(&text, "entity_db_backends", "state=\"active\"");
        in_use = lab_e2e_free_metric(&text, "entity_db_pool_connections", "state=\"in_use\"");
        if active >= 1.0 && in_use == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(in_use, 0.0, "the pool believes the connection is free");
    assert!(
        active >= 1.0,
        "pg_stat_activity still sees the abandoned query: entity_db_backends{{active}} = {active}"
    );
    locker.execute("ROLLBACK").await.unwrap();
}

/// LAB-FIX(round-trips): a budgeted request leaves its `statement_timeout` on its pooled
/// connection (crate::session), so the next request without a budget must take it off: on a pool
/// of one, a legacy request runs on that same connection and must wait on a locked table past
/// the budget's 300 ms, not be cancelled there by the left-over setting (fails with the
/// `SET ... TO DEFAULT` not sent).
#[tokio::test]
async fn a_budgeted_requests_timeout_does_not_outlive_it_on_its_pooled_connection() {
    use sqlx::Executor;
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, _admin) = spawn_with_pool(&db.url, 1).await;
    let req = vega_labs();
    let resp = resolve_budgeted(&base, &req, 300).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);

    let mut locker = lock_entities(&db.url).await;
    let legacy = {
        let (base, req) = (base.clone(), req.clone());
        tokio::spawn(async move { resolve(&base, &req).await.status() })
    };
    still_waiting_past_a_left_over_timeout(&db.url, &legacy, "the legacy lookup").await;
    assert_eq!(
        running_lookups(&db.url).await,
        1,
        "the legacy lookup still waits on the lock, uncancelled"
    );
    locker.execute("ROLLBACK").await.unwrap();
    assert_eq!(legacy.await.unwrap(), 200);

    // The same connection, its statements now prepared: the timeout still goes out ahead of the
    // lookup it shares a round trip with, so a budgeted lookup on a locked table is cancelled.
    let mut locker = lock_entities(&db.url).await;
    let resp = resolve_budgeted(&base, &req, 300).await;
    assert_eq!(resp.status(), 504);
    assert_eq!(
        resp.headers()["x-lab-error-origin"],
        "entity-service/query_cancelled"
    );
    locker.execute("ROLLBACK").await.unwrap();
}

/// LAB-FIX(round-trips): a connection remembers the `statement_timeout` it was last given, and
/// a budgeted request sends its own only when it needs another value. On a pool of one: a 10 s
/// budget, then a 300 ms one on a locked table — cancelled by PostgreSQL at 300 ms, not at the
/// 10 s the connection had (fails with a `SET` skipped whenever one is already in place); and five
/// requests with the same budget send one `SET` (two at most, for a stall), not five (fails with a
/// `SET` on every request).
#[tokio::test]
async fn a_connection_is_given_a_new_statement_timeout_only_when_a_budget_needs_another() {
    use sqlx::Executor;
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn_with_pool(&db.url, 1).await;
    let req = vega_labs();
    let sets = || {
        scrape(
            &admin,
            "entity_service_session_timeout_sets_total",
            "budget",
        )
    };
    assert_eq!(resolve_budgeted(&base, &req, 10_000).await.status(), 200);
    assert_eq!(sets().await, 1.0, "a new connection is given its budget");
    // The same budget four times more: nothing sent, unless a stall of 50 ms between a request's
    // arrival and its lookup puts its time left in the step below (once allowed: a CPU-starved
    // CI machine); a SET per request would be 5.
    for _ in 0..4 {
        assert_eq!(resolve_budgeted(&base, &req, 10_000).await.status(), 200);
    }
    let before = sets().await;
    assert!(before <= 2.0, "{before} SETs for five equal budgets");

    let mut locker = lock_entities(&db.url).await;
    let short = {
        let (base, req) = (base.clone(), req.clone());
        tokio::spawn(async move { resolve_budgeted(&base, &req, 300).await })
    };
    // Given 5 s: 16 times its budget, half the 10 s the connection had before.
    let mut resp = None;
    for _ in 0..200 {
        if short.is_finished() {
            resp = Some(short.await.unwrap());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let resp = resp.expect("the 300 ms request ended while the table was still locked");
    assert_eq!(resp.status(), 504);
    assert_eq!(
        resp.headers()["x-lab-error-origin"],
        "entity-service/query_cancelled"
    );
    assert_eq!(running_lookups(&db.url).await, 0, "PostgreSQL stopped it");
    assert_eq!(sets().await, before + 1.0, "one SET for the shorter budget");
    locker.execute("ROLLBACK").await.unwrap();
}

/// LAB-FIX(round-trips): `GET /v1/popular` without a budget is not bounded by what a budgeted
/// resolve left on its pooled connection: on a pool of one, after a 300 ms resolve, the warm-up
/// query waits on a locked table past 300 ms and is answered once the lock goes (fails with its
/// transaction not taking the timeout back to the default).
#[tokio::test]
async fn popular_without_a_budget_is_not_bounded_by_a_resolves_left_over_timeout() {
    use sqlx::Executor;
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, _admin) = spawn_with_pool(&db.url, 1).await;
    let resp = resolve_budgeted(&base, &vega_labs(), 300).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);

    let mut locker = lock_entities(&db.url).await;
    let popular = {
        let base = base.clone();
        tokio::spawn(async move {
            testkit::http()
                .get(format!("{base}/v1/popular?limit=10"))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    still_waiting_past_a_left_over_timeout(&db.url, &popular, "the warm-up query").await;
    locker.execute("ROLLBACK").await.unwrap();
    assert_eq!(popular.await.unwrap(), 200);
}

/// `what`, run by `task` on a locked table, is seen waiting there in PostgreSQL, and still
/// waiting 700 ms later: well past the 300 ms a left-over `statement_timeout` would allow it.
async fn still_waiting_past_a_left_over_timeout<T>(
    db_url: &str,
    task: &tokio::task::JoinHandle<T>,
    what: &str,
) {
    let mut waiting = 0;
    for _ in 0..40 {
        waiting = running_lookups(db_url).await;
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(waiting, 1, "{what} reached PostgreSQL");
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert!(!task.is_finished(), "{what} was cut short");
}

/// One sample's value from a Prometheus text exposition (label filter: a substring).
fn lab_e2e_free_metric(text: &str, name: &str, labels: &str) -> f64 {
    lab_core::exposition::samples(text)
        .filter(|s| s.name == name && s.labels.contains(labels))
        .map(|s| s.value)
        .sum()
}

#[tokio::test]
async fn an_already_spent_budget_is_refused_before_any_work() {
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn(&db).await;
    let resp = testkit::http()
        .post(format!("{base}/v1/resolve"))
        .header("x-request-budget-ms", "0")
        .json(&ResolveRequest {
            doc_id: "d".into(),
            tenant: 1,
            locale: None,
            spans: vec![span("vega labs", "organization")],
        })
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 504);
    // The row says what the caller must do: not retry (a spent budget), whatever the status.
    let row =
        lab_contract::errors::parse_origin(resp.headers()["x-lab-error-origin"].to_str().unwrap())
            .expect("a row of the error table");
    assert!(!row.retryable, "a row the fixed client does not retry");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "budget_refused");
    let metrics = reqwest::get(format!("{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("entity_service_shed_total{reason=\"budget\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("entity_db_query_duration_seconds_count{query=\"exact\"}"),
        "no query ran"
    );
}

#[tokio::test]
async fn a_budget_that_cannot_be_read_or_applied_is_a_400_not_an_unbounded_request() {
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn(&db).await;
    // Over PostgreSQL's statement_timeout (an int of ms), the largest u64 (which overflowed the
    // deadline's clock), and not a number (which was served as if no budget had been sent).
    for bad in ["2147483648", "18446744073709551615", "soon"] {
        let resp = testkit::http()
            .post(format!("{base}/v1/resolve"))
            .header("x-request-budget-ms", bad)
            .json(&vega_labs())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "budget {bad}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_request", "budget {bad}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("x-request-budget-ms"), "{message}");
    }
    assert_eq!(
        scrape(&admin, "entity_db_query_duration_seconds_count", "").await,
        0.0,
        "no query ran"
    );
    // The largest budget PostgreSQL can apply is served.
    let resp = resolve_budgeted(&base, &vega_labs(), 2_147_483_647).await;
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn budgeted_requests_are_counted_by_how_they_ended_for_their_callers_attempt() {
    use sqlx::Executor;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn(&db).await;
    let stamp = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros()
            .to_string()
    };
    let send = |client: reqwest::Client, sent: SystemTime, budget_ms: u64| {
        client
            .post(format!("{base}/v1/resolve"))
            .header("x-request-budget-ms", budget_ms.to_string())
            .header("x-lab-observe-sent-unix-us", stamp(sent))
            .json(&vega_labs())
            .send()
    };
    let outcome = |o: &'static str| {
        let admin = admin.clone();
        async move {
            scrape(
                &admin,
                "entity_service_budgeted_requests_total",
                &format!("outcome=\"{o}\""),
            )
            .await
        }
    };
    // Sent 2 s ago with 1.5 s of budget: the header alone says 1.5 s are left, so it is served,
    // but its caller's attempt had ended before it arrived.
    let long_ago = SystemTime::now() - Duration::from_secs(2);
    let r = send(testkit::http(), long_ago, 1_500).await.unwrap();
    assert_eq!(r.status(), 200);
    // Sent now with 5 s: in time.
    let r = send(testkit::http(), SystemTime::now(), 5_000)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Sent (by its stamp) 1 s before the table is locked, with 2 s: it arrives with time left
    // and its answer is ready only after the lock's 1.5 s, past its caller's 2 s. Judged when
    // the answer is ready, not when the request arrived.
    let mut locker = lock_entities(&db.url).await;
    let stamped = SystemTime::now() - Duration::from_secs(1);
    let late = tokio::spawn(send(testkit::http(), stamped, 2_000));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    locker.execute("COMMIT").await.unwrap();
    assert_eq!(late.await.unwrap().unwrap().status(), 200);
    // A caller that hangs up after 300 ms of a 5 s budget while the table is locked: its
    // handler is dropped with the connection before it answers.
    let mut locker = lock_entities(&db.url).await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gone = send(impatient, SystemTime::now(), 5_000).await;
    assert!(gone.is_err_and(|e| e.is_timeout()), "the caller hung up");
    let mut dropped = 0.0;
    for _ in 0..50 {
        dropped = outcome("dropped").await;
        if dropped > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    locker.execute("COMMIT").await.unwrap();
    assert_eq!(dropped, 1.0, "the hung-up request's handler was dropped");
    assert_eq!(outcome("answered_late").await, 2.0);
    assert_eq!(outcome("answered_in_time").await, 1.0);
    assert_eq!(outcome("error").await, 0.0);
    // Every stamped request that reached the handler has its transit; the first was sent 2 s
    // before it arrived.
    assert_eq!(
        scrape(&admin, "entity_service_transit_seconds_count", "").await,
        4.0
    );
    let transit = scrape(&admin, "entity_service_transit_seconds_sum", "").await;
    assert!((3.0..60.0).contains(&transit), "transit {transit} s");
    // Without the stamp, or without a budget, nothing is counted.
    assert_eq!(
        resolve_budgeted(&base, &vega_labs(), 5_000).await.status(),
        200
    );
    let r = testkit::http()
        .post(format!("{base}/v1/resolve"))
        .header("x-lab-observe-sent-unix-us", stamp(SystemTime::now()))
        .json(&vega_labs())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        scrape(&admin, "entity_service_budgeted_requests_total", "").await,
        4.0
    );
    assert_eq!(
        scrape(&admin, "entity_service_transit_seconds_count", "").await,
        5.0,
        "the unbudgeted stamped request has its transit too"
    );
}

#[tokio::test]
async fn a_budget_below_the_recent_cost_of_the_work_is_refused_before_any_query() {
    use sqlx::Executor;
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn(&db).await;
    let req = vega_labs();
    let client = testkit::http();
    // Make the work really slow once: hold the table for ~300 ms while an unbudgeted request
    // runs. Its handler time becomes the replica's cost estimate (the first observation).
    let mut locker = lock_entities(&db.url).await;
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        locker.execute("ROLLBACK").await.unwrap();
    });
    let slow = client
        .post(format!("{base}/v1/resolve"))
        .json(&req)
        .send()
        .await
        .unwrap();
    assert_eq!(slow.status(), 200);
    release.await.unwrap();

    let queries = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("entity_db_query_duration_seconds_count{query=\"exact\"}"))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.parse::<f64>().unwrap())
            .unwrap_or(0.0)
    };
    let before = queries(
        &client
            .get(format!("{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );

    // 100 ms is plenty for the lookup now (the lock is gone), but below what this replica's
    // recent requests cost: refused at once, nothing sent to PostgreSQL.
    let resp = client
        .post(format!("{base}/v1/resolve"))
        .header("x-request-budget-ms", "100")
        .json(&req)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 504);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "budget_refused");
    let after = queries(
        &client
            .get(format!("{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(after, before, "no query ran for the refused request");
}

/// The callee's admission (LAB-FIX(pool-exhaustion)): with every pooled connection held, a
/// budgeted request waits for one only as long as its budget could still cover the query, then
/// is refused as retryable (another replica may have room), while unbudgeted (legacy) requests
/// wait on, as in the incident, and are all served once the connections free up.
#[tokio::test]
async fn a_budgeted_request_waits_for_a_connection_only_within_its_budget() {
    use sqlx::Executor;
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn(&db).await;
    let req = vega_labs();
    // Hold the table: every lookup waits on the lock with its pooled connection.
    let mut locker = lock_entities(&db.url).await;
    // Four legacy requests (no budget) take the pool's four connections, and a fifth queues.
    let legacy: Vec<_> = (0..5)
        .map(|_| {
            let (base, req) = (base.clone(), req.clone());
            tokio::spawn(async move { resolve(&base, &req).await.status() })
        })
        .collect();
    let mut held = 0.0;
    for _ in 0..100 {
        held = scrape(&admin, "entity_db_pool_connections", "state=\"in_use\"").await;
        if held >= 4.0 && scrape(&admin, "entity_db_pool_waiting", "").await >= 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(held, 4.0, "the legacy requests hold the whole pool");

    let resp = resolve_budgeted(&base, &req, 300).await;
    assert_eq!(resp.status(), 503);
    let row =
        lab_contract::errors::parse_origin(resp.headers()["x-lab-error-origin"].to_str().unwrap())
            .expect("a row of the error table");
    assert!(row.retryable, "another replica may have room: retryable");
    // Admitted (no cost known yet), then refused at the end of its wait: the queue was never
    // estimated too long, so no pushback is claimed (LAB-FIX(pushback)).
    assert!(
        resp.headers().get("x-lab-retry-pushback-ms").is_none(),
        "{:?}",
        resp.headers()
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "db_pool_exhausted");
    assert_eq!(
        scrape(&admin, "entity_service_shed_total", "reason=\"queue\"").await,
        1.0
    );
    // The legacy requests were not refused: still waiting, and all served once the lock goes.
    assert!(
        legacy.iter().all(|h| !h.is_finished()),
        "legacy still waits"
    );
    locker.execute("ROLLBACK").await.unwrap();
    for h in legacy {
        assert_eq!(h.await.unwrap(), 200);
    }
}

/// A short database outage inside the caller's budget is waited out in entity-service, once,
/// instead of answered 503 at once and retried by every layer above (issue 27): PostgreSQL is
/// reached through a loopback port where nothing listens until 300 ms after the request.
#[tokio::test]
async fn a_budgeted_request_waits_out_a_database_that_comes_back_inside_its_budget() {
    use tokio::net::{TcpListener, TcpStream};
    let db = TestDb::new().await;
    seed(&db).await;
    // The database's address, and a free loopback port standing in for it (nothing listens yet).
    let (head, rest) = db.url.split_once('@').unwrap();
    let (hostport, path) = rest.split_once('/').unwrap();
    let target = hostport.to_string();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (base, admin) = spawn_on(&format!("{head}@127.0.0.1:{port}/{path}")).await;
    let req = vega_labs();
    // Without a budget (the legacy client) the outage is answered at once, retryable.
    let resp = resolve(&base, &req).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(
        resp.headers()["x-lab-error-origin"],
        "entity-service/db_unavailable"
    );

    // The database "comes back" 300 ms after the budgeted request arrives.
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            let target = target.clone();
            tokio::spawn(async move {
                let mut outbound = TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    let resp = resolve_budgeted(&base, &req, 2000).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert_eq!(
        scrape(
            &admin,
            "entity_service_db_unreachable_waits_total",
            "outcome=\"reconnected\""
        )
        .await,
        1.0
    );
}

/// A PostgreSQL that accepts connections and never answers (a black-holed database) is a failing
/// dependency, not a full pool: the budgeted request gives up within its budget as
/// `db_unavailable`, the row the fixed client's breaker counts, never as `db_pool_exhausted`,
/// the admission's refusal that it does not count.
#[tokio::test]
async fn a_database_that_never_answers_is_unavailable_not_a_full_pool() {
    let db = TestDb::new().await;
    let (head, rest) = db.url.split_once('@').unwrap();
    let path = rest.split_once('/').unwrap().1;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn); // accepted, never answered
        }
    });
    let (base, admin) = spawn_on(&format!("{head}@127.0.0.1:{port}/{path}")).await;
    let resp = resolve_budgeted(&base, &vega_labs(), 400).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(
        resp.headers()["x-lab-error-origin"],
        "entity-service/db_unavailable"
    );
    assert_eq!(
        scrape(&admin, "entity_service_shed_total", "reason=\"queue\"").await,
        0.0,
        "not counted as the admission's refusal"
    );
}

#[tokio::test]
async fn every_request_is_counted_per_100_ms_on_the_admin_listener_only() {
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn(&db).await;
    for _ in 0..7 {
        assert_eq!(resolve(&base, &vega_labs()).await.status(), 200);
    }
    // The buckets are served once complete: wait out the current one.
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    let b: lab_core::arrivals::Buckets = reqwest::get(format!("{admin}/debug/arrivals"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b.bucket_ms, 100);
    assert_eq!(b.counts.iter().sum::<u64>(), 7, "{b:?}");
    // Read again after the last bucket: nothing new.
    let last = b.first + b.counts.len() as u64 - 1;
    let again: lab_core::arrivals::Buckets =
        reqwest::get(format!("{admin}/debug/arrivals?after={last}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(again.counts.iter().sum::<u64>(), 0);
    let public = reqwest::get(format!("{base}/debug/arrivals"))
        .await
        .unwrap();
    assert_eq!(public.status(), 404, "not on the public port");
}

/// Send `tenant`'s request with a budget of `budget_ms` in the background, and wait (bounded)
/// until it is queued: `waiting` requests wait for a connection or a turn. Its tenant is pushed
/// to `done` when it is answered.
async fn queue_one(
    (base, admin): (&str, &str),
    tenant: i64,
    budget_ms: u64,
    waiting: f64,
    done: &std::sync::Arc<std::sync::Mutex<Vec<i64>>>,
) -> tokio::task::JoinHandle<reqwest::StatusCode> {
    let (url, done) = (base.to_string(), done.clone());
    let req = ResolveRequest {
        tenant,
        ..vega_labs()
    };
    let h = tokio::spawn(async move {
        let status = resolve_budgeted(&url, &req, budget_ms).await.status();
        done.lock().unwrap().push(tenant);
        status
    });
    for _ in 0..200 {
        if scrape(admin, "entity_db_pool_waiting", "").await >= waiting
            && scrape(admin, "entity_db_pool_connections", "state=\"in_use\"").await >= 1.0
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        scrape(admin, "entity_db_pool_waiting", "").await,
        waiting,
        "tenant {tenant}'s request queued (not refused at once)"
    );
    h
}

/// LAB-FIX(tenant-share) on a real pool (issue 28): one connection, held by tenant 1's request
/// while the table is locked; tenant 1 queues four more budgeted requests, then tenant 2 one.
/// Once the lock goes, tenant 2 is answered second, in turn, not after tenant 1's whole queue
/// (first come first served answers it last). Every request is served: nothing is refused.
#[tokio::test]
async fn a_tenant_queued_behind_another_tenants_flood_is_served_in_turn_not_last() {
    use sqlx::Executor;
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn_with_pool(&db.url, 1).await;
    let mut locker = lock_entities(&db.url).await;
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut sent = Vec::new();
    for (i, tenant) in [1, 1, 1, 1, 1, 2].into_iter().enumerate() {
        // Each queued before the next is sent: the first holds the connection, the others wait.
        sent.push(queue_one((&base, &admin), tenant, 9_000, i as f64, &order).await);
    }
    locker.execute("ROLLBACK").await.unwrap();
    for h in sent {
        assert_eq!(h.await.unwrap(), 200, "served, not refused");
    }
    assert_eq!(*order.lock().unwrap(), [1, 2, 1, 1, 1, 1]);
}

/// The admission's half of LAB-FIX(tenant-share): a tenant arriving behind another tenant's
/// flood is priced by its place in fair order, admitted and served, not refused at once as if
/// it stood behind the whole flood. The table is locked ~300 ms once, so the replica learns a
/// query costs that; then tenant 1 floods the one connection (1 held, 4 queued) and tenant 2
/// sends a request whose budget (1,350 ms) covers two queries ahead of it plus its own (~900
/// ms) but not five (~1,800 ms: refused at once when priced first come first served).
#[tokio::test]
async fn a_tenant_behind_a_flood_is_priced_by_its_turn_and_served() {
    use sqlx::Executor;
    let db = TestDb::new().await;
    seed(&db).await;
    let (base, admin) = spawn_with_pool(&db.url, 1).await;
    let mut locker = lock_entities(&db.url).await;
    let slow = {
        let base = base.clone();
        tokio::spawn(async move { resolve(&base, &vega_labs()).await.status() })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    locker.execute("ROLLBACK").await.unwrap();
    assert_eq!(slow.await.unwrap(), 200);

    let mut locker = lock_entities(&db.url).await;
    let done = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut flood = Vec::new();
    for i in 0..5 {
        flood.push(queue_one((&base, &admin), 1, 9_000, i as f64, &done).await);
    }
    let late = queue_one((&base, &admin), 2, 1_350, 5.0, &done).await;
    locker.execute("ROLLBACK").await.unwrap();
    assert_eq!(late.await.unwrap(), 200, "tenant 2 served in its turn");
    for h in flood {
        assert_eq!(h.await.unwrap(), 200);
    }
    assert_eq!(done.lock().unwrap()[..2], [1, 2]);
}
