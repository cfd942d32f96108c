//! `index.html` over a directory of runs (`.lab/reports/`): every run under it — game days,
//! replays, ablations, maps, a replay's repetitions — with what it is, its verdicts in one line,
//! whether its own counts added up, and a link to its page.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::doc::{Cell, Doc, Table, Tone};
use crate::run::{Header, Judged, RunKind};
use crate::verdict::{Check, Verdict};

/// What a run directory holds, read from its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    GameDay,
    Replay,
    Repeats,
    Ablation,
    Map,
    ChainLimit,
    /// A `run` header this reader cannot read, from a summary its keys do not place either.
    Unreadable,
}

impl From<RunKind> for Kind {
    fn from(k: RunKind) -> Kind {
        match k {
            RunKind::GameDay => Kind::GameDay,
            RunKind::Replay => Kind::Replay,
            RunKind::Ablation => Kind::Ablation,
            RunKind::Map => Kind::Map,
            RunKind::ChainLimit => Kind::ChainLimit,
        }
    }
}

impl Kind {
    fn words(self) -> &'static str {
        match self {
            Kind::GameDay => "game day",
            Kind::Replay => "replay",
            Kind::Repeats => "replay ×N",
            Kind::Ablation => "ablation",
            Kind::Map => "metastability map",
            Kind::ChainLimit => "chain limit",
            Kind::Unreadable => "unreadable run",
        }
    }

    /// A summary written before the `run` header ([`Header`]), by its keys.
    fn of(dir: &Path, summary: &Value) -> Option<Kind> {
        if dir.join("repeats.json").is_file() {
            Some(Kind::Repeats)
        } else if summary.get("claims").is_some() {
            Some(Kind::Ablation)
        } else if summary.get("map").is_some() {
            Some(Kind::Map)
        } else if summary.get("calibration").is_some() && summary.get("modes").is_some() {
            Some(Kind::Replay)
        } else if summary.get("mode").is_some() && summary.get("phases").is_some() {
            Some(Kind::GameDay)
        } else {
            None
        }
    }
}

/// One run of the index.
#[derive(Debug)]
pub struct Entry {
    /// Relative to the index's directory.
    pub dir: PathBuf,
    pub kind: Kind,
    pub scenario: String,
    /// The verdicts, one line per mode (`legacy: 7 reproduced, 1 not, 2 not measured`).
    pub verdicts: Vec<String>,
    /// Every consistency check of every mode held (`None`: the run has none).
    pub consistent: Option<bool>,
    /// Its page, if it has one.
    pub page: Option<PathBuf>,
}

/// A summary's verdicts of `mode`, before the `run` header: a legacy run's are the bug's, an
/// ablation's claims the postmortem's (reproduced or not), any other mode's the fix's.
fn tally(mode: &str, verdicts: &[Verdict]) -> Option<String> {
    Judged {
        of: mode.to_string(),
        fix: !mode.eq_ignore_ascii_case("legacy") && mode != "claims",
        verdicts: verdicts.to_vec(),
    }
    .tally()
}

/// `v` read as `T`s: none where the summary has none (older ones), and what could not be read
/// named in `unreadable` (the index says so; it does not draw it as "no verdicts").
fn read<T: serde::de::DeserializeOwned>(
    v: &Value,
    what: &str,
    unreadable: &mut Vec<String>,
) -> Vec<T> {
    if v.is_null() {
        return Vec::new();
    }
    serde_json::from_value(v.clone()).unwrap_or_else(|e| {
        unreadable.push(format!("{what} unreadable: {e}"));
        Vec::new()
    })
}

