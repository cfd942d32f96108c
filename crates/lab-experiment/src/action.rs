//! A scenario's timeline, typed: what a phase's `run:` and a scenario's `cleanup:` may do.
//!
//! A scenario writes an action in the operator's own words (`rollout restart orchestrator`,
//! `scale orchestrator --replicas 5`, `backfill --only invalidate`), and the same words work at
//! a terminal as `labctl <words>`. Here they are parsed, whole, when the scenario loads (a
//! misspelt service or a missing `--replicas` refuses the file, not the run 20 minutes in), and
//! executed in process: the database trigger through `lab_trigger`, the fleet's operations
//! through [`Lab`], a dependency's fault through `lab_native::deps`, a flag through the flag
//! store. What each action did goes, line by line, to the run's `actions.log`.

use std::fmt;
use std::str::FromStr;

use anyhow::Context;
use clap::Parser;
use lab_native::deps::{self, Dependency, Deps};
use lab_native::{Lab, Log, Replica, Service};
use lab_trigger::backfill::{self, Job, Step as BackfillStep};
use lab_trigger::remediate::{self, Remedy};

/// One action of a timeline.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum Action {
    /// The 03:00 backfill, one of its steps, or the pre-incident state restored.
    Backfill(Job),
    /// ANALYZE (the 11:31 fix) or VACUUM (which does not cure the plan).
    Remediate(Remedy),
    /// Argo's rollback: every replica restarted, one at a time, every cache cold.
    RolloutRestart(Service),
    /// New (cold) replicas, or fewer.
    Scale(Service, usize),
    /// A memory limit on every replica, enforced by the kernel (`None` lifts it).
    LimitMemory(Service, Option<u64>),
    /// One replica killed outright (SIGKILL: a lost node), its restart awaited.
    Kill(Replica),
    /// A dependency restarted under load (PostgreSQL: every connection dropped).
    Restart(Dependency),
    /// A dependency taken away (Redis: shut down, it comes back empty), until `Start`.
    Stop(Dependency),
    /// A dependency `Stop` took away, started again with the configuration it had.
    Start(Dependency),
    /// A runtime flag set in the flag store (checked against the flags' definitions when the
    /// scenario loads), as `labctl flags set` sets it.
    SetFlag { flag: String, variant: String },
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum RolloutCommand {
    /// Restart every replica of a service, one at a time: each is stopped gracefully and
    /// replaced by a new process (cold caches), and the next waits until it is ready.
    Restart {
        /// orchestrator, entity-service, edge-gateway, enrichment.
        service: Service,
    },
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum LimitsCommand {
    /// Put every replica of a service under a memory limit (`none` lifts it). The kernel's OOM
    /// killer enforces it; the supervisor restarts a killed replica and reports OOMKilled.
    Memory {
        service: Service,
        /// A size (`700M`, `4G`, bytes) or `none`.
        #[arg(value_parser = parse_limit)]
        limit: Limit,
    },
}

/// A memory limit as the operator writes it: a size, or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit(pub Option<u64>);

fn parse_limit(s: &str) -> anyhow::Result<Limit> {
    Ok(Limit(match s {
        "none" => None,
        size => Some(lab_native::cgroup::parse_size(size)?),
    }))
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum FaultCommand {
    /// Kill one replica with SIGKILL (no drain: a lost node, an OOM kill); the supervisor
    /// restarts it, and this waits until it is ready again.
    Kill {
        /// A replica, as `labctl status` names it: entity-service-1, orchestrator-2, ...
        replica: Replica,
    },
    /// Restart a dependency of the lab under load and wait until it answers again: `postgres`
    /// (its cluster on this machine, with pg_ctlcluster: every pool's connections dropped).
    Restart { dependency: Dependency },
    /// Take a dependency away until `fault start`: `redis` (SHUTDOWN NOSAVE: the flag store and
    /// the rate limiter gone; it comes back empty). Returns once it no longer answers.
    Stop { dependency: Dependency },
    /// Start a dependency `fault stop` took away, with the configuration it had, and wait until
    /// it answers (nothing to do if it answers already).
    Start { dependency: Dependency },
}

/// The fleet's operations in labctl's words: `labctl rollout|scale|limits …` at a terminal and a
/// scenario's `run:` parse them with this one definition.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum OpsWords {
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
    /// Faults: a replica killed, a dependency restarted — what the lab must survive.
    Fault {
        #[command(subcommand)]
        command: FaultCommand,
    },
}

impl OpsWords {
    /// The action these words name (a replica count the native lab cannot run is refused).
    pub fn action(self) -> anyhow::Result<Action> {
        match self {
            OpsWords::Rollout {
                command: RolloutCommand::Restart { service },
            } => Action::RolloutRestart(service),
            OpsWords::Scale { service, replicas } => {
                lab_native::ops::check_replicas(replicas)?;
                Action::Scale(service, replicas)
            }
            OpsWords::Limits {
                command: LimitsCommand::Memory { service, limit },
            } => Action::LimitMemory(service, limit.0),
            OpsWords::Fault {
                command: FaultCommand::Kill { replica },
            } => Action::Kill(replica),
            OpsWords::Fault {
                command: FaultCommand::Restart { dependency },
            } => Action::Restart(dependency),
            OpsWords::Fault {
                command: FaultCommand::Stop { dependency },
            } => Action::Stop(dependency),
            OpsWords::Fault {
                command: FaultCommand::Start { dependency },
            } => Action::Start(dependency),
        }
        .supported()
    }
}

impl Action {
    /// Refuse, when the words are read, a fault the lab does not do to that dependency.
    fn supported(self) -> anyhow::Result<Action> {
        match self {
            Action::Restart(Dependency::Redis) => anyhow::bail!(
                "fault restart redis: stop it and start it (fault stop redis, fault start redis): \
                 how long it stays away is the scenario's"
            ),
            Action::Stop(Dependency::Postgres) | Action::Start(Dependency::Postgres) => {
                anyhow::bail!(
                    "fault stop|start postgres: the lab's PostgreSQL is restarted (fault restart \
                     postgres), never left down: other tests share its cluster"
                )
            }
            a => Ok(a),
        }
    }
}

/// Every action's words, as labctl parses them (no binary name: a scenario writes `scale …`,
/// not `labctl scale …`).
#[derive(Debug, Parser)]
#[command(no_binary_name = true, name = "action")]
enum Words {
    Backfill {
        #[arg(long, value_enum, conflicts_with = "reset")]
        only: Option<BackfillStep>,
        #[arg(long)]
        reset: bool,
    },
    Remediate {
        #[command(subcommand)]
        remedy: Remedy,
    },
    Flags {
        #[command(subcommand)]
        command: FlagWords,
    },
    #[command(flatten)]
    Ops(OpsWords),
}

#[derive(Debug, clap::Subcommand)]
enum FlagWords {
    Set { flag: String, variant: String },
}

impl FromStr for Action {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let words = Words::try_parse_from(s.split_whitespace()).map_err(|e| {
            // clap's rendering, first line only: the rest is usage for a terminal.
            let e = e.to_string();
            anyhow::anyhow!(
                "action {s:?}: {} (actions: backfill [--only populate|invalidate | --reset], \
                 remediate analyze|vacuum, rollout restart <service>, scale <service> \
                 --replicas N, limits memory <service> <size|none>, fault kill <replica>, \
                 fault restart postgres, fault stop|start redis, flags set <flag> <variant>)",
                e.lines().next().unwrap_or("not understood").trim()
            )
        })?;
        Ok(match words {
            Words::Backfill { reset: true, .. } => Action::Backfill(Job::Reset),
            Words::Backfill { only, .. } => Action::Backfill(Job::Backfill(only)),
            Words::Remediate { remedy } => Action::Remediate(remedy),
            Words::Flags {
                command: FlagWords::Set { flag, variant },
            } => {
                lab_flags::Definitions::embedded()
                    .check(&flag, &variant)
                    .with_context(|| format!("action {s:?}"))?;
                Action::SetFlag { flag, variant }
            }
            Words::Ops(ops) => ops.action()?,
        })
    }
}

