//! A bounded window of recent traces, in memory.
//!
//! Traces are kept in the order their first span arrived; past [`Store::new`]'s capacity the
//! oldest go. A span of a trace already evicted starts it again (a late orphan arriving alone
//! is still an orphan worth seeing, and its parent is gone either way). One trace holds at most
//! [`MAX_SPANS_PER_TRACE`] spans; the rest are counted as dropped, never silently lost.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::model::{self, SpanRecord, Summary};

/// A legacy request of the lab's corpus is a few documents' batches × up to 3 attempts, each with
/// entity-service's server span and queries under it: tens of spans. 2,000 is far past any real
/// one, and bounds what a runaway trace can hold.
pub const MAX_SPANS_PER_TRACE: usize = 2_000;

/// The receiver's own counts (`GET /api/stats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub traces: usize,
    pub capacity: usize,
    pub spans_received: u64,
    /// Spans past [`MAX_SPANS_PER_TRACE`] of their trace.
    pub spans_dropped: u64,
    /// Traces dropped to stay within the capacity.
    pub traces_evicted: u64,
}

/// Which traces first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sort {
    /// Longest from first span start to last span end.
    Slowest,
    /// Only traces with an orphan, the longest past their root first.
    Orphaned,
    /// Most recently started first.
    Recent,
}

impl std::str::FromStr for Sort {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "slowest" => Ok(Sort::Slowest),
            "orphaned" => Ok(Sort::Orphaned),
            "recent" => Ok(Sort::Recent),
            other => Err(format!(
                "unknown sort {other:?}: use slowest, orphaned or recent"
            )),
        }
    }
}

#[derive(Default)]
struct Inner {
    traces: HashMap<String, Vec<SpanRecord>>,
    /// Trace ids, oldest first.
    order: VecDeque<String>,
    stats: Stats,
}

pub struct Store {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl Store {
    /// A store of at most `capacity` traces (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Store {
            capacity,
            inner: Mutex::new(Inner {
                stats: Stats {
                    capacity,
                    ..Stats::default()
                },
                ..Inner::default()
            }),
        }
    }

    pub fn insert(&self, spans: impl IntoIterator<Item = SpanRecord>) {
        let mut inner = self.inner.lock().unwrap();
        for span in spans {
            inner.stats.spans_received += 1;
            let trace_id = span.trace_id.clone();
            if !inner.traces.contains_key(&trace_id) {
                while inner.traces.len() >= self.capacity {
                    let Some(old) = inner.order.pop_front() else {
                        break;
                    };
                    if inner.traces.remove(&old).is_some() {
                        inner.stats.traces_evicted += 1;
                    }
                }
                inner.order.push_back(trace_id.clone());
            }
            let trace = inner.traces.entry(trace_id).or_default();
            if trace.len() >= MAX_SPANS_PER_TRACE {
                inner.stats.spans_dropped += 1;
            } else {
                trace.push(span);
            }
        }
        inner.stats.traces = inner.traces.len();
    }

    pub fn stats(&self) -> Stats {
        self.inner.lock().unwrap().stats.clone()
    }

    /// The spans of one trace, by start time; `None` if it is not (or no longer) here.
    pub fn trace(&self, trace_id: &str) -> Option<Vec<SpanRecord>> {
        let inner = self.inner.lock().unwrap();
        let mut spans = inner.traces.get(&trace_id.to_ascii_lowercase())?.clone();
        spans.sort_by_key(|s| (s.start_unix_nano, s.end_unix_nano));
        Some(spans)
    }

    /// Up to `limit` summaries, `sort` first. A trace is summarised from the spans that have
    /// arrived: the exporters batch every few seconds, so a trace still running (an orphan still
    /// retrying) grows on the next call.
    pub fn list(&self, sort: Sort, limit: usize) -> Vec<Summary> {
        let inner = self.inner.lock().unwrap();
        let mut all: Vec<Summary> = inner
            .traces
            .iter()
            .filter_map(|(id, spans)| model::summarise(id, spans))
            .filter(|s| sort != Sort::Orphaned || s.orphans > 0)
            .collect();
        drop(inner);
        let key = |s: &Summary| match sort {
            Sort::Slowest => s.span_ms,
            Sort::Orphaned => s.past_root_ms,
            Sort::Recent => s.start_unix_nano as f64,
        };
        all.sort_by(|a, b| {
            key(b)
                .total_cmp(&key(a))
                .then_with(|| a.trace_id.cmp(&b.trace_id))
        });
        all.truncate(limit);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{legacy_hangup, span};

    fn in_trace(mut s: SpanRecord, t: &str) -> SpanRecord {
        s.trace_id = t.into();
        s
    }

    #[test]
    fn the_oldest_trace_goes_first_when_the_window_is_full() {
        let store = Store::new(2);
        for t in ["t1", "t2", "t3"] {
            store.insert([in_trace(span("a", None, "root", 0, 10), t)]);
        }
        // A later span of a kept trace does not make room by evicting it.
        store.insert([in_trace(span("b", Some("a"), "child", 1, 5), "t3")]);
        let stats = store.stats();
        assert_eq!(stats.traces, 2);
        assert_eq!(stats.traces_evicted, 1);
        assert_eq!(stats.spans_received, 4);
        assert!(store.trace("t1").is_none());
        assert_eq!(store.trace("t3").unwrap().len(), 2);
    }

    #[test]
    fn orphaned_lists_only_traces_with_an_orphan_and_slowest_orders_by_length() {
        let store = Store::new(10);
        store.insert(legacy_hangup().into_iter().map(|s| in_trace(s, "legacy")));
        store.insert([
            in_trace(
                span("a", None, "edge-gateway.HandleExtract", 0, 12_000),
                "slow",
            ),
            in_trace(
                span("b", Some("a"), "orchestrator.Extract", 1, 11_990),
                "slow",
            ),
        ]);
        let orphaned = store.list(Sort::Orphaned, 10);
        assert_eq!(orphaned.len(), 1);
        assert_eq!(orphaned[0].trace_id, "legacy");
        let slowest = store.list(Sort::Slowest, 10);
        assert_eq!(
            slowest
                .iter()
                .map(|s| s.trace_id.as_str())
                .collect::<Vec<_>>(),
            ["slow", "legacy"]
        );
        assert_eq!(store.list(Sort::Slowest, 1).len(), 1);
    }

    #[test]
    fn a_trace_holds_a_bounded_number_of_spans_and_counts_the_rest() {
        let store = Store::new(1);
        store
            .insert((0..MAX_SPANS_PER_TRACE + 5).map(|i| span(&format!("{i:x}"), None, "s", 0, 1)));
        assert_eq!(store.trace("t").unwrap().len(), MAX_SPANS_PER_TRACE);
        assert_eq!(store.stats().spans_dropped, 5);
    }

    #[test]
    fn sorts_parse_and_bad_ones_say_which_exist() {
        assert_eq!("orphaned".parse::<Sort>(), Ok(Sort::Orphaned));
        assert!("worst".parse::<Sort>().unwrap_err().contains("slowest"));
    }
}
