//! The postmortem's pictures, drawn from a run's own per-second series: the panels in ONE list
//! ([`PANELS`], the quantities the Grafana dashboards show under the same names), evaluated
//! tick by tick from `series.jsonl`, and drawn as SVG with plotters — phases as bands, so a
//! chart reads like the postmortem's timeline.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::quantities::{self, Quantity};
use crate::quantity::{Frame, Window, RATE_WINDOW};
use crate::series::{Scrape, Series, Target, Tick};
use lab_load::SecondSample;

pub struct Panel {
    /// Stable id (file names, tests).
    pub id: &'static str,
    pub title: &'static str,
    /// The title where 40 columns is all there is (`labctl watch`).
    pub short: &'static str,
    pub unit: &'static str,
    /// What to look for, in the postmortem's terms.
    pub why: &'static str,
    /// The quantities drawn, by id ([`crate::quantities::QUANTITIES`]).
    pub lines: &'static [&'static str],
}

impl Panel {
    /// The panel's lines.
    pub fn quantities(&self) -> impl Iterator<Item = &'static Quantity> + '_ {
        self.lines.iter().map(|id| {
            quantities::find(id).unwrap_or_else(|| panic!("panel {}: no quantity {id}", self.id))
        })
    }
}

/// Every panel, in reading order.
pub static PANELS: &[Panel] = &[
    Panel {
        id: "blindfold",
        short: "p99: gateway (clamped) vs entity",
        title: "Gateway p99 (clamped at the 3 s budget) vs entity-service's own p99",
        unit: "ms",
        why:
            "The postmortem's flat 3.0 s line: a metric bounded by the failure mode. The callee's \
              own view shows what the gateway's cannot.",
        lines: &["gateway_p99_ms", "entity_p99_ms"],
    },
    Panel {
        id: "golden-signals",
        short: "Gateway golden signals",
        title: "Gateway Golden Signals: accepted rps and 5xx rate",
        unit: "rps / %",
        why: "Request rate flat, error rate climbing.",
        lines: &["gateway_rps", "error_5xx_pct"],
    },
    Panel {
        id: "entity-inbound",
        short: "entity-service inbound vs ingress",
        title: "entity-service inbound vs gateway ingress",
        unit: "rps",
        why: "Inbound to an internal service against public traffic: amplification is the gap.",
        lines: &[
            "gateway_rps",
            "entity_attempted_rps",
            "entity_inbound_rps",
            "entity_served_rps",
        ],
    },
    Panel {
        id: "orchestrator-resources",
        short: "orchestrator tasks and memory",
        title: "orchestrator tasks alive and memory (max per replica)",
        unit: "tasks / MB",
        why: "The postmortem's goroutines 240 → 4,180 per pod, memory tracking them.",
        lines: &["orchestrator_tasks_max", "orchestrator_rss_mb_max"],
    },
    Panel {
        id: "goodput",
        short: "Goodput vs offered",
        title: "Goodput vs offered load",
        unit: "rps",
        why: "What users got (a 200 within 3 s) against what they asked for.",
        lines: &["offered_rps", "goodput_rps"],
    },
    Panel {
        id: "database",
        short: "PostgreSQL",
        title: "PostgreSQL: connections in use, active backends, hot plan",
        unit: "connections / 0-1",
        why:
            "The pool's view, PostgreSQL's own, and whether the hot lookup is still an index scan \
              (1) or the stale plan's bitmap heap scan (0).",
        lines: &[
            "db_connections_max",
            "db_backends_active_max",
            "hot_plan_index_scan_min",
        ],
    },
    Panel {
        id: "controls",
        short: "Fixed client controls",
        title: "The fixed client's controls: retry budget tokens, breaker state, sheds",
        unit: "tokens / state / per s",
        why: "The retry budget drains before error rates move; the breaker sheds (2) a failing \
              dependency. Legacy mode has neither.",
        lines: &["retry_budget_tokens_min", "breaker_state_max", "shed_rps"],
    },
    Panel {
        id: "abandoned",
        short: "Work for callers gone",
        title: "Work for callers already gone: orphaned spans and abandoned entity-service time",
        unit: "per s",
        why: "A child span outliving its parent means cancellation is broken.",
        lines: &["orphaned_spans_per_s", "abandoned_seconds_per_s"],
    },
];

/// One run's series, as `series.jsonl` holds them, and its load.
pub struct RunSeries {
    pub targets: Vec<Target>,
    pub ticks: Vec<Tick>,
    pub load: Vec<SecondSample>,
    /// (name, start second, seconds) of every phase.
    pub phases: Vec<(String, f64, f64)>,
    /// entity-service's arrivals and the orchestrators' attempt starts per 100 ms ([`FINE_FILE`]
    /// beside the series), when kept.
    pub fine: Option<crate::quantity::Fine>,
}

