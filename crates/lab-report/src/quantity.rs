//! What a run's numbers are, defined once: a [`Quantity`] is an expression over the scraped
//! series ([`Expr`]) evaluated over a [`Window`] of ticks. A phase's summary row is the
//! expression over the phase's window; a chart's point at second `t` is the same expression over
//! the [`RATE_WINDOW`] seconds before `t`. The table, the charts, `labctl watch` and the
//! scenario verdicts read the one list, [`crate::quantities::QUANTITIES`], so a row and its
//! panel line cannot drift apart.

use crate::series::{label, Series, Tick};

/// Which series of a metric a quantity reads.
#[derive(Debug, Clone, Copy)]
pub enum Filter {
    All,
    /// The label has this value.
    Is(&'static str, &'static str),
    /// The label's value starts with this.
    StartsWith(&'static str, &'static str),
    /// Both filters hold.
    Both(&'static Filter, &'static Filter),
    /// Either filter holds.
    Either(&'static Filter, &'static Filter),
}

impl Filter {
    pub fn keep(&self, labels: &str) -> bool {
        match self {
            Filter::All => true,
            Filter::Is(l, v) => label(labels, l) == Some(v),
            Filter::StartsWith(l, p) => label(labels, l).is_some_and(|x| x.starts_with(p)),
            Filter::Both(a, b) => a.keep(labels) && b.keep(labels),
            Filter::Either(a, b) => a.keep(labels) || b.keep(labels),
        }
    }
}

/// How a gauge's replicas are combined at one tick (each replica's matching series summed first).
#[derive(Debug, Clone, Copy)]
pub enum Across {
    Sum,
    Max,
    Min,
}

/// How a gauge's ticks are combined over a window.
#[derive(Debug, Clone, Copy)]
pub enum Over {
    Max,
    Min,
    /// The last tick where every replica of the service was read and had the series: for a
    /// state that takes a moment to arrive (a flag's watch, the plan probe's 5 s refresh), where
    /// a reduction over the window would read its first seconds.
    Last,
}

/// A unit conversion.
#[derive(Debug, Clone, Copy)]
pub enum Scale {
    Times(f64),
    Per(f64),
}

