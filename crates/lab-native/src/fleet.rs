//! The fleet's lifecycle: `labctl up` (plan the replicas, start the supervisor, wait until
//! every replica is ready), `labctl down`, `labctl status`.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::supervise::{self, Plan, ProcSpec};
use crate::Service;

#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// gateway replicas (the gateway spreads over orchestrators; 1 is the lab's shape).
    #[arg(long, default_value_t = 1)]
    pub gateways: u16,
    /// orchestrator replicas. 3: the postmortem's 24 orchestrator pods to 16 entity-service
    /// pods (3:2), scaled down to 2 entity-services; three is also a fleet the deep-readiness
    /// cascade can take apart one replica at a time, concentrating load on the survivors, where
    /// two made it all or nothing (issue 26, hypothesis 2).
    #[arg(long, default_value_t = 3)]
    pub orchestrators: u16,
    /// entity-service replicas (2: the callee is a fleet, as in the postmortem; 2 × 16
    /// PostgreSQL connections fit the machine's PostgreSQL).
    #[arg(long, default_value_t = 2)]
    pub entity_services: u16,
    /// First gateway port; further replicas take the next ports.
    #[arg(long, default_value_t = 8080)]
    pub gateway_port: u16,
    #[arg(long, default_value_t = 8101)]
    pub orchestrator_port: u16,
    #[arg(long, default_value_t = 8201)]
    pub entity_port: u16,
    /// How the orchestrators address entity-service. `service` (the default, and what compose
    /// and kind give): ONE address, a Service run by the supervisor that balances each new
    /// connection over the ready replicas — the postmortem's shape, where each pod's 64
    /// connection slots (`MaxConnsPerHost`) were for all of entity-service. `replicas`: every
    /// replica's own address, balanced per request by the client, 64 slots per replica (the
    /// lab's shape before issue 26; kept to measure what the Service changes).
    #[arg(long, value_enum, default_value_t = EntityAddress::Service)]
    pub entity_address: EntityAddress,
    /// The entity-service Service's port (with `--entity-address service`). Default: the port
    /// below `--entity-port` (8200), so a lab moved to other ports moves its Service too.
    #[arg(long)]
    pub entity_service_port: Option<u16>,
    /// enrichment workers (consumer group enrichment-workers; 2 share the 12 partitions).
    #[arg(long, default_value_t = 2)]
    pub enrichment_workers: u16,
    #[arg(long, default_value_t = 8301)]
    pub enrichment_port: u16,
    /// The workers' consumer group. Default: a new group per `labctl up`,
    /// `enrichment-workers-<unix seconds>`, started at the log end. Why not the fixed
    /// `enrichment-workers` (compose and kind use it, on Apache Kafka): tansu's group coordinator
    /// wedges a group for good when a member leaves during a rebalance (measured with plain
    /// librdkafka clients; sometimes even with members stopped 4 s apart), and the next lab would
    /// then enrich nothing. A new group per run cannot inherit a wedge. With a new group,
    /// `doc.ingested` is emptied first (the earlier labs' events: no later lab reads them, and
    /// the native broker pays for each one it holds on every fetch); a named group keeps them.
    #[arg(long)]
    pub enrichment_group: Option<String>,
    /// Kafka brokers for doc.ingested (scripts/deps.sh runs tansu on 127.0.0.1:9092); empty:
    /// no publishing and no enrichment workers.
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub kafka: String,
    /// Where the service binaries are (default: next to labctl itself).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Seconds to wait for every replica's /readyz.
    #[arg(long, default_value_t = 60)]
    pub wait_seconds: u64,
    /// Share of requests traced into the lab's own OTLP receiver (`labctl trace`), decided at the
    /// gateway (`parentbased_traceidratio`: a request's spans are all kept or all not). 0.1: at
    /// the replay's ~200 rps, 20 traces a second — every kind of failure within seconds — for a
    /// tenth of the export work of tracing everything, which would compete with the services
    /// for the same 2 cores. 0: no tracing. Ignored when OTEL_EXPORTER_OTLP_ENDPOINT is set: the
    /// services then export to that collector, as they do in compose and kind.
    #[arg(long, default_value_t = 0.1)]
    pub trace_sample: f64,
    /// The receiver's OTLP/gRPC port: 4317 + 10000, clear of a compose lab's collector on 4317.
    #[arg(long, default_value_t = 14317)]
    pub otlp_port: u16,
    /// The receiver's query API (`labctl trace`).
    #[arg(long, default_value_t = 14318)]
    pub traces_port: u16,
    /// A retry policy for the fixed client (a TOML file: `[budget]`, `[resilient]`,
    /// `[policy]`; see load/policies/), validated before anything starts and loaded by every
    /// orchestrator. Legacy mode ignores it.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Connect every service as the database's owner instead of its own least-privilege role
    /// (lab_gateway, lab_entity_service, lab_enrichment; migrations/*_service_roles.sql). The
    /// roles have no password: natively PostgreSQL trusts loopback (scripts/deps.sh); a
    /// database that asks for passwords needs this flag, or the roles' passwords set.
    #[arg(long)]
    pub no_service_roles: bool,
    /// Extra environment for one service's replicas, `SERVICE:LAB_<SECTION>__<KEY>=VALUE`
    /// (repeatable), e.g. `--env edge-gateway:LAB_AUTH__FLOOD_GUARD=false`: any setting of the
    /// service's configuration, applied after labctl's own (ports, URLs) so it wins; and
    /// `SERVICE:TOKIO_WORKER_THREADS=N`, its runtime's worker count.
    #[arg(long = "env", value_name = "SERVICE:KEY=VALUE")]
    pub env: Vec<String>,
}

/// How the orchestrators address entity-service (`labctl up --entity-address`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EntityAddress {
    /// One Service address, balanced per connection over the ready replicas.
    Service,
    /// Every replica's own address, balanced per request by the client.
    Replicas,
}

