//! `fault stop redis` and `fault start redis`: the flag store and the gateway's rate limiter
//! taken away under load, and brought back.
//!
//! Stopping reads the running server's configuration first (`CONFIG GET`: port, bind, dir,
//! logfile, persistence) and keeps it in the lab's state directory; then `SHUTDOWN NOSAVE`, so
//! the server comes back empty, as the lab's Redis (nothing on disk) does after any restart.
//! Starting runs `redis-server` again with that configuration, daemonized, as `scripts/deps.sh`
//! starts it, and waits for its PONG. Start is idempotent: a Redis that answers is left alone,
//! so a scenario's cleanup can always end with it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::deps::{local_host, without_fds};
use crate::Log;

/// The server's settings a restart must keep (the rest are its defaults either way).
const KEPT: [&str; 6] = ["bind", "dir", "logfile", "save", "appendonly", "dbfilename"];
/// How long a shutdown or a start may take to show (both take milliseconds here).
const WITHIN: Duration = Duration::from_secs(15);

/// What `stop` leaves for `start`.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct Stopped {
    host: String,
    port: u16,
    /// `redis-server`'s arguments, `--daemonize yes` included.
    args: Vec<String>,
}

fn stopped_file(state_dir: &Path) -> PathBuf {
    state_dir.join("run").join("redis-stopped.json")
}

fn address(redis_url: &str) -> anyhow::Result<(String, u16)> {
    let url = url::Url::parse(redis_url).context("the lab's Redis URL")?;
    Ok((
        local_host(&url, "the lab's Redis")?,
        url.port().unwrap_or(6379),
    ))
}

