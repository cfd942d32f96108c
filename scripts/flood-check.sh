#!/usr/bin/env bash
# scripts/flood-check.sh — real tenants' goodput through a flood of well-formed but unknown API
# keys, before and after the key store was bounded (issue 17, "unauthenticated floods").
#
# One binary, two key stores: `auth.flood_guard` (services/edge-gateway/src/auth.rs) is the fix
# (unknown ids in an O(1) negative cache of their own, at most 2 of the gateway's 4 key-store
# connections for never-seen ids, each waiting at most 200 ms) or, set false, the key store as it
# was (LAB-BUG(auth-flood): every unknown id queues for the pool and lands in the known keys'
# cache, whose upkeep past 100,000 entries is an O(n) retain under a mutex on every insert).
# Three runs, each on a fresh native lab (a gateway that has seen no tenant yet), two open-loop
# `labctl load` generators each: FLOOD_RATE rps of never-seen key ids (`--keys unknown`, from the
# start) and, from LEAD s in until LEAD s before the flood ends, TENANT_RATE rps of real tenants'
# documents (uniform over the seed's 200 tenants, so every tenant's first request to this gateway
# arrives during the flood):
#
#   baseline   guard on,  real tenants only
#   guarded    guard on,  real tenants + FLOOD_RATE rps of random key ids
#   unguarded  guard off, the same
#
# and a report (docs/reports/flood.md with --publish): each run's real-tenant goodput (200 within
# the 3 s budget) overall and for each tenant's first request, their p50/p99, what the flood got
# back at what rate it was really sent, and the gateway's auth decisions and CPU.
#
# Bounded: 3 runs of DURATION seconds (default 90: at 5,000 rps, issue 28's rate, 450,000 new
# ids, past the old cache's 100,000-entry bound) to 127.0.0.1 only, on ports of its own (16xxx;
# admin 17xxx), its own database (retry_storm_lab_flood, seeded --small once) and state dir; the
# lab and the generators are stopped on every exit path. ~6 minutes. Needs the release build
# (cargo build --release --bins).
#
# Env: CARGO_TARGET_DIR, LAB_TOOLS_DIR, TENANT_RATE (100), FLOOD_RATE (5000), DURATION (90),
#      FLOOD_OUT (output dir).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=flood
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die, LAB_TOOLS_DIR, lab_admin_urls

PUBLISH=0
[[ "${1:-}" == "--publish" ]] && PUBLISH=1
TENANT_RATE="${TENANT_RATE:-100}"
FLOOD_RATE="${FLOOD_RATE:-5000}"
DURATION="${DURATION:-90}"
if ! [[ "$DURATION" =~ ^[0-9]+$ ]] || ((DURATION < 30)); then
    die "DURATION is whole seconds, at least 30 (got '$DURATION')"
fi
# The tenants start LEAD s after the flood and stop LEAD s before it: all of their traffic, first
# requests included, meets the flood at its full rate (a generator reaches its rate in well under
# a second; 5 s is room for a slow start on a busy machine).
LEAD=5
BIN="${CARGO_TARGET_DIR:-target}/release"
DB="postgres://postgres@127.0.0.1:5432/retry_storm_lab_flood"
DATA="$LAB_TOOLS_DIR/flood-data"
OUT="${FLOOD_OUT:-${LAB_STATE_DIR:-.lab}/reports/flood-$(date +%s)}"
STATE="$(mktemp -d /tmp/flood-check.XXXXXX)"
GW=16080 ORCH=16101 ENT=16201
mkdir -p "$OUT"
rm -f "$OUT"/*-flood.json "$OUT"/*-tenants.json   # a reused FLOOD_OUT: no run reads another's files
[[ -x "$BIN/labctl" ]] || die "build first: cargo build --release --bins"

LABCTL=("$BIN/labctl" --database-url "$DB" --state-dir "$STATE" --data-dir "$DATA")
FLOOD_PID=""
cleanup() {
    if [[ -n "$FLOOD_PID" ]]; then kill "$FLOOD_PID" 2>/dev/null || true; fi
    "${LABCTL[@]}" down >/dev/null 2>&1 || true
    rm -rf "$STATE"
}
trap cleanup EXIT
"${LABCTL[@]}" seed --small --if-empty >"$OUT/seed.log" 2>&1 || { cat "$OUT/seed.log"; die "seed failed"; }

# metrics FILE: the gateway's auth decisions and process CPU, from its admin listener (GW_ADMIN: the
# address this lab's labctl reports in `status --json`, read after each `up`).
GW_ADMIN=""
metrics() { curl -sf --max-time 5 "$GW_ADMIN/metrics" >"$1" || die "gateway /metrics"; }

# run NAME GUARD FLOOD_RATE
run() {
    local name="$1" guard="$2" flood="$3"
    say "$name: fresh lab (auth.flood_guard=$guard), $TENANT_RATE rps of real tenants + $flood rps of unknown keys for $DURATION s"
    "${LABCTL[@]}" up --gateway-port $GW --orchestrator-port $ORCH --entity-port $ENT \
        --kafka '' --trace-sample 0 --bin-dir "$BIN" \
        --env "edge-gateway:LAB_AUTH__FLOOD_GUARD=$guard" >"$OUT/$name-up.log" 2>&1 ||
        { cat "$OUT/$name-up.log"; die "labctl up failed"; }
    GW_ADMIN="$(lab_admin_urls edge-gateway "${LABCTL[@]}")" || die "labctl status --json: no gateway admin URL"
    GW_ADMIN="${GW_ADMIN%%,*}"   # the one gateway `labctl up` starts by default
    # No warm-up: the gateway has seen no tenant (what a gateway restarted during a flood meets).
    metrics "$OUT/$name-before.prom"
    if ((flood > 0)); then
        "${LABCTL[@]}" load --gateway "http://127.0.0.1:$GW" --keys unknown --rate "$flood" \
            --duration "$DURATION" --out "$OUT/$name-flood.json" >"$OUT/$name-flood.log" 2>&1 &
        FLOOD_PID=$!
        sleep "$LEAD"
    fi
    "${LABCTL[@]}" load --gateway "http://127.0.0.1:$GW" --tenants uniform --docs corpus \
        --rate "$TENANT_RATE" --duration $((DURATION - 2 * LEAD)) \
        --out "$OUT/$name-tenants.json" >"$OUT/$name-tenants.log" 2>&1 ||
        { tail -n 20 "$OUT/$name-tenants.log"; die "$name: the tenants' load failed"; }
    if [[ -n "$FLOOD_PID" ]]; then
        local rc=0
        wait "$FLOOD_PID" || rc=$?
        FLOOD_PID=""
        ((rc == 0)) || { tail -n 20 "$OUT/$name-flood.log"; die "$name: the flood failed (exit $rc)"; }
    fi
    metrics "$OUT/$name-after.prom"
    "${LABCTL[@]}" down >/dev/null
}

run baseline true 0
run guarded true "$FLOOD_RATE"
run unguarded false "$FLOOD_RATE"

python3 "$HERE/lib/flood_report.py" "$OUT" "$TENANT_RATE" "$FLOOD_RATE" "$DURATION" >"$OUT/flood.md"
cat "$OUT/flood.md"
if ((PUBLISH)); then
    cp "$OUT/flood.md" docs/reports/flood.md
    say "published docs/reports/flood.md"
fi
