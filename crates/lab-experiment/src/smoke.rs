//! `labctl scenarios check`: every scenario file in `load/scenarios/` run — not only parsed — on
//! the running lab, by the same engine that runs game days and the replay. One runner for all of
//! them (issue 25): CI runs this and nothing else over the scenario files.
//!
//! Two kinds of file, told apart by where they live:
//! - **smoke** (`load/scenarios/*.yaml`): each file runs with its timeline shrunk to about
//!   `--seconds` (every phase at least 1 s), at `--rate` (the files' own rates are meant for a
//!   release build at full length). What must hold at any length: the run completes, every action
//!   of its timeline succeeds, the load is answered, and the run's own counts add up (sent =
//!   answered by status; every 5xx named by exactly one origin). Verdicts and expectations need
//!   full length, so they are reported by each run and not judged.
//! - **judged** (`load/scenarios/faults/*.yaml`, 20–50 s each by design): each file runs at full
//!   length and its own rate (or `--fault-rate`), `--strict`: a verdict that did not hold or was
//!   not measured fails the run, as an action that failed does.
//!
//! Every file runs in each mode; between runs the lab is put back in the shape it had (a
//! scenario's scale-up would otherwise carry into the next). Every run sends documents of its own
//! (a seed per run): the caches, and the enrichment rows a judged run counts as its own, hold
//! whatever earlier runs and earlier invocations sent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use lab_native::{Lab, Log, NativeLab, Service};
use lab_report::doc::{Cell, Doc, Table, Tone};
use lab_seed::ApiKeyRecord;

use crate::{scenario, GamedayArgs, Globals, Mode};

/// How a scenario file is run (by its directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Kind {
    /// Shrunk to about `--seconds`, verdicts reported, not judged.
    Smoke,
    /// Full length, `--strict`: the fault scenarios.
    Judged,
}

impl Kind {
    fn words(self) -> &'static str {
        match self {
            Kind::Smoke => "smoke",
            Kind::Judged => "judged",
        }
    }
}

/// The subdirectory of the scenario directory whose files are judged.
const JUDGED_DIR: &str = "faults";

#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// About how long each smoke run lasts: every phase scaled by the same factor and kept at
    /// least 1 s long (a file of many phases runs a little longer). 8: every phase of every file
    /// runs with load, in ~4 minutes for all smoke files in both modes.
    #[arg(long, default_value_t = 8)]
    pub seconds: u64,
    /// The base rate of every smoke run (requests/s): low enough for a debug build on 2 cores.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// The rate of every judged run instead of each file's own (requests/s), e.g. 150 to stress
    /// a comparison (default: the file's).
    #[arg(long)]
    pub fault_rate: Option<f64>,
    /// Flags held for every run, `name=variant` (repeatable), e.g.
    /// `resilience.concurrency_adaptive=off` to judge the static limit.
    #[arg(long = "flag")]
    pub flags: Vec<String>,
    /// The modes each file runs in.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "resilient,legacy"
    )]
    pub modes: Vec<Mode>,
    /// The kinds of file to run (`judged`: only the fault scenarios).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "smoke,judged"
    )]
    pub kinds: Vec<Kind>,
    /// Only these scenarios (file names without .yaml; default: every file).
    #[arg(long = "only", value_delimiter = ',')]
    pub only: Vec<String>,
    /// The first run's seed (each later run adds 1). Default: from the clock, so that no run
    /// resends documents an earlier invocation sent to the same lab and database.
    #[arg(long)]
    pub seed: Option<u64>,
    /// The gateway (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub gateway: String,
    /// Where the runs' reports, `scenarios-check.md` and `index.html` go (default:
    /// <state dir>/reports/scenarios-check-<unix time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One file in one mode, and what went wrong (`None`: everything held).
struct Outcome {
    scenario: String,
    kind: Kind,
    mode: Mode,
    seconds: u64,
    problem: Option<String>,
    out: PathBuf,
}

