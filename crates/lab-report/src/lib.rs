//! What a run's numbers mean and how they are shown: the series a run scraped, the per-phase
//! summary shaped like the postmortem's Performance Comparison, the charts, and the report.
//!
//! # Layout
//! - [`series`]: what one run scraped (every replica, each second) and its per-phase
//!   computations: counter increases that survive restarts, gauges, histogram quantiles.
//! - [`summary`]: the per-phase summary (`ROWS`), the consistency checks, the Markdown table.
//! - [`charts`]: the panels (`PANELS`): per-second series, drawn as SVG.
//! - [`html`]: `report.html`, one self-contained file per run, drawn from the run's own files.
//! - [`trace`]: the worst trace a run keeps beside its report.
//!
//! Nothing here measures: every function is a pure reading of what a run wrote.

pub mod charts;
pub mod html;
pub mod series;
pub mod summary;
pub mod trace;