/// Where a run keeps its fine streams per 100 ms (entity-service's arrivals, the orchestrators'
/// attempt starts), beside `series.jsonl`.
pub const FINE_FILE: &str = "fine.json";

/// `orchestrator-3` → `orchestrator`; `supervisor` stays.
fn service_of(replica: &str) -> String {
    match replica.rsplit_once('-') {
        Some((s, n)) if n.chars().all(|c| c.is_ascii_digit()) => s.to_string(),
        _ => replica.to_string(),
    }
}

impl RunSeries {
    /// Read a run's `series.jsonl` (the ticks), with its load samples and phases.
    pub fn read(
        series: &Path,
        load: Vec<SecondSample>,
        phases: Vec<(String, f64, f64)>,
    ) -> anyhow::Result<Self> {
        use std::io::BufRead;
        let f =
            std::fs::File::open(series).with_context(|| format!("reading {}", series.display()))?;
        let mut targets: Vec<Target> = Vec::new();
        let mut ticks = Vec::new();
        for line in std::io::BufReader::new(f).lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&line)
                .with_context(|| format!("a line of {}", series.display()))?;
            let replicas = v["replicas"].as_object().cloned().unwrap_or_default();
            for name in replicas.keys() {
                if !targets.iter().any(|t| &t.replica == name) {
                    targets.push(Target {
                        service: service_of(name),
                        replica: name.clone(),
                        url: String::new(),
                    });
                }
            }
            let scrapes: Vec<Scrape> = targets
                .iter()
                .map(|t| {
                    replicas.get(&t.replica).and_then(|m| {
                        m.as_object().map(|o| {
                            o.iter()
                                .filter_map(|(k, x)| x.as_f64().map(|x| (k.clone(), x)))
                                .collect::<HashMap<String, f64>>()
                        })
                    })
                })
                .collect();
            ticks.push(Tick {
                t: v["t"].as_f64().unwrap_or(0.0),
                phase: v["phase"].as_u64().unwrap_or(0) as usize,
                scrapes,
            });
        }
        // The fine streams, where the run kept them (runs before the attempt starts kept
        // entity-service's arrivals alone, as `arrivals.json`).
        let fine_path = [FINE_FILE, "arrivals.json"]
            .map(|f| series.with_file_name(f))
            .into_iter()
            .find(|p| p.exists())
            .unwrap_or_else(|| series.with_file_name(FINE_FILE));
        let fine = match std::fs::read(&fine_path) {
            Ok(bytes) => Some(
                serde_json::from_slice(&bytes)
                    .with_context(|| format!("reading {}", fine_path.display()))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", fine_path.display())),
        };
        Ok(Self {
            targets,
            ticks,
            load,
            phases,
            fine,
        })
    }

    /// The series and the load as an expression reads them (no first phase: a chart has no
    /// [`crate::quantity::Expr::VsFirst`]).
    pub fn frame(&self) -> Frame<'_> {
        Frame {
            series: Series {
                targets: &self.targets,
                ticks: &self.ticks,
            },
            load: &self.load,
            first: None,
            fine: self.fine.as_ref(),
        }
    }

    /// The value of `q` at tick `i`, over the [`RATE_WINDOW`] seconds before it (`None`: not
    /// measurable there).
    pub fn value(&self, q: &Quantity, i: usize) -> Option<f64> {
        self.frame()
            .eval(&q.expr, &Window::at(&self.ticks, i, RATE_WINDOW))
    }

    /// `(t, value)` of `q` at every tick where it is measurable.
    pub fn points(&self, q: &Quantity) -> Vec<(f64, f64)> {
        let frame = self.frame();
        (0..self.ticks.len())
            .filter_map(|i| {
                let v = frame.eval(&q.expr, &Window::at(&self.ticks, i, RATE_WINDOW))?;
                Some((self.ticks[i].t, v))
            })
            .collect()
    }
}

