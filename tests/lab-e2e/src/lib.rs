//! The whole synchronous path — edge-gateway → orchestrator(s) → entity-service(s) → PostgreSQL —
//! started in one test process on ephemeral ports, over a fresh database.

use std::time::Duration;

use std::future::Future;
use testkit::TestDb;

/// How to shape the lab under test.
#[derive(Debug, Clone)]
pub struct LabOptions {
    pub orchestrators: usize,
    pub entity_services: usize,
    /// Point the orchestrators here instead of at the entity-services started (a dead port, a
    /// black hole).
    pub entity_urls_override: Option<String>,
    pub gateway_budget_ms: u64,
    pub auth_cache_ttl_ms: u64,
    pub max_body_bytes: usize,
    /// The gateway takes the caller's `traceparent` (on: tests find their traces by it).
    pub gateway_trusts_traceparent: bool,
    /// Flag store namespace; a fresh random one per lab keeps tests apart from each other and
    /// from a running native lab.
    pub flags_namespace: String,
    /// The orchestrators' cache capacity (`Some(1)`: effectively off, every extraction needs
    /// entity-service); `None` keeps the default.
    pub cache_capacity: Option<usize>,
    /// Gateways beyond the first, sharing the same orchestrators, database and Redis.
    pub extra_gateways: usize,
    /// The rate limiter's Redis (`None`: the tests' Redis), e.g. a proxy a test can cut.
    pub ratelimit_redis_url: Option<String>,
    /// The orchestrators publish `doc.ingested` events here (`None`: publishing off).
    pub kafka: Option<KafkaTarget>,
    /// Entries the orchestrators' boot warm-up may take (0, the default: off — the tests were
    /// written against cold caches; the warm-up's own test turns it on).
    pub cache_warmup_entries: i64,
    /// An orchestrator configuration file loaded as `LAB_CONFIG_FILE` is (a client policy:
    /// `labctl up --policy`); `None`: the defaults.
    pub orchestrator_config_file: Option<std::path::PathBuf>,
    /// Each service connects as its own least-privilege role (lab_gateway, lab_entity_service,
    /// lab_enrichment), as in a cluster; `false`: as the test database's owner.
    pub service_roles: bool,
    /// Each service connects to Redis as its own ACL user (`lab_flags::acl`: the gateway its
    /// rate-limit keys and the flags read only, the others the flags read only), as in compose
    /// and kind; `false`: as the machine's default user.
    pub redis_users: bool,
}

/// Where the orchestrators publish: brokers, a (per-test) topic, and how many events may wait.
#[derive(Debug, Clone)]
pub struct KafkaTarget {
    pub brokers: String,
    pub topic: String,
    pub queue_max_events: u32,
    pub delivery_timeout_ms: u64,
}

impl KafkaTarget {
    /// A topic of this test's own (12 partitions, as doc.ingested) on `brokers`; 1,000 events may
    /// wait up to 30 s.
    pub async fn fresh(brokers: &str) -> KafkaTarget {
        let topic = testkit::unique_name("test.doc.ingested");
        lab_kafka::topic::ensure(
            brokers,
            &topic,
            lab_api::events::DOC_INGESTED_PARTITIONS,
            1,
            Duration::from_secs(10),
        )
        .await
        .expect("creating the test's topic");
        KafkaTarget {
            brokers: brokers.to_string(),
            topic,
            queue_max_events: 1000,
            delivery_timeout_ms: 30_000,
        }
    }
}

impl Default for LabOptions {
    fn default() -> Self {
        Self {
            orchestrators: 1,
            entity_services: 1,
            entity_urls_override: None,
            gateway_budget_ms: 3000,
            auth_cache_ttl_ms: 10_000,
            max_body_bytes: 1 << 20,
            gateway_trusts_traceparent: true,
            flags_namespace: format!("lab-e2e-{:016x}", rand::random::<u64>()),
            cache_capacity: None,
            extra_gateways: 0,
            ratelimit_redis_url: None,
            kafka: None,
            cache_warmup_entries: 0,
            orchestrator_config_file: None,
            service_roles: true,
            redis_users: true,
        }
    }
}

