//! Build and run an enrichment worker.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use lab_core::health::Health;
use lab_core::metrics::Metrics;
use lab_core::server::Server;
use tokio::sync::watch;

use crate::configuration::Settings;
use crate::worker::{self, Worker, WorkerMetrics};

pub struct Application {
    server: Server,
    worker: Worker,
    drain: Duration,
}

impl Application {
    /// Connects lazily, like entity-service: PostgreSQL or the broker still starting only delays
    /// the first event (the write is retried; librdkafka reconnects), and /livez, /readyz answer
    /// at once (shallow readiness: the worker serves no requests).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.validate()?;
        let metrics = Metrics::new();
        let pool = lab_db::hot_path_pool(
            &settings.database.url,
            "enrichment",
            settings.database.pool_size,
            None,
            lab_db::Superuser::allowed(settings.database.allow_superuser),
        )?;
        lab_db::refuse_superuser_at_start(&pool).await?;
        let flags = settings.flags.watch(&metrics).await?;
        let health = Health::new();
        flags.gate(&health);
        let consumer = worker::consumer(&settings, WorkerMetrics::new(&metrics))?;
        let offsets_reader = worker::offsets_reader(&settings)?;
        let server = Server::bind(
            &settings.http,
            &settings.admin,
            Router::new(),
            health,
            metrics,
        )
        .await?;
        Ok(Self {
            server,
            drain: Duration::from_secs(settings.http.drain_seconds),
            worker: Worker {
                consumer,
                offsets_reader,
                pool,
                flags,
                settings,
            },
        })
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The admin listener's port (`/livez`, `/readyz`, `/metrics`).
    pub fn admin_port(&self) -> u16 {
        self.server.admin_port()
    }

    /// Work until `shutdown` resolves; then finish the event in hand, commit, leave the group.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let consumer = self.worker.consumer.clone();
        let work = tokio::spawn(self.worker.run(stop_rx));
        let served = self
            .server
            .run_until_stopped(async move {
                shutdown.await;
                let _ = stop_tx.send(true);
            })
            .await;
        match tokio::time::timeout(self.drain, work).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "enrichment worker task failed"),
            Err(_) => tracing::warn!("the worker did not stop within the drain bound"),
        }
        // Dropping the last handle closes the consumer: it leaves the group (blocking, bounded by
        // librdkafka), so the partitions move now instead of after the session timeout.
        tokio::task::spawn_blocking(move || drop(consumer)).await?;
        served
    }
}
