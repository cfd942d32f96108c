//! The receiver end to end: the services' real OTLP exporter (tonic, protobuf, batches) ships
//! the spans of a real request through the whole lab to the receiver, and the waterfall drawn
//! from what arrived shows the postmortem's cover in legacy mode and not in resilient mode.
//!
//! The scenario is tests/lab-e2e/tests/traces.rs's: entity-service (a stub) answers 503 after
//! 1 s, the end user hangs up after 600 ms. Legacy: the detached retry loop keeps going for
//! seconds, `entity.Resolve` and its attempts end long after `edge-gateway.HandleExtract`.
//! Resilient: everything ends with the request.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use entity_client::test_support::{Reply, Stub};
use lab_e2e::Lab;
use lab_traces::api::Client;
use lab_traces::{model, waterfall, SpanRecord, Store};
use serde_json::json;

const DOC: &str = "The payee Vega Labs confirmed.";
const STUB_DELAY: Duration = Duration::from_millis(1000);
const PATIENCE: Duration = Duration::from_millis(600);
/// The exporter's batch interval in this test (the SDK's default is 5 s).
const EXPORT_EVERY: Duration = Duration::from_millis(200);

/// One receiver and one global exporter for the whole test binary, both on a runtime of their
/// own: a test's runtime ends with the test, and the exporter's gRPC channel must outlive it.
fn receiver() -> String {
    static API: OnceLock<String> = OnceLock::new();
    API.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let running = lab_traces::receiver::start(
                    "127.0.0.1:0".parse().unwrap(),
                    "127.0.0.1:0".parse().unwrap(),
                    Arc::new(Store::new(1_000)),
                )
                .await
                .unwrap();
                let endpoint = format!("http://{}", running.otlp);
                assert!(
                    lab_core::telemetry::init_with_otlp("lab-e2e", &endpoint, EXPORT_EVERY)
                        .unwrap(),
                    "a global subscriber was already installed"
                );
                tx.send(format!("http://{}", running.api)).unwrap();
                std::future::pending::<()>().await;
            });
        });
        rx.recv().unwrap()
    })
    .clone()
}

async fn hang_up(lab: &Lab, key: &str) -> String {
    let trace_id = format!("{:032x}", rand::random::<u128>() | 1);
    let parent = format!("{:016x}", rand::random::<u64>() | 1);
    let r = http_client()
        .post(format!("{}/v1/extract", lab.gateway.url))
        .bearer_auth(key)
        .header("traceparent", format!("00-{trace_id}-{parent}-01"))
        .timeout(PATIENCE)
        .json(&json!({"doc_id": "d", "text": DOC}))
        .send()
        .await;
    assert!(r.is_err(), "the user gave up: {r:?}");
    trace_id
}

/// Poll the receiver's API until the trace has what `done` wants (bounded), and return it.
async fn wait_for(
    api: &Client,
    trace_id: &str,
    done: impl Fn(&[SpanRecord]) -> bool,
) -> Vec<SpanRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let spans = api.trace(trace_id).await.unwrap_or_default();
        if done(&spans) || Instant::now() > deadline {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn count(spans: &[SpanRecord], name: &str) -> usize {
    spans.iter().filter(|s| s.name == name).count()
}

fn one<'a>(spans: &'a [SpanRecord], name: &str) -> &'a SpanRecord {
    let found: Vec<&SpanRecord> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} in {:?}", names(spans));
    found[0]
}

