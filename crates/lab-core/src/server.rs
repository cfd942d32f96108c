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
    /// After SIGTERM, how long the listener keeps accepting while every response says
    /// `Connection: close`, before it stops accepting and closes the connections left idle.
    /// Part of `drain_seconds`, so it must be shorter. See [`Server::run_until_stopped`].
    pub drain_linger_ms: u64,
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
    linger: Duration,
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
        let drain = Duration::from_secs(http.drain_seconds);
        let linger = Duration::from_millis(http.drain_linger_ms);
        anyhow::ensure!(
            linger < drain,
            "http.drain_linger_ms ({} ms) must be shorter than http.drain_seconds ({} s): the \
             linger is the first part of the drain",
            http.drain_linger_ms,
            http.drain_seconds
        );
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
            .method_not_allowed_fallback(crate::http::method_not_allowed)
            .layer(axum::middleware::from_fn_with_state(
                health.clone(),
                close_while_draining,
            ));
        Ok(Self {
            listener,
            router,
            admin_listener,
            admin_router,
            health,
            drain,
            linger,
            addr,
            admin_addr,
        })
    }

    /// Serve `extra`'s routes on the admin listener too (a service's own internals: never on
    /// the public port).
    pub fn with_admin_routes(mut self, extra: Router) -> Self {
        self.admin_router = self.admin_router.merge(extra);
        self
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

    /// Serve until `shutdown` resolves; then drain, in two stages, within `drain_seconds`:
    ///
    /// 1. **Linger** (`drain_linger_ms`): `/readyz` reports draining, the listener still
    ///    accepts, and every response carries `Connection: close`. A client's keep-alive
    ///    connection is retired by the answer it carries, at a moment the client knows about,
    ///    instead of being closed under it — the keep-alive race (the server closes an idle
    ///    connection just as the client writes a request to it), which costs that request.
    /// 2. **Close**: stop accepting, close the connections still idle, and give in-flight
    ///    requests what is left of `drain_seconds` before returning anyway.
    ///
    /// The race is only made rare here, not impossible (a connection idle through the whole
    /// linger can still be picked at the instant it closes): the clients fail such a request
    /// over to another replica, since no byte of an answer arrived (`lab_core::http::unanswered`).
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
            linger,
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
                tokio::time::sleep(linger).await;
            })
            .into_future();
        tokio::pin!(serve);
        tokio::select! {
            res = &mut serve => return res.context("server failed"),
            _ = stopping.notified() => {}
        }
        tracing::info!(
            drain_seconds = drain.as_secs(),
            linger_ms = linger.as_millis() as u64,
            "shutdown requested; answering with Connection: close, then draining in-flight requests"
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

/// While the server drains, every answer closes its connection (`Connection: close`: hyper
/// ends the connection after writing it, and the client's pool does not reuse it).
async fn close_while_draining(
    axum::extract::State(health): axum::extract::State<Health>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let mut resp = next.run(req).await;
    if health.is_draining() {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
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
