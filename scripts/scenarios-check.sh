#!/usr/bin/env bash
# scripts/scenarios-check.sh — every scenario file in load/scenarios run by one runner (issue 25):
# a native lab of its own (debug build, as the tests build it) and `labctl scenarios check`, the
# engine every game day and the replay use, each file in both modes.
#
#   load/scenarios/*.yaml          smoke: shrunk to about SCENARIOS_SECONDS (8) at SCENARIOS_RATE
#                                  (20) rps; must complete, its actions succeed, its counts add up
#                                  (verdicts need full length: reported, not judged)
#   load/scenarios/faults/*.yaml   judged, at full length and the file's rate, --strict: a replica
#                                  killed, PostgreSQL restarted, every service rolled, Redis down
#                                  30 s, an enrichment worker killed mid-stream (see each file)
#
# The table: <out>/scenarios-check.md (printed); every run's page: <out>/index.html.
#
# Bounded: 2 runs per file (smoke ~SCENARIOS_SECONDS, judged 20-50 s), only to 127.0.0.1, on
# ports of its own (21xxx), its own database (retry_storm_lab_scenarios, seeded --small once) and
# state dir; the lab is stopped, Redis up again and the flags reset on every exit path. The judged
# runs restart the machine's PostgreSQL cluster and stop its Redis: run the script alone (CI runs
# it serially; by hand: flock -x /tmp/lab-heavy.lock scripts/scenarios-check.sh). It refuses to
# run while a native lab is up in .lab (same flags in the same Redis).
#
# Env: CARGO_TARGET_DIR, LAB_TOOLS_DIR, KAFKA_BOOTSTRAP (127.0.0.1:9092: the enrichment workers'
#      broker, which rollouts and enrichment-kill act on), SCENARIOS_OUT (default
#      .lab/reports/scenarios-check-<unix time>), SCENARIOS_SECONDS, SCENARIOS_RATE,
#      SCENARIOS_MODES ("resilient legacy"), SCENARIOS_KINDS ("smoke judged"; "judged": only the
#      fault scenarios), SCENARIOS_ONLY (file names without .yaml, e.g. "rollouts"),
#      SCENARIOS_FLAGS (flags held for every run, "name=variant ...", e.g.
#      "resilience.concurrency_adaptive=off" to judge the static limit), SCENARIOS_FAULT_RATE
#      (requests/s for every judged run instead of each file's own, e.g. 150 to stress a
#      comparison).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=scenarios
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die, LAB_TOOLS_DIR

SECONDS_EACH="${SCENARIOS_SECONDS:-8}"
RATE="${SCENARIOS_RATE:-20}"
OUT="${SCENARIOS_OUT:-.lab/reports/scenarios-check-$(date +%s)}"
GW=21080 ORCH=21101 ENT=21201 ENR=21301
KAFKA="${KAFKA_BOOTSTRAP:-127.0.0.1:9092}"

if ! [[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] || ((SECONDS_EACH < 2 || SECONDS_EACH > 120)); then
    die "SCENARIOS_SECONDS must be 2..120"
fi
# Lists as typed (words separated by any blanks), joined as labctl takes them; the values that
# can be checked here are, before the build and the lab.
csv() { local -a w; read -ra w <<<"$1"; local IFS=,; printf '%s' "${w[*]}"; }
MODES="$(csv "${SCENARIOS_MODES:-resilient legacy}")"
KINDS="$(csv "${SCENARIOS_KINDS:-smoke judged}")"
for m in ${MODES//,/ }; do [[ "$m" == resilient || "$m" == legacy ]] || die "SCENARIOS_MODES: $m? (resilient, legacy)"; done
for k in ${KINDS//,/ }; do [[ "$k" == smoke || "$k" == judged ]] || die "SCENARIOS_KINDS: $k? (smoke, judged)"; done
[[ -n "$MODES" && -n "$KINDS" ]] || die "SCENARIOS_MODES and SCENARIOS_KINDS need at least one value each"
ARGS=(--seconds "$SECONDS_EACH" --rate "$RATE" --modes "$MODES" --kinds "$KINDS")
if [[ -n "${SCENARIOS_ONLY:-}" ]]; then ARGS+=(--only "$(csv "$SCENARIOS_ONLY")"); fi
if [[ -n "${SCENARIOS_FAULT_RATE:-}" ]]; then ARGS+=(--fault-rate "$SCENARIOS_FAULT_RATE"); fi
for fl in ${SCENARIOS_FLAGS:-}; do
    [[ "$fl" == ?*=?* ]] || die "SCENARIOS_FLAGS: $fl? (name=variant)"
    ARGS+=(--flag "$fl")
done

# shellcheck source=lib/own_lab.sh
source "$HERE/lib/own_lab.sh"   # refuse_if_lab_up, own_lab_up
refuse_if_lab_up
own_lab_up scenarios $GW $ORCH $ENT $ENR "$KAFKA"
say "every scenario file in ${SCENARIOS_MODES:-both modes} (${ARGS[*]}; report: $OUT; log: $OUT.log)"
mkdir -p "$(dirname "$OUT")"
rc=0
"${LABCTL[@]}" scenarios check "${ARGS[@]}" --gateway "http://127.0.0.1:$GW" --out "$OUT" \
    >"$OUT.log" 2>&1 || rc=$?
# Each judged run's verdicts, one line each (the section its summary.md writes); the fault files
# are where labctl reads them (LAB_SCENARIO_DIR, default load/scenarios).
for f in "${LAB_SCENARIO_DIR:-load/scenarios}"/faults/*.yaml; do
    for m in ${MODES//,/ }; do
        sm="$OUT/$(basename "$f" .yaml)-$m/summary.md"
        [[ -f "$sm" ]] || continue
        printf "%s:\n" "$(basename "$(dirname "$sm")")"
        awk '/^Verdicts, phase by phase:/ { on = 1; next } on && /^- / { print "    " $0 }
             on && /^[A-Z]/ { on = 0 }' "$sm"
    done
done
if [[ -f "$OUT/scenarios-check.md" ]]; then cat "$OUT/scenarios-check.md"; fi
if ((rc != 0)); then
    tail -n 40 "$OUT.log" >&2
    die "a scenario run failed (exit $rc): see the table above, $OUT.log and $OUT/index.html"
fi
say "every scenario file ran: smoke runs completed with their counts adding up, every judged verdict held"
