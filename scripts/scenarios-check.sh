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
OUT="${SCENARIOS_OUT:-.lab/reports/scenarios-check-$(date +%s)}"
GW=21080 ORCH=21101 ENT=21201

if ! [[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] || ((SECONDS_EACH < 2 || SECONDS_EACH > 120)); then
    die "SCENARIOS_SECONDS must be 2..120"
fi
# shellcheck source=lib/own_lab.sh
source "$HERE/lib/own_lab.sh"   # refuse_if_lab_up, own_lab_up
refuse_if_lab_up

# The flags live in the shared Redis: own_lab_up's exit trap resets them, or the next native lab
# would start in whatever mode the last scenario left.
own_lab_up scenarios $GW $ORCH $ENT
say "every scenario in both modes, ~${SECONDS_EACH} s each at $RATE rps (report: $OUT; log: $OUT.log)"
mkdir -p "$(dirname "$OUT")"
rc=0
"${LABCTL[@]}" scenarios check --seconds "$SECONDS_EACH" --rate "$RATE" \
    --gateway "http://127.0.0.1:$GW" --out "$OUT" >"$OUT.log" 2>&1 || rc=$?
if [[ -f "$OUT/scenarios-check.md" ]]; then cat "$OUT/scenarios-check.md"; fi
if ((rc != 0)); then
    tail -n 40 "$OUT.log" >&2
    die "a scenario run failed (exit $rc): see the table above and $OUT.log"
fi
say "every scenario ran: actions succeeded, counts add up"
