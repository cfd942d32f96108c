//! The postmortem's pictures, drawn from a run's own per-second series: the panels in ONE list
//! ([`PANELS`], the quantities the Grafana dashboards show under the same names), evaluated
//! tick by tick from `series.jsonl`, and drawn as SVG with plotters — phases as bands, so a
//! chart reads like the postmortem's timeline.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::series::{histogram_quantile, label, Scrape, Target, Tick};
use lab_load::SecondSample;

/// Which series of a metric a line sums.
#[derive(Debug, Clone, Copy)]
pub enum Filter {
    All,
    /// The label has this value.
    Is(&'static str, &'static str),
    /// The label's value starts with this.
    StartsWith(&'static str, &'static str),
}

impl Filter {
    fn keep(&self, labels: &str) -> bool {
        match self {
            Filter::All => true,
            Filter::Is(l, v) => label(labels, l) == Some(v),
            Filter::StartsWith(l, p) => label(labels, l).is_some_and(|x| x.starts_with(p)),
        }
    }
}

/// How replicas are combined at one tick.
#[derive(Debug, Clone, Copy)]
pub enum Across {
    Sum,
    Max,
    Min,
}

/// One quantity per second.
#[derive(Debug, Clone, Copy)]
pub enum Q {
    /// Per-second increase of a counter, summed over the service's replicas.
    Rate {
        service: &'static str,
        metric: &'static str,
        filter: Filter,
    },
    /// A gauge, combined over the service's replicas.
    Gauge {
        service: &'static str,
        metric: &'static str,
        filter: Filter,
        across: Across,
        scale: f64,
    },
    /// `histogram_quantile(q)` of a histogram's increase over the last [`WINDOW`] seconds.
    Quantile {
        service: &'static str,
        metric: &'static str,
        q: f64,
    },
    /// `100 × a / b` (both rates).
    Percent(&'static Q, &'static Q),
    /// From the load generator: requests sent per second (by intended send time).
    Offered,
    /// From the load generator: 200s within 3 s per second.
    Goodput,
}

/// Seconds of histogram increase behind a quantile point (as a `rate(...[5s])`).
pub const WINDOW: usize = 5;
/// Seconds behind a rate point.
pub const RATE_WINDOW: usize = 5;

pub struct Line {
    pub label: &'static str,
    /// The label where 14 columns is all there is (`labctl watch`).
    pub short: &'static str,
    pub q: Q,
}

impl Line {
    /// [`Line::short`], saying so where the gateway's counters stand in for the load generator's
    /// record (see [`Q::Offered`]'s fallback): the gateway counts a request when it is answered,
    /// not when it is sent, so in a storm "answered" trails what was offered.
    pub fn short_for(&self, run: &RunSeries) -> &'static str {
        match self.q {
            Q::Offered if run.load.is_empty() => "gw answered",
            Q::Goodput if run.load.is_empty() => "gw 200s",
            _ => self.short,
        }
    }
}

pub struct Panel {
    /// Stable id (file names, tests).
    pub id: &'static str,
    pub title: &'static str,
    /// The title where 40 columns is all there is (`labctl watch`).
    pub short: &'static str,
    pub unit: &'static str,
    /// What to look for, in the postmortem's terms.
    pub why: &'static str,
    pub lines: &'static [Line],
}

const GATEWAY_RPS: Q = Q::Rate {
    service: "edge-gateway",
    metric: "gateway_requests_total",
    filter: Filter::All,
};
const GATEWAY_5XX: Q = Q::Rate {
    service: "edge-gateway",
    metric: "gateway_requests_total",
    filter: Filter::StartsWith("status", "5"),
};

