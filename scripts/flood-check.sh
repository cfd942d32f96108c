#!/usr/bin/env bash
# scripts/flood-check.sh — real tenants' goodput through a flood of well-formed but unknown API
# keys, before and after the key store was bounded (issue 17, "unauthenticated floods").
#
# One binary, two key stores: `auth.flood_guard` (services/edge-gateway/src/auth.rs) is the fix
# (unknown ids in an O(1) negative cache of their own, at most 2 of the gateway's 4 key-store
# connections for never-seen ids, each waiting at most 200 ms) or, set false, the key store as it
# was (LAB-BUG(auth-flood): every unknown id queues for the pool and lands in the known keys'
# cache, whose upkeep past 100,000 entries is an O(n) retain under a mutex on every insert).
# Three k6 runs (load/k6/flood.js, open loop), each on a fresh native lab:
#
#   baseline   guard on,  real tenants only (a flood of 1 rps)
#   guarded    guard on,  real tenants + FLOOD_RATE rps of random key ids
#   unguarded  guard off, the same
#
# and a report (docs/reports/flood.md with --publish): each run's real-tenant goodput (200 within
# the 3 s budget), their p50/p99, what the flood got back, and the gateway's auth decisions.
#
# Bounded: 3 runs of DURATION (default 90 s: at 1,500 rps that is 135,000 new ids, past the old
# cache's 100,000-entry bound) to 127.0.0.1 only, on ports of its own (16xxx; admin 17xxx), its
# own database (retry_storm_lab_flood, seeded --small once) and state dir; the lab is stopped on
# every exit path. ~6 minutes. Needs the release build (cargo build --release --bins).
#
# Env: CARGO_TARGET_DIR, LAB_TOOLS_DIR, TENANT_RATE (100), FLOOD_RATE (1500), DURATION (90s),
#      FLOOD_OUT (output dir).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
say() { printf '[flood] %s\n' "$*"; }
die() { printf '[flood] ERROR: %s\n' "$*" >&2; exit 1; }

PUBLISH=0
[[ "${1:-}" == "--publish" ]] && PUBLISH=1
LAB_TOOLS_DIR="${LAB_TOOLS_DIR:-$HOME/.cache/retry-storm-lab/tools}"
TENANT_RATE="${TENANT_RATE:-100}"
FLOOD_RATE="${FLOOD_RATE:-1500}"
DURATION="${DURATION:-90s}"
BIN="${CARGO_TARGET_DIR:-target}/release"
DB="postgres://postgres@127.0.0.1:5432/retry_storm_lab_flood"
DATA="$LAB_TOOLS_DIR/flood-data"
OUT="${FLOOD_OUT:-${LAB_STATE_DIR:-.lab}/reports/flood-$(date +%s)}"
STATE="$(mktemp -d /tmp/flood-check.XXXXXX)"
GW=16080 ORCH=16101 ENT=16201
mkdir -p "$OUT"
[[ -x "$BIN/labctl" ]] || die "build first: cargo build --release --bins"

# shellcheck source=lib/k6.sh
source "$HERE/lib/k6.sh"
ensure_k6 || die "cannot install k6"

LABCTL=("$BIN/labctl" --database-url "$DB" --state-dir "$STATE" --data-dir "$DATA")
cleanup() {
    "${LABCTL[@]}" down >/dev/null 2>&1 || true
    rm -rf "$STATE"
}
trap cleanup EXIT
"${LABCTL[@]}" seed --small --if-empty >"$OUT/seed.log" 2>&1 || { cat "$OUT/seed.log"; die "seed failed"; }

# metrics FILE: the gateway's auth decisions and process CPU, from its admin listener.
metrics() { curl -sf --max-time 5 "http://127.0.0.1:$((GW + 1000))/metrics" >"$1" || die "gateway /metrics"; }

