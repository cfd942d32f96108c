//! Least privilege and where tenant isolation rests.
//!
//! Each service connects as its own role (migrations/20261201000001_service_roles.sql): the
//! role can run that service's queries and is refused everything else. The whole path works
//! with every service on its own role (every `Lab` in these tests runs that way). And the inner
//! hops trust the tenant id in the request body: whoever can reach an orchestrator can read any
//! tenant's entities, so isolation between tenants rests on the API key at the edge plus the
//! network policy that lets only the gateway reach the orchestrators (k8s/README.md).

use lab_e2e::{service_role_url, Lab, LabOptions};
use serde_json::{json, Value};
use testkit::{fixtures, TestDb};

/// `Ok(())`, or the SQLSTATE the statement failed with.
async fn run_as(db: &TestDb, role: &str, sql: &str) -> Result<(), String> {
    let url = service_role_url(&db.url, role).await;
    let mut c = lab_db::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{role} cannot even connect: {e:#}"));
    match sqlx::Executor::execute(&mut c, sql).await {
        Ok(_) => Ok(()),
        Err(e) => Err(e
            .as_database_error()
            .and_then(|d| d.code())
            .map_or_else(|| e.to_string(), |c| c.into_owned())),
    }
}

const DENIED: &str = "42501"; // insufficient_privilege

#[tokio::test]
async fn each_service_role_runs_its_own_queries_and_is_refused_the_rest() {
    let db = TestDb::new().await;
    fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::entities(&db.url, &[(10, 1, "organization", "Vega Labs", 100)]).await;
    let doc = "INSERT INTO enrichment_documents (event_id, tenant_id, doc_id, entities, mentions, \
               unresolved, extracted_at, kafka_partition, kafka_offset) \
               VALUES ('e1', 1, 'd1', 0, 0, 0, now(), 0, 0)";
    let cases: &[(&str, &str, Result<(), &str>)] = &[
        // The gateway: keys and plans, nothing else.
        (lab_db::GATEWAY_ROLE, "SELECT k.tenant_id, t.rate_limit_rps FROM api_keys k JOIN tenants t ON t.id = k.tenant_id", Ok(())),
        (lab_db::GATEWAY_ROLE, "SELECT count(*) FROM entities", Err(DENIED)),
        (lab_db::GATEWAY_ROLE, "UPDATE tenants SET rate_limit_rps = 1000000", Err(DENIED)),
        (lab_db::GATEWAY_ROLE, "SELECT count(*) FROM enrichment_documents", Err(DENIED)),
        // ...and of those, the columns the key lookup reads (migrations/20261205000001).
        (lab_db::GATEWAY_ROLE, "SELECT k.key_id, k.key_sha256, k.revoked_at FROM api_keys k", Ok(())),
        (lab_db::GATEWAY_ROLE, "SELECT name FROM tenants", Err(DENIED)),
        (lab_db::GATEWAY_ROLE, "SELECT plan FROM tenants", Err(DENIED)),
        (lab_db::GATEWAY_ROLE, "SELECT created_at FROM api_keys", Err(DENIED)),
        (lab_db::GATEWAY_ROLE, "SELECT lab_busy_connections()", Err(DENIED)),
        (lab_db::GATEWAY_ROLE, "CREATE TABLE public.planted (x int)", Err(DENIED)),
        // entity-service: entities, read only; never a key hash.
        (lab_db::ENTITY_SERVICE_ROLE, "SELECT id FROM entities WHERE tenant_id = 1", Ok(())),
        (lab_db::ENTITY_SERVICE_ROLE, "SELECT state FROM pg_stat_activity", Ok(())),
        (lab_db::ENTITY_SERVICE_ROLE, "SELECT lab_busy_connections()", Ok(())),
        (lab_db::ENTITY_SERVICE_ROLE, "SELECT key_sha256 FROM api_keys", Err(DENIED)),
        (lab_db::ENTITY_SERVICE_ROLE, "UPDATE entities SET popularity = 0", Err(DENIED)),
        // enrichment: its own tables; no keys, no entities.
        (lab_db::ENRICHMENT_ROLE, doc, Ok(())),
        (lab_db::ENRICHMENT_ROLE, "SELECT key_sha256 FROM api_keys", Err(DENIED)),
        (lab_db::ENRICHMENT_ROLE, "DELETE FROM entities", Err(DENIED)),
    ];
    for (role, sql, want) in cases {
        let got = run_as(&db, role, sql).await;
        assert_eq!(
            got.as_ref().map_err(String::as_str),
            want.as_ref().map_err(|c| *c),
            "{role}: {sql}"
        );
    }
}

/// entity-service counts every role's busy connections (the postmortem's "200 of 200 active")
/// but reads no other session's query text: pg_read_all_stats showed it every statement, the
/// deployment's `ALTER ROLE ... PASSWORD` included (issue 28).
#[tokio::test]
async fn entity_service_counts_the_databases_busy_connections_but_reads_no_ones_query() {
    use sqlx::{Connection, Executor, Row};
    let db = TestDb::new().await;
    // Another role's session, busy in a statement that names a secret.
    let mut other = sqlx::PgConnection::connect(&db.url).await.unwrap();
    other.execute("BEGIN").await.unwrap();
    other
        .execute("SELECT 'hunter2' AS password, pg_sleep(0)")
        .await
        .unwrap();
    let other_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut other)
        .await
        .unwrap();
    let url = service_role_url(&db.url, lab_db::ENTITY_SERVICE_ROLE).await;
    let mut es = lab_db::connect(&url).await.unwrap();
    let row = sqlx::query(
        "SELECT (SELECT query FROM pg_stat_activity WHERE pid = $1), lab_busy_connections()",
    )
    .bind(other_pid)
    .fetch_one(&mut es)
    .await
    .unwrap();
    let query: Option<String> = row.get(0);
    let busy: i64 = row.get(1);
    other.execute("ROLLBACK").await.unwrap();
    assert_eq!(
        query.as_deref(),
        Some("<insufficient privilege>"),
        "another role's statement, as entity-service reads it"
    );
    // The other session is idle in transaction: not idle, so counted.
    assert!(busy >= 1, "lab_busy_connections() counted {busy}");
}

