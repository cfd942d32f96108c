#!/usr/bin/env python3
"""ratelimit-storm.md, the report of scripts/ratelimit-storm.sh (issue 28).

    python3 scripts/lib/ratelimit_storm_report.py OUT TENANT PLAN_RPS RATE > OUT/ratelimit-storm.md

Reads OUT/tenant.json (`labctl load --out` of the one tenant over its plan), OUT/replay/summary.json
and OUT/replay/legacy/series.jsonl (the legacy replay: its phases, and every replica's /metrics
once a second). Prints: the tenant's answers and the rate it was admitted at (every answer but
429) against its plan; per phase, the gateway's rate-limit decisions (`allowed`/`limited` by Redis,
`local_*` by the replica's own bucket when Redis missed its deadline) and its 429s.
"""
import json
import sys

DECISIONS = ["allowed", "limited", "local_allowed", "local_limited"]


def counter_at(points, t):
    """The counter's last value at or before t (0 before its first scrape)."""
    v = 0.0
    for pt, pv in points:
        if pt > t:
            break
        v = pv
    return v


def main(out, tenant, plan, rate):
    plan, rate = float(plan), float(rate)
    load = json.load(open(f"{out}/tenant.json"))
    summary = json.load(open(f"{out}/replay/summary.json"))
    mode = next(m for m in summary["modes"] if m["mode"].lower() == "legacy")
    rows = [json.loads(line) for line in open(f"{out}/replay/legacy/series.jsonl")]

    # Every gateway replica's counters, summed: {metric: [(t, value)]}.
    series = {}
    for r in rows:
        for rep, m in r["replicas"].items():
            if not rep.startswith("edge-gateway") or m is None:
                continue
            for d in DECISIONS:
                k = f'gateway_ratelimit_decisions_total{{decision="{d}"}}'
                series.setdefault((rep, d), []).append((r["t"], m.get(k, 0.0)))
            series.setdefault((rep, "429"), []).append((r["t"], m.get("gateway_rate_limited_total", 0.0)))

    def delta(what, t0, t1):
        return sum(counter_at(p, t1) - counter_at(p, t0) for (rep, w), p in series.items() if w == what)

    phases = mode["phases"]
    lines = []
    total_429 = 0.0
    for i, ph in enumerate(phases):
        t0 = ph["start"]
        t1 = phases[i + 1]["start"] if i + 1 < len(phases) else rows[-1]["t"]
        secs = max(t1 - t0, 1e-9)
        dec = {d: delta(d, t0, t1) for d in DECISIONS}
        n = sum(dec.values())
        local = dec["local_allowed"] + dec["local_limited"]
        refused = delta("429", t0, t1)
        total_429 += refused
        five = ph["summary"].get("error_5xx_pct")
        lines.append(
            f"| {ph['name']} | {secs:.0f} | {five:.1f}% | {int(n)} | {100 * local / n if n else 0:.1f}% | "
            f"{int(dec['limited'])} + {int(dec['local_limited'])} | {refused / secs:.1f} | "
            f"{max(rate - refused / secs, 0):.1f} |")

    by = load["by_status"]
    sent = load["sent"]
    limited = by.get("429", 0)
    ran = load["duration_s"]
    admitted = sent - limited
    print(f"""# The rate limit through the legacy storm: one tenant at {rate / plan:.0f}x its plan

`scripts/ratelimit-storm.sh`: a legacy replay (`labctl replay --mode legacy`, short timings) and,
through its incident, tenant {tenant} (trial plan: {plan:.0f} rps) sending {rate:.0f} rps open loop
(`labctl load --tenant {tenant} --docs corpus`), beside the replay's own traffic (every other tenant
within its plan). Every number is measured by that run.

**The tenant**: {sent} requests in {ran} s ({load['achieved_rps']:.1f} rps offered); answers:
{', '.join(f'{k}: {v}' for k, v in sorted(by.items()))}. Admitted (every answer but 429):
{admitted}, **{admitted / ran:.1f} rps against its plan of {plan:.0f}** ({admitted / ran / plan:.2f}x).
The gateway's own 429s over the same phases: {int(total_429)} (the tenant's count: {limited}; the
difference is the seconds of the incident outside the tenant's run and the scrapes' one-second edges).

Per phase of the incident (the gateway's counters, all replicas; "admitted" is the offered rate
less the gateway's 429s per second, which are this tenant's alone):

| phase | seconds | 5xx (all traffic) | rate-limit decisions | made without Redis | limited (Redis + own bucket) | 429/s | tenant admitted, rps |
|---|---:|---:|---:|---:|---|---:|---:|
""" + "\n".join(lines) + f"""

"Made without Redis": decisions taken on the replica's own bucket because Redis missed the 50 ms
deadline or errored (`decision="local_*"`); before a4b54c1 those requests were let through
(`fail_open`). The tenant's plan is {plan:.0f} rps; its bucket's burst lets a little more through
at the start of each refill.
""")


if __name__ == "__main__":
    main(*sys.argv[1:5])
