#!/usr/bin/env bash
# scripts/soak.sh — issue 17's soak: 30 minutes in resilient mode at ~80% of the calibrated
# healthy capacity (load/scenarios/soak.yaml), then a report of every replica's RSS and tasks
# from the start to the end of the run (docs/reports/soak.md is one).
#
#   scripts/soak.sh                      # calibrate (labctl map's calibration, ~1.5 min), then soak
#   SOAK_CALIBRATION=<summary.json> scripts/soak.sh   # reuse a replay's/ablation's calibration
#   SOAK_RATE=500 scripts/soak.sh        # a rate of your own
#   SOAK_SCALE=0.1 scripts/soak.sh       # a 3-minute rehearsal of the same shape
#   SOAK_MODE=legacy scripts/soak.sh     # the buggy client at the same rate: what the fix is
#                                        # compared with (issue 27's "no harm"); no verdict
#   SOAK_KAFKA=127.0.0.1:9092 scripts/soak.sh   # with the broker and the enrichment workers
#                                        # (default: without them; see below)
#   SOAK_FRESH_BROKER=1 scripts/soak.sh  # restart the native tansu first (scripts/deps.sh
#                                        # --restart-kafka; memory storage: empty). A broker that
#                                        # holds a replay's events costs more per event: measured
#                                        # 0.25/0/0/0/0/0.16% 5xx fresh vs 4-44% per window after a
#                                        # replay and three soaks, same client, same rate
#
# Why without Kafka by default: the soak is a test of the fixed client at a steady load, and the
# native broker's cost is not steady. tansu 0.6 (memory storage) lists every batch a partition
# holds on every fetch and cannot delete records (its DeleteRecords is unimplemented), so the
# broker's CPU grows with every batch the run publishes. Measured 2026-12-06 on 2 cores, 350 rps
# for 8 min on a fresh broker, the producers then sending one event per batch: tansu 0.16 -> 0.45
# cores (41 -> 372 MB), the rest of the lab flat. Batches of up to 8 (5072fb1) cut the growth to
# +0.005 cores a minute (docs/reports/broker-growth.md), still not steady over 30 min; tansu's SQLite
# storage (built from crates.io) is flat but 0.73-0.82 cores at the same rate and fell behind the
# producers. A 30-minute soak with it measures the broker filling (the soak of 2026-12-06 at
# 493 rps: 17-51% 5xx per window, the orchestrators' producer queues at their cap), not the
# client. Apache Kafka (compose, kind) reads by offset index and has no such growth. The
# calibration runs on the same lab as the soak (with or without Kafka).
#
# Bounded: one open-loop run of 30 min (x SOAK_SCALE) to 127.0.0.1, on a fresh native lab that
# is stopped at the end. Needs the release build and a seeded database (scripts/lab.sh does both).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=soak LOG_FMT='\n[soak] %s\n'
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say
BIN="${CARGO_TARGET_DIR:-target}/release"
LABCTL="$BIN/labctl"
[[ -x "$LABCTL" ]] || { echo "build first: cargo build --release --bins" >&2; exit 1; }
OUT="${SOAK_OUT:-${LAB_STATE_DIR:-.lab}/reports/soak-$(date +%s)}"
mkdir -p "$OUT"

MODE="${SOAK_MODE:-resilient}"
[[ "$MODE" == resilient || "$MODE" == legacy ]] || { echo "SOAK_MODE: resilient or legacy, not '$MODE'" >&2; exit 2; }
KAFKA="${SOAK_KAFKA-}"
LAB_DESC=", without Kafka (no doc.ingested, no enrichment workers)"
[[ -n "$KAFKA" ]] && LAB_DESC=", Kafka at $KAFKA"
[[ -n "${KAFKA_BOOTSTRAP:-}" && -z "$KAFKA" ]] &&
    warn "KAFKA_BOOTSTRAP is set but the soak runs without Kafka; SOAK_KAFKA=$KAFKA_BOOTSTRAP puts it in"
