#!/usr/bin/env python3
"""A flood of well-formed, unknown API keys against the gateway (issue 17: unauthenticated floods).

    load/flood/unknown_keys.py --rate 600 --seconds 60 [--url http://127.0.0.1:8080]

Every request carries a fresh random key id (`rsl_<12 hex>_<64 hex>`), so none is cached: each
is a first-time lookup for the gateway. Loopback only, bounded in count and time, stops by itself.
Prints what the gateway answered, by status, as JSON. Run it beside `labctl load` (the real
tenants) and compare their goodput with and without it.
"""
import argparse, json, os, secrets, threading, time, urllib.parse, http.client, collections

p = argparse.ArgumentParser()
p.add_argument("--url", default="http://127.0.0.1:8080")
p.add_argument("--rate", type=float, required=True, help="requests per second (open loop)")
p.add_argument("--seconds", type=float, required=True)
p.add_argument("--threads", type=int, default=32)
a = p.parse_args()
u = urllib.parse.urlparse(a.url)
if u.hostname not in ("127.0.0.1", "localhost") and not u.hostname.startswith("127."):
    raise SystemExit("loopback only: " + a.url)
if a.rate <= 0 or a.seconds <= 0 or a.rate * a.seconds > 1_000_000:
    raise SystemExit("--rate and --seconds must be positive, and at most 1,000,000 requests")

counts = collections.Counter()
lock = threading.Lock()
start = time.monotonic()
total = int(a.rate * a.seconds)
next_i = [0]
body = json.dumps({"doc_id": "flood", "text": "The payee Vega Labs confirmed."})

def worker():
    conn = None
    while True:
        with lock:
            i = next_i[0]
            if i >= total:
                return
            next_i[0] += 1
        due = start + i / a.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        key = f"rsl_{secrets.token_hex(6)}_{secrets.token_hex(32)}"
        try:
            if conn is None:
                conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=5)
            conn.request("POST", "/v1/extract", body=body,
                         headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            r = conn.getresponse(); r.read()
            status = str(r.status)
        except Exception as e:  # noqa: BLE001 - counted, not hidden
            status = type(e).__name__
            conn = None
        with lock:
            counts[status] += 1

threads = [threading.Thread(target=worker) for _ in range(a.threads)]
for t in threads: t.start()
for t in threads: t.join()
elapsed = time.monotonic() - start
print(json.dumps({"sent": sum(counts.values()), "seconds": round(elapsed, 1),
                  "achieved_rps": round(sum(counts.values()) / elapsed, 1), "by_status": counts}))
