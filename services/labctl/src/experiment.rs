//! The experiments (crates/lab-experiment): `gameday`, `replay` (the main job), `ablate`, `map`,
//! `scenarios check` (every scenario file: the fault scenarios judged, the others at smoke
//! length), and `report` (draw any run's report again from its summary.json).

use std::path::PathBuf;

use lab_experiment::action::Action;
use lab_experiment::{ablate, map, replay, smoke};

use crate::Globals;

#[derive(clap::Subcommand)]
pub enum ExperimentCommand {
    /// Run a game-day scenario (load/scenarios/*.yaml) against the running lab and report.
    Gameday(lab_experiment::GamedayArgs),
    /// The lab's main job: calibrate, then replay the postmortem's morning from the real trigger
    /// in both modes (fresh labs), with a verdict per step (load/scenarios/incident.yaml).
    Replay(replay::ReplayArgs),
    /// Test the postmortem's claims: the fix taken apart, control by control, on the real
    /// trigger (calibrated load, stale plan, rollback, ANALYZE), every cell a fresh lab.
    Ablate(ablate::AblateArgs),
    /// The metastability map: how long the plan stays stale × offered load, per mode — which
    /// cells stay failed after ANALYZE.
    Map(map::MapArgs),
    /// The scenario files in load/scenarios.
    Scenarios {
        #[command(subcommand)]
        command: ScenariosCommand,
    },
    /// Draw a run's report again from its summary.json alone — its Markdown and report.html,
    /// whatever the run (game day, replay, ablation, map, chain limit); given a directory of
    /// runs (.lab/reports), write an index.html over them.
    Report {
        /// A run's directory (with summary.json and series.jsonl), or a directory of runs.
        dir: PathBuf,
    },
}

#[derive(clap::Subcommand)]
pub enum ScenariosCommand {
    /// Run every scenario file, in each mode, on the running lab: the fault scenarios
    /// (load/scenarios/faults) judged at full length; the others shortened to a few seconds, where
    /// each must complete, its actions succeed and its counts add up (verdicts need full length).
    Check(smoke::CheckArgs),
}

pub async fn run(cmd: ExperimentCommand, g: &Globals) -> anyhow::Result<()> {
    let keys = || lab_seed::read_api_keys(&g.data_dir);
    // The verbs that start native labs of this database: their keys must be its keys.
    let own_keys = || crate::seed::keys_of_this_database(g);
    let eg = g.experiment();
    match cmd {
        ExperimentCommand::Gameday(args) => {
            lab_experiment::run(&args, &eg, &g.state_dir, keys()?).await?;
            Ok(())
        }
        ExperimentCommand::Replay(args) => {
            let keys = own_keys().await?;
            stopped_cleanly(replay::run(&args, &eg, keys), g).await
        }
        ExperimentCommand::Ablate(args) if args.list => {
            ablate::list();
            Ok(())
        }
        ExperimentCommand::Ablate(args) => {
            let keys = own_keys().await?;
            stopped_cleanly(ablate::run(&args, &eg, keys), g).await
        }
        ExperimentCommand::Map(args) => {
            let keys = own_keys().await?;
            stopped_cleanly(map::run(&args, &eg, keys), g).await
        }
        ExperimentCommand::Scenarios {
            command: ScenariosCommand::Check(args),
        } => smoke::check(&args, &eg, keys()?).await,
        ExperimentCommand::Report { dir } => {
            let page = if dir.join(lab_report::run::FILE).is_file() {
                lab_experiment::report::draw(&dir)?;
                dir.join("report.html")
            } else {
                lab_report::index::render(&dir)?
            };
            println!("{}", page.display());
            Ok(())
        }
    }
}

/// Run an experiment that starts labs of its own (replay, ablate, map), its load generator at a
/// higher CPU priority than its lab (`lab_native::priority`). On Ctrl-C or SIGTERM it
/// is stopped where it is, its lab brought down and the flag store reset, so an interrupted run
/// leaves no services running and no flag (`client.mode=legacy`, a kill switch) for the next lab
/// to start with. Before this, a map stopped with SIGTERM left its lab up and the shared store in
/// legacy mode (2026-12-07). What was measured stays under `--out`.
async fn stopped_cleanly(
    experiment: impl std::future::Future<Output = anyhow::Result<()>>,
    g: &Globals,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    generator_first()?;
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("listening for SIGTERM: {e}"))?;
    let why = tokio::select! {
        r = experiment => return r,
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
    };
    eprintln!(
        "\ninterrupted ({why}): bringing the lab down, resetting the flags, fresh statistics"
    );
    // Each is tried whatever the others did: each is a thing left behind. The statistics: a run
    // stopped between the plan flip and its ANALYZE leaves the planner stale, and the next
    // calibration would measure a stale database as the healthy one.
    let log = g.state_dir.join("logs").join("interrupted.log");
    let cleanup = async {
        let down = lab_native::down(&g.state_dir).await;
        let flags = async { lab_flags::Store::new(&g.redis_url)?.reset().await }.await;
        let analyze = lab_experiment::act(&g.experiment(), Action::ANALYZE, &log).await;
        (down, flags, analyze)
    };
    // The cleanup can take a minute (a lab's supervisor stops its consumers one at a time): a
    // second Ctrl-C or SIGTERM ends the process at once, saying what is left to do.
    let left_to_do = "run `labctl down`, `labctl flags reset` and `labctl remediate analyze`";
    let done = tokio::select! {
        done = cleanup => Some(done),
        _ = tokio::signal::ctrl_c() => None,
        _ = term.recv() => None,
    };
    let Some((down, flags, analyze)) = done else {
        eprintln!("interrupted again during the cleanup: {left_to_do}");
        std::process::exit(130);
    };
    match (down, flags, analyze) {
        (Ok(()), Ok(()), Ok(())) => anyhow::bail!(
            "interrupted ({why}): the lab is down, the flags are reset and the statistics fresh; \
             what was measured is kept under --out (map and ablate read measured cells back when \
             run again with the same --out)"
        ),
        (down, flags, analyze) => anyhow::bail!(
            "interrupted ({why}), and the cleanup failed: lab down: {down:?}; flags reset: \
             {flags:?}; ANALYZE: {analyze:?} ({left_to_do}; log {})",
            log.display()
        ),
    }
}

/// The experiment's process (its load generator, probes and scrapes) at `LAB_GENERATOR_NICE`
/// (default `lab_native::priority::GENERATOR_NICE`; `0` runs it as the lab's equal, as before
/// 2026-12-07); the lab it starts runs at 0 either way.
fn generator_first() -> anyhow::Result<()> {
    let nice = match std::env::var("LAB_GENERATOR_NICE") {
        Ok(v) => v
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|n| (-20..=0).contains(n))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "LAB_GENERATOR_NICE={v:?}: a nice value from -20 to 0 (the generator at the \
                     lab's priority or above; to run everything lower, run labctl under `nice`)"
                )
            })?,
        Err(_) => lab_native::priority::GENERATOR_NICE,
    };
    match lab_native::priority::set_own(nice) {
        Ok(threads) => eprintln!(
            "load generator at nice {nice} ({threads} threads), the lab at 0 \
             (LAB_GENERATOR_NICE; lab_native::priority)"
        ),
        Err(e) => eprintln!(
            "load generator at nice {} (the lab's own priority): nice {nice} could not be set \
             ({e}; raising a priority needs CAP_SYS_NICE); its dispatch lag is measured either way",
            lab_native::priority::own()
        ),
    }
    Ok(())
}