/// `SERVICE:KEY=VALUE` → (service, key, value), refused with what to write instead.
fn parse_env_override(s: &str) -> anyhow::Result<(String, String, String)> {
    let parsed = s.split_once(':').and_then(|(svc, kv)| {
        let (k, v) = kv.split_once('=')?;
        Some((svc.trim().to_string(), k.trim().to_string(), v.to_string()))
    });
    match parsed {
        // The lab's Redis users may read and write only the lab's own namespace: a replica moved
        // to another one would be refused every read (NOPERM) and never know its flags.
        Some((_, k, v))
            if REDIS_NAMESPACE_KEYS.contains(&k.as_str())
                && v != lab_flags::store::DEFAULT_NAMESPACE =>
        {
            anyhow::bail!(
                "--env {s:?}: the lab's Redis users are made for the namespace {:?} \
                 (lab_flags::acl); a replica in another namespace could not read its flags",
                lab_flags::store::DEFAULT_NAMESPACE
            )
        }
        Some((svc, k, v))
            if svc.parse::<Service>().is_ok() && k.starts_with("LAB_") && k.contains("__") =>
        {
            Ok((svc, k, v))
        }
        // The one setting outside the lab's own: how many threads a service's Tokio runtime runs
        // (`#[tokio::main]` reads it; default one per core), to measure what the workers' wake-ups
        // cost on a shared machine (issue 29).
        Some((svc, k, v))
            if svc.parse::<Service>().is_ok()
                && k == TOKIO_WORKER_THREADS
                && v.parse::<u16>().is_ok_and(|n| n > 0) =>
        {
            Ok((svc, k, v))
        }
        _ => anyhow::bail!(
            "--env {s:?}: write SERVICE:LAB_<SECTION>__<KEY>=VALUE (or SERVICE:{TOKIO_WORKER_THREADS}=N, \
             N ≥ 1) with SERVICE one of {:?}",
            Service::ALL.map(Service::as_str)
        ),
    }
}

/// Tokio's own variable for its multi-thread runtime's worker count.
const TOKIO_WORKER_THREADS: &str = "TOKIO_WORKER_THREADS";

/// The settings that name a service's Redis namespace (flags, the gateway's rate limits).
const REDIS_NAMESPACE_KEYS: [&str; 2] = ["LAB_FLAGS__NAMESPACE", "LAB_RATELIMIT__NAMESPACE"];

/// Traces kept by the native receiver: at 20 traces a second, the last few minutes — a replay
/// step and then some — in a few tens of MB.
pub const TRACE_CAPACITY: usize = 5_000;

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// `path` made absolute against the current directory (the replicas' own directory may differ).
pub(crate) fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

/// Every replica's `[flags] last_known_file` ([`supervise::flags_file`]).
pub(crate) const FLAGS_FILE_ENV: &str = "LAB_FLAGS__LAST_KNOWN_FILE";

/// The processes of a lab of `args`' shape: every replica's binary, ports and environment, and
/// the trace receiver the supervisor runs. Refuses a bad shape, `--trace-sample` or `--env`, and
/// a bad policy, before anything starts.
pub fn plan(
    args: &UpArgs,
    database_url: &str,
    redis: &RedisUrls,
    state_dir: &Path,
) -> anyhow::Result<Plan> {
    let bin_dir = bin_dir(args)?;
    check_args(args)?;
    // A policy is refused before anything starts, with the orchestrator's own words.
    let policy = load_policy(args)?;
    let traces = traces_plan(args);
    let shared = SharedEnv {
        traces: traces.as_ref(),
        trace_sample: args.trace_sample,
    };
    let dbs = ServiceDbs::of(args, database_url)?;
    let entity_ports: Vec<u16> = (0..args.entity_services)
        .map(|i| args.entity_port + i)
        .collect();
    let orch_ports: Vec<u16> = (0..args.orchestrators)
        .map(|i| args.orchestrator_port + i)
        .collect();
    let mut procs = entity_services(&entity_ports, &dbs.entity, &shared);
    let kafka = lab_kafka::bootstrap_servers(&args.kafka);
    let service_port = args
        .entity_service_port
        .unwrap_or(args.entity_port.saturating_sub(1));
    let (entity_urls, services) = match args.entity_address {
        EntityAddress::Service => (
            url(service_port),
            vec![crate::service::ServicePlan {
                name: Service::EntityService.as_str().into(),
                port: service_port,
                endpoints_file: absolute(&supervise::endpoints_file(
                    state_dir,
                    Service::EntityService.as_str(),
                )),
                probe: crate::service::ProbePlan::entity_service(),
                ready_file: absolute(&supervise::service_ready_file(
                    state_dir,
                    Service::EntityService.as_str(),
                )),
            }],
        ),
        EntityAddress::Replicas => (url_list(entity_ports.iter().copied()), Vec::new()),
    };
    procs.extend(orchestrators(
        &orch_ports,
        &entity_urls,
        kafka.as_deref(),
        policy.as_ref(),
        &shared,
    ));
    procs.extend(gateways(
        args,
        &orch_ports,
        &dbs.gateway,
        state_dir,
        &shared,
    ));
    if let Some(k) = &kafka {
        procs.extend(enrichment_workers(args, k, &dbs.enrichment, &shared));
    }
    for p in &mut procs {
        let file = absolute(&supervise::flags_file(state_dir, &p.name));
        p.env
            .insert(FLAGS_FILE_ENV.into(), file.to_string_lossy().into_owned());
        redis.apply(p);
    }
    apply_env_overrides(&mut procs, &args.env)?;
    Ok(Plan {
        bin_dir,
        state_dir: state_dir.to_path_buf(),
        procs,
        traces,
        services,
    })
}

/// Where the service binaries are: `--bin-dir`, else labctl's own directory.
fn bin_dir(args: &UpArgs) -> anyhow::Result<PathBuf> {
    Ok(match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("labctl has no parent directory")?
            .to_path_buf(),
    })
}

/// Refuse a tier without replicas and a `--trace-sample` outside 0..=1.
fn check_args(args: &UpArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.gateways >= 1 && args.orchestrators >= 1 && args.entity_services >= 1,
        "every tier needs at least one replica"
    );
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.trace_sample),
        "--trace-sample is a share of requests, 0 to 1 (got {})",
        args.trace_sample
    );
    Ok(())
}

/// Load and validate `--policy`, if any, and say which policy the orchestrators will run.
fn load_policy(args: &UpArgs) -> anyhow::Result<Option<crate::policy::Policy>> {
    let Some(p) = &args.policy else {
        return Ok(None);
    };
    let pol = crate::policy::load(p)?;
    println!("policy {}: {}", pol.name, pol.summary);
    Ok(Some(pol))
}

/// The lab's own trace receiver: none when the user's OTEL_EXPORTER_OTLP_ENDPOINT names a
/// collector, or when nothing is sampled.
fn traces_plan(args: &UpArgs) -> Option<supervise::TracesPlan> {
    let user_collector = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .filter(|v| !v.trim().is_empty());
    (user_collector.is_none() && args.trace_sample > 0.0).then_some(supervise::TracesPlan {
        otlp_port: args.otlp_port,
        api_port: args.traces_port,
        capacity: TRACE_CAPACITY,
    })
}

/// What every replica's environment ends with, whatever its service: labctl's own logging and
/// exporter settings, and the exporter's route to the lab's receiver when it runs one.
struct SharedEnv<'a> {
    traces: Option<&'a supervise::TracesPlan>,
    trace_sample: f64,
}

