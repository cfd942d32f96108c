//! The experiments (crates/lab-experiment): `gameday`, `replay` (the main job), `ablate`, `map`,
//! `scenarios check` (every scenario file: the fault scenarios judged, the others at smoke
//! length), and `report` (draw any run's report again from its summary.json).

use std::path::PathBuf;

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
        ExperimentCommand::Replay(args) => replay::run(&args, &eg, own_keys().await?).await,
        ExperimentCommand::Ablate(args) if args.list => {
            ablate::list();
            Ok(())
        }
        ExperimentCommand::Ablate(args) => ablate::run(&args, &eg, own_keys().await?).await,
        ExperimentCommand::Map(args) => map::run(&args, &eg, own_keys().await?).await,
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
