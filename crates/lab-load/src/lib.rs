//! `labctl load`: an open-loop load generator.
//!
//! Arrivals follow a Poisson process at the target rate and do not wait for responses: a
//! closed-loop generator slows down when the system does, which hides exactly the storms this lab
//! exists to show. Latency is measured from each request's *intended* send time, so a stalled
//! generator or a queue in front of the gateway still counts (no coordinated omission). Traffic
//! goes only to loopback addresses, the run is bounded in time and count, and it stops by itself.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::time::Instant;

use lab_seed::{ApiKeyRecord, CorpusDoc};

/// The most a run may ask for. 5,000 rps is far past what 2 cores serve; 1 h bounds a forgotten
/// run.
const MAX_RATE: f64 = 5_000.0;
const MAX_DURATION_S: u64 = 3_600;
/// Where stream indexes start (the corpus file uses 0..documents) and how far apart runs with
/// different `--seed` start: 10^9 documents is 3.8 days at 3,000 rps.
const STREAM_BASE: u64 = 1 << 40;
const STREAM_STRIDE: u64 = 1_000_000_000;
/// The stream indexes of the documents a run with `seed` sends: its documents are
/// `doc_<tenant>_<index>` with the index in this range (what the database's rows are matched by).
pub fn stream_documents(seed: u64) -> std::ops::Range<u64> {
    let start = STREAM_BASE + seed.wrapping_mul(STREAM_STRIDE);
    start..start + STREAM_STRIDE
}

/// An answer counts toward goodput when it is a 200 within the end user's 3 s budget.
const GOODPUT_BUDGET_US: u64 = 3_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, serde::Deserialize)]
pub enum TenantMix {
    /// Tenants in proportion to their size (the postmortem's traffic: a few big tenants).
    Size,
    /// Every tenant equally often.
    Uniform,
}

/// Whose API keys a run's requests carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Keys {
    /// The seeded tenants' keys (`api-keys.json`), with their documents.
    Tenants,
    /// A well-formed key id never seen before on every request, with one small fixed document:
    /// the flood of unknown keys (issues 17 and 28). The gateway's key store answers each one
    /// (401 or 503); none reaches an orchestrator.
    Unknown,
}

/// The document an unknown-key request carries: small, so that the generator spends its time on
/// arrivals, not on bodies (the gateway refuses the key before the body matters).
const UNKNOWN_KEY_DOC: &str = "Vega Labs paid Anna Schmidt.";

/// A key of the seeded shape (`rsl_<12 hex>_<64 hex>`) that no seed issues: 48 random bits of id.
fn unknown_key(rng: &mut rand::rngs::StdRng) -> String {
    format!(
        "rsl_{:012x}_{:016x}{:016x}{:016x}{:016x}",
        rng.random::<u64>() >> 16,
        rng.random::<u64>(),
        rng.random::<u64>(),
        rng.random::<u64>(),
        rng.random::<u64>()
    )
}

/// Which documents a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Docs {
    /// Fresh documents generated on the fly about the seeded entities, never repeating: the
    /// orchestrators' caches see what production sees.
    Stream,
    /// Replay `corpus.jsonl` (20k documents by default). On long runs every span ends up cached
    /// and the hit rate climbs far above production's.
    Corpus,
}

/// The documents a run draws from.
pub enum DocSource {
    Corpus(Vec<CorpusDoc>),
    Stream(lab_seed::DocumentStream),
}

