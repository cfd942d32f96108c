//! The native lab's verbs (crates/lab-native): `up`, `down`, `status`, the timeline's operations
//! (`rollout restart`, `scale`, `limits memory`), and the supervisor `up` starts.

use std::path::PathBuf;

use lab_experiment::action::OpsWords;
use lab_native::{Log, NativeLab};

use crate::Globals;

#[derive(clap::Subcommand)]
pub enum LabCommand {
    /// Start the native lab in the background and wait until every replica is ready.
    Up(lab_native::UpArgs),
    /// Stop the native lab gracefully.
    Down,
    /// Show every replica: pid, readiness, restarts.
    Status {
        #[arg(long)]
        json: bool,
    },
    // rollout, scale, limits: the same words a scenario's timeline uses (one definition).
    #[command(flatten)]
    Ops(OpsWords),
    /// (internal) The supervisor process `labctl up` starts.
    #[command(hide = true)]
    Supervise {
        #[arg(long)]
        plan: PathBuf,
    },
}

pub async fn run(cmd: LabCommand, g: &Globals) -> anyhow::Result<()> {
    let log = Log::stdout();
    let lab = NativeLab::new(&g.state_dir, log.clone());
    match cmd {
        LabCommand::Up(args) => {
            lab_native::up(&args, &g.database_url, &g.redis_url, &g.state_dir).await
        }
        LabCommand::Down => lab_native::down(&g.state_dir).await,
        LabCommand::Status { json } => lab_native::status(&g.state_dir, json).await,
        LabCommand::Ops(words) => words.action()?.run(&lab, g.experiment().deps(), &log).await,
        LabCommand::Supervise { plan } => lab_native::supervise::supervise(&plan).await,
    }
}
