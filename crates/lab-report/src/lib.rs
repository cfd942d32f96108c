//! What a run's numbers mean and how they are shown: the series a run scraped, the per-phase
//! summary shaped like the postmortem's Performance Comparison, the charts, and the report.
//!
//! # Layout
//! - [`series`]: what one run scraped (every replica, each second) and its per-phase
//!   computations: counter increases that survive restarts, gauges, histogram quantiles.
//! - [`quantity`]: what a number is — an expression over the series, evaluated over a window
//!   (a phase for the table, the seconds before a tick for a chart).
//! - [`quantities`]: every quantity, once (`QUANTITIES`): the table's rows and the charts' lines.
//! - [`summary`]: the per-phase summary, the consistency checks, the Markdown table.
//! - [`charts`]: the panels (`PANELS`, lines named by quantity): drawn as SVG.
//! - [`recorded`]: a run read back from its directory, and the check that its table
//!   recomputes from its own series.
//! - [`doc`]: one report model and its two renderers, Markdown and HTML: every
//!   experiment's report is a [`doc::Doc`].
//! - [`html`]: `report.html`, one self-contained file per run, drawn from the run's own files.
//! - [`verdict`]: one verdict type — a check measured or not, a step reproduced, not
//!   reproduced or not measured — for every experiment and a run's own bookkeeping.
//! - [`run`]: one run summary schema — the `run` header every `summary.json` starts with
//!   (what ran, every verdict, its bookkeeping), whatever the experiment.
//! - [`index`]: `index.html` over a directory of runs, each with its verdicts in a line.
//! - [`trace`]: the worst trace a run keeps beside its report.
//!
//! Nothing here measures: every function is a pure reading of what a run wrote.

pub mod charts;
pub mod doc;
pub mod html;
pub mod index;
pub mod quantities;
pub mod quantity;
pub mod recorded;
pub mod run;
pub mod series;
pub mod summary;
pub mod trace;
pub mod verdict;
