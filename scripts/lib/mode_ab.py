"""Same-time A/B of the two clients at one rate, on one native lab (issue 27, "no harm").

    python3 scripts/lib/mode_ab.py [RATE] [SECONDS]     # defaults 1051 rps, 90 s per run

A fresh `labctl up --kafka ""`, a 30 s resilient warm-up, then open-loop runs of SECONDS at
RATE (`labctl load`), client.mode resilient, legacy, resilient, legacy (MODE_AB_SEQ, comma-
separated, to change the order or the count), flipped on the running lab (so both modes meet the
same warm caches, the same database and the same hour). Each run prints one JSON line: its
answers by status, its latency, its episodes (seconds in which fewer than 90% of the requests
sent got a 200 within the 3 s budget), the machine's CPU from /proc/stat (busy and stolen by the
hypervisor, as fractions of all CPUs, mean and worst second: a neighbour's burst on a shared host
shows as steal), and the CPU each process group used
(cores, from /proc/<pid>/stat utime + stime of every process on the machine, PostgreSQL's
backends summed as "postgres"; the load generator itself exits before the second sample and is
not counted, nor is any process that exited during the run). Stops the lab at the end. Bounded: 127.0.0.1 only, about
30 + runs x (SECONDS + 5) s. labctl: LABCTL, else CARGO_TARGET_DIR (default target)/release/labctl;
run from the repository root (labctl reads .lab/data/api-keys.json).
"""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

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


def machine():
    """(busy, steal, total) jiffies of all CPUs so far, from /proc/stat's first line."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + f[4]  # idle + iowait
    steal = f[7] if len(f) > 7 else 0
    total = sum(f[:8])
    return total - idle - steal, steal, total


class Sampler(threading.Thread):
    """The machine's busy and stolen fractions, once a second, until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stop = [], threading.Event()

    def run(self):
        prev = machine()
        while not self.stop.wait(1.0):
            cur = machine()
            dt = cur[2] - prev[2] or 1
            self.samples.append(((cur[0] - prev[0]) / dt, (cur[1] - prev[1]) / dt))
            prev = cur

    def summary(self):
        s = self.samples or [(0.0, 0.0)]
        return {"busy_mean": round(sum(b for b, _ in s) / len(s), 3),
                "busy_max": round(max(b for b, _ in s), 3),
                "steal_mean": round(sum(x for _, x in s) / len(s), 4),
                "steal_max": round(max(x for _, x in s), 4)}


# entity-service's admin listeners in `labctl up`'s default shape: ports 8201.. + 1000.
ENTITY_ADMINS = [f"http://127.0.0.1:{9201 + i}/metrics" for i in range(2)]


def entity_counts():
    """Summed over entity-service replicas: resolves answered, and `SET statement_timeout` sent
    ahead of a lookup by what it set (a build without the counter reads none)."""
    c = {"resolves": 0.0}
    for url in ENTITY_ADMINS:
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("entity_service_requests_total{"):
                c["resolves"] += float(line.rsplit(" ", 1)[1])
            elif line.startswith("entity_service_session_timeout_sets_total{"):
                to = line.split('to="', 1)[1].split('"', 1)[0]
                c[f"sets_{to}"] = c.get(f"sets_{to}", 0.0) + float(line.rsplit(" ", 1)[1])
    return c


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def load(mode, secs, tag):
    r = run([L, "flags", "set", "client.mode", mode])
    assert r.returncode == 0, r.stderr
    time.sleep(5)
    a, t0, ea = groups(), time.time(), entity_counts()
    sampler = Sampler()
    sampler.start()
    out = f"{OUT}/mode-ab-{tag}.json"
    r = run([L, "load", "--rate", RATE, "--duration", str(secs), "--out", out])
    assert r.returncode == 0, r.stdout + r.stderr
    b, t1, eb = groups(), time.time(), entity_counts()
    sampler.stop.set()
    sampler.join()
    d = json.load(open(out))
    bad = [s["second"] for s in d.get("per_second", []) if s["sent"] and s["good"] < 0.9 * s["sent"]]
    cpu = {k: (b.get(k, 0) - a.get(k, 0)) / (t1 - t0) for k in b}
    top = {k: round(v, 3) for k, v in sorted(cpu.items(), key=lambda x: -x[1]) if v > 0.01}
    print(json.dumps({"run": tag, "mode": mode, "by_status": d["by_status"],
                      "ok_latency_ms": d.get("ok_latency_ms"),
                      "episode_seconds": len(bad), "first_episode_second": bad[0] if bad else None,
                      "machine": sampler.summary(),
                      "entity": {k: eb[k] - ea.get(k, 0) for k in eb}, "cores": top,
                      "cores_total": round(sum(v for v in cpu.values() if v > 0), 3)}), flush=True)


os.makedirs(OUT, exist_ok=True)
run([L, "down"])
r = run([L, "up", "--kafka", ""])
assert r.returncode == 0, r.stdout + r.stderr
load("resilient", 30, "warmup")
SEQ = os.environ.get("MODE_AB_SEQ", "resilient,legacy,resilient,legacy").split(",")
for m in SEQ:
    assert m in ("resilient", "legacy"), f"MODE_AB_SEQ: {m!r} is neither resilient nor legacy"
for i, m in enumerate(SEQ):
    load(m, SECS, f"{i}-{m}")
run([L, "down"])
