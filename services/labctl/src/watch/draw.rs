//! A frame of `labctl watch`: a pure function of what was scraped and the current step, so it is
//! tested on ratatui's `TestBackend`.

use ratatui::backend::TestBackend;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::{Frame, Terminal};

use lab_experiment::engine::Status;
use lab_report::charts::{RunSeries, PANELS};

/// Everything a frame shows.
pub struct View {
    pub run: RunSeries,
    pub status: Option<Status>,
    /// Why the last scrape could not be made (no lab up between two replay runs, ...).
    pub problem: Option<String>,
    /// Replicas that answered the last scrape, of all known.
    pub up: usize,
    pub known: usize,
}

const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` values as a sparkline, scaled to the largest of them.
pub fn sparkline(values: &[f64], width: usize) -> String {
    let tail = &values[values.len().saturating_sub(width)..];
    let max = tail.iter().copied().fold(0.0f64, f64::max);
    tail.iter()
        .map(|v| {
            if max <= 0.0 {
                SPARKS[0]
            } else {
                SPARKS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

fn fmt(v: Option<f64>) -> String {
    match v {
        None => "—".into(),
        // A rate over a window rounds to a hair below zero at rest: "-0.0" is not a reading.
        Some(v) if v.abs() < 0.05 => "0.0".into(),
        Some(v) if v.abs() >= 10_000.0 => format!("{:.0}k", v / 1000.0),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        format!("{s:<n$}")
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// One frame.
pub fn draw(f: &mut Frame, view: &View) {
    let area = f.area();
    let [status, body] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    let step = match &view.status {
        Some(s) => format!(
            "{} · {} mode · step {}/{} {} · {:.0}/{:.0} s · {:.0} rps",
            s.scenario,
            s.mode,
            s.index + 1,
            s.phases,
            s.phase,
            s.t,
            s.total,
            s.rate
        ),
        None => "no game day running".into(),
    };
    let step = match &view.problem {
        Some(p) => format!("{step} · {p}"),
        None => step,
    };
    let line = Line::from(vec![
        Span::styled(
            " labctl watch ",
            Style::default().add_modifier(Modifier::REVERSED),
        ),
        Span::raw(format!(
            " {step} · {}/{} replicas answer · q quits",
            view.up, view.known
        )),
    ]);
    f.render_widget(Paragraph::new(line), status);
    let rows = PANELS.len().div_ceil(2);
    let row_areas = Layout::vertical(vec![Constraint::Ratio(1, rows as u32); rows]).split(body);
    for (r, row) in row_areas.iter().enumerate() {
        let cols = Layout::horizontal([Constraint::Ratio(1, 2); 2]).split(*row);
        for c in 0..2 {
            if let Some(panel) = PANELS.get(r * 2 + c) {
                draw_panel(f, cols[c], panel, &view.run);
            }
        }
    }
}

fn draw_panel(f: &mut Frame, area: Rect, panel: &lab_report::charts::Panel, run: &RunSeries) {
    let inner_width = area.width.saturating_sub(2) as usize;
    let label_w = 15.min(inner_width / 2);
    let value_w = 6;
    let spark_w = inner_width.saturating_sub(label_w + value_w + 2);
    let colours = [Color::Cyan, Color::Red, Color::Green, Color::Magenta];
    let lines: Vec<Line> = panel
        .quantities()
        .enumerate()
        .map(|(k, q)| {
            let pts = run.points(q);
            let values: Vec<f64> = pts.iter().map(|(_, v)| *v).collect();
            let now = run.ticks.len().checked_sub(1).and_then(|i| run.value(q, i));
            Line::from(vec![
                Span::raw(truncate(q.short_for(!run.load.is_empty()), label_w)),
                Span::raw(" "),
                Span::styled(
                    format!("{:>value_w$}", fmt(now)),
                    Style::default().add_modifier(Modifier::BOLD),
                ),
                Span::raw(" "),
                Span::styled(
                    sparkline(&values, spark_w),
                    Style::default().fg(colours[k % colours.len()]),
                ),
            ])
        })
        .collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" {} ({}) ", panel.short, panel.unit));
    f.render_widget(Paragraph::new(lines).block(block), area);
}

/// The frame as plain text (for `--once` and tests).
pub fn render_text(view: &View, width: u16, height: u16) -> anyhow::Result<String> {
    let mut t = Terminal::new(TestBackend::new(width, height))?;
    t.draw(|f| draw(f, view))?;
    let buf = t.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    Ok(out)
}
