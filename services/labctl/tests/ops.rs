//! The native lab's operations against a real supervisor (`labctl supervise`), with stand-in
//! replicas: a rolling restart replaces every process one at a time, a scale-up adds replicas to
//! the endpoints file the gateway follows (and a scale-down takes them out), and a memory limit
//! is the kernel's: a replica that exceeds it is OOM-killed, reported as such, and restarted.
//!
//! The replicas are a few lines of Python (an HTTP server answering `/readyz`, and `/hog`, which
//! allocates 512 MB): the supervisor and labctl are what is under test, not the services.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FAKE: &str = r#"#!/usr/bin/env python3
import os, http.server
import threading
port = int(os.environ["LAB_HTTP__PORT"])
admin = int(os.environ["LAB_ADMIN__PORT"])
hog = []
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/hog":
            for _ in range(64):
                hog.append(bytearray(8 << 20))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
# Both listeners, as the real services have: the supervisor probes /readyz on the admin one.
threading.Thread(target=http.server.HTTPServer(("127.0.0.1", admin), H).serve_forever, daemon=True).start()
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

fn labctl(state: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_labctl"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .expect("labctl runs")
}

/// `labctl status --json` (Null until the supervisor has written its first state).
fn status(state: &Path) -> serde_json::Value {
    let out = labctl(state, &["status", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

fn replica<'a>(s: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    s["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {s}"))
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        #[allow(clippy::disallowed_methods)] // a plain test thread polling a subprocess
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The ports of one test's lab: a block of 128 (its replicas from `http`, the trace receiver's
/// at `http + 100`, the replicas' admin ports 1000 above theirs, as `labctl scale` places them),
/// outside the kernel's ephemeral range. A port that bind(0) hands out and the test releases is
/// in that range, and any outbound connection (another test's probe, labctl's) may take it as
/// its local port before the replica binds it: the replica then crash-loops while a foreign
/// process answers on its port. One block per lab, so `labctl scale`'s upward search for free
/// ports stays inside its own test's; from a random start per test process, so that two test
/// processes seldom meet; every port the lab starts with checked free.
fn port_block() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    use std::sync::OnceLock;
    const BLOCK: u16 = 128;
    // Blocks' ports in [base, base + 896), their admin ports in [base + 1000, base + 1896).
    const BLOCKS: u16 = 7;
    static BASE: OnceLock<u16> = OnceLock::new();
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = *BASE.get_or_init(|| {
        let range: Vec<u16> = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .map(|s| {
                s.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let (low, high) = match range[..] {
            [low, high] => (low, high),
            _ => (32768, 60999),
        };
        // Up to 8,000 below the range and above the privileged ports; or, where the range
        // starts too low for that, above it.
        let (from, to) = if low >= 1024 + 2000 {
            (low.saturating_sub(8000).max(1024), low - 2000)
        } else {
            (high.saturating_add(1), u16::MAX - 2000)
        };
        assert!(
            from < to,
            "no room for test ports outside the ephemeral range {low}-{high}"
        );
        from + rand::random::<u16>() % (to - from)
    });
    loop {
        let k = NEXT.fetch_add(1, Ordering::SeqCst);
        assert!(k < BLOCKS, "more labs in one test process than port blocks");
        let b = base + k * BLOCK;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if [b, b + 1, b + 100, b + 101, b + 1000, b + 1001]
            .into_iter()
            .all(free)
        {
            return b;
        }
    }
}

/// The supervisor's log and each replica's, for a failed assertion to show what happened.
fn logs(state: &Path) -> String {
    let mut out = String::new();
    if let Ok(dir) = std::fs::read_dir(state.join("logs")) {
        for e in dir.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            out.push_str(&format!("--- {}\n", e.path().display()));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

struct Supervisor(Child);

impl Drop for Supervisor {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

fn setup() -> (PathBuf, Supervisor) {
    let root = std::env::temp_dir().join(format!("labctl-ops-{:016x}", rand::random::<u64>()));
    let (bin, state) = (root.join("bin"), root.join("state"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(state.join("run")).unwrap();
    std::fs::create_dir_all(state.join("logs")).unwrap();
    let exe = bin.join("orchestrator");
    std::fs::write(&exe, FAKE).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A unique name per test run, so parallel runs never share a memory cgroup.
    let tag = format!("{:08x}", rand::random::<u32>());
    let ports = port_block();
    let procs: Vec<serde_json::Value> = (1..=2)
        .map(|i| {
            let port = ports + i - 1;
            let admin = port + 1000;
            serde_json::json!({
                "name": format!("orchestrator-t{tag}-{i}"), "binary": "orchestrator", "port": port,
                "admin_port": admin,
                "env": {"LAB_HTTP__PORT": port.to_string(), "LAB_ADMIN__PORT": admin.to_string()},
            })
        })
        .collect();
    let plan = serde_json::json!({
        "bin_dir": bin, "state_dir": state, "procs": procs,
        "traces": {"otlp_port": ports + 100, "api_port": ports + 101, "capacity": 100},
    });
    let plan_path = state.join("run").join("plan.json");
    std::fs::write(&plan_path, serde_json::to_vec(&plan).unwrap()).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_labctl"))
        .arg("supervise")
        .arg("--plan")
        .arg(&plan_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sup = Supervisor(child);
    eventually("two ready replicas", || {
        let s = status(&state);
        s["replicas"]
            .as_array()
            .is_some_and(|r| r.len() == 2 && r.iter().all(|x| x["ready"] == true))
    });
    // Ready on its port, and the supervisor's own process: a replica that crashed (its port
    // taken) would look ready through whatever holds the port.
    let s = status(&state);
    for r in s["replicas"].as_array().unwrap() {
        assert_eq!(r["restarts"], 0, "{r}\n{}", logs(&state));
    }
    (state, sup)
}

fn names(state: &Path) -> Vec<String> {
    status(state)["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

fn endpoints(state: &Path) -> Vec<String> {
    std::fs::read_to_string(state.join("run").join("endpoints-orchestrator"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn rollout_restart_replaces_every_replica_one_at_a_time() {
    let (state, _sup) = setup();
    let before = status(&state);
    let out = labctl(&state, &["rollout", "restart", "orchestrator"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = status(&state);
    for name in names(&state) {
        let (b, a) = (replica(&before, &name), replica(&after, &name));
        let why = logs(&state);
        assert_ne!(b["pid"], a["pid"], "{name} runs a new process\n{why}");
        assert_eq!(a["rollouts"], 1, "{name}: one deliberate restart\n{why}");
        assert_eq!(a["restarts"], 0, "{name}: not counted as a crash\n{why}");
        assert_eq!(a["ready"], true);
    }
}

#[test]
fn scale_adds_ready_replicas_to_the_endpoints_and_takes_them_out_again() {
    let (state, _sup) = setup();
    assert_eq!(endpoints(&state).len(), 2);
    let out = labctl(&state, &["scale", "orchestrator", "--replicas", "4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = status(&state);
    assert_eq!(s["replicas"].as_array().unwrap().len(), 4);
    assert!(s["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["ready"] == true));
    assert_eq!(endpoints(&state).len(), 4, "the gateway's endpoints follow");
    let out = labctl(&state, &["scale", "orchestrator", "--replicas", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("two replicas left", || names(&state).len() == 2);
    assert_eq!(endpoints(&state).len(), 2);
}

#[test]
fn a_replica_over_its_memory_limit_is_oom_killed_reported_and_restarted() {
    let (state, _sup) = setup();
    let out = labctl(&state, &["limits", "memory", "orchestrator", "64M"]);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no writable memory cgroup"),
            "the only acceptable refusal is a machine without memory cgroups: {err}"
        );
        // CI's machine has one (it runs as root on a cgroup v2 host): there a skip would hide
        // the only test of the OOM kill, so it fails instead (issue 24). A user's laptop
        // without one skips, and says so.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to test the OOM kill, but: {err}"
        );
        eprintln!("SKIPPED: this machine has no writable memory cgroup ({err})");
        return;
    }
    let name = names(&state)[0].clone();
    let s = status(&state);
    let r = replica(&s, &name);
    assert_eq!(r["memory_limit_bytes"], 64 << 20);
    let pid = r["pid"].clone();
    let port = r["url"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    // 512 MB into a 64 MB limit: the kernel kills it mid-request.
    let _ = Command::new("python3")
        .args([
            "-c",
            &format!("import urllib.request as u\ntry: u.urlopen('http://127.0.0.1:{port}/hog', timeout=20)\nexcept Exception: pass"),
        ])
        .status();
    eventually("an OOM kill reported and the replica restarted", || {
        let s = status(&state);
        let r = replica(&s, &name);
        r["oom_kills"] == 1 && r["pid"] != pid && r["ready"] == true
    });
    let s = status(&state);
    let r = replica(&s, &name);
    assert!(
        r["last_exit"].as_str().unwrap().starts_with("OOMKilled"),
        "{r}"
    );
    assert_eq!(r["restarts"], 1, "an OOM kill is a crash restart");
    assert_eq!(
        r["memory_limit_bytes"],
        64 << 20,
        "the new process is under the same limit"
    );
}

/// One export, as an OTLP exporter sends it: the postmortem's cover in three spans (the gateway
/// ends at 3.0 s, `entity.Resolve` under the orchestrator's handler runs to 9.8 s).
async fn export_cover(otlp: &str, trace_id: [u8; 16]) {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    let t0: u64 = 1_700_000_000_000_000_000;
    let span = |id: u8, parent: Option<u8>, name: &str, from_ms: u64, to_ms: u64| Span {
        trace_id: trace_id.to_vec(),
        span_id: vec![id; 8],
        parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
        name: name.into(),
        start_time_unix_nano: t0 + from_ms * 1_000_000,
        end_time_unix_nano: t0 + to_ms * 1_000_000,
        ..Default::default()
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![
                    span(1, None, "edge-gateway.HandleExtract", 0, 3000),
                    span(2, Some(1), "orchestrator.Extract", 5, 3005),
                    span(3, Some(2), "entity.Resolve", 10, 9800),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let mut client = TraceServiceClient::connect(otlp.to_string()).await.unwrap();
    client.export(request).await.unwrap();
}

#[test]
fn the_supervisor_runs_a_trace_receiver_and_labctl_trace_draws_what_it_received() {
    let (state, _sup) = setup();
    let lab: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("run").join("lab.json")).unwrap())
            .unwrap();
    let api = lab["traces_api"]
        .as_str()
        .expect("the receiver's API in the state");
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("run").join("plan.json")).unwrap())
            .unwrap();
    let otlp = format!("http://127.0.0.1:{}", plan["traces"]["otlp_port"]);

    let empty = labctl(&state, &["trace", "show", "worst"]);
    assert!(!empty.status.success());
    assert!(String::from_utf8_lossy(&empty.stderr).contains("holds no trace yet"));

    let id = [0x5a; 16];
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(export_cover(&otlp, id));
    let list = labctl(&state, &["trace", "list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert!(text.contains(&"5a".repeat(16)), "{text}");
    assert!(
        text.contains("entity.Resolve > orchestrator.Extract +6.8 s"),
        "{text}"
    );
    let show = labctl(&state, &["trace", "show", "worst", "--width", "100"]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.status.success(),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    let resolve = text
        .lines()
        .find(|l| l.trim_start().starts_with("entity.Resolve "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(resolve.contains('▒') && resolve.ends_with('!'), "{text}");
    // The same API named by hand (`--api`, as for a lab labctl did not start), as JSON.
    let json = labctl(&state, &["trace", "--api", api, "list", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(list[0]["trace_id"], "5a".repeat(16), "{list}");
    assert_eq!(list[0]["orphans"], 1, "{list}");
}
