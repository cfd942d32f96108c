//! Every run's report drawn from its `summary.json` alone: the header says what ran, the body
//! reads back into that kind's type, the kind describes its report once as a
//! [`lab_report::doc::Doc`], and lab-report's two renderers write the `.md` and `report.html`.
//! Every experiment writes its summary and then calls [`draw`], so `labctl report DIR` draws
//! exactly what the run drew.

use std::path::Path;

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde_json::Value;

use lab_report::doc::Doc;
use lab_report::run::{self, RunKind};

/// Draw the report of the run in `dir` from its `summary.json`: the kind's Markdown file and
/// `report.html`. Returns the Markdown.
pub fn draw(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join(run::FILE);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let summary: Value =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    let kind = match run::Header::of(&summary) {
        Some(header) => header?.kind,
        // Written before the header: known by its keys.
        None if summary.get("calibration").is_some() && summary.get("modes").is_some() => {
            RunKind::Replay
        }
        None if summary.get("mode").is_some() => RunKind::GameDay,
        None if summary.get("pgbench").is_some() => RunKind::ChainLimit,
        None if summary.get("claims").is_some() => RunKind::Ablation,
        None if summary.get("map").is_some() => RunKind::Map,
        None => anyhow::bail!(
            "{} has no `run` header and reads as no run this labctl knows: draw it with the \
             labctl that wrote it",
            path.display()
        ),
    };
    let body = |what: &str| format!("{} as a {what} summary", path.display());
    let (file, doc, charts) = match kind {
        RunKind::Replay => (
            "replay.md",
            crate::replay::doc(&read(&summary).with_context(|| body("replay"))?),
            true,
        ),
        RunKind::GameDay => (
            "summary.md",
            crate::gameday_doc(&read(&summary).with_context(|| body("game day"))?),
            true,
        ),
        RunKind::Ablation => (
            "ablate.md",
            crate::ablate::doc(&read(&summary).with_context(|| body("ablation"))?),
            false,
        ),
        RunKind::Map => (
            "map.md",
            crate::map::doc(&read(&summary).with_context(|| body("map"))?),
            false,
        ),
        RunKind::ChainLimit => (
            crate::chain_limit::REPORT,
            crate::chain_limit::report::doc(&read(&summary).with_context(|| body("chain-limit"))?),
            false,
        ),
    };
    write(dir, file, doc, charts)
}

fn read<T: DeserializeOwned>(summary: &Value) -> anyhow::Result<T> {
    Ok(T::deserialize(summary)?)
}

