#!/usr/bin/env python3
"""docs/reports/alerts-<scenario>.md, the report of scripts/alerts-gameday.sh (issue 6): which alerts
a real Prometheus fired, and when, during a game day in legacy and then in resilient mode.

Called by scripts/alerts-gameday.sh once both game days are over, as
    python3 scripts/lib/alerts_report.py PROM_URL WORK SCENARIO OUT.md KEEP "PROMETHEUS --version line"
It reads from WORK what the script recorded (windows.txt: wall-clock marks of each warm-up, run and
restart; quiet.txt: whether each wait for no active alert succeeded; gameday-<mode>.log: labctl's
output stamped with the wall clock on arrival; rules.json, targets.json, added-targets.txt), asks
the Prometheus at PROM_URL (/api/v1/query_range, loopback) for ALERTS{alertstate="firing"|"pending"}
over each window, writes OUT.md (also printed) and, into KEEP, every query's raw result and
runs.json. Exits non-zero (a traceback) when an input is missing or a query fails.
"""
import json
import os
import pathlib
import re
import sys
import urllib.parse
import urllib.request
from datetime import UTC, datetime

STEP = 5  # = the evaluation interval in deploy/prometheus/prometheus.yml


def main(prom, work, scenario, out, keep, prom_version):
    work, keep = pathlib.Path(work), pathlib.Path(keep)

    def api(path, **params):
        url = f"{prom}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as r:  # loopback only
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    # Windows: each run from its start to the next run's start (legacy) or the final quiet (resilient).
    marks = {}
    for line in (work / "windows.txt").read_text().splitlines():
        what, edge, t = line.split()
        marks[(what, edge)] = float(t)
    quiet = dict(line.split() for line in (work / "quiet.txt").read_text().splitlines())
    runs = {}
    for mode, until in (("legacy", marks[("resilient", "start")]), ("resilient", marks[("final", "end")])):
        phases = {}
        for line in (work / f"gameday-{mode}.log").read_text().splitlines():
            m = re.match(r"(\d+\.\d+)\s+t=\s*([\d.]+)s phase (\S+)\s+(\d+) s", line)
            if m:
                phases[m.group(3)] = (float(m.group(1)), int(m.group(4)))
        assert "during" in phases, f"no 'during' phase in the {mode} game day's output"
        runs[mode] = {"start": marks[(mode, "start")], "load_end": marks[(mode, "end")],
                      "until": until, "phases": phases}

    rules = {}
    for g in json.loads((work / "rules.json").read_text())["data"]["groups"]:
        for r in g["rules"]:
            rules[r["name"]] = {"for": r.get("duration", 0), "group": g["name"],
                                "severity": r.get("labels", {}).get("severity", "")}

    def intervals(query, start, end):
        """Per alert (and extra labels), the [first, last] sample times of each contiguous stretch."""
        data = api("/api/v1/query_range", query=query, start=f"{start:.3f}", end=f"{end:.3f}", step=STEP)
        (keep / f"query-{re.sub(r'[^a-z]+', '-', query.lower())}-{int(start)}.json").write_text(json.dumps(data))
        res = {}
        for s in data["result"]:
            name = s["metric"]["alertname"]
            extra = ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items())
                             if k not in ("__name__", "alertname", "alertstate", "severity", "service"))
            ts = sorted(float(t) for t, _ in s["values"])
            stretches, first, prev = [], ts[0], ts[0]
            for t in ts[1:]:
                if t - prev > STEP * 1.5:
                    stretches.append((first, prev))
                    first = t
                prev = t
            stretches.append((first, prev))
            res.setdefault(name, []).extend((extra, a, b) for a, b in stretches)
        return res

    def fmt_dur(s):
        s = int(round(s))
        return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"

    def rel(t, run):
        fs, fl = run["phases"]["during"]
        if t < fs:
            return f"{fmt_dur(fs - t)} before the fault"
        if t <= fs + fl:
            return f"fault +{fmt_dur(t - fs)}"
        return f"{fmt_dur(t - fs - fl)} after the fault ended"

    def utc(t):
        return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")

    found = {}
    for mode, run in runs.items():
        found[mode] = {st: intervals(f'ALERTS{{alertstate="{st}"}}', run["start"], run["until"])
                       for st in ("firing", "pending")}

    def cell(mode, name):
        run, f, p = runs[mode], found[mode]["firing"].get(name), found[mode]["pending"].get(name)
        if f:
            parts = []
            for extra, a, b in f:
                resolved = b + STEP
                tail = (f"resolved {rel(resolved, run)}" if resolved < run["until"] - STEP
                        else "still firing at the end of the window")
                lab = f"{extra}: " if extra else ""
                parts.append(f"{lab}**fired** {utc(a)} UTC ({rel(a, run)}); {tail}")
            return "yes", "<br>".join(parts)
        if p:
            longest = max(b - a + STEP for _, a, b in p)
            a = min(a for _, a, _ in p)
            return "no", f"pending from {rel(a, run)}, at most {fmt_dur(longest)} (for: {fmt_dur(rules[name]['for'])})"
        return "no", "expression never true"

    names = sorted(set(rules) | {n for m in found.values() for st in m.values() for n in st})
    L = []
    L.append(f"# Alerts during `{scenario}`: legacy vs resilient")
    L.append("")
    L.append("Generated by `scripts/alerts-gameday.sh " + scenario + "`: a real Prometheus "
             f"({prom_version.strip()}) evaluating deploy/prometheus/rules/*.yml every {STEP} s against the "
             "native lab, while `labctl gameday " + scenario + " --mode legacy` and then `--mode resilient` ran. "
             "Alert states come from `/api/v1/query_range` on `ALERTS{alertstate=\"firing\"}` and "
             "`ALERTS{alertstate=\"pending\"}` (step 5 s, so times are ±5 s). Nothing here is typed by hand.")
    L.append("")
    for mode, run in runs.items():
        ph = ", ".join(f"{n} {s} s from {utc(t)}" for n, (t, s) in run["phases"].items())
        L.append(f"- **{mode}** ({datetime.fromtimestamp(run['start'], UTC):%Y-%m-%d}) window {utc(run['start'])}–{utc(run['until'])} UTC: {ph}; "
                 f"load ended {utc(run['load_end'])}.")
    L.append("")
    L.append("| Alert | severity | for | legacy | resilient | fires only in legacy |")
    L.append("|---|---|---|---|---|---|")
    for n in names:
        r = rules.get(n, {"for": 0, "severity": "?"})
        lf, _ = cell("legacy", n)
        rf, _ = cell("resilient", n)
        only = "**yes**" if lf == "yes" and rf == "no" else "no"
        L.append(f"| {n} | {r['severity']} | {fmt_dur(r['for'])} | {lf} | {rf} | {only} |")
    L.append("")
    L.append("Alerts that fire during the legacy game day and stay silent in resilient mode: " +
             (", ".join(f"`{n}`" for n in names if cell("legacy", n)[0] == "yes" and cell("resilient", n)[0] == "no")
              or "none") + ".")
    L.append("")
    L.append("## Per alert")
    L.append("")
    for n in names:
        L.append(f"- **{n}**")
        for mode in runs:
            L.append(f"  - {mode}: {cell(mode, n)[1]}")
    L.append("")
    L.append("## Run")
    L.append("")
    for k, v in quiet.items():
        L.append(f"- wait for no pending/firing alert {k.replace('-', ' ')}: " +
                 ("reached" if v == "quiet" else f"GAVE UP after {os.environ.get('ALERTS_QUIET_TIMEOUT', '420')} s: "
                  "alerts were still pending or firing"))
    for mode in runs:
        if (f"warmup-{mode}", "start") not in marks:
            continue
        w0, w1 = marks[(f"warmup-{mode}", "start")], marks[(mode, "start")]
        seen = {st: sorted(intervals(f'ALERTS{{alertstate="{st}"}}', w0, w1)) for st in ("firing", "pending")}
        L.append(f"- warm-up before {mode} {utc(w0)}–{utc(w1)} UTC (normal traffic, fault off; "
                 f"part of the previous window, if any): "
                 f"firing {', '.join(seen['firing']) or 'none'}; pending {', '.join(seen['pending']) or 'none'}")
    if ("restart-resilient", "done") in marks:
        L.append(f"- the lab (started by the script) was restarted at {utc(marks[('restart-resilient', 'done')])} UTC "
                 "before the resilient run: both runs start with empty caches and the same warm-up.")
    else:
        L.append("- the lab was already up and was reused for both runs: the resilient run replays the legacy "
                 "run's documents (`labctl gameday` always sends the seed-1 stream) from warm caches.")
    added = (work / "added-targets.txt").read_text().strip()
    if added:
        L.append("- scrape targets added because no file in deploy/prometheus/targets/native names them: " +
                 "; ".join(added.splitlines()))
    tg = json.loads((work / "targets.json").read_text())["data"]["activeTargets"]
    L.append(f"- {len(tg)} scrape targets, all up at the start: " +
             ", ".join(sorted(t["labels"].get("replica", t["scrapeUrl"]) for t in tg)))
    for mode in runs:
        s = keep / f"gameday-{mode}" / "summary.md"
        if s.exists():
            L.append("")
            L.append(f"<details><summary>labctl gameday — {mode} (as printed)</summary>")
            L.append("")
            L.append(s.read_text().strip().replace("### ", "#### ", 1))
            L.append("")
            L.append("</details>")
    text = "\n".join(L) + "\n"
    pathlib.Path(out).write_text(text)
    (keep / "runs.json").write_text(json.dumps({"runs": runs, "found": found, "rules": rules}, indent=1))
    print(text)


if __name__ == "__main__":
    main(*sys.argv[1:7])
