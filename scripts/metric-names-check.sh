#!/usr/bin/env bash
# scripts/metric-names-check.sh — every metric name the alert rules and dashboards use is exported
# by a running lab (issue 6). The other half of scripts/observability-check.sh: that one proves the
# PromQL parses; this one proves it would find series, i.e. catches a typo or an invented name
# that parses perfectly and then shows "No data" forever.
#
#   scripts/metric-names-check.sh                       # every replica of the native lab that is up
#   scripts/metric-names-check.sh http://127.0.0.1:9080 http://127.0.0.1:9101 ...   # admin base URLs
#
# Without URLs, the admin URLs are the ones `labctl status --json` reports for the native lab (its
# state dir: .lab, or LAB_STATE_DIR). labctl is LABCTL, else LAB_BIN_DIR/labctl, else the release
# or the debug build in CARGO_TARGET_DIR (default target/).
#
# Scrapes <base>/metrics of every URL given (an unreachable one is an error: a missing replica
# would hide its names), extracts the metric names from every `expr` in deploy/prometheus/rules/
# and every dashboard query and annotation in grafana/dashboards/, and prints one line per name:
#
#   ok        exported by at least one scraped endpoint
#   declared  not in the scrape, but registered in the Rust sources as a labelled family that has
#             no series until its first event (e.g. entity_service_shed_total before anything is
#             shed: the prometheus crate renders nothing for a family without children). Passes,
#             and names the source file, so the claim can be checked.
#   future    not exported yet and documented as coming from another issue (ALLOWED below).
#             Passes while missing; once the name is exported it is reported `ok`.
#   MISSING   none of the above: exit 1.
#
# Names are extracted with a small PromQL tokenizer (strings, label matchers, ranges and grouping
# clauses removed; identifiers followed by "(" are functions). It only needs to be right for
# expressions promtool has already parsed (observability-check.sh runs that).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOG_TAG=metric-names-check LOG_ERR='metric-names-check: '
# shellcheck source=lib/common.sh
source "$ROOT/scripts/lib/common.sh"   # die

if [[ $# -eq 0 ]]; then
  if [[ -z "${LABCTL:-}" ]]; then
    for c in ${LAB_BIN_DIR:+"$LAB_BIN_DIR/labctl"} "${CARGO_TARGET_DIR:-target}"/{release,debug}/labctl; do
      if [[ -x "$c" ]]; then LABCTL="$c"; break; fi
    done
  fi
  [[ -n "${LABCTL:-}" ]] || die "no labctl to ask for the native lab's admin URLs: build it, set LABCTL, or pass the URLs"
  urls="$("$LABCTL" status --json |
    python3 scripts/lib/lab_status.py admin-urls)" || die "no native lab is up ($LABCTL status): start one, or pass the URLs"
  IFS=, read -ra urls <<<"$urls"
  set -- "${urls[@]}"
fi

command -v curl >/dev/null || die "curl is needed"
command -v python3 >/dev/null || die "python3 is needed"
python3 -c 'import yaml' 2>/dev/null || die "python3 cannot import yaml (Debian: apt-get install python3-yaml)"

scrapes="$(mktemp -d)"
trap 'rm -rf "$scrapes"' EXIT
i=0
for base in "$@"; do
  i=$((i + 1))
  url="${base%/}/metrics"
  curl -fsS --max-time 5 "$url" -o "$scrapes/$i.txt" || die "cannot scrape $url"
  echo "$url" >"$scrapes/$i.url"
done

python3 scripts/lib/metric_names.py "$scrapes"
