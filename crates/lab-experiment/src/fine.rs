//! The run's fine streams: events per 100 ms that a 1 s scrape averages away
//! (`lab_core::arrivals`), read from every replica's admin listener once a tick, in parallel
//! with the scrape, and summed by bucket.
//!
//! - entity-service's requests as each arrived (`/debug/arrivals`);
//! - the orchestrators' entity attempts as each started (`/debug/attempts`), before the legacy
//!   client's slot wait.
//!
//! A bucket's sum is kept only when every replica running when it completed was read for it
//! (each replica serves a minute, so a late read still counts); a replica that could not be read
//! leaves the bucket out — not measured — instead of the others' sum standing for the fleet's.

use std::collections::{BTreeMap, HashMap};

use lab_core::arrivals::{Buckets, BUCKET_MS, KEPT};
use lab_report::quantity::{Fine, Stream};

use crate::scrape::{Scrape, Target, SUPERVISOR};

/// Where each stream is served, and by which service.
const SOURCES: [(Stream, &str, &str); 2] = [
    (Stream::Arrivals, "entity-service", "/debug/arrivals"),
    (Stream::AttemptStarts, "orchestrator", "/debug/attempts"),
];

pub(crate) struct FineReader {
    origin_ms: u64,
    streams: Vec<StreamReader>,
}

#[derive(Default)]
struct StreamReader {
    /// Per replica (its admin URL): the last bucket read.
    after: HashMap<String, u64>,
    /// Bucket → (events summed, replicas read).
    seen: BTreeMap<u64, (u64, u32)>,
    /// Bucket → replicas running when it completed (the tick after).
    expected: BTreeMap<u64, u32>,
    /// The first bucket not yet given its expected count.
    next: u64,
    /// Replicas running at the last tick.
    last_running: u32,
}

/// One replica's answer for one stream.
pub(crate) struct Read {
    stream: usize,
    url: String,
    buckets: Option<Buckets>,
}

impl FineReader {
    /// The run's t = 0 is `origin_ms` (unix ms).
    pub fn new(origin_ms: u64) -> Self {
        Self {
            origin_ms,
            streams: SOURCES
                .iter()
                .map(|_| StreamReader {
                    next: origin_ms / BUCKET_MS,
                    ..Default::default()
                })
                .collect(),
        }
    }

    /// Read every replica of every stream at once, each after the last bucket it gave.
    pub async fn fetch(&self, http: &reqwest::Client, targets: &[Target]) -> Vec<Read> {
        let reads = SOURCES
            .iter()
            .enumerate()
            .flat_map(|(i, (_, service, path))| {
                targets
                    .iter()
                    .filter(move |t| t.service == *service)
                    .map(move |t| {
                        let url = match self.streams[i].after.get(&t.url) {
                            Some(a) => format!("{}{path}?after={a}", t.url),
                            None => format!("{}{path}", t.url),
                        };
                        async move {
                            let buckets = async {
                                let resp = http.get(&url).send().await.ok()?;
                                resp.json::<Buckets>().await.ok()
                            }
                            .await;
                            Read {
                                stream: i,
                                url: t.url.clone(),
                                buckets,
                            }
                        }
                    })
            });
        futures::future::join_all(reads).await
    }