/// A service running on its own Tokio runtime and thread. [`Running::kill`] drops that runtime,
/// which ends every task of the service at once — listener, keep-alive connections, detached
/// work — the in-process equivalent of `kill -9`. (Aborting only the serve task would leave
/// hyper's per-connection tasks serving keep-alive connections, which a dead process cannot do.)
pub struct Running {
    /// The public (API) listener.
    pub url: String,
    /// The admin listener: `/livez`, `/readyz`, `/metrics`.
    pub admin: String,
    kill: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Running {
    /// Start a service: `build` runs on the new runtime and returns the bound public and admin
    /// ports and the future that serves.
    pub async fn start<B, F, S>(name: &str, build: B) -> Running
    where
        B: FnOnce() -> F + Send + 'static,
        F: Future<Output = anyhow::Result<(u16, u16, S)>> + 'static,
        S: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (port_tx, port_rx) = tokio::sync::oneshot::channel();
        let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("lab-{name}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    let (port, admin, serve) = match build().await {
                        Ok(v) => v,
                        Err(e) => {
                            let _ = port_tx.send(Err(format!("{e:#}")));
                            return;
                        }
                    };
                    let _ = port_tx.send(Ok((port, admin)));
                    tokio::select! {
                        _ = serve => {}
                        _ = kill_rx => {}
                    }
                });
                rt.shutdown_timeout(Duration::from_secs(1));
            })
            .expect("spawn service thread");
        let (port, admin) = port_rx
            .await
            .expect("service thread ended before binding")
            .unwrap_or_else(|e| panic!("{name} failed to start: {e}"));
        Running {
            url: format!("http://127.0.0.1:{port}"),
            admin: format!("http://127.0.0.1:{admin}"),
            kill: std::sync::Mutex::new(Some(kill_tx)),
            thread: std::sync::Mutex::new(Some(thread)),
        }
    }

    /// End the service and everything it runs; returns once its runtime is gone.
    pub fn kill(&self) {
        if let Some(tx) = self.kill.lock().unwrap().take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Best effort: leave nothing behind in Redis.
        let store = self.flags.clone();
        let users: Vec<String> = self.redis_users.iter().map(|u| u.name.clone()).collect();
        let admin = self.redis_admin_url.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                let _ = rt.block_on(store.forget());
                let _ = rt.block_on(lab_flags::acl::delete(&admin, &users));
            }
        })
        .join();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct Lab {
    service_roles: bool,
    /// This lab's Redis ACL users ([`LabOptions::redis_users`]), deleted when it is dropped.
    redis_users: Vec<lab_flags::acl::User>,
    /// The flag store's URL as a service's user (the machine's default user without users).
    service_redis_url: String,
    /// The Redis URL the lab was made with (its users are created and deleted through it).
    redis_admin_url: String,
    /// Where the orchestrators publish, if they do ([`LabOptions::kafka`]).
    pub kafka: Option<KafkaTarget>,
    /// The consumer group of this lab's enrichment workers ([`Lab::enrichment_worker`]).
    pub enrichment_group: String,
    flags_namespace: String,
    /// Gateways beyond `gateway` (see [`LabOptions::extra_gateways`]).
    pub extra_gateways: Vec<Running>,
    pub flags: lab_flags::Store,
    pub db: TestDb,
    pub gateway: Running,
    pub orchestrators: Vec<Running>,
    pub entity_services: Vec<Running>,
}