impl DocSource {
    /// Open the source `docs` names in `data_dir`.
    pub fn open(docs: Docs, data_dir: &std::path::Path, mix: TenantMix) -> anyhow::Result<Self> {
        Ok(match docs {
            Docs::Corpus => DocSource::Corpus(lab_seed::read_corpus(data_dir)?),
            Docs::Stream => DocSource::Stream(lab_seed::DocumentStream::open(
                data_dir,
                mix == TenantMix::Uniform,
            )?),
        })
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// The gateway (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub gateway: String,
    /// Target arrival rate, requests per second.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Run length in seconds.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// The client's own timeout per request in milliseconds, like a real API client's. 10 s: well
    /// past the gateway's 3 s budget, so the gateway's answer is what gets measured.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    #[arg(long, value_enum, default_value_t = TenantMix::Size)]
    pub tenants: TenantMix,
    /// Fresh documents (stream) or the seeded corpus replayed (corpus).
    #[arg(long, value_enum, default_value_t = Docs::Stream)]
    pub docs: Docs,
    /// The seeded tenants' keys, or a never-seen key on every request (a flood).
    #[arg(long, value_enum, default_value_t = Keys::Tenants)]
    pub keys: Keys,
    /// Only this tenant's documents, with its key (`--docs corpus`): one tenant at a rate of
    /// your choosing, e.g. past its plan's rate limit, beside the rest of the traffic.
    #[arg(long)]
    pub tenant: Option<i64>,
    /// Requests allowed in flight at once; arrivals beyond it are counted as `client_overload`
    /// instead of sent (the generator must not become the bottleneck silently).
    #[arg(long, default_value_t = 10_000)]
    pub max_in_flight: usize,
    /// Seed for arrivals and document choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the summary and per-second series here as JSON.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl LoadArgs {
    /// A run of the never-repeating document stream against `gateway`, with a real API client's
    /// 10 s timeout and no cap on requests in flight worth the name: what game days, the
    /// replay and its probes send.
    pub fn stream(gateway: &str, rate: f64, seconds: u64, tenants: TenantMix, seed: u64) -> Self {
        LoadArgs {
            gateway: gateway.to_string(),
            rate,
            duration: seconds,
            timeout_ms: 10_000,
            tenants,
            docs: Docs::Stream,
            keys: Keys::Tenants,
            tenant: None,
            max_in_flight: 10_000,
            seed,
            out: None,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct LoadReport {
    pub target_rate: f64,
    pub duration_s: u64,
    pub tenants: TenantMix,
    pub sent: u64,
    pub client_overload: u64,
    pub by_status: BTreeMap<String, u64>,
    pub achieved_rps: f64,
    pub ok_rps: f64,
    /// Latency of 200 answers, from intended send time, milliseconds.
    pub ok_latency_ms: Percentiles,
    /// Latency of every answer (any status, client timeouts at the timeout), milliseconds.
    pub all_latency_ms: Percentiles,
    /// Each tenant's first request of the run (by send order), by answer: what a gateway that
    /// has never seen the tenant does with it (empty with `--keys unknown`).
    pub first_by_status: BTreeMap<String, u64>,
    /// Of those, answered 200 within the 3 s budget.
    pub first_good: u64,
    pub per_second: Vec<SecondSample>,
    /// How late each request left the generator: from its intended send time to the moment its
    /// task began to send, milliseconds. A generator that keeps its schedule stays near 0; one
    /// starved of CPU (on 2 cores, by the lab it loads) falls behind here first, and its own
    /// client timeouts are then as much its doing as the lab's.
    pub dispatch_lag_ms: Percentiles,
    /// The client's timeout per request, milliseconds (`client_timeout` in `by_status`).
    pub timeout_ms: u64,
}

impl LoadReport {
    /// Requests that got an HTTP answer (any status; not a client timeout or error).
    pub fn answered(&self) -> u64 {
        self.by_status
            .iter()
            .filter(|(k, _)| k.parse::<u16>().is_ok())
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests the client gave up on or lost: a timeout, a refused or reset connection.
    pub fn unanswered(&self) -> u64 {
        self.sent.saturating_sub(self.answered())
    }

    /// The most the generator may lag and still keep its schedule: a tenth of the client's
    /// timeout. The dispatch lag samples how late the generator's runtime polls its tasks, at
    /// every request — a proxy for the stall that could make one of its timeouts its own (an
    /// answer left unread, a timer polled late; the timeout itself starts at the send, after the
    /// lag). Within a tenth, a request the client timed out went at least 9 s of a 10 s timeout
    /// without an answer from the lab: three times the 3 s budget, a failed request whoever is
    /// counted for the last second.
    pub fn max_dispatch_lag_ms(&self) -> f64 {
        self.timeout_ms as f64 / 10.0
    }
}

#[derive(Debug, Serialize, Default, Clone)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub count: u64,
}

#[derive(Debug, Serialize, serde::Deserialize, Clone)]
pub struct SecondSample {
    pub second: u64,
    pub sent: u64,
    pub ok: u64,
    /// Goodput: 200 answers within the 3 s end-user budget, measured from intended send time.
    pub good: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The generator's largest dispatch lag this second (see `LoadReport::dispatch_lag_ms`);
    /// 0 in samples from before it was measured.
    #[serde(default)]
    pub lag_max_ms: f64,
}

struct Recorder {
    ok: Histogram<u64>,
    all: Histogram<u64>,
    by_status: BTreeMap<String, u64>,
    /// The keys sent so far (tenant keys only), to tell each tenant's first request.
    seen_keys: std::collections::HashSet<String>,
    first_by_status: BTreeMap<String, u64>,
    first_good: u64,
    /// Per intended-send second: sent, ok, good, latency histogram, largest dispatch lag (µs).
    seconds: BTreeMap<u64, (u64, u64, u64, Histogram<u64>, u64)>,
    /// Intended send time to the start of sending, microseconds.
    lag: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    // Microseconds from 1 µs to 10 min, 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    let ms = |v: u64| v as f64 / 1000.0;
    Percentiles {
        p50: ms(h.value_at_quantile(0.50)),
        p95: ms(h.value_at_quantile(0.95)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
        count: h.len(),
    }
}

/// Refuse any target that is not on this machine.
pub fn ensure_loopback(url: &str) -> anyhow::Result<()> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("invalid URL {url:?}"))?;
    let ok = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    if !ok {
        bail!("load is only ever sent to loopback addresses (127.0.0.0/8, ::1, localhost); {url} is not");
    }
    Ok(())
}

/// The arrival rate and tenant mix of a running generator, changeable while it runs (game-day
/// phases, `labctl load set-rate`, `labctl load set-mix`), and its early end (a game day whose
/// timeline ended before the generator's bound). The rate is stored as milli-requests per
/// second.
#[derive(Clone)]
pub struct RateControl(
    Arc<std::sync::atomic::AtomicU64>,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<std::sync::atomic::AtomicBool>,
);

impl RateControl {
    pub fn new(rate: f64) -> anyhow::Result<Self> {
        let c = Self(
            Arc::new(std::sync::atomic::AtomicU64::new(0)),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        c.set(rate)?;
        Ok(c)
    }

    /// No arrival after this one: the generator waits for what it sent and reports, its
    /// duration the time it ran.
    pub fn stop(&self) {
        self.2.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.2.load(Ordering::Relaxed)
    }

    pub fn set_mix(&self, mix: TenantMix) {
        self.1.store(mix == TenantMix::Uniform, Ordering::Relaxed);
    }

    pub fn mix(&self) -> TenantMix {
        if self.1.load(Ordering::Relaxed) {
            TenantMix::Uniform
        } else {
            TenantMix::Size
        }
    }

    pub fn set(&self, rate: f64) -> anyhow::Result<()> {
        anyhow::ensure!(
            rate > 0.0 && rate <= MAX_RATE,
            "rate must be in (0, {MAX_RATE}] requests/s"
        );
        self.0.store((rate * 1000.0) as u64, Ordering::Relaxed);
        Ok(())
    }

    pub fn get(&self) -> f64 {
        self.0.load(Ordering::Relaxed) as f64 / 1000.0
    }
}

/// The file a running `labctl load` polls for `labctl load set-rate`.
pub fn rate_file(state_dir: &std::path::Path) -> PathBuf {
    state_dir.join("run").join("load-rate")
}

/// The file a running `labctl load` polls for `labctl load set-mix`.
pub fn mix_file(state_dir: &std::path::Path) -> PathBuf {
    state_dir.join("run").join("load-mix")
}

/// `labctl load set-mix size|uniform`: tell a running generator its new tenant mix.
pub fn set_mix(state_dir: &std::path::Path, mix: TenantMix) -> anyhow::Result<()> {
    std::fs::create_dir_all(state_dir.join("run"))?;
    let text = if mix == TenantMix::Uniform {
        "uniform"
    } else {
        "size"
    };
    std::fs::write(mix_file(state_dir), text)?;
    Ok(())
}

/// `labctl load set-rate R`: tell a running generator its new rate.
pub fn set_rate(state_dir: &std::path::Path, rate: f64) -> anyhow::Result<()> {
    RateControl::new(rate)?;
    std::fs::create_dir_all(state_dir.join("run"))?;
    std::fs::write(rate_file(state_dir), rate.to_string())?;
    Ok(())
}

/// Poll the rate file every second and apply what it says (until the task is aborted).
pub fn follow_rate_file(
    state_dir: &std::path::Path,
    control: RateControl,
) -> tokio::task::JoinHandle<()> {
    let path = rate_file(state_dir);
    let mix_path = mix_file(state_dir);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&mix_path);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Ok(text) = tokio::fs::read_to_string(&mix_path).await {
                let mix = if text.trim() == "uniform" {
                    TenantMix::Uniform
                } else {
                    TenantMix::Size
                };
                if mix != control.mix() {
                    control.set_mix(mix);
                    println!("  tenant mix -> {mix:?}");
                }
            }
            if let Ok(text) = tokio::fs::read_to_string(&path).await {
                if let Ok(rate) = text.trim().parse::<f64>() {
                    if (rate - control.get()).abs() > 1e-9 && control.set(rate).is_ok() {
                        println!("  rate -> {rate} requests/s");
                    }
                }
            }
        }
    })
}

