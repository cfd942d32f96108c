#!/usr/bin/env python3
"""ratelimit-storm.md, the report of scripts/ratelimit-storm.sh (issue 28), in two steps:

    python3 scripts/lib/ratelimit_storm_report.py extract OUT TENANT PLAN_RPS RATE > OUT/ratelimit-storm.json
    python3 scripts/lib/ratelimit_storm_report.py render OUT/ratelimit-storm.json [BEFORE.json] > OUT/ratelimit-storm.md

`extract` reads OUT/tenant.json (`labctl load --out` of the one tenant over its plan),
OUT/replay/summary.json and OUT/replay/legacy/series.jsonl (the legacy replay: its phases, and
every replica's /metrics once a second, tens of MB) and keeps what the report needs: the tenant's
counts, the phases, and the gateway's rate-limit counters per second (small enough to commit).
`render` prints the report from that file alone: the tenant's answers and the rate it was admitted
at (every answer but 429) against its plan; per phase, the gateway's rate-limit decisions
(`allowed`/`limited` by Redis, `local_*` by the replica's own bucket when Redis missed its
deadline) and its 429s.
"""
import json
import sys

DECISIONS = ["allowed", "limited", "local_allowed", "local_limited"]


def extract(out, tenant, plan, rate):
    load = json.load(open(f"{out}/tenant.json"))
    summary = json.load(open(f"{out}/replay/summary.json"))
    mode = next(m for m in summary["modes"] if m["mode"].lower() == "legacy")
    gateway = []  # per scrape: t and, summed over the gateway replicas read, each counter
    for line in open(f"{out}/replay/legacy/series.jsonl"):
        r = json.loads(line)
        reps = {k: v for k, v in r["replicas"].items() if k.startswith("edge-gateway")}
        row = {"t": r["t"], "read": {}}
        for rep, m in reps.items():
            if m is None:
                continue
            c = {d: m.get(f'gateway_ratelimit_decisions_total{{decision="{d}"}}', 0.0) for d in DECISIONS}
            c["429"] = m.get("gateway_rate_limited_total", 0.0)
            row["read"][rep] = c
        gateway.append(row)
    json.dump({
        "tenant": int(tenant), "plan_rps": float(plan), "rate_rps": float(rate),
        "load": {k: load[k] for k in ["sent", "by_status", "duration_s", "achieved_rps"]},
        "replay_load_429": mode.get("load_by_status", {}).get("429", 0),
        "phases": [{"name": p["name"], "start": p["start"],
                    "error_5xx_pct": p["summary"].get("error_5xx_pct")} for p in mode["phases"]],
        "gateway": gateway,
    }, sys.stdout, indent=0)
    print()


def counter_at(gateway, rep, what, t):
    """The replica's counter at its last scrape at or before t (0 before its first)."""
    v = 0.0
    for row in gateway:
        if row["t"] > t:
            break
        if rep in row["read"]:
            v = row["read"][rep][what]
    return v


def per_phase(d):
    """Per phase of the incident: (name, seconds, 5xx %, decisions, share made without Redis,
    limited by Redis, limited by the own bucket, 429/s, the tenant's admitted rps)."""
    rate, gw = d["rate_rps"], d["gateway"]
    reps = sorted({rep for row in gw for rep in row["read"]})

    def delta(what, t0, t1):
        return sum(counter_at(gw, r, what, t1) - counter_at(gw, r, what, t0) for r in reps)

    phases, rows = d["phases"], []
    for i, ph in enumerate(phases):
        t0 = ph["start"]
        t1 = phases[i + 1]["start"] if i + 1 < len(phases) else gw[-1]["t"]
        secs = max(t1 - t0, 1e-9)
        dec = {x: delta(x, t0, t1) for x in DECISIONS}
        n = sum(dec.values())
        local = dec["local_allowed"] + dec["local_limited"]
        refused = delta("429", t0, t1)
        rows.append((ph["name"], secs, ph["error_5xx_pct"], n, local / n if n else 0.0,
                     dec["limited"], dec["local_limited"], refused, max(rate - refused / secs, 0)))
    return rows


def admitted_rps(d):
    load = d["load"]
    return (load["sent"] - load["by_status"].get("429", 0)) / load["duration_s"]


