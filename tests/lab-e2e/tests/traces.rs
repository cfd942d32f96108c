//! Traces end to end (issue 6): the span tree the postmortem's Jaeger waterfall showed, asserted
//! on the spans the services really emit.
//!
//! The whole lab runs in this process, so one global subscriber records every service's spans in
//! memory (`lab_core::telemetry::recorder`) — the same spans the OTLP exporter would ship. Each
//! test sends its own W3C `traceparent` and reads back only that trace, so the tests share the
//! recorder and run in parallel.
//!
//! The orphan scenario is the postmortem's shape at lab scale: entity-service (a stub) answers
//! 503 after 1 s, and the end user gives up after 600 ms and hangs up on the gateway, which drops
//! its call to the orchestrator. Legacy: the handler runs on as a Go handler does, so
//! `orchestrator.Extract`, `entity.Resolve` and its attempts end seconds after the gateway's
//! span, in the user's trace ("The gateway span ends at 3.0 s. Its child span keeps going to
//! 9.8 s."). Resilient: the handler is dropped, everything under it ends with it, and
//! `otel_span_orphaned_total` stays 0 although the hang-up did cut an attempt.

use std::time::Duration;

use entity_client::test_support::{Reply, Stub};
use lab_core::telemetry::recorder::{self, RecordedSpan};
use lab_e2e::{Lab, LabOptions};
use serde_json::json;
use testkit::{fixtures, TestDb};

/// One span in, one batch to entity-service out: one call per attempt.
const DOC: &str = "The payee Vega Labs confirmed.";
/// The stub entity-service's latency: longer than the end user's patience, so the user hangs up
/// while an attempt is on the wire; longer than the fixed client's 700 ms per-attempt budget.
const STUB_DELAY: Duration = Duration::from_millis(1000);
/// When the end user hangs up.
const PATIENCE: Duration = Duration::from_millis(600);

/// A fresh trace id and parent span id, and the `traceparent` carrying them (sampled).
fn traceparent() -> (String, String, String) {
    let trace_id = format!("{:032x}", rand::random::<u128>() | 1);
    let parent = format!("{:016x}", rand::random::<u64>() | 1);
    let header = format!("00-{trace_id}-{parent}-01");
    (trace_id, parent, header)
}

/// `POST /v1/extract` as an end user who waits at most `patience`; `None` if they gave up.
async fn extract(lab: &Lab, key: &str, header: &str, patience: Duration) -> Option<u16> {
    testkit::http()
        .post(format!("{}/v1/extract", lab.gateway.url))
        .bearer_auth(key)
        .header("traceparent", header)
        .timeout(patience)
        .json(&json!({"doc_id": "d", "text": DOC}))
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

/// `POST /internal/extract` straight to the orchestrator, as the gateway would send it, from a
/// caller that waits at most `patience`; `None` if it gave up.
async fn internal_extract(lab: &Lab, header: &str, patience: Duration) -> Option<u16> {
    testkit::http()
        .post(format!("{}/internal/extract", lab.orchestrators[0].url))
        .header("traceparent", header)
        .timeout(patience)
        .json(&json!({"tenant_id": 1, "doc_id": "d", "text": DOC}))
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

fn named<'a>(spans: &'a [RecordedSpan], name: &str) -> Vec<&'a RecordedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The one span called `name`, failing with the whole trace if there is not exactly one.
fn one<'a>(spans: &'a [RecordedSpan], name: &str) -> &'a RecordedSpan {
    let found = named(spans, name);
    assert_eq!(
        found.len(),
        1,
        "exactly one {name} span in {:#?}",
        names(spans)
    );
    found[0]
}

fn names(spans: &[RecordedSpan]) -> Vec<String> {
    spans
        .iter()
        .map(|s| {
            format!(
                "{} ({} <- {:?})",
                s.name,
                s.span_id,
                s.parent_span_id.as_deref().unwrap_or("root")
            )
        })
        .collect()
}

/// How much later than its parent a span may end and still have ended "with" it. In one process,
/// nothing: a child's future is dropped inside its parent's. Across a hop (a server span under
/// the caller's client span) the hang-up has to reach the next process first: well under 100 ms
/// on loopback, while the legacy orphans outlive their parents by seconds.
fn slack(child: &RecordedSpan) -> Duration {
    if child.kind == "server" {
        Duration::from_millis(100)
    } else {
        Duration::ZERO
    }
}

fn is_child(child: &RecordedSpan, parent: &RecordedSpan) -> bool {
    child.parent_span_id.as_deref() == Some(parent.span_id.as_str())
}

/// How long after `parent` ended `child` ended (zero if it did not outlive it).
fn outlived(child: &RecordedSpan, parent: &RecordedSpan) -> Duration {
    child.end.duration_since(parent.end).unwrap_or_default()
}

