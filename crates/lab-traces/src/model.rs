//! Spans as the receiver keeps them, and what a trace says about itself.

use serde::{Deserialize, Serialize};

/// How much later than its parent a span may end and still have ended "with" it. Inside one
/// process a child's future is dropped inside its parent's, so it ends first. Across a hop (a
/// server span under the caller's client span) the hang-up has to reach the next process: well
/// under 100 ms on loopback (tests/lab-e2e/tests/traces.rs measures the same bound), while the
/// legacy orphans outlive their parents by seconds.
pub const ORPHAN_SLACK_NANOS: u64 = 100_000_000;

/// One span, flattened from OTLP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanRecord {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// `None` for a root span (no parent, or the parent is in no process we hear from).
    pub parent_span_id: Option<String>,
    pub name: String,
    /// The exporting process's `service.name`.
    pub service: String,
    /// `server`, `client`, `internal`, `producer`, `consumer`.
    pub kind: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// The span's status was set to error.
    pub error: bool,
    /// The attributes, values as text.
    pub attributes: Vec<(String, String)>,
}

impl SpanRecord {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn duration_nanos(&self) -> u64 {
        self.end_unix_nano.saturating_sub(self.start_unix_nano)
    }
}

/// One trace, summarised: what `labctl trace list` prints a line of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub trace_id: String,
    /// The earliest root span's name and service (the user's request: `edge-gateway.HandleExtract`).
    pub root: String,
    pub root_service: String,
    pub start_unix_nano: u64,
    /// The root span's own duration: what the user waited.
    pub root_ms: f64,
    /// From the first span's start to the last synchronous span's end: how long the work a
    /// caller could be waiting for went on (a consumer's later work, [`asynchronous`], aside).
    pub span_ms: f64,
    pub spans: usize,
    pub error_spans: usize,
    /// Spans that ended more than [`ORPHAN_SLACK_NANOS`] after their parent.
    pub orphans: usize,
    /// How long after the root ended the last synchronous span of the trace ended: work for a
    /// caller gone (a consumer's asynchronous work, [`asynchronous`], is not counted).
    pub past_root_ms: f64,
    /// The span that outlived its parent the most, `child > parent`, and by how much.
    pub worst_orphan: Option<String>,
    pub worst_orphan_ms: f64,
}

/// Milliseconds between two instants in nanoseconds since the epoch (0 if `b` is not later).
pub fn ms_between(a: u64, b: u64) -> f64 {
    b.saturating_sub(a) as f64 / 1e6
}

/// The root of a trace: the earliest span whose parent is not in the trace.
pub fn root(spans: &[SpanRecord]) -> Option<&SpanRecord> {
    spans
        .iter()
        .filter(|s| {
            s.parent_span_id
                .as_ref()
                .is_none_or(|p| !spans.iter().any(|x| &x.span_id == p))
        })
        .min_by_key(|s| s.start_unix_nano)
}

/// The span is asynchronous work by contract: a `consumer` span (a Kafka record's processing)
/// or under one. Nobody waits for it, so outliving the request that caused it is what it is
/// for — not an orphan.
pub fn asynchronous(span: &SpanRecord, spans: &[SpanRecord]) -> bool {
    let mut at = Some(span);
    // Bounded by the trace's size: a cycle of parent ids cannot loop forever.
    for _ in 0..=spans.len() {
        let Some(s) = at else {
            return false;
        };
        if s.kind == "consumer" {
            return true;
        }
        at = s
            .parent_span_id
            .as_ref()
            .and_then(|p| spans.iter().find(|x| &x.span_id == p));
    }
    false
}

