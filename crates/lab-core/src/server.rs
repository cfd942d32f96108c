//! Serve a router until told to stop, then drain within a bound; and, on a listener of its own,
//! the admin surface (`/livez`, `/readyz`, `/metrics`).
//!
//! Two listeners, as Envoy's and linkerd-proxy's admin listeners: the public port carries only
//! the service's API, so nothing that can reach it can read the fleet's internals (replica URLs,
//! the live fault and mode flags) from `/metrics`, and a probe never competes with the API for
//! a connection. The admin listener binds loopback in the native lab and the pod network in a
//! cluster, where a NetworkPolicy admits only the kubelet's probes and Prometheus. It outlives
//! the public listener's drain, so readiness reads "draining" to every prober until the last
//! in-flight request has been answered.

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

/// `[admin]` in every service's configuration: where `/livez`, `/readyz` and `/metrics` are
/// served (never on the public port).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    pub host: String,
    /// 0 binds an ephemeral port (tests).
    pub port: u16,
}

/// The bound listeners with their routers, ready to run.
pub struct Server {
    listener: TcpListener,
    router: Router,
    admin_listener: TcpListener,
    admin_router: Router,
    health: Health,
    drain: Duration,
    addr: SocketAddr,
    admin_addr: SocketAddr,
}

impl Server {
    /// Bind `http.host:http.port` for `api` and `admin.host:admin.port` for `/livez`, `/readyz`
    /// and `/metrics`. Unknown routes and wrong methods answer JSON errors on both.
    pub async fn bind(
        http: &HttpSettings,
        admin: &AdminSettings,
        api: Router,
        health: Health,
        metrics: Metrics,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((http.host.as_str(), http.port))
            .await
            .with_context(|| format!("binding {}:{}", http.host, http.port))?;
        let addr = listener.local_addr()?;
        let admin_listener = TcpListener::bind((admin.host.as_str(), admin.port))
            .await
            .with_context(|| {
                format!(
                    "binding the admin listener {}:{} (admin.port must differ from http.port)",
                    admin.host, admin.port
                )
            })?;
        let admin_addr = admin_listener.local_addr()?;
        health.count_failures_in(&metrics);
        let admin_router = Router::new()
            .route("/livez", get(health::livez))
            .route("/readyz", get(health::readyz))
            .with_state(health.clone())
            .merge(
                Router::new()
                    .route("/metrics", get(metrics::handler))
                    .with_state(metrics),
            )
            .fallback(crate::http::not_found)
            .method_not_allowed_fallback(crate::http::method_not_allowed);
        let router = api
            .fallback(crate::http::not_found)
            .method_not_allowed_fallback(crate::http::method_not_allowed);
        Ok(Self {
            listener,
            router,
            admin_listener,
            admin_router,
            health,
            drain: Duration::from_secs(http.drain_seconds),
            addr,
            admin_addr,
        })
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin listener's port (`/livez`, `/readyz`, `/metrics`).
    pub fn admin_port(&self) -> u16 {
        self.admin_addr.port()
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
            admin_listener,
            admin_router,
            health,
            drain,
            addr,
            admin_addr,
        } = self;
        health.mark_started();
        tracing::info!(%addr, %admin_addr, "listening");
        // The admin listener stops only after the public one has drained (or given up), when
        // this function returns: dropping `_admin_stop` ends it.
        let (_admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let served = axum::serve(admin_listener, admin_router)
                .with_graceful_shutdown(async move {
                    let _ = admin_stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "admin listener failed");
            }
        });
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