/// The documents of a run, as (API key, request body), and how the next one is chosen.
struct Picker {
    key_of: BTreeMap<i64, String>,
    /// Corpus mode: every document, and (uniform mix) the documents of each tenant.
    docs: Vec<Arc<(String, serde_json::Value)>>,
    tenant_lists: Vec<Vec<usize>>,
    /// Stream mode: the never-repeating document stream and the next index in it.
    stream: Option<lab_seed::DocumentStream>,
    stream_index: u64,
}

impl Picker {
    fn new(args: &LoadArgs, keys: Vec<ApiKeyRecord>, source: DocSource) -> anyhow::Result<Self> {
        let key_of: BTreeMap<i64, String> =
            keys.into_iter().map(|k| (k.tenant_id, k.api_key)).collect();
        let mut p = Picker {
            key_of,
            docs: Vec::new(),
            tenant_lists: Vec::new(),
            stream: None,
            // Stream positions far above the corpus file's indexes, distinct per --seed, so runs
            // with different seeds never send the same document.
            stream_index: stream_documents(args.seed).start,
        };
        match source {
            DocSource::Corpus(corpus) => {
                let docs: Vec<_> = corpus
                    .into_iter()
                    .filter(|d| args.tenant.is_none_or(|t| t == d.tenant_id))
                    .filter_map(|d| p.body(d))
                    .collect();
                if let Some(t) = args.tenant {
                    anyhow::ensure!(
                        !docs.is_empty(),
                        "tenant {t} has no documents with an API key in the corpus; pick a \
                         tenant of `api-keys.json` that the corpus names"
                    );
                }
                anyhow::ensure!(
                    !docs.is_empty(),
                    "no documents with a matching API key; run `labctl seed` first"
                );
                // For the uniform mix: documents grouped by tenant.
                let mut by_tenant: BTreeMap<String, Vec<usize>> = BTreeMap::new();
                for (i, d) in docs.iter().enumerate() {
                    by_tenant.entry(d.0.clone()).or_default().push(i);
                }
                p.docs = docs;
                p.tenant_lists = by_tenant.into_values().collect();
            }
            DocSource::Stream(stream) => {
                anyhow::ensure!(
                    args.tenant.is_none(),
                    "--tenant picks from the corpus: add --docs corpus"
                );
                p.stream = Some(stream)
            }
        }
        Ok(p)
    }