/// `file` (Markdown) and `report.html` from one `doc`; `charts`: the page adds the run's
/// panels and worst trace from its series.
fn write(dir: &Path, file: &str, doc: Doc, charts: bool) -> anyhow::Result<String> {
    let md = doc.markdown();
    std::fs::write(dir.join(file), &md)
        .with_context(|| format!("writing {}", dir.join(file).display()))?;
    if charts {
        lab_report::html::render(dir, doc)?;
    } else {
        let page = dir.join("report.html");
        std::fs::write(&page, doc.html()).with_context(|| format!("writing {}", page.display()))?;
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tmp() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lab_draw_{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn repo(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel)
    }

    fn published_replay() -> Value {
        let bytes = std::fs::read(repo("docs/reports/data/replay-incident-summary.json")).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn draw_json(v: &Value) -> (PathBuf, anyhow::Result<String>) {
        let dir = tmp();
        std::fs::write(dir.join(run::FILE), serde_json::to_vec(v).unwrap()).unwrap();
        let md = draw(&dir);
        (dir, md)
    }

    #[test]
    fn a_published_replay_draws_again_from_its_summary_alone_the_page_saying_what_the_md_says() {
        let s = published_replay();
        let (dir, md) = draw_json(&s);
        let md = md.unwrap();
        assert_eq!(md, std::fs::read_to_string(dir.join("replay.md")).unwrap());
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        // Every mode's every step, with its checks and its verdict, on both.
        for m in s["modes"].as_array().unwrap() {
            let steps = m["steps"].as_array().unwrap();
            assert_eq!(steps.len(), 10, "every step of the incident");
            for v in steps {
                let check = v["checks"][0]["check"].as_str().unwrap();
                let shown = html::esc(check);
                assert!(md.contains(check), "{check} in the Markdown");
                assert!(html.contains(&shown), "{check} on the page");
            }
        }
        let verdicts = html.matches("<span class=").count();
        assert!(
            verdicts >= 20,
            "a coloured verdict per step and mode: {verdicts}"
        );
        assert!(html.contains("Performance Comparison"), "the table");
        // Published without its series: the page says so, it does not fail.
        assert!(html.contains("No charts"), "{html}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    use lab_report::html;

    #[test]
    fn a_replay_given_its_rate_says_its_capacities_were_not_measured_not_nan() {
        let mut s = published_replay();
        for k in [
            "healthy_capacity_rps",
            "stale_capacity_rps",
            "healthy_utilisation",
        ] {
            s["calibration"][k] = Value::Null;
        }
        let (dir, md) = draw_json(&s);
        let md = md.unwrap();
        assert!(!md.contains("NaN"), "{md}");
        assert!(
            md.contains("| healthy capacity (closed loop, warm) | not measured |"),
            "{md}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_verdict_that_does_not_read_is_an_error_naming_the_run_not_a_silent_gap() {
        let mut s = published_replay();
        s["modes"][0]["steps"][0]["outcome"] = "maybe".into();
        let (dir, md) = draw_json(&s);
        let e = format!("{:#}", md.unwrap_err());
        assert!(
            e.contains("as a replay summary") && e.contains("maybe"),
            "{e}"
        );
        assert!(!dir.join("replay.md").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_precondition_is_marked_apart_from_the_check_that_decides() {
        let mut s = published_replay();
        s["modes"][0]["steps"][0]["checks"] = serde_json::json!([
            {"check": "entity_retries_off_last ≥ 1", "value": 0.0, "ok": false, "precondition": true},
            {"check": "entity_inbound_rps ≤ 0.5× scale-up", "value": 10.0, "reference": 30.0, "ok": true, "precondition": false}
        ]);
        s["modes"][0]["steps"][0]["outcome"] = "not_measured".into();
        let (dir, md) = draw_json(&s);
        let md = md.unwrap();
        let line = md
            .lines()
            .find(|l| l.contains("entity_retries_off_last"))
            .unwrap();
        let (pre, decides) = (
            line.find("precondition ✘ `entity_retries_off_last ≥ 1`")
                .expect(line),
            line.find("✔ `entity_inbound_rps").expect(line),
        );
        assert!(pre < decides, "{line}");
        assert_eq!(line.matches("precondition").count(), 1, "{line}");
        assert!(line.contains("**not measured**"), "{line}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_game_day_draws_its_steps_and_expectations_and_its_charts() {
        let fixture = repo("crates/lab-report/testdata/gameday-fixture");
        let dir = tmp();
        for f in ["series.jsonl", lab_report::trace::WORST_FILE] {
            std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
        }
        let mut s: Value =
            serde_json::from_slice(&std::fs::read(fixture.join(run::FILE)).unwrap()).unwrap();
        s["mode"] = "Resilient".into();
        s["steps"] = serde_json::json!([{"phase": "dependency-dead", "postmortem": "10:07 storm", "outcome": "reproduced", "checks": [
            {"check": "error_5xx_pct ≤ 10", "value": 0.5, "reference": null, "ok": true, "precondition": false}
        ]}]);
        s["expectations"] = serde_json::json!([{"phase": "healthy", "outcome": "not_measured", "checks": [
            {"check": "abandoned_pct ≤ 1", "value": null, "reference": null, "ok": null, "precondition": false}
        ]}]);
        std::fs::write(dir.join(run::FILE), serde_json::to_vec(&s).unwrap()).unwrap();
        let md = draw(&dir).unwrap();
        assert_eq!(md, std::fs::read_to_string(dir.join("summary.md")).unwrap());
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("<span class=ok>fix held</span>"), "{html}");
        assert!(
            html.contains("<code>error_5xx_pct ≤ 10</code>: 0.5"),
            "{html}"
        );
        let exp = html.find("expectations").expect("the expectations' table");
        assert!(
            html[exp..].contains("? <code>abandoned_pct ≤ 1</code>: —"),
            "{html}"
        );
        assert!(
            html[exp..].contains("<span class=na>not measured</span>"),
            "{html}"
        );
        assert!(md.contains("**not measured**"), "{md}");
        // The charts and the worst trace, from the run's own series.
        assert!(
            html.contains("id='golden-signals-resilient'"),
            "a chart per panel"
        );
        assert!(html.contains("id='trace-resilient'"), "the worst trace");
        assert!(!md.contains("<svg"), "charts are the page's only");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_summary_of_no_known_shape_is_refused_with_what_to_do() {
        let (dir, md) = draw_json(&serde_json::json!({"rows": []}));
        let e = format!("{:#}", md.unwrap_err());
        assert!(e.contains("draw it with the labctl that wrote it"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