# run NAME GUARD FLOOD_RATE
run() {
    local name="$1" guard="$2" flood="$3"
    say "$name: fresh lab (auth.flood_guard=$guard), $TENANT_RATE rps of real tenants + $flood rps of unknown keys for $DURATION"
    "${LABCTL[@]}" up --gateway-port $GW --orchestrator-port $ORCH --entity-port $ENT \
        --kafka '' --trace-sample 0 --bin-dir "$BIN" \
        --env "edge-gateway:LAB_AUTH__FLOOD_GUARD=$guard" >"$OUT/$name-up.log" 2>&1 ||
        { cat "$OUT/$name-up.log"; die "labctl up failed"; }
    # Warm: every real tenant's key verified and cached, the orchestrators' caches past cold.
    "${LABCTL[@]}" load --gateway "http://127.0.0.1:$GW" --rate "$TENANT_RATE" --duration 15 \
        >"$OUT/$name-warm.log" 2>&1 || { tail -n 20 "$OUT/$name-warm.log"; die "warm-up failed"; }
    metrics "$OUT/$name-before.prom"
    TENANT_RATE="$TENANT_RATE" FLOOD_RATE="$flood" DURATION="$DURATION" DATA_DIR="$DATA" \
        GATEWAY="http://127.0.0.1:$GW" "$K6" run --quiet --no-color \
        --summary-export "$OUT/$name-k6.json" load/k6/flood.js >"$OUT/$name-k6.log" 2>&1 ||
        { tail -n 30 "$OUT/$name-k6.log"; die "$name: k6 failed"; }
    metrics "$OUT/$name-after.prom"
    "${LABCTL[@]}" down >/dev/null
}

run baseline true 1
run guarded true "$FLOOD_RATE"
run unguarded false "$FLOOD_RATE"

python3 - "$OUT" "$TENANT_RATE" "$FLOOD_RATE" "$DURATION" >"$OUT/flood.md" <<'PY'
import json, re, sys
out, tenant_rate, flood_rate, duration = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

def prom(path):
    m = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
    return m

def delta(name, a, b, label=None):
    tot = {}
    for k, v in b.items():
        if not k.startswith(name):
            continue
        lab = re.search(rf'{label}="([^"]*)"', k).group(1) if label else ""
        tot[lab] = tot.get(lab, 0) + v - a.get(k, 0)
    return tot

rows, auth_rows = [], []
for name, what in [("baseline", "guard on, no flood"), ("guarded", "guard on (the fix)"),
                   ("unguarded", "guard off (LAB-BUG)")]:
    k = json.load(open(f"{out}/{name}-k6.json"))["metrics"]
    c = lambda n: k.get(n, {}).get("count", 0)
    t = k.get("http_req_duration{name:tenant}", {})
    f = k.get("http_req_duration{name:flood}", {})
    a, b = prom(f"{out}/{name}-before.prom"), prom(f"{out}/{name}-after.prom")
    auth = delta("gateway_auth_total", a, b, "result")
    cpu = sum(delta("process_cpu_seconds_total", a, b).values())
    statuses = ", ".join(f"{s}: {int(c(f'flood_status_{s}'))}" for s in
                         ["200", "401", "429", "503", "504", "0", "other"] if c(f"flood_status_{s}"))
    sent, ok = c("tenant_sent"), c("tenant_ok")
    rows.append(f"| {name} | {what} | {int(c('flood_sent'))} | {int(sent)} | "
                f"{100 * ok / max(sent, 1):.2f}% | {t.get('p(50)', 0):.0f} | {t.get('p(99)', 0):.0f} | "
                f"{f.get('p(99)', 0):.0f} | {statuses or '-'} | {cpu:.1f} |")
    auth_rows.append(f"| {name} | " + " | ".join(str(int(auth.get(r, 0))) for r in
                     ["ok", "stale", "refused", "busy", "unavailable", "malformed"]) + " |")

print(f"""# Real tenants through a flood of unknown API keys

`scripts/flood-check.sh`: {tenant_rate} rps of real tenants' documents and {flood_rate} rps of
well-formed, never-seen key ids (`rsl_<random>_<random>`), both open loop (k6, load/k6/flood.js),
for {duration}, each run on a fresh native lab (release build, `--small` seed, 1 gateway with
its 4 key-store connections, 2 orchestrators, 2 entity-services). Goodput: 200 within the 3 s
budget, per real request sent. Every number below is measured by that run.

| run | key store | flood sent | tenant requests | tenant goodput | tenant p50 ms | tenant p99 ms | flood p99 ms | what the flood got | gateway CPU s |
|---|---|---:|---:|---:|---:|---:|---:|---|---:|
""" + "\n".join(rows) + """

The gateway's authentication decisions during each run (`gateway_auth_total` by result):

| run | ok | stale | refused | busy | unavailable | malformed |
|---|---:|---:|---:|---:|---:|---:|
""" + "\n".join(auth_rows) + """

`refused`: looked up and not a key (401); `busy`: a never-seen id refused after waiting 200 ms for
one of the 2 lookups such ids may make at once (503); `stale`: a real tenant's key verified from
its cached answer because re-verifying it failed or took over 200 ms.
""")
PY
cat "$OUT/flood.md"
if ((PUBLISH)); then
    cp "$OUT/flood.md" docs/reports/flood.md
    say "published docs/reports/flood.md"
fi
