#!/usr/bin/env bash
# scripts/observability-check.sh — offline checks of everything an operator watches during a game
# day (issue 6): the Prometheus config, the alert rules and their unit tests, and every PromQL
# expression in every Grafana dashboard. Needs no running lab and no Prometheus server.
#
#   scripts/observability-check.sh            # all checks; non-zero exit on the first failing group
#
# promtool comes from Debian's `prometheus` package WITHOUT its ~330 MB of dependencies
# (scripts/lib/prometheus.sh: `apt-get download` + `dpkg-deb -x` into
# ${LAB_TOOLS_DIR:-~/.cache/retry-storm-lab/tools}/prometheus-deb, promtool only, ~46 MB);
# bin/promtool links to it.
# Idempotent: a second run only checks that the link still answers `--version`.
# PROMTOOL=/path/to/promtool skips the install (e.g. a newer upstream release).
#
# Dashboards: promtool has no "parse this expression" command that works offline (`promtool
# query` needs a server), so each dashboard expression — Grafana variables substituted first — is
# wrapped in a throw-away recording rule and the file goes through `promtool check rules`, which
# runs the real PromQL parser. A failure names the dashboard, the panel and the expression.
#
# The companion scripts/metric-names-check.sh checks the other direction: every metric name used
# here is actually exported by a running lab.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LOG_TAG=observability-check LOG_FMT='==> %s\n' LOG_ERR='observability-check: '
# shellcheck source=lib/common.sh
source "$ROOT/scripts/lib/common.sh"       # say, die
# shellcheck source=lib/prometheus.sh
source "$ROOT/scripts/lib/prometheus.sh"   # prom_install, prom_tool_path (honours LAB_TOOLS_DIR)
LIB="$ROOT/scripts/lib"   # observability_check.py: the checks of the steps below that promtool cannot do
PROM_DIR="deploy/prometheus"
DASH_DIR="grafana/dashboards"

if [[ -n "${PROMTOOL:-}" ]]; then
  "$PROMTOOL" --version >/dev/null 2>&1 || die "PROMTOOL=$PROMTOOL does not run"
else
  prom_install promtool || die "could not install promtool (set PROMTOOL=/path/to/promtool)"
  PROMTOOL="$(prom_tool_path promtool)"
fi
say "promtool: $("$PROMTOOL" --version 2>&1 | head -n1)"

command -v python3 >/dev/null || die "python3 is needed to read the dashboards"

# 1. The Prometheus config, including every rule file it names and every file_sd target file.
say "promtool check config $PROM_DIR/prometheus.yml"
"$PROMTOOL" check config "$PROM_DIR/prometheus.yml"
python3 "$LIB/observability_check.py" targets "$PROM_DIR/targets"

# 2. The alert rules, then their unit tests (every alert: fires on a storm, silent on steady state).
say "promtool check rules $PROM_DIR/rules/*.yml"
"$PROMTOOL" check rules "$PROM_DIR"/rules/*.yml
say "promtool test rules $PROM_DIR/tests/*.yml"
"$PROMTOOL" test rules "$PROM_DIR"/tests/*.yml

# Every alert has a unit test and a runbook, and its runbook_url points at that runbook.
python3 "$LIB/observability_check.py" alerts "$PROM_DIR"

# 3. Every PromQL expression in every dashboard parses (through promtool's real parser).
say "dashboards: every PromQL expression through promtool check rules"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 "$LIB/observability_check.py" dashboards "$DASH_DIR" "$work"
if ! "$PROMTOOL" check rules "$work/rules.yml" >"$work/out.txt" 2>&1; then
  # Name the dashboard and panel of every expression promtool rejected.
  python3 "$LIB/observability_check.py" explain "$work" >&2
  die "a dashboard expression does not parse"
fi
sed 's/^/  /' "$work/out.txt"
[[ "$(cat "$work/unresolved")" == 0 ]] || die "a dashboard expression uses an unknown Grafana variable"

# 4. The dashboards are provisionable: stable unique uids, the datasource referenced by uid.
say "dashboards: uids, datasource references, provisioning"
python3 "$LIB/observability_check.py" provisioning "$DASH_DIR" grafana/provisioning

say "observability checks passed"
