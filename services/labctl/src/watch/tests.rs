//! A frame of `labctl watch`, drawn from a recorded run on a `TestBackend`.

use lab_experiment::engine::Status;
use lab_report::charts::{RunSeries, PANELS};

use super::draw::*;

fn fixture_view(status: Option<Status>) -> View {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/lab-report/testdata/gameday-fixture");
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
