"""Same-time A/B of the two clients at one rate, on one native lab (issue 27, "no harm").

    python3 scripts/lib/mode_ab.py [RATE] [SECONDS]     # defaults 1051 rps, 90 s per run

A fresh `labctl up --kafka ""`, a 30 s resilient warm-up, then four open-loop runs of SECONDS at
RATE (`labctl load`), client.mode resilient, legacy, resilient, legacy, flipped on the running
lab (so both modes meet the same warm caches, the same database and the same hour). Each run
prints one JSON line: its answers by status, its latency, and the CPU each process group used
(cores, from /proc/<pid>/stat utime + stime of every process on the machine, PostgreSQL's
backends summed as "postgres"; the load generator itself exits before the second sample and is
not counted, nor is any process that exited during the run). Stops the lab at the end. Bounded: 127.0.0.1 only, about
30 + 4 x (SECONDS + 5) s. labctl: LABCTL, else CARGO_TARGET_DIR (default target)/release/labctl;
run from the repository root (labctl reads .lab/data/api-keys.json).
"""
import json
import os
import subprocess
import sys
import time

L = os.environ.get("LABCTL") or os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "labctl")
RATE = sys.argv[1] if len(sys.argv) > 1 else "1051"
SECS = int(sys.argv[2]) if len(sys.argv) > 2 else 90
HZ = os.sysconf("SC_CLK_TCK")
OUT = os.environ.get("MODE_AB_OUT", ".lab/reports")


def groups():
    g = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        t = (int(st[11]) + int(st[12])) / HZ
        key = "postgres" if comm.startswith("postgres") else comm
        g[key] = g.get(key, 0) + t
    return g


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def load(mode, secs, tag):
    r = run([L, "flags", "set", "client.mode", mode])
    assert r.returncode == 0, r.stderr
    time.sleep(5)
    a, t0 = groups(), time.time()
    out = f"{OUT}/mode-ab-{tag}.json"
    r = run([L, "load", "--rate", RATE, "--duration", str(secs), "--out", out])
    assert r.returncode == 0, r.stdout + r.stderr
    b, t1 = groups(), time.time()
    d = json.load(open(out))
    cpu = {k: (b.get(k, 0) - a.get(k, 0)) / (t1 - t0) for k in b}
    top = {k: round(v, 3) for k, v in sorted(cpu.items(), key=lambda x: -x[1]) if v > 0.01}
    print(json.dumps({"run": tag, "mode": mode, "by_status": d["by_status"],
                      "ok_latency_ms": d.get("ok_latency_ms"), "cores": top,
                      "cores_total": round(sum(v for v in cpu.values() if v > 0), 3)}), flush=True)


os.makedirs(OUT, exist_ok=True)
run([L, "down"])
r = run([L, "up", "--kafka", ""])
assert r.returncode == 0, r.stdout + r.stderr
load("resilient", 30, "warmup")
for i, m in enumerate(["resilient", "legacy", "resilient", "legacy"]):
    load(m, SECS, f"{i}-{m}")
run([L, "down"])
