#!/usr/bin/env bash
# scripts/schemathesis.sh — fuzz a real edge-gateway against the OpenAPI document it serves.
#
# 1. Installs schemathesis (pinned) into a venv under $LAB_TOOLS_DIR/venvs (once; idempotent).
# 2. Starts the in-process lab (tests/lab-e2e/examples/schemathesis_lab.rs): gateway,
#    orchestrator and entity-service on 127.0.0.1 over a fresh database on the local PostgreSQL,
#    rate limiting in the local Redis, one tenant with an API key and a plan rate the fuzzer
#    cannot reach.
# 3. Runs schemathesis against GET /openapi.json with that key: every check that applies to a
#    stateless API, --max-examples per operation, bounded by --max-time and `timeout`.
# 4. Prints what the gateway counted (gateway_requests_total by status) and fails on any 5xx
#    or on any schemathesis failure. The lab is stopped (SIGTERM, by pid) on every exit path.
#
# Usage: scripts/schemathesis.sh
# Env: DATABASE_URL, REDIS_URL (defaults: the local services scripts/deps.sh runs)
#      LAB_TOOLS_DIR         where the venv lives (default ~/.cache/retry-storm-lab/tools)
#      LAB_PYTHON            python used to create the venv (default: python3 on PATH)
#      SCHEMATHESIS_EXAMPLES test cases per operation (default 1000)
#      SCHEMATHESIS_SEED     generation seed (default 20261129: reproducible runs)
#      SCHEMATHESIS_MAX_TIME seconds schemathesis may run (default 480)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/.." && pwd)"
cd "$REPO_ROOT"

LOG_TAG=schemathesis
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # step, die, find_python, venv_install, cargo_on_path, LAB_TOOLS_DIR

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
# 1000 per operation: POST /v1/extract is the only operation with inputs, so it alone gets
# ~1000 generated requests; the probes have none and exhaust after a handful.
EXAMPLES="${SCHEMATHESIS_EXAMPLES:-1000}"
SEED="${SCHEMATHESIS_SEED:-20261129}"
MAX_TIME="${SCHEMATHESIS_MAX_TIME:-480}"

# Pinned: a new schemathesis adds checks and changes its CLI; bump deliberately.
ST_VERSION="4.32.5"
ST_VENV="$LAB_TOOLS_DIR/venvs/schemathesis-$ST_VERSION"

# --- 1. schemathesis --------------------------------------------------------------------------
st_version() {
    "$ST_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null
}

mkdir -p "$LAB_TOOLS_DIR/venvs"
exec 8>"$LAB_TOOLS_DIR/.schemathesis.lock"
flock -w 600 8 || die "timed out waiting for $LAB_TOOLS_DIR/.schemathesis.lock"
if [[ "$(st_version)" == "$ST_VERSION" ]] && [[ -x "$ST_VENV/bin/st" ]]; then
    step "schemathesis $ST_VERSION: installed ($ST_VENV)"
else
    py="$(find_python)" || die "no python3 that can create a venv (import venv, ensurepip)" \
        "apt-get install python3-venv, or set LAB_PYTHON=/path/to/python3"
    step "installing schemathesis==$ST_VERSION into $ST_VENV"
    venv_install "$py" "$ST_VENV" "schemathesis==$ST_VERSION" ||   # a half-made venv is rebuilt
        die "pip install schemathesis==$ST_VERSION failed (output above)" \
            "check access to the Python package index (pip config list)"
    [[ "$(st_version)" == "$ST_VERSION" ]] || die "schemathesis did not install as $ST_VERSION"
fi
flock -u 8

# --- 2. the lab -------------------------------------------------------------------------------
cargo_on_path
step "building the lab (cargo build -p lab-e2e --example schemathesis_lab)"
cargo build -q -p lab-e2e --example schemathesis_lab
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps |
    "$ST_VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
