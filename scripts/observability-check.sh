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

# shellcheck source=scripts/lib/prometheus.sh
source "$ROOT/scripts/lib/prometheus.sh"   # prom_install, prom_tool_path (honours LAB_TOOLS_DIR)
PROM_DIR="deploy/prometheus"
DASH_DIR="grafana/dashboards"

say() { printf '==> %s\n' "$*"; }
die() { printf 'observability-check: %s\n' "$*" >&2; exit 1; }

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
python3 - "$PROM_DIR/targets" <<'PY'
# file_sd files are only read at runtime; a typo there is a silently missing replica. Check
# their shape here: a list of {targets: [host:port, ...], labels: {...}}.
import json, pathlib, re, sys
bad = 0
files = sorted(pathlib.Path(sys.argv[1]).rglob("*.json"))
for f in files:
    try:
        groups = json.loads(f.read_text())
        assert isinstance(groups, list) and groups, "not a non-empty list"
        for g in groups:
            assert set(g) <= {"targets", "labels"}, f"unknown keys {set(g) - {'targets', 'labels'}}"
            assert g["targets"], "empty targets"
            for t in g["targets"]:
                assert re.fullmatch(r"[A-Za-z0-9_.-]+:\d+", t), f"target {t!r} is not host:port"
            for k, v in g.get("labels", {}).items():
                assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) and isinstance(v, str), f"label {k}={v!r}"
    except Exception as e:  # noqa: BLE001 - report every file
        print(f"  FAILED {f}: {e}", file=sys.stderr)
        bad += 1
print(f"  {len(files)} file_sd target files, {bad} bad")
sys.exit(1 if bad or not files else 0)
PY