impl Lab {
    /// Start the lab over `db` (already holding whatever fixtures the test needs).
    pub async fn start(db: TestDb, opts: LabOptions) -> Lab {
        let redis_url = testkit::redis_url().await;
        let ns = &opts.flags_namespace;
        let redis_users = if opts.redis_users {
            let users = lab_flags::acl::new_users(ns);
            lab_flags::acl::apply(&redis_url, ns, &users)
                .await
                .expect("creating the lab's Redis users");
            users
        } else {
            // The gateway's rate limiter calls the operator's function either way.
            lab_flags::acl::load_functions(&redis_url)
                .await
                .expect("loading the rate limiter's Redis function");
            Vec::new()
        };
        let redis_as = |role: lab_flags::acl::Role, url: &str| match redis_users
            .iter()
            .find(|u| u.role == role)
        {
            Some(u) => lab_flags::acl::url_as(url, u).expect("a Redis URL with a user"),
            None => url.to_string(),
        };
        let service_redis_url = redis_as(lab_flags::acl::Role::Service, &redis_url);
        let gateway_redis_url = redis_as(lab_flags::acl::Role::Gateway, &redis_url);
        let flag_settings = lab_flags::FlagSettings {
            redis_url: service_redis_url.clone(),
            namespace: opts.flags_namespace.clone(),
            last_known_file: None,
        };
        let flags = lab_flags::Store::with_namespace(&redis_url, &opts.flags_namespace).unwrap();
        let as_role = |role: &str| {
            let url = db.url.clone();
            let (on, role) = (opts.service_roles, role.to_string());
            async move {
                if on {
                    service_role_url(&url, &role).await
                } else {
                    url
                }
            }
        };
        let entity_db = as_role(lab_db::ENTITY_SERVICE_ROLE).await;
        let gateway_db = as_role(lab_db::GATEWAY_ROLE).await;
        let mut entity_services = Vec::new();
        for _ in 0..opts.entity_services {
            let mut s = entity_service::Settings::defaults().unwrap();
            s.http.port = 0;
            s.admin.port = 0;
            s.database.url = entity_db.clone();
            s.database.allow_superuser = !opts.service_roles;
            s.database.pool_size = 4;
            s.flags = flag_settings.clone();
            entity_services.push(
                Running::start("entity-service", move || async move {
                    let app = entity_service::Application::build(s).await?;
                    Ok((
                        app.port(),
                        app.admin_port(),
                        app.run_until_stopped(std::future::pending()),
                    ))
                })
                .await,
            );
        }
        let entity_urls = opts.entity_urls_override.clone().unwrap_or_else(|| {
            entity_services
                .iter()
                .map(|r| r.url.clone())
                .collect::<Vec<_>>()
                .join(",")
        });
        let mut orchestrators = Vec::new();
        for _ in 0..opts.orchestrators {
            let mut s: orchestrator::Settings = match &opts.orchestrator_config_file {
                Some(path) => lab_core::config::load_from(
                    "orchestrator",
                    orchestrator::configuration::DEFAULTS,
                    [(
                        "LAB_CONFIG_FILE".to_string(),
                        path.to_string_lossy().into_owned(),
                    )],
                )
                .expect("the orchestrator configuration file"),
                None => orchestrator::Settings::defaults().unwrap(),
            };
            s.http.port = 0;
            s.admin.port = 0;
            s.entity.urls = entity_urls.clone();
            s.flags = flag_settings.clone();
            if let Some(c) = opts.cache_capacity {
                s.cache.capacity = c;
            }
            s.cache.warmup_entries = opts.cache_warmup_entries;
            if let Some(k) = &opts.kafka {
                s.kafka.brokers = k.brokers.clone();
                s.kafka.topic = k.topic.clone();
                s.kafka.queue_max_events = k.queue_max_events;
                s.kafka.delivery_timeout_ms = k.delivery_timeout_ms;
                // One event per batch: exact watermarks on tansu (crates/lab-kafka/src/lag.rs).
                s.kafka.batch_max_events = 1;
            }
            orchestrators.push(
                Running::start("orchestrator", move || async move {
                    let app = orchestrator::Application::build(s).await?;
                    Ok((
                        app.port(),
                        app.admin_port(),
                        app.run_until_stopped(std::future::pending()),
                    ))
                })
                .await,
            );
        }
        let orchestrator_urls = orchestrators
            .iter()
            .map(|r| r.url.clone())
            .collect::<Vec<_>>()
            .join(",");
        let orchestrator_admins = orchestrators
            .iter()
            .map(|r| r.admin.clone())
            .collect::<Vec<_>>()
            .join(",");
        let gateway_settings = || {
            let mut s = edge_gateway::Settings::defaults().unwrap();
            s.http.port = 0;
            s.admin.port = 0;
            s.database.url = gateway_db.clone();
            s.database.allow_superuser = !opts.service_roles;
            s.budget.request_ms = opts.gateway_budget_ms;
            s.http.drain_seconds = opts.gateway_budget_ms / 1000 + 1;
            s.auth.cache_ttl_ms = opts.auth_cache_ttl_ms;
            s.limits.max_body_bytes = opts.max_body_bytes;
            // The tests find their requests' traces by the traceparent they send.
            s.edge.trust_traceparent = opts.gateway_trusts_traceparent;
            s.flags = lab_flags::FlagSettings {
                redis_url: gateway_redis_url.clone(),
                ..flag_settings.clone()
            };
            s.ratelimit.redis_url = redis_as(
                lab_flags::acl::Role::Gateway,
                opts.ratelimit_redis_url.as_deref().unwrap_or(&redis_url),
            );
            s.ratelimit.namespace = opts.flags_namespace.clone();
            s.upstream.orchestrators = orchestrator_urls.clone();
            s.upstream.orchestrators_admin = orchestrator_admins.clone();
            // Probe fast so rotation changes within a test's patience.
            s.upstream.probe_interval_ms = 100;
            s.upstream.probe_timeout_ms = 500;
            s
        };
        let mut gateways = Vec::new();
        for _ in 0..=opts.extra_gateways {
            let s = gateway_settings();
            gateways.push(
                Running::start("edge-gateway", move || async move {
                    let app = edge_gateway::Application::build(s).await?;
                    Ok((
                        app.port(),
                        app.admin_port(),
                        app.run_until_stopped(std::future::pending()),
                    ))
                })
                .await,
            );
        }
        let gateway = gateways.remove(0);
        let extra_gateways = gateways;
        Lab {
            service_roles: opts.service_roles,
            redis_users,
            service_redis_url,
            redis_admin_url: redis_url.clone(),
            kafka: opts.kafka.clone(),
            enrichment_group: testkit::unique_name("enrichment-workers"),
            flags_namespace: opts.flags_namespace.clone(),
            extra_gateways,
            flags,
            db,
            gateway,
            orchestrators,
            entity_services,
        }
    }

