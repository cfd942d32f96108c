//! `labctl scenarios check`: every scenario file run — not only parsed — at smoke length on the
//! running lab, by the same engine that runs game days and the replay.
//!
//! Each file in the scenario directory runs in each mode with its timeline shrunk to about
//! `--seconds` (every phase at least 1 s), at `--rate` (the files' own rates are meant for a
//! release build at full length). What must hold at any length: the run completes, every action
//! of its timeline succeeds, the load is answered, and the run's own counts add up (sent =
//! answered by status; every 5xx named by exactly one origin). Verdicts and expectations need
//! full length, so they are reported by each run and not judged here. Between runs the lab is
//! put back in the shape it had (a scenario's scale-up would otherwise carry into the next).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use lab_native::{Lab, Log, NativeLab, Service};
use lab_seed::ApiKeyRecord;

use crate::{scenario, GamedayArgs, Globals, Mode};

#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// About how long each run lasts: every phase scaled by the same factor and kept at least
    /// 1 s long (a file of many phases runs a little longer). 8: every phase of every file runs
    /// with load, in ~4 minutes for all files in both modes.
    #[arg(long, default_value_t = 8)]
    pub seconds: u64,
    /// The base rate of every run (requests/s): low enough for a debug build on 2 cores.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// The modes each file runs in.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "resilient,legacy"
    )]
    pub modes: Vec<Mode>,
    /// Only these scenarios (names; default: every file in the scenario directory).
    #[arg(long = "only", value_delimiter = ',')]
    pub only: Vec<String>,
    /// The gateway (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub gateway: String,
    /// Where the runs' reports and `scenarios-check.md` go (default:
    /// <state dir>/reports/scenarios-check-<unix time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One file in one mode, and what went wrong (`None`: everything held).
struct Outcome {
    scenario: String,
    mode: Mode,
    seconds: u64,
    problem: Option<String>,
    out: PathBuf,
}

/// Every scenario file in `dir`, sorted by name.
fn files(dir: &Path, only: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {} (or set LAB_SCENARIO_DIR)", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| {
            only.is_empty()
                || p.file_stem()
                    .is_some_and(|s| only.iter().any(|o| *o == s.to_string_lossy()))
        })
        .collect();
    out.sort();
    anyhow::ensure!(!out.is_empty(), "no scenario file in {}", dir.display());
    Ok(out)
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
    let out = args.out.clone().unwrap_or_else(|| {
        g.state_dir
            .join("reports")
            .join(format!("scenarios-check-{}", crate::now_s()))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let lab = NativeLab::new(&g.state_dir, Log::file(&out.join("restore.log"))?);
    let before = shape(&g.state_dir)?;
    let mut outcomes = Vec::new();
    for (i, path) in files(&scenario::scenario_dir(), &args.only)?
        .iter()
        .enumerate()
    {
        let sc = scenario::parse_file(path)?;
        let total: u64 = sc.phases.iter().map(|p| p.seconds).sum();
        let time_scale = (args.seconds as f64 / total as f64).min(1.0);
        for (j, &mode) in args.modes.iter().enumerate() {
            let run_out = out.join(format!("{}-{}", sc.name, mode.variant()));
            let ga = GamedayArgs {
                scenario: path.to_string_lossy().into_owned(),
                mode,
                rate: Some(args.rate),
                tenants: None,
                flags: Vec::new(),
                gateway: args.gateway.clone(),
                out: Some(run_out.clone()),
                targets: None,
                strict: false,
                // Back-to-back runs on one lab: each its own documents, or the next run finds
                // the previous one's in the caches.
                seed: 1 + (i * args.modes.len() + j) as u64,
                time_scale,
            };
            println!(
                "\n== {} in {} mode, x{time_scale:.3}",
                sc.name,
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
                mode,
                seconds,
                problem,
                out: run_out,
            });
        }
    }
    let md = markdown(args, &outcomes);
    std::fs::write(out.join("scenarios-check.md"), &md)?;
    println!("\n{md}");
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
    for (service, &n) in before {
        if now.get(service) != Some(&n) {
            let s: Service = service.parse()?;
            lab.scale(s, n)
                .await
                .with_context(|| format!("putting {service} back to {n} replicas"))?;
        }
    }
    Ok(())
}

fn markdown(args: &CheckArgs, outcomes: &[Outcome]) -> String {
    let failed = outcomes.iter().filter(|o| o.problem.is_some()).count();
    let mut md = format!(
        "# Every scenario, run at smoke length\n\n{} runs ({} failed): each scenario file in each \
         mode, shrunk to about {} s at {} rps. Held when the run completed, every action of its \
         timeline succeeded, the load was answered and the run's counts add up; verdicts need \
         full length and are not judged here.\n\n| scenario | mode | seconds | result | report |\n\
         | --- | --- | --- | --- | --- |\n",
        outcomes.len(),
        failed,
        args.seconds,
        args.rate
    );
    for o in outcomes {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            o.scenario,
            o.mode.variant(),
            o.seconds,
            o.problem
                .as_deref()
                .map_or("held".to_string(), |p| format!("**failed**: {p}")),
            o.out.display()
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_file_is_found_and_only_narrows_them() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../load/scenarios");
        let all = files(&dir, &[]).unwrap();
        assert!(all.len() >= 9, "{all:?}");
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        let one = files(&dir, &["incident".into()]).unwrap();
        assert_eq!(one.len(), 1);
        assert!(files(&dir, &["no-such-scenario".into()]).is_err());
    }

    #[test]
    fn a_failed_run_is_counted_and_named_in_the_table() {
        let args = CheckArgs {
            seconds: 8,
            rate: 20.0,
            modes: vec![Mode::Resilient],
            only: vec![],
            gateway: String::new(),
            out: None,
        };
        let o = |problem: Option<&str>| Outcome {
            scenario: "incident".into(),
            mode: Mode::Legacy,
            seconds: 9,
            problem: problem.map(String::from),
            out: PathBuf::from("x"),
        };
        let md = markdown(
            &args,
            &[o(None), o(Some("actions failed: remediate analyze"))],
        );
        assert!(md.contains("2 runs (1 failed)"), "{md}");
        assert!(
            md.contains("**failed**: actions failed: remediate analyze"),
            "{md}"
        );
        assert!(md.contains("| incident | legacy | 9 | held |"), "{md}");
    }
}
