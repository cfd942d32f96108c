//! The orchestrator's two entity-service clients, chosen per request by `client.mode`.
//!
//! Both live in the process at once, on the same metrics registry, so a flag flip changes the
//! next request's behaviour without a restart:
//! - `legacy` — `entity-client-legacy`, the postmortem's "Code Before": the 10 s package default,
//!   a detached retry loop the caller's cancellation never reaches, 200/400/800 ms backoff,
//!   retries on any 5xx, 64 connection slots per host.
//! - `resilient` — `entity-client`, "Code After": the hop table's budget, cancellation, retry
//!   budget, full jitter, breaker, concurrency limit; each control switchable for ablation.
//!
//! The postmortem's kill switch `retries.entity.enabled` applies in both modes.

use std::sync::Arc;

use entity_client::{ClientConfig, Controls};
use lab_api::wire::{ResolveRequest, ResolveResponse};
use lab_core::call::CallContext;
use lab_core::http::ApiError;
use lab_core::metrics::Metrics;
use lab_flags::{Flags, Snapshot};

use crate::configuration::Settings;

pub struct EntityClients {
    legacy: entity_client_legacy::Client,
    resilient: entity_client::Client,
    flags: Arc<Flags>,
    /// Both clients' user attempts as each started, per 100 ms (`/debug/attempts`).
    attempt_starts: lab_core::arrivals::Arrivals,
}

/// Which client a request uses, read once per request from the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Legacy,
    Resilient,
}

pub fn mode(flags: &Snapshot) -> Mode {
    match flags.variant("client.mode") {
        "legacy" => Mode::Legacy,
        _ => Mode::Resilient,
    }
}

/// The client one request uses: the mode, or — while the mode is legacy — the hotfix canary's
/// share of requests (`hotfix.canary_percent`, by request id, as the gateway decides it). A
/// request without an id (not from the gateway) follows the mode.
pub fn mode_for(flags: &Snapshot, request_id: Option<&str>) -> Mode {
    match request_id {
        Some(id) if flags.fixed_for(id) => Mode::Resilient,
        Some(_) => Mode::Legacy,
        None => mode(flags),
    }
}

/// The fixed client's per-request switches, from the flags.
pub fn controls(flags: &Snapshot) -> Controls {
    Controls {
        retries_enabled: flags.enabled("retries.entity.enabled"),
        deadline_propagation: flags.enabled("resilience.deadline_propagation"),
        retry_budget: flags.enabled("resilience.retry_budget"),
        jitter: flags.enabled("resilience.jitter"),
        breaker: flags.enabled("resilience.breaker"),
        concurrency_limit: flags.enabled("resilience.concurrency_limit"),
        adaptive_limit: match flags.variant("resilience.concurrency_adaptive") {
            "on" | "aimd" => Some(entity_client::limiter::Adapt::Aimd),
            "vegas" => Some(entity_client::limiter::Adapt::Vegas),
            "off" => None,
            // "callee", the flag's default (lab-flags answers the default for an unknown one).
            _ => Some(entity_client::limiter::Adapt::Callee),
        },
        tenant_share: flags.enabled("resilience.tenant_fairness"),
        pushback: flags.enabled("resilience.pushback"),
    }
}

impl EntityClients {
    pub fn new(settings: &Settings, flags: Arc<Flags>, metrics: &Metrics) -> anyhow::Result<Self> {
        let urls = settings.entity.url_list();
        let table = settings.hop_table()?;
        // LAB-BUG(timeout-inversion): built with the package defaults for everything but the
        // lab-scale slot count; the 10 s DEFAULT_TIMEOUT comes along silently, exactly as
        // `httpx.New()` with zero options did.
        // The entity-client families, registered once and handed to both clients: their samples
        // add up on the same series whichever client a request used.
        let client_metrics = entity_client::metrics::ClientMetrics::register(metrics)?;
        let attempt_starts = client_metrics.attempt_starts();
        let legacy = entity_client_legacy::Client::with_options(
            urls.clone(),
            entity_client_legacy::client::Options {
                max_conns_per_host: Some(settings.legacy.max_conns_per_host),
                ..Default::default()
            },
            client_metrics.clone(),
        )?
        // The deep readiness probe's calls: `entity_probe_*`, never a user's attempt.
        .with_probe_metrics(entity_client::metrics::ClientMetrics::register_probe(
            metrics,
        )?);
        // LAB-FIX(timeout-inversion): the budget is a required argument, taken from the
        // validated hop table.
        let resilient = entity_client::Client::new(
            ClientConfig {
                base_urls: urls,
                budget: table.entity.clone(),
                retry_budget: entity_client::policy::retry_budget(&settings.policy)?,
                breaker: entity_client::policy::breaker(&settings.policy)?,
                max_concurrency: settings.resilient.max_concurrency,
                max_concurrency_adaptive: settings.resilient.max_concurrency_adaptive,
            },
            client_metrics,
        )?
        .with_backoff(entity_client::policy::backoff(&settings.policy)?);
        Ok(Self {
            legacy,
            resilient,
            flags,
            attempt_starts,
        })
    }

    pub fn flags(&self) -> &Arc<Flags> {
        &self.flags
    }

    /// The user attempts' start times per 100 ms, both clients together (one mode runs at a
    /// time): the backoff's clock, before the legacy client's slot wait.
    pub fn attempt_starts(&self) -> lab_core::arrivals::Arrivals {
        self.attempt_starts.clone()
    }

    /// Resolve one batch with the client the flags choose for this request.
    pub async fn resolve(
        &self,
        flags: &Snapshot,
        ctx: &CallContext,
        req: &ResolveRequest,
    ) -> Result<ResolveResponse, ApiError> {
        match mode_for(flags, ctx.request_id.as_deref()) {
            Mode::Legacy => self
                .legacy
                .resolve(ctx, req, flags.enabled("retries.entity.enabled"))
                .await
                .map_err(legacy_error),
            Mode::Resilient => self
                .resilient
                .resolve(ctx, req, &controls(flags))
                .await
                .map_err(resilient_error),
        }
    }

    /// LAB-BUG(deep-readiness): the legacy readiness check — a resolve through the same client
    /// and the same connection slots as production traffic (with the same retry kill switch).
    pub async fn deep_ready(&self) -> Result<(), String> {
        let retries = self.flags.snapshot().enabled("retries.entity.enabled");
        self.legacy.ready(retries).await.map_err(|e| e.to_string())
    }
}

/// Both clients answer through the error table: the row of what decided the failure (this hop's
/// client, or entity-service's own row passed through), with the client's text as the message.
fn legacy_error(e: entity_client_legacy::Error) -> ApiError {
    tracing::error!(error = %e, origin = %e.failure().origin(), "entity-service call failed");
    ApiError::from_failure(e.failure(), e.to_string())
}

fn resilient_error(e: entity_client::Error) -> ApiError {
    ApiError::from_failure(e.failure(), e.to_string())
}
