//! A TCP proxy to a real server (Redis, in the rate limiter's tests) that a test can cut and
//! restore: the real server's behaviour, with its reachability on cue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Cut (`up` false): connections it forwards are closed within 20 ms and new ones are dropped at
/// once (a connection refused, in effect). Restored (`up` true): new connections are forwarded.
/// Slowed ([`CuttableProxy::set_delay`]): each read of the server's answers is held that long
/// before it is forwarded, in order (answers queued behind it wait for it too) — the server did
/// the work, the client may have given up on it (a Redis on a starved machine). When the client
/// closes, answers still held are dropped.
pub struct CuttableProxy {
    /// The proxy's URL, with the target's scheme (`redis://127.0.0.1:<port>`).
    pub url: String,
    pub up: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
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
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (flag, delay) = (up.clone(), delay_ms.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !flag.load(Ordering::SeqCst) {
                    continue; // dropped at once: the connection is refused in effect
                }
                let target = target.clone();
                let (flag, delay) = (flag.clone(), delay.clone());
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let (mut in_read, mut in_write) = inbound.split();
                    let (mut out_read, mut out_write) = tokio::io::split(outbound);
                    let requests = tokio::io::copy(&mut in_read, &mut out_write);
                    let answers = async {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 16 << 10];
                        loop {
                            let n = match out_read.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            let ms = delay.load(Ordering::SeqCst);
                            if ms > 0 {
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                            }
                            if in_write.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let copy = async {
                        tokio::select! { _ = requests => {}, _ = answers => {} }
                    };
                    let cut = async {
                        while flag.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    };
                    tokio::select! { _ = copy => {}, _ = cut => {} }
                });
            }
        });
        Self { url, up, delay_ms }
    }

    /// Every answer from now on reaches the client `delay` later (zero: at once).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Cut (`false`) or restore (`true`).
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }
}
