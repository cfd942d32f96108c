#!/usr/bin/env python3
"""The native lab's replicas, their admin (metrics) addresses and health, read only from what
`labctl status --json` prints (issue 25: "metrics addresses come only from labctl status --json").

labctl decides each replica's admin port (crates/lab-native/src/supervise.rs, admin_port) and prints
it as admin_url; nothing here computes a port. Used by scripts/lib/common.sh (lab_admin_urls:
flood-check.sh, k6-check.sh), metric-names-check.sh and alerts-gameday.sh. Reads the JSON on stdin:

    "$LABCTL" status --json | python3 scripts/lib/lab_status.py ready
        exit 0 when the supervisor is alive and every replica is ready, else 1
    "$LABCTL" status --json | python3 scripts/lib/lab_status.py admin-urls [SERVICE]
        the admin base URLs (/metrics, /readyz) of SERVICE's replicas (of every replica without
        SERVICE), comma-separated, in labctl's order; exit 1 when there is none
    python3 scripts/lib/lab_status.py add-targets DIR < status.json
        every replica whose admin address no DIR/<service>.json (Prometheus file_sd) names is added
        to its service's file, one line printed per addition; a service without a file is skipped

With no lab up, `labctl status --json` prints "no lab is up", which is not JSON: exit 1.
"""
import json
import pathlib
import re
import sys


def load_status(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def service_of(replica):
    return re.sub(r"-\d+$", "", replica)


def target_of(url):
    return url.removeprefix("http://")


def cmd_ready(status):
    ok = status is not None and status["supervisor_alive"] and all(r["ready"] for r in status["replicas"])
    return 0 if ok else 1


def cmd_admin_urls(status, service=None):
    if status is None:
        print("lab_status: no lab is up (labctl status --json printed no JSON)", file=sys.stderr)
        return 1
    urls = [r["admin_url"] for r in status["replicas"] if service is None or service_of(r["name"]) == service]
    if not urls:
        print(f"lab_status: labctl status lists no {service or 'replica'}", file=sys.stderr)
        return 1
    print(",".join(urls))
    return 0


def cmd_add_targets(status, targets_dir):
    if status is None:
        print("lab_status: no lab is up (labctl status --json printed no JSON)", file=sys.stderr)
        return 1
    tdir = pathlib.Path(targets_dir)
    known = set()
    for f in tdir.glob("*.json"):
        for g in json.loads(f.read_text()):
            known.update(g["targets"])
    for r in status["replicas"]:
        target = target_of(r["admin_url"])
        if target in known:
            continue
        job = service_of(r["name"])
        f = tdir / f"{job}.json"
        if not f.exists():
            continue  # no scrape job for this service in prometheus.yml
        groups = json.loads(f.read_text())
        groups.append({"targets": [target],
                       "labels": {"service": job, "replica": r["name"], "lab": "native"}})
        f.write_text(json.dumps(groups, indent=2))
        print(f"{r['name']} ({target}) added to targets/native/{job}.json")
    return 0


COMMANDS = {"ready": cmd_ready, "admin-urls": cmd_admin_urls, "add-targets": cmd_add_targets}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: labctl status --json | {sys.argv[0]} {{{'|'.join(COMMANDS)}}} [ARGS]")
    sys.exit(COMMANDS[sys.argv[1]](load_status(sys.stdin.read()), *sys.argv[2:]))
