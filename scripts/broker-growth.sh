#!/usr/bin/env bash
# scripts/broker-growth.sh — issue 29: does the native broker's cost grow with the events it
# holds? A fresh (empty) broker, a fresh lab with its enrichment workers, one open-loop load at a
# constant rate, and every process group's cores and memory from /proc each interval; then
# broker-growth.json (small enough to commit) and broker-growth.md from it alone.
#
#   scripts/broker-growth.sh                    # 350 rps for 8 min, sampled every 30 s
#   BG_RATE=200 BG_SECONDS=300 scripts/broker-growth.sh
#   BG_UP_ARGS="--env orchestrator:LAB_KAFKA__BATCH_MAX_EVENTS=1 --env orchestrator:LAB_KAFKA__LINGER_MS=5" \
#       scripts/broker-growth.sh   # extra `labctl up` flags (these: the producers before 5072fb1)
#
# What it showed (docs/reports/broker-growth*.md): tansu 0.6 with memory storage lists every batch
# a partition holds on each fetch (its DeleteRecords is unimplemented, so nothing ever leaves), so
# its CPU follows the batches it holds. With the producers' one event per batch (before 5072fb1)
# it grew +0.034 cores a minute at 350 rps; with batches of up to 8 held 500 ms (the native lab's
# since) +0.005. It still grows, which is why scripts/soak.sh runs without Kafka by default.
#
# Bounded: one open-loop run of BG_SECONDS to 127.0.0.1, on a native lab that is stopped at the
# end. Restarts the native broker (memory storage: its topics are gone). Needs the release build
# and a seeded database (scripts/lab.sh does both).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=broker-growth
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die
BIN="${CARGO_TARGET_DIR:-target}/release"
LABCTL="$BIN/labctl"
[[ -x "$LABCTL" ]] || die "no $LABCTL" "build first: cargo build --release --bins"
RATE="${BG_RATE:-350}"
SECONDS_="${BG_SECONDS:-480}"
INTERVAL="${BG_INTERVAL:-30}"
KAFKA=127.0.0.1:9092
[[ "$RATE" =~ ^[0-9]+$ && "$SECONDS_" =~ ^[0-9]+$ && "$INTERVAL" =~ ^[0-9]+$ ]] ||
    die "BG_RATE, BG_SECONDS and BG_INTERVAL are whole numbers" "e.g. BG_RATE=350 BG_SECONDS=480"
((INTERVAL > 0 && SECONDS_ >= 2 * INTERVAL)) || die "BG_SECONDS must be at least two intervals"
OUT="${BG_OUT:-${LAB_STATE_DIR:-.lab}/reports/broker-growth-$(date +%s)}"
mkdir -p "$OUT"

say "a fresh, empty broker"
bash "$HERE/deps.sh" --restart-kafka > "$OUT/deps.log" 2>&1 || { tail -n 20 "$OUT/deps.log"; exit 1; }
BROKER="$("$LAB_TOOLS_DIR/bin/tansu" --version 2>/dev/null || echo tansu), memory storage"
say "a fresh lab, resilient mode, Kafka at $KAFKA"
"$LABCTL" down >/dev/null 2>&1 || true
trap '"$LABCTL" down >/dev/null 2>&1 || true' EXIT
"$LABCTL" flags set client.mode resilient >/dev/null
# shellcheck disable=SC2086  # BG_UP_ARGS is a list of flags
"$LABCTL" up --kafka "$KAFKA" ${BG_UP_ARGS:-} > "$OUT/up.log" 2>&1 || { tail -n 30 "$OUT/up.log"; exit 1; }
say "$RATE rps for $SECONDS_ s, sampled every $INTERVAL s"
python3 "$HERE/lib/broker_growth.py" sample "$INTERVAL" "$SECONDS_" > "$OUT/samples.jsonl" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true; "$LABCTL" down >/dev/null 2>&1 || true' EXIT
"$LABCTL" load --rate "$RATE" --duration "$SECONDS_" --out "$OUT/load.json" > "$OUT/load.log" 2>&1 ||
    { tail -n 20 "$OUT/load.log"; exit 1; }
wait "$sampler"
python3 "$HERE/lib/broker_growth.py" extract "$OUT" "$RATE" "$BROKER" > "$OUT/broker-growth.json"
python3 "$HERE/lib/broker_growth.py" render "$OUT/broker-growth.json" > "$OUT/broker-growth.md"
cat "$OUT/broker-growth.md"
say "report: $OUT/broker-growth.md (from $OUT/broker-growth.json)"
