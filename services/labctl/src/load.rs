//! `labctl load`: open-loop load against the gateway (crates/lab-load; loopback only, bounded,
//! stops by itself), and `labctl load set-rate|set-mix` for the run already going.

use anyhow::Context;
use lab_load::{LoadArgs, TenantMix};

use crate::Globals;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LoadCli {
    #[command(subcommand)]
    command: Option<LoadCommand>,
    #[command(flatten)]
    args: LoadArgs,
}

#[derive(clap::Subcommand)]
enum LoadCommand {
    /// Change the arrival rate of the `labctl load` running on this machine.
    SetRate { rate: f64 },
    /// Change the tenant mix (size or uniform) of the `labctl load` running on this machine.
    SetMix {
        #[arg(value_enum)]
        mix: TenantMix,
    },
}

pub async fn run(cli: LoadCli, g: &Globals) -> anyhow::Result<()> {
    match cli.command {
        Some(LoadCommand::SetRate { rate }) => {
            lab_load::set_rate(&g.state_dir, rate)?;
            println!(
                "rate set to {rate} requests/s (a running `labctl load` applies it within 1 s)"
            );
        }
        Some(LoadCommand::SetMix { mix }) => {
            lab_load::set_mix(&g.state_dir, mix)?;
            println!("tenant mix set to {mix:?} (a running `labctl load` applies it within 1 s)");
        }
        None => {
            let args = cli.args;
            let keys = lab_seed::read_api_keys(&g.data_dir)?;
            let source = lab_load::DocSource::open(args.docs, &g.data_dir, args.tenants)?;
            let control = lab_load::RateControl::new(args.rate)?;
            let follower = lab_load::follow_rate_file(&g.state_dir, control.clone());
            // Ctrl-C or SIGTERM ends the run as its duration would: no more arrivals, the
            // answers in flight awaited, the report printed and written.
            let stopper = control.clone();
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .context("listening for SIGTERM")?;
            let interrupt = tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                eprintln!("  stopped: no more arrivals; waiting for the answers in flight");
                stopper.stop();
            });
            let report = lab_load::run_with(&args, control, keys, source).await;
            follower.abort();
            interrupt.abort();
            let report = report?;
            lab_load::print(&report);
            if let Some(path) = &args.out {
                std::fs::write(path, serde_json::to_vec_pretty(&report)?)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("  series written to {}", path.display());
            }
        }
    }
    Ok(())
}
