//! The lab's dependencies as faults. `labctl fault restart postgres` restarts the PostgreSQL
//! cluster the lab's database lives in, under load — every connection of every pool dropped at
//! once, the server away for a second or two — and returns once it accepts connections again.
//! `labctl fault stop redis` shuts the flag store and rate limiter's Redis down (`SHUTDOWN
//! NOSAVE`: it comes back empty, as a Redis that keeps nothing on disk does), and `labctl fault
//! start redis` starts it again with the configuration it had. What the services make of it (a
//! pool that heals by itself, a limiter that limits on its own, flags kept or lost) is the experiment's
//! to measure.
//!
//! Only servers on this machine (127.0.0.1, localhost or ::1): a PostgreSQL cluster found by its
//! port with Debian's `pg_lsclusters` and restarted with `pg_ctlcluster`, as `scripts/deps.sh`
//! set it up; a Redis driven with `redis-cli` and `redis-server`.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::Log;

/// A dependency of the lab that a fault can take away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dependency {
    Postgres,
    Redis,
}

impl std::fmt::Display for Dependency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dependency::Postgres => "postgres",
            Dependency::Redis => "redis",
        })
    }
}

impl std::str::FromStr for Dependency {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "postgres" => Ok(Dependency::Postgres),
            "redis" => Ok(Dependency::Redis),
            _ => bail!("no dependency {s:?}: postgres or redis"),
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
pub(crate) fn without_fds(mut cmd: Command) -> Command {
    // A dependency runs at the ordinary priority whatever its caller's (crate::priority).
    crate::priority::ordinary_in_child(&mut cmd);
    // SAFETY: close_range(2) only closes descriptors, in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    cmd
}

/// Where the lab's dependencies are, and where a stopped one's configuration is kept.
#[derive(Debug, Clone, Copy)]
pub struct Deps<'a> {
    pub database_url: &'a str,
    pub redis_url: &'a str,
    /// The lab's state directory (`fault stop redis` leaves the server's configuration there
    /// for `fault start redis`).
    pub state_dir: &'a Path,
}

/// Restart `dep` (see the module's docs) and wait until it answers again.
pub async fn restart(dep: Dependency, deps: Deps<'_>, log: &Log) -> anyhow::Result<()> {
    match dep {
        Dependency::Postgres => restart_postgres(deps.database_url, log).await,
        Dependency::Redis => bail!(
            "fault restart redis: stop and start it (`fault stop redis`, `fault start redis`): \
             the outage's length is the experiment's"
        ),
    }
}

/// Take `dep` away (see the module's docs) and return once it no longer answers.
pub async fn stop(dep: Dependency, deps: Deps<'_>, log: &Log) -> anyhow::Result<()> {
    match dep {
        Dependency::Redis => crate::redis_fault::stop(deps.redis_url, deps.state_dir, log).await,
        Dependency::Postgres => bail!(
            "fault stop postgres: the lab's database is restarted, not stopped (`fault restart \
             postgres`): the scenario must not outlive the database other tests use"
        ),
    }
}

/// Bring `dep` back after [`stop`] (nothing to do if it answers) and wait until it answers.
pub async fn start(dep: Dependency, deps: Deps<'_>, log: &Log) -> anyhow::Result<()> {
    match dep {
        Dependency::Redis => crate::redis_fault::start(deps.redis_url, deps.state_dir, log).await,
        Dependency::Postgres => bail!("fault start postgres: see `fault restart postgres`"),
    }
}

/// The host of a dependency's URL, if it is on this machine (`[::1]` is `::1` to the tools).
pub(crate) fn local_host(url: &url::Url, what: &str) -> anyhow::Result<String> {
    let host = url
        .host_str()
        .unwrap_or("localhost")
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    anyhow::ensure!(
        ["127.0.0.1", "localhost", "::1"].contains(&host.as_str()),
        "{what} is on {host}, not on this machine: a fault acts only on this machine's servers; \
         take it away where it runs"
    );
    Ok(host)
}

async fn restart_postgres(database_url: &str, log: &Log) -> anyhow::Result<()> {
    let url = url::Url::parse(database_url).context("the lab's database URL")?;
    let host = local_host(&url, "the lab's database")?;
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
        assert_eq!("redis".parse::<Dependency>().unwrap(), Dependency::Redis);
        assert!("kafka".parse::<Dependency>().is_err());
    }
}