/// One quantity, as an expression over the window's series and the load generator's record.
#[derive(Debug, Clone, Copy)]
pub enum Expr {
    /// A counter's increase over the window, summed over the service's replicas (a restart and
    /// a failed scrape survived, see [`Series`]). `None` when the service has no replica or the
    /// window no tick.
    Increase {
        service: &'static str,
        metric: &'static str,
        filter: Filter,
    },
    /// A gauge: per replica the sum of its matching series, `across` the replicas at a tick,
    /// `over` the window's ticks. `None` when no tick had the series.
    Gauge {
        service: &'static str,
        metric: &'static str,
        filter: Filter,
        across: Across,
        over: Over,
    },
    /// `histogram_quantile(q)` of a histogram's increase over the window, in its own unit.
    Quantile {
        service: &'static str,
        metric: &'static str,
        q: f64,
    },
    /// Requests the load generator sent in the window's seconds (by intended send time). With
    /// no load record (`labctl watch` attached from outside): the gateway's answers.
    Sent,
    /// 200s within the 3 s budget the load generator got in the window's seconds. With no load
    /// record: the gateway's 200s (the gateway answers 504 at 3 s, so its 200s are in budget).
    Good,
    /// 200s the load generator got in the window's seconds, late ones included (no load
    /// record: the gateway's 200s).
    Answered200,
    /// `a − b`.
    Minus(&'static Expr, &'static Expr),
    /// Per second of the window.
    PerSecond(&'static Expr),
    /// `times × a / b`, when `b > 0`.
    Ratio {
        a: &'static Expr,
        b: &'static Expr,
        times: f64,
    },
    /// Attempts per first attempt, `a / (a − r)`: when there were attempts, more than retries.
    PerFirst {
        attempts: &'static Expr,
        retries: &'static Expr,
    },
    Scaled(&'static Expr, Scale),
    /// Divided by the number of the service's replicas the run knew.
    PerReplica(&'static str, &'static Expr),
    /// `then`, only where `gate` read exactly `is` over the same window: a fact whose source
    /// was down reads "not measured", not its gauge's stale value.
    Only {
        gate: &'static Expr,
        is: f64,
        then: &'static Expr,
    },
    /// Against the same expression over the run's first phase (a [`Frame::first`] must be set).
    VsFirst(&'static Expr),
    /// Over the run so far: from its start (the baseline scrape, the load's second 0) to the
    /// window's end — the run's 200s against the rows its documents left in the database.
    SinceStart(&'static Expr),
    /// A fine stream's 100 ms counts ([`Fine`]) over the window, read as `what`.
    Fine {
        of: Stream,
        what: FineWhat,
    },
}

/// What an [`Expr::Fine`] reads of a stream's 100 ms counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FineWhat {
    /// Events per second (the buckets', not a scrape's: an attempt counted as it started, not
    /// as it ended).
    Rate,
    /// How bursty: the standard deviation of the counts over their mean. Independent (Poisson)
    /// events at λ a bucket read 1/√λ (0.22 at 200/s); "pulses, with quiet gaps between" read
    /// well above that.
    Cv,
    /// The autocorrelation at a lag of `lag_ms`: a wave that comes back every `lag_ms` makes it
    /// positive, events independent of each other (an open-loop Poisson load) leave it near 0.
    Autocorrelation { lag_ms: u64 },
}

/// What a [`Fine`] stream counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// entity-service's requests as each arrived (`/debug/arrivals`): after every slot and
    /// queue on the way.
    Arrivals,
    /// The orchestrators' entity attempts as each started (`/debug/attempts`): the backoff's
    /// clock, before the legacy client's per-host slot wait.
    AttemptStarts,
}

/// Events per fine bucket — each process's own 100 ms counts (`lab_core::arrivals`), summed over
/// a service's replicas by bucket id — and where the run's t = 0 falls among them. The run keeps
/// them as [`crate::charts::FINE_FILE`] beside `series.jsonl`. A bucket is present only when
/// every replica running at the time was read for it: one replica unread makes it absent (not
/// measured), never the others' sum.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fine {
    pub bucket_ms: u64,
    /// The run's t = 0, in unix milliseconds.
    pub origin_ms: u64,
    /// Bucket id (`unix ms / bucket_ms`) → entity-service's arrivals ([`Stream::Arrivals`]).
    #[serde(alias = "counts")]
    pub arrivals: std::collections::BTreeMap<u64, u64>,
    /// Bucket id → the orchestrators' attempts started ([`Stream::AttemptStarts`]).
    #[serde(default)]
    pub attempt_starts: std::collections::BTreeMap<u64, u64>,
}

/// Fewest buckets an autocorrelation is computed over: 5 s of 100 ms buckets. Its noise for
/// independent arrivals is about 1/√n — ±0.14 at 50, ±0.07 at a 18 s phase's 180.
const FINE_MIN_BUCKETS: usize = 50;

impl Fine {
    pub fn counts(&self, of: Stream) -> &std::collections::BTreeMap<u64, u64> {
        match of {
            Stream::Arrivals => &self.arrivals,
            Stream::AttemptStarts => &self.attempt_starts,
        }
    }

    /// The buckets of stream `of` in the run's seconds `[from, to)`, `None` where not read;
    /// `None` altogether when under 90% of them were read.
    fn window(&self, of: Stream, from: f64, to: f64) -> Option<Vec<Option<f64>>> {
        let counts = self.counts(of);
        let b = self.bucket_ms.max(1) as f64;
        let origin = self.origin_ms as f64;
        let first = ((origin + from * 1e3) / b).ceil() as u64;
        let end = ((origin + to * 1e3) / b).floor() as u64;
        if end <= first {
            return None;
        }
        let read: Vec<Option<f64>> = (first..end)
            .map(|id| counts.get(&id).map(|&c| c as f64))
            .collect();
        let present = read.iter().flatten().count();
        ((present as f64) >= 0.9 * read.len() as f64).then_some(read)
    }

