#!/usr/bin/env bash
# scripts/alerts-gameday.sh — which alerts page during a game day, as a REAL Prometheus evaluates
# the lab's own rules against the native lab (issue 6: "alerts that fire in legacy mode and stay
# silent in resilient mode").
#
#   scripts/alerts-gameday.sh [scenario]      # default: dependency-dead-long (~30 min in all)
#
# 1. Installs the `prometheus` server (and promtool) from Debian's package, as
#    scripts/observability-check.sh does (shared code: scripts/lib/prometheus.sh).
# 2. Starts the native lab with `labctl up` unless one is up (and then stops it at the end).
# 3. Starts Prometheus on 127.0.0.1 (first free port from ALERTS_PROM_PORT, default 9099) with a
#    throw-away TSDB and deploy/prometheus/ copied as it is: prometheus.yml (5 s scrape and
#    evaluation), rules/*.yml, targets/native/*.json. A replica `labctl status` lists that no
#    native target file names (a file that lags behind `labctl up`) is added to the copy and
#    named in the report.
# 4. Before each run, a short warm-up load (caches start cold; a lab this script started is also
#    restarted before the second run), then `labctl gameday <scenario> --mode legacy`, then
#    `--mode resilient`, each started only once no alert is firing or pending, so one run's
#    alerts cannot leak into the next.
# 5. Queries /api/v1/query_range for ALERTS{alertstate="firing"} and {alertstate="pending"} over
#    each run's window and writes docs/reports/alerts-<scenario>.md (also printed): per alert,
#    when it went pending and fired relative to the fault phase, when it resolved, and why an
#    alert that did not fire did not (`for:` never completed, or the expression never held).
#
# Environment:
#   LAB_BIN_DIR            service binaries + labctl (default: $CARGO_TARGET_DIR/release, else
#                          ~/.cache/retry-storm-lab/target/release)
#   ALERTS_PROM_PORT       first port to try for Prometheus (default 9099; the next 20 are tried)
#   ALERTS_WARMUP_SECONDS  warm-up load (150 rps) before each run (default 60; 0 = none)
#   ALERTS_QUIET_TIMEOUT   max seconds to wait for every alert to clear before a run and after
#                          the last one (default 420: the rules' longest window is 5m)
#   ALERTS_REPORT_DIR      where the report goes (default docs/reports)
#   ALERTS_KEEP_DIR        where raw query results, Prometheus' log and the game-day logs are kept
#                          (default .lab/reports/alerts-<scenario>-<unix time>, git-ignored)
#
# Bounded: every wait has a timeout, each game day runs under `timeout` (scenario length + 3 min),
# and the EXIT trap stops what this script started (Prometheus; the lab if it started it; a game
# day interrupted mid-fault has its flags reset). Traffic goes to 127.0.0.1 only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"   # labctl's state (.lab) and data (.lab/data) are relative to the repo root
LOG_TAG=alerts-gameday LOG_FMT='==> %s\n' LOG_ERR='alerts-gameday: ' LOG_FD=2
# shellcheck source=lib/common.sh
source "$ROOT/scripts/lib/common.sh"       # say (on stderr), die, port_open
# shellcheck source=lib/prometheus.sh
source "$ROOT/scripts/lib/prometheus.sh"

SCENARIO="${1:-dependency-dead-long}"
BIN_DIR="${LAB_BIN_DIR:-${CARGO_TARGET_DIR:-${HOME:-/root}/.cache/retry-storm-lab/target}/release}"
LABCTL="$BIN_DIR/labctl"
PORT0="${ALERTS_PROM_PORT:-9099}"
WARMUP="${ALERTS_WARMUP_SECONDS:-60}"
QUIET_TIMEOUT="${ALERTS_QUIET_TIMEOUT:-420}"
REPORT_DIR="${ALERTS_REPORT_DIR:-docs/reports}"
KEEP="${ALERTS_KEEP_DIR:-.lab/reports/alerts-$SCENARIO-$(date +%s)}"

now() { printf '%s\n' "$EPOCHREALTIME"; }

[[ -x "$LABCTL" ]] || die "no labctl in $BIN_DIR (cargo build --release --bins, or set LAB_BIN_DIR)"
[[ -f "load/scenarios/$SCENARIO.yaml" ]] || die "no load/scenarios/$SCENARIO.yaml"
command -v curl >/dev/null || die "curl is needed to query Prometheus"
command -v python3 >/dev/null || die "python3 is needed to write the report"
command -v timeout >/dev/null || die "timeout (coreutils) is needed"

WORK="$(mktemp -d)"
mkdir -p "$KEEP"
PROM_PID=""
STARTED_LAB=0
IN_GAMEDAY=0
GD_PID=""
STAMP_PID=""

