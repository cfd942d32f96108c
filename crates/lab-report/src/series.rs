//! What a run scraped — every replica each second — and the series turned into per-phase
//! numbers. (The scraping itself is lab-experiment's.)
//!
//! Counters are summed as increments between consecutive scrapes of the same replica, and a
//! counter that goes down is a restarted process (its new value is the increment) — so an
//! OOM-killed or restarted replica does not corrupt a phase's totals.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::quantity::{Across, Filter};

/// The pseudo-service whose series are the supervisor's counters (restarts, OOM kills).
pub const SUPERVISOR: &str = "supervisor";

/// One replica of the running lab.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// `edge-gateway`, `orchestrator`, `entity-service`.
    pub service: String,
    /// `orchestrator-1`, ...
    pub replica: String,
    pub url: String,
}

/// The services a quantity of [`ANY`] reads: every replica of the lab (not the supervisor's
/// pseudo-target, nor the database's) — a fact every process must show, such as a flag applied.
pub const ANY: &str = "*";
/// The pseudo-service whose series are facts read from the lab's database during the run (the
/// enrichment rows of the run's documents), scraped only for a scenario that judges them.
pub const DATABASE: &str = "database";

impl Target {
    /// Is this target one of `service`'s replicas ([`ANY`]: any service's)?
    pub fn is(&self, service: &str) -> bool {
        self.service == service
            || (service == ANY && self.service != SUPERVISOR && self.service != DATABASE)
    }
}

/// Everything one scrape of one replica returned (`None`: the scrape failed — replica down).
pub type Scrape = Option<HashMap<String, f64>>;

#[derive(Debug, Clone)]
pub struct Tick {
    /// Seconds since the game day started.
    pub t: f64,
    /// Index of the phase in force when this scrape was taken.
    pub phase: usize,
    /// One per target, in target order.
    pub scrapes: Vec<Scrape>,
}

/// Parse the Prometheus text format into `series → value` (`name{labels}` as exposed).
pub fn parse(text: &str) -> HashMap<String, f64> {
    lab_core::exposition::samples(text)
        .map(|s| (s.series(), s.value))
        .collect()
}

pub use lab_core::exposition::label;
use lab_core::exposition::split_series as split;

/// Per-phase computations over the ticks.
pub struct Series<'a> {
    pub targets: &'a [Target],
    pub ticks: &'a [Tick],
}

