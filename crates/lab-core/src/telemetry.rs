//! Structured JSON logs, and OpenTelemetry traces when a collector is configured.
//!
//! # Logs
//! Always on: JSON lines on stdout, filtered by `RUST_LOG` (or the service's default). The log
//! layer sees events only, never spans, so a span costs nothing unless traces are on.
//!
//! # Traces
//! On when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and
//! `OTEL_SDK_DISABLED` is not `true`; unset, no exporter, no thread and no span is built (every
//! `info_span!` is a disabled callsite). Exported as OTLP over gRPC to that endpoint, in batches
//! from the SDK's own thread (a slow or absent collector drops spans from a bounded queue; it
//! never slows a request). The standard variables apply: `OTEL_SERVICE_NAME` (default: the name
//! passed to [`init`]), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`, and the sampler:
//!
//! - `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, read by the SDK. The lab's default is the
//!   spec's `parentbased_always_on`: every trace is kept, so every error is kept. Production
//!   would set `parentbased_traceidratio` with e.g. `0.01` — head sampling decides at the root,
//!   before anyone knows the request will fail, so it CANNOT keep the errors it did not pick.
//!   Keeping all errors at a low rate means head-sampling everything here and letting the
//!   collector decide once the trace is complete (tail sampling in
//!   `deploy/otel-collector/config.yaml`: errors and slow traces always, 1% of the rest).
//!
//! Span names are the postmortem's: `edge-gateway.HandleExtract`, `orchestrator.Extract`,
//! `entity.Resolve`, `entity.Resolve.attempt.N`, then entity-service's `entity-service.Resolve`
//! and its `db.query` spans. Context crosses every hop as a W3C `traceparent`
//! ([`propagation`]); the HTTP server span is opened by [`crate::metrics::track`].
//!
//! Call [`shutdown`] after the server stops, so the last batch is exported.

pub mod propagation;
pub mod recorder;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::{filter_fn, FilterExt, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// The instrumentation scope our spans are reported under.
const SCOPE: &str = "retry-storm-lab";

/// True once an OpenTelemetry layer is installed; read (one atomic load) before doing any
/// per-request tracing work such as parsing a `traceparent`.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The provider, kept for [`shutdown`].
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether spans are being recorded and exported by this process.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Install the global subscriber: JSON logs (`RUST_LOG` wins over `default_filter`) and, when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OTLP traces. Call from inside the Tokio runtime (the gRPC
/// channel lives on it). Safe to call more than once (tests): later calls are no-ops.
pub fn init(service: &'static str, default_filter: &str) {
    let exporter = match otlp_requested() {
        Some(endpoint) => match build_otlp_exporter() {
            Ok(e) => Some((endpoint, e)),
            Err(reason) => {
                // Logs are not up yet: say it on stderr and run without traces rather than not
                // at all (a missing collector must never take a service down).
                eprintln!("{service}: traces disabled: {reason}");
                None
            }
        },
        None => None,
    };
    let (traces, endpoint) = match exporter {
        Some((endpoint, e)) => {
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(e)
                .with_resource(resource(service))
                .build();
            (Some(provider), Some(endpoint))
        }
        None => (None, None),
    };
    let installed = install(logs_layer(default_filter), traces);
    if installed {
        tracing::info!(
            service,
            version = env!("CARGO_PKG_VERSION"),
            traces_endpoint = endpoint.as_deref().unwrap_or("off"),
            "logging initialised"
        );
    }
}

/// Install a subscriber whose spans go to `exporter` synchronously (no batching, no thread) and
/// no logs. For tests: see [`recorder::Recorder`]. Returns false if a global subscriber was
/// already installed.
pub fn init_with_exporter<E: SpanExporter + 'static>(service: &'static str, exporter: E) -> bool {
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .with_resource(resource(service))
        .build();
    install(None::<tracing_subscriber::layer::Identity>, Some(provider))
}

/// Install a subscriber that exports spans over OTLP/gRPC to `endpoint`, in batches every
/// `every`, and no logs: the real exporter path of [`init`] with the endpoint given rather than
/// read from the environment. For tests of a receiver (crates/lab-traces). Returns false if a
/// global subscriber was already installed.
pub fn init_with_otlp(
    service: &'static str,
    endpoint: &str,
    every: std::time::Duration,
) -> Result<bool, String> {
    use opentelemetry_otlp::WithExportConfig as _;
    use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor};
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| e.to_string())?;
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(every)
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource(service))
        .build();
    Ok(install(
        None::<tracing_subscriber::layer::Identity>,
        Some(provider),
    ))
}