    /// Events per second of stream `of` in the run's seconds `[from, to)` (the buckets read;
    /// `None` under 90% of them).
    pub fn rate(&self, of: Stream, from: f64, to: f64) -> Option<f64> {
        let read = self.window(of, from, to)?;
        let present: Vec<f64> = read.into_iter().flatten().collect();
        let seconds = present.len() as f64 * self.bucket_ms.max(1) as f64 / 1e3;
        Some(present.iter().sum::<f64>() / seconds)
    }

    /// The coefficient of variation of stream `of`'s buckets in the run's seconds `[from, to)`:
    /// `None` with fewer than [`FINE_MIN_BUCKETS`], under 90% read, or no events.
    pub fn cv(&self, of: Stream, from: f64, to: f64) -> Option<f64> {
        let read: Vec<f64> = self.window(of, from, to)?.into_iter().flatten().collect();
        if read.len() < FINE_MIN_BUCKETS {
            return None;
        }
        let n = read.len() as f64;
        let mean = read.iter().sum::<f64>() / n;
        let var = read.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / n;
        (mean > 0.0).then(|| var.sqrt() / mean)
    }

    /// The autocorrelation at `lag_ms` of stream `of` in the run's seconds `[from, to)`: `None`
    /// with fewer than [`FINE_MIN_BUCKETS`] buckets, under 90% of them read, or no variation.
    /// A bucket not read counts as the window's mean (it adds nothing either way).
    pub fn autocorrelation(&self, of: Stream, from: f64, to: f64, lag_ms: u64) -> Option<f64> {
        let b = self.bucket_ms.max(1) as f64;
        let read = self.window(of, from, to)?;
        let n = read.len();
        let present = read.iter().flatten().count();
        if n < FINE_MIN_BUCKETS {
            return None;
        }
        let mean = read.iter().flatten().sum::<f64>() / present as f64;
        let x: Vec<f64> = read.iter().map(|v| v.unwrap_or(mean) - mean).collect();
        let lag = (lag_ms as f64 / b).round() as usize;
        let c0: f64 = x.iter().map(|v| v * v).sum();
        (lag > 0 && lag < n && c0 > 0.0)
            .then(|| x.iter().zip(&x[lag..]).map(|(a, b)| a * b).sum::<f64>() / c0)
    }
}

impl Expr {
    /// Every metric the expression reads (dashboards show the same ones).
    pub fn metrics(&self) -> Vec<&'static str> {
        match self {
            Expr::Increase { metric, .. }
            | Expr::Gauge { metric, .. }
            | Expr::Quantile { metric, .. } => vec![metric],
            Expr::Sent | Expr::Good | Expr::Answered200 | Expr::Fine { .. } => vec![],
            Expr::PerSecond(e)
            | Expr::Scaled(e, _)
            | Expr::PerReplica(_, e)
            | Expr::VsFirst(e)
            | Expr::SinceStart(e) => e.metrics(),
            Expr::Ratio { a, b, .. } | Expr::Minus(a, b) => [a.metrics(), b.metrics()].concat(),
            Expr::PerFirst { attempts, retries } => {
                [attempts.metrics(), retries.metrics()].concat()
            }
            Expr::Only { gate, then, .. } => [gate.metrics(), then.metrics()].concat(),
        }
    }

