//! Build and run the orchestrator.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use lab_core::health::Health;
use lab_core::metrics::{self, HttpMetrics, Metrics, CALLEE_BUCKETS};
use lab_core::server::Server;

use crate::cache::ResolutionCache;
use crate::configuration::Settings;
use crate::entity::EntityClient;
use crate::extract::{self, AppState};

/// The gateway limits public bodies to 1 MiB; the internal body adds a tenant id and nothing else.
const MAX_BODY_BYTES: usize = 1 << 20;

pub struct Application {
    server: Server,
    cache: Arc<ResolutionCache>,
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.validate()?;
        let metrics = Metrics::new();
        let cache = Arc::new(ResolutionCache::new(settings.cache.capacity, &metrics));
        let entity = Arc::new(EntityClient::new(
            settings.entity.url_list(),
            Duration::from_millis(settings.entity.timeout_ms),
            &metrics,
        )?);
        let http = HttpMetrics::new(
            &metrics,
            "orchestrator",
            "to /internal/extract",
            CALLEE_BUCKETS,
        );
        let state = AppState {
            cache: cache.clone(),
            entity,
            batch_size: settings.entity.batch_size,
        };
        let api = Router::new()
            .route("/internal/extract", post(extract::extract))
            .with_state(state)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn_with_state(http, metrics::track));
        let server = Server::bind(&settings.http, api, Health::new(), metrics).await?;
        Ok(Self { server, cache })
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The resolution cache (tests read its size).
    pub fn cache(&self) -> Arc<ResolutionCache> {
        self.cache.clone()
    }

    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.server.run_until_stopped(shutdown).await
    }
}