/// Export what is still queued and stop the exporter. Call once, after the server has stopped;
/// a no-op when traces are off.
pub async fn shutdown() {
    if let Some(provider) = PROVIDER.get().cloned() {
        // Blocks until the batch thread has exported; that export runs on this runtime's gRPC
        // channel, so wait on a blocking thread rather than on a runtime worker.
        let result = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = result {
            tracing::warn!(error = %e, "exporting the last spans failed");
        }
    }
}

/// The endpoint, when OTLP traces are asked for by the standard variables.
fn otlp_requested() -> Option<String> {
    let disabled = std::env::var("OTEL_SDK_DISABLED")
        .map(|v| v.trim().eq_ignore_ascii_case("true"))
        .unwrap_or(false);
    if disabled {
        return None;
    }
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok())
    .map(|v| v.trim().to_string())
    .find(|v| !v.is_empty())
}

fn build_otlp_exporter() -> Result<opentelemetry_otlp::SpanExporter, String> {
    use opentelemetry_otlp::WithExportConfig as _;
    if tokio::runtime::Handle::try_current().is_err() {
        return Err("telemetry::init was called outside a Tokio runtime".into());
    }
    if let Ok(p) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL") {
        if p.trim() != "grpc" {
            eprintln!("OTEL_EXPORTER_OTLP_PROTOCOL={p} ignored: this build exports OTLP over gRPC");
        }
    }
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_protocol(opentelemetry_otlp::Protocol::Grpc)
        .build()
        .map_err(|e| e.to_string())
}

fn resource(service: &'static str) -> Resource {
    let builder = Resource::builder();
    // `OTEL_SERVICE_NAME` (read by the builder) wins; the lab sets it to the same name anyway.
    if std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty()) {
        builder.build()
    } else {
        builder.with_service_name(service).build()
    }
}

/// JSON logs of events only: spans are for the trace layer, and a span the log layer does not
/// want is not built at all when traces are off.
fn logs_layer(default_filter: &str) -> Option<impl Layer<Registry> + Send + Sync> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let events_only = filter_fn(|meta| meta.is_event());
    Some(
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_target(false)
            .with_filter(filter.and(events_only)),
    )
}

/// Which spans and events become OpenTelemetry data: ours and every library's at INFO and above,
/// except the exporter's own stack — a span about exporting spans would feed itself.
fn traces_filter() -> Targets {
    Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("opentelemetry", LevelFilter::OFF)
        .with_target("opentelemetry_sdk", LevelFilter::OFF)
        .with_target("opentelemetry_otlp", LevelFilter::OFF)
        .with_target("tonic", LevelFilter::OFF)
        .with_target("h2", LevelFilter::OFF)
        .with_target("hyper", LevelFilter::OFF)
        .with_target("hyper_util", LevelFilter::OFF)
        .with_target("tower", LevelFilter::OFF)
}

fn install<L>(logs: Option<L>, traces: Option<SdkTracerProvider>) -> bool
where
    L: Layer<Registry> + Send + Sync,
{
    let otel = traces.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(SCOPE))
            // Thread ids and source locations: noise in a waterfall, bytes on every span.
            .with_threads(false)
            .with_location(false)
            .with_filter(traces_filter())
    });
    let ok = tracing_subscriber::registry()
        .with(logs)
        .with(otel)
        .try_init()
        .is_ok();
    if ok {
        if let Some(provider) = traces {
            let _ = PROVIDER.set(provider);
            ENABLED.store(true, Ordering::Relaxed);
        }
    }
    ok
}
