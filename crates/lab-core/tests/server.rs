//! The drain after SIGTERM (issue 23): in-flight requests are answered; for the linger the
//! listener still accepts and every answer carries `Connection: close`, so clients retire their
//! keep-alive connections on an answer they read instead of having them closed under a request;
//! then the listener stops accepting. Real sockets, real time: what is checked is what a client
//! on the wire sees.

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use lab_core::health::Health;
use lab_core::metrics::Metrics;
use lab_core::server::{AdminSettings, HttpSettings, Server};

const LINGER_MS: u64 = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_answers_in_flight_then_lingers_with_connection_close_then_stops_accepting() {
    let api = Router::new()
        .route("/fast", get(|| async { "fast" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "slow"
            }),
        );
    let http = HttpSettings {
        host: "127.0.0.1".into(),
        port: 0,
        drain_seconds: 5,
        drain_linger_ms: LINGER_MS,
    };
    let admin = AdminSettings {
        host: "127.0.0.1".into(),
        port: 0,
    };
    let server = Server::bind(&http, &admin, api, Health::new(), Metrics::new())
        .await
        .unwrap();
    let url = format!("http://127.0.0.1:{}", server.port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let client = http_client();

    // Before the drain: keep-alive as usual.
    let before = client.get(format!("{url}/fast")).send().await.unwrap();
    assert!(before.headers().get("connection").is_none());

    let in_flight = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(format!("{url}/slow")).send().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = std::time::Instant::now();
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The linger: a new connection is still accepted, and its answer closes it.
    let fresh = http_client();
    let during = fresh.get(format!("{url}/fast")).send().await.unwrap();
    assert_eq!(during.status(), 200);
    assert_eq!(
        during.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..]),
        "answers during the drain retire their connection"
    );
    // The request in flight at SIGTERM is answered, and closes its connection too.
    let slow = in_flight
        .await
        .unwrap()
        .expect("in-flight request answered");
    assert_eq!(slow.status(), 200);
    assert_eq!(
        slow.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    assert_eq!(slow.text().await.unwrap(), "slow");

    // After the linger the listener is closed: connections are refused.
    running.await.unwrap().unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(LINGER_MS),
        "the server stopped after {:?}, before its {LINGER_MS} ms linger",
        t0.elapsed()
    );
    let after = http_client()
        .get(format!("{url}/fast"))
        .send()
        .await
        .expect_err("refused once the drain is over");
    assert!(after.is_connect(), "{after:?}");
}

#[tokio::test]
async fn bind_refuses_a_linger_as_long_as_the_drain() {
    let http = HttpSettings {
        host: "127.0.0.1".into(),
        port: 0,
        drain_seconds: 1,
        drain_linger_ms: 1000,
    };
    let admin = AdminSettings {
        host: "127.0.0.1".into(),
        port: 0,
    };
    let err = Server::bind(&http, &admin, Router::new(), Health::new(), Metrics::new())
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("drain_linger_ms"), "{err:#}");
}

/// A client with a timeout (`.clippy.toml`): a server that never answers fails the test instead
/// of hanging it. 30 s: far above any answer here.
fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("a reqwest client")
}