impl SharedEnv<'_> {
    /// Add the passed-through variables and the trace exporter's settings to `env`.
    fn apply(&self, env: &mut BTreeMap<String, String>) {
        for k in ["RUST_LOG", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
            if let Ok(v) = std::env::var(k) {
                env.insert(k.to_string(), v);
            }
        }
        if let Some(t) = self.traces {
            env.insert(
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                format!("http://127.0.0.1:{}", t.otlp_port),
            );
            env.insert(
                "OTEL_TRACES_SAMPLER".into(),
                "parentbased_traceidratio".into(),
            );
            env.insert(
                "OTEL_TRACES_SAMPLER_ARG".into(),
                self.trace_sample.to_string(),
            );
            // A second rather than the SDK's 5 s: `labctl trace` shows a request soon after it
            // ended, and a batch stays small.
            env.insert("OTEL_BSP_SCHEDULE_DELAY".into(), "1000".into());
        }
    }

    /// Replica `i` (from 0) of `binary` on `port`: its two ports, `service_env`, then the shared
    /// environment.
    fn replica(
        &self,
        binary: &str,
        i: usize,
        port: u16,
        service_env: BTreeMap<String, String>,
    ) -> ProcSpec {
        let mut env = BTreeMap::new();
        env.insert("LAB_HTTP__PORT".into(), port.to_string());
        env.insert(
            "LAB_ADMIN__PORT".into(),
            supervise::admin_port(port).to_string(),
        );
        env.extend(service_env);
        self.apply(&mut env);
        ProcSpec {
            name: format!("{binary}-{}", i + 1),
            binary: binary.into(),
            port,
            admin_port: supervise::admin_port(port),
            env,
        }
    }
}

/// The database URLs the services connect with: each its own least-privilege role, or the
/// owner's URL with `--no-service-roles` (then the services are told a superuser is allowed:
/// they refuse to start as one otherwise).
struct ServiceDbs {
    gateway: DbEnv,
    entity: DbEnv,
    enrichment: DbEnv,
}

/// One service's database settings, as its environment.
struct DbEnv {
    url: String,
    allow_superuser: bool,
}

impl DbEnv {
    fn env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([("LAB_DATABASE__URL".to_string(), self.url.clone())]);
        if self.allow_superuser {
            env.insert("LAB_DATABASE__ALLOW_SUPERUSER".into(), "true".into());
        }
        env
    }
}

impl ServiceDbs {
    /// Every service's URL, derived from the owner's `database_url`.
    fn of(args: &UpArgs, database_url: &str) -> anyhow::Result<Self> {
        let db_as = |role: &str| -> anyhow::Result<DbEnv> {
            Ok(if args.no_service_roles {
                DbEnv {
                    url: database_url.to_string(),
                    allow_superuser: true,
                }
            } else {
                DbEnv {
                    url: lab_db::role_url(database_url, role, None)?,
                    allow_superuser: false,
                }
            })
        };
        Ok(ServiceDbs {
            gateway: db_as(lab_db::GATEWAY_ROLE)?,
            entity: db_as(lab_db::ENTITY_SERVICE_ROLE)?,
            enrichment: db_as(lab_db::ENRICHMENT_ROLE)?,
        })
    }
}

/// The Redis URLs the services connect with: the gateway as its ACL user, every other service as
/// the services' user (`lab_flags::acl`: rate-limit keys for the gateway, the flags read only
/// for all). labctl itself keeps the URL it was given (`LAB_REDIS_URL`): it writes the flags.
pub struct RedisUrls {
    gateway: String,
    service: String,
}

impl RedisUrls {
    /// The URLs of `users` (made by [`lab_flags::acl::new_users`]) on the Redis at `redis_url`.
    pub fn of(redis_url: &str, users: &[lab_flags::acl::User]) -> anyhow::Result<Self> {
        let url_of = |role| -> anyhow::Result<String> {
            let user = users
                .iter()
                .find(|u| u.role == role)
                .with_context(|| format!("no Redis user for {role:?}"))?;
            lab_flags::acl::url_as(redis_url, user)
        };
        Ok(RedisUrls {
            gateway: url_of(lab_flags::acl::Role::Gateway)?,
            service: url_of(lab_flags::acl::Role::Service)?,
        })
    }

    fn apply(&self, p: &mut ProcSpec) {
        if p.binary == "edge-gateway" {
            p.env
                .insert("LAB_FLAGS__REDIS_URL".into(), self.gateway.clone());
            p.env
                .insert("LAB_RATELIMIT__REDIS_URL".into(), self.gateway.clone());
        } else {
            p.env
                .insert("LAB_FLAGS__REDIS_URL".into(), self.service.clone());
        }
    }
}

/// Where `labctl up` keeps the lab's Redis users and their passwords (readable by its owner
/// only), for `labctl fault start redis` to create them again in a Redis that forgot them.
pub fn redis_users_file(state_dir: &Path) -> PathBuf {
    state_dir.join("run").join("redis-users.json")
}

/// Create the lab's Redis users (fresh passwords) in the Redis at `redis_url`, and keep them in
/// [`redis_users_file`].
async fn create_redis_users(
    redis_url: &str,
    state_dir: &Path,
) -> anyhow::Result<Vec<lab_flags::acl::User>> {
    let users = lab_flags::acl::new_users(lab_flags::store::DEFAULT_NAMESPACE);
    lab_flags::acl::apply(redis_url, lab_flags::store::DEFAULT_NAMESPACE, &users)
        .await
        .context(
            "creating the lab's Redis users (labctl's LAB_REDIS_URL must be allowed ACL SETUSER)",
        )?;
    supervise::private_run_dir(state_dir)?;
    let file = redis_users_file(state_dir);
    let tmp = file.with_extension("tmp");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.write_all(&serde_json::to_vec_pretty(&users)?)?;
    }
    std::fs::rename(&tmp, &file)?;
    Ok(users)
}

/// The users [`create_redis_users`] kept, applied again to the Redis at `redis_url` (one that
/// restarted without persistence has forgotten them). Nothing to do when no lab made any.
pub async fn recreate_redis_users(redis_url: &str, state_dir: &Path) -> anyhow::Result<bool> {
    let file = redis_users_file(state_dir);
    let Ok(text) = std::fs::read(&file) else {
        return Ok(false);
    };
    let users: Vec<lab_flags::acl::User> = serde_json::from_slice(&text)
        .with_context(|| format!("{}: not what labctl up writes", file.display()))?;
    lab_flags::acl::apply(redis_url, lab_flags::store::DEFAULT_NAMESPACE, &users).await?;
    Ok(true)
}

