#!/usr/bin/env python3
"""Every metric name the alert rules and dashboards use is exported by a running lab (issue 6).

Called by scripts/metric-names-check.sh (which the e2e test
`every_metric_name_in_rules_and_dashboards_is_exported` runs), from the repository root, as
    python3 scripts/lib/metric_names.py SCRAPES_DIR
where SCRAPES_DIR holds, per scraped endpoint, N.txt (its /metrics body) and N.url (its URL).
Prints one line per name used by deploy/prometheus/rules/*.yml and grafana/dashboards/*.json:
ok / declared / future / MISSING (the script's header says what each means), and exits 1 if any
name is MISSING. Needs PyYAML.
"""
import json
import pathlib
import re
import sys

import yaml

# Names used by the rules and dashboards that no running lab exports YET, each with the issue that
# will export it. Keep this list short and delete lines as the names appear.
ALLOWED = {
    "entity_db_seconds_since_analyze": "exported from issue 3 (entity-service database facts)",
    "entity_db_dead_tuples": "exported from issue 3 (entity-service database facts)",
    "entity_db_hot_plan_index_scan": "exported from issue 3 (entity-service database facts)",
    "entity_db_active_connections": "exported from issue 3 (entity-service database facts)",
}

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan", "atan2", "start", "end"}


def names_in(expr):
    e = re.sub(r"\$\{?\w+(?::\w+)?\}?", "x", expr)           # Grafana variables
    e = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', e)
    e = re.sub(r"\{[^}]*\}", "", e)                           # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                          # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    out = set()
    for m in re.finditer(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        out.add(name)
    return out


def walk(panels):
    for p in panels or []:
        yield p
        yield from walk(p.get("panels"))


def declared_in(name, sources):
    needle = f'"{name}"'
    hits = []
    for p in sources:
        try:
            if needle in p.read_text():
                hits.append(str(p))
        except OSError:
            pass
    return hits


def main(scrapes):
    scrapes = pathlib.Path(scrapes)

    # ---- what the lab exports
    exported, per_endpoint = set(), {}
    for f in sorted(scrapes.glob("*.txt")):
        url = (scrapes / (f.stem + ".url")).read_text().strip()
        names = set()
        for line in f.read_text().splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)", line)
            if m:
                names.add(m.group(1))
        per_endpoint[url] = names
        exported |= names
        print(f"scraped {url}: {len(names)} sample names")

    # ---- what the rules and dashboards use
    used = {}   # name -> set of places

    def use(expr, where):
        for n in names_in(expr):
            used.setdefault(n, set()).add(where)

    for f in sorted(pathlib.Path("deploy/prometheus/rules").glob("*.yml")):
        for g in yaml.safe_load(f.read_text())["groups"]:
            for r in g["rules"]:
                use(str(r["expr"]), f"{f.name}:{r.get('alert') or r.get('record')}")

    for f in sorted(pathlib.Path("grafana/dashboards").glob("*.json")):
        d = json.loads(f.read_text())
        for p in walk(d.get("panels")):
            for t in p.get("targets", []):
                if t.get("expr"):
                    use(t["expr"], f"{f.stem}#{p.get('id')}")
        for a in d.get("annotations", {}).get("list", []):
            if a.get("expr"):
                use(a["expr"], f"{f.stem}:annotation")

    # ---- families declared in the sources (labelled families render nothing until their first child)
    sources = [p for d in ("crates", "services") for p in pathlib.Path(d).rglob("*.rs")
               if "/tests/" not in str(p)]

    missing = 0
    print()
    print(f"{len(used)} metric names used by {len(list(pathlib.Path('deploy/prometheus/rules').glob('*.yml')))} rule files "
          f"and {len(list(pathlib.Path('grafana/dashboards').glob('*.json')))} dashboards:")
    for name in sorted(used):
        where = ", ".join(sorted(used[name])[:3]) + (" ..." if len(used[name]) > 3 else "")
        if name in exported:
            eps = [u.split("//")[1].split("/")[0] for u, n in per_endpoint.items() if name in n]
            print(f"  ok        {name}  ({', '.join(eps)})")
            if name in ALLOWED:
                print(f"            note: {name} is exported now — its ALLOWED entry can go once that issue is merged")
            continue
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        decl = declared_in(name, sources) or (declared_in(base, sources) if base != name else [])
        if name in ALLOWED:
            print(f"  future    {name}  — {ALLOWED[name]}; used in {where}")
        elif decl:
            print(f"  declared  {name}  — no series yet, registered in {decl[0]}; used in {where}")
        else:
            print(f"  MISSING   {name}  — used in {where}")
            missing += 1

    print()
    if missing:
        print(f"metric-names-check: {missing} metric name(s) used but not exported by the lab, not declared in the sources and not allow-listed", file=sys.stderr)
        return 1
    print("metric-names-check: every metric name used is exported (or declared / allow-listed, see above)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