# 2. The alert rules, then their unit tests (every alert: fires on a storm, silent on steady state).
say "promtool check rules $PROM_DIR/rules/*.yml"
"$PROMTOOL" check rules "$PROM_DIR"/rules/*.yml
say "promtool test rules $PROM_DIR/tests/*.yml"
"$PROMTOOL" test rules "$PROM_DIR"/tests/*.yml

# Every alert has a unit test and a runbook, and its runbook_url points at that runbook.
python3 - "$PROM_DIR" <<'PY'
import pathlib, re, sys
prom = pathlib.Path(sys.argv[1])
alerts = {}
for f in sorted((prom / "rules").glob("*.yml")):
    # The rule files are plain YAML written by hand; a regex over "- alert:" keeps this check free
    # of a YAML library. promtool check rules above already proved the files parse.
    text = f.read_text()
    for m in re.finditer(r"^\s*- alert:\s*(\S+)", text, re.M):
        alerts[m.group(1)] = f
tests = "\n".join(p.read_text() for p in sorted((prom / "tests").glob("*.yml")))
bad = 0
for name, f in sorted(alerts.items()):
    problems = []
    if not re.search(rf"alertname:\s*{re.escape(name)}\b", tests):
        problems.append("no promtool unit test (alert_rule_test with this alertname)")
    if not pathlib.Path("runbooks", f"{name}.md").is_file():
        problems.append(f"no runbooks/{name}.md")
    if f"runbook_url: runbooks/{name}.md" not in f.read_text():
        problems.append(f"runbook_url is not runbooks/{name}.md")
    for p in problems:
        print(f"  FAILED {name} ({f.name}): {p}", file=sys.stderr)
    bad += bool(problems)
print(f"  {len(alerts)} alerts, each with a unit test and a runbook: {'yes' if not bad else 'NO'}")
sys.exit(1 if bad or not alerts else 0)
PY

# 3. Every PromQL expression in every dashboard parses (through promtool's real parser).
say "dashboards: every PromQL expression through promtool check rules"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$DASH_DIR" "$work" <<'PY'
import json, pathlib, re, sys
dash_dir, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

# Grafana's built-in variables, replaced by values of the right type before parsing.
BUILTINS = {
    "__rate_interval": "1m", "__interval": "15s", "__range": "1h",
    "__interval_ms": "15000", "__range_s": "3600", "__range_ms": "3600000",
}

def substitute(expr, variables):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTINS:
            return BUILTINS[name]
        if name in variables:
            return variables[name]
        raise KeyError(f"unknown Grafana variable ${name}")
    # $var, ${var}, ${var:format}, [[var]]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", repl, expr)

def walk_panels(panels):
    for p in panels or []:
        yield p
        yield from walk_panels(p.get("panels"))

def yaml_str(s):
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar

index, bad, n = [], 0, 0
rules = ["groups:", "  - name: dashboard-expressions", "    rules:"]
for f in sorted(dash_dir.glob("*.json")):
    d = json.loads(f.read_text())
    variables = {}
    for v in d.get("templating", {}).get("list", []):
        # A regex-matched variable (=~"$var") gets a regex that matches anything; a plain one a value.
        variables[v["name"]] = ".*" if v.get("includeAll") or v.get("multi") else "x"
    exprs = []
    for p in walk_panels(d.get("panels")):
        for t in p.get("targets", []):
            if t.get("expr"):
                exprs.append((f"panel {p.get('id')} '{p.get('title')}' ref {t.get('refId')}", t["expr"]))
    for a in d.get("annotations", {}).get("list", []):
        if a.get("expr"):
            exprs.append((f"annotation '{a.get('name')}'", a["expr"]))
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and q:
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", q)
            if m:
                exprs.append((f"variable ${v['name']}", m.group(1)))
    for where, expr in exprs:
        try:
            e = substitute(expr, variables)
        except KeyError as err:
            print(f"  FAILED {f.name} {where}: {err}", file=sys.stderr)
            bad += 1
            continue
        n += 1
        rules.append(f"      - record: dashboard_expr_{n}")
        rules.append(f"        expr: {yaml_str(e)}")
        index.append((n, f.name, where, expr))
(work / "rules.yml").write_text("\n".join(rules) + "\n")
(work / "index.json").write_text(json.dumps(index))
(work / "unresolved").write_text(str(bad))
print(f"  {n} expressions from {len(list(dash_dir.glob('*.json')))} dashboards")
sys.exit(1 if n == 0 else 0)
PY
if ! "$PROMTOOL" check rules "$work/rules.yml" >"$work/out.txt" 2>&1; then
  # Name the dashboard and panel of every expression promtool rejected.
  python3 - "$work" <<'PY' >&2
import json, pathlib, re, sys
work = pathlib.Path(sys.argv[1])
out = (work / "out.txt").read_text()
index = {n: (f, where, e) for n, f, where, e in json.loads((work / "index.json").read_text())}
hits = set()
for m in re.finditer(r"group \"dashboard-expressions\", rule (\d+)", out):
    hits.add(int(m.group(1)))
for n in sorted(hits):
    f, where, e = index[n]
    print(f"  FAILED {f} {where}: {e}")
print(out)
PY
  die "a dashboard expression does not parse"
fi
sed 's/^/  /' "$work/out.txt"
[[ "$(cat "$work/unresolved")" == 0 ]] || die "a dashboard expression uses an unknown Grafana variable"

# 4. The dashboards are provisionable: stable unique uids, the datasource referenced by uid.
say "dashboards: uids, datasource references, provisioning"
python3 - "$DASH_DIR" grafana/provisioning <<'PY'
import json, pathlib, re, sys
dash_dir, prov = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
ds_text = "\n".join(p.read_text() for p in sorted((prov / "datasources").glob("*.yml")))
ds_uids = set(re.findall(r"^\s*uid:\s*(\S+)", ds_text, re.M))
bad, uids = 0, {}
def fail(msg):
    global bad
    bad += 1
    print(f"  FAILED {msg}", file=sys.stderr)
def walk(panels):
    for p in panels or []:
        yield p
        yield from walk(p.get("panels"))
for f in sorted(dash_dir.glob("*.json")):
    d = json.loads(f.read_text())
    uid = d.get("uid")
    if not uid or not re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", uid):
        fail(f"{f.name}: missing or invalid uid {uid!r}")
    elif uid in uids:
        fail(f"{f.name}: uid {uid} also used by {uids[uid]}")
    uids[uid] = f.name
    if d.get("id") is not None:
        fail(f"{f.name}: id must be null in a provisioned dashboard")
    if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
        fail(f"{f.name}: schemaVersion {d.get('schemaVersion')!r}")
    ids = [p.get("id") for p in walk(d.get("panels"))]
    if len(ids) != len(set(ids)) or None in ids:
        fail(f"{f.name}: panel ids must be present and unique")
    refs = []
    for p in walk(d.get("panels")):
        refs.append((f"panel {p.get('id')}", p.get("datasource")))
        refs += [(f"panel {p.get('id')} target", t.get("datasource")) for t in p.get("targets", [])]
    refs += [(f"annotation {a.get('name')}", a.get("datasource")) for a in d.get("annotations", {}).get("list", [])]
    for where, ds in refs:
        if ds is None:
            continue
        if not isinstance(ds, dict) or ds.get("uid") not in ds_uids | {"grafana", "-- Grafana --"}:
            fail(f"{f.name} {where}: datasource {ds!r} is not one of the provisioned uids {sorted(ds_uids)}")
print(f"  {len(uids)} dashboards, datasource uids {sorted(ds_uids)}, {bad} problems")
sys.exit(1 if bad else 0)
PY

say "observability checks passed"