    fn body(&self, d: CorpusDoc) -> Option<Arc<(String, serde_json::Value)>> {
        let key = self.key_of.get(&d.tenant_id)?.clone();
        let body = serde_json::json!({
            "doc_id": d.doc_id, "text": d.text, "locale": d.locale, "doc_type": d.doc_type,
        });
        Some(Arc::new((key, body)))
    }

    /// The next document (`None`: this one has no API key; skip it).
    fn next(
        &mut self,
        rng: &mut rand::rngs::StdRng,
        mix: TenantMix,
    ) -> Option<Arc<(String, serde_json::Value)>> {
        if let Some(stream) = self.stream.as_mut() {
            self.stream_index += 1;
            stream.set_uniform(mix == TenantMix::Uniform);
            let doc = stream.document(self.stream_index);
            return self.body(doc);
        }
        Some(match mix {
            TenantMix::Size => self.docs[rng.random_range(0..self.docs.len())].clone(),
            TenantMix::Uniform => {
                let list = &self.tenant_lists[rng.random_range(0..self.tenant_lists.len())];
                self.docs[list[rng.random_range(0..list.len())]].clone()
            }
        })
    }
}

/// Sends one request and records its answer against the second it was meant to be sent in.
#[derive(Clone)]
struct Sender {
    client: reqwest::Client,
    url: String,
    rec: Arc<Mutex<Recorder>>,
    start: Instant,
    /// Record each key's first request apart (tenant keys; an unknown key is always new).
    track_first: bool,
}

