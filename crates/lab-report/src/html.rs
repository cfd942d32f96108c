//! `report.html` of a game day or a replay: one self-contained file (no network at view time) —
//! the run's report (the [`Doc`] its `.md` is drawn from), then every panel of
//! [`crate::charts::PANELS`] as an inline SVG chart, one column per mode, phases as bands, and
//! the worst trace. Drawn from the run's own files (`summary.json`, `series.jsonl`), so
//! `labctl report <dir>` can draw it again at any time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::charts::{self, RunSeries, PANELS};
use crate::doc::{Block, Doc};

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:sans-serif;margin:16px auto;max-width:1600px;color:#222}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}h3{font-size:14px}h4{font-size:13px}table{border-collapse:collapse;font-size:12px;\
margin:8px 0}td.n{text-align:right}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}th{background:#f4f4f8}\
.ok{color:#1a7f37}.no{color:#b42318;font-weight:bold}.na{color:#6e7781;font-style:italic}.grid{display:grid;gap:10px}\
.why{font-size:12px;color:#555;margin:2px 0 6px}svg{max-width:100%;height:auto}";

/// The page for one run directory of a game day or a replay: its report (`doc`, the same the
/// `.md` is drawn from), then every panel of the run's own series and its worst trace.
pub fn render(dir: &Path, mut doc: Doc) -> anyhow::Result<PathBuf> {
    let path = dir.join("report.html");
    let write = |doc: Doc| {
        std::fs::write(&path, doc.html()).with_context(|| format!("writing {}", path.display()))
    };
    doc.h2("The run, second by second");
    let (summary, recorded) = match crate::recorded::read(dir) {
        Ok(r) => r,
        // A summary copied without its series (a published one): the report without charts.
        Err(e) if missing(&e) => {
            doc.why(format!(
                "No charts: this run's series are not here ({e:#})."
            ));
            write(doc)?;
            return Ok(path);
        }
        Err(e) => return Err(e),
    };
    let runs: Vec<(String, RunSeries)> = recorded.into_iter().map(|r| (r.mode, r.run)).collect();
    doc.why(
        "Every chart is drawn from this run's own scrapes (`series.jsonl`, one scrape of every \
         replica per second); shaded bands and labels are the phases.",
    );
    for panel in PANELS {
        doc.h3(panel.title).why(panel.why);
        let mut figs = Vec::new();
        for (mode, run) in &runs {
            figs.push((
                format!("{}-{mode}", panel.id),
                charts::svg(panel, run, mode)?,
            ));
        }
        doc.push(Block::Figures(figs));
    }
    traces(&mut doc, dir, &runs, summary.get("calibration").is_some())?;
    write(doc)?;
    Ok(path)
}

/// A file that is not there (not one that could not be read).
fn missing(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
    })
}

/// The runs' worst traces (the postmortem's cover), where the run kept one. A replay keeps one per mode, in the mode's directory.
fn traces(
    doc: &mut Doc,
    dir: &Path,
    runs: &[(String, RunSeries)],
    replay: bool,
) -> anyhow::Result<()> {
    let mut drawn = Vec::new();
    for (mode, _) in runs {
        let file = if replay {
            dir.join(mode).join(crate::trace::WORST_FILE)
        } else {
            dir.join(crate::trace::WORST_FILE)
        };
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        let worst: crate::trace::Worst = serde_json::from_slice(&bytes)
            .with_context(|| format!("reading {}", file.display()))?;
        drawn.push((
            format!("trace-{mode}"),
            charts::waterfall_svg(&worst.summary.trace_id, &worst.spans, mode)?,
        ));
    }
    if drawn.is_empty() {
        return Ok(());
    }
    doc.h2("The worst trace of the run").why(
        "From the lab's own OTLP receiver (`labctl trace show worst`): the trace whose work went \
         on longest after its request had ended, else the slowest. The postmortem's cover: \
         \"The gateway span ends at 3.0 s. Its child span keeps going to 9.8 s.\"",
    );
    doc.push(Block::Figures(drawn));
    Ok(())
}

pub fn head(html: &mut String, title: &str) {
    let _ = writeln!(
        html,
        "<!doctype html><html><head><meta charset='utf-8'><title>{t}</title><style>{STYLE}</style>\
         </head><body><h1>{t}</h1>",
        t = esc(title)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/gameday-fixture");
        let dir = std::env::temp_dir().join(format!("lab_html_{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["summary.json", "series.jsonl", crate::trace::WORST_FILE] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        dir
    }

    #[test]
    fn the_report_draws_the_runs_worst_trace_with_the_work_after_its_caller_ended() {
        let dir = fixture();
        let html = std::fs::read_to_string(render(&dir, Doc::new("t")).unwrap()).unwrap();
        let at = html
            .find("id='trace-legacy'")
            .expect("the worst trace's section");
        let svg = &html[at..at + html[at..].find("</svg>").unwrap()];
        // The recorded trace (a legacy replay's worst): entity.Resolve outlived its parent.
        assert!(svg.contains("entity.Resolve"), "{svg}");
        assert!(svg.contains("edge-gateway.HandleExtract ended at"), "{svg}");
        // Blue while someone waited, red after: both drawn.
        assert!(
            svg.contains("#1F77B4") || svg.contains("#1f77b4"),
            "blue bars"
        );
        assert!(
            svg.contains("#D62728") || svg.contains("#d62728"),
            "red bars"
        );
        // Without the file, no section (and no error).
        std::fs::remove_file(dir.join(crate::trace::WORST_FILE)).unwrap();
        let html = std::fs::read_to_string(render(&dir, Doc::new("t")).unwrap()).unwrap();
        assert!(!html.contains("id='trace-legacy'"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn html_report_from_a_recorded_run_draws_every_panel() {
        let dir = fixture();
        let path = render(&dir, Doc::new("t")).unwrap();
        let html = std::fs::read_to_string(&path).unwrap();
        assert!(html.starts_with("<!doctype html>"));
        // Self-contained: nothing to fetch at view time (SVG's namespace is a name, not a fetch).
        let fetches = html.matches("src=").count()
            + html.matches("<link").count()
            + html.matches("@import").count();
        assert_eq!(fetches, 0, "no external resource");
        for p in PANELS {
            let at = html
                .find(&format!("id='{}-legacy'", p.id))
                .unwrap_or_else(|| panic!("panel {} missing", p.id));
            let svg_end = at + html[at..].find("</svg>").expect("an svg per panel");
            let svg = &html[at..svg_end];
            assert!(svg.contains("<svg"), "{}", p.id);
            for line in p.quantities() {
                assert!(
                    svg.contains(&line.label.replace('\'', "&apos;")),
                    "{}: legend of {}",
                    p.id,
                    line.label
                );
            }
            // The phases, as bands and names.
            assert!(
                svg.contains("healthy") && svg.contains("dependency-dead"),
                "{}",
                p.id
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn charts_compute_what_the_run_measured() {
        let dir = fixture();
        let (summary, mut recorded) = crate::recorded::read(&dir).unwrap();
        let run = recorded.remove(0).run;
        let dead_from = run.phases[1].1;
        let line = |id: &str, k: usize| {
            let p = PANELS.iter().find(|p| p.id == id).unwrap();
            run.points(p.quantities().nth(k).unwrap())
        };
        // The blindfold: the gateway's p99 can never show more than its 3 s budget.
        let gw_p99 = line("blindfold", 0);
        assert!(!gw_p99.is_empty());
        assert!(
            gw_p99.iter().all(|(_, v)| *v <= 3000.0 + 1e-9),
            "{gw_p99:?}"
        );
        // The dependency dies: the 5xx share climbs to most requests.
        let err = line("golden-signals", 1);
        let worst = err
            .iter()
            .filter(|(t, _)| *t > dead_from + 5.0)
            .map(|(_, v)| *v)
            .fold(0.0, f64::max);
        assert!(worst > 50.0, "5xx % in the dead phase: {worst}");
        let healthy = err
            .iter()
            .filter(|(t, _)| *t < dead_from)
            .map(|(_, v)| *v)
            .fold(0.0, f64::max);
        assert!(healthy < 5.0, "healthy phase: {healthy}");
        // Offered load is the load generator's own count, about the run's rate.
        let offered = line("goodput", 0);
        let mean = offered.iter().map(|(_, v)| v).sum::<f64>() / offered.len().max(1) as f64;
        let rate = summary["scenario"]["rate"].as_f64().unwrap();
        assert!(
            (mean - rate).abs() < rate * 0.5,
            "offered {mean} vs rate {rate}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_panel_quantity_is_on_a_grafana_dashboard_too() {
        // One set of quantities: what the HTML charts draw, Grafana shows under the same name.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../grafana/dashboards");
        let mut exprs = String::new();
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            exprs.push_str(&std::fs::read_to_string(e.path()).unwrap());
        }
        for p in PANELS {
            for q in p.quantities() {
                for m in q.expr.metrics() {
                    assert!(exprs.contains(m), "{} ({}) is on no dashboard", m, p.id);
                }
            }
        }
    }
}