def compared(d, before_path):
    """The same run's figures beside an earlier run's (before LAB-FIX(one-account))."""
    if not before_path:
        return ""
    b = json.load(open(before_path))
    plan = d["plan_rps"]
    now_rows = {r[0]: r for r in per_phase(d)}
    lines = []
    for r in per_phase(b):
        n = now_rows.get(r[0])
        lines.append(f"| {r[0]} | {100 * r[4]:.0f}% | {r[8]:.1f} | "
                     + (f"{100 * n[4]:.0f}% | {n[8]:.1f} |" if n else "— | — |"))
    return f"""

## Before and after one account (`LAB-FIX(one-account)`)

Until `LAB-FIX(one-account)` the gateway's own bucket and Redis kept separate accounts: what the
bucket admitted while Redis missed its deadline was never charged in Redis, so where the two
alternated a tenant got both. Now, once a bucket has admitted on its own, each call for the
tenant carries how far ahead the bucket is full until Redis answers one, and Redis keeps the
later of its state and the bucket's (at most a full bucket's). The earlier run
(`{before_path}`, the same script and timings, its own calibration) admitted tenant
{b['tenant']} at **{admitted_rps(b):.1f} rps ({admitted_rps(b) / b['plan_rps']:.2f}x its
plan)**; this one **{admitted_rps(d):.1f} rps ({admitted_rps(d) / plan:.2f}x)**. Both include
the tenant's first burst (its bucket starts full: the steady rows). Per phase ("admitted": as in
the table above, an estimate from the offered rate less the 429s, so a short phase reads a
Poisson process's noise):

| phase | before: made without Redis | before: tenant admitted, rps | after: made without Redis | after: tenant admitted, rps |
|---|---:|---:|---:|---:|
""" + "\n".join(lines)


def render(path, before_path=None):
    d = json.load(open(path))
    plan, rate = d["plan_rps"], d["rate_rps"]
    lines, total_429 = [], 0.0
    for name, secs, e5xx, n, local, lim, lim_local, refused, adm in per_phase(d):
        total_429 += refused
        lines.append(
            f"| {name} | {secs:.0f} | {e5xx:.1f}% | {int(n)} | {100 * local:.1f}% | "
            f"{int(lim)} + {int(lim_local)} | {refused / secs:.1f} | {adm:.1f} |")
    load = d["load"]
    by, sent, ran = load["by_status"], load["sent"], load["duration_s"]
    limited = by.get("429", 0)
    admitted = sent - limited
    tenant = d["tenant"]
    print(f"""# The rate limit through the legacy storm: one tenant at {rate / plan:.0f}x its plan

`scripts/ratelimit-storm.sh`: a legacy replay (`labctl replay --mode legacy`, short timings) and,
through its incident, tenant {tenant} (trial plan: {plan:.0f} rps) sending {rate:.0f} rps open loop
(`labctl load --tenant {tenant} --docs corpus`), beside the replay's own traffic (every other tenant
within its plan). Every number is measured by that run.

**The tenant**: {sent} requests in {ran} s ({load['achieved_rps']:.1f} rps offered); answers:
{', '.join(f'{k}: {v}' for k, v in sorted(by.items()))}. Admitted (every answer but 429):
{admitted}, **{admitted / ran:.1f} rps against its plan of {plan:.0f}** ({admitted / ran / plan:.2f}x).
The gateway's own 429s over the incident's phases: {int(total_429)} (the tenant's count: {limited}; the
replay's own load: {d['replay_load_429']}; the rest of the difference is the tenant's seconds outside
the phases and the scrapes' one-second edges).

Per phase of the incident (the gateway's counters, all replicas; "tenant admitted" is the rate the
tenant offered less the gateway's 429s per second: an estimate, since the offered rate is a Poisson
process's):

| phase | seconds | 5xx (all traffic) | rate-limit decisions | made without Redis | limited (Redis + own bucket) | 429/s | tenant admitted, rps |
|---|---:|---:|---:|---:|---|---:|---:|
""" + "\n".join(lines) + f"""

"Made without Redis": decisions taken on the replica's own bucket because Redis missed the 50 ms
deadline or errored (`decision="local_*"`); before a4b54c1 those requests were let through
(`fail_open`). The tenant's plan is {plan:.0f} rps; its bucket's burst lets a little more through
at the start.""" + compared(d, before_path))


if __name__ == "__main__":
    if sys.argv[1:2] == ["extract"]:
        extract(*sys.argv[2:6])
    elif sys.argv[1:2] == ["render"] and len(sys.argv) in (3, 4):
        render(*sys.argv[2:4])
    else:
        sys.exit("usage: ratelimit_storm_report.py extract OUT TENANT PLAN RATE | render DATA.json [BEFORE.json]")
