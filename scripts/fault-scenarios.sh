#!/usr/bin/env bash
# scripts/fault-scenarios.sh — the fault scenarios (load/scenarios/faults/*.yaml), judged: each
# file in both modes through `labctl gameday --strict`, the engine every game day and replay
# uses. A verdict that did not hold or was not measured, or an action of a timeline that failed,
# fails the script; the numbers are in each run's summary.md, and index.html lists them all.
#
#   replica-killed     fault kill entity-service-1 under load: no request lost once it is back
#   postgres-restart   fault restart postgres under load: the pools heal by themselves, the
#                      last seconds lose nothing, no lab process restarts
#   rollouts           rollout restart of every service under load: the fixed client loses no
#                      request through the orchestrator, entity-service and enrichment rollouts
#   redis-outage       fault stop redis for 30 s under load: every replica keeps its flags, the
#                      limiter fails open, no request fails, a flag set meanwhile is refused and
#                      one set after reaches every replica
#   enrichment-kill    fault kill enrichment-1 mid-stream: once the lag is 0, every 200 has
#                      exactly one enrichment row
#
# Bounded: 2 runs per file of 20-50 s each at the file's rate (50 rps), only to 127.0.0.1, on ports
# of its own (25xxx), its own database (retry_storm_lab_faults, seeded --small once) and state
# dir; the lab is stopped and Redis up again on every exit path. postgres-restart restarts the
# machine's PostgreSQL cluster and redis-outage stops its Redis: run the script alone (CI runs
# it serially; by hand: flock -x /tmp/lab-heavy.lock scripts/fault-scenarios.sh). It refuses to
# run while a native lab is up in .lab (same flags).
#
# Env: CARGO_TARGET_DIR, LAB_TOOLS_DIR, KAFKA_BOOTSTRAP (127.0.0.1:9092), FAULT_SCENARIOS_OUT (default
#      .lab/reports/fault-scenarios-<unix time>), FAULT_SCENARIOS_MODES ("resilient legacy"),
#      FAULT_SCENARIOS_ONLY (file names without .yaml, e.g. "redis-outage"; default: every file),
#      FAULT_SCENARIOS_FLAGS (flags held for every run, "name=variant ...", e.g.
#      "resilience.concurrency_adaptive=off" to compare the static limit; default: none),
#      FAULT_SCENARIOS_RATE (requests/s for every run instead of each file's own, e.g. 150 to
#      stress a comparison; default: the file's).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=fault-scenarios
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # say, die, LAB_TOOLS_DIR

OUT="${FAULT_SCENARIOS_OUT:-.lab/reports/fault-scenarios-$(date +%s)}"
MODES="${FAULT_SCENARIOS_MODES:-resilient legacy}"
GW=25080 ORCH=25101 ENT=25201 ENR=25301
KAFKA="${KAFKA_BOOTSTRAP:-127.0.0.1:9092}"   # the enrichment workers' broker (rollouts roll them)
for m in $MODES; do [[ "$m" == resilient || "$m" == legacy ]] || die "FAULT_SCENARIOS_MODES: $m?"; done
shopt -s nullglob
FILES=(load/scenarios/faults/*.yaml)
if [[ -n "${FAULT_SCENARIOS_ONLY:-}" ]]; then
    FILES=()
    for n in $FAULT_SCENARIOS_ONLY; do
        [[ -f "load/scenarios/faults/$n.yaml" ]] || die "FAULT_SCENARIOS_ONLY: no load/scenarios/faults/$n.yaml"
        FILES+=("load/scenarios/faults/$n.yaml")
    done
fi
((${#FILES[@]} > 0)) || die "no scenario file in load/scenarios/faults/"

# shellcheck source=lib/own_lab.sh
source "$HERE/lib/own_lab.sh"   # refuse_if_lab_up, own_lab_up
refuse_if_lab_up
own_lab_up faults $GW $ORCH $ENT $ENR "$KAFKA"
mkdir -p "$OUT"
FLAG_ARGS=()
if [[ -n "${FAULT_SCENARIOS_RATE:-}" ]]; then
    [[ "$FAULT_SCENARIOS_RATE" =~ ^[0-9]+$ && "$FAULT_SCENARIOS_RATE" -ge 1 && "$FAULT_SCENARIOS_RATE" -le 1000 ]] ||
        die "FAULT_SCENARIOS_RATE: $FAULT_SCENARIOS_RATE? (1..1000 requests/s)"
    FLAG_ARGS+=(--rate "$FAULT_SCENARIOS_RATE")
fi
for fl in ${FAULT_SCENARIOS_FLAGS:-}; do
    [[ "$fl" == *=* ]] || die "FAULT_SCENARIOS_FLAGS: $fl? (name=variant)"
    FLAG_ARGS+=(--flag "$fl")
done
say "${#FILES[@]} fault scenario(s) × modes: $MODES${FAULT_SCENARIOS_FLAGS:+ (flags: $FAULT_SCENARIOS_FLAGS)}${FAULT_SCENARIOS_RATE:+ (rate: $FAULT_SCENARIOS_RATE/s)} (report: $OUT)"
failed=()
# A seed per run and per invocation: every run sends documents no earlier run sent (on this lab,
# whose caches would otherwise hold them, and in its database, whose enrichment rows
# enrichment-kill counts as the run's own).
SEED=$(( ($(date +%s) % 10000000) * 100 ))   # < 10^9: doc indexes stay within bigint
for f in "${FILES[@]}"; do
    name="$(basename "$f" .yaml)"
    for mode in $MODES; do
        run="$OUT/$name-$mode"
        rc=0
        SEED=$((SEED + 1))
        "${LABCTL[@]}" gameday "$f" --mode "$mode" --strict --gateway "http://127.0.0.1:$GW" \
            --seed "$SEED" ${FLAG_ARGS[@]+"${FLAG_ARGS[@]}"} --out "$run" >"$run.log" 2>&1 || rc=$?
        if [[ -f "$run/summary.md" ]]; then
            # The verdicts, one line each (the section the game day writes).
            awk '/^Verdicts, phase by phase:/ { on = 1; next } on && /^- / { print "    " $0 }
                 on && /^[A-Z]/ { on = 0 }' "$run/summary.md"
        fi
        if ((rc != 0)); then
            failed+=("$name/$mode")
            tail -n 20 "$run.log" >&2
            say "$name $mode: FAILED (exit $rc; $run.log)"
        else
            say "$name $mode: every verdict held"
        fi
    done
done
"${LABCTL[@]}" report "$OUT" >/dev/null || true   # index.html over the runs
((${#failed[@]} == 0)) || die "fault scenarios failed: ${failed[*]} (above; $OUT/index.html)"
say "every fault scenario held in every mode ($OUT/index.html)"
