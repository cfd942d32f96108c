//! Fidelity tests: the legacy client must keep reproducing every defect of the postmortem's
//! "Code Before" — if one of these starts failing, the lab has quietly healed itself. Paused
//! clock: 10 s timeouts and 200/400/800 ms sleeps run in virtual time over real loopback sockets.

use std::time::Duration;

use entity_client::metrics::ClientMetrics;
use entity_client::test_support::{ctx, has_series, metric, request, Reply, Stub};
use entity_client_legacy::{CallContext, Client, Error, Options, DEFAULT_TIMEOUT};
use lab_core::metrics::Metrics;
use tokio::time::Instant;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn registered(metrics: &Metrics) -> ClientMetrics {
    ClientMetrics::register(metrics).expect("the entity-client families register once")
}

fn legacy(stub: &Stub) -> (Client, Metrics) {
    let metrics = Metrics::new();
    let c = Client::new(vec![stub.url.clone()], registered(&metrics)).expect("client");
    (c, metrics)
}

#[tokio::test(start_paused = true)]
async fn resolve_keeps_sending_attempts_after_the_caller_is_dropped() {
    // entity-service is failing (503 after 100 ms); the caller gives up after the first request.
    let stub = Stub::start(Reply::status(503).after(MS(100))).await;
    let (client, metrics) = legacy(&stub);
    let (ctx, req) = (ctx(), request());

    let call = client.resolve(&ctx, &req, true);
    tokio::select! {
        _ = call => panic!("the caller leaves before the first answer"),
        _ = stub.wait_for_requests(1) => {}
    }
    // The caller's future is gone. The detached task is not.
    stub.wait_for_requests(3).await;
    // Attempts at 0, 300 (100 + 200), 800 (+100 + 400) ms; the last answer at 900, then the
    // 800 ms sleep: the orphan ends at 1.7 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        stub.requests(),
        3,
        "all 3 attempts for a caller that left after 1"
    );
    assert_eq!(
        metric(&metrics, "entity_abandoned_total", &[]),
        3.0,
        "every attempt completed after its caller had gone"
    );
    assert_eq!(
        metric(
            &metrics,
            "otel_span_orphaned_total",
            &[("span", "entity.Resolve")]
        ),
        1.0,
        "the child span outlived its parent"
    );
    assert_eq!(
        metric(
            &metrics,
            "entity_requests_total",
            &[("outcome", "error_5xx")]
        ),
        3.0
    );
    assert_eq!(
        metric(
            &metrics,
            "entity_requests_total",
            &[("outcome", "cancelled")]
        ),
        0.0,
        "nothing is ever cancelled"
    );
}