# The soak's database is the seed's: `labctl backfill --reset` rewrites entities with locale
# NULL (no UPDATE, so no dead tuples) and analyzes it. Before the calibration, so its healthy
# probe measures that state; again before the soak, because the calibration's own backfill leaves
# a dead tuple per row it populated (this machine's PostgreSQL runs with autovacuum off): the
# soak of 2026-12-06 met 399,932 of them, 40% of the live rows, against a capacity measured on a
# clean table.
reset_db() {
    "$LABCTL" backfill --reset >> "$OUT/reset.log" 2>&1 || { tail -n 20 "$OUT/reset.log"; exit 1; }
}
RATE="${SOAK_RATE:-}"
if [[ -z "$RATE" ]]; then
    CAL="${SOAK_CALIBRATION:-}"
    if [[ -z "$CAL" ]]; then
        say "the seed's database (labctl backfill --reset)"
        reset_db
        say "calibrating (fresh lab$LAB_DESC, closed loop; the map's calibration, no cells)"
        "$LABCTL" map --quick --out "$OUT/calibration" --loads 0.5 --trigger-seconds 20 \
            --mode resilient --calibrate-only --kafka "$KAFKA" > "$OUT/calibration.log" 2>&1 ||
            { tail -n 30 "$OUT/calibration.log"; exit 1; }
        CAL="$OUT/calibration/calibration.json"
    fi
    RATE="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d.get("calibration", d); print(round(0.8*c["healthy_capacity_rps"]))' "$CAL")"
    say "rate: 0.8 x the healthy capacity in $CAL = $RATE rps"
fi

if [[ "${SOAK_FRESH_BROKER:-0}" == 1 ]]; then
    say "restarting the native broker (empty)"
    bash "$HERE/deps.sh" --restart-kafka > "$OUT/deps.log" 2>&1 || { tail -n 20 "$OUT/deps.log"; exit 1; }
fi
say "the seed's database again (labctl backfill --reset: no dead tuples, fresh statistics)"
reset_db
say "fresh lab, $MODE mode$LAB_DESC"
"$LABCTL" down >/dev/null 2>&1 || true
trap '"$LABCTL" down >/dev/null 2>&1 || true' EXIT
"$LABCTL" up --kafka "$KAFKA" > "$OUT/up.log" 2>&1 || { cat "$OUT/up.log"; exit 1; }
# Preflight: 2 s at 10 rps must all be 200. A soak whose requests are refused at the door (401:
# .lab/data/api-keys.json from another seeding than the database's) has no 5xx and would read
# as a clean run; measured once: 945,842 requests, every one a 401.
"$LABCTL" load --rate 10 --duration 2 --out "$OUT/preflight.json" > "$OUT/preflight.log" 2>&1 ||
    { tail -n 20 "$OUT/preflight.log"; exit 1; }
python3 - "$OUT/preflight.json" <<'PY' || exit 1
import json, sys
by = json.load(open(sys.argv[1]))["by_status"]
if set(by) != {"200"}:
    sys.exit(f"[soak] preflight: the lab answered {by} to 2 s of load, not only 200s. 401s mean "
             ".lab/data/api-keys.json is not the database's seeding (another checkout reseeded it): "
             "labctl seed --force, then run again")
PY
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
"$LABCTL" gameday "$SC" --mode "$MODE" --rate "$RATE" --out "$OUT/run" --strict > "$OUT/gameday.log" 2>&1 || rc=$?
[[ -f "$OUT/run/summary.json" ]] || { tail -n 40 "$OUT/gameday.log"; exit 1; }

say "every replica from the first minute to the last"
python3 "$HERE/lib/soak_report.py" extract "$OUT/run" "$RATE" "$MODE" "${KAFKA:-none}" > "$OUT/soak.json"
python3 "$HERE/lib/soak_report.py" render "$OUT/soak.json" > "$OUT/soak.md"
cat "$OUT/soak.md"
say "report: $OUT/soak.md (from $OUT/soak.json, small enough to commit; charts: $OUT/run/report.html)"
((rc == 0)) || { grep -E '^- (PASS|FAIL)' "$OUT/gameday.log"; exit "$rc"; }
