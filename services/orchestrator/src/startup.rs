//! Build and run the orchestrator.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use lab_core::health::Health;
use lab_core::metrics::{self, HttpMetrics, Metrics, CALLEE_BUCKETS};
use lab_core::server::Server;
use lab_kafka::EventProducer;

use crate::cache::ResolutionCache;
use crate::configuration::Settings;
use crate::entity::{mode, EntityClients, Mode};
use crate::extract::{self, AppState};

/// The gateway limits public bodies to 1 MiB; the internal body adds a tenant id and nothing else.
const MAX_BODY_BYTES: usize = 1 << 20;

pub struct Application {
    server: Server,
    cache: Arc<ResolutionCache>,
    events: Option<Arc<EventProducer>>,
}

/// How long a stopping orchestrator waits for its queued `doc.ingested` events to reach the
/// broker, after the HTTP drain (10 s): 3 s keeps the whole stop under the 15 s the native lab's
/// supervisor waits before SIGKILL and Kubernetes' 30 s grace period; a healthy broker takes
/// milliseconds (`kafka_producer_delivery_seconds`), and what is left is logged with its count.
const EVENT_FLUSH: Duration = Duration::from_secs(3);

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.validate()?;
        let metrics = Metrics::new();
        let cache = Arc::new(ResolutionCache::new(settings.cache.capacity, &metrics));
        let table = settings.hop_table()?;
        let flags = settings.flags.watch(&metrics).await?;
        let entity = Arc::new(EntityClients::new(&settings, flags, &metrics)?);
        let events = EventProducer::new(&settings.kafka, metrics.registry())?.map(Arc::new);
        let http = HttpMetrics::new(
            &metrics,
            lab_contract::Hop::Orchestrator,
            "orchestrator",
            "to /internal/extract",
            CALLEE_BUCKETS,
        )
        .with_span_name("orchestrator.Extract");
        let state = AppState {
            cache: cache.clone(),
            entity: entity.clone(),
            batch_size: settings.entity.batch_size,
            dispatch_total: table.orchestrator.total,
            events: events.clone(),
        };
        let api = Router::new()
            .route("/internal/extract", post(extract::extract))
            .with_state(state)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn_with_state(http, metrics::track));
        let health = Health::new();
        health.set_check(readiness_check(entity.clone()));
        let server = Server::bind(&settings.http, api, health, metrics).await?;
        Ok(Self {
            server,
            cache,
            events,
        })
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
        let served = self.server.run_until_stopped(shutdown).await;
        if let Some(events) = self.events {
            // Blocking (librdkafka's flush): off the async threads. What is still queued after it
            // is purged when the producer drops, and counted.
            let left = tokio::task::spawn_blocking(move || events.flush(EVENT_FLUSH)).await?;
            tracing::info!(undelivered = left, "doc.ingested producer flushed");
        }
        served
    }
}

/// `/readyz` beyond "started and not draining", by `readiness.depth`: `shallow` never asks
/// entity-service; `deep` (and `follow-mode` in legacy mode) runs the legacy client's deep check,
/// reproducing the postmortem's fleet-wide eviction.
fn readiness_check(entity: Arc<EntityClients>) -> lab_core::health::ReadinessCheck {
    Arc::new(move || {
        let flags = entity.flags().snapshot();
        let deep = match flags.variant("readiness.depth") {
            "deep" => true,
            "shallow" => false,
            _ => mode(&flags) == Mode::Legacy,
        };
        if !deep {
            return None;
        }
        let entity = entity.clone();
        Some(Box::pin(async move { entity.deep_ready().await }))
    })
}
