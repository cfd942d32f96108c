//! Build and run entity-service.

use std::future::Future;
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use lab_core::health::Health;
use lab_core::metrics::{self, Metrics};
use lab_core::server::Server;

use crate::configuration::Settings;
use crate::resolve::{self, AppState};
use crate::telemetry::ServiceMetrics;

/// Request bodies above this are refused with 413: 256 spans of 256 characters is ~70 KiB of
/// JSON; 1 MiB leaves room and still bounds memory per request.
const MAX_BODY_BYTES: usize = 1 << 20;

pub struct Application {
    server: Server,
}

/// `entity-service/<pid>.<n>`: unique per replica, also when tests run several in one process.
fn application_name() -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "entity-service/{}.{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

impl Application {
    /// Connects lazily: the pool opens connections on first use, so the service starts (and
    /// answers /livez, /readyz) while PostgreSQL is still coming up; requests fail with 503 until
    /// it is reachable. That is the shallow-readiness contract.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let wait = match settings.database.pool_wait_ms {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        };
        // Each replica's connections carry a name of their own, so `pg_stat_activity` can be read
        // per replica (`entity_db_backends`) and an operator sees whose query is running.
        let application_name = application_name();
        let pool = lab_db::hot_path_pool(
            &settings.database.url,
            &application_name,
            settings.database.pool_size,
            wait,
            lab_db::Superuser::allowed(settings.database.allow_superuser),
        )?;
        lab_db::refuse_superuser_at_start(&pool).await?;
        let metrics = Metrics::new();
        // As many turns as the pool has connections: a turn is a connection to come.
        let gate = crate::fair::FairGate::new(settings.database.pool_size);
        let svc = ServiceMetrics::new(&metrics, pool.clone(), gate.clone());
        // The hot statement's plan and the staleness of entities, refreshed every few seconds on
        // a connection outside the pool (../shared/design/stale-stats-trigger.md).
        crate::dbstats::spawn(&metrics, settings.database.url.clone(), application_name);
        let flags = settings.flags.watch(&metrics).await?;
        let health = Health::new();
        flags.gate(&health);
        let state = AppState {
            cost: Default::default(),
            gate,
            flags,
            pool,
            sessions: Default::default(),
            metrics: svc.clone(),
            settings: settings.resolve.clone(),
        };
        let arrivals = lab_core::arrivals::Arrivals::new();
        let api = Router::new()
            .route("/v1/resolve", post(resolve::resolve))
            .route("/v1/popular", axum::routing::get(resolve::popular))
            .with_state(state)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn_with_state(
                svc.http.clone(),
                metrics::track,
            ))
            // Outermost: every request counted as it arrives, per 100 ms (the backoff's waves).
            .layer(axum::middleware::from_fn_with_state(
                arrivals.clone(),
                lab_core::arrivals::count,
            ));
        let server = Server::bind(&settings.http, &settings.admin, api, health, metrics)
            .await?
            .with_admin_routes(lab_core::arrivals::admin_router(arrivals));
        Ok(Self { server })
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The admin listener's port (`/livez`, `/readyz`, `/metrics`).
    pub fn admin_port(&self) -> u16 {
        self.server.admin_port()
    }

    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.server.run_until_stopped(shutdown).await
    }
}