/// `http://127.0.0.1:<port>` of every port, comma-separated.
fn url_list(ports: impl IntoIterator<Item = u16>) -> String {
    ports.into_iter().map(url).collect::<Vec<_>>().join(",")
}

/// The entity-service replicas, one per port, on the database as `db`.
fn entity_services(ports: &[u16], db: &DbEnv, shared: &SharedEnv) -> Vec<ProcSpec> {
    ports
        .iter()
        .enumerate()
        .map(|(i, port)| shared.replica("entity-service", i, *port, db.env()))
        .collect()
}

/// The orchestrator replicas, one per port: entity-service at `entity_urls` (its Service, or
/// every replica), the brokers they publish doc.ingested to, and the retry policy they load.
fn orchestrators(
    ports: &[u16],
    entity_urls: &str,
    kafka: Option<&str>,
    policy: Option<&crate::policy::Policy>,
    shared: &SharedEnv,
) -> Vec<ProcSpec> {
    let mut procs = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let mut env = BTreeMap::new();
        env.insert("LAB_ENTITY__URLS".into(), entity_urls.to_string());
        if let Some(k) = kafka {
            env.insert("LAB_KAFKA__BROKERS".into(), k.to_string());
            // Small batches, held long enough to fill: tansu reports a partition's high watermark
            // as its last batch's base offset + 1, so a batch of N events under-counts the
            // enrichment lag by up to N - 1 on that partition (crates/lab-kafka/src/lag.rs), and
            // 8 bounds that at 7 a partition. One event per batch (exact) made every document its
            // own produce request, and tansu's memory storage pays on every fetch for every batch
            // it holds: at 350 rps the broker took 0.13 -> 0.29 cores over 5 minutes (+0.034 a
            // minute), with batches of up to 8 held 500 ms 0.03 -> 0.05 (+0.004)
            // (scripts/broker-growth.sh, issue 29). 500 ms: at 350 rps each of 3 orchestrators
            // sends ~10 events a second to each of 12 partitions, so a shorter linger leaves
            // batches of one; enrichment is off the request path and its fetch already waits up
            // to 2 s for 64 KiB.
            env.insert(
                "LAB_KAFKA__BATCH_MAX_EVENTS".into(),
                lab_kafka::lag::NATIVE_BATCH_MAX_EVENTS.to_string(),
            );
            env.insert("LAB_KAFKA__LINGER_MS".into(), "500".into());
        }
        if let Some(p) = policy {
            env.insert(
                "LAB_CONFIG_FILE".into(),
                p.path.to_string_lossy().into_owned(),
            );
        }
        procs.push(shared.replica("orchestrator", i, *port, env));
    }
    procs
}

/// The gateway replicas from `--gateway-port` on, on the database as `db`, spreading over the
/// orchestrators on `orch_ports` and those the supervisor's endpoints file adds later.
fn gateways(
    args: &UpArgs,
    orch_ports: &[u16],
    db: &DbEnv,
    state_dir: &Path,
    shared: &SharedEnv,
) -> Vec<ProcSpec> {
    let orch_urls = url_list(orch_ports.iter().copied());
    let orch_admins = url_list(orch_ports.iter().map(|p| supervise::admin_port(*p)));
    let mut procs = Vec::new();
    for i in 0..args.gateways {
        let mut env = db.env();
        env.insert("LAB_UPSTREAM__ORCHESTRATORS".into(), orch_urls.clone());
        env.insert(
            "LAB_UPSTREAM__ORCHESTRATORS_ADMIN".into(),
            orch_admins.clone(),
        );
        // The supervisor's endpoints file: replicas added by `labctl scale` join the rotation
        // without a gateway restart, as a Service gains endpoints.
        env.insert(
            "LAB_UPSTREAM__ORCHESTRATORS_FILE".into(),
            absolute(&supervise::endpoints_file(state_dir, "orchestrator"))
                .display()
                .to_string(),
        );
        let port = args.gateway_port + i;
        procs.push(shared.replica("edge-gateway", i.into(), port, env));
    }
    procs
}

/// The enrichment workers from `--enrichment-port` on, consuming from the brokers `kafka` (in
/// `--enrichment-group`, when named) on the database as `db`.
fn enrichment_workers(args: &UpArgs, kafka: &str, db: &DbEnv, shared: &SharedEnv) -> Vec<ProcSpec> {
    (0..args.enrichment_workers)
        .map(|i| {
            let mut env = db.env();
            env.insert("LAB_KAFKA__BROKERS".into(), kafka.to_string());
            if let Some(g) = &args.enrichment_group {
                env.insert("LAB_KAFKA__GROUP_ID".into(), g.clone());
            }
            shared.replica("enrichment", i.into(), args.enrichment_port + i, env)
        })
        .collect()
}

/// Apply every `--env SERVICE:KEY=VALUE` to that service's replicas, after labctl's own
/// settings so the override wins.
fn apply_env_overrides(procs: &mut [ProcSpec], overrides: &[String]) -> anyhow::Result<()> {
    for o in overrides {
        let (svc, k, v) = parse_env_override(o)?;
        for p in procs.iter_mut().filter(|p| p.binary == svc) {
            p.env.insert(k.clone(), v.clone());
        }
    }
    Ok(())
}

/// `labctl up`: check that the lab can start, prepare the database and Kafka, start the
/// supervisor and wait until every replica (and the enrichment group) is ready.
pub async fn up(
    args: &UpArgs,
    database_url: &str,
    redis_url: &str,
    state_dir: &Path,
) -> anyhow::Result<()> {
    refuse_if_up(state_dir)?;
    let (args, fresh_group) = with_enrichment_group(args)?;
    let args = &args;
    // The services' roles come with the migrations: a database prepared by an older checkout
    // gets them here, before any service connects as one.
    lab_db::migrate(database_url).await?;
    // Each service on its own Redis user, made before any service starts.
    let users = create_redis_users(redis_url, state_dir).await?;
    let plan = plan(
        args,
        database_url,
        &RedisUrls::of(redis_url, &users)?,
        state_dir,
    )?;
    preflight(&plan)?;
    // A new lab starts from the flag store, not from what the last lab's replicas knew.
    for p in &plan.procs {
        let _ = std::fs::remove_file(supervise::flags_file(state_dir, &p.name));
    }
    lab_db::prepare(database_url).await?;
    if let Some(k) = lab_kafka::bootstrap_servers(&args.kafka) {
        let new_group = args.enrichment_group.as_deref().filter(|_| fresh_group);
        prepare_kafka(&k, new_group).await?;
    }
    let pid = supervise::spawn_supervisor(&plan)?;
    println!(
        "supervisor started (pid {pid}); logs in {}",
        state_dir.join("logs").display()
    );

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(args.wait_seconds);
    wait_ready(&client, &plan, pid, deadline, args.wait_seconds, state_dir).await?;
    let workers: Vec<u16> = plan
        .procs
        .iter()
        .filter(|p| p.binary == "enrichment")
        .map(|p| p.admin_port)
        .collect();
    if !workers.is_empty() {
        wait_enrichment_group(&client, &workers, deadline, args.wait_seconds, state_dir).await?;
        println!(
            "enrichment group formed: {} partitions over {} workers",
            lab_api::events::DOC_INGESTED_PARTITIONS,
            workers.len()
        );
    }
    print_lab(args, &plan, state_dir)
}