    /// A lab of `orchestrators` replicas calling `entity_url` (a stub or a dead port) instead of a
    /// real entity-service, with one tenant and its API key; readiness pinned shallow (in legacy
    /// mode the deep probe would call the stub too, and take replicas out of rotation).
    pub async fn against(entity_url: &str, orchestrators: usize) -> (Lab, String) {
        let db = TestDb::new().await;
        let key = testkit::fixtures::tenant_with_key(&db.url, 1).await;
        let opts = LabOptions {
            orchestrators,
            entity_urls_override: Some(entity_url.to_string()),
            ..LabOptions::default()
        };
        let lab = Lab::start(db, opts).await;
        lab.set_flag("readiness.depth", "shallow").await;
        (lab, key.api_key)
    }

    /// One enrichment worker of this lab's group, reading the lab's topic, in process on its own
    /// runtime. ([`Running::kill`] ends it like a crash, though dropping the runtime still closes
    /// its Kafka consumer; tests that need a real SIGKILL run the binary, see
    /// services/enrichment/tests/worker.rs.) Lag measured every 200 ms.
    pub async fn enrichment_worker(&self) -> Running {
        let k = self
            .kafka
            .clone()
            .expect("an enrichment worker needs LabOptions::kafka");
        let mut s = enrichment::Settings::defaults().unwrap();
        s.http.port = 0;
        s.admin.port = 0;
        s.database.allow_superuser = !self.service_roles;
        s.database.url = if self.service_roles {
            service_role_url(&self.db.url, lab_db::ENRICHMENT_ROLE).await
        } else {
            self.db.url.clone()
        };
        s.kafka.brokers = k.brokers;
        s.kafka.topic = k.topic;
        s.kafka.group_id = self.enrichment_group.clone();
        s.kafka.lag_interval_ms = 200;
        s.flags.redis_url = self.service_redis_url.clone();
        s.flags.namespace = self.flags_namespace.clone();
        Running::start("enrichment", move || async move {
            let app = enrichment::Application::build(s).await?;
            Ok((
                app.port(),
                app.admin_port(),
                app.run_until_stopped(std::future::pending()),
            ))
        })
        .await
    }

