#!/usr/bin/env bash
# scripts/chain-limit.sh — issue 17, "the chain against its physical limit", as `labctl chain-limit`
# (crates/lab-experiment/src/chain_limit/): pgbench with the lab down (-S in a scratch database, then
# the lab's hot statement), a fresh native lab left idle (CPU per process), warmed and stepped up
# open loop to its maximum sustainable rate, the ratio of the two, the whole machine's CPU by
# process (the broker's share at each step) and perf profiles at that rate. This script only takes
# the heavy lock, checks the build and runs labctl; docs/reports/chain-limit.md is one run's report.
#
#   scripts/chain-limit.sh                  # ~8 min under the lock; report in .lab/reports/chain-limit-<ts>/
#   scripts/chain-limit.sh --publish        # and copy it to docs/reports/chain-limit.md and data/chain-limit.json
#   scripts/chain-limit.sh --report-only DIR [--publish]   # redraw a run's report, no measuring, no lock
#   scripts/chain-limit.sh --rates "300 600" --step-seconds 8   # any flag of `labctl chain-limit --help`
#
# Env knobs (each is also a flag): CHAIN_RATES ("600 800 1000 1200 1400 1600"), CHAIN_STEP_SECONDS
#   (20), CHAIN_WARMUP_RATE (500), CHAIN_WARMUP_SECONDS (60), CHAIN_P99_MS (250), CHAIN_OK_PCT (99),
#   CHAIN_PGBENCH_CLIENTS ("2 4 8"), CHAIN_PGBENCH_SECONDS (15), CHAIN_PGBENCH_SCALE (10),
#   CHAIN_PGBENCH_DB (chain_limit_pgbench), CHAIN_PROFILE_SECONDS (15), CHAIN_PERF_HZ (499),
#   CHAIN_HOT_PER_TXN (8), CHAIN_IDLE_SETTLE_SECONDS (30), CHAIN_IDLE_SECONDS (60), CHAIN_OUT;
#   here only: CHAIN_KAFKA (default KAFKA_BOOTSTRAP; '' runs the lab without Kafka and
#   enrichment), CHAIN_UP_ARGS (extra `labctl up` flags), CHAIN_LOCK (/tmp/lab-heavy.lock);
#   CARGO_TARGET_DIR, LAB_DATABASE_URL, LAB_STATE_DIR.
#
# Bounded: every load is open loop, time-bounded and sent to 127.0.0.1 only; labctl stops the lab
# and drops pgbench's scratch database on every exit path. Needs the release build and a seeded
# database (scripts/lab.sh does both); refuses to run while another native lab is up.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=chain-limit
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die

LABCTL="${CARGO_TARGET_DIR:-target}/release/labctl"
[[ -x "$LABCTL" ]] || die "no $LABCTL" "cargo build --release --bins"
"$LABCTL" chain-limit --help > /dev/null 2>&1 ||
    die "$LABCTL has no chain-limit verb (an older build)" "cargo build --release --bins"

ARGS=("$@")
if [[ -n "${CHAIN_KAFKA+set}" ]]; then ARGS+=(--kafka "$CHAIN_KAFKA"); fi
# shellcheck disable=SC2206  # CHAIN_UP_ARGS is a list of flags
ARGS+=(${CHAIN_UP_ARGS:-})

# Redrawing measures nothing: no lock.
if [[ " $* " == *" --report-only "* ]]; then exec "$LABCTL" chain-limit "${ARGS[@]}"; fi

LOCK="${CHAIN_LOCK:-/tmp/lab-heavy.lock}"
say "waiting for the lock $LOCK (other labs, loads and builds take turns)"
exec 9>>"$LOCK"
flock -x 9
say "lock held"
exec "$LABCTL" chain-limit "${ARGS[@]}"