/// Refuse to start a second lab (or to reseed under a running one: `labctl seed`) while this
/// state directory's supervisor still runs.
pub fn refuse_if_up(state_dir: &Path) -> anyhow::Result<()> {
    if let Some(state) = supervise::read_state(state_dir)? {
        if supervise::process_alive(state.supervisor_pid) {
            bail!(
                "a lab is already up (supervisor pid {}); run `labctl status` or `labctl down`",
                state.supervisor_pid
            );
        }
    }
    Ok(())
}

/// The plans of the native labs up on this machine: every live `labctl supervise --plan PATH`
/// process (their state directories are other than this one's, which `refuse_if_up` checked).
/// An error where `/proc` cannot be read: the caller then assumes another lab may be up.
pub fn other_labs_up() -> anyhow::Result<Vec<PathBuf>> {
    Ok(supervisors()?.into_iter().map(|(_, plan)| plan).collect())
}

/// Every live `labctl supervise --plan PATH` process: its pid and its plan as given on its
/// command line (relative to its working directory, when relative).
fn supervisors() -> anyhow::Result<Vec<(u32, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").context("reading /proc")? {
        let Ok(entry) = entry else { continue };
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A process may end between the listing and the read: skip it.
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if let Some(i) = args
            .windows(2)
            .position(|w| w[0] == b"supervise" && w[1] == b"--plan")
        {
            if let Some(plan) = args.get(i + 2).filter(|p| !p.is_empty()) {
                found.push((
                    pid,
                    PathBuf::from(String::from_utf8_lossy(plan).into_owned()),
                ));
            }
        }
    }
    Ok(found)
}

/// The live supervisor of `state_dir`'s lab found by its command line: one that has not written
/// its state yet (it does on its first tick, after starting every replica), or whose state file
/// is gone. An experiment stopped while its lab was starting left such a supervisor behind.
fn supervisor_by_plan(state_dir: &Path) -> Option<u32> {
    let want = std::fs::canonicalize(state_dir.join("run").join("plan.json")).ok()?;
    supervisors().ok()?.into_iter().find_map(|(pid, plan)| {
        let plan = if plan.is_absolute() {
            plan
        } else {
            std::fs::read_link(format!("/proc/{pid}/cwd"))
                .ok()?
                .join(plan)
        };
        (std::fs::canonicalize(plan).ok()? == want && supervise::process_alive(pid)).then_some(pid)
    })
}

/// `args` with the enrichment consumer group filled in: a new group per run
/// (`enrichment-workers-<unix seconds>`, see `--enrichment-group`) unless one is named; and
/// whether it is such a new group.
fn with_enrichment_group(args: &UpArgs) -> anyhow::Result<(UpArgs, bool)> {
    let mut args = args.clone();
    let fresh_group = args.enrichment_group.is_none();
    if fresh_group {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        args.enrichment_group = Some(format!(
            "{}-{}",
            lab_api::events::ENRICHMENT_GROUP,
            now.as_secs()
        ));
    }
    Ok((args, fresh_group))
}

/// Refuse to start when a service binary is missing or a port the plan needs (a replica's, a
/// Service's, or the trace receiver's) is in use.
fn preflight(plan: &Plan) -> anyhow::Result<()> {
    for p in &plan.procs {
        let bin = plan.bin_dir.join(&p.binary);
        anyhow::ensure!(
            bin.exists(),
            "{} not found; build the services first (cargo build --release) or pass --bin-dir",
            bin.display()
        );
        for (port, what) in [(p.port, "port"), (p.admin_port, "admin port")] {
            TcpListener::bind(("127.0.0.1", port)).with_context(|| {
                format!(
                    "{what} {port} for {} is in use (another lab? `labctl down`)",
                    p.name
                )
            })?;
        }
    }
    for svc in &plan.services {
        TcpListener::bind(("127.0.0.1", svc.port)).with_context(|| {
            format!(
                "port {} for the {} Service is in use (another lab? `labctl down`; or \
                 --entity-service-port)",
                svc.port, svc.name
            )
        })?;
    }
    if let Some(t) = &plan.traces {
        for (port, what) in [(t.otlp_port, "--otlp-port"), (t.api_port, "--traces-port")] {
            TcpListener::bind(("127.0.0.1", port)).with_context(|| {
                format!(
                    "port {port} for the trace receiver ({what}) is in use (another lab? \
                     `labctl down`; or --trace-sample 0 to run without it)"
                )
            })?;
        }
    }
    Ok(())
}