    /// This lab's flag namespace (`<namespace>:flags` in Redis).
    pub fn flags_namespace(&self) -> &str {
        &self.flags_namespace
    }

    /// The lab's Redis URL as `role`'s ACL user ([`LabOptions::redis_users`]).
    pub fn redis_url_as(&self, role: lab_flags::acl::Role) -> String {
        let user = self
            .redis_users
            .iter()
            .find(|u| u.role == role)
            .expect("a lab with Redis users (LabOptions::redis_users)");
        lab_flags::acl::url_as(&self.redis_admin_url, user).unwrap()
    }

    /// Set a runtime flag and wait (bounded) until every service applies it.
    pub async fn set_flag(&self, flag: &str, variant: &str) {
        self.flags.set(flag, variant).await.expect("set flag");
        let filter = format!("flag=\"{flag}\",variant=\"{variant}\"");
        let mut urls = vec![self.gateway.admin.clone()];
        urls.extend(self.orchestrators.iter().map(|o| o.admin.clone()));
        urls.extend(self.entity_services.iter().map(|e| e.admin.clone()));
        for url in urls {
            let mut applied = false;
            for _ in 0..400 {
                if Lab::metric(&url, "lab_flag_variant", &filter).await == 1.0 {
                    applied = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            assert!(applied, "{url} did not apply {flag}={variant}");
        }
    }

    /// `POST /v1/extract` with `api_key`; a generous client timeout so a hang shows as an error
    /// rather than a stuck test.
    pub async fn extract(&self, api_key: &str, body: serde_json::Value) -> reqwest::Response {
        testkit::http()
            .post(format!("{}/v1/extract", self.gateway.url))
            .bearer_auth(api_key)
            .timeout(Duration::from_secs(20))
            .json(&body)
            .send()
            .await
            .expect("the gateway answered (no hang, no connection error)")
    }

    /// One metric's value summed over the given label filter, from a service's `/metrics` (`base`:
    /// its admin URL, [`Running::admin`]).
    pub async fn metric(base: &str, name: &str, label_filter: &str) -> f64 {
        let resp = reqwest::get(format!("{base}/metrics")).await.unwrap();
        // A 404 here is a public URL given for an admin one: loud, not a silent 0.
        assert!(
            resp.status().is_success(),
            "{base}/metrics answered {} (metrics are on the admin listener: Running::admin)",
            resp.status()
        );
        sum_metric(&resp.text().await.unwrap(), name, label_filter)
    }
}

/// Sum every sample of `name` whose label set contains `label_filter` (e.g. `result="hit"`).
pub fn sum_metric(text: &str, name: &str, label_filter: &str) -> f64 {
    lab_core::exposition::samples(text)
        .filter(|s| s.name == name && s.labels.contains(label_filter))
        .map(|s| s.value)
        .sum()
}

/// The URL of `db_url`'s database as `role` (one of the services' roles). Under trust
/// authentication (the native lab, CI) no password is needed; when `db_url` carries one (a
/// testcontainers database), the role is given the same, so one URL shape works on both.
/// Roles are cluster-wide and tests run concurrently: a concurrent `ALTER ROLE` is retried.
pub async fn service_role_url(db_url: &str, role: &str) -> String {
    let password = url::Url::parse(db_url)
        .expect("a database URL")
        .password()
        .map(str::to_owned);
    if let Some(p) = &password {
        let mut tries = 0;
        loop {
            let mut c = lab_db::connect(db_url).await.expect("connect as the owner");
            let stmt = format!(
                "ALTER ROLE {} PASSWORD '{}'",
                lab_db::quote_ident(role),
                p.replace('\'', "''")
            );
            match sqlx::Executor::execute(&mut c, stmt.as_str()).await {
                Ok(_) => break,
                Err(e) if tries < 5 => {
                    tries += 1;
                    eprintln!("ALTER ROLE {role} failed ({e}); retrying");
                    tokio::time::sleep(Duration::from_millis(50 * tries)).await;
                }
                Err(e) => panic!("setting {role}'s password: {e}"),
            }
        }
    }
    lab_db::role_url(db_url, role, password.as_deref()).expect("a role URL")
}
