//! A stand-in Redis on loopback that answers each command from a function of its name, and
//! counts the connections it accepted: for the properties a real Redis cannot show (how many
//! connections a client opened, what a Redis without the lab's function answers), never for
//! Redis's own semantics (tests of those use the real one, [`crate::redis_url`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the fake does with one command.
pub enum Reply {
    /// These bytes, as they are (a RESP value: `+OK\r\n`, `*0\r\n`, `-ERR ...\r\n`).
    Raw(&'static [u8]),
    /// These bytes after this long (a Redis on a machine starved by a storm); the connection's
    /// later commands wait behind it, as Redis answers in order.
    Late(std::time::Duration, &'static [u8]),
    /// Close the connection without answering (a server restarted, a proxy that dropped it).
    Close,
}

/// Start the fake: `answer(command name, n)` decides each reply, `n` counting the commands of
/// that name this fake has received so far, over every connection (1 for the first). Returns its
/// `redis://` URL and the number of connections accepted.
pub async fn fake_redis(
    answer: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the fake Redis");
    let url = format!("redis://{}", listener.local_addr().expect("its address"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let answer = Arc::new(answer);
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        String,
        usize,
    >::new()));
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (answer, seen) = (answer.clone(), seen.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = conn.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some((name, used)) = resp_command(&buf) {
                        buf.drain(..used);
                        let n = {
                            let mut seen = seen.lock().expect("fake Redis counts");
                            let c = seen.entry(name.to_ascii_uppercase()).or_default();
                            *c += 1;
                            *c
                        };
                        match answer(&name, n) {
                            Reply::Raw(bytes) => {
                                if conn.write_all(bytes).await.is_err() {
                                    return;
                                }
                            }
                            Reply::Late(after, bytes) => {
                                tokio::time::sleep(after).await;
                                if conn.write_all(bytes).await.is_err() {
                                    return;
                                }
                            }
                            Reply::Close => return,
                        }
                    }
                }
            });
        }
    });
    (url, accepted)
}

/// The first word of the RESP command at the start of `buf`, and its length in bytes; `None`
/// while it is incomplete.
pub fn resp_command(buf: &[u8]) -> Option<(String, usize)> {
    let line = |at: usize| -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at..end], end + 2))
    };
    let (head, mut at) = line(0)?;
    let n: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    let mut name = String::new();
    for i in 0..n {
        let (len, next) = line(at)?;
        let len: usize = std::str::from_utf8(len.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        if buf.len() < next + len + 2 {
            return None;
        }
        if i == 0 {
            name = String::from_utf8_lossy(&buf[next..next + len]).into_owned();
        }
        at = next + len + 2;
    }
    Some((name, at))
}
