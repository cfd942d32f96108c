#!/usr/bin/env python3
"""broker-growth.md, the report of scripts/broker-growth.sh (issue 29), in two steps:

    python3 scripts/lib/broker_growth.py sample INTERVAL SECONDS > OUT/samples.jsonl
    python3 scripts/lib/broker_growth.py extract OUT RATE BROKER > OUT/broker-growth.json
    python3 scripts/lib/broker_growth.py render OUT/broker-growth.json > OUT/broker-growth.md

`sample` reads /proc every INTERVAL seconds for SECONDS: the cores (utime + stime) and resident
memory of each process group below, and the machine's busy cores (/proc/stat). `extract` keeps the
samples and the load's counts (OUT/load.json, `labctl load --out`); `render` prints the report
from that file alone: per interval the broker's cores and memory beside the rest of the lab, and
how fast the broker's share grew.
"""
import json
import os
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
SERVICES = ("edge-gateway", "orchestrator", "entity-service", "enrichment")
GROUPS = ("broker", "postgres", "lab services", "labctl", "everything else")


def group_of(comm, cmdline):
    argv = cmdline.split()
    if len(argv) >= 2 and os.path.basename(argv[0]) == "tansu" and argv[1] == "broker":
        return "broker"
    if comm.startswith("postgres"):
        return "postgres"
    if comm in SERVICES:
        return "lab services"
    if comm == "labctl":
        return "labctl"
    return "everything else"


def snapshot():
    """Per process, keyed by (pid, start time) so a reused pid is a new process: its group,
    CPU ticks so far and resident bytes; and the machine's busy ticks."""
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmdline = open(f"/proc/{pid}/cmdline").read().replace("\0", " ").strip()
        except OSError:
            continue  # gone in between
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        procs[(pid, fields[19])] = (group_of(comm, cmdline), int(fields[11]) + int(fields[12]),
                                    int(fields[21]) * PAGE)
    cpu = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return procs, sum(cpu) - cpu[3] - cpu[4], time.monotonic()


def sample(interval, seconds):
    interval, seconds = float(interval), float(seconds)
    t0 = time.monotonic()
    prev = snapshot()
    while time.monotonic() - t0 < seconds:
        time.sleep(interval)
        cur = snapshot()
        elapsed = cur[2] - prev[2]
        # Each process's ticks since the last snapshot (all of them for one started since); a
        # process that exited in between is missed for its last interval, never subtracted.
        ticks, rss, procs = (dict.fromkeys(GROUPS, 0) for _ in range(3))
        for key, (g, t, r) in cur[0].items():
            ticks[g] += t - prev[0].get(key, (g, 0, 0))[1]
            rss[g] += r
            procs[g] += 1
        print(json.dumps({
            "t": round(cur[2] - t0),
            "cores": {g: round(ticks[g] / HZ / elapsed, 3) for g in GROUPS},
            "rss_mb": {g: round(rss[g] / 1e6, 1) for g in GROUPS},
            "busy_cores": round((cur[1] - prev[1]) / HZ / elapsed, 3),
            # How many processes each group had: a group with none was not measured (0 cores
            # there would be a broker that was not running, not one that cost nothing).
            "procs": procs,
        }), flush=True)
        prev = cur


def extract(out, rate, broker):
    samples = [json.loads(line) for line in open(f"{out}/samples.jsonl") if line.strip()]
    load = json.load(open(f"{out}/load.json"))
    summary = load.get("summary", load)
    json.dump({
        "rate_rps": float(rate), "broker": broker,
        "run": os.path.basename(os.path.abspath(out)),
        # The run's extra `labctl up` flags (BG_UP_ARGS): what it changed from the defaults.
        "up_args": os.environ.get("BG_UP_ARGS", ""),
        "load": {k: summary[k] for k in ("sent", "by_status") if k in summary},
        "samples": samples,
    }, sys.stdout, indent=1, sort_keys=True)
    print()


def slope_per_minute(points):
    """Least-squares slope of (t seconds, y) in y per minute; None with fewer than two points."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 60 * sum((t - mt) * (y - my) for t, y in points) / var if var else None


def render(path):
    d = json.load(open(path))
    s = d["samples"]
    minutes = s[-1]["t"] / 60 if s else 0
    print(f"# The native broker under a steady load: {d['rate_rps']:.0f} rps for {minutes:.0f} min\n")
    print(f"Rendered by `scripts/lib/broker_growth.py render` from `{os.path.basename(path)}` "
          f"(written by `scripts/broker-growth.sh`, run `{d.get('run')}`); every number below is "
          f"that run's. Broker: {d['broker']}, fresh (empty) at the start; the lab in resilient "
          f"mode with its enrichment workers; open-loop load at a constant rate. Cores from "
          f"/proc (utime + stime) per interval. "
          f"`labctl up` flags beyond the defaults: {('`' + d['up_args'] + '`') if d.get('up_args') else 'none'}.\n")
    print("| t (s) | broker cores | broker RSS MB | PostgreSQL cores | lab services cores | labctl cores (load generator, supervisor) | machine busy cores |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    def seen(x, g):
        # Samples from before `procs` was recorded had every group running (the report says so).
        return x.get("procs", {}).get(g, 1) > 0

    def cell(x, g, fmt):
        return format(x["cores"][g], fmt) if seen(x, g) else "not measured"

    for x in s:
        r = x["rss_mb"]
        broker_rss = f"{r['broker']:.0f}" if seen(x, "broker") else "not measured"
        print(f"| {x['t']} | {cell(x, 'broker', '.2f')} | {broker_rss} | {cell(x, 'postgres', '.2f')} | "
              f"{cell(x, 'lab services', '.2f')} | {cell(x, 'labctl', '.2f')} | {x['busy_cores']:.2f} |")
    print(f"\nLoad: {d['load'].get('sent')} sent, by status {d['load'].get('by_status')}.\n")
    missing = [x["t"] for x in s if not (seen(x, "broker") and seen(x, "lab services"))]
    if missing:
        print(f"- Not measured: no broker or no lab service running at t = {missing} s, so no "
              f"growth is read from this run.")
    elif len(s) >= 2:
        b = slope_per_minute([(x["t"], x["cores"]["broker"]) for x in s])
        m = slope_per_minute([(x["t"], x["rss_mb"]["broker"]) for x in s])
        rest = slope_per_minute([(x["t"], x["cores"]["lab services"]) for x in s])
        print(f"- The broker: {s[0]['cores']['broker']:.2f} cores in the first interval, "
              f"{s[-1]['cores']['broker']:.2f} in the last; least-squares slope "
              f"{b:+.3f} cores and {m:+.0f} MB per minute at a constant rate.")
        print(f"- The lab's services over the same run: {s[0]['cores']['lab services']:.2f} → "
              f"{s[-1]['cores']['lab services']:.2f} cores (slope {rest:+.3f} per minute).")


if __name__ == "__main__":
    cmd, args = sys.argv[1:2], sys.argv[2:]
    if cmd == ["sample"] and len(args) == 2:
        sample(*args)
    elif cmd == ["extract"] and len(args) == 3:
        extract(*args)
    elif cmd == ["render"] and len(args) == 1:
        render(*args)
    else:
        sys.exit(__doc__)