/// Make sure doc.ingested exists on the brokers `k`; a `new_group` (one made for this run)
/// starts at the topic's log end.
///
/// With a new group (the default) the topic is first emptied: deleted and created again. No
/// later lab reads an earlier lab's events (each has a group of its own that starts at the log
/// end), and the native broker (tansu, memory storage) pays for every event it holds on every
/// fetch: at 400 documents/s it took 0.37 ms of CPU per event when empty and 1.62 ms holding
/// the ~350,000 events of a replay, a rate-limit storm and a few loads, so a lab ran slower the
/// more labs had run before it, and a replay's second mode on a fuller broker than its first
/// (issue 29). A named group (`--enrichment-group`) keeps the topic and its events, and so does
/// another native lab up on this machine ([`other_labs_up`]), or not knowing whether one is.
async fn prepare_kafka(k: &str, new_group: Option<&str>) -> anyhow::Result<()> {
    use lab_api::events::{DOC_INGESTED_PARTITIONS, DOC_INGESTED_TOPIC};
    let timeout = Duration::from_secs(10);
    let context =
        || format!("Kafka at {k} (scripts/deps.sh starts one; --kafka '' runs the lab without)");
    // Never from under a reader: another lab on the same brokers (a scenarios check's own lab,
    // in another state directory) may be consuming it.
    // Never from under a reader: another native lab on this machine (a scenarios check's own
    // lab, in another state directory) may be consuming it. (The broker cannot tell: tansu lists
    // no live members of a group.) This lab's own supervisor is not up yet (`refuse_if_up`).
    let emptied = match (new_group, other_labs_up()) {
        (None, _) => false,
        (Some(_), Ok(others)) if others.is_empty() => {
            lab_kafka::topic::recreate(k, DOC_INGESTED_TOPIC, DOC_INGESTED_PARTITIONS, 1, timeout)
                .await
                .with_context(context)?;
            println!(
                "kafka: {DOC_INGESTED_TOPIC} x{DOC_INGESTED_PARTITIONS} on {k} (emptied: created \
                 anew)"
            );
            true
        }
        (Some(_), Ok(others)) => {
            let plans: Vec<String> = others.iter().map(|p| p.display().to_string()).collect();
            println!(
                "kafka: {DOC_INGESTED_TOPIC} kept, not emptied: another lab is up ({})",
                plans.join(", ")
            );
            false
        }
        (Some(_), Err(e)) => {
            println!(
                "kafka: {DOC_INGESTED_TOPIC} kept, not emptied: cannot tell whether another lab \
                 is up ({e:#})"
            );
            false
        }
    };
    if !emptied {
        let ensured =
            lab_kafka::topic::ensure(k, DOC_INGESTED_TOPIC, DOC_INGESTED_PARTITIONS, 1, timeout)
                .await
                .with_context(context)?;
        println!("kafka: {DOC_INGESTED_TOPIC} x{DOC_INGESTED_PARTITIONS} on {k} ({ensured:?})");
    }
    if let Some(group) = new_group {
        let (k2, g2) = (k.to_string(), group.to_string());
        tokio::task::spawn_blocking(move || {
            lab_kafka::lag::start_group_at_log_end(
                &k2,
                &g2,
                DOC_INGESTED_TOPIC,
                Duration::from_secs(10),
            )
        })
        .await??;
        println!("kafka: consumer group {group} starts at the log end");
    }
    Ok(())
}

