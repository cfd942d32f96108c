#!/usr/bin/env python3
"""Tenant B's goodput and latency while tenant A sends huge documents (issue 28), open loop.

    python3 scripts/lib/tenant_fairness.py --gateway http://127.0.0.1:8080 \\
        --keys .lab/data/api-keys.json --corpus .lab/data/corpus.jsonl \\
        --seconds 20 --rate-a 60 --rate-b 50 --words-a 1000

Tenant A (tenant 2 by default) sends --rate-a documents a second, each of --words-a fresh
capitalised names (every one a span the orchestrator looks up; none cached); tenant B (tenant 1)
sends --rate-b of its own corpus documents a second. Both open loop from one schedule; latency is
measured from each request's scheduled time, so a client that falls behind shows as latency.
Prints one JSON line: per tenant, requests sent, answers by status and error code, the share
answered 200, p50 and p99. Flip `resilience.tenant_fairness` between runs to compare.

Bounded: at most 120 s, to a loopback gateway only, 300 connections at most.
"""

import argparse
import http.client
import json
import queue
import random
import string
import sys
import threading
import time
import urllib.parse

WORKERS = 300  # connections: enough for 110 rps at a few seconds' latency, few for 2 cores


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gateway", default="http://127.0.0.1:8080")
    p.add_argument("--keys", required=True, help="api-keys.json written by labctl seed")
    p.add_argument("--corpus", required=True, help="corpus.jsonl written by labctl seed")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--rate-a", type=float, default=60)
    p.add_argument("--rate-b", type=float, default=50)
    p.add_argument("--words-a", type=int, default=1000)
    p.add_argument("--tenant-a", type=int, default=2)
    p.add_argument("--tenant-b", type=int, default=1)
    a = p.parse_args()
    host = urllib.parse.urlparse(a.gateway).hostname or ""
    if not (host == "localhost" or host.startswith("127.")):
        sys.exit(f"--gateway must be on loopback (got {host!r})")
    if not 0 < a.seconds <= 120 or a.rate_a < 0 or a.rate_b <= 0:
        sys.exit("--seconds in (0, 120], --rate-a >= 0, --rate-b > 0")
    return a


def fresh_document(words):
    names = {
        "".join(random.choice(string.ascii_lowercase) for _ in range(9)).capitalize()
        for _ in range(words)
    }
    return " and ".join(sorted(names)) + "."


def send(conn, url, key, body):
    """(status or 'status code', the connection to reuse or None)."""
    try:
        if conn is None:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        conn.request(
            "POST",
            "/v1/extract",
            body=json.dumps(body),
            headers={"Authorization": f"Bearer {key}", "content-type": "application/json"},
        )
        r = conn.getresponse()
        raw = r.read()
    except (OSError, http.client.HTTPException):
        return "transport", None
    if r.status == 200:
        return "200", conn
    try:
        return f"{r.status} {json.loads(raw)['error']['code']}", conn
    except (ValueError, KeyError, TypeError):
        return str(r.status), conn


def percentile(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 1) if xs else None


def main():
    a = parse_args()
    url = urllib.parse.urlparse(a.gateway)
    keys = {k["tenant_id"]: k["api_key"] for k in json.load(open(a.keys))}
    with open(a.corpus) as f:
        corpus = [d for d in map(json.loads, f) if d["tenant_id"] == a.tenant_b]
    if not corpus:
        sys.exit(f"no corpus document of tenant {a.tenant_b}")
    work = queue.Queue()
    results = {"A": [], "B": []}
    lock = threading.Lock()

    def worker():
        conn = None
        while (item := work.get()) is not None:
            who, due, key, body = item
            status, conn = send(conn, url, key, body)
            with lock:
                results[who].append((status, (time.monotonic() - due) * 1000))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    start, na, nb = time.monotonic(), 0, 0
    while (now := time.monotonic() - start) < a.seconds:
        due_a = na / a.rate_a if a.rate_a else float("inf")
        due_b = nb / a.rate_b
        due = min(due_a, due_b)
        if due > now:
            time.sleep(min(due - now, 0.005))
        elif due_a <= due_b:
            body = {"doc_id": f"huge-{na}", "text": fresh_document(a.words_a)}
            work.put(("A", start + due, keys[a.tenant_a], body))
            na += 1
        else:
            d = corpus[nb % len(corpus)]
            work.put(("B", start + due, keys[a.tenant_b], {"doc_id": f"b-{nb}", "text": d["text"]}))
            nb += 1
    for _ in threads:
        work.put(None)
    for t in threads:
        t.join(timeout=15)
    out = {}
    for who, rs in results.items():
        codes = {}
        for status, _ in rs:
            codes[status] = codes.get(status, 0) + 1
        latencies = [ms for _, ms in rs]
        out[who] = {
            "sent": len(rs),
            "codes": codes,
            "ok_pct": round(100 * codes.get("200", 0) / max(1, len(rs)), 2),
            "p50_ms": percentile(latencies, 0.5),
            "p99_ms": percentile(latencies, 0.99),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
