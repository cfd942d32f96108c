//! A private Kafka-protocol broker for tests that must stop one: a tansu process of the test's
//! own on a free loopback port (the shared broker at `KAFKA_BOOTSTRAP` serves every other test
//! and must never be stopped).
//!
//! tansu is what scripts/deps.sh installs (`$LAB_TOOLS_DIR/bin/tansu`, default
//! `~/.cache/retry-storm-lab/tools/bin/tansu`; `LAB_TANSU_BIN` overrides). In-memory storage: the
//! broker lives and dies with the test.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PrivateBroker {
    child: Child,
    pub bootstrap: String,
}

fn tansu_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LAB_TANSU_BIN") {
        return p.into();
    }
    let tools = std::env::var_os("LAB_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/retry-storm-lab/tools")
        });
    tools.join("bin/tansu")
}

impl PrivateBroker {
    /// Start tansu and wait (bounded) until it accepts connections.
    pub fn start() -> PrivateBroker {
        let bin = tansu_bin();
        assert!(
            bin.exists(),
            "no tansu at {} (scripts/deps.sh installs it; LAB_TANSU_BIN overrides)",
            bin.display()
        );
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().unwrap().port()
        };
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(&bin)
            .args([
                "broker",
                "--cluster-id",
                "lab-test",
                "--storage-engine",
                "memory://tansu/",
            ])
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            // Flags win over tansu's env twins, but no stray OTLP endpoint either.
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let broker = PrivateBroker {
            child,
            bootstrap: format!("127.0.0.1:{port}"),
        };
        let t0 = Instant::now();
        while TcpStream::connect(&broker.bootstrap).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "tansu did not listen on {} within 15 s",
                broker.bootstrap
            );
            #[allow(clippy::disallowed_methods)] // a constructor called outside async code
            std::thread::sleep(Duration::from_millis(50));
        }
        broker
    }

    /// SIGSTOP: the broker stops answering (connections stay open, requests hang) — a broker
    /// that is down as far as every client can tell, with its data kept for [`Self::resume`].
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT: back, with every topic and event it had.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.child.id());
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