const GATEWAY_200: Q = Q::Rate {
    service: "edge-gateway",
    metric: "gateway_requests_total",
    filter: Filter::Is("status", "200"),
};

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
        lines: &[
            Line {
                label: "gateway p99 (gateway's view)",
                short: "gateway p99",
                q: Q::Quantile {
                    service: "edge-gateway",
                    metric: "gateway_request_duration_seconds",
                    q: 0.99,
                },
            },
            Line {
                label: "entity-service p99 (its own view)",
                short: "entity p99",
                q: Q::Quantile {
                    service: "entity-service",
                    metric: "entity_service_request_duration_seconds",
                    q: 0.99,
                },
            },
        ],
    },
    Panel {
        id: "golden-signals",
        short: "Gateway golden signals",
        title: "Gateway Golden Signals: accepted rps and 5xx rate",
        unit: "rps / %",
        why: "Request rate flat, error rate climbing.",
        lines: &[
            Line {
                label: "gateway accepted rps",
                short: "accepted rps",
                q: GATEWAY_RPS,
            },
            Line {
                label: "5xx %",
                short: "5xx %",
                q: Q::Percent(&GATEWAY_5XX, &GATEWAY_RPS),
            },
        ],
    },
    Panel {
        id: "entity-inbound",
        short: "entity-service inbound vs ingress",
        title: "entity-service inbound vs gateway ingress",
        unit: "rps",
        why: "Inbound to an internal service against public traffic: amplification is the gap.",
        lines: &[
            Line {
                label: "gateway ingress",
                short: "ingress",
                q: GATEWAY_RPS,
            },
            Line {
                label: "entity-service inbound",
                short: "entity inbound",
                q: Q::Rate {
                    service: "entity-service",
                    metric: "entity_service_requests_total",
                    filter: Filter::All,
                },
            },
            Line {
                label: "entity-service served (200)",
                short: "entity served",
                q: Q::Rate {
                    service: "entity-service",
                    metric: "entity_service_requests_total",
                    filter: Filter::Is("status", "200"),
                },
            },
        ],
    },
    Panel {
        id: "orchestrator-resources",
        short: "orchestrator tasks and memory",
        title: "orchestrator tasks alive and memory (max per replica)",
        unit: "tasks / MB",
        why: "The postmortem's goroutines 240 → 4,180 per pod, memory tracking them.",
        lines: &[
            Line {
                label: "tasks alive (max)",
                short: "tasks (max)",
                q: Q::Gauge {
                    service: "orchestrator",
                    metric: "tokio_alive_tasks",
                    filter: Filter::All,
                    across: Across::Max,
                    scale: 1.0,
                },
            },
            Line {
                label: "RSS MB (max)",
                short: "RSS MB (max)",
                q: Q::Gauge {
                    service: "orchestrator",
                    metric: "process_resident_memory_bytes",
                    filter: Filter::All,
                    across: Across::Max,
                    scale: 1e-6,
                },
            },
        ],
    },
    Panel {
        id: "goodput",
        short: "Goodput vs offered",
        title: "Goodput vs offered load",
        unit: "rps",
        why: "What users got (a 200 within 3 s) against what they asked for.",
        lines: &[
            Line {
                label: "offered",
                short: "offered",
                q: Q::Offered,
            },
            Line {
                label: "goodput",
                short: "goodput",
                q: Q::Goodput,
            },
        ],
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
            Line {
                label: "pool connections in use",
                short: "pool in use",
                q: Q::Gauge {
                    service: "entity-service",
                    metric: "entity_db_pool_connections",
                    filter: Filter::Is("state", "in_use"),
                    across: Across::Sum,
                    scale: 1.0,
                },
            },
            Line {
                label: "backends active (pg_stat_activity)",
                short: "pg active",
                q: Q::Gauge {
                    service: "entity-service",
                    metric: "entity_db_backends",
                    filter: Filter::Is("state", "active"),
                    across: Across::Sum,
                    scale: 1.0,
                },
            },
            Line {
                label: "hot plan is an index scan",
                short: "index scan?",
                q: Q::Gauge {
                    service: "entity-service",
                    metric: "entity_db_hot_plan_index_scan",
                    filter: Filter::All,
                    across: Across::Min,
                    scale: 1.0,
                },
            },
        ],
    },
    Panel {
        id: "controls",
        short: "Fixed client controls",
        title: "The fixed client's controls: retry budget tokens, breaker state, sheds",
        unit: "tokens / state / per s",
        why: "The retry budget drains before error rates move; the breaker sheds (2) a failing \
              dependency. Legacy mode has neither.",
        lines: &[
            Line {
                label: "retry budget tokens (min)",
                short: "retry tokens",
                q: Q::Gauge {
                    service: "orchestrator",
                    metric: "entity_retry_budget_tokens",
                    filter: Filter::All,
                    across: Across::Min,
                    scale: 1.0,
                },
            },
            Line {
                label: "breaker state (max; 2 = shedding)",
                short: "breaker (2=shed)",
                q: Q::Gauge {
                    service: "orchestrator",
                    metric: "entity_breaker_state",
                    filter: Filter::All,
                    across: Across::Max,
                    scale: 1.0,
                },
            },
            Line {
                label: "calls shed per second",
                short: "shed /s",
                q: Q::Rate {
                    service: "orchestrator",
                    metric: "entity_shed_total",
                    filter: Filter::All,
                },
            },
        ],
    },
    Panel {
        id: "abandoned",
        short: "Work for callers gone",
        title: "Work for callers already gone: orphaned spans and abandoned entity-service time",
        unit: "per s",
        why: "A child span outliving its parent means cancellation is broken.",
        lines: &[
            Line {
                label: "orphaned spans per second",
                short: "orphans /s",
                q: Q::Rate {
                    service: "orchestrator",
                    metric: "otel_span_orphaned_total",
                    filter: Filter::All,
                },
            },
            Line {
                label: "abandoned entity-service seconds per second",
                short: "abandoned s/s",
                q: Q::Rate {
                    service: "entity-service",
                    metric: "entity_service_abandoned_seconds_total",
                    filter: Filter::All,
                },
            },
        ],
    },
];