    /// Count what was read; then every bucket complete by `now_ms` is owed a read by the
    /// replicas of its service running now (`running`).
    pub fn absorb(&mut self, reads: Vec<Read>, now_ms: u64, running: impl Fn(&str) -> u32) {
        for r in reads {
            let Some(b) = r.buckets else { continue };
            if b.bucket_ms != BUCKET_MS || b.counts.is_empty() {
                continue;
            }
            let s = &mut self.streams[r.stream];
            // A replica read for the first time whose ring is not full started within the
            // minute it keeps (`lab_core::arrivals`: a ring starts with its process): it had
            // nothing to count before its first bucket, so it owes those buckets nothing — a
            // replica the scale-up started is not "unread" for the seconds before it existed.
            // (A restarted one was read before: the gap between its old process's last read
            // bucket and its new ring stays unread.)
            if !s.after.contains_key(&r.url) && b.counts.len() < KEPT {
                for id in self.origin_ms / BUCKET_MS..b.first {
                    s.seen.entry(id).or_default().1 += 1;
                }
            }
            for (i, c) in b.counts.iter().enumerate() {
                let e = s.seen.entry(b.first + i as u64).or_default();
                e.0 += c;
                e.1 += 1;
            }
            s.after.insert(r.url, b.first + b.counts.len() as u64 - 1);
        }
        let complete = now_ms / BUCKET_MS;
        for (s, (_, service, _)) in self.streams.iter_mut().zip(SOURCES) {
            // A replica running at the last tick and gone at this one ran for part of the
            // buckets between: they are owed its read too, which it can no longer give (its
            // last events are unknown: not measured, never the survivors' sum).
            let now = running(service);
            let n = now.max(s.last_running);
            s.last_running = now;
            for id in s.next..complete {
                s.expected.insert(id, n);
            }
            s.next = s.next.max(complete);
        }
    }

    /// The streams as the report reads them: a bucket every replica owed was read for.
    pub fn fine(&self) -> Fine {
        let complete = |s: &StreamReader| -> BTreeMap<u64, u64> {
            s.expected
                .iter()
                .filter_map(|(id, &n)| match s.seen.get(id) {
                    _ if n == 0 => Some((*id, 0)),
                    Some(&(c, read)) if read >= n => Some((*id, c)),
                    _ => None,
                })
                .collect()
        };
        let [arrivals, attempt_starts] = [0, 1].map(|i| complete(&self.streams[i]));
        Fine {
            bucket_ms: BUCKET_MS,
            origin_ms: self.origin_ms,
            arrivals,
            attempt_starts,
        }
    }
}

