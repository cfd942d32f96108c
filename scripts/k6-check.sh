#!/usr/bin/env bash
# scripts/k6-check.sh — a peer's load tool confirming the lab's own counters (issue 17): k6's
# open-loop run (load/k6/extract.js) against a real native lab whose entity-service fails every
# request, and its threshold, the postmortem's "downstream rps must never exceed 1.2x ingress":
#
#   resilient, shallow readiness  -> k6 passes   (one attempt per request, shed by the breaker)
#   legacy,    shallow readiness  -> k6 FAILS    (exit 99: gateway x orchestrator retries)
#   legacy,    deep readiness     -> k6 passes, amplification < 0.5: the other cascade — every
#                                    orchestrator evicted from the gateway's rotation, so
#                                    nothing reaches entity-service at all
#
# Bounded: 3 runs of DURATION (default 15 s) at RATE (default 20 rps) on 127.0.0.1 only, on
# ports of its own (18xxx), its own database (retry_storm_lab_k6, seeded --small once) and
# state dir; the lab is stopped on every exit path. It shares Redis's flag namespace with a
# native lab, so it refuses to run while one is up in .lab.
#
# Env: CARGO_TARGET_DIR, LAB_TOOLS_DIR (venvs; default ~/.cache/retry-storm-lab/tools),
#      K6_RATE, K6_DURATION, LAB_PYTHON.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=k6
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die, LAB_TOOLS_DIR, lab_admin_urls

RATE="${K6_RATE:-20}"
DURATION="${K6_DURATION:-15s}"
GW=18080 ORCH=18101 ENT=18201
# shellcheck source=lib/own_lab.sh
source "$HERE/lib/own_lab.sh"   # refuse_if_lab_up, own_lab_up
refuse_if_lab_up

# --- k6 -----------------------------------------------------------------------------------------
# shellcheck source=lib/k6.sh
source "$HERE/lib/k6.sh"
ensure_k6 || die "cannot install k6"
say "$("$K6" version | head -1)"

# --- the lab --------------------------------------------------------------------------------------
# The lab's flags live in the shared Redis: own_lab_up's exit trap resets them, or the next
# native lab would start in legacy mode with a dead dependency.
own_lab_up k6 $GW $ORCH $ENT
# Where k6 reads the counters: the admin URLs this lab's labctl reports (`status --json`).
GW_ADMIN="$(lab_admin_urls edge-gateway "${LABCTL[@]}")" || die "labctl status --json: no gateway admin URL"
ENT_ADMIN="$(lab_admin_urls entity-service "${LABCTL[@]}")" || die "labctl status --json: no entity-service admin URL"

# run_case NAME MODE READINESS EXPECT_RC RATIO_TEST
run_case() {
    local name="$1" mode="$2" depth="$3" want_rc="$4" ratio_test="$5" rc=0
    "${LABCTL[@]}" flags reset >/dev/null
    "${LABCTL[@]}" flags set client.mode "$mode" >/dev/null
    "${LABCTL[@]}" flags set readiness.depth "$depth" >/dev/null
    "${LABCTL[@]}" flags set fault.entity.error_fraction 1 >/dev/null
    # Flags reach every replica within their watch (<= 5 s); a deep probe needs a few more
    # seconds of failures before the gateway evicts a replica.
    sleep 8
    say "$name: k6 at $RATE rps for $DURATION, every entity-service request failing"
    RATE="$RATE" DURATION="$DURATION" FAILED_MAX=1 GATEWAY="http://127.0.0.1:$GW" \
        GATEWAY_METRICS="$GW_ADMIN" ENTITY_METRICS="$ENT_ADMIN" DATA_DIR="$LAB_TOOLS_DIR/k6-data" \
        "$K6" run --quiet --no-color load/k6/extract.js >"$OWN_LAB_STATE/$name.log" 2>&1 || rc=$?
    local ratio
    ratio="$(grep -o 'ingress [0-9]* = [0-9.]*x' "$OWN_LAB_STATE/$name.log" | grep -o '[0-9.]*x$' | tr -d x || true)"
    say "$name: k6 exit $rc, amplification ${ratio:-?}x (entity-service inbound / gateway ingress)"
    if [[ "$rc" != "$want_rc" ]] || [[ -z "$ratio" ]] ||
       ! python3 -c "import sys; r=float(sys.argv[1]); sys.exit(0 if ($ratio_test) else 1)" "$ratio"; then
        tail -n 40 "$OWN_LAB_STATE/$name.log" >&2
        die "$name: expected k6 exit $want_rc and amplification with ($ratio_test), got exit $rc and ${ratio:-nothing}"
    fi
}

run_case resilient-shallow resilient shallow 0 "r <= 1.2"
run_case legacy-shallow legacy shallow 99 "r > 1.2"
run_case legacy-deep legacy deep 0 "r < 0.5"
say "k6 agrees with the lab: resilient passes the postmortem's threshold, legacy fails it, and deep readiness hides the storm by evicting the fleet"
