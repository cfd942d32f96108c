//! An in-memory span exporter for tests: every span, as it ends, with the fields a test asserts
//! on (trace id, parent, name, start and end times). Tests read recorded spans instead of
//! standing up an OTLP receiver; what they check — ids, parentage, end times — is exactly what
//! the OTLP exporter would ship.
//!
//! ```text
//! let spans = lab_core::telemetry::recorder::global();
//! // ... drive a request carrying `traceparent: 00-<trace>-<span>-01` ...
//! let trace = spans.wait_for(trace_id, |t| t.iter().any(|s| s.name == "db.query"), timeout).await;
//! ```

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanId, Status};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// One ended span, reduced to what tests compare.
#[derive(Debug, Clone)]
pub struct RecordedSpan {
    pub name: String,
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// `None` for a root span.
    pub parent_span_id: Option<String>,
    pub start: SystemTime,
    pub end: SystemTime,
    /// `server`, `client` or `internal`.
    pub kind: String,
    /// The span's status was set to error.
    pub error: bool,
    /// Attributes, values rendered as strings.
    pub attributes: Vec<(String, String)>,
}

impl RecordedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Collects ended spans; clones share the same store.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    spans: Arc<Mutex<Vec<RecordedSpan>>>,
}

impl Recorder {
    /// Every span of `trace_id` recorded so far, in the order they ended.
    pub fn trace(&self, trace_id: &str) -> Vec<RecordedSpan> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }

    /// Every span called `name` recorded so far, whatever its trace.
    pub fn named(&self, name: &str) -> Vec<RecordedSpan> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }

    /// Poll (every 25 ms, up to `timeout`) until the spans of `trace_id` satisfy `done`, and
    /// return them; on timeout, return what there is (the caller's assertions then say what is
    /// missing).
    pub async fn wait_for(
        &self,
        trace_id: &str,
        done: impl Fn(&[RecordedSpan]) -> bool,
        timeout: Duration,
    ) -> Vec<RecordedSpan> {
        let until = std::time::Instant::now() + timeout;
        loop {
            let spans = self.trace(trace_id);
            if done(&spans) || std::time::Instant::now() >= until {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl SpanExporter for Recorder {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let mut spans = self.spans.lock().unwrap();
        spans.extend(batch.into_iter().map(|s| {
            RecordedSpan {
                name: s.name.to_string(),
                trace_id: s.span_context.trace_id().to_string(),
                span_id: s.span_context.span_id().to_string(),
                parent_span_id: (s.parent_span_id != SpanId::INVALID)
                    .then(|| s.parent_span_id.to_string()),
                start: s.start_time,
                end: s.end_time,
                kind: format!("{:?}", s.span_kind).to_ascii_lowercase(),
                error: matches!(s.status, Status::Error { .. }),
                attributes: s
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect(),
            }
        }));
        Ok(())
    }
}

/// The process-wide recorder: the first call installs the global subscriber with it as the span
/// exporter (traces on, no logs); later calls return the same recorder. Panics if some other
/// global subscriber was installed first.
pub fn global() -> Recorder {
    static GLOBAL: OnceLock<Recorder> = OnceLock::new();
    GLOBAL
        .get_or_init(|| {
            let recorder = Recorder::default();
            assert!(
                super::init_with_exporter("lab-test", recorder.clone()),
                "a global tracing subscriber was already installed"
            );
            recorder
        })
        .clone()
}