    /// Every service the expression reads ([`crate::series::ANY`]: all of them).
    pub fn services(&self) -> Vec<&'static str> {
        match self {
            Expr::Increase { service, .. }
            | Expr::Gauge { service, .. }
            | Expr::Quantile { service, .. } => vec![service],
            Expr::Sent | Expr::Good | Expr::Answered200 | Expr::Fine { .. } => vec![],
            Expr::PerSecond(e) | Expr::Scaled(e, _) | Expr::VsFirst(e) | Expr::SinceStart(e) => {
                e.services()
            }
            Expr::PerReplica(s, e) => [vec![*s], e.services()].concat(),
            Expr::Ratio { a, b, .. } | Expr::Minus(a, b) => [a.services(), b.services()].concat(),
            Expr::PerFirst { attempts, retries } => {
                [attempts.services(), retries.services()].concat()
            }
            Expr::Only { gate, then, .. } => [gate.services(), then.services()].concat(),
        }
    }

    /// Whether the expression reads the load generator's record (and stands in the gateway's
    /// counters without one).
    pub fn reads_load(&self) -> bool {
        match self {
            Expr::Sent | Expr::Good | Expr::Answered200 => true,
            Expr::PerSecond(e)
            | Expr::Scaled(e, _)
            | Expr::PerReplica(_, e)
            | Expr::VsFirst(e)
            | Expr::SinceStart(e) => e.reads_load(),
            Expr::Ratio { a, b, .. } | Expr::Minus(a, b) => a.reads_load() || b.reads_load(),
            _ => false,
        }
    }
}

/// Seconds behind a chart's point: like `rate(...[5s])` — one-second increments of a few hundred
/// requests are too noisy to read.
pub const RATE_WINDOW: usize = 5;

/// The ticks a window reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ticks {
    /// Counters count from this tick's values (it is not inside the window).
    pub base: usize,
    /// Gauges read `first..=last`.
    pub first: usize,
    pub last: usize,
}

/// Where an expression is evaluated: ticks, their seconds, and the load generator's seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// `None`: no tick fell in the window: nothing scraped is measured there.
    pub ticks: Option<Ticks>,
    /// What "per second" divides by.
    pub seconds: f64,
    /// The load generator's seconds `[from, to)`, counted from the load's start (the run's t = 0).
    pub load: (f64, f64),
}

impl Window {
    /// Phase `phase` as its ticks are labelled: from the tick before its first (the baseline)
    /// to its last; `seconds` long from `start`.
    pub fn phase(ticks: &[Tick], phase: usize, seconds: f64, start: f64) -> Self {
        Self::of(ticks, |t| t.phase == phase, seconds, start)
    }

    /// Phase `phase` from second `from` on (`seconds` long): its ticks before `from` are set
    /// apart, the last of them (or the tick before the phase) the baseline.
    pub fn phase_from(ticks: &[Tick], phase: usize, from: f64, seconds: f64) -> Self {
        Self::of(ticks, |t| t.phase == phase && t.t >= from, seconds, from)
    }

    /// The ticks `inside` keeps, from the tick before the first of them (the baseline) to the
    /// last; a window whose first tick is the run's first (the baseline scrape) has gauges skip
    /// it. Load seconds: `[start, start + seconds)`.
    fn of(ticks: &[Tick], inside: impl Fn(&Tick) -> bool, seconds: f64, start: f64) -> Self {
        let first = ticks.iter().position(&inside);
        let last = ticks.iter().rposition(&inside);
        let ticks = first.zip(last).map(|(first, last)| {
            let base = first.saturating_sub(1);
            Ticks {
                base,
                first: base + usize::from(base < last),
                last,
            }
        });
        Window {
            ticks,
            seconds,
            load: (start, start + seconds),
        }
    }

    /// From the run's start to this window's end: counters from the baseline scrape (tick 0),
    /// gauges from the first tick after it, the load from its second 0.
    pub fn since_start(&self) -> Self {
        Window {
            ticks: self.ticks.map(|t| Ticks {
                base: 0,
                first: usize::from(t.last > 0),
                last: t.last,
            }),
            seconds: self.load.1,
            load: (0.0, self.load.1),
        }
    }

    /// The chart's window at tick `i`: the `span` ticks before it (fewer at the run's start),
    /// gauges read at `i` itself.
    pub fn at(ticks: &[Tick], i: usize, span: usize) -> Self {
        let base = i - span.min(i);
        let (t0, t1) = (ticks[base].t, ticks[i].t);
        Window {
            ticks: Some(Ticks {
                base,
                first: i,
                last: i,
            }),
            seconds: t1 - t0,
            // Whole load seconds the counters' increments cover.
            load: (t0.floor(), t1.floor()),
        }
    }
}

