#!/usr/bin/env python3
"""flood.md, the report of scripts/flood-check.sh (issues 17 and 28, floods of unknown API keys).

Called by scripts/flood-check.sh after its three runs (baseline, guarded, unguarded) as
    python3 scripts/lib/flood_report.py OUT TENANT_RATE FLOOD_RATE DURATION > OUT/flood.md
It reads, per run NAME, OUT/NAME-tenants.json and OUT/NAME-flood.json (`labctl load --out`: the
real tenants' generator and the flood's; baseline has no flood) and OUT/NAME-before.prom /
OUT/NAME-after.prom (the gateway's /metrics before and after the run), and prints the report's
Markdown: each run's real-tenant goodput, overall and for each tenant's first request, p50/p99,
the rate the flood was really sent at and what it got back, and the gateway's auth decisions
(gateway_auth_total by result) and CPU seconds.
"""
import json
import os
import re
import sys

RUNS = [("baseline", "guard on, no flood"), ("guarded", "guard on (the fix)"),
        ("unguarded", "guard off (LAB-BUG)")]


def prom(path):
    m = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
    return m


def delta(name, a, b, label=None):
    tot = {}
    for k, v in b.items():
        if not k.startswith(name):
            continue
        lab = re.search(rf'{label}="([^"]*)"', k).group(1) if label else ""
        tot[lab] = tot.get(lab, 0) + v - a.get(k, 0)
    return tot


def statuses(by_status):
    return ", ".join(f"{s}: {n}" for s, n in sorted(by_status.items())) or "-"


def pct(n, d):
    return f"{100 * n / d:.2f}%" if d else "not measured"


def main(out, tenant_rate, flood_rate, duration):
    rows, first_rows, auth_rows = [], [], []
    for name, what in RUNS:
        t = json.load(open(f"{out}/{name}-tenants.json"))
        flood_path = f"{out}/{name}-flood.json"
        f = json.load(open(flood_path)) if os.path.exists(flood_path) else None
        a, b = prom(f"{out}/{name}-before.prom"), prom(f"{out}/{name}-after.prom")
        auth = delta("gateway_auth_total", a, b, "result")
        cpu = sum(delta("process_cpu_seconds_total", a, b).values())
        good = sum(s["good"] for s in t["per_second"])
        sent = t["sent"]
        flood_cols = (f"{f['sent']} | {f['achieved_rps']:.0f} | {f['client_overload']} | "
                      f"{f['all_latency_ms']['p99']:.0f} | {statuses(f['by_status'])}"
                      if f else "0 | - | - | - | -")
        rows.append(f"| {name} | {what} | {flood_cols} | {sent} | {pct(good, sent)} | "
                    f"{t['ok_latency_ms']['p50']:.0f} | {t['ok_latency_ms']['p99']:.0f} | {cpu:.1f} |")
        firsts = sum(t["first_by_status"].values())
        first_rows.append(f"| {name} | {firsts} | {pct(t['first_good'], firsts)} | "
                          f"{statuses(t['first_by_status'])} |")
        preloaded = int(b.get("gateway_auth_keys_preloaded", 0))
        auth_rows.append(f"| {name} | {preloaded} | " + " | ".join(str(int(auth.get(r, 0))) for r in
                         ["ok", "stale", "refused", "busy", "unavailable", "malformed"]) + " |")

    print(f"""# Real tenants through a flood of unknown API keys

`scripts/flood-check.sh`: {flood_rate} rps of well-formed, never-seen key ids
(`rsl_<random>_<random>`, `labctl load --keys unknown`) for {duration} s and, inside it (from 5 s
in to 5 s before its end), {tenant_rate} rps of real tenants' documents (`labctl load --tenants
uniform --docs corpus`), both open loop, each run on a fresh native lab (release build, `--small`
seed: 200 tenants; 1 gateway with its 4 key-store connections, that has seen no tenant before the
run). Goodput: 200 within the 3 s budget, per real request sent. Every number below is measured by
that run; "flood rps" is the rate the generator really sent at, and "generator overload" the
arrivals it could not send (its in-flight cap).

| run | key store | flood sent | flood rps | generator overload | flood p99 ms | what the flood got | tenant requests | tenant goodput | tenant p50 ms | tenant p99 ms | gateway CPU s |
|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|
""" + "\n".join(rows) + """

Each tenant's first request to the fresh gateway (the generator tells them by send order):

| run | tenants' first requests | answered 200 within 3 s | answers |
|---|---:|---:|---|
""" + "\n".join(first_rows) + """

The gateway's keys read at start (`gateway_auth_keys_preloaded`, after the run) and its
authentication decisions during each run (`gateway_auth_total` by result):

| run | keys preloaded | ok | stale | refused | busy | unavailable | malformed |
|---|---:|---:|---:|---:|---:|---:|---:|
""" + "\n".join(auth_rows) + """

`refused`: looked up and not a key (401); `busy`: a never-seen id refused after waiting 200 ms for
one of the 2 lookups such ids may make at once (503); `stale`: a request whose key was accepted
from the gateway's cached answer because the last re-verification of that key failed or took over
200 ms (counted per request, not per re-verification).
""")


if __name__ == "__main__":
    main(*sys.argv[1:5])