/// The run in `dir` (relative `rel`), if `dir` holds one.
fn entry(dir: &Path, rel: &Path) -> Option<Entry> {
    let file = if dir.join("repeats.json").is_file() {
        "repeats.json"
    } else {
        "summary.json"
    };
    let summary: Value = serde_json::from_slice(&std::fs::read(dir.join(file)).ok()?).ok()?;
    let mut lines = Vec::new();
    let mut bad = Vec::new();
    let mut consistency: Vec<Check> = Vec::new();
    let page = [
        "report.html",
        "repeats.md",
        "map.md",
        "ablate.md",
        "chain-limit.md",
    ]
    .iter()
    .map(|f| rel.join(f))
    .find(|f| dir.join(f.file_name().unwrap_or_default()).is_file());
    match Header::of(&summary) {
        Some(Ok(h)) => {
            return Some(Entry {
                dir: rel.to_path_buf(),
                kind: h.kind.into(),
                scenario: h.name,
                verdicts: h.verdicts.iter().filter_map(Judged::tally).collect(),
                consistent: (!h.consistency.is_empty())
                    .then(|| h.consistency.iter().all(Check::holds)),
                page,
            });
        }
        // A run it cannot read is still listed (as its keys say, or as unreadable), with why.
        Some(Err(e)) => bad.push(format!("{e:#}")),
        None => {}
    }
    let kind = match Kind::of(dir, &summary) {
        Some(k) => k,
        None if !bad.is_empty() => Kind::Unreadable,
        None => return None,
    };
    match kind {
        Kind::GameDay => {
            let mode = summary["mode"].as_str().unwrap_or("?").to_lowercase();
            lines.extend(tally(&mode, &read(&summary["steps"], "steps", &mut bad)));
            let expect = read(&summary["expectations"], "expectations", &mut bad);
            lines.extend(tally(&mode, &expect).map(|t| format!("{t} (expect)")));
            consistency = read(&summary["consistency"], "consistency", &mut bad);
        }
        Kind::Replay => {
            for m in summary["modes"].as_array().into_iter().flatten() {
                let mode = m["mode"].as_str().unwrap_or("?").to_lowercase();
                lines.extend(tally(&mode, &read(&m["steps"], "steps", &mut bad)));
                consistency.extend(read::<Check>(&m["consistency"], "consistency", &mut bad));
            }
        }
        Kind::Ablation => lines.extend(tally(
            "claims",
            &read(&summary["claims"], "claims", &mut bad),
        )),
        Kind::Repeats | Kind::Map | Kind::ChainLimit | Kind::Unreadable => {}
    }
    lines.extend(bad);
    Some(Entry {
        dir: rel.to_path_buf(),
        kind,
        scenario: summary["scenario"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        verdicts: lines,
        consistent: (!consistency.is_empty()).then(|| consistency.iter().all(Check::holds)),
        page,
    })
}

/// Every run under `root`, two levels down at most (a run's own subdirectories — a replay's
/// modes, a map's cells — are its, not runs of the index), in name order.
pub fn entries(root: &Path) -> anyhow::Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .with_context(|| format!("reading {}", root.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let rel = dir.strip_prefix(root).unwrap_or(&dir).to_path_buf();
        match entry(&dir, &rel) {
            Some(e) => out.push(e),
            // A directory of runs (`labctl scenarios check`'s): one level further.
            None => {
                let mut inner: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .map(|d| {
                        d.flatten()
                            .map(|e| e.path())
                            .filter(|p| p.is_dir())
                            .collect()
                    })
                    .unwrap_or_default();
                inner.sort();
                out.extend(
                    inner
                        .iter()
                        .filter_map(|d| entry(d, &rel.join(d.file_name().unwrap_or_default()))),
                );
            }
        }
    }
    Ok(out)
}

/// Write `root/index.html` and return its path.
pub fn render(root: &Path) -> anyhow::Result<PathBuf> {
    let list = entries(root)?;
    anyhow::ensure!(
        !list.is_empty(),
        "{} holds no run (no directory with a game day's, replay's, ablation's or map's \
         summary.json, or a repeats.json)",
        root.display()
    );
    let mut t = Table::new(&["run", "what", "scenario", "verdicts", "counts add up"]);
    for e in &list {
        let name = e.dir.display().to_string();
        let link = e
            .page
            .as_ref()
            .map_or(name.clone(), |p| format!("[{name}]({})", p.display()));
        let counts = match e.consistent {
            Some(true) => Cell {
                lines: vec!["yes".into()],
                tone: Tone::Good,
            },
            Some(false) => Cell {
                lines: vec!["NO: its numbers are not trusted".into()],
                tone: Tone::Bad,
            },
            None => Cell::text("—"),
        };
        t.row(vec![
            link.into(),
            e.kind.words().into(),
            e.scenario.as_str().into(),
            if e.verdicts.is_empty() {
                Cell::text("—")
            } else {
                Cell::lines(e.verdicts.clone())
            },
            counts,
        ]);
    }
    let mut doc = Doc::new(format!("Runs in {}", root.display()));
    doc.table(t);
    let html = doc.html();
    let path = root.join("index.html");
    std::fs::write(&path, html).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_with_the_run_header_is_read_from_it_whatever_its_kind() {
        use crate::verdict::Verdict;
        let root = std::env::temp_dir().join(format!("lab_index_{:016x}", rand::random::<u64>()));
        for d in ["cl", "gd"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        // A kind the keys alone never told apart, with a page of its own.
        let cl = Header::new(RunKind::ChainLimit, "chain-limit");
        crate::run::write(&root.join("cl"), &cl, &serde_json::json!({"steps": []})).unwrap();
        std::fs::write(root.join("cl/chain-limit.md"), "# x").unwrap();
        // A game day whose body has no verdicts: the header's are the ones listed.
        let step = Verdict::of("stale", vec![Check::counts_agree("a", 1.0, 2.0)]).about("line");
        let gd = Header::new(RunKind::GameDay, "incident")
            .judged("resilient", true, &[step])
            .consistency(&[Check::counts_agree("sent", 3.0, 3.0)]);
        crate::run::write(&root.join("gd"), &gd, &serde_json::json!({"mode": "x"})).unwrap();
        // A header of a newer schema, on a summary whose keys place it nowhere: still listed.
        std::fs::create_dir_all(root.join("new")).unwrap();
        let mut newer = serde_json::to_value(Header::new(RunKind::ChainLimit, "x")).unwrap();
        newer["schema"] = 99.into();
        std::fs::write(
            root.join("new/summary.json"),
            serde_json::to_vec(&serde_json::json!({"run": newer, "steps": []})).unwrap(),
        )
        .unwrap();
        let list = entries(&root).unwrap();
        assert_eq!(list.len(), 3, "{list:?}");
        assert_eq!(list[2].kind, Kind::Unreadable);
        assert!(
            list[2].verdicts[0].contains("newer"),
            "{:?}",
            list[2].verdicts
        );
        assert_eq!(
            (list[0].kind, list[0].scenario.as_str()),
            (Kind::ChainLimit, "chain-limit")
        );
        assert_eq!(list[0].page, Some(PathBuf::from("cl/chain-limit.md")));
        assert!(list[0].verdicts.is_empty() && list[0].consistent.is_none());
        assert_eq!(
            list[1].verdicts,
            ["resilient: 0 fix held, 1 fix did not hold, 0 not measured"]
        );
        assert_eq!(
            (list[1].kind, list[1].consistent),
            (Kind::GameDay, Some(true))
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_index_lists_every_run_with_its_verdicts_and_flags_one_whose_counts_do_not_add_up() {
        let root = std::env::temp_dir().join(format!("lab_index_{:016x}", rand::random::<u64>()));
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/gameday-fixture");
        // A game day, a directory of game days (scenarios check), and a directory of nothing.
        for d in ["gd", "check/a-legacy", "check/b-legacy", "empty"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for d in ["gd", "check/a-legacy", "check/b-legacy"] {
            std::fs::copy(
                fixture.join("summary.json"),
                root.join(d).join("summary.json"),
            )
            .unwrap();
        }
        std::fs::write(root.join("gd/report.html"), "<html>").unwrap();
        let mut bad: Value =
            serde_json::from_slice(&std::fs::read(fixture.join("summary.json")).unwrap()).unwrap();
        bad["consistency"][0]["ok"] = Value::Bool(false);
        std::fs::write(
            root.join("check/b-legacy/summary.json"),
            serde_json::to_vec(&bad).unwrap(),
        )
        .unwrap();
        let mut odd = bad.clone();
        odd["consistency"][0]["ok"] = Value::Bool(true);
        odd["steps"] = serde_json::json!([{"phase": "x", "outcome": "maybe"}]);
        std::fs::write(
            root.join("check/a-legacy/summary.json"),
            serde_json::to_vec(&odd).unwrap(),
        )
        .unwrap();
        let list = entries(&root).unwrap();
        let dirs: Vec<String> = list.iter().map(|e| e.dir.display().to_string()).collect();
        assert_eq!(dirs, ["check/a-legacy", "check/b-legacy", "gd"]);
        assert!(list.iter().all(|e| e.kind == Kind::GameDay));
        assert_eq!(list[0].consistent, Some(true));
        assert!(
            list[0]
                .verdicts
                .iter()
                .any(|v| v.starts_with("steps unreadable")),
            "{:?}",
            list[0].verdicts
        );
        assert!(
            list[2].verdicts.is_empty(),
            "a summary with no steps has no verdicts"
        );
        assert_eq!(list[1].consistent, Some(false));
        assert_eq!(list[2].page, Some(PathBuf::from("gd/report.html")));
        let page = std::fs::read_to_string(render(&root).unwrap()).unwrap();
        assert!(page.contains("<a href=\"gd/report.html\">gd</a>"), "{page}");
        assert!(page.contains("NO: its numbers are not trusted"), "{page}");
        assert!(
            render(&root.join("empty")).is_err(),
            "an empty directory is refused"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
