#!/usr/bin/env bash
# scripts/tenant-fairness.sh — one tenant's goodput while another sends huge documents, with the
# tenant controls on and off (issue 28, "A document's work has no bound").
#
# `resilience.tenant_fairness` switches both (LAB-FIX(tenant-share)): entity-service hands its
# PostgreSQL connections to waiting tenants in turn, and the orchestrators' ceiling on attempts in
# flight keeps a share for every tenant with work (crates/entity-client/src/limiter.rs). Each run
# is a fresh native lab (resilient client), the flag set, and scripts/lib/tenant_fairness.py:
# tenant A (tenant 2) RATE_A documents a second of WORDS_A fresh capitalised names each (every one
# a lookup), tenant B (tenant 1) RATE_B of its own corpus documents a second, open loop.
#
#   on, off, on, off, ...   REPEATS pairs, alternated so drift on a shared machine hits both
#
# and a report (tenant-fairness.md; docs/reports/tenant-fairness.md with --publish, its runs in
# docs/reports/data/): per run, each tenant's share answered 200, the refusals by error code,
# p50/p99 from the scheduled time.
#
# Bounded: 2 x REPEATS runs of SECONDS (default 20 s, at most 120) to 127.0.0.1 only, on ports of
# its own (18xxx; admin 19xxx), its own database (retry_storm_lab_fair, seeded --small once) and
# state dir; the lab is stopped on every exit path. The flag lives in the lab's Redis namespace,
# shared with any other native lab on this Redis: its value is put back on exit (do not run this
# beside another lab). ~3 minutes. Needs the release build (cargo build --release --bins).
#
# Env: CARGO_TARGET_DIR, LAB_TOOLS_DIR, REPEATS (2), SECONDS_PER_RUN (20), RATE_A (60),
#      WORDS_A (1000), RATE_B (50), FAIR_OUT (output dir).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=fair
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die, LAB_TOOLS_DIR

PUBLISH=0
[[ "${1:-}" == "--publish" ]] && PUBLISH=1
REPEATS="${REPEATS:-2}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-20}"
RATE_A="${RATE_A:-60}" WORDS_A="${WORDS_A:-1000}" RATE_B="${RATE_B:-50}"
BIN="${CARGO_TARGET_DIR:-target}/release"
DB="postgres://postgres@127.0.0.1:5432/retry_storm_lab_fair"
DATA="$LAB_TOOLS_DIR/fair-data"
OUT="${FAIR_OUT:-${LAB_STATE_DIR:-.lab}/reports/tenant-fairness-$(date +%s)}"
STATE="$(mktemp -d /tmp/tenant-fairness.XXXXXX)"
GW=18080 ORCH=18101 ENT=18201
[[ "$REPEATS" =~ ^[1-9][0-9]?$ ]] || die "REPEATS must be 1..99, got $REPEATS"
if ! [[ "$SECONDS_PER_RUN" =~ ^[0-9]+$ ]] || ((SECONDS_PER_RUN < 5 || SECONDS_PER_RUN > 120)); then
    die "SECONDS_PER_RUN must be 5..120, got $SECONDS_PER_RUN"
fi
[[ -x "$BIN/labctl" ]] || die "build first: cargo build --release --bins"
mkdir -p "$OUT"

LABCTL=("$BIN/labctl" --database-url "$DB" --state-dir "$STATE" --data-dir "$DATA")
FLAG=resilience.tenant_fairness
BEFORE="$("${LABCTL[@]}" flags get "$FLAG" 2>/dev/null | awk '{print $NF}' || true)"
cleanup() {
    "${LABCTL[@]}" down >/dev/null 2>&1 || true
    if [[ "$BEFORE" == on || "$BEFORE" == off ]]; then
        "${LABCTL[@]}" flags set "$FLAG" "$BEFORE" >/dev/null 2>&1 || true
    fi
    rm -rf "$STATE"
}
trap cleanup EXIT
"${LABCTL[@]}" seed --small --if-empty >"$OUT/seed.log" 2>&1 || { cat "$OUT/seed.log"; die "seed failed"; }

# run N FLAG_VALUE
run() {
    local n="$1" value="$2" name="run-$1-$2"
    say "$name: fresh lab, $FLAG=$value; A $RATE_A docs/s x $WORDS_A names, B $RATE_B docs/s, $SECONDS_PER_RUN s"
    "${LABCTL[@]}" up --gateway-port $GW --orchestrator-port $ORCH --entity-port $ENT \
        --kafka '' --trace-sample 0 --bin-dir "$BIN" >"$OUT/$name-up.log" 2>&1 ||
        { cat "$OUT/$name-up.log"; die "labctl up failed"; }
    "${LABCTL[@]}" flags set "$FLAG" "$value" >/dev/null
    sleep 2   # the change reaches every replica by pub/sub in milliseconds; 2 s is generous
    python3 "$HERE/lib/tenant_fairness.py" --gateway "http://127.0.0.1:$GW" \
        --keys "$DATA/api-keys.json" --corpus "$DATA/corpus.jsonl" --seconds "$SECONDS_PER_RUN" \
        --rate-a "$RATE_A" --words-a "$WORDS_A" --rate-b "$RATE_B" |
        python3 "$HERE/lib/tenant_fairness_report.py" --label "$n" "$value" "$RATE_A" "$WORDS_A" \
            "$RATE_B" "$SECONDS_PER_RUN" >>"$OUT/runs.jsonl"
    "${LABCTL[@]}" down >/dev/null
}

for ((i = 1; i <= REPEATS; i++)); do
    run "$i" on
    run "$i" off
done

python3 "$HERE/lib/tenant_fairness_report.py" "$OUT/runs.jsonl" >"$OUT/tenant-fairness.md"
cat "$OUT/tenant-fairness.md"
if ((PUBLISH)); then
    # The report is drawn again from the committed runs (docs/reports/provenance.yaml).
    cp "$OUT/runs.jsonl" docs/reports/data/tenant-fairness-runs.jsonl
    cp "$OUT/tenant-fairness.md" docs/reports/tenant-fairness.md
    say "published docs/reports/tenant-fairness.md (runs: docs/reports/data/tenant-fairness-runs.jsonl)"
fi
