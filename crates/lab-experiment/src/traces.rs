//! The native lab's traces, from the receiver `labctl up` runs in its supervisor
//! (crates/lab-traces): which one is the worst, and keeping it beside a run's report before the
//! lab goes down with its receiver.

use std::path::Path;

use anyhow::Context as _;
use lab_report::trace::{Worst, WORST_FILE};
use lab_traces::api::Client;
use lab_traces::store::Sort;
use lab_traces::waterfall;
use lab_traces::Summary;

/// The API of the running native lab's receiver.
pub fn native_api(state_dir: &Path) -> anyhow::Result<String> {
    let state = lab_native::supervise::read_state(state_dir)?
        .context("no lab is up: start one with `labctl up` (or pass --api)")?;
    state.traces_api.context(
        "this lab runs no trace receiver (started with --trace-sample 0, or exporting to \
         OTEL_EXPORTER_OTLP_ENDPOINT; or see the supervisor's log)",
    )
}

/// The trace `worst` names: most orphaned, else slowest.
pub async fn worst(api: &Client) -> anyhow::Result<Option<Summary>> {
    if let Some(s) = api.list(Sort::Orphaned, 1).await?.into_iter().next() {
        return Ok(Some(s));
    }
    Ok(api.list(Sort::Slowest, 1).await?.into_iter().next())
}

/// Keep the running native lab's worst trace in `dir` (`trace-worst.json`, and the waterfall as
/// `trace-worst.txt`); `None` when the lab has no receiver or it holds no trace. Called at the
/// end of a game day or replay run, before the lab goes down with its receiver.
pub async fn save_worst(state_dir: &Path, dir: &Path) -> anyhow::Result<Option<Summary>> {
    let Ok(base) = native_api(state_dir) else {
        return Ok(None);
    };
    let api = Client::new(&base);
    let Some(summary) = worst(&api).await? else {
        return Ok(None);
    };
    let spans = api.trace(&summary.trace_id).await?;
    std::fs::write(
        dir.join("trace-worst.txt"),
        waterfall::text(&summary.trace_id, &spans, 120),
    )?;
    std::fs::write(
        dir.join(WORST_FILE),
        serde_json::to_vec_pretty(&Worst {
            summary: summary.clone(),
            spans,
        })?,
    )?;
    Ok(Some(summary))
}
