//! The worst trace a run keeps beside its report, for the report to draw.

use lab_traces::Summary;

/// What a run directory keeps of its worst trace (`trace-worst.json`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Worst {
    pub summary: Summary,
    pub spans: Vec<lab_traces::SpanRecord>,
}

pub const WORST_FILE: &str = "trace-worst.json";
