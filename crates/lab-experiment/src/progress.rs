//! Progress you can see on the long things a game day and a replay do: which step runs now and
//! how long is left. Bars draw on stderr only when it is a terminal (indicatif's default), so
//! logs and CI output keep their plain lines.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `seconds` of a timeline (a game day's phases, a replay step's run); the caller
/// moves it with `set_position(elapsed seconds)` and names the current step in its message.
pub fn timeline(seconds: u64, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new(seconds.max(1));
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos:>4}/{len} s  {msg}  ({eta} left)")
            .expect("a valid progress template")
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    bar
}

/// A bar that fills by itself over `seconds` (a closed-loop probe runs exactly that long);
/// finish it with `finish_and_clear` when the work is done.
pub fn countdown(seconds: u64, what: &str) -> ProgressBar {
    let bar = timeline(seconds, what);
    let ticking = bar.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        while !ticking.is_finished() {
            tick.tick().await;
            ticking.inc(1);
        }
    });
    bar
}
