#!/usr/bin/env bash
# scripts/ratelimit-storm.sh — issue 28: does the per-tenant rate limit hold a tenant over its
# plan through the legacy storm? Under the storm's CPU load the gateway's Redis call misses its
# 50 ms deadline a quarter of the time, and each gateway replica then decides on its own bucket
# (`decision=local_*`); before that it failed open.
#
# One legacy replay (`labctl replay --mode legacy`, scripts/lab.sh's short timings, its own
# calibration) and, through the whole incident, one trial tenant (plan: 10 rps) sending OVER x
# its plan, open loop (`labctl load --tenant T --docs corpus`). Then a report
# (`scripts/lib/ratelimit_storm_report.py`): the tenant's answers and the rate admitted against its
# plan, and per phase of the replay the gateway's rate-limit decisions (Redis or the replica's own
# bucket) and refusals. The other tenants are the replay's own traffic, each within its plan.
#
# Bounded: ~8 min (calibration, the incident, the lab's start and stop), 127.0.0.1 only; the
# replay stops its lab and the tenant's load stops by itself (and is killed on any exit). Needs
# the release build and a seeded database (scripts/lab.sh does both).
# Env: CARGO_TARGET_DIR, OVER (3), RL_OUT (output dir), LAB_REPLAY_ARGS (as scripts/lab.sh).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=ratelimit
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die
BIN="${CARGO_TARGET_DIR:-target}/release"
LABCTL="$BIN/labctl"
[[ -x "$LABCTL" ]] || die "build first: cargo build --release --bins"
OVER="${OVER:-3}"
OUT="${RL_OUT:-${LAB_STATE_DIR:-.lab}/reports/ratelimit-storm-$(date +%s)}"
REPLAY_ARGS="${LAB_REPLAY_ARGS:---time-scale 0.4 --warmup-seconds 30 --probe-seconds 15}"
DATA="${LAB_DATA_DIR:-.lab/data}"
mkdir -p "$OUT"

# The trial tenant with the most documents in the corpus (its documents are what it sends).
read -r TENANT PLAN_RPS < <(psql "${LAB_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/retry_storm_lab}" \
    -AtF ' ' -c "SELECT id, rate_limit_rps FROM tenants WHERE plan = 'trial'" |
    python3 -c '
import collections, json, sys
plans = dict(l.split() for l in sys.stdin if l.strip())
docs = collections.Counter(str(json.loads(l)["tenant_id"]) for l in open(sys.argv[1]) if l.strip())
t = max(plans, key=lambda t: docs[t])
print(t, plans[t]) if docs[t] else sys.exit("no trial tenant has documents in the corpus")
' "$DATA/corpus.jsonl") || die "cannot pick a trial tenant (is the database seeded? scripts/lab.sh seeds it)"
RATE=$((OVER * PLAN_RPS))
say "tenant $TENANT (plan $PLAN_RPS rps) will send $RATE rps through the legacy incident"

LOAD_PID=""
# shellcheck disable=SC2317  # called by the trap
cleanup() { if [[ -n "$LOAD_PID" ]]; then kill "$LOAD_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT
# shellcheck disable=SC2086  # REPLAY_ARGS is a list of arguments
"$LABCTL" replay --mode legacy --out "$OUT/replay" $REPLAY_ARGS >"$OUT/replay.log" 2>&1 &
REPLAY_PID=$!
# The incident starts after the calibration: its line in the log, then the tenant for as long as
# the incident runs (its phases stretch when a rollout ends after its step, so the load is given
# twice the nominal length and stopped when the incident ends).
for _ in $(seq 1800); do
    grep -q '^incident in legacy mode' "$OUT/replay.log" && break
    kill -0 "$REPLAY_PID" 2>/dev/null || { tail -n 30 "$OUT/replay.log"; die "the replay ended before its incident"; }
    sleep 0.5
done
grep -q '^incident in legacy mode' "$OUT/replay.log" || die "no incident within 15 min"
SECONDS_NOMINAL="$(sed -En 's/^incident in legacy mode: [0-9]+ phases, ([0-9]+) s.*/\1/p' "$OUT/replay.log")"
"$LABCTL" load --gateway http://127.0.0.1:8080 --tenant "$TENANT" --docs corpus --rate "$RATE" \
    --duration $((SECONDS_NOMINAL * 2)) --out "$OUT/tenant.json" >"$OUT/tenant.log" 2>&1 &
LOAD_PID=$!
# The incident ends where the replay names its worst trace and stops the lab: the tenant stops
# there too (SIGTERM: `labctl load` ends its arrivals, awaits what is in flight, writes its report).
# (Only the lines after the incident's start: the calibration stops a lab of its own before it.)
while kill -0 "$REPLAY_PID" 2>/dev/null &&
    ! sed -n '/^incident in legacy mode/,$p' "$OUT/replay.log" | grep -qE '^(worst trace|lab is down)'; do
    sleep 0.5
done
kill -TERM "$LOAD_PID" 2>/dev/null || true
wait "$LOAD_PID" || true
LOAD_PID=""
rc=0
wait "$REPLAY_PID" || rc=$?
# The replay checks that its counts add up, gateway requests = its own load's answers; the
# tenant's requests are traffic its load did not send, so that check fails by design (exit 1,
# report written). Any other failure is one.
if ((rc != 0)); then
    if [[ -s "$OUT/replay/summary.json" ]] && grep -q "this run's counts do not add up" "$OUT/replay.log"; then
        say "the replay's consistency check counted the tenant's requests as other traffic (expected)"
    else
        tail -n 30 "$OUT/replay.log"
        die "the replay failed (exit $rc)"
    fi
fi
[[ -s "$OUT/tenant.json" ]] || { tail -n 20 "$OUT/tenant.log"; die "the tenant's load wrote no report"; }
python3 "$HERE/lib/ratelimit_storm_report.py" extract "$OUT" "$TENANT" "$PLAN_RPS" "$RATE" >"$OUT/ratelimit-storm.json"
python3 "$HERE/lib/ratelimit_storm_report.py" render "$OUT/ratelimit-storm.json" >"$OUT/ratelimit-storm.md"
cat "$OUT/ratelimit-storm.md"
