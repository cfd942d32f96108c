//! The native lab's verbs (crates/lab-native): `up`, `down`, `status`, the timeline's operations
//! (`rollout restart`, `scale`, `limits memory`), and the supervisor `up` starts.

use std::path::PathBuf;

use lab_experiment::action::{LimitsCommand, RolloutCommand};
use lab_native::{Lab, Log, NativeLab, Service};

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
    /// Rolling restart of a service's replicas (the postmortem's rollback: processes cycle,
    /// caches start cold).
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// Scale a service to N replicas (new ones cold, with their own connection slots).
    Scale {
        service: Service,
        #[arg(long)]
        replicas: usize,
    },
    /// Resource limits of a service's replicas, enforced by the kernel (cgroups).
    Limits {
        #[command(subcommand)]
        command: LimitsCommand,
    },
    /// (internal) The supervisor process `labctl up` starts.
    #[command(hide = true)]
    Supervise {
        #[arg(long)]
        plan: PathBuf,
    },
}

pub async fn run(cmd: LabCommand, g: &Globals) -> anyhow::Result<()> {
    let lab = NativeLab::new(&g.state_dir, Log::stdout());
    match cmd {
        LabCommand::Up(args) => lab_native::up(&args, &g.database_url, &g.state_dir).await,
        LabCommand::Down => lab_native::down(&g.state_dir).await,
        LabCommand::Status { json } => lab_native::status(&g.state_dir, json).await,
        LabCommand::Rollout {
            command: RolloutCommand::Restart { service },
        } => lab.rollout_restart(service).await,
        LabCommand::Scale { service, replicas } => lab.scale(service, replicas).await,
        LabCommand::Limits {
            command: LimitsCommand::Memory { service, limit },
        } => lab.limit_memory(service, limit.0).await,
        LabCommand::Supervise { plan } => lab_native::supervise::supervise(&plan).await,
    }
}