/// Every scenario file of `kinds` under `dir` (`faults/` judged, the rest smoke), smoke first,
/// each kind sorted by name; `only` narrows them by name and must name only files that exist.
fn files(dir: &Path, kinds: &[Kind], only: &[String]) -> anyhow::Result<Vec<(PathBuf, Kind)>> {
    let yaml_in = |d: &Path| -> anyhow::Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .with_context(|| format!("reading {} (or set LAB_SCENARIO_DIR)", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        v.sort();
        Ok(v)
    };
    let mut all: Vec<(PathBuf, Kind)> = yaml_in(dir)?
        .into_iter()
        .map(|p| (p, Kind::Smoke))
        .collect();
    let judged = dir.join(JUDGED_DIR);
    if judged.is_dir() {
        all.extend(yaml_in(&judged)?.into_iter().map(|p| (p, Kind::Judged)));
    }
    let stem = |p: &Path| {
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    // Runs are written to <out>/<name>-<mode>: two files of one name would overwrite each other.
    let mut names: Vec<String> = all.iter().map(|(p, _)| stem(p)).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        anyhow::bail!(
            "two scenario files are named {} (in {} and {JUDGED_DIR}/)",
            w[0],
            dir.display()
        );
    }
    if let Some(missing) = only.iter().find(|o| !names.contains(o)) {
        anyhow::bail!(
            "--only {missing}: no such scenario in {} (have: {})",
            dir.display(),
            names.join(", ")
        );
    }
    let out: Vec<(PathBuf, Kind)> = all
        .into_iter()
        .filter(|(p, k)| kinds.contains(k) && (only.is_empty() || only.contains(&stem(p))))
        .collect();
    anyhow::ensure!(
        !out.is_empty(),
        "no scenario file of kinds {kinds:?} in {}",
        dir.display()
    );
    Ok(out)
}

/// A flag argument as `labctl gameday --flag` takes it: `name=variant`.
fn check_flag(f: &str) -> anyhow::Result<()> {
    match f.split_once('=') {
        Some((n, v)) if !n.is_empty() && !v.is_empty() => Ok(()),
        _ => anyhow::bail!("--flag {f}: write name=variant"),
    }
}

/// Replicas per service of the running native lab.
fn shape(state_dir: &Path) -> anyhow::Result<BTreeMap<String, usize>> {
    let state = lab_native::supervise::read_state(state_dir)?
        .context("no lab is up: start one with `labctl up`")?;
    let mut n = BTreeMap::new();
    for p in state.procs {
        *n.entry(p.binary).or_default() += 1;
    }
    Ok(n)
}

pub async fn check(args: &CheckArgs, g: &Globals, keys: Vec<ApiKeyRecord>) -> anyhow::Result<()> {
    anyhow::ensure!(args.seconds >= 1, "--seconds must be at least 1");
    anyhow::ensure!(!args.modes.is_empty(), "--modes: at least one mode");
    anyhow::ensure!(!args.kinds.is_empty(), "--kinds: at least one kind");
    for r in [Some(args.rate), args.fault_rate].into_iter().flatten() {
        anyhow::ensure!(
            r > 0.0 && r <= 1000.0,
            "rate {r}: use 0 < rate <= 1000 requests/s"
        );
    }
    for f in &args.flags {
        check_flag(f)?;
    }
    // Every file parsed and named right before the first run: a bad file found minutes into
    // the check would leave no table.
    let mut scenarios = Vec::new();
    for (path, kind) in files(&scenario::scenario_dir(), &args.kinds, &args.only)? {
        let sc = scenario::parse_file(&path)?;
        // `--only`, the duplicate check and the run directories go by the file's name.
        anyhow::ensure!(
            path.file_stem().is_some_and(|s| *s == *sc.name),
            "{}: its name is {:?}; name a scenario after its file",
            path.display(),
            sc.name
        );
        scenarios.push((path, kind, sc));
    }
    let out = args.out.clone().unwrap_or_else(|| {
        g.state_dir
            .join("reports")
            .join(format!("scenarios-check-{}", crate::now_s()))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let lab = NativeLab::new(&g.state_dir, Log::file(&out.join("restore.log"))?);
    let before = shape(&g.state_dir)?;
    // < 10^9 with room for every run: document indexes stay within bigint.
    let mut seed = args.seed.unwrap_or((crate::now_s() % 10_000_000) * 100);
    let mut outcomes = Vec::new();
    for (path, kind, sc) in &scenarios {
        let total: u64 = sc.phases.iter().map(|p| p.seconds).sum();
        let (time_scale, rate) = match kind {
            Kind::Smoke => (
                (args.seconds as f64 / total as f64).min(1.0),
                Some(args.rate),
            ),
            Kind::Judged => (1.0, args.fault_rate),
        };
        for &mode in &args.modes {
            let run_out = out.join(format!("{}-{}", sc.name, mode.variant()));
            let ga = GamedayArgs {
                scenario: path.to_string_lossy().into_owned(),
                mode,
                rate,
                tenants: None,
                flags: args.flags.clone(),
                gateway: args.gateway.clone(),
                out: Some(run_out.clone()),
                targets: None,
                strict: *kind == Kind::Judged,
                seed,
                time_scale,
            };
            seed += 1;
            println!(
                "\n== {} ({}) in {} mode, x{time_scale:.3}",
                sc.name,
                kind.words(),
                mode.variant()
            );
            let problem = match crate::run(&ga, g, &g.state_dir, keys.clone()).await {
                Err(e) => Some(format!("{e:#}")),
                Ok(ran) => {
                    let failed: Vec<String> = ran
                        .actions
                        .iter()
                        .filter(|a| !a.ok)
                        .map(|a| a.command.clone())
                        .collect();
                    if !failed.is_empty() {
                        Some(format!("actions failed: {}", failed.join(", ")))
                    } else if ran.answered == 0 {
                        Some(format!("none of {} requests was answered", ran.sent))
                    } else {
                        None
                    }
                }
            };
            restore(&lab, &g.state_dir, &before).await?;
            let seconds = sc
                .phases
                .iter()
                .map(|p| ((p.seconds as f64 * time_scale).round() as u64).max(1))
                .sum();
            outcomes.push(Outcome {
                scenario: sc.name.clone(),
                kind: *kind,
                mode,
                seconds,
                problem,
                out: run_out,
            });
        }
    }
    let md = doc(args, &outcomes).markdown();
    std::fs::write(out.join("scenarios-check.md"), &md)?;
    println!("\n{md}");
    match lab_report::index::render(&out) {
        Ok(page) => println!("every run: {}", page.display()),
        // The runs and their table are written; a missing index loses nothing they say.
        Err(e) => eprintln!("warning: no index.html over {}: {e:#}", out.display()),
    }
    let failed = outcomes.iter().filter(|o| o.problem.is_some()).count();
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} runs failed (see {})",
        outcomes.len(),
        out.join("scenarios-check.md").display()
    );
    Ok(())
}

/// Put the lab back in the shape `before` (a scenario may have scaled a service).
async fn restore(
    lab: &NativeLab,
    state_dir: &Path,
    before: &BTreeMap<String, usize>,
) -> anyhow::Result<()> {
    let now = shape(state_dir)?;
    let mut scaled = false;
    for (service, &n) in before {
        if now.get(service) != Some(&n) {
            let s: Service = service.parse()?;
            lab.scale(s, n)
                .await
                .with_context(|| format!("putting {service} back to {n} replicas"))?;
            scaled = true;
        }
    }
    if !scaled {
        return Ok(());
    }
    // A scale-down returns once the removed replicas are sent SIGTERM; the supervisor drops them
    // from the lab's state only when they have exited, and the next run takes its targets from
    // that state: a replica still draining would be a target that never applies the next run's
    // flags (CI, 2026-12-07: `incident` in legacy mode failed on orchestrators 4-8 "did not apply
    // client.mode=legacy within 15 s", the resilient run's scale-up still draining). So: wait
    // until the state is the shape again, bounded.
    let deadline = std::time::Instant::now() + RESTORE_WAIT;
    loop {
        let now = shape(state_dir)?;
        if before
            .iter()
            .all(|(service, n)| now.get(service) == Some(n))
        {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the lab is not back to {before:?} {} s after the scale (it is {now:?}): a removed \
             replica has not exited (see its log under the state dir's logs/)",
            RESTORE_WAIT.as_secs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// How long a restore waits for removed replicas to exit: a replica's own drain is bounded by
/// its shutdown grace (seconds); a minute is room for eight of them on a loaded 2-core machine.
const RESTORE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

fn doc(args: &CheckArgs, outcomes: &[Outcome]) -> Doc {
    let failed = outcomes.iter().filter(|o| o.problem.is_some()).count();
    let flags = if args.flags.is_empty() {
        String::new()
    } else {
        format!(" Flags held for every run: `{}`.", args.flags.join("`, `"))
    };
    let fault_rate = args
        .fault_rate
        .map_or("its own rate".to_string(), |r| format!("{r} rps"));
    let mut d = Doc::new("Every scenario file, run");
    d.para(format!(
        "{} runs ({} failed): each scenario file in each mode. \
         **Smoke** runs are shrunk to about {} s at {} rps and held when the run completed, every \
         action of its timeline succeeded, the load was answered and the run's counts add up \
         (verdicts need full length and are not judged). **Judged** runs (the fault scenarios) \
         run at full length and {fault_rate}, and hold only when every verdict held as well.\
         {flags}",
        outcomes.len(),
        failed,
        args.seconds,
        args.rate
    ));
    let mut t = Table::new(&["scenario", "kind", "mode", ">seconds", "result", "report"]);
    for o in outcomes {
        t.row(vec![
            o.scenario.as_str().into(),
            o.kind.words().into(),
            o.mode.variant().into(),
            o.seconds.to_string().into(),
            match &o.problem {
                None => Cell::text("held"),
                Some(p) => Cell {
                    lines: vec![format!("failed: {p}")],
                    tone: Tone::Bad,
                },
            },
            o.out.display().to_string().into(),
        ]);
    }
    d.table(t);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../load/scenarios")
    }

    fn names(v: &[(PathBuf, Kind)]) -> Vec<(String, Kind)> {
        v.iter()
            .map(|(p, k)| (p.file_stem().unwrap().to_string_lossy().into_owned(), *k))
            .collect()
    }

    #[test]
    fn every_scenario_file_is_found_the_fault_files_judged_and_only_narrows_them() {
        let both = [Kind::Smoke, Kind::Judged];
        let all = names(&files(&dir(), &both, &[]).unwrap());
        let smoke: Vec<_> = all.iter().filter(|(_, k)| *k == Kind::Smoke).collect();
        let judged: Vec<_> = all.iter().filter(|(_, k)| *k == Kind::Judged).collect();
        assert!(smoke.len() >= 9, "{all:?}");
        assert!(judged.len() >= 5, "{all:?}");
        assert!(judged.iter().any(|(n, _)| n == "rollouts"), "{all:?}");
        assert!(smoke.iter().any(|(n, _)| n == "incident"), "{all:?}");
        // Every file on disk is run: nothing in the directory is skipped.
        let on_disk = std::fs::read_dir(dir()).unwrap().count()
            + std::fs::read_dir(dir().join(JUDGED_DIR)).unwrap().count()
            - 1; // the faults/ directory itself
        assert_eq!(all.len(), on_disk, "{all:?}");

        let one = names(&files(&dir(), &both, &["rollouts".into()]).unwrap());
        assert_eq!(one, vec![("rollouts".to_string(), Kind::Judged)]);
        let only_judged = files(&dir(), &[Kind::Judged], &[]).unwrap();
        assert_eq!(only_judged.len(), judged.len());
        // A name of the other kind selects nothing, and an empty selection is an error.
        assert!(files(&dir(), &[Kind::Smoke], &["rollouts".into()]).is_err());
        let err = files(&dir(), &both, &["no-such-scenario".into()]).unwrap_err();
        assert!(format!("{err}").contains("no-such-scenario"), "{err}");
    }

    #[test]
    fn two_files_of_one_name_are_refused() {
        let tmp = std::env::temp_dir().join(format!("smoke-names-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join(JUDGED_DIR)).unwrap();
        std::fs::write(tmp.join("x.yaml"), "").unwrap();
        std::fs::write(tmp.join(JUDGED_DIR).join("x.yaml"), "").unwrap();
        let err = files(&tmp, &[Kind::Smoke, Kind::Judged], &[]).unwrap_err();
        std::fs::remove_dir_all(&tmp).unwrap();
        assert!(
            format!("{err}").contains("two scenario files are named x"),
            "{err}"
        );
    }

    #[test]
    fn a_flag_must_be_name_equals_variant() {
        assert!(check_flag("resilience.concurrency_adaptive=off").is_ok());
        for bad in ["resilience.concurrency_adaptive", "=off", "x="] {
            assert!(check_flag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_failed_run_is_counted_and_named_in_the_table() {
        let args = CheckArgs {
            seconds: 8,
            rate: 20.0,
            fault_rate: None,
            flags: vec!["resilience.concurrency_adaptive=off".into()],
            modes: vec![Mode::Resilient],
            kinds: vec![Kind::Smoke, Kind::Judged],
            only: vec![],
            seed: None,
            gateway: String::new(),
            out: None,
        };
        let o = |kind: Kind, problem: Option<&str>| Outcome {
            scenario: "incident".into(),
            kind,
            mode: Mode::Legacy,
            seconds: 9,
            problem: problem.map(String::from),
            out: PathBuf::from("x"),
        };
        let md = doc(
            &args,
            &[
                o(Kind::Smoke, None),
                o(
                    Kind::Judged,
                    Some("--strict: 1 of the verdicts did not hold (a | b)"),
                ),
            ],
        )
        .markdown();
        assert!(md.contains("2 runs (1 failed)"), "{md}");
        assert!(
            md.contains("| judged | legacy | 9 | **failed: --strict: 1 of the verdicts did not hold (a \\| b)** |"),
            "{md}"
        );
        assert!(
            md.contains("| incident | smoke | legacy | 9 | held |"),
            "{md}"
        );
        assert!(md.contains("`resilience.concurrency_adaptive=off`"), "{md}");
        assert!(md.contains("full length and its own rate"), "{md}");
    }
}