/// The spans of one trace, summarised.
pub fn summarise(trace_id: &str, spans: &[SpanRecord]) -> Option<Summary> {
    let root = root(spans)?;
    let start = spans.iter().map(|s| s.start_unix_nano).min()?;
    let end = spans.iter().map(|s| s.end_unix_nano).max()?;
    // The synchronous work's end: what a caller could have been waiting for.
    let sync_end = spans
        .iter()
        .filter(|s| !asynchronous(s, spans))
        .map(|s| s.end_unix_nano)
        .max()
        .unwrap_or(end);
    let mut orphans = 0;
    let mut worst: Option<(u64, String)> = None;
    for child in spans.iter().filter(|c| !asynchronous(c, spans)) {
        let Some(parent) = child
            .parent_span_id
            .as_ref()
            .and_then(|p| spans.iter().find(|x| &x.span_id == p))
        else {
            continue;
        };
        let late = child.end_unix_nano.saturating_sub(parent.end_unix_nano);
        if late > ORPHAN_SLACK_NANOS {
            orphans += 1;
            if worst.as_ref().is_none_or(|(w, _)| late > *w) {
                worst = Some((late, format!("{} > {}", child.name, parent.name)));
            }
        }
    }
    Some(Summary {
        trace_id: trace_id.to_string(),
        root: root.name.clone(),
        root_service: root.service.clone(),
        start_unix_nano: start,
        root_ms: root.duration_nanos() as f64 / 1e6,
        span_ms: ms_between(start, sync_end),
        spans: spans.len(),
        error_spans: spans.iter().filter(|s| s.error).count(),
        orphans,
        past_root_ms: ms_between(root.end_unix_nano, sync_end),
        worst_orphan_ms: worst.as_ref().map_or(0.0, |(n, _)| *n as f64 / 1e6),
        worst_orphan: worst.map(|(_, s)| s),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A span of trace `t` from `start` ms to `end` ms.
    pub fn span(id: &str, parent: Option<&str>, name: &str, start: u64, end: u64) -> SpanRecord {
        SpanRecord {
            trace_id: "t".into(),
            span_id: id.into(),
            parent_span_id: parent.map(str::to_string),
            name: name.into(),
            service: "svc".into(),
            kind: "internal".into(),
            start_unix_nano: start * 1_000_000,
            end_unix_nano: end * 1_000_000,
            error: false,
            attributes: vec![],
        }
    }

    /// The postmortem's cover in miniature: the gateway gives up at 3.0 s, the retry loop runs
    /// to 9.8 s.
    pub fn legacy_hangup() -> Vec<SpanRecord> {
        vec![
            span("a", None, "edge-gateway.HandleExtract", 0, 3000),
            span("b", Some("a"), "orchestrator.Extract", 5, 3010),
            span("c", Some("b"), "entity.Resolve", 10, 9800),
            span("d", Some("c"), "entity.Resolve.attempt.0", 10, 2900),
            span("e", Some("c"), "entity.Resolve.attempt.1", 3100, 6000),
            span("f", Some("c"), "entity.Resolve.attempt.2", 6400, 9800),
        ]
    }

    #[test]
    fn a_child_that_outlives_its_parent_is_an_orphan_and_named() {
        let s = summarise("t", &legacy_hangup()).unwrap();
        assert_eq!(s.root, "edge-gateway.HandleExtract");
        assert_eq!(s.root_ms, 3000.0);
        assert_eq!(s.span_ms, 9800.0);
        assert_eq!(s.past_root_ms, 6800.0);
        assert_eq!(s.orphans, 1, "{s:?}");
        assert_eq!(
            s.worst_orphan.as_deref(),
            Some("entity.Resolve > orchestrator.Extract")
        );
        assert_eq!(s.worst_orphan_ms, 6790.0);
    }

    #[test]
    fn ending_with_the_parent_within_the_slack_is_not_an_orphan() {
        let spans = vec![
            span("a", None, "edge-gateway.HandleExtract", 0, 600),
            // The hang-up reached the next process 60 ms later.
            span("b", Some("a"), "orchestrator.Extract", 5, 660),
            span("c", Some("b"), "entity.Resolve", 10, 655),
        ];
        let s = summarise("t", &spans).unwrap();
        assert_eq!(s.orphans, 0);
        assert_eq!(s.worst_orphan, None);
    }

    #[test]
    fn a_consumer_that_runs_after_the_request_ended_is_not_an_orphan() {
        let mut spans = vec![
            span("a", None, "edge-gateway.HandleExtract", 0, 30),
            span("b", Some("a"), "orchestrator.Extract", 1, 20),
            span("c", Some("b"), "enrichment.Apply", 13_000, 13_002),
            span("d", Some("c"), "db.query", 13_000, 13_001),
        ];
        assert_eq!(summarise("t", &spans).unwrap().orphans, 1);
        spans[2].kind = "consumer".into();
        let s = summarise("t", &spans).unwrap();
        assert_eq!(s.orphans, 0, "{s:?}");
        assert_eq!(s.past_root_ms, 0.0, "{s:?}");
        assert_eq!(s.span_ms, 30.0, "the synchronous part");
    }

    #[test]
    fn a_trace_whose_root_has_not_arrived_is_rooted_at_its_earliest_known_span() {
        let spans = vec![
            span("c", Some("b"), "entity.Resolve", 10, 900),
            span("d", Some("c"), "entity.Resolve.attempt.0", 12, 800),
        ];
        assert_eq!(root(&spans).unwrap().name, "entity.Resolve");
    }
}
