#!/usr/bin/env bash
# scripts/soak.sh — issue 17's soak: 30 minutes in resilient mode at ~80% of the calibrated
# healthy capacity (load/scenarios/soak.yaml), then a report of every replica's RSS and tasks
# from the start to the end of the run (docs/reports/soak.md is one).
#
#   scripts/soak.sh                      # calibrate (labctl map's calibration, ~1.5 min), then soak
#   SOAK_CALIBRATION=<summary.json> scripts/soak.sh   # reuse a replay's/ablation's calibration
#   SOAK_RATE=500 scripts/soak.sh        # a rate of your own
#   SOAK_SCALE=0.1 scripts/soak.sh       # a 3-minute rehearsal of the same shape
#
# Bounded: one open-loop run of 30 min (x SOAK_SCALE) to 127.0.0.1, on a fresh native lab that
# is stopped at the end. Needs the release build and a seeded database (scripts/lab.sh does both).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
say() { printf '\n[soak] %s\n' "$*"; }
BIN="${CARGO_TARGET_DIR:-target}/release"
LABCTL="$BIN/labctl"
[[ -x "$LABCTL" ]] || { echo "build first: cargo build --release --bins" >&2; exit 1; }
OUT="${SOAK_OUT:-${LAB_STATE_DIR:-.lab}/reports/soak-$(date +%s)}"
mkdir -p "$OUT"

RATE="${SOAK_RATE:-}"
if [[ -z "$RATE" ]]; then
    CAL="${SOAK_CALIBRATION:-}"
    if [[ -z "$CAL" ]]; then
        say "calibrating (fresh lab, closed loop; the map's calibration, no cells)"
        "$LABCTL" map --quick --out "$OUT/calibration" --loads 0.5 --trigger-seconds 20 \
            --mode resilient --calibrate-only > "$OUT/calibration.log" 2>&1 ||
            { tail -n 30 "$OUT/calibration.log"; exit 1; }
        CAL="$OUT/calibration/calibration.json"
    fi
    RATE="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d.get("calibration", d); print(round(0.8*c["healthy_capacity_rps"]))' "$CAL")"
    say "rate: 0.8 x the healthy capacity in $CAL = $RATE rps"
fi

say "fresh lab, resilient mode"
"$LABCTL" down >/dev/null 2>&1 || true
trap '"$LABCTL" down >/dev/null 2>&1 || true' EXIT
"$LABCTL" up --kafka "${KAFKA_BOOTSTRAP:-127.0.0.1:9092}" > "$OUT/up.log" 2>&1 || { cat "$OUT/up.log"; exit 1; }
SCALE="${SOAK_SCALE:-1}"
SC=load/scenarios/soak.yaml
if [[ "$SCALE" != 1 ]]; then
    SC="$OUT/soak-scaled.yaml"
    python3 - "$SCALE" > "$SC" <<'PY'
import sys, re
scale = float(sys.argv[1])
for line in open("load/scenarios/soak.yaml"):
    m = re.match(r"(\s+seconds: )(\d+)", line)
    print(f"{m.group(1)}{max(1, round(int(m.group(2)) * scale))}{line[m.end():]}" if m else line, end="")
PY
fi
say "soak: $RATE rps, $(python3 -c "print(round(1800*$SCALE))") s (progress: tail -f $OUT/gameday.log)"
# --strict: the 5xx expectation fails the soak, but the report below is written either way.
rc=0
"$LABCTL" gameday "$SC" --mode resilient --rate "$RATE" --out "$OUT/run" --strict > "$OUT/gameday.log" 2>&1 || rc=$?
[[ -f "$OUT/run/summary.json" ]] || { tail -n 40 "$OUT/gameday.log"; exit 1; }

say "every replica from the first minute to the last"
python3 - "$OUT/run" "$RATE" > "$OUT/soak.md" <<'PY'
import json, sys
run, rate = sys.argv[1], sys.argv[2]
ticks = [json.loads(l) for l in open(f"{run}/series.jsonl") if l.strip()]
def at(tick, replica, name):
    m = tick["replicas"].get(replica) or {}
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))
replicas = sorted({r for t in ticks for r in t["replicas"] if r != "supervisor"})
# The first minute's last tick (the LRU still filling) and the last tick under load (the
# settle seconds after the load are idle: comparing against them would hide a slow leak).
s = json.load(open(f"{run}/summary.json"))
load_end = sum(p["seconds"] for p in s["phases"])
loaded = [t for t in ticks if t["t"] <= load_end] or ticks
first = next((t for t in loaded if t["t"] >= 60), loaded[0])
last = loaded[-1]
mid = min(loaded, key=lambda t: abs(t["t"] - last["t"] / 2))
print(f"# Soak: {rate} rps for {last['t']/60:.0f} min, resilient mode\n")
print("| phase | 5xx % | gateway p99 ms | goodput % | orchestrator RSS MB (max) | orchestrator tasks (max) | cache hit % |")
print("|---|---:|---:|---:|---:|---:|---:|")
for p in s["phases"]:
    m = p["summary"]
    f = lambda k, d=1: "—" if k not in m else f"{m[k]:.{d}f}"
    print(f"| {p['name']} | {f('error_5xx_pct', 2)} | {f('gateway_p99_ms', 0)} | {f('goodput_pct')} | {f('orchestrator_rss_mb_max', 0)} | {f('orchestrator_tasks_max', 0)} | {f('cache_hit_pct')} |")
print(f"\n| replica | RSS MB at {first['t']/60:.0f} min | at {mid['t']/60:.0f} min | at {last['t']/60:.0f} min | change, 2nd half | tasks at {first['t']/60:.0f} min | at {last['t']/60:.0f} min |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in replicas:
    a, b, c = (at(t, r, "process_resident_memory_bytes") / 1e6 for t in (first, mid, last))
    ta, tc = at(first, r, "tokio_alive_tasks"), at(last, r, "tokio_alive_tasks")
    change = f"{100*(c-b)/b:+.1f}%" if b else "—"
    print(f"| {r} | {a:.0f} | {b:.0f} | {c:.0f} | {change} | {ta:.0f} | {tc:.0f} |")
print(f"\nLoad: {s['load']['sent']} sent, by status {s['load']['by_status']}. Report with charts: report.html beside this file.")
PY
cat "$OUT/soak.md"
say "report: $OUT/soak.md ($OUT/run/report.html)"
((rc == 0)) || { grep -E '^- (PASS|FAIL)' "$OUT/gameday.log"; exit "$rc"; }