/// Poll every replica's /readyz until all pass; fails when the supervisor (`pid`) exits or the
/// `deadline` passes first.
async fn wait_ready(
    client: &reqwest::Client,
    plan: &Plan,
    pid: u32,
    deadline: Instant,
    wait_seconds: u64,
    state_dir: &Path,
) -> anyhow::Result<()> {
    let logs = state_dir.join("logs");
    let mut pending: Vec<&ProcSpec> = plan.procs.iter().collect();
    while !pending.is_empty() {
        if !supervise::process_alive(pid) {
            bail!(
                "the supervisor exited; see {}",
                logs.join("supervisor.log").display()
            );
        }
        if Instant::now() >= deadline {
            let names: Vec<_> = pending.iter().map(|p| p.name.as_str()).collect();
            bail!(
                "not ready after {wait_seconds} s: {names:?}; see the logs in {}",
                logs.display()
            );
        }
        let mut still = Vec::new();
        for p in pending {
            let ok = client
                .get(format!("{}/readyz", url(p.admin_port)))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if !ok {
                still.push(p);
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Ready is not yet routable: every replica behind a Service must be in it too.
    for svc in &plan.services {
        let want: Vec<String> = plan
            .procs
            .iter()
            .filter(|p| p.binary == svc.name)
            .map(|p| format!("127.0.0.1:{}", p.port))
            .collect();
        loop {
            let ready = crate::service::read_ready(&svc.ready_file)?.unwrap_or_default();
            if want.iter().all(|w| ready.contains(w)) {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} replicas ready but not all in its Service after {wait_seconds} s (in it: \
                     {ready:?}); see {}",
                    svc.name,
                    logs.join("supervisor.log").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Print what is up: every replica's URLs, the public API, and where the traces go.
fn print_lab(args: &UpArgs, plan: &Plan, state_dir: &Path) -> anyhow::Result<()> {
    println!("lab is up:");
    for p in &plan.procs {
        println!(
            "  {:<18} {}  (admin {})",
            p.name,
            url(p.port),
            url(p.admin_port)
        );
    }
    for svc in &plan.services {
        println!(
            "  {:<18} {}  (a Service: one address, per-connection balancing over the ready \
             replicas)",
            svc.name,
            url(svc.port)
        );
    }
    println!("public API: POST {}/v1/extract", url(args.gateway_port));
    match (
        &plan.traces,
        supervise::read_state(state_dir)?.and_then(|s| s.traces_api),
    ) {
        (Some(t), Some(api)) => println!(
            "traces: {:.0}% of requests into the lab's receiver (OTLP on 127.0.0.1:{}, API {api}): \
             labctl trace list",
            args.trace_sample * 100.0,
            t.otlp_port
        ),
        (Some(_), None) => println!(
            "traces: the receiver did not start (see {}); the services drop their spans",
            state_dir.join("logs").join("supervisor.log").display()
        ),
        (None, _) => match std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Ok(e) if !e.trim().is_empty() => println!("traces: exported to {e}"),
            _ => println!("traces: off (--trace-sample 0)"),
        },
    }
    Ok(())
}

/// Wait until the enrichment workers on `admin_ports` own every partition of doc.ingested between
/// them, stably (`labctl up`, and `labctl rollout restart enrichment` between workers). On tansu
/// a group can be wedged for good (two members that left at once, e.g. a lab stopped before
/// `labctl down` stopped its consumers one by one, or a rollout that stopped the second worker
/// while the group was still rebalancing): say so instead of leaving a silently growing lag.
pub async fn wait_enrichment_group(
    client: &reqwest::Client,
    admin_ports: &[u16],
    deadline: Instant,
    wait_seconds: u64,
    state_dir: &Path,
) -> anyhow::Result<()> {
    let partitions = f64::from(lab_api::events::DOC_INGESTED_PARTITIONS);
    // Formed = every worker owns some partitions and together they own all of them, on polls
    // spanning more than a heartbeat (2 s): "12 + 0" is a join still in progress.
    let mut stable_since: Option<Instant> = None;
    loop {
        let mut owned = Vec::new();
        for port in admin_ports {
            let mut n = 0.0;
            if let Ok(r) = client.get(format!("{}/metrics", url(*port))).send().await {
                let text = r.text().await.unwrap_or_default();
                n = lab_core::exposition::samples(&text)
                    .filter(|s| s.name == "enrichment_assigned_partitions")
                    .map(|s| s.value)
                    .sum::<f64>();
            }
            owned.push(n);
        }
        let total: f64 = owned.iter().sum();
        // More workers than partitions: some legitimately own none.
        let formed = total == partitions
            && (owned.len() as f64 > partitions || owned.iter().all(|n| *n > 0.0));
        if formed {
            let since = *stable_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_millis(2500) {
                return Ok(());
            }
        } else {
            stable_since = None;
        }
        if Instant::now() >= deadline {
            bail!(
                "the enrichment workers own {owned:?} of {partitions} partitions of \
                 doc.ingested after {wait_seconds} s: the consumer group did not form. On tansu \
                 this is a known broker limitation (a group a member left during a rebalance \
                 stays wedged; scripts/README.md); restart the broker with `scripts/deps.sh \
                 --restart-kafka`, then `labctl down` and `labctl up` again. Logs: {}",
                state_dir.join("logs").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn down(state_dir: &Path) -> anyhow::Result<()> {
    let pid = match supervise::read_state(state_dir)? {
        Some(state) if supervise::process_alive(state.supervisor_pid) => state.supervisor_pid,
        state => {
            if let Some(state) = state {
                let _ = std::fs::remove_file(supervise::state_file(state_dir));
                println!(
                    "supervisor {} is gone; removed its stale state",
                    state.supervisor_pid
                );
            }
            match supervisor_by_plan(state_dir) {
                Some(pid) => {
                    println!("supervisor {pid} is starting (no state written yet): stopping it");
                    pid
                }
                None => {
                    println!(
                        "no lab is up (no {})",
                        supervise::state_file(state_dir).display()
                    );
                    return Ok(());
                }
            }
        }
    };
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    // The supervisor stops the Kafka consumers one at a time (up to 15 s each, 4 s apart), then
    // the rest (up to 15 s): 60 s covers the worst case of the default lab.
    let deadline = Instant::now() + Duration::from_secs(60);
    while supervise::process_alive(pid) {
        if Instant::now() >= deadline {
            bail!("supervisor {pid} did not stop within 60 s (see .lab/logs/supervisor.log)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("lab is down");
    Ok(())
}

pub async fn status(state_dir: &Path, json: bool) -> anyhow::Result<()> {
    let Some(state) = supervise::read_state(state_dir)? else {
        println!("no lab is up");
        return Ok(());
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let mut rows = Vec::new();
    for p in &state.procs {
        let ready = client
            .get(format!("{}/readyz", url(p.admin_port)))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        rows.push(serde_json::json!({
            "name": p.name, "url": url(p.port), "admin_url": url(p.admin_port), "pid": p.pid,
            "ready": ready, "restarts": p.restarts, "last_exit": p.last_exit,
            "rollouts": p.rollouts, "oom_kills": p.oom_kills,
            "memory_limit_bytes": p.memory_limit_bytes,
        }));
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "supervisor_pid": state.supervisor_pid,
                "supervisor_alive": supervise::process_alive(state.supervisor_pid),
                "replicas": rows,
            }))?
        );
        return Ok(());
    }
    println!(
        "supervisor pid {} ({})",
        state.supervisor_pid,
        if supervise::process_alive(state.supervisor_pid) {
            "alive"
        } else {
            "GONE"
        }
    );
    println!(
        "{:<18} {:<24} {:>8} {:>6} {:>8} {:>8} {:>4} {:>9}  last exit",
        "replica", "url", "pid", "ready", "restarts", "rollouts", "oom", "mem limit"
    );
    for r in rows {
        println!(
            "{:<18} {:<24} {:>8} {:>6} {:>8} {:>8} {:>4} {:>9}  {}",
            r["name"].as_str().unwrap_or(""),
            r["url"].as_str().unwrap_or(""),
            r["pid"]
                .as_u64()
                .map(|p| p.to_string())
                .unwrap_or("-".into()),
            if r["ready"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            r["restarts"],
            r["rollouts"],
            r["oom_kills"],
            r["memory_limit_bytes"]
                .as_u64()
                .map(|b| format!("{} MiB", b >> 20))
                .unwrap_or("-".into()),
            r["last_exit"].as_str().unwrap_or("-"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_take_lab_settings_and_the_tokio_worker_count_only() {
        assert!(parse_env_override("orchestrator:LAB_ENTITY__TIMEOUT_MS=5").is_ok());
        assert_eq!(
            parse_env_override("entity-service:TOKIO_WORKER_THREADS=1").unwrap(),
            (
                "entity-service".to_string(),
                "TOKIO_WORKER_THREADS".to_string(),
                "1".to_string()
            )
        );
        for refused in [
            "entity-service:TOKIO_WORKER_THREADS=0",
            "entity-service:TOKIO_WORKER_THREADS=two",
            "orchestrator:PATH=/tmp",
            "nobody:TOKIO_WORKER_THREADS=1",
        ] {
            assert!(parse_env_override(refused).is_err(), "{refused}");
        }
    }

    /// A stand-in supervisor (`sh -c "read _" supervise --plan PATH`, `read` a builtin on a pipe
    /// never written: no child of its own, so nothing forked from it can carry this command line
    /// on after the kill — `sleep` did). `spawn` returns once the child is forked, not once it
    /// has run `sh`: until then its command line is still this test's. Waits for the exec
    /// (bounded).
    #[allow(
        clippy::disallowed_methods,
        reason = "a plain #[test] thread polling /proc: no runtime to block"
    )]
    fn wait_for_exec(child: &std::process::Child) {
        let cmdline = format!("/proc/{}/cmdline", child.id());
        for _ in 0..500 {
            if std::fs::read(&cmdline).is_ok_and(|c| c.windows(6).any(|w| w == b"--plan")) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// `labctl up` keeps doc.ingested while another lab's supervisor runs on this machine: a
    /// process whose command line is `... supervise --plan PATH` is found while it lives.
    #[test]
    fn another_labs_supervisor_is_found_while_it_runs() {
        let plan = format!("/tmp/other-lab-{}/run/plan.json", std::process::id());
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read _", "supervise", "--plan", &plan])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_exec(&child);
        let found = other_labs_up().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            found.contains(&PathBuf::from(&plan)),
            "{plan} not among {found:?}"
        );
        assert!(!other_labs_up().unwrap().contains(&PathBuf::from(&plan)));
    }

    /// `labctl down` finds a lab whose supervisor has not written its state yet (an experiment
    /// stopped while its lab was starting) by its plan: given relative to the supervisor's own
    /// working directory, as `labctl up` gives it with the default `.lab`.
    #[test]
    fn a_starting_supervisor_is_found_by_its_plan() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let root =
            std::env::temp_dir().join(format!("starting-lab-{}-{nanos}", std::process::id()));
        let state = root.join("state");
        std::fs::create_dir_all(state.join("run")).unwrap();
        std::fs::write(state.join("run").join("plan.json"), "{}").unwrap();
        // Another lab's state directory, with a plan of its own: not this lab's supervisor.
        std::fs::create_dir_all(root.join("other").join("run")).unwrap();
        std::fs::write(root.join("other").join("run").join("plan.json"), "{}").unwrap();
        assert_eq!(supervisor_by_plan(&state), None);
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read _", "supervise", "--plan", "state/run/plan.json"])
            .current_dir(&root)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_exec(&child);
        let found = supervisor_by_plan(&state);
        let other = supervisor_by_plan(&root.join("other"));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found, Some(child.id()));
        assert_eq!(other, None);
        assert_eq!(supervisor_by_plan(&state), None);
        let _ = std::fs::remove_dir_all(&root);
    }
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        up: UpArgs,
    }

    fn plan_of(args: &[&str]) -> anyhow::Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("up").chain(args.iter().copied()))?;
        let users = [
            lab_flags::acl::User {
                role: lab_flags::acl::Role::Gateway,
                name: "lab-gateway".into(),
                password: "g".into(),
            },
            lab_flags::acl::User {
                role: lab_flags::acl::Role::Service,
                name: "lab-service".into(),
                password: "s".into(),
            },
        ];
        plan(
            &cli.up,
            "postgres://postgres@127.0.0.1:5432/retry_storm_lab",
            &RedisUrls::of("redis://127.0.0.1:6379", &users)?,
            Path::new("/tmp/lab-test-state"),
        )
    }

    fn env<'a>(p: &'a Plan, name: &str, key: &str) -> Option<&'a str> {
        p.procs
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.env.get(key))
            .map(String::as_str)
    }

    #[test]
    fn every_replica_has_an_admin_port_and_each_service_its_own_role() {
        let p = plan_of(&["--kafka", "127.0.0.1:9092", "--bin-dir", "/tmp"]).unwrap();
        for s in &p.procs {
            assert_eq!(s.admin_port, s.port + 1000, "{}", s.name);
            assert_eq!(
                s.env.get("LAB_ADMIN__PORT"),
                Some(&s.admin_port.to_string())
            );
        }
        assert_eq!(
            env(&p, "edge-gateway-1", "LAB_UPSTREAM__ORCHESTRATORS_ADMIN"),
            Some("http://127.0.0.1:9101,http://127.0.0.1:9102,http://127.0.0.1:9103")
        );
        for (name, role) in [
            ("edge-gateway-1", "lab_gateway"),
            ("entity-service-1", "lab_entity_service"),
            ("enrichment-1", "lab_enrichment"),
        ] {
            assert_eq!(
                env(&p, name, "LAB_DATABASE__URL"),
                Some(format!("postgres://{role}@127.0.0.1:5432/retry_storm_lab").as_str())
            );
            // Each service refuses a superuser's connection unless told otherwise.
            assert_eq!(env(&p, name, "LAB_DATABASE__ALLOW_SUPERUSER"), None);
        }
        // Redis: the gateway as its ACL user (flags and rate limiter), the others as theirs.
        for (name, var, url) in [
            (
                "edge-gateway-1",
                "LAB_FLAGS__REDIS_URL",
                "redis://lab-gateway:g@127.0.0.1:6379",
            ),
            (
                "edge-gateway-1",
                "LAB_RATELIMIT__REDIS_URL",
                "redis://lab-gateway:g@127.0.0.1:6379",
            ),
            (
                "orchestrator-2",
                "LAB_FLAGS__REDIS_URL",
                "redis://lab-service:s@127.0.0.1:6379",
            ),
            (
                "entity-service-1",
                "LAB_FLAGS__REDIS_URL",
                "redis://lab-service:s@127.0.0.1:6379",
            ),
            (
                "enrichment-1",
                "LAB_FLAGS__REDIS_URL",
                "redis://lab-service:s@127.0.0.1:6379",
            ),
        ] {
            assert_eq!(env(&p, name, var), Some(url), "{name} {var}");
        }
        assert_eq!(env(&p, "orchestrator-1", "LAB_DATABASE__URL"), None);
        let owner = plan_of(&["--no-service-roles", "--bin-dir", "/tmp"]).unwrap();
        assert_eq!(
            env(&owner, "entity-service-1", "LAB_DATABASE__URL"),
            Some("postgres://postgres@127.0.0.1:5432/retry_storm_lab")
        );
        assert_eq!(
            env(&owner, "entity-service-1", "LAB_DATABASE__ALLOW_SUPERUSER"),
            Some("true")
        );
    }

    #[test]
    fn orchestrators_reach_entity_service_through_one_service_address_unless_told_otherwise() {
        let p = plan_of(&["--bin-dir", "/tmp", "--entity-services", "3"]).unwrap();
        assert_eq!(
            env(&p, "orchestrator-2", "LAB_ENTITY__URLS"),
            Some("http://127.0.0.1:8200")
        );
        assert_eq!(p.services.len(), 1);
        let svc = &p.services[0];
        assert_eq!((svc.name.as_str(), svc.port), ("entity-service", 8200));
        assert!(svc.endpoints_file.ends_with("run/endpoints-entity-service"));
        let direct = plan_of(&["--bin-dir", "/tmp", "--entity-address", "replicas"]).unwrap();
        assert_eq!(
            env(&direct, "orchestrator-1", "LAB_ENTITY__URLS"),
            Some("http://127.0.0.1:8201,http://127.0.0.1:8202")
        );
        assert!(direct.services.is_empty());
        let moved = plan_of(&["--bin-dir", "/tmp", "--entity-port", "21201"]).unwrap();
        assert_eq!(
            moved.services[0].port, 21200,
            "the Service moves with the lab"
        );
    }

    #[test]
    fn env_overrides_reach_only_the_named_service_and_bad_ones_are_refused() {
        let p = plan_of(&[
            "--bin-dir",
            "/tmp",
            "--env",
            "edge-gateway:LAB_AUTH__FLOOD_GUARD=false",
        ])
        .unwrap();
        assert_eq!(
            env(&p, "edge-gateway-1", "LAB_AUTH__FLOOD_GUARD"),
            Some("false")
        );
        assert_eq!(env(&p, "orchestrator-1", "LAB_AUTH__FLOOD_GUARD"), None);
        for bad in ["gateway:LAB_A__B=1", "edge-gateway:AUTH=1", "edge-gateway"] {
            let err = plan_of(&["--bin-dir", "/tmp", "--env", bad]).unwrap_err();
            assert!(err.to_string().contains("SERVICE:LAB_"), "{bad}: {err}");
        }
        // Another Redis namespace than the one the lab's Redis users may touch.
        for other in [
            "orchestrator:LAB_FLAGS__NAMESPACE=x",
            "edge-gateway:LAB_RATELIMIT__NAMESPACE=x",
        ] {
            let err = plan_of(&["--bin-dir", "/tmp", "--env", other]).unwrap_err();
            assert!(err.to_string().contains("Redis users"), "{other}: {err}");
        }
        plan_of(&[
            "--bin-dir",
            "/tmp",
            "--env",
            "orchestrator:LAB_FLAGS__NAMESPACE=lab",
        ])
        .unwrap();
    }
}
