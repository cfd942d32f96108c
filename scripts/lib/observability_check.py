#!/usr/bin/env python3
"""The Python half of scripts/observability-check.sh (issue 6): the checks promtool cannot do.

Called only by scripts/observability-check.sh, from the repository root, one subcommand per step:
    targets DIR              every file_sd target file under DIR is a list of {targets, labels}
    alerts PROM_DIR          every alert has a promtool unit test and a runbook, and its runbook_url
                             points at that runbook
    dashboards DASH_DIR WORK every dashboard PromQL expression (Grafana variables substituted) as a
                             throw-away recording rule in WORK/rules.yml, for `promtool check rules`;
                             WORK/index.json maps rule numbers back to dashboards and panels
    explain WORK             after promtool rejected WORK/rules.yml (its output in WORK/out.txt):
                             name the dashboard and panel of every rejected expression
    provisioning DASH_DIR PROV_DIR   dashboards are provisionable: unique uids, datasource by uid
Each prints what it checked, problems on stderr, and exits 1 on any problem.
"""
import json
import pathlib
import re
import sys


def cmd_targets(targets_dir):
    # file_sd files are only read at runtime; a typo there is a silently missing replica. Check
    # their shape here: a list of {targets: [host:port, ...], labels: {...}}.
    bad = 0
    files = sorted(pathlib.Path(targets_dir).rglob("*.json"))
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
    return 1 if bad or not files else 0


def cmd_alerts(prom_dir):
    prom = pathlib.Path(prom_dir)
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
    return 1 if bad or not alerts else 0


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


def cmd_dashboards(dash_dir, work):
    dash_dir, work = pathlib.Path(dash_dir), pathlib.Path(work)
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
    return 1 if n == 0 else 0


def cmd_explain(work):
    work = pathlib.Path(work)
    out = (work / "out.txt").read_text()
    index = {n: (f, where, e) for n, f, where, e in json.loads((work / "index.json").read_text())}
    hits = set()
    for m in re.finditer(r"group \"dashboard-expressions\", rule (\d+)", out):
        hits.add(int(m.group(1)))
    for n in sorted(hits):
        f, where, e = index[n]
        print(f"  FAILED {f} {where}: {e}")
    print(out)
    return 0


def cmd_provisioning(dash_dir, prov):
    dash_dir, prov = pathlib.Path(dash_dir), pathlib.Path(prov)
    ds_text = "\n".join(p.read_text() for p in sorted((prov / "datasources").glob("*.yml")))
    ds_uids = set(re.findall(r"^\s*uid:\s*(\S+)", ds_text, re.M))
    bad, uids = 0, {}

    def fail(msg):
        nonlocal bad
        bad += 1
        print(f"  FAILED {msg}", file=sys.stderr)

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
        ids = [p.get("id") for p in walk_panels(d.get("panels"))]
        if len(ids) != len(set(ids)) or None in ids:
            fail(f"{f.name}: panel ids must be present and unique")
        refs = []
        for p in walk_panels(d.get("panels")):
            refs.append((f"panel {p.get('id')}", p.get("datasource")))
            refs += [(f"panel {p.get('id')} target", t.get("datasource")) for t in p.get("targets", [])]
        refs += [(f"annotation {a.get('name')}", a.get("datasource")) for a in d.get("annotations", {}).get("list", [])]
        for where, ds in refs:
            if ds is None:
                continue
            if not isinstance(ds, dict) or ds.get("uid") not in ds_uids | {"grafana", "-- Grafana --"}:
                fail(f"{f.name} {where}: datasource {ds!r} is not one of the provisioned uids {sorted(ds_uids)}")
    print(f"  {len(uids)} dashboards, datasource uids {sorted(ds_uids)}, {bad} problems")
    return 1 if bad else 0


COMMANDS = {
    "targets": cmd_targets,
    "alerts": cmd_alerts,
    "dashboards": cmd_dashboards,
    "explain": cmd_explain,
    "provisioning": cmd_provisioning,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(COMMANDS)}}} ARGS...")
    sys.exit(COMMANDS[sys.argv[1]](*sys.argv[2:]))
