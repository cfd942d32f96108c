//! `labctl watch`: the report's panels, live, in a terminal — for a second terminal while a game
//! day or a replay runs, or on its own against a running lab.
//!
//! The same panels as `report.html` ([`lab_report::charts::PANELS`]), computed the same way
//! from the same once-a-second scrape of every replica, over the last `--window` seconds: each
//! line its current value and a sparkline. The status line says what runs now (the game day's
//! scenario, mode, phase and time left, from `run/gameday.json`), and how many replicas answer.
//! A frame is a pure function of that state ([`draw`]), so it is tested on a `TestBackend`.
//! Readable at 80×24; `q` (or Esc, or Ctrl-C) quits.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ratatui::backend::{Backend, TestBackend};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::{Frame, Terminal};

use lab_experiment::engine::{self, Status, TargetSource};
use lab_experiment::scrape::{self, Tick};
use lab_report::charts::{RunSeries, PANELS};

#[derive(Debug, Clone, clap::Args)]
pub struct WatchArgs {
    /// Seconds of history behind each sparkline.
    #[arg(long, default_value_t = 120)]
    pub window: usize,
    /// The replicas to scrape, `service=url,...` (labs labctl did not start); default: the
    /// native lab's state.
    #[arg(long, env = "LAB_GAMEDAY_TARGETS")]
    pub targets: Option<String>,
    /// Scrape for this many seconds, print one frame (80×24) to stdout and exit: no terminal
    /// needed (scripts, a quick look over ssh).
    #[arg(long)]
    pub once: Option<u64>,
}

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
        .lines
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let pts = run.points(&l.q);
            let values: Vec<f64> = pts.iter().map(|(_, v)| *v).collect();
            let now = run
                .ticks
                .len()
                .checked_sub(1)
                .and_then(|i| run.eval(&l.q, i));
            Line::from(vec![
                Span::raw(truncate(l.short_for(run), label_w)),
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

fn read_status(state_dir: &Path) -> Option<Status> {
    let bytes = std::fs::read(engine::status_file(state_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// `labctl watch`.
pub async fn run(args: &WatchArgs, state_dir: &Path) -> anyhow::Result<()> {
    let source = match &args.targets {
        Some(list) => TargetSource::Fixed(lab_experiment::parse_targets(list).await?),
        None => TargetSource::Native(PathBuf::from(state_dir)),
    };
    let http = scrape::client();
    let mut targets = match &source {
        TargetSource::Fixed(t) => t.clone(),
        // No lab yet is not an error: watch is started in a second terminal, often before the
        // replay has brought its lab up. The frame says so until one is.
        TargetSource::Native(dir) => engine::native_targets(dir).map(|t| t.0).unwrap_or_default(),
    };
    let started = Instant::now();
    let mut ticks: VecDeque<Tick> = VecDeque::new();
    let window = args.window.clamp(10, 3600);
    let step = |ticks: &mut VecDeque<Tick>, scrapes| {
        ticks.push_back(Tick {
            t: started.elapsed().as_secs_f64(),
            phase: 0,
            scrapes,
        });
        while ticks.len() > window + 1 {
            ticks.pop_front();
        }
    };
    let view = |ticks: &VecDeque<Tick>,
                targets: &[lab_experiment::scrape::Target],
                problem: Option<String>| {
        let last = ticks.back();
        let up = last.map_or(0, |t| t.scrapes.iter().filter(|s| s.is_some()).count());
        View {
            run: RunSeries {
                targets: targets.to_vec(),
                ticks: ticks.iter().cloned().collect(),
                load: Vec::new(),
                phases: Vec::new(),
            },
            status: read_status(state_dir),
            problem,
            up,
            known: targets.len(),
        }
    };

    if let Some(seconds) = args.once {
        let end = started + Duration::from_secs(seconds.max(2));
        let mut problem = None;
        while Instant::now() < end {
            match engine::scrape_once(&http, &source, &mut targets).await {
                Ok(s) => {
                    step(&mut ticks, s);
                    problem = None;
                }
                Err(e) => problem = Some(format!("{e}")),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        print!("{}", render_text(&view(&ticks, &targets, problem), 80, 24)?);
        return Ok(());
    }

    // Keys on a thread of their own: crossterm's reader blocks.
    let (keys_tx, mut keys) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || loop {
        match crossterm::event::read() {
            Ok(crossterm::event::Event::Key(k)) => {
                if keys_tx.send(k).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(_) => return,
        }
    });
    let mut terminal = ratatui::init();
    let result: anyhow::Result<()> = async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    // A lab that goes away (a replay between its runs) is said, not fatal.
                    let problem = match engine::scrape_once(&http, &source, &mut targets).await {
                        Ok(s) => {
                            step(&mut ticks, s);
                            None
                        }
                        Err(e) => Some(format!("{e}")),
                    };
                    let v = view(&ticks, &targets, problem);
                    terminal.draw(|f| draw(f, &v))?;
                }
                Some(k) = keys.recv() => {
                    use crossterm::event::{KeyCode, KeyModifiers};
                    let quit = matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                        || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL));
                    if quit {
                        return Ok(());
                    }
                }
            }
        }
    }
    .await;
    ratatui::restore();
    let _ = terminal.backend_mut().flush();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_view(status: Option<Status>) -> View {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/lab-report/testdata/gameday-fixture");
        let run = RunSeries::read(&dir.join("series.jsonl"), Vec::new(), Vec::new()).unwrap();
        let known = run.targets.len();
        View {
            run,
            status,
            problem: None,
            up: known,
            known,
        }
    }

    #[test]
    fn watch_frame_at_80x24_shows_every_panel_and_the_current_step() {
        let status = Status {
            scenario: "incident".to_string(),
            mode: "legacy".to_string(),
            phase: "rollback".to_string(),
            index: 2,
            phases: 10,
            t: 93.0,
            total: 345.0,
            rate: 182.0,
        };
        let text = render_text(&fixture_view(Some(status)), 80, 24).unwrap();
        eprintln!("{text}");
        assert_eq!(text.lines().count(), 24);
        assert!(text.lines().all(|l| l.chars().count() == 80));
        assert!(text.contains("step 3/10 rollback"), "{text}");
        for p in PANELS {
            // Titles may be cut at 40 columns, never dropped.
            let head: String = p.short.chars().take(12).collect();
            assert!(text.contains(&head), "panel {} missing:\n{text}", p.id);
        }
        // The last tick of the recorded run: the dependency is dead, the 5xx share is high.
        let row = text
            .lines()
            .find(|l| l.contains("5xx %"))
            .expect("the 5xx line");
        let value: f64 = row
            .split("5xx %")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a value on {row:?}"));
        assert!(value > 50.0, "{row}");
    }

    #[test]
    fn sparkline_scales_to_the_largest_value_and_fits_its_width() {
        assert_eq!(sparkline(&[0.0, 1.0, 2.0, 4.0], 4), "▁▃▅█");
        assert_eq!(sparkline(&[5.0; 10], 3).chars().count(), 3);
        assert_eq!(sparkline(&[0.0, 0.0], 5), "▁▁");
        assert_eq!(sparkline(&[], 5), "");
    }
}
