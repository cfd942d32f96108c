//! A TCP proxy to a real server (Redis, in the rate limiter's tests) that a test can cut and
//! restore: the real server's behaviour, with its reachability on cue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Cut (`up` false): connections it forwards are closed within 20 ms and new ones are dropped at
/// once (a connection refused, in effect). Restored (`up` true): new connections are forwarded.
pub struct CuttableProxy {
    /// The proxy's URL, with the target's scheme (`redis://127.0.0.1:<port>`).
    pub url: String,
    pub up: Arc<AtomicBool>,
}

impl CuttableProxy {
    /// Start a proxy to `target` (`redis://host:port` or `host:port`).
    pub async fn start(target: &str) -> Self {
        let (scheme, addr) = match target.split_once("://") {
            Some((scheme, rest)) => (format!("{scheme}://"), rest),
            None => (String::new(), target),
        };
        let target = addr.trim_end_matches('/').to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the proxy");
        let url = format!("{scheme}{}", listener.local_addr().expect("its address"));
        let up = Arc::new(AtomicBool::new(true));
        let flag = up.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !flag.load(Ordering::SeqCst) {
                    continue; // dropped at once: the connection is refused in effect
                }
                let target = target.clone();
                let flag = flag.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                    let cut = async {
                        while flag.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    };
                    tokio::select! { _ = copy => {}, _ = cut => {} }
                });
            }
        });
        Self { url, up }
    }

    /// Cut (`false`) or restore (`true`).
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }
}