impl Sender {
    fn new(args: &LoadArgs) -> anyhow::Result<Self> {
        ensure_loopback(&args.gateway)?;
        anyhow::ensure!(
            args.duration > 0 && args.duration <= MAX_DURATION_S,
            "--duration must be in [1, {MAX_DURATION_S}] seconds"
        );
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(args.timeout_ms))
            .pool_max_idle_per_host(1024)
            .build()?;
        Ok(Self {
            client,
            url: format!("{}/v1/extract", args.gateway.trim_end_matches('/')),
            rec: Arc::new(Mutex::new(Recorder {
                ok: histogram(),
                all: histogram(),
                by_status: BTreeMap::new(),
                seen_keys: Default::default(),
                first_by_status: BTreeMap::new(),
                first_good: 0,
                seconds: BTreeMap::new(),
                lag: histogram(),
            })),
            start: Instant::now(),
            track_first: args.keys == Keys::Tenants,
        })
    }

    /// Is this the first request of its key? Asked once per request, in send order (the
    /// arrival loop, or a closed-loop worker before it sends); always false with unknown keys.
    fn first(&self, key: &str) -> bool {
        self.track_first && {
            let mut r = self.rec.lock().expect("recorder lock");
            !r.seen_keys.contains(key) && r.seen_keys.insert(key.to_owned())
        }
    }

    async fn send(&self, doc: Arc<(String, serde_json::Value)>, intended: Instant, first: bool) {
        let lag = intended.elapsed().as_micros().max(1) as u64;
        let _ = self.rec.lock().expect("recorder lock").lag.record(lag);
        let result = self
            .client
            .post(&self.url)
            .bearer_auth(&doc.0)
            .json(&doc.1)
            .send()
            .await;
        let status = match result {
            Ok(resp) => {
                let s = resp.status().as_u16().to_string();
                let _ = resp.bytes().await;
                s
            }
            Err(e) if e.is_timeout() => "client_timeout".to_string(),
            Err(_) => "client_error".to_string(),
        };
        let micros = intended.elapsed().as_micros().max(1) as u64;
        let second = intended.duration_since(self.start).as_secs();
        let mut r = self.rec.lock().expect("recorder lock");
        let ok = status == "200";
        if ok {
            let _ = r.ok.record(micros);
        }
        let _ = r.all.record(micros);
        if first {
            *r.first_by_status.entry(status.clone()).or_default() += 1;
            if ok && micros <= GOODPUT_BUDGET_US {
                r.first_good += 1;
            }
        }
        *r.by_status.entry(status).or_default() += 1;
        let entry = r
            .seconds
            .entry(second)
            .or_insert_with(|| (0, 0, 0, histogram(), 0));
        entry.0 += 1;
        if ok {
            entry.1 += 1;
            if micros <= GOODPUT_BUDGET_US {
                entry.2 += 1;
            }
        }
        let _ = entry.3.record(micros);
        entry.4 = entry.4.max(lag);
    }

    /// `ran`: how long arrivals went on (the duration, or less when stopped).
    fn report(&self, args: &LoadArgs, sent: u64, overload: u64, ran: Duration) -> LoadReport {
        let r = self.rec.lock().expect("recorder lock");
        let ok_count: u64 = r.by_status.get("200").copied().unwrap_or(0);
        let elapsed = ran.as_secs_f64().max(1e-3);
        LoadReport {
            target_rate: args.rate,
            duration_s: (ran.as_secs_f64().ceil() as u64).max(1),
            tenants: args.tenants,
            sent,
            client_overload: overload,
            by_status: r.by_status.clone(),
            achieved_rps: sent as f64 / elapsed,
            ok_rps: ok_count as f64 / elapsed,
            ok_latency_ms: percentiles(&r.ok),
            all_latency_ms: percentiles(&r.all),
            dispatch_lag_ms: percentiles(&r.lag),
            timeout_ms: args.timeout_ms,
            first_by_status: r.first_by_status.clone(),
            first_good: r.first_good,
            per_second: r
                .seconds
                .iter()
                .map(|(s, (n, ok, good, h, lag))| SecondSample {
                    second: *s,
                    sent: *n,
                    ok: *ok,
                    good: *good,
                    errors: n - ok,
                    p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
                    p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
                    lag_max_ms: *lag as f64 / 1000.0,
                })
                .collect(),
        }
    }
}

/// Run the open-loop generator, with the arrival rate read from `control` at every arrival.
pub async fn run_with(
    args: &LoadArgs,
    control: RateControl,
    keys: Vec<ApiKeyRecord>,
    source: DocSource,
) -> anyhow::Result<LoadReport> {
    anyhow::ensure!(
        !(args.keys == Keys::Unknown && args.tenant.is_some()),
        "--tenant sends one tenant's documents with its key; --keys unknown sends no tenant's key: \
         pick one"
    );
    control.set_mix(args.tenants);
    let sender = Sender::new(args)?;
    let mut picker = Picker::new(args, keys, source)?;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let start = sender.start;
    let end = start + Duration::from_secs(args.duration);
    let mut next = start;
    let (mut sent, mut overload) = (0u64, 0u64);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        // Exponential inter-arrival times make a Poisson process.
        let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
        next += Duration::from_secs_f64(-u.ln() / control.get());
        if next >= end || control.stopped() {
            break;
        }
        tokio::time::sleep_until(next).await;
        if control.stopped() {
            break;
        }
        if in_flight.load(Ordering::Relaxed) >= args.max_in_flight {
            overload += 1;
            continue;
        }
        let doc = match args.keys {
            Keys::Tenants => match picker.next(&mut rng, control.mix()) {
                Some(doc) => doc,
                None => continue,
            },
            Keys::Unknown => Arc::new((
                unknown_key(&mut rng),
                serde_json::json!({"doc_id": "flood", "text": UNKNOWN_KEY_DOC}),
            )),
        };
        sent += 1;
        let first = sender.first(&doc.0);
        let (sender, in_flight) = (sender.clone(), in_flight.clone());
        let intended = next;
        in_flight.fetch_add(1, Ordering::Relaxed);
        tasks.spawn(async move {
            sender.send(doc, intended, first).await;
            in_flight.fetch_sub(1, Ordering::Relaxed);
        });
        // Reap finished tasks so the set does not grow with the run.
        while tasks.try_join_next().is_some() {}
    }
    // The time the arrivals ran: the whole duration, or until `stop`.
    let ran = next.min(end).duration_since(start);
    while tasks.join_next().await.is_some() {}
    Ok(sender.report(args, sent, overload, ran))
}