/// The trace below the orchestrator: its server span under the caller's `traceparent`, the
/// client's spans, entity-service's server span under the attempt that called it (it received a
/// `traceparent` naming that attempt), and the queries under that.
fn assert_resilient_tree(trace: &[RecordedSpan], caller: &str) {
    let orchestrator = one(trace, "orchestrator.Extract");
    assert_eq!(orchestrator.parent_span_id.as_deref(), Some(caller));
    assert_eq!(orchestrator.kind, "server");
    let resolve = one(trace, "entity.Resolve");
    assert!(is_child(resolve, orchestrator), "{:#?}", names(trace));
    let attempt = one(trace, "entity.Resolve.attempt.0");
    assert!(is_child(attempt, resolve), "{:#?}", names(trace));
    assert_eq!(attempt.kind, "client");
    assert_eq!(attempt.attribute("http.response.status_code"), Some("200"));
    let service = one(trace, "entity-service.Resolve");
    assert!(is_child(service, attempt), "{:#?}", names(trace));
    assert_eq!(service.kind, "server");
    let acquire = one(trace, "db.pool.acquire");
    assert!(is_child(acquire, service));
    let queries = named(trace, "db.query");
    assert!(!queries.is_empty());
    for q in queries {
        assert!(is_child(q, service), "{:#?}", names(trace));
        assert_eq!(q.attribute("db.system.name"), Some("postgresql"));
        assert!(q
            .attribute("db.query.text")
            .is_some_and(|t| t.contains("SELECT")));
    }
    assert!(trace.iter().all(|s| !s.error), "a 200 has no error span");
    // Resilient mode: no child outlives its parent anywhere in the trace.
    for child in trace {
        if let Some(parent) = trace.iter().find(|p| is_child(child, p)) {
            assert!(
                outlived(child, parent) <= slack(child),
                "{} outlived {} by {:?}",
                child.name,
                parent.name,
                outlived(child, parent)
            );
        }
    }
}

#[tokio::test]
async fn a_call_is_one_trace_from_the_orchestrator_to_the_database() {
    let spans = recorder::global();
    let db = TestDb::new().await;
    let lab = Lab::start(db, LabOptions::default()).await;
    let (trace_id, caller, header) = traceparent();

    let status = internal_extract(&lab, &header, Duration::from_secs(20)).await;
    assert_eq!(status, Some(200));
    let trace = spans
        .wait_for(
            &trace_id,
            |t| !named(t, "db.query").is_empty() && !named(t, "orchestrator.Extract").is_empty(),
            Duration::from_secs(10),
        )
        .await;
    assert_resilient_tree(&trace, &caller);
}

#[tokio::test]
async fn a_request_is_one_trace_from_the_gateway_to_the_database() {
    let spans = recorder::global();
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    let lab = Lab::start(db, LabOptions::default()).await;
    let (trace_id, caller, header) = traceparent();

    let status = extract(&lab, &key.api_key, &header, Duration::from_secs(20)).await;
    assert_eq!(status, Some(200));
    let trace = spans
        .wait_for(
            &trace_id,
            |t| {
                !named(t, "db.query").is_empty()
                    && !named(t, "edge-gateway.HandleExtract").is_empty()
            },
            Duration::from_secs(10),
        )
        .await;
    let gateway = one(&trace, "edge-gateway.HandleExtract");
    assert_eq!(gateway.parent_span_id.as_deref(), Some(caller.as_str()));
    assert_eq!(gateway.kind, "server");
    let below: Vec<RecordedSpan> = trace
        .iter()
        .filter(|s| s.span_id != gateway.span_id)
        .cloned()
        .collect();
    assert_resilient_tree(&below, &gateway.span_id);
}

