//! `report.html`: one self-contained file per game day or replay (no network at view time) —
//! the verdicts and the calibration as tables, and every panel of [`crate::charts::PANELS`] as
//! an inline SVG chart, one column per mode, phases as bands. Written from the run's own files
//! (`summary.json`, `series.jsonl`), so `labctl report <dir>` can draw it again at any time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::charts::{self, RunSeries, PANELS};
use crate::verdict::{Outcome, Verdict};

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:sans-serif;margin:16px auto;max-width:1600px;color:#222}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse;font-size:12px;\
margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}th{background:#f4f4f8}\
.ok{color:#1a7f37}.no{color:#b42318;font-weight:bold}.na{color:#6e7781;font-style:italic}.grid{display:grid;gap:10px}\
.why{font-size:12px;color:#555;margin:2px 0 6px}svg{max-width:100%;height:auto}";

/// The page for one run directory: a replay (`summary.json` with a calibration and modes) or a
/// game day (`summary.json` with phases and the load).
pub fn render(dir: &Path) -> anyhow::Result<PathBuf> {
    let (summary, recorded) = crate::recorded::read(dir)?;
    let runs: Vec<(String, RunSeries)> = recorded.into_iter().map(|r| (r.mode, r.run)).collect();
    let mut html = String::new();
    if summary.get("calibration").is_some() {
        head(
            &mut html,
            &format!(
                "Replay: {}",
                summary["scenario"]["name"].as_str().unwrap_or("")
            ),
        );
        replay_tables(&mut html, &summary);
    } else {
        let mode = summary["mode"].as_str().unwrap_or("?").to_lowercase();
        head(
            &mut html,
            &format!(
                "Game day: {} — {mode} mode",
                summary["scenario"]["name"].as_str().unwrap_or("")
            ),
        );
        let _ = writeln!(
            html,
            "<p>{}</p>",
            esc(summary["scenario"]["summary"].as_str().unwrap_or(""))
        );
        gameday_tables(&mut html, &summary);
    }
    let _ = writeln!(
        html,
        "<h2>The run, second by second</h2><p class=why>Every chart is drawn from this run's own \
         scrapes (<code>series.jsonl</code>, one scrape of every replica per second); shaded bands \
         and labels are the phases. Full tables: <code>summary.md</code> / \
         <code>replay.md</code>.</p>"
    );
    for panel in PANELS {
        let _ = writeln!(
            html,
            "<h3 style='font-size:14px;margin:18px 0 0'>{}</h3><p class=why>{}</p><div class=grid \
             style='grid-template-columns:repeat({},1fr)'>",
            esc(panel.title),
            esc(panel.why),
            runs.len().max(1)
        );
        for (mode, run) in &runs {
            let _ = writeln!(
                html,
                "<div id='{}-{mode}'>{}</div>",
                panel.id,
                charts::svg(panel, run, mode)?
            );
        }
        html.push_str("</div>\n");
    }
    traces(&mut html, dir, &runs, summary.get("calibration").is_some())?;
    html.push_str("</body></html>\n");
    let path = dir.join("report.html");
    std::fs::write(&path, &html).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The runs' worst traces (the postmortem's cover), where the run kept one. A replay keeps one per mode, in the mode's directory.
fn traces(
    html: &mut String,
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
            mode.clone(),
            charts::waterfall_svg(&worst.summary.trace_id, &worst.spans, mode)?,
        ));
    }
    if drawn.is_empty() {
        return Ok(());
    }
    let _ = writeln!(
        html,
        "<h2>The worst trace of the run</h2><p class=why>From the lab's own OTLP receiver \
         (<code>labctl trace show worst</code>): the trace whose work went on longest after its \
         request had ended, else the slowest. The postmortem's cover: \"The gateway span ends at \
         3.0 s. Its child span keeps going to 9.8 s.\"</p><div class=grid \
         style='grid-template-columns:repeat({},1fr)'>",
        drawn.len()
    );
    for (mode, svg) in drawn {
        let _ = writeln!(html, "<div id='trace-{mode}'>{svg}</div>");
    }
    html.push_str("</div>\n");
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

fn num(v: &Value, digits: usize) -> String {
    v.as_f64()
        .filter(|x| x.is_finite())
        .map_or("—".into(), |x| format!("{x:.digits$}"))
}

/// One run's verdicts on the postmortem's steps: its mode's name, whether it is the fixed
/// client's (the words: "fix held"), and the steps.
struct Run {
    mode: String,
    fix: bool,
    steps: Vec<Verdict>,
    /// The summary's verdicts could not be read (said on the page, not drawn as "none").
    unreadable: Option<String>,
}

impl Run {
    fn of(mode: &str, steps: &Value) -> Run {
        // A summary written before game days judged their steps has none: no verdicts, not
        // an error. Anything else that does not read as verdicts is said.
        let (steps, unreadable) = match steps {
            Value::Null => (Vec::new(), None),
            v => match serde_json::from_value(v.clone()) {
                Ok(s) => (s, None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            },
        };
        Run {
            mode: mode.to_string(),
            fix: !mode.eq_ignore_ascii_case("legacy"),
            steps,
            unreadable,
        }
    }
}

/// A verdict's outcome in its words, coloured (every page draws verdicts with this and
/// [`checks_html`]).
pub fn outcome_html(v: &Verdict, fix: bool) -> String {
    let class = match v.outcome {
        Outcome::Reproduced => "ok",
        Outcome::NotReproduced => "no",
        Outcome::NotMeasured => "na",
    };
    format!("<span class={class}>{}</span>", v.words(fix))
}

/// A verdict's checks, one per line; a precondition marked apart (it makes the step "not
/// measured" when it fails, it is not the verdict).
pub fn checks_html(v: &Verdict) -> String {
    let mut cell = String::new();
    for c in &v.checks {
        let mark = match c.ok {
            Some(true) => "<span class=ok>✔</span>",
            Some(false) => "<span class=no>✘</span>",
            None => "?",
        };
        let pre = if c.precondition {
            "<span class=na>precondition</span> "
        } else {
            ""
        };
        let _ = write!(cell, "{pre}{mark} {}: {}<br>", esc(&c.check), c.values());
    }
    cell
}

/// The postmortem's timeline, step by step: its time and words, then per run the checks
/// measured and the verdict.
fn timeline(html: &mut String, phases: &Value, runs: &[Run]) {
    for r in runs {
        if let Some(e) = &r.unreadable {
            let _ = writeln!(
                html,
                "<p class=no>{}: the summary's verdicts could not be read ({})</p>",
                esc(&r.mode),
                esc(e)
            );
        }
    }
    if runs.iter().all(|r| r.steps.is_empty()) {
        return;
    }
    let postmortem = phases
        .as_array()
        .is_some_and(|a| a.iter().any(|p| p["postmortem"].is_object()));
    let _ = write!(
        html,
        "<h2>{}</h2><table><tr><th>time</th><th>step</th><th>the postmortem</th>",
        if postmortem {
            "The postmortem's timeline, step by step"
        } else {
            "The scenario's verdicts, phase by phase"
        }
    );
    for r in runs {
        let _ = write!(html, "<th>{} (measured)</th><th>verdict</th>", esc(&r.mode));
    }
    html.push_str("</tr>\n");
    for p in phases.as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or("");
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td>",
            esc(p["postmortem"]["time"].as_str().unwrap_or("")),
            esc(name),
            esc(p["postmortem"]["observation"].as_str().unwrap_or(""))
        );
        for r in runs {
            match r.steps.iter().find(|v| v.phase == name) {
                Some(v) => {
                    let _ = write!(
                        html,
                        "<td>{}</td><td>{}</td>",
                        checks_html(v),
                        outcome_html(v, r.fix)
                    );
                }
                None => html.push_str("<td>—</td><td>—</td>"),
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
}

/// A game day's verdicts: the postmortem's steps its scenario names, and its `expect:` ranges.
fn gameday_tables(html: &mut String, s: &Value) {
    let mode = s["mode"].as_str().unwrap_or("");
    timeline(
        html,
        &s["scenario"]["phases"],
        &[Run::of(mode, &s["steps"])],
    );
    let expectations = Run::of(mode, &s["expectations"]);
    if expectations.steps.is_empty() {
        return;
    }
    html.push_str(
        "<h2>The scenario's expectations for this mode</h2><table><tr><th>phase</th>\
         <th>measured</th><th>verdict</th></tr>\n",
    );
    for v in &expectations.steps {
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&v.phase),
            checks_html(v),
            outcome_html(v, expectations.fix)
        );
    }
    html.push_str("</table>\n");
}

fn replay_tables(html: &mut String, s: &Value) {
    let c = &s["calibration"];
    let _ = writeln!(
        html,
        "<h2>Calibration</h2><table><tr><th>healthy capacity</th><th>stale-plan capacity</th>\
         <th>replay rate</th><th>healthy utilisation</th><th>orchestrator memory limit</th>\
         <th>time scale</th></tr><tr><td>{} rps</td><td>{} rps</td><td>{} rps</td><td>{}%</td>\
         <td>{}</td><td>{}×</td></tr></table>",
        num(&c["healthy_capacity_rps"], 0),
        num(&c["stale_capacity_rps"], 0),
        num(&c["rate"], 0),
        c["healthy_utilisation"]
            .as_f64()
            .filter(|x| x.is_finite())
            .map_or("—".into(), |x| format!("{:.0}", 100.0 * x)),
        c["memory_limit_bytes"]
            .as_u64()
            .map_or("none".into(), |b| format!("{} MiB", b >> 20)),
        num(&s["time_scale"], 2),
    );
    let modes: Vec<&Value> = s["modes"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let runs: Vec<Run> = modes
        .iter()
        .map(|m| Run::of(m["mode"].as_str().unwrap_or(""), &m["steps"]))
        .collect();
    timeline(html, &s["scenario"]["phases"], &runs);
    html.push_str("<p>");
    for m in &modes {
        let steps = m["steps"].as_array().map(Vec::len).unwrap_or(0);
        let count = |o: &str| {
            m["steps"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|s| s["outcome"].as_str() == Some(o))
                        .count()
                })
                .unwrap_or(0)
        };
        let legacy = m["mode"]
            .as_str()
            .is_some_and(|s| s.eq_ignore_ascii_case("legacy"));
        let _ = write!(
            html,
            "<b>{}</b>: {} of {steps} steps {} ({} not measured); the fix in one number (goodput \
             while the plan is stale / what the stale database could serve): {}. ",
            esc(m["mode"].as_str().unwrap_or("")),
            count("reproduced"),
            if legacy { "reproduced" } else { "fix held" },
            count("not_measured"),
            num(&m["fix_quality"], 2)
        );
    }
    html.push_str("</p>\n");
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
    fn the_published_replays_steps_read_back_as_verdicts_and_a_broken_one_is_said() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/reports/data/replay-incident-summary.json");
        let s: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        for m in s["modes"].as_array().unwrap() {
            let run = Run::of(m["mode"].as_str().unwrap(), &m["steps"]);
            assert_eq!(run.unreadable, None);
            assert_eq!(run.steps.len(), 10, "every step of the incident");
            assert!(run.steps.iter().all(|v| !v.checks.is_empty()));
        }
        let mut html = String::new();
        let broken = serde_json::json!([{"phase": "x", "outcome": "maybe", "checks": []}]);
        timeline(&mut html, &Value::Null, &[Run::of("Legacy", &broken)]);
        assert!(html.contains("could not be read"), "{html}");
        // A summary from before game days judged their steps: nothing said, nothing drawn.
        html.clear();
        timeline(&mut html, &Value::Null, &[Run::of("Legacy", &Value::Null)]);
        assert!(html.is_empty(), "{html}");
    }

    #[test]
    fn a_game_day_page_shows_its_steps_and_expectations_as_the_replay_shows_its_steps() {
        let s = serde_json::json!({
            "mode": "Resilient",
            "scenario": {"phases": [{"name": "during", "postmortem": {"time": "10:07", "observation": "storm"}}]},
            "steps": [{"phase": "during", "postmortem": "10:07 storm", "outcome": "reproduced", "reproduced": true, "checks": [
                {"check": "error_5xx_pct ≤ 10", "value": 0.5, "reference": null, "ok": true, "precondition": false}
            ]}],
            "expectations": [{"phase": "during", "outcome": "not_measured", "reproduced": false, "checks": [
                {"check": "abandoned_pct ≤ 1", "value": null, "reference": null, "ok": null, "precondition": false}
            ]}]
        });
        let mut html = String::new();
        gameday_tables(&mut html, &s);
        assert!(html.contains("The postmortem's timeline"), "{html}");
        assert!(html.contains("<span class=ok>fix held</span>"), "{html}");
        assert!(html.contains("error_5xx_pct ≤ 10: 0.5%"), "{html}");
        let exp = html.find("expectations").expect("the expectations' table");
        assert!(html[exp..].contains("? abandoned_pct ≤ 1: —"), "{html}");
        assert!(
            html[exp..].contains("<span class=na>not measured</span>"),
            "{html}"
        );
    }

    #[test]
    fn the_replay_verdict_table_marks_a_precondition_apart_from_the_verdict() {
        let s = serde_json::json!({
            "calibration": {"rate": 100.0},
            "time_scale": 1.0,
            "scenario": {"phases": [{"name": "kill-switch-entity", "postmortem": {"time": "10:52", "observation": "o"}}]},
            "modes": [{"mode": "Legacy", "steps": [{"phase": "kill-switch-entity", "outcome": "not_measured", "checks": [
                {"check": "entity_retries_off_last ≥ 1", "value": 0.0, "ok": false, "precondition": true},
                {"check": "entity_inbound_rps ≤ 0.5× scale-up", "value": 10.0, "reference": 30.0, "ok": true, "precondition": false}
            ]}]}]
        });
        let mut html = String::new();
        replay_tables(&mut html, &s);
        let pre = html
            .find("entity_retries_off_last")
            .expect("the precondition's row");
        let verdict = html.find("entity_inbound_rps").expect("the verdict's row");
        let marks: Vec<usize> = html
            .match_indices(">precondition<")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(marks.len(), 1, "{html}");
        assert!(marks[0] < pre && pre < verdict, "{html}");
        assert!(html.contains("not measured"), "{html}");
    }

    #[test]
    fn the_report_draws_the_runs_worst_trace_with_the_work_after_its_caller_ended() {
        let dir = fixture();
        let html = std::fs::read_to_string(render(&dir).unwrap()).unwrap();
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
        let html = std::fs::read_to_string(render(&dir).unwrap()).unwrap();
        assert!(!html.contains("id='trace-legacy'"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn html_report_from_a_recorded_run_draws_every_panel() {
        let dir = fixture();
        let path = render(&dir).unwrap();
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