cleanup() {
  local rc=$?
  set +e
  [[ -n "$GD_PID" ]] && kill "$GD_PID" 2>/dev/null && wait "$GD_PID" 2>/dev/null
  [[ -n "$STAMP_PID" ]] && kill "$STAMP_PID" 2>/dev/null
  if ((IN_GAMEDAY)); then
    say "interrupted during a game day: resetting the runtime flags (the fault would stay on)"
    timeout 20 "$LABCTL" flags reset >/dev/null 2>&1
  fi
  if [[ -n "$PROM_PID" ]] && kill -0 "$PROM_PID" 2>/dev/null; then
    kill "$PROM_PID"
    for _ in $(seq 50); do kill -0 "$PROM_PID" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$PROM_PID" 2>/dev/null && kill -9 "$PROM_PID"
    cp "$WORK/prometheus.log" "$KEEP/" 2>/dev/null
  fi
  if ((STARTED_LAB)); then
    say "stopping the lab this script started"
    timeout 90 "$LABCTL" down >&2
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. tools -------------------------------------------------------------------------------
prom_install promtool prometheus || die "could not install prometheus from Debian's package"
PROMETHEUS="$(prom_tool_path prometheus)"
PROMTOOL="$(prom_tool_path promtool)"
say "$("$PROMETHEUS" --version 2>&1 | head -n1)"

# --- 2. the lab -----------------------------------------------------------------------------
if ! "$LABCTL" status --json 2>/dev/null | python3 scripts/lib/lab_status.py ready 2>/dev/null; then
  [[ -f .lab/data/api-keys.json && -f .lab/data/corpus.jsonl ]] \
    || die "the lab is not seeded here (.lab/data): run '$LABCTL seed' (see labctl db status)"
  say "starting the native lab (labctl up --bin-dir $BIN_DIR)"
  STARTED_LAB=1
  timeout 150 "$LABCTL" up --bin-dir "$BIN_DIR" --wait-seconds 90 >&2 || die "labctl up failed"
fi
"$LABCTL" status --json >"$WORK/status.json"

# --- 3. Prometheus --------------------------------------------------------------------------
PORT=""
for p in $(seq "$PORT0" $((PORT0 + 20))); do
  if ! port_open 127.0.0.1 "$p"; then PORT="$p"; break; fi
done
[[ -n "$PORT" ]] || die "no free port in $PORT0..$((PORT0 + 20)) for Prometheus"
PROM="http://127.0.0.1:$PORT"

cp -r deploy/prometheus "$WORK/prom"
# Replicas that `labctl up` runs but no native target file names (reported, not hidden), by the
# admin address labctl reports for them.
python3 scripts/lib/lab_status.py add-targets "$WORK/prom/targets/native" <"$WORK/status.json" \
  >"$WORK/added-targets.txt"
"$PROMTOOL" check config "$WORK/prom/prometheus.yml" >"$WORK/check-config.txt" 2>&1 \
  || { cat "$WORK/check-config.txt" >&2; die "the Prometheus config does not check"; }

say "starting Prometheus on $PROM (storage in a temp dir)"
"$PROMETHEUS" \
  --config.file="$WORK/prom/prometheus.yml" \
  --storage.tsdb.path="$WORK/tsdb" \
  --storage.tsdb.retention.time=1d \
  --web.listen-address="127.0.0.1:$PORT" \
  >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!

pq() { curl -fsS --max-time 10 "$@"; }   # every HTTP call to Prometheus is bounded
wait_for() { # wait_for SECONDS DESCRIPTION CMD... — poll every 2 s, fail after SECONDS
  local limit="$1" what="$2" t0=$SECONDS
  shift 2
  until "$@"; do
    kill -0 "$PROM_PID" 2>/dev/null || { tail -20 "$WORK/prometheus.log" >&2; die "Prometheus exited"; }
    ((SECONDS - t0 < limit)) || return 1
    sleep 2
  done
  say "$what after $((SECONDS - t0)) s"
}
prom_ready() { pq "$PROM/-/ready" >/dev/null 2>&1; }
wait_for 60 "Prometheus ready" prom_ready || die "Prometheus not ready in 60 s (log: $KEEP/prometheus.log)"

targets_up() {
  pq "$PROM/api/v1/targets?state=active" 2>/dev/null | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
sys.exit(0 if t and all(x["health"] == "up" for x in t) else 1)'
}
wait_for 60 "every scrape target up" targets_up || {
  pq "$PROM/api/v1/targets?state=active" >"$KEEP/targets.json" || true
  die "not every scrape target is up within 60 s (see $KEEP/targets.json)"
}
pq "$PROM/api/v1/targets?state=active" >"$WORK/targets.json"
pq "$PROM/api/v1/rules?type=alert" >"$WORK/rules.json"

no_alerts() { # true when no alert is pending or firing
  pq "$PROM/api/v1/query" --data-urlencode 'query=count(ALERTS)' 2>/dev/null | python3 -c '
import json, sys
sys.exit(0 if not json.load(sys.stdin)["data"]["result"] else 1)'
}
wait_quiet() { # $1: what for; records whether it had to give up
  if wait_for "$QUIET_TIMEOUT" "no alert pending or firing" no_alerts; then
    echo "$1 quiet" >>"$WORK/quiet.txt"
  else
    say "alerts still active after $QUIET_TIMEOUT s; going on (the report says so)"
    echo "$1 timeout" >>"$WORK/quiet.txt"
  fi
}

# --- 4. warm-up and the two game days -------------------------------------------------------
: >"$WORK/quiet.txt"
: >"$WORK/windows.txt"
# The warm-up fills the orchestrators' caches with documents the game day will not send (seed 99;
# `labctl gameday` always sends the seed-1 stream and has no --seed). A lab this script started is
# restarted before the second run, as in docs/reports/README.md's protocol: otherwise the
# resilient run would replay the legacy run's documents from a warm cache and barely call
# entity-service at all. A lab it did not start is reused as it is (the report says so).
fresh_lab() { # $1: the mode about to run
  if ((STARTED_LAB)) && [[ "$1" != legacy ]]; then
    say "restarting the lab this script started (empty caches, as for the first run)"
    timeout 90 "$LABCTL" down >&2 || die "labctl down failed"
    timeout 150 "$LABCTL" up --bin-dir "$BIN_DIR" --wait-seconds 90 >&2 || die "labctl up failed"
    echo "restart-$1 done $(now)" >>"$WORK/windows.txt"
  fi
  if ((WARMUP > 0)); then
    say "warm-up: labctl load --rate 150 --duration $WARMUP --seed 99"
    echo "warmup-$1 start $(now)" >>"$WORK/windows.txt"
    timeout $((WARMUP + 60)) "$LABCTL" load --rate 150 --duration "$WARMUP" --seed 99 \
      >"$KEEP/warmup-$1.log" 2>&1 || die "warm-up load failed (see $KEEP/warmup-$1.log)"
  fi
}
total_s="$(python3 -c '
import re, sys
text = open(sys.argv[1]).read()
print(sum(int(s) for s in re.findall(r"^\s*seconds:\s*(\d+)", text, re.M)))' "load/scenarios/$SCENARIO.yaml")"

for mode in legacy resilient; do
  fresh_lab "$mode"
  wait_quiet "before-$mode"
  say "labctl gameday $SCENARIO --mode $mode ($total_s s of load)"
  echo "$mode start $(now)" >>"$WORK/windows.txt"
  IN_GAMEDAY=1
  # Every output line is stamped with the wall clock on arrival (labctl's stdout is line-
  # buffered), so "t=… phase during" gives the fault's absolute start for the PromQL windows.
  rm -f "$WORK/gameday.fifo" && mkfifo "$WORK/gameday.fifo"
  while IFS= read -r line; do
    printf '%s %s\n' "$EPOCHREALTIME" "$line" >>"$WORK/gameday-$mode.log"
    printf '%s\n' "$line" >&2
  done <"$WORK/gameday.fifo" &
  STAMP_PID=$!
  timeout $((total_s + 180)) "$LABCTL" gameday "$SCENARIO" --mode "$mode" --out "$KEEP/gameday-$mode" \
    >"$WORK/gameday.fifo" 2>&1 &
  GD_PID=$!
  rc=0
  wait "$GD_PID" || rc=$?
  GD_PID=""
  wait "$STAMP_PID" || true
  STAMP_PID=""
  IN_GAMEDAY=0
  cp "$WORK/gameday-$mode.log" "$KEEP/"
  ((rc == 0)) || die "labctl gameday --mode $mode failed (exit $rc)"
  echo "$mode end $(now)" >>"$WORK/windows.txt"
done
wait_quiet "after-resilient"
echo "final end $(now)" >>"$WORK/windows.txt"

# --- 5. query and report --------------------------------------------------------------------
python3 "$ROOT/scripts/lib/alerts_report.py" "$PROM" "$WORK" "$SCENARIO" "$REPORT_DIR/alerts-$SCENARIO.md" "$KEEP" \
  "$("$PROMETHEUS" --version 2>&1 | head -n1)"
say "report written to $REPORT_DIR/alerts-$SCENARIO.md (raw data in $KEEP)"
