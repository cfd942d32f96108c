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

use ratatui::backend::Backend;

use lab_experiment::engine::{self, Status, TargetSource};
use lab_experiment::scrape::{self, Tick};
use lab_report::charts::RunSeries;

mod draw;
#[cfg(test)]
mod tests;

use draw::{draw, render_text, View};

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

fn read_status(state_dir: &Path) -> Option<Status> {
    let bytes = std::fs::read(engine::status_file(state_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The last `keep` ticks scraped, and how a frame is made of them.
struct Window<'a> {
    started: Instant,
    keep: usize,
    state_dir: &'a Path,
    ticks: VecDeque<Tick>,
}

impl Window<'_> {
    fn step(&mut self, scrapes: Vec<lab_report::series::Scrape>) {
        self.ticks.push_back(Tick {
            t: self.started.elapsed().as_secs_f64(),
            phase: 0,
            scrapes,
        });
        while self.ticks.len() > self.keep {
            self.ticks.pop_front();
        }
    }

    fn view(&self, targets: &[lab_experiment::scrape::Target], problem: Option<String>) -> View {
        let last = self.ticks.back();
        let up = last.map_or(0, |t| t.scrapes.iter().filter(|s| s.is_some()).count());
        View {
            run: RunSeries {
                targets: targets.to_vec(),
                ticks: self.ticks.iter().cloned().collect(),
                load: Vec::new(),
                phases: Vec::new(),
                fine: None,
            },
            status: read_status(self.state_dir),
            problem,
            up,
            known: targets.len(),
        }
    }
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
    let mut w = Window {
        started,
        keep: args.window.clamp(10, 3600) + 1,
        state_dir,
        ticks: VecDeque::new(),
    };
    if let Some(seconds) = args.once {
        let end = started + Duration::from_secs(seconds.max(2));
        let mut problem = None;
        while Instant::now() < end {
            match engine::scrape_once(&http, &source, &mut targets).await {
                Ok(s) => {
                    w.step(s);
                    problem = None;
                }
                Err(e) => problem = Some(format!("{e}")),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        print!("{}", render_text(&w.view(&targets, problem), 80, 24)?);
        return Ok(());
    }
    interactive(&mut w, &http, &source, &mut targets).await
}

/// The live frame, redrawn every second until `q`, Esc or Ctrl-C.
async fn interactive(
    w: &mut Window<'_>,
    http: &reqwest::Client,
    source: &TargetSource,
    targets: &mut Vec<lab_experiment::scrape::Target>,
) -> anyhow::Result<()> {
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
                    let problem = match engine::scrape_once(http, source, targets).await {
                        Ok(s) => {
                            w.step(s);
                            None
                        }
                        Err(e) => Some(format!("{e}")),
                    };
                    let v = w.view(targets, problem);
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
