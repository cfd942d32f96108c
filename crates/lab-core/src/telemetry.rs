//! Structured JSON logs.

use tracing_subscriber::EnvFilter;

/// Install the global JSON log subscriber. `RUST_LOG` wins over `default_filter`.
/// Safe to call more than once (tests): later calls are no-ops.
pub fn init(service: &'static str, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let installed = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .with_env_filter(filter)
        .try_init()
        .is_ok();
    if installed {
        tracing::info!(
            service,
            version = env!("CARGO_PKG_VERSION"),
            "logging initialised"
        );
    }
}
