#!/usr/bin/env python3
"""soak.md, the report of scripts/soak.sh (issue 17's soak): every replica from the first minute
of the run to the last.

Called by scripts/soak.sh after `labctl gameday load/scenarios/soak.yaml --out RUN` as
    python3 scripts/lib/soak_report.py RUN RATE [MODE] > OUT/soak.md
It reads RUN/series.jsonl (one tick per line: t and every replica's metrics) and RUN/summary.json
(the phases, their summaries, the load's counts) and prints Markdown: per phase the 5xx share,
gateway p99, goodput, orchestrator RSS and tasks, cache hits; per replica its RSS at the first
minute, midway and at the end of the load, and its tokio tasks.
"""
import json
import sys


def at(tick, replica, name):
    m = tick["replicas"].get(replica) or {}
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


def phase_table(phases, columns):
    """One row per phase: each (header, summary key, decimals) column, "—" where not measured."""
    print("| phase | " + " | ".join(h for h, _, _ in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for p in phases:
        m = p["summary"]
        cells = ("—" if k not in m else f"{m[k]:.{d}f}" for _, k, d in columns)
        print(f"| {p['name']} | " + " | ".join(cells) + " |")


def main(run, rate, mode="resilient"):
    ticks = [json.loads(line) for line in open(f"{run}/series.jsonl") if line.strip()]
    replicas = sorted({r for t in ticks for r in t["replicas"] if r != "supervisor"})
    # The first minute's last tick (the LRU still filling) and the last tick under load (the
    # settle seconds after the load are idle: comparing against them would hide a slow leak).
    s = json.load(open(f"{run}/summary.json"))
    load_end = sum(p["seconds"] for p in s["phases"])
    loaded = [t for t in ticks if t["t"] <= load_end] or ticks
    first = next((t for t in loaded if t["t"] >= 60), loaded[0])
    last = loaded[-1]
    mid = min(loaded, key=lambda t: abs(t["t"] - last["t"] / 2))
    print(f"# Soak: {rate} rps for {last['t']/60:.0f} min, {mode} mode\n")
    phase_table(s["phases"], [
        ("5xx %", "error_5xx_pct", 2), ("gateway p99 ms", "gateway_p99_ms", 0),
        ("goodput %", "goodput_pct", 1), ("orchestrator RSS MB (max)", "orchestrator_rss_mb_max", 0),
        ("orchestrator tasks (max)", "orchestrator_tasks_max", 0), ("cache hit %", "cache_hit_pct", 1),
    ])
    # What the database and the machine were doing: the same rate is not the same load when the
    # lookups are slower (dead tuples, a broker holding many events, a backlog the enrichment
    # workers catch up on) or the replicas wait for a CPU; an A/B of two soaks is read against these.
    print()
    phase_table(s["phases"], [
        ("entity-service p99 ms", "entity_p99_ms", 0), ("lookup mean ms", "candidate_query_mean_ms", 2),
        ("dead tuples (max)", "dead_tuples_max", 0), ("enrichment events/s", "enrichment_eps", 0),
        ("entity-service CPU wait s/s", "entity_runqueue_wait", 2),
    ])
    print(f"\n| replica | RSS MB at {first['t']/60:.0f} min | at {mid['t']/60:.0f} min | at {last['t']/60:.0f} min | change, 2nd half | tasks at {first['t']/60:.0f} min | at {last['t']/60:.0f} min |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in replicas:
        a, b, c = (at(t, r, "process_resident_memory_bytes") / 1e6 for t in (first, mid, last))
        ta, tc = at(first, r, "tokio_alive_tasks"), at(last, r, "tokio_alive_tasks")
        change = f"{100*(c-b)/b:+.1f}%" if b else "—"
        print(f"| {r} | {a:.0f} | {b:.0f} | {c:.0f} | {change} | {ta:.0f} | {tc:.0f} |")
    print(f"\nLoad: {s['load']['sent']} sent, by status {s['load']['by_status']}. Report with charts: report.html beside this file.")


if __name__ == "__main__":
    main(*sys.argv[1:4])