/// Now, in unix milliseconds (the buckets' clock: wall time, the same on every replica).
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Replicas of `service` running at this tick: the supervisor's count where there is one (a
/// native lab), else every target named (a fixed fleet).
pub(crate) fn running(targets: &[Target], scrapes: &[Scrape], service: &str) -> u32 {
    let key = format!("lab_supervisor_replicas{{binary=\"{service}\"}}");
    let supervised = targets
        .iter()
        .zip(scrapes)
        .find(|(t, _)| t.service == SUPERVISOR)
        .and_then(|(_, s)| s.as_ref()?.get(&key).copied());
    match supervised {
        Some(n) => n as u32,
        None => targets.iter().filter(|t| t.service == service).count() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(stream: usize, url: &str, first: u64, counts: &[u64]) -> Read {
        Read {
            stream,
            url: url.into(),
            buckets: Some(Buckets {
                bucket_ms: BUCKET_MS,
                first,
                counts: counts.to_vec(),
            }),
        }
    }

    #[test]
    fn a_bucket_counts_only_once_every_running_replica_was_read_for_it() {
        let origin = 1_800_000_000_000u64;
        let b0 = origin / BUCKET_MS;
        let mut f = FineReader::new(origin);
        // Tick 1 (t = 0.3 s): two entity-services running, only `a` answered; one orchestrator.
        f.absorb(
            vec![read(0, "a", b0, &[1, 2, 3]), read(1, "o", b0, &[5, 0, 7])],
            origin + 300,
            |s| if s == "entity-service" { 2 } else { 1 },
        );
        let fine = f.fine();
        assert!(fine.arrivals.is_empty(), "b unread: {:?}", fine.arrivals);
        assert_eq!(
            fine.attempt_starts,
            BTreeMap::from([(b0, 5), (b0 + 1, 0), (b0 + 2, 7)])
        );
        // Tick 2: `b` catches up on the same buckets; `a` goes on after its last one.
        f.absorb(
            vec![read(0, "b", b0, &[10, 20, 30]), read(0, "a", b0 + 3, &[4])],
            origin + 400,
            |s| if s == "entity-service" { 2 } else { 0 },
        );
        let fine = f.fine();
        assert_eq!(
            fine.arrivals,
            BTreeMap::from([(b0, 11), (b0 + 1, 22), (b0 + 2, 33)]),
            "bucket b0+3 still owes b's read"
        );
        // The orchestrator ran at the last tick and is gone now: b0+3 owes its unread read.
        assert_eq!(fine.attempt_starts.get(&(b0 + 3)), None);
        // None running at two ticks in a row: nothing could start, nothing is owed.
        f.absorb(vec![], origin + 500, |s| {
            u32::from(s == "entity-service") * 2
        });
        assert_eq!(f.fine().attempt_starts.get(&(b0 + 4)), Some(&0));
        // The next read of `a` asks after the last bucket it gave.
        assert_eq!(f.streams[0].after["a"], b0 + 3);
        assert_eq!(f.streams[0].after["b"], b0 + 2);
    }

    #[test]
    fn a_replica_started_mid_run_owes_nothing_before_its_start_and_a_restarted_one_does() {
        let origin = 1_800_000_000_000u64;
        let b0 = origin / BUCKET_MS;
        let mut f = FineReader::new(origin);
        // One orchestrator, then a second started at b0 + 3 (the supervisor counts it from the
        // tick it has a process: the whole second before).
        f.absorb(vec![read(1, "o1", b0, &[1, 1])], origin + 200, |_| 1);
        f.absorb(
            vec![
                read(1, "o1", b0 + 2, &[1, 1, 1]),
                read(1, "o2", b0 + 3, &[5, 5]),
            ],
            origin + 500,
            |_| 2,
        );
        let fine = f.fine();
        assert_eq!(
            fine.attempt_starts,
            BTreeMap::from([(b0, 1), (b0 + 1, 1), (b0 + 2, 1), (b0 + 3, 6), (b0 + 4, 6)]),
            "b0+2 owed by o2 (counted) but before its ring: o1's count alone"
        );
        // o1 restarts: its new ring begins at b0 + 7; b0 + 5 and b0 + 6 were its old process's,
        // never read.
        f.absorb(
            vec![
                read(1, "o1", b0 + 7, &[2]),
                read(1, "o2", b0 + 5, &[5, 5, 5]),
            ],
            origin + 800,
            |_| 2,
        );
        let fine = f.fine();
        assert_eq!(fine.attempt_starts.get(&(b0 + 5)), None);
        assert_eq!(fine.attempt_starts.get(&(b0 + 6)), None);
        assert_eq!(fine.attempt_starts.get(&(b0 + 7)), Some(&7));
    }

    #[test]
    fn a_replica_that_exits_between_ticks_leaves_the_buckets_between_unmeasured() {
        let origin = 1_800_000_000_000u64;
        let b0 = origin / BUCKET_MS;
        let mut f = FineReader::new(origin);
        f.absorb(
            vec![read(0, "a", b0, &[1, 1]), read(0, "b", b0, &[2, 2])],
            origin + 200,
            |_| 2,
        );
        // `b` exited before this tick, its last buckets never read; `a` still answers.
        f.absorb(vec![read(0, "a", b0 + 2, &[1, 1])], origin + 400, |_| 1);
        // And a tick later only `a` owes anything.
        f.absorb(vec![read(0, "a", b0 + 4, &[1])], origin + 500, |_| 1);
        let fine = f.fine();
        assert_eq!(
            fine.arrivals,
            BTreeMap::from([(b0, 3), (b0 + 1, 3), (b0 + 4, 1)]),
            "b0+2 and b0+3 owe b's read"
        );
    }

    #[test]
    fn the_running_replicas_are_the_supervisors_count_or_every_target_named() {
        let t = |service: &str, replica: &str| Target {
            service: service.into(),
            replica: replica.into(),
            url: String::new(),
        };
        let targets = vec![
            t("orchestrator", "orchestrator-1"),
            t("orchestrator", "orchestrator-2"),
            t(SUPERVISOR, SUPERVISOR),
        ];
        let sup: Scrape = Some(
            [(
                "lab_supervisor_replicas{binary=\"orchestrator\"}".to_string(),
                1.0,
            )]
            .into(),
        );
        assert_eq!(
            running(&targets, &[None, None, sup], "orchestrator"),
            1,
            "one of the two has a process"
        );
        assert_eq!(running(&targets[..2], &[None, None], "orchestrator"), 2);
    }
}