/// A closed-loop run: `concurrency` clients, each sending its next request as soon as the last
/// one is answered, for `args.duration` seconds. It measures what the lab can serve at most —
/// the calibration's capacity probe — and cannot storm: it slows down with the lab (which is
/// exactly why the game days themselves are open loop).
pub async fn run_closed(
    args: &LoadArgs,
    concurrency: usize,
    keys: Vec<ApiKeyRecord>,
    source: DocSource,
) -> anyhow::Result<LoadReport> {
    anyhow::ensure!(
        (1..=1024).contains(&concurrency),
        "closed-loop concurrency must be 1..=1024"
    );
    anyhow::ensure!(
        args.keys == Keys::Tenants,
        "a closed-loop run measures what tenants are served: it sends tenant keys only"
    );
    let sender = Sender::new(args)?;
    let picker = Arc::new(Mutex::new(Picker::new(args, keys, source)?));
    let end = sender.start + Duration::from_secs(args.duration);
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let (sender, picker, sent) = (sender.clone(), picker.clone(), sent.clone());
        let mix = args.tenants;
        let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed.wrapping_add(w as u64));
        workers.spawn(async move {
            while Instant::now() < end {
                let doc = picker.lock().expect("picker lock").next(&mut rng, mix);
                let Some(doc) = doc else { continue };
                sent.fetch_add(1, Ordering::Relaxed);
                let first = sender.first(&doc.0);
                sender.send(doc, Instant::now(), first).await;
            }
        });
    }
    while workers.join_next().await.is_some() {}
    Ok(sender.report(
        args,
        sent.load(Ordering::Relaxed),
        0,
        Duration::from_secs(args.duration),
    ))
}

