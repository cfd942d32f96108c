//! Serve a router until told to stop, then drain within a bound.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::health::{self, Health};
use crate::metrics::{self, Metrics};

/// `[http]` in every service's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    pub host: String,
    /// 0 binds an ephemeral port (tests).
    pub port: u16,
    /// Upper bound on the graceful drain after SIGTERM, in seconds.
    pub drain_seconds: u64,
}

/// A bound listener with its router, ready to run.
pub struct Server {
    listener: TcpListener,
    router: Router,
    health: Health,
    drain: Duration,
    addr: SocketAddr,
}

impl Server {
    /// Bind `http.host:http.port` and attach `/livez`, `/readyz` and `/metrics` next to `api`.
    /// Unknown routes and wrong methods answer JSON errors.
    pub async fn bind(
        http: &HttpSettings,
        api: Router,
        health: Health,
        metrics: Metrics,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((http.host.as_str(), http.port))
            .await
            .with_context(|| format!("binding {}:{}", http.host, http.port))?;
        let addr = listener.local_addr()?;
        health.count_failures_in(&metrics);
        let ops = Router::new()
            .route("/livez", get(health::livez))
            .route("/readyz", get(health::readyz))
            .with_state(health.clone())
            .merge(
                Router::new()
                    .route("/metrics", get(metrics::handler))
                    .with_state(metrics),
            );
        let router = api
            .merge(ops)
            .fallback(crate::http::not_found)
            .method_not_allowed_fallback(crate::http::method_not_allowed);
        Ok(Self {
            listener,
            router,
            health,
            drain: Duration::from_secs(http.drain_seconds),
            addr,
        })
    }

    /// Replace `/readyz` (the legacy orchestrator's deep readiness will need this).
    pub fn with_router(mut self, f: impl FnOnce(Router) -> Router) -> Self {
        self.router = f(self.router);
        self
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve until `shutdown` resolves; then stop accepting, report not-ready, and give
    /// in-flight requests up to `drain_seconds` to finish before returning anyway.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Server {
            listener,
            router,
            health,
            drain,
            addr,
        } = self;
        health.mark_started();
        tracing::info!(%addr, "listening");
        let stopping = Arc::new(Notify::new());
        let notify = stopping.clone();
        let h = health.clone();
        let serve = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                shutdown.await;
                h.begin_drain();
                notify.notify_one();
            })
            .into_future();
        tokio::pin!(serve);
        tokio::select! {
            res = &mut serve => return res.context("server failed"),
            _ = stopping.notified() => {}
        }
        tracing::info!(
            drain_seconds = drain.as_secs(),
            "shutdown requested; draining in-flight requests"
        );
        match tokio::time::timeout(drain, serve).await {
            Ok(res) => res.context("server failed while draining")?,
            Err(_) => tracing::warn!(
                drain_seconds = drain.as_secs(),
                "drain bound reached; dropping the requests still in flight"
            ),
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// Resolves on SIGTERM (Kubernetes, labctl) or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot install the SIGTERM handler");
                std::future::pending::<()>().await
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!(signal = "SIGINT", "shutdown signal"),
        _ = term => tracing::info!(signal = "SIGTERM", "shutdown signal"),
    }
}