#[tokio::test]
async fn the_path_works_with_every_service_on_its_own_role_and_tenants_stay_apart() {
    let db = TestDb::new().await;
    let a = fixtures::tenant_with_key(&db.url, 1).await;
    let b = fixtures::tenant_with_key(&db.url, 2).await;
    fixtures::entities(
        &db.url,
        &[
            (10, 1, "organization", "Vega Labs", 100),
            (20, 2, "organization", "Secret Bank", 100),
        ],
    )
    .await;
    let opts = LabOptions::default();
    assert!(opts.service_roles, "labs run least-privilege by default");
    let lab = Lab::start(db, opts).await;
    let text = "Vega Labs paid Secret Bank.";
    let ids = |v: &Value| -> Vec<i64> {
        v["entities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["entity"]["id"].as_i64().unwrap())
            .collect()
    };
    let resp = lab
        .extract(&a.api_key, json!({"doc_id": "d", "text": text}))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        ids(&resp.json().await.unwrap()),
        [10],
        "tenant 1 sees only its own"
    );
    let resp = lab
        .extract(&b.api_key, json!({"doc_id": "d", "text": text}))
        .await;
    assert_eq!(
        ids(&resp.json().await.unwrap()),
        [20],
        "tenant 2 sees only its own"
    );
    // entity-service's database facts (the plan probe behind entity_db_hot_plan_index_scan) run
    // on its role too: a probe refused a grant reads stats_up 0 and a plan gauge stuck at 0,
    // which a verdict would read as "the plan flipped" (issue 24). Its first full refresh runs
    // at start; two more 5 s rounds are the bound.
    let entity_admin = &lab.entity_services[0].admin;
    let mut up = 0.0;
    for _ in 0..24 {
        up = Lab::metric(entity_admin, "entity_db_stats_up", "").await;
        if up == 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert_eq!(
        up, 1.0,
        "entity-service's database facts must refresh under lab_entity_service (its logs name \
         the refused statement)"
    );
    // The key decides the tenant: a tenant id in the public body is not even accepted.
    let resp = lab
        .extract(
            &a.api_key,
            json!({"doc_id": "d", "text": text, "tenant_id": 2}),
        )
        .await;
    assert_eq!(
        resp.status(),
        400,
        "tenant_id is not part of the public API"
    );
}

#[tokio::test]
async fn an_inner_hop_trusts_the_tenant_in_the_body_so_isolation_rests_on_the_network() {
    let db = TestDb::new().await;
    fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::tenant_with_key(&db.url, 2).await;
    fixtures::entities(&db.url, &[(20, 2, "organization", "Secret Bank", 100)]).await;
    let lab = Lab::start(db, LabOptions::default()).await;
    // No credentials at all, straight to an orchestrator: tenant 2's entity comes back. This is
    // by design (the hops are one trust domain), and why only the gateway may reach this port.
    let resp = testkit::http()
        .post(format!("{}/internal/extract", lab.orchestrators[0].url))
        .json(&json!({"tenant_id": 2, "doc_id": "d", "text": "Secret Bank paid."}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["entities"][0]["entity"]["id"], 20,
        "the orchestrator answers whoever reaches it: isolation is the network's job"
    );
}

/// Whether `url`'s role is a PostgreSQL superuser.
async fn is_superuser(url: &str) -> bool {
    let mut c = lab_db::connect(url).await.expect("connect");
    sqlx::query_scalar("SELECT current_setting('is_superuser') = 'on'")
        .fetch_one(&mut c)
        .await
        .expect("is_superuser")
}

/// Start `service` on `url` (allowing a superuser or not): `Err` with its reason, or `Ok` once
/// built (the application dropped at once).
async fn start(service: &str, url: &str, allow_superuser: bool) -> Result<(), String> {
    let redis = testkit::redis_url().await;
    let built = match service {
        "edge-gateway" => {
            let mut s = edge_gateway::Settings::defaults().unwrap();
            (s.http.port, s.admin.port) = (0, 0);
            (s.database.url, s.database.allow_superuser) = (url.into(), allow_superuser);
            (s.flags.redis_url, s.ratelimit.redis_url) = (redis.clone(), redis);
            edge_gateway::Application::build(s).await.map(drop)
        }
        "entity-service" => {
            let mut s = entity_service::Settings::defaults().unwrap();
            (s.http.port, s.admin.port) = (0, 0);
            (s.database.url, s.database.allow_superuser) = (url.into(), allow_superuser);
            s.flags.redis_url = redis;
            entity_service::Application::build(s).await.map(drop)
        }
        "enrichment" => {
            let mut s = enrichment::Settings::defaults().unwrap();
            (s.http.port, s.admin.port) = (0, 0);
            (s.database.url, s.database.allow_superuser) = (url.into(), allow_superuser);
            s.flags.redis_url = redis;
            enrichment::Application::build(s).await.map(drop)
        }
        other => panic!("no service {other}"),
    };
    built.map_err(|e| format!("{e:#}"))
}

/// A service whose `database.url` names a superuser stops at start with the reason (issue 28): an
/// internet-facing process holding a superuser's session is every table, every role's password
/// hash and `COPY ... TO PROGRAM` away from whoever takes it over. On its own role it starts, and
/// a test harness can still allow the owner explicitly.
#[tokio::test]
async fn every_service_refuses_to_start_as_a_superuser() {
    let db = TestDb::new().await;
    assert!(
        is_superuser(&db.url).await,
        "this test needs DATABASE_URL's role to be a superuser (the test database's owner is)"
    );
    for (service, role) in [
        ("edge-gateway", lab_db::GATEWAY_ROLE),
        ("entity-service", lab_db::ENTITY_SERVICE_ROLE),
        ("enrichment", lab_db::ENRICHMENT_ROLE),
    ] {
        let refused = start(service, &db.url, false).await;
        let why = refused.expect_err(&format!("{service} started as a superuser"));
        assert!(
            why.contains("a superuser") && why.contains(role),
            "{service}'s refusal must say why and which role to use: {why}"
        );
        let own = service_role_url(&db.url, role).await;
        start(service, &own, false)
            .await
            .unwrap_or_else(|e| panic!("{service} as {role} must start: {e}"));
        start(service, &db.url, true)
            .await
            .unwrap_or_else(|e| panic!("{service} allowed the owner must start: {e}"));
    }
}

/// Every service on its own Redis ACL user (issue 28): the path works, the gateway's rate limiter
/// decides in Redis (not on its local fallback, which a refused script would silently fall back
/// to), a flag set by the operator reaches every service, and the gateway's user, the one an
/// attacker on the public port would hold, is refused writing a flag.
#[tokio::test]
async fn every_service_runs_on_its_own_redis_user_and_the_gateways_cannot_write_a_flag() {
    let db = TestDb::new().await;
    let a = fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::entities(&db.url, &[(10, 1, "organization", "Vega Labs", 100)]).await;
    let opts = LabOptions::default();
    assert!(opts.redis_users, "labs run on their Redis users by default");
    let lab = Lab::start(db, opts).await;
    for i in 0..3 {
        let resp = lab
            .extract(
                &a.api_key,
                json!({"doc_id": format!("d{i}"), "text": "Vega Labs."}),
            )
            .await;
        assert_eq!(resp.status(), 200);
    }
    let admin = &lab.gateway.admin;
    let decided = |d: &'static str| async move {
        let filter = format!("decision=\"{d}\"");
        Lab::metric(admin, "gateway_ratelimit_decisions_total", &filter).await
    };
    assert_eq!(decided("allowed").await, 3.0, "Redis decided every request");
    assert_eq!(decided("local_allowed").await, 0.0);
    // The operator's write reaches every replica, which read it as their users (bounded wait).
    lab.set_flag("client.mode", "legacy").await;

    let gateway = lab.redis_url_as(lab_flags::acl::Role::Gateway);
    let client = redis::Client::open(gateway.as_str()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let flags_key = format!("{}:flags", lab.flags_namespace());
    let refused: redis::RedisResult<()> = redis::cmd("HSET")
        .arg(&flags_key)
        .arg("fault.entity.black_hole")
        .arg("on")
        .query_async(&mut c)
        .await;
    assert_eq!(
        refused.map_err(|e| e.code().map(str::to_owned)),
        Err(Some("NOPERM".to_string())),
        "the gateway's Redis user wrote a flag"
    );
}