pub fn print(report: &LoadReport) {
    println!(
        "open-loop load: target {:.0} rps for {} s ({:?} tenant mix)",
        report.target_rate, report.duration_s, report.tenants
    );
    println!(
        "  sent {} ({:.1} rps), ok {:.1} rps, client overload {}",
        report.sent, report.achieved_rps, report.ok_rps, report.client_overload
    );
    println!("  by status: {:?}", report.by_status);
    if !report.first_by_status.is_empty() {
        println!(
            "  each tenant's first request: {:?} ({} of {} answered 200 within 3 s)",
            report.first_by_status,
            report.first_good,
            report.first_by_status.values().sum::<u64>()
        );
    }
    let p = &report.ok_latency_ms;
    println!(
        "  latency of 200s from intended send (ms): p50 {:.1}  p95 {:.1}  p99 {:.1}  max {:.1}  (n={})",
        p.p50, p.p95, p.p99, p.max, p.count
    );
    let a = &report.all_latency_ms;
    println!(
        "  latency of all answers (ms):             p50 {:.1}  p95 {:.1}  p99 {:.1}  max {:.1}  (n={})",
        a.p50, a.p95, a.p99, a.max, a.count
    );
    let l = &report.dispatch_lag_ms;
    println!(
        "  generator's dispatch lag (ms):           p50 {:.1}  p95 {:.1}  p99 {:.1}  max {:.1}  (kept schedule: max <= {:.0})",
        l.p50, l.p95, l.p99, l.max, report.max_dispatch_lag_ms()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ensure_loopback_refuses_anything_off_this_machine() {
        assert!(ensure_loopback("http://127.0.0.1:8080").is_ok());
        assert!(ensure_loopback("http://127.9.9.9:1").is_ok());
        assert!(ensure_loopback("http://localhost:8080").is_ok());
        assert!(ensure_loopback("http://[::1]:8080").is_ok());
        assert!(ensure_loopback("http://10.0.0.1:8080").is_err());
        assert!(ensure_loopback("http://192.168.1.1").is_err());
        assert!(ensure_loopback("http://example.invalid").is_err());
        assert!(ensure_loopback("not a url").is_err());
    }

    /// A loopback server answering every request 200 at once, keep-alive; it keeps each
    /// request's `Authorization` header.
    async fn always_ok() -> (String, Arc<Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let auth = Arc::new(Mutex::new(Vec::new()));
        let seen = auth.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        // One request: its head, then its body by Content-Length.
                        let head_end = loop {
                            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break i + 4;
                            }
                            match sock.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                        if let Some(a) = head.lines().find_map(|l| l.strip_prefix("authorization:"))
                        {
                            seen.lock().unwrap().push(a.trim().to_string());
                        }
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        while buf.len() < head_end + len {
                            match sock.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..head_end + len);
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                        if sock.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}"), auth)
    }

    #[tokio::test]
    async fn a_stopped_generator_sends_nothing_more_and_reports_the_time_it_ran() {
        let (gateway, _) = always_ok().await;
        let args = LoadArgs {
            gateway,
            rate: 200.0,
            duration: 600,
            timeout_ms: 10_000,
            tenants: TenantMix::Size,
            docs: Docs::Corpus,
            keys: Keys::Tenants,
            tenant: None,
            max_in_flight: 10_000,
            seed: 7,
            out: None,
        };
        let keys = vec![ApiKeyRecord {
            tenant_id: 1,
            key_id: "k".into(),
            api_key: "rsl_k_secret".into(),
            entities: 10,
        }];
        let docs = vec![CorpusDoc {
            tenant_id: 1,
            doc_id: "doc_1_1".into(),
            locale: None,
            doc_type: "invoice".into(),
            text: "Acme GmbH owes Globex 100 EUR.".into(),
            mentions: Vec::new(),
        }];
        let control = RateControl::new(args.rate).unwrap();
        let stopper = control.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            stopper.stop();
        });
        let run = run_with(&args, control, keys, DocSource::Corpus(docs));
        let report = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("a stopped generator ends (it would run its 600 s)")
            .unwrap();
        // 600 s at 200 rps is 120,000 arrivals; stopped after half a second it is ~100 (bounds
        // far from both, for a shared machine).
        assert!(report.sent > 0 && report.sent < 5_000, "{}", report.sent);
        assert_eq!(report.by_status.get("200").copied(), Some(report.sent));
        assert!(report.duration_s < 60, "{}", report.duration_s);
    }

    /// Every request's dispatch lag is recorded, and a generator whose runtime is held up
    /// records the hold-up (a blocked current-thread runtime: every arrival due meanwhile
    /// leaves late); a request the lab never answers is a client timeout, unanswered.
    #[tokio::test(flavor = "current_thread")]
    async fn a_held_up_generator_measures_its_lag_and_a_silent_lab_leaves_requests_unanswered() {
        let (gateway, _) = always_ok().await;
        let mut args = LoadArgs::stream(&gateway, 200.0, 1, TenantMix::Uniform, 11);
        args.docs = Docs::Corpus;
        let (keys, docs) = corpus_of(2);
        tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            #[allow(clippy::disallowed_methods)] // the point: the generator's thread held up
            std::thread::sleep(Duration::from_millis(400));
        });
        let held = run_corpus(&args, &keys, &docs).await.unwrap();
        assert_eq!(held.dispatch_lag_ms.count, held.sent);
        // The arrivals due in the 400 ms hold-up left late, up to 400 ms; the others (most of
        // the second) on time: a lag timed from the run's start, or the answer, is not this.
        let lag = &held.dispatch_lag_ms;
        assert!(lag.max >= 300.0 && lag.p50 < 300.0, "{lag:?}");
        assert!(
            held.per_second.iter().any(|s| s.lag_max_ms >= 300.0),
            "{:?}",
            held.per_second
        );
        assert_eq!(held.unanswered(), 0);
        assert_eq!(held.max_dispatch_lag_ms(), 1_000.0);

        // A listener that accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = silent.accept().await {
                held.push(sock);
            }
        });
        let mut args = LoadArgs::stream(&format!("http://{addr}"), 50.0, 1, TenantMix::Uniform, 11);
        args.docs = Docs::Corpus;
        args.timeout_ms = 300;
        let lost = run_corpus(&args, &keys, &docs).await.unwrap();
        assert!(lost.sent > 5, "{}", lost.sent);
        assert_eq!(lost.unanswered(), lost.sent);
        assert_eq!(lost.by_status.get("client_timeout"), Some(&lost.sent));
    }

    fn corpus_of(tenants: i64) -> (Vec<ApiKeyRecord>, Vec<CorpusDoc>) {
        let keys = (1..=tenants)
            .map(|t| ApiKeyRecord {
                tenant_id: t,
                key_id: format!("{t:012x}"),
                api_key: format!("rsl_{t:012x}_5ec2e7"),
                entities: 10,
            })
            .collect();
        let docs = (1..=tenants)
            .flat_map(|t| {
                (0..5).map(move |i| CorpusDoc {
                    tenant_id: t,
                    doc_id: format!("doc_{t}_{i}"),
                    locale: None,
                    doc_type: "invoice".into(),
                    text: "Acme GmbH owes Globex 100 EUR.".into(),
                    mentions: Vec::new(),
                })
            })
            .collect();
        (keys, docs)
    }

    /// One open-loop run of `args` over the corpus `docs` with `keys`.
    async fn run_corpus(
        args: &LoadArgs,
        keys: &[ApiKeyRecord],
        docs: &[CorpusDoc],
    ) -> anyhow::Result<LoadReport> {
        let control = RateControl::new(args.rate)?;
        run_with(
            args,
            control,
            keys.to_vec(),
            DocSource::Corpus(docs.to_vec()),
        )
        .await
    }

    /// Each tenant's first request is counted once, whatever the run sends after it; a flood run
    /// sends a new well-formed key on every request, none of them a tenant's.
    #[tokio::test]
    async fn first_requests_are_counted_per_tenant_and_a_flood_never_repeats_a_key() {
        let (gateway, auth) = always_ok().await;
        let mut args = LoadArgs::stream(&gateway, 400.0, 1, TenantMix::Uniform, 3);
        args.docs = Docs::Corpus;
        let (keys, docs) = corpus_of(4);
        let tenants = run_corpus(&args, &keys, &docs).await.unwrap();
        // ~400 requests over 4 tenants: every tenant sent, and each counted once as first.
        assert!(tenants.sent > 40, "{}", tenants.sent);
        assert_eq!(tenants.first_by_status.get("200").copied(), Some(4));
        assert_eq!(tenants.first_by_status.len(), 1);
        assert_eq!(tenants.first_good, 4);
        auth.lock().unwrap().clear();

        args.keys = Keys::Unknown;
        let flood = run_corpus(&args, &keys, &docs).await.unwrap();
        assert!(
            flood.first_by_status.is_empty(),
            "{:?}",
            flood.first_by_status
        );
        let sent = auth.lock().unwrap().clone();
        assert_eq!(sent.len() as u64, flood.sent);
        // Distinct key ids: the gateway caches a refused id, so a repeated id is no new lookup.
        let ids: std::collections::HashSet<&str> =
            sent.iter().filter_map(|a| a.get(11..23)).collect();
        assert_eq!(ids.len(), sent.len(), "a key id repeated");
        for a in &sent {
            let key = a.strip_prefix("bearer ").expect("a bearer key");
            let (id, secret) = key
                .strip_prefix("rsl_")
                .and_then(|r| r.split_once('_'))
                .expect("the seeded shape");
            assert_eq!((id.len(), secret.len()), (12, 64), "{key}");
            assert!(keys.iter().all(|k| !k.api_key.eq_ignore_ascii_case(key)));
        }
    }

    /// `--tenant` sends that tenant's documents with its key and nothing else, and refuses a
    /// tenant the corpus does not name, and the stream (which picks tenants by itself).
    #[tokio::test]
    async fn one_tenant_sends_only_its_own_documents() {
        let (gateway, auth) = always_ok().await;
        let mut args = LoadArgs::stream(&gateway, 200.0, 1, TenantMix::Uniform, 5);
        args.docs = Docs::Corpus;
        args.tenant = Some(3);
        let (keys, docs) = corpus_of(4);
        let run = run_corpus(&args, &keys, &docs).await.unwrap();
        assert!(run.sent > 20, "{}", run.sent);
        let sent = auth.lock().unwrap().clone();
        assert!(
            sent.iter().all(|a| a == "bearer rsl_000000000003_5ec2e7"),
            "{sent:?}"
        );
        assert_eq!(run.first_by_status.values().sum::<u64>(), 1);

        args.tenant = Some(9);
        let err = run_corpus(&args, &keys, &docs)
            .await
            .expect_err("a tenant without documents");
        assert!(err.to_string().contains("tenant 9"), "{err}");

        args.tenant = Some(3);
        args.keys = Keys::Unknown;
        let err = run_corpus(&args, &keys, &docs)
            .await
            .expect_err("a tenant's flood is a contradiction");
        assert!(err.to_string().contains("pick one"), "{err}");
    }
}