LAB_BIN="$TARGET_DIR/debug/examples/schemathesis_lab"
[[ -x "$LAB_BIN" ]] || die "no lab binary at $LAB_BIN"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/schemathesis.XXXXXX")"
LAB_PID=""
cleanup() {
    local rc=$?
    if [[ -n "$LAB_PID" ]] && kill -0 "$LAB_PID" 2>/dev/null; then
        kill -TERM "$LAB_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$LAB_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$LAB_PID" 2>/dev/null || true
        wait "$LAB_PID" 2>/dev/null || true
    fi
    if ((rc != 0)) && [[ -s "$WORK/lab.log" ]]; then
        step "last lines of the lab's log:"; tail -n 20 "$WORK/lab.log" >&2
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The lab stops by itself after MAX_TIME + 120 s even if this script is killed without a trap.
# Quiet logs: the fuzzer's 4xx are expected, and the log is only shown on failure.
RUST_LOG="${RUST_LOG:-warn}" "$LAB_BIN" --max-seconds "$((MAX_TIME + 120))" \
    >"$WORK/lab.out" 2>"$WORK/lab.log" &
LAB_PID=$!
GATEWAY_URL="" GATEWAY_ADMIN_URL="" API_KEY=""
for _ in $(seq 1 600); do
    GATEWAY_URL="$(sed -n 's/^GATEWAY_URL=//p' "$WORK/lab.out")"
    GATEWAY_ADMIN_URL="$(sed -n 's/^GATEWAY_ADMIN_URL=//p' "$WORK/lab.out")"
    API_KEY="$(sed -n 's/^API_KEY=//p' "$WORK/lab.out")"
    [[ -n "$GATEWAY_URL" && -n "$API_KEY" ]] && break
    kill -0 "$LAB_PID" 2>/dev/null || die "the lab exited before serving (log above)" \
        "is PostgreSQL ($DATABASE_URL) and Redis ($REDIS_URL) running? scripts/deps.sh starts them"
    sleep 0.1
done
[[ -n "$GATEWAY_URL" ]] || die "the lab did not print its URL within 60 s"
[[ "$GATEWAY_URL" == http://127.0.0.1:* ]] || die "refusing to fuzz a non-loopback URL: $GATEWAY_URL"
step "lab up: $GATEWAY_URL"

# --- 3. schemathesis --------------------------------------------------------------------------
# Checks: everything that applies to a stateless API. Left out, with why:
#   use_after_free, ensure_resource_availability, object_level_authorization: need resources
#   created and deleted through the API; this API has none.
CHECKS="not_a_server_error,status_code_conformance,content_type_conformance"
CHECKS+=",response_headers_conformance,response_schema_conformance,negative_data_rejection"
CHECKS+=",positive_data_acceptance,missing_required_header,unsupported_method"
CHECKS+=",allow_header_conformance,ignored_auth"
# A body over 1 MiB is refused 413 before it is parsed: a correct rejection of invalid data that
# schemathesis' default list for negative_data_rejection lacks.
cat >"$WORK/schemathesis.toml" <<'TOML'
[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
TOML
step "schemathesis $ST_VERSION: $EXAMPLES examples per operation, seed $SEED, at most $MAX_TIME s"
t0=$SECONDS
st_rc=0
# cwd in $WORK: schemathesis and hypothesis write their caches where they run.
# No --max-time: with it, fuzzing repeats until the time is spent; `timeout` bounds the run.
(cd "$WORK" && timeout --kill-after=10 "$MAX_TIME" \
    "$ST_VENV/bin/st" --config-file "$WORK/schemathesis.toml" run "$GATEWAY_URL/openapi.json" \
        --url "$GATEWAY_URL" \
        --header "Authorization: Bearer $API_KEY" \
        --checks "$CHECKS" \
        --max-examples "$EXAMPLES" \
        --seed "$SEED" \
        --workers 2 \
        --request-timeout 10 \
        --generation-database none \
        --report ndjson --report-dir "$WORK/report" \
        --no-color) || st_rc=$?
elapsed=$((SECONDS - t0))

# --- 4. what the gateway saw ------------------------------------------------------------------
metrics="$(curl -sf --max-time 5 "$GATEWAY_ADMIN_URL/metrics" || true)"
# gateway_requests_total{...,status="200"} 123 → "200 123", summed per status.
dist="$(printf '%s\n' "$metrics" | awk '
    /^gateway_requests_total\{/ {
        if (match($0, /status="[0-9]+"/)) {
            s = substr($0, RSTART + 8, RLENGTH - 9); n[s] += $NF
        }
    }
    END { for (s in n) printf "%s %d\n", s, n[s] }' | sort)"
total="$(awk '{t += $2} END {print t + 0}' <<<"$dist")"
server_errors="$(awk '$1 >= 500 {t += $2} END {print t + 0}' <<<"$dist")"
step "POST /v1/extract as counted by the gateway: $total requests in ${elapsed} s"
while read -r s n; do [[ -n "$s" ]] && step "  status $s: $n"; done <<<"$dist"

((st_rc == 0)) || die "schemathesis reported failures (exit $st_rc; output above)" \
    "a 5xx is a gateway bug; a conformance failure means openapi.json and the code disagree"
((total > 0)) || die "the gateway counted no /v1/extract requests"
((server_errors == 0)) || die "$server_errors requests were answered 5xx"
step "ok: no 5xx, every check passed"