#[tokio::test]
async fn legacy_retry_loop_outlives_the_request_in_the_users_trace() {
    let spans = recorder::global();
    let stub = Stub::start(Reply::status(503).after(STUB_DELAY)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    lab.set_flag("client.mode", "legacy").await;
    let (trace_id, _, header) = traceparent();

    assert_eq!(
        extract(&lab, &key, &header, PATIENCE).await,
        None,
        "the user gave up"
    );
    // 3 attempts of 1 s with 200/400/800 ms sleeps after each: the loop ends ~4.4 s in.
    let trace = spans
        .wait_for(
            &trace_id,
            |t| !named(t, "entity.Resolve").is_empty(),
            Duration::from_secs(20),
        )
        .await;

    let gateway = one(&trace, "edge-gateway.HandleExtract");
    assert!(gateway.error, "ended by the user's hang-up");
    let orchestrator = one(&trace, "orchestrator.Extract");
    assert!(is_child(orchestrator, gateway), "{:#?}", names(&trace));
    assert!(
        orchestrator.error,
        "the handler ended by a hang-up is an error span"
    );
    // The postmortem's cover: "The gateway span ends at 3.0 s. Its child span keeps going to
    // 9.8 s." The legacy handler runs on as a Go handler does (LAB-BUG(go-handler)), so its own
    // span goes on after the user's request ended...
    assert!(
        outlived(orchestrator, gateway) > Duration::from_secs(1),
        "orchestrator.Extract outlived edge-gateway.HandleExtract by only {:?}",
        outlived(orchestrator, gateway)
    );
    // ...and the retry loop under it with it: the handler waits for it, as Go's did.
    let resolve = one(&trace, "entity.Resolve");
    assert!(is_child(resolve, orchestrator), "{:#?}", names(&trace));
    assert!(
        outlived(resolve, gateway) > Duration::from_secs(1),
        "entity.Resolve ran on after the user's own span"
    );
    assert_eq!(
        outlived(resolve, orchestrator),
        Duration::ZERO,
        "the handler ended after the work it waited for"
    );
    assert!(resolve.error, "exhausted 3 attempts");
    for n in 0..3 {
        let attempt = one(&trace, &format!("entity.Resolve.attempt.{n}"));
        assert!(is_child(attempt, resolve), "{:#?}", names(&trace));
        assert_eq!(attempt.attribute("http.response.status_code"), Some("503"));
    }
    // Attempts that STARTED after the request was over: work for nobody.
    let for_nobody = ["entity.Resolve.attempt.1", "entity.Resolve.attempt.2"]
        .iter()
        .filter(|n| one(&trace, n).start > gateway.end)
        .count();
    assert_eq!(
        for_nobody, 2,
        "attempts 1 and 2 began after their caller had gone"
    );
    let orch = &lab.orchestrators[0].admin;
    assert!(
        Lab::metric(orch, "otel_span_orphaned_total", "").await >= 1.0,
        "the orphan is counted as well as drawn"
    );
    assert!(
        Lab::metric(orch, "orchestrator_handlers_orphaned_total", "").await >= 1.0,
        "the handler that ran on is counted"
    );
}

#[tokio::test]
async fn resilient_work_ends_with_the_request_and_orphans_nothing() {
    let spans = recorder::global();
    let stub = Stub::start(Reply::status(503).after(STUB_DELAY)).await;
    let (lab, key) = Lab::against(&stub.url, 1).await;
    let (trace_id, _, header) = traceparent();

    assert_eq!(
        extract(&lab, &key, &header, PATIENCE).await,
        None,
        "the user gave up"
    );
    spans
        .wait_for(
            &trace_id,
            |t| {
                !named(t, "entity.Resolve").is_empty()
                    && !named(t, "edge-gateway.HandleExtract").is_empty()
            },
            Duration::from_secs(10),
        )
        .await;
    // Long enough for a detached attempt (1 s at the stub) or a next one to show up if there were
    // any: the assertions below must be able to see a late span.
    tokio::time::sleep(STUB_DELAY + Duration::from_millis(500)).await;
    let trace = spans.trace(&trace_id);

    let orchestrator = one(&trace, "orchestrator.Extract");
    let resolve = one(&trace, "entity.Resolve");
    assert!(is_child(resolve, orchestrator), "{:#?}", names(&trace));
    let attempt = one(&trace, "entity.Resolve.attempt.0");
    assert!(is_child(attempt, resolve));
    assert!(
        attempt
            .end
            .duration_since(attempt.start)
            .unwrap_or_default()
            < STUB_DELAY,
        "the attempt was cut when the user left, not answered"
    );
    for child in &trace {
        if let Some(parent) = trace.iter().find(|p| is_child(child, p)) {
            assert!(
                outlived(child, parent) <= slack(child),
                "{} outlived {} by {:?}",
                child.name,
                parent.name,
                outlived(child, parent)
            );
        }
    }
    let orch = &lab.orchestrators[0].admin;
    // The hang-up did reach the client (so the zero below is not vacuous)...
    assert!(Lab::metric(orch, "entity_abandoned_total", "").await >= 1.0);
    // ...and nothing it had started outlived it.
    assert_eq!(Lab::metric(orch, "otel_span_orphaned_total", "").await, 0.0);
}

/// The asynchronous hop: the enrichment of a document joins the trace of the request that
/// extracted it, through the Kafka record's `traceparent` header, as a child of the
/// orchestrator's span — and ends after it (the worker runs later; that is not an orphan, no
/// caller waits for it).
#[tokio::test]
async fn the_enrichment_of_a_document_joins_the_requests_trace_through_kafka() {
    let spans = recorder::global();
    let db = TestDb::new().await;
    let key = fixtures::tenant_with_key(&db.url, 1).await;
    fixtures::entities(&db.url, &[(10, 1, "organization", "Vega Labs", 100)]).await;
    let opts = LabOptions {
        kafka: Some(lab_e2e::KafkaTarget::fresh(&testkit::kafka_bootstrap().await).await),
        ..LabOptions::default()
    };
    let lab = Lab::start(db, opts).await;
    let _worker = lab.enrichment_worker().await;
    let (trace_id, _, header) = traceparent();

    let status = extract(&lab, &key.api_key, &header, Duration::from_secs(20)).await;
    assert_eq!(status, Some(200));
    let trace = spans
        .wait_for(
            &trace_id,
            |t| !named(t, "enrichment.Apply").is_empty(),
            Duration::from_secs(30),
        )
        .await;
    let orchestrator = one(&trace, "orchestrator.Extract");
    let apply = one(&trace, "enrichment.Apply");
    assert!(
        is_child(apply, orchestrator),
        "enrichment.Apply is a child of orchestrator.Extract: {:#?}",
        names(&trace)
    );
    assert_eq!(
        apply.kind, "consumer",
        "asynchronous by contract: outliving the request is not an orphan"
    );
}
