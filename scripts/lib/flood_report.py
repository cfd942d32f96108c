#!/usr/bin/env python3
"""flood.md, the report of scripts/flood-check.sh (issue 17, "unauthenticated floods").

Called by scripts/flood-check.sh after its three k6 runs (baseline, guarded, unguarded) as
    python3 scripts/lib/flood_report.py OUT TENANT_RATE FLOOD_RATE DURATION > OUT/flood.md
It reads, per run NAME, OUT/NAME-k6.json (k6's --summary-export) and OUT/NAME-before.prom /
OUT/NAME-after.prom (the gateway's /metrics before and after the run) and prints the report's
Markdown: each run's real-tenant goodput, p50/p99, what the flood got back and the gateway's auth
decisions (gateway_auth_total by result) and CPU seconds.
"""
import json
import re
import sys


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


def main(out, tenant_rate, flood_rate, duration):
    rows, auth_rows = [], []
    for name, what in [("baseline", "guard on, no flood"), ("guarded", "guard on (the fix)"),
                       ("unguarded", "guard off (LAB-BUG)")]:
        k = json.load(open(f"{out}/{name}-k6.json"))["metrics"]

        def c(n, k=k):
            return k.get(n, {}).get("count", 0)

        t = k.get("http_req_duration{name:tenant}", {})
        f = k.get("http_req_duration{name:flood}", {})
        a, b = prom(f"{out}/{name}-before.prom"), prom(f"{out}/{name}-after.prom")
        auth = delta("gateway_auth_total", a, b, "result")
        cpu = sum(delta("process_cpu_seconds_total", a, b).values())
        statuses = ", ".join(f"{s}: {int(c(f'flood_status_{s}'))}" for s in
                             ["200", "401", "429", "503", "504", "0", "other"] if c(f"flood_status_{s}"))
        sent, ok = c("tenant_sent"), c("tenant_ok")
        rows.append(f"| {name} | {what} | {int(c('flood_sent'))} | {int(sent)} | "
                    f"{100 * ok / max(sent, 1):.2f}% | {t.get('p(50)', 0):.0f} | {t.get('p(99)', 0):.0f} | "
                    f"{f.get('p(99)', 0):.0f} | {statuses or '-'} | {cpu:.1f} |")
        auth_rows.append(f"| {name} | " + " | ".join(str(int(auth.get(r, 0))) for r in
                         ["ok", "stale", "refused", "busy", "unavailable", "malformed"]) + " |")

    print(f"""# Real tenants through a flood of unknown API keys

`scripts/flood-check.sh`: {tenant_rate} rps of real tenants' documents and {flood_rate} rps of
well-formed, never-seen key ids (`rsl_<random>_<random>`), both open loop (k6, load/k6/flood.js),
for {duration}, each run on a fresh native lab (release build, `--small` seed, 1 gateway with
its 4 key-store connections, 3 orchestrators, 2 entity-services behind one Service address). Goodput: 200 within the 3 s
budget, per real request sent. Every number below is measured by that run.

| run | key store | flood sent | tenant requests | tenant goodput | tenant p50 ms | tenant p99 ms | flood p99 ms | what the flood got | gateway CPU s |
|---|---|---:|---:|---:|---:|---:|---:|---|---:|
""" + "\n".join(rows) + """

The gateway's authentication decisions during each run (`gateway_auth_total` by result):

| run | ok | stale | refused | busy | unavailable | malformed |
|---|---:|---:|---:|---:|---:|---:|
""" + "\n".join(auth_rows) + """

`refused`: looked up and not a key (401); `busy`: a never-seen id refused after waiting 200 ms for
one of the 2 lookups such ids may make at once (503); `stale`: a real tenant's key verified from
its cached answer because re-verifying it failed or took over 200 ms.
""")


if __name__ == "__main__":
    main(*sys.argv[1:5])