impl TryFrom<String> for Action {
    type Error = anyhow::Error;

    fn try_from(s: String) -> anyhow::Result<Self> {
        s.parse()
    }
}

impl From<Action> for String {
    fn from(a: Action) -> String {
        a.to_string()
    }
}

/// The action in the words it was written in (what `actions.log` and the reports show).
impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Backfill(Job::Reset) => write!(f, "backfill --reset"),
            Action::Backfill(Job::Backfill(None)) => write!(f, "backfill"),
            Action::Backfill(Job::Backfill(Some(BackfillStep::Populate))) => {
                write!(f, "backfill --only populate")
            }
            Action::Backfill(Job::Backfill(Some(BackfillStep::Invalidate))) => {
                write!(f, "backfill --only invalidate")
            }
            Action::Remediate(Remedy::Analyze) => write!(f, "remediate analyze"),
            Action::Remediate(Remedy::Vacuum) => write!(f, "remediate vacuum"),
            Action::RolloutRestart(s) => write!(f, "rollout restart {s}"),
            Action::Scale(s, n) => write!(f, "scale {s} --replicas {n}"),
            Action::LimitMemory(s, None) => write!(f, "limits memory {s} none"),
            Action::LimitMemory(s, Some(b)) => write!(f, "limits memory {s} {b}"),
            Action::Kill(r) => write!(f, "fault kill {r}"),
            Action::Restart(d) => write!(f, "fault restart {d}"),
            Action::Stop(d) => write!(f, "fault stop {d}"),
            Action::Start(d) => write!(f, "fault start {d}"),
            Action::SetFlag { flag, variant } => write!(f, "flags set {flag} {variant}"),
        }
    }
}

