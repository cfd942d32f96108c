//! `labctl trace`: the native lab's traces, from the receiver `labctl up` runs in its
//! supervisor (crates/lab-traces). compose and kind have Jaeger for the same spans.

use std::path::Path;

use anyhow::Context as _;
use lab_experiment::traces::{native_api, worst};
use lab_traces::api::Client;
use lab_traces::store::Sort;
use lab_traces::waterfall::{self, seconds};
use lab_traces::Summary;

#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// The receiver's query API (default: the running native lab's, from its state).
    #[arg(long, env = "LAB_TRACES_API", global = true)]
    pub api: Option<String>,
    #[command(subcommand)]
    pub command: TraceCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TraceCommand {
    /// The traces in the receiver's window: slowest, orphaned (a span outlived its parent), or
    /// recent.
    List {
        #[arg(long, default_value = "orphaned")]
        sort: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One trace as a waterfall: its id (from `list`), or `worst` — the trace whose work went on
    /// longest after its request ended (the postmortem's cover), else the slowest.
    Show {
        id: String,
        /// Columns (default: the terminal's, or 100).
        #[arg(long)]
        width: Option<usize>,
        /// The spans as JSON instead of the waterfall.
        #[arg(long)]
        json: bool,
    },
}

pub fn table(list: &[Summary]) -> String {
    let mut out = format!(
        "{:<32}  {:<28} {:>8} {:>8} {:>5} {:>4} {:>7} {:>9}  {}\n",
        "trace", "root", "root", "work", "spans", "err", "orphans", "past root", "worst orphan"
    );
    for s in list {
        out.push_str(&format!(
            "{:<32}  {:<28} {:>8} {:>8} {:>5} {:>4} {:>7} {:>9}  {}\n",
            s.trace_id,
            s.root,
            seconds(s.root_ms),
            seconds(s.span_ms),
            s.spans,
            s.error_spans,
            s.orphans,
            if s.orphans > 0 {
                seconds(s.past_root_ms)
            } else {
                "—".into()
            },
            match &s.worst_orphan {
                Some(w) => format!("{w} +{}", seconds(s.worst_orphan_ms)),
                None => "—".into(),
            }
        ));
    }
    out
}

pub async fn run(args: &TraceArgs, state_dir: &Path) -> anyhow::Result<()> {
    let base = match &args.api {
        Some(a) => a.clone(),
        None => native_api(state_dir)?,
    };
    let api = Client::new(&base);
    match &args.command {
        TraceCommand::List { sort, limit, json } => {
            let sort: Sort = sort.parse().map_err(anyhow::Error::msg)?;
            let list = api.list(sort, *limit).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            let stats = api.stats().await?;
            print!("{}", table(&list));
            println!(
                "{} of {} traces in the window ({} spans received, {} dropped, {} traces evicted)",
                list.len(),
                stats.traces,
                stats.spans_received,
                stats.spans_dropped,
                stats.traces_evicted
            );
            if list.is_empty() && sort == Sort::Orphaned {
                println!("no orphaned trace: try --sort slowest");
            }
        }
        TraceCommand::Show { id, width, json } => {
            let id = if id == "worst" {
                worst(&api)
                    .await?
                    .context("the receiver holds no trace yet (send some traffic)")?
                    .trace_id
            } else {
                id.to_ascii_lowercase()
            };
            let spans = api.trace(&id).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&spans)?);
                return Ok(());
            }
            let width = width
                .or_else(|| crossterm::terminal::size().ok().map(|(w, _)| w as usize))
                .unwrap_or(100);
            print!("{}", waterfall::text(&id, &spans, width));
        }
    }
    Ok(())
}