/// Line colours, one per line of a panel (distinguishable, and in print).
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// One panel of one run as an SVG document.
pub fn svg(panel: &Panel, run: &RunSeries, subtitle: &str) -> anyhow::Result<String> {
    let lines: Vec<Vec<(f64, f64)>> = panel.quantities().map(|q| run.points(q)).collect();
    let t_max = run.ticks.last().map(|t| t.t).unwrap_or(1.0).max(1.0);
    // Room above the highest point for the legend, drawn in the upper right over the lines:
    // each of its rows is ~15 px of the ~230 px plot (a tenth of the range), so a peak is never
    // under it (the four-line inbound panel hid the legacy attempts' peak).
    let headroom = 1.1 + 0.1 * lines.len() as f64;
    let y_max = lines
        .iter()
        .flatten()
        .map(|(_, v)| *v)
        .fold(0.0f64, f64::max)
        .max(1.0)
        * headroom;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (760, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{} — {subtitle}", panel.title), ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..t_max, 0f64..y_max)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("seconds since the run started")
            .y_desc(panel.unit)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // Phases: alternate shaded bands, each named at its top.
        for (k, (name, start, secs)) in run.phases.iter().enumerate() {
            let (a, b) = (*start, (start + secs).min(t_max));
            if k % 2 == 1 {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(a, 0.0), (b, y_max)],
                        RGBColor(240, 240, 250).filled(),
                    )))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            chart
                .draw_series(std::iter::once(Text::new(
                    name.clone(),
                    (a + 0.5, y_max * 0.98),
                    ("sans-serif", 10).into_font().color(&RGBColor(90, 90, 90)),
                )))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        for (k, (line, pts)) in panel.quantities().zip(&lines).enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(line.label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(out)
}

/// Rows a waterfall draws at most; the rest are counted under it.
const WATERFALL_ROWS: usize = 40;

/// A trace as a waterfall in SVG (`report.html`'s cover): one bar per span under its parent,
/// blue while whoever asked for it still waited, red from the moment one of its callers had
/// ended (work for nobody), and a line where the root span — the user's request — ended.
pub fn waterfall_svg(
    trace_id: &str,
    spans: &[lab_traces::SpanRecord],
    subtitle: &str,
) -> anyhow::Result<String> {
    let rows = lab_traces::waterfall::layout(spans);
    let shown = rows.len().min(WATERFALL_ROWS);
    let (w, label_w, row_h, top) = (760i32, 290i32, 16i32, 44i32);
    let h = top + row_h * shown as i32 + 30;
    let total = rows.iter().map(|r| r.end_ms).fold(1.0f64, f64::max);
    let x = |ms: f64| label_w + ((w - label_w - 12) as f64 * ms / total) as i32;
    let err = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("{e}");
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (w as u32, h as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let font = ("sans-serif", 11).into_font();
        let title = match lab_traces::model::summarise(trace_id, spans) {
            Some(s) => match &s.worst_orphan {
                Some(o) => format!(
                    "{subtitle}: {} {:.1} s; {o} by {:.1} s",
                    s.root,
                    s.root_ms / 1000.0,
                    s.worst_orphan_ms / 1000.0
                ),
                None => format!(
                    "{subtitle}: {} {:.1} s; no span outlived its parent",
                    s.root,
                    s.root_ms / 1000.0
                ),
            },
            None => format!("{subtitle}: no spans"),
        };
        root.draw(&Text::new(title, (8, 6), ("sans-serif", 14).into_font()))
            .map_err(err)?;
        root.draw(&Text::new(
            format!("trace {trace_id} · 0 to {:.1} s", total / 1000.0),
            (8, 24),
            font.clone().color(&RGBColor(90, 90, 90)),
        ))
        .map_err(err)?;
        for (i, r) in rows.iter().take(shown).enumerate() {
            let y = top + i as i32 * row_h;
            let indent = 10 * r.depth.min(8) as i32;
            let mut label = format!("{} {}", r.span.name, r.outcome());
            if label.chars().count() > 40 {
                label = label.chars().take(39).collect::<String>() + "…";
            }
            root.draw(&Text::new(label, (8 + indent, y + 2), font.clone()))
                .map_err(err)?;
            let (x0, x1) = (x(r.start_ms), x(r.end_ms).max(x(r.start_ms) + 1));
            let gone = r
                .caller_gone_ms
                .filter(|_| r.for_nobody())
                .map(|g| x(g).clamp(x0, x1));
            let blue = RGBColor(31, 119, 180);
            let red = RGBColor(214, 39, 40);
            let split = gone.unwrap_or(x1);
            if split > x0 {
                root.draw(&Rectangle::new(
                    [(x0, y + 2), (split, y + row_h - 3)],
                    blue.filled(),
                ))
                .map_err(err)?;
            }
            if split < x1 {
                root.draw(&Rectangle::new(
                    [(split, y + 2), (x1, y + row_h - 3)],
                    red.filled(),
                ))
                .map_err(err)?;
            }
        }
        if let Some(first) = rows.first() {
            let xe = x(first.end_ms);
            root.draw(&PathElement::new(
                vec![(xe, top - 4), (xe, top + row_h * shown as i32)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                format!(
                    "{} ended at {:.1} s; red: still running after its caller ended{}",
                    first.span.name,
                    first.end_ms / 1000.0,
                    if rows.len() > shown {
                        format!(" ({} more spans not drawn)", rows.len() - shown)
                    } else {
                        String::new()
                    }
                ),
                (8, top + row_h * shown as i32 + 8),
                font.clone().color(&RGBColor(90, 90, 90)),
            ))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}