/// One run's series, as `series.jsonl` holds them, and its load.
pub struct RunSeries {
    pub targets: Vec<Target>,
    pub ticks: Vec<Tick>,
    pub load: Vec<SecondSample>,
    /// (name, start second, seconds) of every phase.
    pub phases: Vec<(String, f64, f64)>,
}

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
        Ok(Self {
            targets,
            ticks,
            load,
            phases,
        })
    }

    fn samples<'a>(
        &'a self,
        i: usize,
        service: &'a str,
        metric: &'a str,
        filter: Filter,
    ) -> impl Iterator<Item = (usize, &'a str, f64)> + 'a {
        self.targets
            .iter()
            .enumerate()
            .filter(move |(_, t)| t.service == service)
            .filter_map(move |(ti, _)| self.ticks[i].scrapes.get(ti)?.as_ref().map(|s| (ti, s)))
            .flat_map(move |(ti, s)| {
                s.iter().filter_map(move |(k, v)| {
                    let (n, l) = lab_core::exposition::split_series(k);
                    (n == metric && filter.keep(l)).then_some((ti, k.as_str(), *v))
                })
            })
    }

    /// How much the counter `key` of target `ti`, now at `v`, grew since tick `from` (a reset
    /// counts from 0); `None` when the target was not scraped then.
    fn delta(&self, from: usize, ti: usize, key: &str, v: f64) -> Option<f64> {
        let b = self.ticks[from]
            .scrapes
            .get(ti)
            .and_then(|s| s.as_ref())
            .map(|s| s.get(key).copied().unwrap_or(0.0))?;
        Some(if v >= b { v - b } else { v })
    }

    fn increase(&self, from: usize, to: usize, service: &str, metric: &str, filter: Filter) -> f64 {
        self.samples(to, service, metric, filter)
            .filter_map(|(ti, key, v)| self.delta(from, ti, key, v))
            .sum()
    }

    /// A rate `q` over the last `window` ticks instead of [`RATE_WINDOW`] (1: second by
    /// second); other quantities as [`RunSeries::eval`].
    pub fn eval_window(&self, q: &Q, i: usize, window: usize) -> Option<f64> {
        match q {
            Q::Rate {
                service,
                metric,
                filter,
            } => {
                let from = i.checked_sub(window.min(i).max(1))?;
                let dt = self.ticks[i].t - self.ticks[from].t;
                (dt > 0.0).then(|| self.increase(from, i, service, metric, *filter) / dt)
            }
            _ => self.eval(q, i),
        }
    }

    /// The value of `q` at tick `i` (`None`: not measurable there).
    pub fn eval(&self, q: &Q, i: usize) -> Option<f64> {
        match q {
            // Over the last RATE_WINDOW seconds, like `rate(...[5s])`: one-second increments
            // of a few hundred requests are too noisy to read.
            Q::Rate { .. } => self.eval_window(q, i, RATE_WINDOW),
            Q::Gauge {
                service,
                metric,
                filter,
                across,
                scale,
            } => {
                let mut per: BTreeMap<usize, f64> = BTreeMap::new();
                for (ti, _, v) in self.samples(i, service, metric, *filter) {
                    *per.entry(ti).or_default() += v;
                }
                let vals = per.values().copied();
                let r = match across {
                    Across::Sum => {
                        let v: Vec<f64> = vals.collect();
                        (!v.is_empty()).then(|| v.iter().sum())
                    }
                    Across::Max => vals.reduce(f64::max),
                    Across::Min => vals.reduce(f64::min),
                };
                r.map(|v| v * scale)
            }
            Q::Quantile { service, metric, q } => {
                let from = i.checked_sub(WINDOW)?;
                let bucket = format!("{metric}_bucket");
                let mut buckets: BTreeMap<u64, f64> = BTreeMap::new();
                for (ti, key, v) in self.samples(i, service, &bucket, Filter::All) {
                    let (_, l) = lab_core::exposition::split_series(key);
                    let k = match label(l, "le") {
                        Some("+Inf") => u64::MAX,
                        Some(le) => match le.parse::<f64>() {
                            Ok(b) => (b * 1e6) as u64,
                            Err(_) => continue,
                        },
                        None => continue,
                    };
                    if let Some(d) = self.delta(from, ti, key, v) {
                        *buckets.entry(k).or_default() += d;
                    }
                }
                histogram_quantile(*q, &buckets).map(|s| s * 1000.0)
            }
            Q::Percent(a, b) => {
                let (a, b) = (self.eval(a, i)?, self.eval(b, i)?);
                (b > 0.0).then(|| 100.0 * a / b)
            }
            Q::Offered | Q::Goodput if self.load.is_empty() => {
                // No load generator's record (`labctl watch` attaches to a run from outside):
                // the gateway's own counters are the next best view. A gateway 200 is inside the
                // budget, since the gateway answers 504 at 3 s.
                self.eval(
                    if matches!(q, Q::Offered) {
                        &GATEWAY_RPS
                    } else {
                        &GATEWAY_200
                    },
                    i,
                )
            }
            Q::Offered | Q::Goodput => {
                // Load seconds are measured from the load's start, which is the run's t = 0.
                let second = self.ticks[i].t.floor() as u64;
                let s = self.load.iter().find(|s| s.second == second)?;
                Some(if matches!(q, Q::Offered) {
                    s.sent as f64
                } else {
                    s.good as f64
                })
            }
        }
    }

    /// `(t, value)` of `q` at every tick where it is measurable.
    pub fn points(&self, q: &Q) -> Vec<(f64, f64)> {
        (0..self.ticks.len())
            .filter_map(|i| self.eval(q, i).map(|v| (self.ticks[i].t, v)))
            .filter(|(_, v)| v.is_finite())
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
    let lines: Vec<Vec<(f64, f64)>> = panel.lines.iter().map(|l| run.points(&l.q)).collect();
    let t_max = run.ticks.last().map(|t| t.t).unwrap_or(1.0).max(1.0);
    let y_max = lines
        .iter()
        .flatten()
        .map(|(_, v)| *v)
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
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
        for (k, (line, pts)) in panel.lines.iter().zip(&lines).enumerate() {
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
