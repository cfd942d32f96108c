#!/usr/bin/env bash
# scripts/metric-names-check.sh — every metric name the alert rules and dashboards use is exported
# by a running lab (issue 6). The other half of scripts/observability-check.sh: that one proves the
# PromQL parses; this one proves it would find series, i.e. catches a typo or an invented name
# that parses perfectly and then shows "No data" forever.
#
#   scripts/metric-names-check.sh                       # the native lab's admin ports: 9080, 9101, 9102, 9201, 9202
#   scripts/metric-names-check.sh http://127.0.0.1:9080 http://127.0.0.1:9101 ...   # admin base URLs
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
  set -- http://127.0.0.1:9080 http://127.0.0.1:9101 http://127.0.0.1:9102 \
         http://127.0.0.1:9201 http://127.0.0.1:9202
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