impl Action {
    /// The backfill's invalidating step: the hot lookup's plan flips.
    pub const INVALIDATE: Action = Action::Backfill(Job::Backfill(Some(BackfillStep::Invalidate)));
    /// The 11:31 fix.
    pub const ANALYZE: Action = Action::Remediate(Remedy::Analyze);

    /// Does it drop `locale`'s statistics and invalidate every cached plan (the whole backfill
    /// or its second step)?
    pub fn invalidates_plans(&self) -> bool {
        matches!(
            self,
            Action::Backfill(Job::Backfill(None | Some(BackfillStep::Invalidate)))
        )
    }

    /// Does it give the planner its statistics back (ANALYZE)?
    pub fn cures_plans(&self) -> bool {
        *self == Action::ANALYZE
    }

    /// Do it: the trigger against the lab's database, the fleet's operations through `lab`, a
    /// dependency's fault on this machine, a flag in the flag store; what it did goes to `log`.
    /// Returns once done (a rollout: every replica back and in rotation).
    pub async fn run(&self, lab: &impl Lab, deps: Deps<'_>, log: &Log) -> anyhow::Result<()> {
        let database_url = deps.database_url;
        match *self {
            Action::Backfill(job) => {
                let r =
                    backfill::run(database_url, job, backfill::DEFAULT_BATCH_IDS, false).await?;
                log.line(r.to_string().trim_end());
            }
            Action::Remediate(remedy) => {
                let r = remediate::run(database_url, remedy).await?;
                log.line(r.to_string().trim_end());
            }
            Action::RolloutRestart(s) => lab.rollout_restart(s).await?,
            Action::Scale(s, n) => lab.scale(s, n).await?,
            Action::LimitMemory(s, bytes) => lab.limit_memory(s, bytes).await?,
            Action::Kill(r) => lab.kill(r).await?,
            Action::Restart(d) => deps::restart(d, deps, log).await?,
            Action::Stop(d) => deps::stop(d, deps, log).await?,
            Action::Start(d) => deps::start(d, deps, log).await?,
            Action::SetFlag {
                ref flag,
                ref variant,
            } => {
                lab_flags::Store::new(deps.redis_url)?
                    .set(flag, variant)
                    .await
                    .with_context(|| format!("setting {flag}={variant} in the flag store"))?;
                log.line(format!("{flag} = {variant}"));
            }
        }
        Ok(())
    }
}

/// One item of a phase's `run:`: an action, and whether the scenario needs it to succeed (the
/// words alone) or to fail (`{ action: <words>, expect: fails }`: a flag set while the flag
/// store is down must be refused, not lost). Either way it is the action's own check: an
/// outcome other than the one expected fails a `--strict` run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub action: Action,
    pub expect: Expect,
}

/// What a [`Step`] must do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    #[default]
    Succeeds,
    Fails,
}

impl Step {
    /// Did the action go as the scenario expects (`failure`: why it failed, if it did)?
    pub fn as_expected(&self, failure: Option<&str>) -> bool {
        match self.expect {
            Expect::Succeeds => failure.is_none(),
            Expect::Fails => failure.is_some(),
        }
    }
}

impl From<Action> for Step {
    fn from(action: Action) -> Step {
        Step {
            action,
            expect: Expect::Succeeds,
        }
    }
}

impl PartialEq<Action> for Step {
    fn eq(&self, a: &Action) -> bool {
        self.expect == Expect::Succeeds && self.action == *a
    }
}

