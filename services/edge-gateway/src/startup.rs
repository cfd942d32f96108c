//! Build and run the gateway.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use lab_core::health::Health;
use lab_core::metrics::{self, HttpMetrics, Metrics};
use lab_core::server::Server;
use sqlx::postgres::PgPoolOptions;

use crate::auth::KeyStore;
use crate::configuration::Settings;
use crate::extract::{self, AppState};
use crate::upstream::Upstreams;

/// Buckets of `gateway_request_duration_seconds`, as the postmortem's gateway had them: they end
/// at the 3 s budget because nothing the gateway observes can last longer. That is the point —
/// this histogram is the "blindfold with axis labels"; read entity-service's for the truth.
const GATEWAY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0,
];

/// Every `x-lab-*` request header removed at the public door: they are the hops' own contract
/// (`x-lab-traffic` keeps probes and warm-ups out of the user-facing series; others carry
/// budgets and origins), and a client that sent one could hide its requests from the 5xx alert
/// or raise the amplification ratio at will (issue 28). Nothing outside the lab sends one.
pub async fn strip_internal_headers(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let internal: Vec<axum::http::HeaderName> = req
        .headers()
        .keys()
        .filter(|k| k.as_str().starts_with(INTERNAL_PREFIX))
        .cloned()
        .collect();
    for k in internal {
        req.headers_mut().remove(k);
    }
    next.run(req).await
}

/// The prefix of every header the lab's hops send each other (lowercase: header names are).
const INTERNAL_PREFIX: &str = "x-lab-";

pub struct Application {
    server: Server,
    /// The readiness prober and the key preload: stopped with the server.
    background: Vec<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Application {
    /// Builds the gateway and runs one round of readiness probes before returning, so a gateway
    /// that starts after its orchestrators serves at once. PostgreSQL is connected lazily: the
    /// gateway starts while it is down and answers 503 `auth_unavailable` until it is back.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.validate()?;
        let metrics = Metrics::new();
        let superuser = lab_db::Superuser::allowed(settings.database.allow_superuser);
        let pool = PgPoolOptions::new()
            .max_connections(settings.database.pool_size)
            .acquire_timeout(Duration::from_secs(2))
            .after_connect(move |conn, _| {
                Box::pin(async move { lab_db::check_superuser_sqlx(conn, superuser).await })
            })
            .connect_lazy(&settings.database.url)?;
        if superuser == lab_db::Superuser::Refuse {
            lab_db::refuse_superuser_at_start_sqlx(&pool).await?;
        }
        let keys = Arc::new(
            KeyStore::new(
                pool,
                Duration::from_millis(settings.auth.cache_ttl_ms),
                Duration::from_millis(settings.auth.stale_ttl_ms),
                Duration::from_millis(settings.auth.refresh_timeout_ms),
                &metrics,
            )
            .with_flood_guard(settings.auth.flood_guard),
        );
        // LAB-FIX(auth-flood): every key read once at start (the cache TTL apart while
        // PostgreSQL cannot answer), so a fresh gateway knows the real tenants' keys before a
        // flood of never-seen ids can queue ahead of them.
        let preload = settings.auth.flood_guard.then(|| {
            AbortOnDrop(keys.spawn_preload(Duration::from_millis(settings.auth.cache_ttl_ms)))
        });
        let flags = settings.flags.watch(&metrics).await?;
        let health = Health::new();
        flags.gate(&health);
        let limiter = crate::ratelimit::RateLimiter::new(settings.ratelimit.clone(), &metrics)?;
        let upstreams = Upstreams::new(settings.upstream.clone(), &metrics)?;
        upstreams.probe_all().await;
        let prober = AbortOnDrop(upstreams.spawn_prober());
        let http = reqwest::Client::builder()
            // A refused or unroutable orchestrator must fail fast so the request can move on.
            .connect_timeout(Duration::from_secs(1))
            .build()?;
        let state = AppState {
            keys,
            upstreams,
            http,
            budget: settings.budget.clone(),
            limits: settings.limits.clone(),
            legacy: settings.legacy.clone(),
            flags,
            limiter,
            upstream_metrics: crate::extract::UpstreamMetrics::new(&metrics),
        };
        let request_metrics = HttpMetrics::new(
            &metrics,
            lab_contract::Hop::EdgeGateway,
            "gateway",
            "to /v1/extract",
            GATEWAY_BUCKETS,
        )
        .with_span_name("edge-gateway.HandleExtract")
        .public()
        .trusting_caller_trace(settings.edge.trust_traceparent);
        let api = Router::new()
            .route("/v1/extract", post(extract::extract))
            .with_state(state)
            .layer(axum::extract::DefaultBodyLimit::max(
                settings.limits.max_body_bytes,
            ))
            .layer(axum::middleware::from_fn_with_state(
                request_metrics,
                metrics::track,
            ))
            // Outermost: what the hops below trust from each other never comes from outside.
            .layer(axum::middleware::from_fn(strip_internal_headers));
        // Outside the layers above: the document is not an extraction and has no body limit.
        let docs = Router::new()
            .route("/openapi.json", get(crate::openapi::openapi_json))
            .with_state(Arc::<str>::from(crate::openapi::document()));
        let api = api.merge(docs);
        let server = Server::bind(&settings.http, &settings.admin, api, health, metrics).await?;
        Ok(Self {
            server,
            background: std::iter::once(prober).chain(preload).collect(),
        })
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
        let Application { server, background } = self;
        let result = server.run_until_stopped(shutdown).await;
        drop(background);
        result
    }
}