fn names(spans: &[SpanRecord]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_hang_up_arrives_over_otlp_and_its_waterfall_shows_the_child_outliving_the_gateway(
) {
    let api = Client::new(&receiver());
    let stub = Stub::start(Reply::status(503).after(STUB_DELAY)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    lab.set_flag("client.mode", "legacy").await;
    let trace_id = hang_up(&lab, &key).await;

    // 3 attempts of 1 s with 200/400/800 ms sleeps after each: the loop ends ~4.4 s in.
    let spans = wait_for(&api, &trace_id, |t| {
        count(t, "entity.Resolve") == 1
            && count(t, "edge-gateway.HandleExtract") == 1
            && (0..3).all(|n| count(t, &format!("entity.Resolve.attempt.{n}")) == 1)
    })
    .await;
    let gateway = one(&spans, "edge-gateway.HandleExtract");
    let resolve = one(&spans, "entity.Resolve");
    assert_eq!(gateway.kind, "server");
    let outlived = model::ms_between(gateway.end_unix_nano, resolve.end_unix_nano);
    assert!(
        outlived > 1000.0,
        "entity.Resolve outlived edge-gateway.HandleExtract by only {outlived} ms"
    );

    let summary = model::summarise(&trace_id, &spans).unwrap();
    assert_eq!(summary.root, "edge-gateway.HandleExtract");
    assert!(summary.orphans >= 1, "{summary:?}");
    // The legacy handler runs on as a Go handler does (LAB-BUG(go-handler)): the child that
    // outlives the gateway's span longest is the orchestrator's, with the retry loop under it.
    assert!(
        summary
            .worst_orphan
            .as_deref()
            .is_some_and(|w| w.starts_with("orchestrator.Extract")),
        "{summary:?}"
    );
    // The API's list finds it among the orphaned.
    let listed = api
        .list(lab_traces::store::Sort::Orphaned, 1_000)
        .await
        .unwrap();
    assert!(listed.iter().any(|s| s.trace_id == trace_id));

    let rows = waterfall::layout(&spans);
    let row = |name: &str| rows.iter().find(|r| r.span.name == name).unwrap();
    assert_eq!(row("edge-gateway.HandleExtract").depth, 0);
    assert!(row("orchestrator.Extract").orphan());
    for n in 0..3 {
        let a = row(&format!("entity.Resolve.attempt.{n}"));
        assert_eq!(a.depth, row("entity.Resolve").depth + 1);
        assert_eq!(a.outcome(), "503");
    }
    assert!(row("entity.Resolve.attempt.2").for_nobody());
    let text = waterfall::text(&trace_id, &spans, 110);
    eprintln!("{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("orchestrator.Extract "))
        .unwrap();
    assert!(line.contains('▒') && line.ends_with('!'), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resilient_hang_up_arrives_over_otlp_and_nothing_in_it_outlives_its_caller() {
    let api = Client::new(&receiver());
    let stub = Stub::start(Reply::status(503).after(STUB_DELAY)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    let trace_id = hang_up(&lab, &key).await;

    let spans = wait_for(&api, &trace_id, |t| {
        count(t, "entity.Resolve") == 1 && count(t, "edge-gateway.HandleExtract") == 1
    })
    .await;
    // Long enough for a detached attempt (1 s at the stub) or a next one to arrive if there
    // were any: the assertions below must be able to see a late span.
    tokio::time::sleep(STUB_DELAY + 3 * EXPORT_EVERY).await;
    let spans = wait_for(&api, &trace_id, |t| t.len() >= spans.len()).await;
    assert_eq!(
        count(&spans, "entity.Resolve.attempt.0"),
        1,
        "{:?}",
        names(&spans)
    );
    assert_eq!(
        count(&spans, "entity.Resolve.attempt.1"),
        0,
        "no retry after the hang-up"
    );

    let summary = model::summarise(&trace_id, &spans).unwrap();
    assert_eq!(summary.orphans, 0, "{summary:?}");
    let rows = waterfall::layout(&spans);
    assert!(rows.iter().all(|r| !r.orphan() && !r.for_nobody()));
    let gateway = one(&spans, "edge-gateway.HandleExtract");
    let resolve = one(&spans, "entity.Resolve");
    assert!(
        model::ms_between(gateway.end_unix_nano, resolve.end_unix_nano) * 1e6
            <= model::ORPHAN_SLACK_NANOS as f64
    );
    let text = waterfall::text(&trace_id, &spans, 110);
    eprintln!("{text}");
    assert!(text.contains("no span outlived its parent"), "{text}");
}

/// A client with a timeout (`.clippy.toml`): a server that never answers fails the test instead
/// of hanging it. 30 s: far above any answer here.
fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("a reqwest client")
}
