//! Runtime plumbing every lab service shares.
//!
//! # Layout
//! - [`config`]: layered configuration — the service's defaults file (compiled in, every number
//!   with a comment saying why), then an optional `LAB_CONFIG_FILE`, then `LAB_SECTION__KEY`
//!   environment variables.
//! - [`telemetry`]: structured JSON logs through `tracing`; OpenTelemetry traces over OTLP when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` is set; W3C `traceparent` in and out of HTTP headers and any
//!   string key/value carrier (Kafka); an in-memory span recorder for tests.
//! - [`metrics`]: one Prometheus registry per service, process and runtime collectors, and the
//!   HTTP request metrics middleware.
//! - [`process`]: the process collector with its CPU counter to the kernel's tick.
//! - [`exposition`]: reading the Prometheus text format back (game days, tests).
//! - [`health`]: the shallow `/livez` and `/readyz` (postmortem, "Code After": readiness answers
//!   "can THIS process serve a request?", never "is my dependency happy?").
//! - [`http`]: the `{error: {code, message}}` body, a JSON extractor whose rejections use it, and
//!   fallbacks so no route answers plain text.
//! - [`server`]: bind, serve, and shut down gracefully within a drain bound.
//! - [`arrivals`]: requests arrived per 100 ms, on the admin listener (the backoff's waves).

pub mod arrivals;
pub mod call;
pub mod config;
pub mod exposition;
pub mod health;
pub mod http;
pub mod metrics;
pub mod process;
pub mod server;
pub mod telemetry;
