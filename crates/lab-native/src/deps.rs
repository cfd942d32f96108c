//! The lab's dependencies as faults: `labctl fault restart postgres` restarts the PostgreSQL
//! cluster the lab's database lives in, under load — every connection of every pool dropped at
//! once, the server away for a second or two — and returns once it accepts connections again.
//! What the services make of it (a pool that heals by itself, a request that fails, a replica
//! that restarts) is the experiment's to measure.
//!
//! Only a cluster on this machine (127.0.0.1 or localhost), found by its port with Debian's
//! `pg_lsclusters`, and restarted with `pg_ctlcluster`, as `scripts/deps.sh` set it up.

use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::Log;

/// A dependency of the lab that a fault can take away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dependency {
    Postgres,
}

impl std::fmt::Display for Dependency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dependency::Postgres => "postgres",
        })
    }
}

impl std::str::FromStr for Dependency {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "postgres" => Ok(Dependency::Postgres),
            _ => bail!("no dependency {s:?}: the one a fault restarts is postgres"),
        }
    }
}

/// How long PostgreSQL may take to accept connections again (a restart takes 1–3 s here).
const BACK_WITHIN: Duration = Duration::from_secs(60);

/// The cluster (version, name) on `port` in `pg_lsclusters --no-header`'s output.
fn cluster_on(listing: &str, port: u16) -> Option<(String, String)> {
    listing.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2)? == &port.to_string()).then(|| (f[0].to_string(), f[1].to_string()))
    })
}

/// A command with nothing open but stdin, stdout and stderr: a daemon it starts (the
/// postmaster) would otherwise inherit our caller's descriptors — a `flock` on the heavy-test
/// lock among them — and hold them for its whole life.
fn without_fds(mut cmd: Command) -> Command {
    // SAFETY: close_range(2) only closes descriptors, in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    cmd
}

/// Restart `dep` (see the module's docs) and wait until it answers again.
pub async fn restart(dep: Dependency, database_url: &str, log: &Log) -> anyhow::Result<()> {
    match dep {
        Dependency::Postgres => restart_postgres(database_url, log).await,
    }
}

async fn restart_postgres(database_url: &str, log: &Log) -> anyhow::Result<()> {
    let url = url::Url::parse(database_url).context("the lab's database URL")?;
    // `[::1]` in a URL is `::1` to pg_isready.
    let host = url
        .host_str()
        .unwrap_or("localhost")
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    anyhow::ensure!(
        ["127.0.0.1", "localhost", "::1"].contains(&host.as_str()),
        "fault restart postgres: the lab's database is on {host}, not on this machine; restart \
         it where it runs"
    );
    let port = url.port().unwrap_or(5432);
    let listing = tokio::process::Command::new("pg_lsclusters")
        .arg("--no-header")
        .output()
        .await
        .context("pg_lsclusters (Debian's postgresql-common) is needed to find the cluster")?;
    let listing = String::from_utf8_lossy(&listing.stdout);
    let Some((version, name)) = cluster_on(&listing, port) else {
        bail!("no PostgreSQL cluster on port {port} (pg_lsclusters): {listing}");
    };
    let t = Instant::now();
    log.line(format!(
        "PostgreSQL {version}/{name} (port {port}) restarting: every connection dropped"
    ));
    let mut cmd = Command::new("pg_ctlcluster");
    cmd.args(["--skip-systemctl-redirect", &version, &name, "restart"]);
    let out = tokio::task::spawn_blocking(move || without_fds(cmd).output())
        .await?
        .context("pg_ctlcluster")?;
    anyhow::ensure!(
        out.status.success(),
        "pg_ctlcluster {version} {name} restart: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + BACK_WITHIN;
    loop {
        let ready = tokio::process::Command::new("pg_isready")
            .args(["-q", "-h", &host, "-p", &port.to_string()])
            .status()
            .await
            .is_ok_and(|s| s.success());
        if ready {
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "PostgreSQL {version}/{name} does not accept connections {} s after its restart",
                BACK_WITHIN.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    log.line(format!(
        "  PostgreSQL accepts connections again after {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_is_found_by_its_port() {
        let listing = "15  main    5432 online postgres /var/lib/postgresql/15/main /var/log/postgresql/postgresql-15-main.log\n\
                       16  scratch 5433 down   postgres /var/lib/postgresql/16/scratch x\n";
        assert_eq!(
            cluster_on(listing, 5432),
            Some(("15".into(), "main".into()))
        );
        assert_eq!(
            cluster_on(listing, 5433),
            Some(("16".into(), "scratch".into()))
        );
        assert_eq!(cluster_on(listing, 6543), None);
        assert_eq!(
            "postgres".parse::<Dependency>().unwrap().to_string(),
            "postgres"
        );
        assert!("redis".parse::<Dependency>().is_err());
    }
}
