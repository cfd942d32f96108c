#!/usr/bin/env bash
# scripts/scenarios-check.sh — every scenario file in load/scenarios run, not only parsed (issue
# 25): a native lab (debug build, as the tests build it) and `labctl scenarios check`, which runs
# each file in both modes through the same engine as game days and the replay, shrunk to about
# SCENARIOS_SECONDS (default 8) at SCENARIOS_RATE (default 20) rps. Each run must complete, its
# timeline's actions succeed and its own counts add up; verdicts need full length and are not
# judged. The report: .lab/reports/scenarios-check-<time>/scenarios-check.md.
#
# Bounded: 2 runs per scenario file of ~SCENARIOS_SECONDS each, only to 127.0.0.1, on ports of its
# own (21xxx), its own database (retry_storm_lab_scenarios, seeded --small once) and state dir; the
# lab is stopped on every exit path. It shares Redis's flag namespace with a native lab, so it
# refuses to run while one is up in .lab. No Kafka: no scenario needs the enrichment path.
#
# Env: CARGO_TARGET_DIR, LAB_TOOLS_DIR, SCENARIOS_SECONDS, SCENARIOS_RATE, SCENARIOS_OUT.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=scenarios
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die, LAB_TOOLS_DIR

SECONDS_EACH="${SCENARIOS_SECONDS:-8}"
RATE="${SCENARIOS_RATE:-20}"
TARGET="${CARGO_TARGET_DIR:-target}"
DB="postgres://postgres@127.0.0.1:5432/retry_storm_lab_scenarios"
STATE="$(mktemp -d /tmp/scenarios-check.XXXXXX)"
DATA="$LAB_TOOLS_DIR/scenarios-data"   # the seed's files, kept with the database they match
OUT="${SCENARIOS_OUT:-.lab/reports/scenarios-check-$(date +%s)}"
GW=21080 ORCH=21101 ENT=21201

if ! [[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] || ((SECONDS_EACH < 2 || SECONDS_EACH > 120)); then
    die "SCENARIOS_SECONDS must be 2..120"
fi
lab_pid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("supervisor_pid", 0))' \
    .lab/run/lab.json 2>/dev/null || echo 0)"
if [[ "$lab_pid" != 0 ]] && kill -0 "$lab_pid" 2>/dev/null; then
    die "a native lab is up (.lab): this check sets the same runtime flags; stop it first (labctl down)"
fi

say "building the services (debug; cached after the tests)"
cargo build --bins -q
LABCTL=("$TARGET/debug/labctl" --database-url "$DB" --state-dir "$STATE" --data-dir "$DATA")
# The flags live in the shared Redis: put them back, or the next native lab starts in whatever
# mode the last scenario left.
cleanup() {
    "${LABCTL[@]}" down >/dev/null 2>&1 || true
    "${LABCTL[@]}" flags reset >/dev/null 2>&1 || true
    rm -rf "$STATE"
}
trap cleanup EXIT
"${LABCTL[@]}" seed --small --if-empty >"$STATE/seed.log" 2>&1 || { cat "$STATE/seed.log"; die "seed failed"; }
"${LABCTL[@]}" up --gateway-port $GW --orchestrator-port $ORCH --entity-port $ENT \
    --kafka '' --trace-sample 0 --bin-dir "$TARGET/debug" >"$STATE/up.log" 2>&1 ||
    { cat "$STATE/up.log"; die "labctl up failed"; }
say "every scenario in both modes, ~${SECONDS_EACH} s each at $RATE rps (report: $OUT)"
"${LABCTL[@]}" scenarios check --seconds "$SECONDS_EACH" --rate "$RATE" \
    --gateway "http://127.0.0.1:$GW" --out "$OUT"
say "every scenario ran: actions succeeded, counts add up"