/// Everything an expression reads: the series, the load generator's record, and (for
/// [`Expr::VsFirst`]) the first phase's window.
pub struct Frame<'a> {
    pub series: Series<'a>,
    pub load: &'a [lab_load::SecondSample],
    pub first: Option<Window>,
    /// entity-service's arrivals per 100 ms, where the run read them.
    pub fine: Option<&'a Fine>,
}

impl Frame<'_> {
    /// The value of `e` over `w`; `None`: not measurable there (a non-finite result included).
    pub fn eval(&self, e: &Expr, w: &Window) -> Option<f64> {
        self.raw(e, w).filter(|v| v.is_finite())
    }

    fn raw(&self, e: &Expr, w: &Window) -> Option<f64> {
        let s = &self.series;
        match *e {
            Expr::Increase {
                service,
                metric,
                filter,
            } => {
                let t = w.ticks?;
                s.targets
                    .iter()
                    .any(|t| t.is(service))
                    .then(|| s.increase(t.base, t.last, service, metric, filter))
            }
            Expr::Gauge {
                service,
                metric,
                filter,
                across,
                over,
            } => {
                let t = w.ticks?;
                match over {
                    Over::Max => {
                        s.gauge(t.first, t.last, service, metric, filter, across, f64::max)
                    }
                    Over::Min => {
                        s.gauge(t.first, t.last, service, metric, filter, across, f64::min)
                    }
                    Over::Last => s.gauge_last(t.first, t.last, service, metric, filter, across),
                }
            }
            Expr::Quantile { service, metric, q } => {
                let t = w.ticks?;
                s.quantile(t.base, t.last, service, metric, q)
            }
            Expr::Sent | Expr::Good | Expr::Answered200 if self.load.is_empty() => self.raw(
                if matches!(e, Expr::Sent) {
                    &crate::quantities::GW_REQUESTS
                } else {
                    &crate::quantities::GW_200
                },
                w,
            ),
            Expr::Sent | Expr::Good | Expr::Answered200 => {
                let n: u64 = self
                    .load
                    .iter()
                    .filter(|x| {
                        let t = x.second as f64;
                        t >= w.load.0 && t < w.load.1
                    })
                    .map(|x| match e {
                        Expr::Sent => x.sent,
                        Expr::Good => x.good,
                        _ => x.ok,
                    })
                    .sum();
                Some(n as f64)
            }
            Expr::Minus(a, b) => Some(self.raw(a, w)? - self.raw(b, w)?),
            Expr::PerSecond(e) => {
                let v = self.raw(e, w)?;
                (w.seconds > 0.0).then(|| v / w.seconds)
            }
            Expr::Ratio { a, b, times } => {
                let (a, b) = (self.raw(a, w)?, self.raw(b, w)?);
                (b > 0.0).then(|| times * a / b)
            }
            Expr::PerFirst { attempts, retries } => {
                let (a, r) = (self.raw(attempts, w)?, self.raw(retries, w)?);
                (a > r && a > 0.0).then(|| a / (a - r))
            }
            Expr::Scaled(e, Scale::Times(k)) => self.raw(e, w).map(|v| v * k),
            Expr::Scaled(e, Scale::Per(k)) => self.raw(e, w).map(|v| v / k),
            Expr::PerReplica(service, e) => {
                let n = s.targets.iter().filter(|t| t.is(service)).count();
                self.raw(e, w).map(|v| v / n.max(1) as f64)
            }
            Expr::Only { gate, is, then } => {
                (self.raw(gate, w) == Some(is)).then(|| self.raw(then, w))?
            }
            Expr::VsFirst(e) => {
                let first = self.eval(e, self.first.as_ref()?)?;
                Some(self.eval(e, w)? / first)
            }
            Expr::SinceStart(e) => self.raw(e, &w.since_start()),
            Expr::Fine { of, what } => {
                let (fine, from, to) = (self.fine?, w.load.0, w.load.1);
                match what {
                    FineWhat::Rate => fine.rate(of, from, to),
                    FineWhat::Cv => fine.cv(of, from, to),
                    FineWhat::Autocorrelation { lag_ms } => {
                        fine.autocorrelation(of, from, to, lag_ms)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::{Scrape, Target};

    #[test]
    fn either_keeps_a_series_one_of_its_filters_keeps() {
        const LATE: Filter = Filter::Is("outcome", "answered_late");
        const DROPPED: Filter = Filter::Is("outcome", "dropped");
        let gone = Filter::Either(&LATE, &DROPPED);
        assert!(gone.keep(r#"outcome="answered_late""#));
        assert!(gone.keep(r#"outcome="dropped""#));
        assert!(!gone.keep(r#"outcome="answered_in_time""#));
        assert!(!gone.keep(""));
    }

    fn tick(t: f64, phase: usize, requests: f64) -> Tick {
        let key = r#"gateway_requests_total{status="200"}"#.to_string();
        Tick {
            t,
            phase,
            scrapes: vec![Some([(key, requests)].into())],
        }
    }

    #[test]
    fn a_window_that_no_scrape_fell_in_is_not_measured_but_the_load_generator_still_counts() {
        let targets = [Target {
            service: "edge-gateway".into(),
            replica: "edge-gateway-1".into(),
            url: String::new(),
        }];
        // Phase 1's verdict window starts at 1.5 s, after its only tick (its action ran late).
        let ticks = [tick(0.0, 0, 0.0), tick(1.0, 1, 10.0), tick(2.0, 2, 30.0)];
        let load = [lab_load::SecondSample {
            second: 1,
            sent: 12,
            ok: 12,
            good: 12,
            errors: 0,
            p50_ms: 1.0,
            p99_ms: 2.0,
            lag_max_ms: 0.0,
        }];
        let frame = Frame {
            series: Series {
                targets: &targets,
                ticks: &ticks,
            },
            load: &load,
            first: None,
            fine: None,
        };
        let rps = Expr::PerSecond(&crate::quantities::GW_REQUESTS);
        let empty = Window::phase_from(&ticks, 1, 1.5, 0.5);
        assert_eq!(empty.ticks, None);
        assert_eq!(frame.eval(&rps, &empty), None, "not 0 rps: nobody looked");
        let whole = Window::phase(&ticks, 1, 1.0, 1.0);
        assert_eq!(frame.eval(&rps, &whole), Some(10.0));
        assert_eq!(
            frame.eval(&Expr::PerSecond(&Expr::Sent), &whole),
            Some(12.0)
        );
        // A chart's point: the same expression over the seconds before the tick.
        assert_eq!(frame.eval(&rps, &Window::at(&ticks, 2, 5)), Some(15.0));
        assert_eq!(frame.eval(&rps, &Window::at(&ticks, 0, 5)), None);
    }

    /// "Every replica applies legacy" may only be read where every replica was read: one that
    /// was down (killed, restarting) or did not export the flag leaves the fact "not measured",
    /// never the others' value (a verdict on it then fails rather than holding by construction).
    #[test]
    fn a_fact_of_every_replica_is_not_measured_while_one_replica_is_unread() {
        let targets: Vec<Target> = (1..=2)
            .map(|n| Target {
                service: "orchestrator".into(),
                replica: format!("orchestrator-{n}"),
                url: String::new(),
            })
            .collect();
        let key = r#"lab_flag_variant{flag="client.mode",variant="legacy"}"#.to_string();
        let legacy = || Some([(key.clone(), 1.0)].into());
        let other = || Some([("lab_flags_known".to_string(), 1.0)].into());
        let tick = |t: f64, scrapes: Vec<Scrape>| Tick {
            t,
            phase: 1,
            scrapes,
        };
        let eval = |ticks: &[Tick]| {
            let frame = Frame {
                series: Series {
                    targets: &targets,
                    ticks,
                },
                load: &[],
                first: None,
                fine: None,
            };
            let w = Window::phase(ticks, 1, ticks.len() as f64, 0.0);
            frame.eval(
                &crate::quantities::find("client_mode_legacy_all")
                    .unwrap()
                    .expr,
                &w,
            )
        };
        // Both read and legacy: measured.
        assert_eq!(eval(&[tick(0.0, vec![legacy(), legacy()])]), Some(1.0));
        // orchestrator-2 down in every tick of the window, or up without the flag's series.
        for missing in [None, other()] {
            let ticks = [
                tick(0.0, vec![legacy(), missing.clone()]),
                tick(1.0, vec![legacy(), missing.clone()]),
            ];
            assert_eq!(eval(&ticks), None, "{missing:?}");
        }
        // Down at the last scrape only: the last tick where both were read speaks.
        // (A window's first tick is its baseline: gauges read from the second.)
        let ticks = [
            tick(0.0, vec![legacy(), legacy()]),
            tick(1.0, vec![legacy(), legacy()]),
            tick(2.0, vec![legacy(), None]),
        ];
        assert_eq!(eval(&ticks), Some(1.0));
    }

    #[test]
    fn a_fact_of_every_replica_reads_every_service_and_since_start_reads_the_whole_run() {
        let target = |service: &str, n: u32| Target {
            service: service.into(),
            replica: format!("{service}-{n}"),
            url: String::new(),
        };
        let targets = [
            target("edge-gateway", 1),
            target("enrichment", 1),
            target(crate::series::SUPERVISOR, 0),
        ];
        let up = |v: f64| Some([("lab_flags_store_reachable".to_string(), v)].into());
        let sup = Some([("lab_supervisor_replicas".to_string(), 7.0)].into());
        // Tick 2: the gateway lost the store, the worker not yet; tick 3: both.
        let ticks = [
            Tick {
                t: 0.0,
                phase: 0,
                scrapes: vec![up(1.0), up(1.0), sup.clone()],
            },
            Tick {
                t: 1.0,
                phase: 0,
                scrapes: vec![up(1.0), up(1.0), sup.clone()],
            },
            Tick {
                t: 2.0,
                phase: 1,
                scrapes: vec![up(0.0), up(1.0), sup.clone()],
            },
            Tick {
                t: 3.0,
                phase: 1,
                scrapes: vec![up(0.0), up(0.0), sup],
            },
        ];
        let sample = |second: u64| lab_load::SecondSample {
            second,
            sent: 10,
            ok: 9,
            good: 9,
            errors: 1,
            p50_ms: 1.0,
            p99_ms: 2.0,
            lag_max_ms: 0.0,
        };
        let load = [sample(0), sample(1), sample(2)];
        let frame = Frame {
            series: Series {
                targets: &targets,
                ticks: &ticks,
            },
            load: &load,
            first: None,
            fine: None,
        };
        let q = |id| &crate::quantities::find(id).unwrap().expr;
        let outage = Window::phase(&ticks, 1, 1.0, 2.0);
        // At the window's last scrape no replica reaches the store; one tick earlier one did.
        assert_eq!(
            frame.eval(q("flags_store_reachable_any"), &outage),
            Some(0.0)
        );
        assert_eq!(
            frame.eval(q("flags_store_reachable_all"), &outage),
            Some(0.0)
        );
        let before = Window::phase(&ticks, 0, 2.0, 0.0);
        assert_eq!(
            frame.eval(q("flags_store_reachable_all"), &before),
            Some(1.0)
        );
        let partial = Window::phase(&ticks[..3], 1, 1.0, 2.0);
        assert_eq!(
            frame.eval(q("flags_store_reachable_any"), &partial),
            Some(1.0)
        );
        assert_eq!(
            frame.eval(q("flags_store_reachable_all"), &partial),
            Some(0.0)
        );
        // The supervisor's pseudo-target is no replica: `ANY` does not read it.
        assert!(!targets[2].is(crate::series::ANY) && targets[1].is(crate::series::ANY));
        // The phase's own 200s against the run's so far.
        assert_eq!(frame.eval(&Expr::Answered200, &outage), Some(9.0));
        assert_eq!(
            frame.eval(&Expr::SinceStart(&Expr::Answered200), &outage),
            Some(27.0)
        );
    }

    /// 100 ms buckets from the run's t = 0 (at a bucket boundary): `n` of them, `count(i)` each.
    fn fine(n: u64, count: impl Fn(u64) -> u64) -> Fine {
        let origin_ms = 1_800_000_000_000;
        Fine {
            bucket_ms: 100,
            origin_ms,
            arrivals: (0..n).map(|i| (origin_ms / 100 + i, count(i))).collect(),
            attempt_starts: Default::default(),
        }
    }

    /// A deterministic stand-in for independent arrivals: 20 ± 10 per bucket.
    fn noise(i: u64) -> u64 {
        // splitmix64 of the bucket's index.
        let mut x = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        10 + (x ^ (x >> 31)) % 21
    }

    #[test]
    fn the_backoffs_waves_stand_out_at_their_lags_and_independent_arrivals_do_not() {
        const A: Stream = Stream::Arrivals;
        // Every 3 s a burst of failures; its retries come back 200, 600 and 1,400 ms later
        // (sleeps of 200, 400, 800 ms after attempts that fail at once).
        let waves = fine(300, |i| {
            noise(i)
                + match i % 30 {
                    0 | 2 | 6 | 14 => 60,
                    _ => 0,
                }
        });
        let r = |f: &Fine, lag| f.autocorrelation(A, 0.0, 30.0, lag).unwrap();
        // The other stream was not kept: not measured.
        assert_eq!(
            waves.autocorrelation(Stream::AttemptStarts, 0.0, 30.0, 200),
            None
        );
        // 300 ms is no pair's distance: a pulse there meets the quiet between pulses.
        let floor = r(&waves, 300);
        for lag in [200, 400, 800] {
            assert!(
                r(&waves, lag) > floor + 0.2,
                "lag {lag}: {} against {floor}",
                r(&waves, lag)
            );
        }
        let flat = fine(300, noise);
        for lag in [200, 300, 400, 800] {
            assert!(r(&flat, lag).abs() < 0.2, "lag {lag}: {}", r(&flat, lag));
        }
        // The window: its own buckets only, and not measured when short or mostly unread.
        assert_eq!(waves.autocorrelation(A, 0.0, 4.0, 200), None, "40 buckets");
        let mut holes = fine(300, noise);
        holes.arrivals.retain(|id, _| id % 5 != 0);
        assert_eq!(holes.autocorrelation(A, 0.0, 30.0, 200), None, "80% read");
        assert!(waves.autocorrelation(A, 10.0, 20.0, 200).is_some());
        // Its rate: events per second over the buckets read, scaled to what was read.
        let steady = fine(300, |_| 7);
        assert_eq!(steady.rate(A, 0.0, 30.0), Some(70.0));
        let mut gappy = steady.clone();
        gappy.arrivals.retain(|id, _| id % 20 != 0);
        assert_eq!(gappy.rate(A, 0.0, 30.0), Some(70.0), "95% read");
        assert_eq!(holes.rate(A, 0.0, 30.0), None, "80% read");
        assert_eq!(steady.rate(Stream::AttemptStarts, 0.0, 30.0), None);
        // Burstiness: none in a constant stream; pulses of 60 on a floor of ~20 every 3 s.
        assert_eq!(steady.cv(A, 0.0, 30.0), Some(0.0));
        let (flat_cv, waves_cv) = (
            flat.cv(A, 0.0, 30.0).unwrap(),
            waves.cv(A, 0.0, 30.0).unwrap(),
        );
        assert!(
            flat_cv < 0.35 && waves_cv > 2.0 * flat_cv,
            "{flat_cv} {waves_cv}"
        );
        assert_eq!(fine(300, |_| 0).cv(A, 0.0, 30.0), None, "no events");
        assert_eq!(holes.cv(A, 0.0, 30.0), None, "80% read");
        assert_eq!(
            fine(300, |_| 7).autocorrelation(A, 0.0, 30.0, 200),
            None,
            "no variation"
        );
    }
}
