#!/usr/bin/env bash
# scripts/lab.sh — the lab's main job, natively (no Docker needed): the postmortem's incident,
# replayed from the real trigger, in both client modes, with a verdict per step.
#
#   dependencies → release build → seed (once) → labctl replay (calibrate, then legacy and
#   resilient on fresh labs) → where the report is, and how many steps reproduced.
#
# Env:
#   LAB_SEED_ARGS         extra args for `labctl seed` (e.g. "--small"; default: full 1M/2000)
#   LAB_REPLAY_ARGS       extra args for `labctl replay` (default: a short replay,
#                         "--time-scale 0.4 --warmup-seconds 30 --probe-seconds 15": the
#                         postmortem's shape in ~11.5 minutes; "" runs it at full length, ~18
#                         min plus the rollouts' own seconds)
#   CARGO_TARGET_DIR, LAB_DATABASE_URL, LAB_STATE_DIR, LAB_DATA_DIR as usual.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=lab LOG_FMT='\n[lab] %s\n'
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, cargo_on_path
cargo_on_path

say "dependencies (PostgreSQL, Redis, Kafka-protocol broker)"
bash scripts/deps.sh

say "release build of the services and labctl"
cargo build --release --bins
BIN="${CARGO_TARGET_DIR:-target}/release"
LABCTL="$BIN/labctl"

say "seed (skipped when already seeded; reseed with: $LABCTL seed --force)"
# shellcheck disable=SC2086  # LAB_SEED_ARGS is a list of flags
"$LABCTL" seed --if-empty ${LAB_SEED_ARGS:-}

OUT="${LAB_STATE_DIR:-.lab}/reports/replay-$(date +%s)"
mkdir -p "$(dirname "$OUT")"
SHORT="--time-scale 0.4 --warmup-seconds 30 --probe-seconds 15"
REPLAY_ARGS="${LAB_REPLAY_ARGS-$SHORT}"
say "labctl replay $REPLAY_ARGS: calibration, then the incident in legacy and resilient mode"
say "(progress: tail -f $OUT.log)"
# shellcheck disable=SC2086  # REPLAY_ARGS is a list of flags
"$LABCTL" replay --out "$OUT" $REPLAY_ARGS > "$OUT.log" 2>&1 || {
    tail -n 40 "$OUT.log"
    exit 1
}

say "the verdicts (the postmortem's timeline, step by step)"
sed -En '/^## The timeline/,/^## (Performance Comparison|How good)/p' "$OUT/replay.md" | grep -E '^- ' || true
say "how good the fix is, in one number (goodput while the plan is stale / what the stale database could serve)"
sed -n '/^## How good/,/^## /p' "$OUT/replay.md" | grep -E '^- ' || true
say "report: $OUT/replay.md (summary.json and each mode's per-second series beside it; log: $OUT.log)"