/// `redis-cli -h host -p port ARGS…`: its stdout, or why it failed.
fn cli(host: &str, port: u16, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("redis-cli")
        .args(["--raw", "-h", host, "-p", &port.to_string()])
        .args(args)
        .output()
        .context("redis-cli (Debian's redis-tools) is needed to take Redis away")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    anyhow::ensure!(
        out.status.success() && !text.starts_with("ERR"),
        "redis-cli {}: {}{}",
        args.join(" "),
        text.trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(text)
}

fn answers(host: &str, port: u16) -> bool {
    cli(host, port, &["ping"]).is_ok_and(|s| s.trim() == "PONG")
}

/// `CONFIG GET`'s answer (name and value on alternate lines) as `redis-server` arguments.
fn server_args(port: u16, config: &str) -> Vec<String> {
    let lines: Vec<&str> = config.lines().collect();
    let mut args = vec!["--port".to_string(), port.to_string()];
    for pair in lines.chunks(2) {
        let [name, value] = pair else { continue };
        if !KEPT.contains(name) {
            continue;
        }
        args.push(format!("--{name}"));
        if *name == "bind" {
            // Several addresses are several arguments (`--bind 127.0.0.1 -::1`).
            args.extend(value.split_whitespace().map(str::to_string));
        } else {
            // `save ""` (no snapshots) stays one empty argument.
            args.push(value.to_string());
        }
    }
    args.extend(["--daemonize".to_string(), "yes".to_string()]);
    args
}

async fn until(what: &str, done: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + WITHIN;
    while !done() {
        if Instant::now() >= deadline {
            bail!("{what} after {} s", WITHIN.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

pub async fn stop(redis_url: &str, state_dir: &Path, log: &Log) -> anyhow::Result<()> {
    let (host, port) = address(redis_url)?;
    let mut config = String::new();
    for name in KEPT {
        config.push_str(
            &cli(&host, port, &["config", "get", name]).with_context(|| {
                format!("fault stop redis: Redis at {host}:{port} must answer before it is stopped")
            })?,
        );
    }
    let stopped = Stopped {
        args: server_args(port, &config),
        host: host.clone(),
        port,
    };
    let file = stopped_file(state_dir);
    std::fs::create_dir_all(file.parent().expect("in run/"))?;
    std::fs::write(&file, serde_json::to_vec_pretty(&stopped)?)
        .with_context(|| format!("writing {}", file.display()))?;
    let t = Instant::now();
    log.line(format!(
        "Redis {host}:{port} shutting down (SHUTDOWN NOSAVE: it comes back empty); its \
         configuration kept in {}",
        file.display()
    ));
    // The server closes the connection instead of answering: redis-cli's exit code says nothing.
    let _ = cli(&host, port, &["shutdown", "nosave"]);
    until(&format!("Redis {host}:{port} still answers"), || {
        !answers(&host, port)
    })
    .await?;
    log.line(format!(
        "  Redis gone after {:.2} s",
        t.elapsed().as_secs_f64()
    ));
    Ok(())
}

pub async fn start(redis_url: &str, state_dir: &Path, log: &Log) -> anyhow::Result<()> {
    let (host, port) = address(redis_url)?;
    let file = stopped_file(state_dir);
    if answers(&host, port) {
        log.line(format!("Redis {host}:{port} answers: nothing to start"));
        let _ = std::fs::remove_file(&file);
        // Restarted by someone else, it may have forgotten the lab's users (idempotent).
        crate::fleet::recreate_redis_users(redis_url, state_dir).await?;
        return Ok(());
    }
    let text = std::fs::read(&file).with_context(|| {
        format!(
            "fault start redis: Redis at {host}:{port} does not answer and no `fault stop redis` \
             left its configuration in {}; start it as scripts/deps.sh does \
             (`bash scripts/deps.sh --no-kafka`)",
            file.display()
        )
    })?;
    let stopped: Stopped = serde_json::from_slice(&text)
        .with_context(|| format!("{}: not what `fault stop redis` writes", file.display()))?;
    anyhow::ensure!(
        (stopped.host.as_str(), stopped.port) == (host.as_str(), port),
        "{} holds Redis {}:{}, not the lab's {host}:{port}",
        file.display(),
        stopped.host,
        stopped.port
    );
    let t = Instant::now();
    log.line(format!(
        "Redis {host}:{port} starting: redis-server {}",
        stopped.args.join(" ")
    ));
    let mut cmd = Command::new("redis-server");
    cmd.args(&stopped.args);
    let out = tokio::task::spawn_blocking(move || without_fds(cmd).output())
        .await?
        .context("redis-server (Debian's redis-server) is needed to start Redis again")?;
    anyhow::ensure!(
        out.status.success(),
        "redis-server {}: {}{}",
        stopped.args.join(" "),
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    until(&format!("Redis {host}:{port} does not answer"), || {
        answers(&host, port)
    })
    .await?;
    let _ = std::fs::remove_file(&file);
    log.line(format!(
        "  Redis answers again after {:.2} s (empty)",
        t.elapsed().as_secs_f64()
    ));
    // An empty Redis has forgotten the lab's users too: the services could not log in again.
    if crate::fleet::recreate_redis_users(redis_url, state_dir).await? {
        log.line("  the lab's Redis users created again");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_read_becomes_the_servers_arguments() {
        let config = "bind\n127.0.0.1 -::1\ndir\n/var/lib/redis\nlogfile\n\nsave\n\n\
                      appendonly\nno\ndbfilename\ndump.rdb\nmaxmemory\n0\n";
        let args = server_args(6379, config);
        let want: Vec<String> = [
            "--port",
            "6379",
            "--bind",
            "127.0.0.1",
            "-::1",
            "--dir",
            "/var/lib/redis",
            "--logfile",
            "",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dbfilename",
            "dump.rdb",
            "--daemonize",
            "yes",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            args, want,
            "maxmemory is not kept; save \"\" stays an argument"
        );
    }

    #[test]
    fn only_a_redis_on_this_machine_is_taken_away() {
        assert_eq!(
            address("redis://127.0.0.1:6380").unwrap(),
            ("127.0.0.1".into(), 6380)
        );
        assert_eq!(address("redis://[::1]").unwrap(), ("::1".into(), 6379));
        let e = address("redis://cache.internal:6379").unwrap_err();
        assert!(format!("{e:#}").contains("not on this machine"), "{e:#}");
    }
}