#[tokio::test(start_paused = true)]
async fn resolve_by_a_caller_that_waits_orphans_nothing() {
    let stub = Stub::start(Reply::ok()).await;
    let (client, metrics) = legacy(&stub);
    client.resolve(&ctx(), &request(), true).await.expect("ok");
    assert_eq!(metric(&metrics, "otel_span_orphaned_total", &[]), 0.0);
    assert_eq!(metric(&metrics, "entity_abandoned_total", &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn resolve_retries_a_503_three_times_in_lockstep_and_sleeps_after_the_last() {
    let stub = Stub::start(Reply::status(503)).await;
    let (client, metrics) = legacy(&stub);
    let start = Instant::now();
    let err = client.resolve(&ctx(), &request(), true).await.unwrap_err();
    let returned = start.elapsed();

    let at: Vec<Duration> = stub.arrivals().iter().map(|a| a.at - start).collect();
    assert_eq!(
        at,
        vec![MS(0), MS(200), MS(600)],
        "200 then 400 ms, no jitter"
    );
    assert_eq!(
        returned,
        MS(1400),
        "returns only after the 800 ms sleep after the last attempt"
    );
    match &err {
        Error::Exhausted {
            attempts: 3,
            elapsed,
            last,
        } => {
            assert_eq!(*elapsed, MS(1400));
            assert!(matches!(**last, Error::Upstream { status: 503, .. }));
        }
        e => panic!("{e}"),
    }
    assert!(err
        .to_string()
        .starts_with("entity-service: exhausted 3 attempts"));
    assert!(err.to_string().contains("elapsed_ms: 1400"));
    assert_eq!(
        metric(&metrics, "entity_retries_total", &[("class", "status_503")]),
        2.0
    );
}

#[tokio::test(start_paused = true)]
async fn resolve_retries_a_500_too() {
    let stub = Stub::start(Reply::status(500)).await;
    let (client, metrics) = legacy(&stub);
    let err = client.resolve(&ctx(), &request(), true).await.unwrap_err();
    assert!(matches!(err, Error::Exhausted { attempts: 3, .. }), "{err}");
    assert_eq!(stub.requests(), 3, "the bug runs three times");
    assert_eq!(
        metric(&metrics, "entity_retries_total", &[("class", "status_500")]),
        2.0
    );
}

#[tokio::test(start_paused = true)]
async fn resolve_returns_a_4xx_at_once() {
    let stub = Stub::start(Reply::status(404)).await;
    let (client, _m) = legacy(&stub);
    let start = Instant::now();
    let err = client.resolve(&ctx(), &request(), true).await.unwrap_err();
    assert!(matches!(err, Error::Upstream { status: 404, .. }), "{err}");
    assert_eq!(stub.requests(), 1);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn new_inherits_the_ten_second_default_timeout_per_attempt() {
    // entity-service never answers. `Client::new` passed no options: 10 s per attempt.
    let stub = Stub::start(Reply::black_hole()).await;
    let (client, metrics) = legacy(&stub);
    assert_eq!(client.timeout(), DEFAULT_TIMEOUT);
    assert_eq!(DEFAULT_TIMEOUT, Duration::from_secs(10));

    let start = Instant::now();
    let err = client.resolve(&ctx(), &request(), true).await.unwrap_err();
    let at: Vec<Duration> = stub.arrivals().iter().map(|a| a.at - start).collect();
    assert_eq!(at, vec![MS(0), MS(10_200), MS(20_600)]);
    // Each attempt was given up by the client at exactly 10 s — "Nothing in nature is exactly ten
    // seconds. That is a configured value".
    let cut: Vec<Duration> = stub.hangups().iter().map(|h| *h - start).collect();
    assert_eq!(cut, vec![MS(10_000), MS(20_200), MS(30_600)]);
    // ~31 s for one call on a path whose caller gave up after 3 (the postmortem: 30,412 ms).
    assert_eq!(start.elapsed(), MS(31_400));
    assert!(
        matches!(&err, Error::Exhausted { last, .. } if matches!(**last, Error::Timeout { .. })),
        "{err}"
    );
    assert_eq!(
        metric(&metrics, "entity_requests_total", &[("outcome", "timeout")]),
        3.0
    );
}

#[tokio::test(start_paused = true)]
async fn resolve_ignores_the_callers_deadline_and_outlives_it() {
    // entity-service takes 5 s; the caller (the gateway's 3 s budget) stops waiting at 3 s.
    let stub = Stub::start(Reply::ok().after(Duration::from_secs(5))).await;
    let (client, _m) = legacy(&stub);
    let start = Instant::now();
    let ctx = CallContext {
        deadline: Some(start + Duration::from_secs(3)),
        ..ctx()
    };
    client
        .resolve(&ctx, &request(), true)
        .await
        .expect("answers, 2 s after the caller's deadline");
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(
        stub.arrivals()[0].budget_ms,
        None,
        "entity-service is never told how long anyone will wait"
    );
}

#[tokio::test(start_paused = true)]
async fn per_host_cap_queues_callers_beyond_it() {
    let stub = Stub::start(Reply::ok().after(Duration::from_secs(1))).await;
    let metrics = Metrics::new();
    let client = Client::with_options(
        vec![stub.url.clone()],
        Options {
            max_conns_per_host: Some(2),
            ..Options::default()
        },
        registered(&metrics),
    )
    .unwrap();
    let (ctx, req) = (ctx(), request());
    let start = Instant::now();
    let calls = futures::future::join_all((0..5).map(|_| client.resolve(&ctx, &req, true)));
    tokio::pin!(calls);
    tokio::select! {
        _ = &mut calls => panic!("they take 3 s"),
        _ = stub.wait_for_in_flight(2) => {}
    }
    // Let the other three detached tasks reach the slot queue (no time passes).
    for _ in 0..100 {
        if metric(&metrics, "entity_pool_slots", &[("state", "waiting")]) >= 3.0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        metric(&metrics, "entity_pool_slots", &[("state", "waiting")]),
        3.0
    );
    assert_eq!(
        metric(&metrics, "entity_pool_slots", &[("state", "in_use")]),
        2.0
    );

    let results = calls.await;
    assert!(results.iter().all(|r| r.is_ok()));
    assert_eq!(
        stub.max_in_flight(),
        2,
        "never more than the cap on the wire"
    );
    assert_eq!(stub.requests(), 5);
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(3),
        "2 + 2 + 1, one second each"
    );
    assert_eq!(
        metric(&metrics, "entity_pool_slots", &[("state", "waiting")]),
        0.0
    );
    assert_eq!(
        metric(&metrics, "entity_pool_slots", &[("state", "in_use")]),
        0.0
    );
}

#[tokio::test(start_paused = true)]
async fn ready_waits_behind_production_traffic_in_the_same_pool() {
    let stub = Stub::start(Reply::ok()).await;
    stub.then([Reply::ok().after(Duration::from_secs(2))]);
    let metrics = Metrics::new();
    let client = Client::with_options(
        vec![stub.url.clone()],
        Options {
            max_conns_per_host: Some(1),
            ..Options::default()
        },
        registered(&metrics),
    )
    .unwrap();
    let (ctx, req) = (ctx(), request());
    let start = Instant::now();
    let traffic = client.resolve(&ctx, &req, true);
    tokio::pin!(traffic);
    tokio::select! {
        _ = &mut traffic => panic!("takes 2 s"),
        _ = stub.wait_for_in_flight(1) => {}
    }
    // The readiness probe queues for the same slot: a slow dependency makes this pod "not ready".
    let (ready, traffic) = futures::future::join(client.ready(true), traffic).await;
    ready.expect("ready eventually");
    traffic.expect("traffic ok");
    assert_eq!(stub.requests(), 2, "readiness went to entity-service");
    assert_eq!(
        stub.arrivals()[1].at - start,
        Duration::from_secs(2),
        "readiness waited for production traffic's slot"
    );
}

#[tokio::test(start_paused = true)]
async fn resolve_with_retries_disabled_makes_one_attempt_and_still_sleeps() {
    let stub = Stub::start(Reply::status(503)).await;
    let (client, _m) = legacy(&stub);
    let start = Instant::now();
    let err = client.resolve(&ctx(), &request(), false).await.unwrap_err();
    assert!(matches!(err, Error::Exhausted { attempts: 1, .. }), "{err}");
    assert_eq!(stub.requests(), 1);
    assert_eq!(
        start.elapsed(),
        MS(200),
        "time.Sleep(backoff(0)) after the only attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn resolve_forwards_ids_but_never_a_budget() {
    let stub = Stub::start(Reply::status(503)).await;
    let (client, _m) = legacy(&stub);
    let _ = client.resolve(&ctx(), &request(), true).await;
    let arrivals = stub.arrivals();
    assert_eq!(arrivals.len(), 3);
    for a in arrivals {
        assert_eq!(a.request_id.as_deref(), Some("req-1"));
        assert_eq!(a.observe_user_deadline.as_deref(), Some("1749631424882"));
        assert_eq!(a.budget_ms, None);
    }
}

#[tokio::test(start_paused = true)]
async fn both_clients_share_one_registration_in_either_order() {
    let stub = Stub::start(Reply::ok()).await;
    for legacy_first in [true, false] {
        let metrics = Metrics::new();
        let families = registered(&metrics);
        let make_fixed = || {
            entity_client::Client::new(
                entity_client::ClientConfig {
                    base_urls: vec![stub.url.clone()],
                    budget: entity_client::hop_table().entity,
                    retry_budget: Default::default(),
                    breaker: Default::default(),
                    max_concurrency: 8,
                    max_concurrency_adaptive: 8,
                },
                families.clone(),
            )
            .expect("fixed client")
        };
        let (legacy, fixed) = if legacy_first {
            let l = Client::new(vec![stub.url.clone()], families.clone()).expect("legacy client");
            (l, make_fixed())
        } else {
            let f = make_fixed();
            (
                Client::new(vec![stub.url.clone()], families.clone()).expect("legacy client"),
                f,
            )
        };
        legacy.resolve(&ctx(), &request(), true).await.unwrap();
        fixed
            .resolve(&ctx(), &request(), &entity_client::Controls::default())
            .await
            .unwrap();
        assert_eq!(
            metric(&metrics, "entity_requests_total", &[("outcome", "ok")]),
            2.0,
            "the two clients' series add up"
        );
        assert!(has_series(&metrics, "entity_retry_budget_tokens"));
        let text = metrics.render();
        assert_eq!(text.matches("# TYPE entity_requests_total").count(), 1);
    }
}

#[tokio::test]
async fn with_options_refuses_values_that_would_hang() {
    let url = vec!["http://127.0.0.1:1".to_string()];
    for opts in [
        Options {
            max_conns_per_host: Some(0),
            ..Options::default()
        },
        Options {
            max_attempts: Some(0),
            ..Options::default()
        },
        Options {
            timeout: Some(Duration::ZERO),
            ..Options::default()
        },
    ] {
        assert!(Client::with_options(url.clone(), opts, ClientMetrics::unregistered()).is_err());
    }
    assert!(Client::new(vec![], ClientMetrics::unregistered()).is_err());
}

#[test]
fn client_is_shareable_and_its_futures_are_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<Client>();
    let _type_check = |c: &Client, x: &CallContext| {
        let req = request();
        let f = c.resolve(x, &req, true);
        send(&f);
        send(&c.ready(true));
    };
}

#[tokio::test(start_paused = true)]
async fn a_slot_wait_that_outlasts_the_timeout_is_a_slot_timeout_with_nothing_sent() {
    let stub = Stub::start(Reply::ok()).await;
    let metrics = Metrics::new();
    let client = Client::with_options(
        vec![stub.url.clone()],
        Options {
            max_conns_per_host: Some(1),
            ..Options::default()
        },
        registered(&metrics),
    )
    .unwrap();
    let _held = client.hold_slot_for_tests(&stub.url).await;
    let start = Instant::now();
    let err = client.resolve(&ctx(), &request(), true).await.unwrap_err();
    // Faithful to Go: three 10 s waits, each retried like any timeout, with the 200/400/800 ms
    // sleeps — and not one request on the wire.
    assert_eq!(start.elapsed(), Duration::from_millis(31_400));
    assert_eq!(stub.requests(), 0, "nothing was ever sent");
    match &err {
        Error::Exhausted { last, .. } => {
            assert!(matches!(**last, Error::SlotTimeout { .. }), "{err}")
        }
        other => panic!("{other}"),
    }
    assert_eq!(err.failure().code, "slot_timeout");
    assert_eq!(
        metric(
            &metrics,
            "entity_requests_total",
            &[("outcome", "slot_timeout")]
        ),
        3.0,
        "counted as what they were"
    );
    assert_eq!(
        metric(&metrics, "entity_requests_total", &[("outcome", "timeout")]),
        0.0,
        "not as timeouts on the wire"
    );
    assert_eq!(
        metric(
            &metrics,
            "entity_retries_total",
            &[("class", "slot_timeout")]
        ),
        2.0
    );
}

#[tokio::test(start_paused = true)]
async fn ready_is_probe_traffic_and_honours_the_retry_kill_switch() {
    let stub = Stub::start(Reply::status(503)).await;
    let metrics = Metrics::new();
    let client = Client::new(vec![stub.url.clone()], registered(&metrics))
        .unwrap()
        .with_probe_metrics(ClientMetrics::register_probe(&metrics).unwrap());
    client.ready(false).await.unwrap_err();
    assert_eq!(
        stub.requests(),
        1,
        "retries.entity.enabled=off: one attempt"
    );
    client.ready(true).await.unwrap_err();
    assert_eq!(stub.requests(), 4, "on: three");
    // All of it counted as probe traffic, none as a user's.
    assert_eq!(metric(&metrics, "entity_probe_requests_total", &[]), 4.0);
    assert_eq!(metric(&metrics, "entity_probe_retries_total", &[]), 2.0);
    assert_eq!(metric(&metrics, "entity_requests_total", &[]), 0.0);
    assert_eq!(metric(&metrics, "entity_retries_total", &[]), 0.0);
}