impl Series<'_> {
    /// Tick indices of `phase`, with the tick before it as the baseline.
    fn window(&self, phase: usize) -> Option<(usize, usize)> {
        let first = self.ticks.iter().position(|t| t.phase == phase)?;
        let last = self.ticks.iter().rposition(|t| t.phase == phase)?;
        Some((first.saturating_sub(1), last))
    }

    /// Sum of increments of every series of `name` (on replicas of `service`) that `filter`
    /// keeps, from tick `from` (the baseline) to tick `to`.
    pub fn increase(
        &self,
        from: usize,
        to: usize,
        service: &str,
        name: &str,
        filter: Filter,
    ) -> f64 {
        // `+ 0.0`: an empty f64 sum is -0.0, which would print as "-0.0%".
        self.increase_between(from, to, service, name, |l| filter.keep(l).then_some(()))
            .values()
            .sum::<f64>()
            + 0.0
    }

    /// Increments during `phase` (from the tick before its first), grouped by a key derived
    /// from the labels (`None`: skip).
    pub fn increase_by<K: Ord>(
        &self,
        phase: usize,
        service: &str,
        name: &str,
        key: impl Fn(&str) -> Option<K>,
    ) -> BTreeMap<K, f64> {
        match self.window(phase) {
            Some((from, to)) => self.increase_between(from, to, service, name, key),
            None => BTreeMap::new(),
        }
    }

    /// Increase over the whole run: from the first tick (the baseline scrape taken before the
    /// load started) to the last (after the settle time).
    pub fn increase_run(&self, service: &str, name: &str, keep: impl Fn(&str) -> bool) -> f64 {
        if self.ticks.is_empty() {
            return 0.0;
        }
        self.increase_between(0, self.ticks.len() - 1, service, name, |l| {
            keep(l).then_some(())
        })
        .values()
        .sum::<f64>()
            + 0.0
    }

    /// [`Series::increase_run`], grouped by a key derived from the labels.
    pub fn increase_by_run<K: Ord>(
        &self,
        service: &str,
        name: &str,
        key: impl Fn(&str) -> Option<K>,
    ) -> BTreeMap<K, f64> {
        if self.ticks.is_empty() {
            return BTreeMap::new();
        }
        self.increase_between(0, self.ticks.len() - 1, service, name, key)
    }

    /// Increments of `name` between ticks `from` (the baseline) and `to`, by key. A series
    /// missing from the replica's previous successful scrape was born since (Prometheus clients
    /// create labelled series on first use, at 0): its whole value is the increment — otherwise
    /// the first error of every origin would go uncounted.
    fn increase_between<K: Ord>(
        &self,
        from: usize,
        to: usize,
        service: &str,
        name: &str,
        key: impl Fn(&str) -> Option<K>,
    ) -> BTreeMap<K, f64> {
        let mut out = BTreeMap::new();
        for (ti, target) in self.targets.iter().enumerate() {
            if !target.is(service) {
                continue;
            }
            let mut prev: Option<&HashMap<String, f64>> = None;
            for tick in &self.ticks[from..=to] {
                let Some(Some(scrape)) = tick.scrapes.get(ti) else {
                    continue;
                };
                if let Some(p) = prev {
                    for (series, v) in scrape {
                        let (n, labels) = split(series);
                        if n != name {
                            continue;
                        }
                        let Some(k) = key(labels) else { continue };
                        let inc = match p.get(series) {
                            // A counter that went down is a restarted process: its value is new.
                            Some(before) if *v >= *before => v - before,
                            _ => *v,
                        };
                        *out.entry(k).or_insert(0.0) += inc;
                    }
                }
                prev = Some(scrape);
            }
        }
        out
    }

    /// Per tick of `first..=last`: per replica the sum of `name`'s series that `filter` keeps,
    /// combined `across` the replicas, then reduced over the ticks with `over` (max, min). `None`
    /// when no tick had the series.
    #[allow(clippy::too_many_arguments)]
    pub fn gauge(
        &self,
        first: usize,
        last: usize,
        service: &str,
        name: &str,
        filter: Filter,
        across: Across,
        over: fn(f64, f64) -> f64,
    ) -> Option<f64> {
        self.ticks[first..=last]
            .iter()
            .filter_map(|tick| self.tick_value(tick, service, name, filter, across))
            .reduce(over)
    }

    /// At the last tick of `first..=last` where EVERY replica of `service` known then was read
    /// and had the series: `name`'s series that `filter` keeps per replica, combined `across`
    /// the replicas (`Min`: what every replica reads — a flag applied by all of them). A tick
    /// where one replica was down (OOM-killed, restarting) is skipped, not read as the others'
    /// value.
    pub fn gauge_last(
        &self,
        first: usize,
        last: usize,
        service: &str,
        name: &str,
        filter: Filter,
        across: Across,
    ) -> Option<f64> {
        self.ticks[first..=last]
            .iter()
            .rev()
            .filter(|tick| {
                self.targets
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.is(service))
                    .filter_map(|(ti, _)| tick.scrapes.get(ti))
                    .all(|scrape| {
                        scrape.as_ref().is_some_and(|m| {
                            m.keys().any(|k| {
                                let (n, labels) = split(k);
                                n == name && filter.keep(labels)
                            })
                        })
                    })
            })
            .find_map(|tick| self.tick_value(tick, service, name, filter, across))
    }

    /// One tick: per replica the sum of `name`'s series that `filter` keeps; then combined
    /// `across` the replicas. `None` when no replica had the series.
    fn tick_value(
        &self,
        tick: &Tick,
        service: &str,
        name: &str,
        filter: Filter,
        across: Across,
    ) -> Option<f64> {
        let mut total: Option<f64> = None;
        for (ti, target) in self.targets.iter().enumerate() {
            if !target.is(service) {
                continue;
            }
            let Some(Some(scrape)) = tick.scrapes.get(ti) else {
                continue;
            };
            let mut replica_sum: Option<f64> = None;
            for (series, v) in scrape {
                let (n, labels) = split(series);
                if n == name && filter.keep(labels) {
                    replica_sum = Some(replica_sum.unwrap_or(0.0) + v);
                }
            }
            if let Some(r) = replica_sum {
                total = Some(match (total, across) {
                    (None, _) => r,
                    (Some(t), Across::Sum) => t + r,
                    (Some(t), Across::Max) => t.max(r),
                    (Some(t), Across::Min) => t.min(r),
                });
            }
        }
        total
    }

    /// `histogram_quantile` over the increases of `name`_bucket on `service` from tick `from`
    /// to `to` (linear interpolation inside the bucket, as Prometheus does). `None` with no
    /// observations.
    pub fn quantile(
        &self,
        from: usize,
        to: usize,
        service: &str,
        name: &str,
        q: f64,
    ) -> Option<f64> {
        let buckets = self.increase_between(from, to, service, &format!("{name}_bucket"), |l| {
            let le = label(l, "le")?;
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse::<f64>().ok()?
            };
            // BTreeMap keys must be Ord: milli-units of the bound, +Inf as u64::MAX.
            Some(if bound.is_infinite() {
                u64::MAX
            } else {
                (bound * 1e6) as u64
            })
        });
        histogram_quantile(q, &buckets)
    }
}