/// The words, and `(expected to fail)` after those that must.
impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.expect {
            Expect::Succeeds => write!(f, "{}", self.action),
            Expect::Fails => write!(f, "{} (expected to fail)", self.action),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Step {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Step, D::Error> {
        use serde::de::{self, MapAccess, Visitor};

        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            action: Action,
            expect: Expect,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Step;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an action's words, or { action: <words>, expect: fails }")
            }
            // The words' own error (which word, what is allowed), not serde's "no variant".
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Step, E> {
                s.parse::<Action>()
                    .map(Step::from)
                    .map_err(|e| E::custom(format!("{e:#}")))
            }
            fn visit_map<M: MapAccess<'de>>(self, m: M) -> Result<Step, M::Error> {
                let full: Full =
                    serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(m))?;
                Ok(Step {
                    action: full.action,
                    expect: full.expect,
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl serde::Serialize for Step {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self.expect {
            Expect::Succeeds => self.action.serialize(s),
            Expect::Fails => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("action", &self.action)?;
                m.serialize_entry("expect", &self.expect)?;
                m.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_reads_back_from_the_words_it_prints() {
        let all = [
            Action::Backfill(Job::Reset),
            Action::Backfill(Job::Backfill(None)),
            Action::Backfill(Job::Backfill(Some(BackfillStep::Populate))),
            Action::Backfill(Job::Backfill(Some(BackfillStep::Invalidate))),
            Action::Remediate(Remedy::Analyze),
            Action::Remediate(Remedy::Vacuum),
            Action::RolloutRestart(Service::Orchestrator),
            Action::Scale(Service::Orchestrator, 5),
            Action::LimitMemory(Service::Orchestrator, Some(700 << 20)),
            Action::LimitMemory(Service::EntityService, None),
            Action::Kill("entity-service-1".parse().unwrap()),
            Action::Restart(Dependency::Postgres),
            Action::Stop(Dependency::Redis),
            Action::Start(Dependency::Redis),
            Action::SetFlag {
                flag: "fault.entity.latency_fraction".into(),
                variant: "0.25".into(),
            },
        ];
        for a in all {
            assert_eq!(a.to_string().parse::<Action>().unwrap(), a, "{a}");
        }
        assert_eq!(
            "limits memory orchestrator 700M".parse::<Action>().unwrap(),
            Action::LimitMemory(Service::Orchestrator, Some(700 << 20))
        );
    }

    #[test]
    fn a_step_is_the_words_or_the_words_with_what_they_must_do() {
        let steps: Vec<Step> = serde_norway::from_str(
            "- fault stop redis\n\
             - { action: flags set fault.entity.latency_fraction 0.25, expect: fails }\n",
        )
        .unwrap();
        assert_eq!(steps[0], Action::Stop(Dependency::Redis));
        assert_eq!(steps[1].expect, Expect::Fails);
        assert!(steps[1].as_expected(Some("Redis is down")));
        assert!(
            !steps[1].as_expected(None),
            "a set that went through is a failed check"
        );
        assert!(!steps[0].as_expected(Some("no Redis")));
        let back: Vec<Step> =
            serde_norway::from_str(&serde_norway::to_string(&steps).unwrap()).unwrap();
        assert_eq!(back, steps);
        // The words' own error, not serde's "did not match any variant".
        let e = serde_norway::from_str::<Vec<Step>>("- fault stop redys\n").unwrap_err();
        assert!(e.to_string().contains("redys"), "{e}");
        let e =
            serde_norway::from_str::<Vec<Step>>("- { action: fault stop redis, expect: maybe }\n")
                .unwrap_err();
        assert!(e.to_string().contains("maybe"), "{e}");
    }

    /// Only the first word was checked before: `scale orchestrater --replicas 5` loaded and
    /// failed 20 minutes into a replay.
    #[test]
    fn a_wrong_word_anywhere_refuses_the_action_naming_it() {
        for (words, says) in [
            ("scale orchestrater --replicas 5", "orchestrater"),
            ("scale orchestrator", "--replicas"),
            ("scale orchestrator --replicas 500", "32"),
            ("rollout restart", "service"),
            ("backfill --only everything", "everything"),
            ("backfill --only populate --reset", "--reset"),
            ("remediate reindex", "reindex"),
            ("limits memory orchestrator 7 lakh", "lakh"),
            ("db status", "db"),
            ("fault kill entity-service", "<service>-<n>"),
            ("fault kill gateway-1", "no service"),
            ("fault restart redis", "fault stop redis"),
            ("fault restart kafka", "postgres or redis"),
            ("flags set client.mode chaos", "chaos"),
            ("flags set no.such.flag on", "no.such.flag"),
            ("flags set client.mode", "variant"),
            ("", "actions:"),
        ] {
            let e = format!("{:#}", words.parse::<Action>().unwrap_err());
            assert!(e.contains(says), "{words:?}: {e}");
        }
    }
}
