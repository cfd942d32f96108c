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
    handlers: tokio_util::task::TaskTracker,
}

/// How long a stopping orchestrator waits, after the HTTP drain, for legacy handlers still
/// running after their callers hung up (LAB-BUG(go-handler)) — so their cache fills and events
/// are not cut mid-way: 2 s is what the native lab's supervisor (15 s before SIGKILL) leaves after
/// the 10 s HTTP drain and the 3 s event flush. What is still running then is logged, with its
/// count, and dropped with the process.
const HANDLER_DRAIN: Duration = Duration::from_secs(2);

/// How long a stopping orchestrator waits for its queued `doc.ingested` events to reach the
/// broker, after the HTTP drain (10 s): 3 s keeps the whole stop under the 15 s the native lab's
/// supervisor waits before SIGKILL and Kubernetes' 30 s grace period; a healthy broker takes
/// milliseconds (`kafka_producer_delivery_seconds`; up to the native lab's 500 ms linger in normal
/// running, which a flush does not wait out), and what is left is logged with its count.
const EVENT_FLUSH: Duration = Duration::from_secs(3);

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.validate()?;
        let metrics = Metrics::new();
        let cache = Arc::new(ResolutionCache::new(settings.cache.capacity, &metrics));
        let table = settings.hop_table()?;
        let flags = settings.flags.watch(&metrics).await?;
        let health = Health::new();
        flags.gate(&health);
        warm_up(&settings, &flags.snapshot(), &cache, &metrics).await;
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
        let handlers = tokio_util::task::TaskTracker::new();
        let state = AppState {
            handlers: handlers.clone(),
            cache: cache.clone(),
            entity: entity.clone(),
            batch_size: settings.entity.batch_size,
            batches_in_flight: settings.entity.batches_in_flight,
            max_spans: settings.entity.max_spans,
            dispatch_total: table.orchestrator.total,
            events: events.clone(),
            orphaned: metrics.register(
                prometheus::IntCounter::new(
                    "orchestrator_handlers_orphaned_total",
                    "Legacy extract handlers whose caller hung up before the answer (counted at \
                     the hang-up); each runs on to the end (cache fill, event, answer into a \
                     closed connection), as a Go handler does",
                )
                .expect("valid metric"),
            ),
        };
        let api = Router::new()
            .route("/internal/extract", post(extract::extract))
            .with_state(state)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn_with_state(http, metrics::track));
        health.set_check(readiness_check(entity.clone()));
        let server = Server::bind(&settings.http, &settings.admin, api, health, metrics)
            .await?
            .with_admin_routes(lab_core::arrivals::admin_router_at(
                "/debug/attempts",
                entity.attempt_starts(),
            ));
        Ok(Self {
            server,
            cache,
            events,
            handlers,
        })
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The admin listener's port (`/livez`, `/readyz`, `/metrics`).
    pub fn admin_port(&self) -> u16 {
        self.server.admin_port()
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
        self.handlers.close();
        if tokio::time::timeout(HANDLER_DRAIN, self.handlers.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = self.handlers.len(),
                "legacy handlers still running after their callers left; dropped with the process"
            );
        }
        if let Some(events) = self.events {
            // Blocking (librdkafka's flush): off the async threads. What is still queued after it
            // is purged when the producer drops, and counted.
            let left = tokio::task::spawn_blocking(move || events.flush(EVENT_FLUSH)).await?;
            tracing::info!(undelivered = left, "doc.ingested producer flushed");
        }
        served
    }
}

/// The fix's boot warm-up (`cache.warmup_on_boot`; on in resilient mode): the most popular
/// entities from entity-service into the cache, before the replica serves — so a rolling restart
/// or a scale-up does not hand entity-service a wave of cold caches. Bounded by
/// `cache.warmup_budget_ms`; a failure is logged and counted, and the replica starts cold.
async fn warm_up(
    settings: &Settings,
    flags: &lab_flags::Snapshot,
    cache: &ResolutionCache,
    metrics: &Metrics,
) {
    // follow-mode: the warm-up ships with the fix — on when the fleet runs it (resilient mode,
    // or the hotfix rolled out to 100%).
    let on = match flags.variant("cache.warmup_on_boot") {
        "on" => true,
        "off" => false,
        _ => mode(flags) == Mode::Resilient || flags.number("hotfix.canary_percent") >= 100.0,
    };
    let outcomes = metrics.counter_vec(
        "orchestrator_cache_warmup_total",
        "Boot warm-ups of the cache, by outcome (ok, failed, skipped: the flag said off)",
        &["outcome"],
    );
    let entries = metrics.gauge(
        "orchestrator_cache_warmup_entries",
        "Entries the last boot warm-up put in the cache",
    );
    if !on || settings.cache.warmup_entries <= 0 {
        outcomes.with_label_values(&["skipped"]).inc();
        return;
    }
    let budget = Duration::from_millis(settings.cache.warmup_budget_ms);
    let started = std::time::Instant::now();
    let http = match reqwest::Client::builder()
        .timeout(budget)
        .no_proxy()
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cache warm-up: no HTTP client; starting cold");
            outcomes.with_label_values(&["failed"]).inc();
            return;
        }
    };
    // Each replica in turn, within the one budget: the first that answers fills the cache.
    for base in settings.entity.url_list() {
        let left = budget.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        let got = http
            .get(format!(
                "{}/v1/popular?limit={}",
                base.trim_end_matches('/'),
                settings.cache.warmup_entries
            ))
            .timeout(left)
            .header(
                lab_api::headers::REQUEST_BUDGET_MS,
                left.as_millis().to_string(),
            )
            // Not a user's request: entity-service counts it apart.
            .header(lab_api::headers::TRAFFIC, lab_api::headers::TRAFFIC_WARMUP)
            .send()
            .await
            .and_then(|r| r.error_for_status());
        let body = match got {
            Ok(r) => r.json::<lab_api::wire::PopularResponse>().await,
            Err(e) => Err(e),
        };
        match body {
            Ok(b) => {
                let n = cache.warm(b.entities);
                entries.set(n as i64);
                outcomes.with_label_values(&["ok"]).inc();
                tracing::info!(
                    entries = n,
                    ms = started.elapsed().as_millis() as u64,
                    "cache warmed up on boot"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(entity_service = %base, error = %e, "cache warm-up attempt failed")
            }
        }
    }
    outcomes.with_label_values(&["failed"]).inc();
    tracing::warn!(
        budget_ms = budget.as_millis() as u64,
        "cache warm-up failed within its budget; starting cold"
    );
}

/// `/readyz` beyond "started and not draining", by `readiness.depth`: `shallow` never asks
/// entity-service; `deep` (and `follow-mode` in legacy mode) runs the legacy client's deep check,
/// reproducing the postmortem's fleet-wide eviction.
fn readiness_check(entity: Arc<EntityClients>) -> lab_core::health::ReadinessCheck {
    Arc::new(move || {
        let flags = entity.flags().snapshot();
        // follow-mode: deep while the fleet runs the legacy code — until the hotfix is rolled
        // out to every request (hotfix.canary_percent = 100), whose readiness is shallow.
        let deep = match flags.variant("readiness.depth") {
            "deep" => true,
            "shallow" => false,
            _ => mode(&flags) == Mode::Legacy && flags.number("hotfix.canary_percent") < 100.0,
        };
        if !deep {
            return None;
        }
        let entity = entity.clone();
        Some(Box::pin(async move { entity.deep_ready().await }))
    })
}
