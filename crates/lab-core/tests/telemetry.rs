//! Trace context in and out of a service, with the in-memory recorder as the exporter: the
//! HTTP server span of `metrics::track` and the string key/value carrier helpers (Kafka).

use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use lab_core::metrics::{track, HttpMetrics, Metrics, CALLEE_BUCKETS};
use lab_core::telemetry::propagation::{self, TRACEPARENT};
use lab_core::telemetry::recorder::{self, RecordedSpan};

const CALLER_TRACE: &str = "4b1c9f2e8a7d6c5b4a39281706f5e4d3";

fn traceparent(trace: &str, parent: &str) -> String {
    format!("00-{trace}-{parent}-01")
}

/// Serve `/ok`, `/fail` (500) and `/slow` (5 s) behind `track`, named `test.Handle`.
async fn serve() -> String {
    let metrics = Metrics::new();
    let http = HttpMetrics::new(
        &metrics,
        lab_contract::Hop::Orchestrator,
        "test",
        "to the test routes",
        CALLEE_BUCKETS,
    )
    .with_span_name("test.Handle");
    let app = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route("/fail", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .layer(axum::middleware::from_fn_with_state(http, track));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn server_span(trace: &str) -> RecordedSpan {
    let spans = recorder::global()
        .wait_for(trace, |t| !t.is_empty(), Duration::from_secs(10))
        .await;
    assert_eq!(spans.len(), 1, "{spans:#?}");
    spans[0].clone()
}

#[tokio::test]
async fn track_opens_the_server_span_under_the_callers_traceparent() {
    recorder::global();
    let url = serve().await;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let resp = http_client()
        .get(format!("{url}/ok"))
        .header(TRACEPARENT, traceparent(trace, "b7ad6b7169203331"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let span = server_span(trace).await;
    assert_eq!(span.name, "test.Handle");
    assert_eq!(span.kind, "server");
    assert_eq!(span.parent_span_id.as_deref(), Some("b7ad6b7169203331"));
    assert_eq!(span.attribute("http.response.status_code"), Some("200"));
    assert!(!span.error);
}

#[tokio::test]
async fn track_marks_a_5xx_as_an_error_span() {
    recorder::global();
    let url = serve().await;
    let resp = http_client()
        .get(format!("{url}/fail"))
        .header(TRACEPARENT, traceparent(CALLER_TRACE, "00f067aa0ba902b7"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 500);
    let span = server_span(CALLER_TRACE).await;
    assert_eq!(span.attribute("http.response.status_code"), Some("500"));
    assert!(span.error, "kept by the collector's error policy");
}

#[tokio::test]
async fn track_ends_the_span_when_the_caller_hangs_up() {
    recorder::global();
    let url = serve().await;
    let trace = "11112222333344445555666677778888";
    let sent = http_client()
        .get(format!("{url}/slow"))
        .header(TRACEPARENT, traceparent(trace, "1111222233334444"))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(sent.is_err(), "the caller gave up");
    // Recorded long before the handler's 5 s: the span ended with the dropped handler.
    let span = server_span(trace).await;
    assert_eq!(span.attribute("http.response.status_code"), Some("499"));
    assert!(span.error);
    assert!(span.end.duration_since(span.start).unwrap() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_string_carrier_takes_the_trace_across_a_queue() {
    let spans = recorder::global();
    // Producer side: the current span's context into the record's headers.
    let produce = tracing::info_span!("test.Produce");
    let mut headers: Vec<(String, String)> = Vec::new();
    produce.in_scope(|| propagation::inject_with(|k, v| headers.push((k.to_string(), v))));
    let sent = headers
        .iter()
        .find(|(k, _)| k == TRACEPARENT)
        .map(|(_, v)| v.clone())
        .expect("a traceparent header");
    let trace = propagation::trace_id_of(&sent).unwrap().to_string();
    drop(produce);

    // Consumer side, later, elsewhere: the processing span continues that trace.
    let consume = tracing::info_span!("test.Consume");
    propagation::set_parent_with(&consume, |k| {
        headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.clone())
    });
    drop(consume);

    let recorded = spans
        .wait_for(&trace, |t| t.len() == 2, Duration::from_secs(5))
        .await;
    let produce = recorded.iter().find(|s| s.name == "test.Produce").unwrap();
    let consume = recorded.iter().find(|s| s.name == "test.Consume").unwrap();
    assert_eq!(consume.trace_id, produce.trace_id);
    assert_eq!(
        consume.parent_span_id.as_deref(),
        Some(produce.span_id.as_str())
    );
    // And it is the header value the consumer read that said so.
    assert!(sent.contains(&produce.span_id));
}

#[tokio::test]
async fn headers_for_carries_the_span_as_traceparent() {
    recorder::global();
    let span = tracing::info_span!("test.Outgoing");
    let headers = propagation::headers_for(&span);
    let value = headers
        .get(TRACEPARENT)
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    drop(span);
    let trace = propagation::trace_id_of(&value).unwrap();
    let recorded = recorder::global()
        .wait_for(trace, |t| !t.is_empty(), Duration::from_secs(5))
        .await;
    assert_eq!(recorded.len(), 1);
    assert!(
        value.ends_with(&format!("{}-01", recorded[0].span_id)),
        "{value}"
    );
}

/// A client with a timeout (`.clippy.toml`): a server that never answers fails the test instead
/// of hanging it. 30 s: far above any answer here.
fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("a reqwest client")
}