/// Prometheus' `histogram_quantile` on cumulative buckets keyed by upper bound in micro-units.
pub fn histogram_quantile(q: f64, buckets: &BTreeMap<u64, f64>) -> Option<f64> {
    let total = *buckets.get(&u64::MAX)?;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev_bound = 0.0;
    let mut prev_count = 0.0;
    for (bound, count) in buckets {
        let upper = if *bound == u64::MAX {
            f64::INFINITY
        } else {
            *bound as f64 / 1e6
        };
        if *count >= rank {
            if upper.is_infinite() {
                // Prometheus returns the highest finite bound: the histogram cannot say more.
                return Some(prev_bound);
            }
            let in_bucket = count - prev_count;
            let frac = if in_bucket > 0.0 {
                (rank - prev_count) / in_bucket
            } else {
                1.0
            };
            return Some(prev_bound + (upper - prev_bound) * frac);
        }
        prev_bound = upper;
        prev_count = *count;
    }
    Some(prev_bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick_of(t: f64, phase: usize, series: &[(&str, f64)]) -> Tick {
        Tick {
            t,
            phase,
            scrapes: vec![Some(
                series.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            )],
        }
    }

    #[test]
    fn a_gauge_refreshed_late_reads_0_as_a_minimum_and_1_at_the_windows_end() {
        // The plan probe after ANALYZE: the gauge keeps the stale plan's 0 until its next 5 s
        // refresh. The analyze step's precondition reads the last scrape, not the minimum.
        let targets = vec![Target {
            service: "entity-service".into(),
            replica: "entity-service-1".into(),
            url: "http://127.0.0.1:1".into(),
        }];
        let g = "entity_db_hot_plan_index_scan";
        let ticks = vec![
            tick_of(0.0, 0, &[(g, 0.0)]),
            tick_of(1.0, 1, &[(g, 0.0)]),
            tick_of(2.0, 1, &[(g, 0.0)]),
            tick_of(3.0, 1, &[(g, 1.0)]),
        ];
        let s = Series {
            targets: &targets,
            ticks: &ticks,
        };
        let all = Filter::All;
        assert_eq!(
            s.gauge(1, 3, "entity-service", g, all, Across::Min, f64::min),
            Some(0.0)
        );
        assert_eq!(
            s.gauge_last(1, 3, "entity-service", g, all, Across::Min),
            Some(1.0)
        );
    }

    #[test]
    fn a_kill_switch_counts_as_applied_only_when_every_replica_applies_it_at_the_last_scrape() {
        let targets: Vec<Target> = (1..=2)
            .map(|i| Target {
                service: "orchestrator".into(),
                replica: format!("orchestrator-{i}"),
                url: "http://127.0.0.1:1".into(),
            })
            .collect();
        let off = r#"lab_flag_variant{flag="retries.entity.enabled",variant="off"}"#;
        let on = r#"lab_flag_variant{flag="retries.entity.enabled",variant="on"}"#;
        let tick = |t: f64, a: f64, b: f64| Tick {
            t,
            phase: 1,
            scrapes: vec![
                Some([(off.to_string(), a), (on.to_string(), 1.0 - a)].into()),
                Some([(off.to_string(), b), (on.to_string(), 1.0 - b)].into()),
            ],
        };
        let keep = Filter::Is("variant", "off");
        let read = |ticks: &[Tick]| {
            Series {
                targets: &targets,
                ticks,
            }
            .gauge_last(
                1,
                ticks.len() - 1,
                "orchestrator",
                "lab_flag_variant",
                keep,
                Across::Min,
            )
        };
        let mut ticks = vec![tick(0.0, 0.0, 0.0), tick(1.0, 1.0, 0.0)];
        ticks[0].phase = 0;
        // One replica still retries at the last scrape: the switch has not taken effect.
        assert_eq!(read(&ticks), Some(0.0));
        // The one still retrying is down at the next scrape (OOM-killed): the other's `off` is
        // not "every replica" — the last tick where both were read decides.
        ticks.push(Tick {
            t: 2.0,
            phase: 1,
            scrapes: vec![Some([(off.to_string(), 1.0)].into()), None],
        });
        assert_eq!(read(&ticks), Some(0.0));
        ticks.push(tick(3.0, 1.0, 1.0));
        assert_eq!(read(&ticks), Some(1.0));
        // A replica whose scrape lacks the series (another binary) makes the tick incomplete.
        ticks.push(Tick {
            t: 4.0,
            phase: 1,
            scrapes: vec![Some([(off.to_string(), 1.0)].into()), Some(HashMap::new())],
        });
        assert_eq!(read(&ticks), Some(1.0), "tick 3 decides");
        // No complete tick in the window: not measured.
        let lone = [
            tick(0.0, 0.0, 0.0),
            Tick {
                t: 1.0,
                phase: 1,
                scrapes: vec![None, Some([(off.to_string(), 1.0)].into())],
            },
        ];
        let mut lone = lone.to_vec();
        lone[0].phase = 0;
        assert_eq!(read(&lone), None);
    }

    #[test]
    fn increase_counts_a_series_born_mid_run_and_a_restarted_counter() {
        let targets = vec![Target {
            service: "edge-gateway".into(),
            replica: "edge-gateway-1".into(),
            url: "http://127.0.0.1:1".into(),
        }];
        let e = "lab_errors_total{hop=\"orchestrator\",origin=\"breaker_open\",status=\"503\"}";
        let ticks = vec![
            tick_of(0.0, 0, &[("up", 1.0)]),
            // Born at 2: both errors count (the old reader lost the first value of every series).
            tick_of(1.0, 0, &[("up", 1.0), (e, 2.0)]),
            tick_of(2.0, 1, &[("up", 1.0), (e, 5.0)]),
            // The process restarted: 1 is new.
            tick_of(3.0, 1, &[("up", 1.0), (e, 1.0)]),
        ];
        let s = Series {
            targets: &targets,
            ticks: &ticks,
        };
        assert_eq!(
            s.increase(0, 1, "edge-gateway", "lab_errors_total", Filter::All),
            2.0
        );
        assert_eq!(
            s.increase(1, 3, "edge-gateway", "lab_errors_total", Filter::All),
            4.0
        );
        assert_eq!(
            s.increase_run("edge-gateway", "lab_errors_total", |_| true),
            6.0
        );
        // The baseline's own values are never counted.
        assert_eq!(s.increase_run("edge-gateway", "up", |_| true), 0.0);
    }

    fn target(service: &str) -> Target {
        Target {
            service: service.into(),
            replica: format!("{service}-1"),
            url: String::new(),
        }
    }

    fn tick(t: f64, phase: usize, text: Option<&str>) -> Tick {
        Tick {
            t,
            phase,
            scrapes: vec![text.map(parse)],
        }
    }

    #[test]
    fn increase_survives_a_restart_and_a_failed_scrape() {
        let targets = [target("gw")];
        let ticks = vec![
            tick(0.0, 0, Some("req_total{status=\"200\"} 10")),
            tick(1.0, 1, Some("req_total{status=\"200\"} 15")),
            tick(2.0, 1, None),
            // Restarted: the counter starts again from 0 and is at 4.
            tick(3.0, 1, Some("req_total{status=\"200\"} 4")),
            tick(
                4.0,
                1,
                Some("req_total{status=\"200\"} 6\nreq_total{status=\"503\"} 1"),
            ),
        ];
        let s = Series {
            targets: &targets,
            ticks: &ticks,
        };
        // 5 (10 -> 15) + 4 (restart) + 2 (4 -> 6) + 1: the 503 series born at the last tick.
        assert_eq!(s.increase(0, 4, "gw", "req_total", Filter::All), 12.0);
    }

    #[test]
    fn histogram_quantile_interpolates_like_prometheus() {
        let mut b = BTreeMap::new();
        b.insert(100_000, 50.0); // le=0.1
        b.insert(1_000_000, 90.0); // le=1
        b.insert(3_000_000, 100.0); // le=3
        b.insert(u64::MAX, 100.0);
        assert!((histogram_quantile(0.5, &b).unwrap() - 0.1).abs() < 1e-9);
        assert!((histogram_quantile(0.7, &b).unwrap() - 0.55).abs() < 1e-9);
        // Everything in the last finite bucket: the clamp shows as the bucket's bound, 3.0.
        let mut clamped = BTreeMap::new();
        clamped.insert(2_500_000, 0.0);
        clamped.insert(3_000_000, 100.0);
        clamped.insert(u64::MAX, 100.0);
        assert!((histogram_quantile(0.99, &clamped).unwrap() - 2.995).abs() < 1e-9);
        assert_eq!(histogram_quantile(0.5, &BTreeMap::new()), None);
    }

    #[test]
    fn label_reads_one_label() {
        assert_eq!(label("status=\"200\",le=\"0.5\"", "le"), Some("0.5"));
        assert_eq!(label("status=\"200\"", "le"), None);
    }
}
