#!/usr/bin/env python3
"""ratelimit-storm.md, the report of scripts/ratelimit-storm.sh (issue 28), in two steps:

    python3 scripts/lib/ratelimit_storm_report.py extract OUT TENANT PLAN_RPS RATE > OUT/ratelimit-storm.json
    python3 scripts/lib/ratelimit_storm_report.py render OUT/ratelimit-storm.json > OUT/ratelimit-storm.md

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


def render(path):
    d = json.load(open(path))
    plan, rate, gw = d["plan_rps"], d["rate_rps"], d["gateway"]
    reps = sorted({rep for row in gw for rep in row["read"]})

    def delta(what, t0, t1):
        return sum(counter_at(gw, r, what, t1) - counter_at(gw, r, what, t0) for r in reps)

    phases, lines, total_429 = d["phases"], [], 0.0
    for i, ph in enumerate(phases):
        t0 = ph["start"]
        t1 = phases[i + 1]["start"] if i + 1 < len(phases) else gw[-1]["t"]
        secs = max(t1 - t0, 1e-9)
        dec = {x: delta(x, t0, t1) for x in DECISIONS}
        n = sum(dec.values())
        local = dec["local_allowed"] + dec["local_limited"]
        refused = delta("429", t0, t1)
        total_429 += refused
        lines.append(
            f"| {ph['name']} | {secs:.0f} | {ph['error_5xx_pct']:.1f}% | {int(n)} | "
            f"{100 * local / n if n else 0:.1f}% | {int(dec['limited'])} + {int(dec['local_limited'])} | "
            f"{refused / secs:.1f} | {max(rate - refused / secs, 0):.1f} |")
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
at the start.""")


if __name__ == "__main__":
    if sys.argv[1:2] == ["extract"]:
        extract(*sys.argv[2:6])
    elif sys.argv[1:2] == ["render"]:
        render(sys.argv[2])
    else:
        sys.exit("usage: ratelimit_storm_report.py extract OUT TENANT PLAN RATE | render DATA.json")
