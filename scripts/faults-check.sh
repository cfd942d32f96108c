#!/usr/bin/env bash
# scripts/faults-check.sh — real faults under open-loop load, in both client modes, with counts
# asserted, not times (issue 17). A native lab (the real binaries under labctl's supervisor) takes
# `labctl load` at FAULTS_RATE rps while this script breaks things for real:
#
#   PostgreSQL restarted, a replica killed and the rolling restarts are scenario files now,
#   judged by the same engine as every game day (load/scenarios/faults/, run by
#   scripts/fault-scenarios.sh).
#
#   1. redis-outage    redis-cli shutdown nosave for 30 s, then Redis started again exactly as
#                      scripts/deps.sh starts it. Asserted: every replica reports
#                      lab_flags_store_reachable 0 during and 1 after, keeps its last-known flags
#                      during, the gateway's limiter fails open (counted), no request fails, a
#                      `labctl flags set` during the outage fails, and one set after it reaches
#                      every replica. Reported: what each replica does when Redis comes back
#                      empty (it keeps nothing on disk): last-known flags or the defaults.
#   2. enrichment-kill kill -9 of enrichment-1 mid-stream. Asserted, once the group's lag is 0:
#                      rows in enrichment_documents for the run's documents == 200 answers,
#                      exactly, and no document twice.
#
# Why counts: on 2 shared CI cores a duration is noise, a count of failed requests or of rows is
# not. Durations (how long PostgreSQL took to restart, seconds with failures) are reported only.
#
# Bounded: a fresh lab per mode (resilient, then legacy), 6 load runs per mode of 5-38 s each at
# FAULTS_RATE (default 50) rps, only to 127.0.0.1; about 6 minutes in all (each wait is bounded). Own ports (26xxx, admin
# ports 27xxx), own database (retry_storm_lab_faults, seeded --small once), own state dir.
# PostgreSQL and Redis are the machine's own (the script restarts them): it must run alone (CI
# runs it serially; by hand: flock -x /tmp/lab-heavy.lock scripts/faults-check.sh), and it
# refuses to run while a native lab is up in .lab. On every exit path the load is stopped, the
# lab is stopped, PostgreSQL and Redis are up again and the flags are reset.
#
# Writes: <out>/faults.md (every number measured by this run), <out>/counts.json, and the raw
# runs (load series, metric snapshots, events) under <out>/<mode>/<fault>/.
#
# Usage: scripts/faults-check.sh [--publish]     --publish: copy the report to docs/reports/faults.md
# Env:   FAULTS_ONLY (the faults to run, default both: "redis-outage enrichment-kill"; e.g.
#        FAULTS_ONLY=redis-outage to repeat one window),
#        FAULTS_RATE (50 rps), FAULTS_MODES ("resilient legacy"), FAULTS_TAIL_SECONDS (8: the
#        "all 200 at the end" window), FAULTS_PROFILE (debug, as k6-check builds it; or release),
#        FAULTS_OUT (default .lab/reports/faults-<unix time>), CARGO_TARGET_DIR, LAB_TOOLS_DIR,
#        KAFKA_BOOTSTRAP (127.0.0.1:9092).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
say() { printf '[faults] %s\n' "$*"; }
die() { printf '[faults] ERROR: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

PUBLISH=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --publish) PUBLISH=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done

ALL_FAULTS="redis-outage enrichment-kill"
ONLY="${FAULTS_ONLY:-$ALL_FAULTS}"
for f in $ONLY; do
    [[ " $ALL_FAULTS " == *" $f "* ]] || die "FAULTS_ONLY: unknown fault '$f' (known: $ALL_FAULTS)"
done
wants() { [[ " $ONLY " == *" $1 "* ]]; }
RATE="${FAULTS_RATE:-50}"
MODES="${FAULTS_MODES:-resilient legacy}"
TAIL="${FAULTS_TAIL_SECONDS:-8}"
PROFILE="${FAULTS_PROFILE:-debug}"
TARGET="${CARGO_TARGET_DIR:-target}"
KAFKA="${KAFKA_BOOTSTRAP:-127.0.0.1:9092}"
LAB_TOOLS_DIR="${LAB_TOOLS_DIR:-$HOME/.cache/retry-storm-lab/tools}"
DB="postgres://postgres@127.0.0.1:5432/retry_storm_lab_faults"
DATA="$LAB_TOOLS_DIR/faults-data"   # the seed's files, kept with the database they match
OUT="${FAULTS_OUT:-.lab/reports/faults-$(date +%s)}"
GW=26080 ORCH=26101 ENT=26201 ENR=26301
REDIS_PORT=6379
# A flag no request reads while fault.entity.latency_ms is 0 (its default): set to a
# non-default variant before the Redis outage, it shows what each replica keeps.
MARKER=fault.entity.latency_fraction
# Load-run seeds: distinct per run and per invocation (the database keeps every run's rows; a
# seed picks the run's own range of document ids, see rows()).
SEED_BASE=$(( ($(date +%s) % 100000000) * 20 ))
RUNS=0
case "$PROFILE" in debug|release) ;; *) die "FAULTS_PROFILE must be debug or release" ;; esac
[[ "$RATE" =~ ^[0-9]+$ ]] && ((RATE >= 1 && RATE <= 200)) || die "FAULTS_RATE must be 1..200 rps"
[[ "$TAIL" =~ ^[0-9]+$ ]] && ((TAIL >= 3 && TAIL <= 12)) || die "FAULTS_TAIL_SECONDS must be 3..12"
for m in $MODES; do [[ "$m" == resilient || "$m" == legacy ]] || die "FAULTS_MODES: $m?"; done

lab_pid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("supervisor_pid", 0))' \
    .lab/run/lab.json 2>/dev/null || echo 0)"
if [[ "$lab_pid" != 0 ]] && kill -0 "$lab_pid" 2>/dev/null; then
    die "a native lab is up (.lab): this check restarts PostgreSQL and Redis and sets the same runtime flags; stop it first (labctl down)"
fi

# The machine's PostgreSQL: the cluster on 5432 (what scripts/deps.sh set up).
read -r PG_VER PG_NAME _ < <(pg_lsclusters --no-header 2>/dev/null | awk '$3 == 5432') || true
[[ -n "${PG_VER:-}" ]] || die "no PostgreSQL cluster on port 5432 (pg_lsclusters); run scripts/deps.sh"
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
redis_up() { redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
pg_up || die "PostgreSQL does not answer on 127.0.0.1:5432; run scripts/deps.sh"
redis_up || die "Redis does not answer on 127.0.0.1:$REDIS_PORT; run scripts/deps.sh"

# no_fds CMD...: run CMD with nothing open but stdin/stdout/stderr. A daemon started here (the
# postmaster, redis-server, the lab's supervisor) would otherwise inherit our caller's lock
# (`flock -x /tmp/lab-heavy.lock ...` keeps it open as a descriptor) and hold it for its life.
no_fds() (
    for fd in /proc/self/fd/*; do
        fd="${fd##*/}"
        if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec "$@"
)
wait_for() {   # wait_for SECONDS CMD...: poll CMD every 0.2 s
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do ((SECONDS >= deadline)) && return 1; sleep 0.2; done
}
pg_start() {
    no_fds pg_ctlcluster --skip-systemctl-redirect "$PG_VER" "$PG_NAME" start </dev/null || true
    wait_for 30 pg_up
}
# Exactly as scripts/deps.sh starts it: deps.sh itself (it finds Redis down and starts it).
redis_start() { no_fds env LAB_SKIP_APT=1 bash scripts/deps.sh --no-kafka </dev/null; }

# --- the lab --------------------------------------------------------------------------------------
say "building the services ($PROFILE; cached after the tests)"
if [[ "$PROFILE" == release ]]; then cargo build --release --bins -q; else cargo build --bins -q; fi
BIN="$TARGET/$PROFILE"
STATE="$(mktemp -d /tmp/faults-check.XXXXXX)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LABCTL=("$BIN/labctl" --database-url "$DB" --state-dir "$STATE" --data-dir "$DATA")
LOAD_PID=""
cleanup() {
    local rc=$?
    if [[ -n "$LOAD_PID" ]]; then kill "$LOAD_PID" 2>/dev/null || true; wait "$LOAD_PID" 2>/dev/null || true; fi
    pg_up || { say "cleanup: starting PostgreSQL again"; pg_start || say "cleanup: PostgreSQL did NOT come back"; }
    redis_up || { say "cleanup: starting Redis again"; redis_start >"$STATE/redis-cleanup.log" 2>&1 ||
        say "cleanup: Redis did NOT come back (scripts/deps.sh)"; }
    "${LABCTL[@]}" down >/dev/null 2>&1 || true
    if [[ -d "$STATE/logs" && -n "${MDIR:-}" && ! -d "${MDIR:-}/logs" ]]; then cp -r "$STATE/logs" "$MDIR/logs" || true; fi
    # The flags live in the machine's Redis: put them back, or the next lab starts in legacy.
    "${LABCTL[@]}" flags reset >/dev/null 2>&1 || true
    rm -rf "$STATE"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"${LABCTL[@]}" seed --small --if-empty >"$STATE/seed.log" 2>&1 || { cat "$STATE/seed.log"; die "seed failed"; }

# --- helpers: metrics, load runs, facts -------------------------------------------------------------
# The metrics of every replica, the load's start, the report: one Python helper (stdlib only).
cat >"$STATE/faults.py" <<'PY'
import json, os, re, sys, time, urllib.request

KEEP = {
    "lab_flags_store_reachable", "lab_flag_variant", "gateway_ratelimit_decisions_total",
    "gateway_requests_total", "gateway_upstream_attempts_total", "gateway_upstream_failovers_total",
    "gateway_upstream_retries_total", "enrichment_events_total", "enrichment_write_retries_total",
    "enrichment_assigned_partitions", "kafka_producer_events_total",
    "kafka_producer_delivery_failures_total", "kafka_producer_delivered_total",
    "kafka_producer_queue_events", "lab_errors_total", "gateway_upstream_ready",
    "entity_failovers_total", "entity_retries_total",
}
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Loopback only, and never through a proxy the environment may name.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))

def metrics_url(r):
    # After the admin listener lands every replica's metrics are at its admin_url (public port
    # + 1000 natively); before, on the public url.
    base = r.get("admin_url") or r["url"]
    assert base.startswith("http://127.0.0.1:"), base
    return base.rstrip("/") + "/metrics"

def scrape(r):
    with HTTP.open(metrics_url(r), timeout=2) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m.group(1) in KEEP:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out

def labels(key):
    i = key.find("{")
    return (key, {}) if i < 0 else (key[:i], dict(LABEL.findall(key[i:])))

def value(samples, name, **want):
    total = 0.0
    for k, v in samples.items():
        n, l = labels(k)
        if n == name and all(l.get(a) == b for a, b in want.items()):
            total += v
    return total

def flags_of(samples):
    return {l["flag"]: l["variant"] for k, v in samples.items()
            for n, l in [labels(k)] if n == "lab_flag_variant" and v == 1}

def service(name):
    return name.rsplit("-", 1)[0]

def replicas(status_file):
    return [r for r in json.load(open(status_file))["replicas"] if r.get("pid")]

def snap(status_file, out):
    s = {"epoch": time.time(), "replicas": {}}
    for r in json.load(open(status_file))["replicas"]:
        e = {k: r.get(k) for k in ("pid", "ready", "restarts", "rollouts", "url", "admin_url")}
        try:
            e["samples"] = scrape(r) if r.get("pid") else {}
        except Exception as ex:  # a replica being restarted: recorded, not fatal
            e["error"] = str(ex)
        s["replicas"][r["name"]] = e
    json.dump(s, open(out, "w"), indent=1)

def wait_all(status_file, pred, timeout, what):
    t0, reps, bad = time.time(), replicas(status_file), []
    while True:
        bad = []
        for r in reps:
            try:
                if not pred(scrape(r)):
                    bad.append(r["name"])
            except Exception:
                bad.append(r["name"] + " (no answer)")
        if not bad:
            print(f"{time.time() - t0:.3f}")
            return 0
        if time.time() - t0 > timeout:
            print(f"{what}: not on {', '.join(bad)} after {timeout} s", file=sys.stderr)
            return 1
        time.sleep(0.05)

def first_request(status_file, timeout):
    gws = [r for r in replicas(status_file) if service(r["name"]) == "edge-gateway"]
    count = lambda: sum(value(scrape(r), "gateway_requests_total") for r in gws)
    base, t0 = count(), time.time()
    while time.time() - t0 < timeout:
        if count() > base:
            print(f"{time.time():.3f}")
            return 0
        time.sleep(0.02)
    return 1

# ----------------------------------------------------------------------------------------------
# The report: every number below comes from the files this run wrote.
def jl(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []

class Run:
    """One fault's directory: load.json, events.jsonl, facts.jsonl, snap-*.json."""
    def __init__(self, d):
        self.d = d
        self.facts = {f["k"]: f["v"] for f in jl(f"{d}/facts.jsonl")}
        self.t0 = float(self.facts.get("load_t0_epoch", 0))
        self.events = {e["event"]: e["epoch"] - self.t0 for e in jl(f"{d}/events.jsonl")}
        try:
            self.load = json.load(open(f"{d}/load.json"))
        except FileNotFoundError:
            self.load = None

    def snap(self, name):
        try:
            return json.load(open(f"{self.d}/snap-{name}.json"))["replicas"]
        except FileNotFoundError:
            return {}

    def fact(self, k, conv=str, default=None):
        return conv(self.facts[k]) if k in self.facts else default

    def counts(self, tail):
        L = self.load
        if L is None:
            return None
        ok = L["by_status"].get("200", 0)
        ps = L["per_second"]
        errs = [s["second"] for s in ps if s["errors"] > 0]
        last = ps[-tail:]
        return {
            "sent": L["sent"], "ok": ok, "failed": L["sent"] - ok,
            "by_status": {k: v for k, v in L["by_status"].items() if k != "200"},
            "client_overload": L["client_overload"],
            "seconds_with_failures": len(errs),
            "failure_span_s": (errs[-1] - errs[0] + 1) if errs else 0,
            "first_failure_second": errs[0] if errs else None,
            "last_failure_second": errs[-1] if errs else None,
            "tail_seconds": len(last), "tail_first_second": last[0]["second"] if last else None,
            "tail_sent": sum(s["sent"] for s in last), "tail_ok": sum(s["ok"] for s in last),
            "ok_p99_ms": L["ok_latency_ms"]["p99"],
        }

    def failed_between(self, a, b):
        return sum(s["errors"] for s in self.load["per_second"] if a <= s["second"] < b)

    def sent_between(self, a, b):
        return sum(s["sent"] for s in self.load["per_second"] if a <= s["second"] < b)

def delta(before, after, name, **want):
    """Sum over replicas of after - before for one metric (a restarted replica counts from 0)."""
    total = 0.0
    for rep, a in after.items():
        va = value(a.get("samples", {}), name, **want)
        b = before.get(rep, {})
        vb = value(b.get("samples", {}), name, **want) if b.get("pid") == a.get("pid") else 0.0
        total += va - vb
    return total

def origins(before, after):
    """Where the gateway's error answers came from: lab_errors_total{hop, origin, status} deltas
    on the gateway replicas (the error-table row that decided each answer)."""
    o = {}
    for rep, a in after.items():
        if service(rep) != "edge-gateway":
            continue
        b = before.get(rep, {})
        same = b.get("pid") == a.get("pid")
        for k, v in a.get("samples", {}).items():
            n, l = labels(k)
            if n != "lab_errors_total":
                continue
            d = v - (b.get("samples", {}).get(k, 0.0) if same else 0.0)
            if d:
                key = f"{l.get('hop')}/{l.get('origin')} {l.get('status')}"
                o[key] = o.get(key, 0) + int(d)
    return o

def with_client(o, counts):
    """Add the failures no gateway answered (refused or broken connections, client timeouts)."""
    o = dict(o)
    for k in ("client_error", "client_timeout"):
        if counts["by_status"].get(k):
            o[f"load generator: {k}"] = counts["by_status"][k]
    return o

def analyze(out, modes, rate, tail, profile):
    checks, counts = [], {"rate_rps": rate, "tail_seconds": tail, "profile": profile, "modes": {}}
    def check(mode, fault, what, ok, measured):
        checks.append({"mode": mode, "fault": fault, "check": what, "pass": bool(ok), "measured": measured})
    only = os.environ.get("FAULTS_ONLY", "redis-outage enrichment-kill").split()
    for mode in modes:
        # A fault that was to run and left no load file would silently lose its checks (each
        # block below is skipped without one): it is a failed check of its own instead.
        for fault in only:
            if Run(f"{out}/{mode}/{fault}").load is None:
                check(mode, fault, "the fault ran (its load run left load.json)", False,
                      "no load.json: none of its checks could be evaluated")
        C = counts["modes"][mode] = {}
        # 1. Redis down
        r = Run(f"{out}/{mode}/redis-outage")
        if r.load:
            c = r.counts(tail)
            b, dur, back, aft = r.snap("before"), r.snap("during"), r.snap("back"), r.snap("after-set")
            names = sorted(b)
            reach = lambda s: {n: value(s[n].get("samples", {}), "lab_flags_store_reachable") for n in s}
            fl = lambda s: {n: flags_of(s[n].get("samples", {})) for n in s}
            fb, fd, fk, fa = fl(b), fl(dur), fl(back), fl(aft)
            kept = {n: ("kept last-known" if fk.get(n, {}).get("client.mode") == mode
                        and fk.get(n, {}).get(r.fact("marker")) == r.fact("marker_before") else
                        "reverted to defaults" if fk.get(n, {}).get("client.mode") == "resilient"
                        and fk.get(n, {}).get(r.fact("marker")) == r.fact("marker_default") else
                        f"other: {fk.get(n)}") for n in names}
            c.update(
                failures_from=with_client(origins(b, aft), c),
                outage_s=round(r.events.get("redis-started", 0) - r.events.get("redis-down", 0), 1),
                fail_open=delta(b, aft, "gateway_ratelimit_decisions_total", decision="fail_open"),
                reachable_during=reach(dur), reachable_after=reach(aft),
                client_mode={n: [fb.get(n, {}).get("client.mode"), fd.get(n, {}).get("client.mode"),
                                 fk.get(n, {}).get("client.mode")] for n in names},
                marker={n: [fb.get(n, {}).get(r.fact("marker")), fd.get(n, {}).get(r.fact("marker")),
                            fk.get(n, {}).get(r.fact("marker")), fa.get(n, {}).get(r.fact("marker"))]
                        for n in names},
                after_redis_back=kept,
                redis_hash_fields_after_restart=r.fact("hlen_after_restart", int),
                set_during_outage_rc=r.fact("set_during_rc", int),
                set_during_outage_error=r.fact("set_during_err", str, ""),
                set_after_applied_s=r.fact("set_after_applied_s", float),
                set_after_rc=r.fact("set_after_rc", int),
                reachable_1_everywhere_s_after_load_end=r.fact("reachable_back_s", float))
            C["redis-outage"] = c
            check(mode, "redis-outage", "lab_flags_store_reachable = 0 on every replica during the outage",
                  dur and all(v == 0 for v in c["reachable_during"].values()), c["reachable_during"])
            check(mode, "redis-outage", "every replica keeps its last-known flags during the outage",
                  dur and all(fd.get(n, {}).get("client.mode") == mode and
                              fd.get(n, {}).get(r.fact("marker")) == r.fact("marker_before") for n in names),
                  {n: [fd.get(n, {}).get("client.mode"), fd.get(n, {}).get(r.fact("marker"))] for n in names})
            check(mode, "redis-outage", "lab_flags_store_reachable = 1 on every replica after",
                  aft and all(v == 1 for v in c["reachable_after"].values()), c["reachable_after"])
            check(mode, "redis-outage", "the gateway's rate limiter failed open (counted)",
                  c["fail_open"] > 0, c["fail_open"])
            check(mode, "redis-outage", "zero requests failed", c["failed"] == 0 and c["sent"] > 0,
                  f"{c['failed']} of {c['sent']} {c['by_status']}")
            check(mode, "redis-outage", "`labctl flags set` during the outage fails",
                  (c["set_during_outage_rc"] or 0) != 0, c["set_during_outage_rc"])
            check(mode, "redis-outage", "a flag set after Redis is back reaches every replica",
                  c["set_after_rc"] == 0 and c["set_after_applied_s"] is not None,
                  c["set_after_applied_s"])
        # 2. enrichment worker kill -9
        r = Run(f"{out}/{mode}/enrichment-kill")
        if r.load:
            c = r.counts(tail)
            b, a = r.snap("before"), r.snap("after")
            v = r.fact("victim")
            rows, distinct = r.fact("rows", int), r.fact("rows_distinct_docs", int)
            c.update(victim=v, kill_at_s=round(r.events.get("kill", 0), 1),
                     back_after_s=round(r.events.get("back", 0) - r.events.get("kill", 0), 2),
                     supervisor_restarts=(a.get(v, {}).get("restarts") or 0) - (b.get(v, {}).get("restarts") or 0),
                     rows=rows, rows_distinct_docs=distinct,
                     lag_after=r.fact("lag_after", int), lag_zero_after_s=r.fact("lag_zero_after_s", float),
                     redelivered_found_applied=delta(b, a, "enrichment_events_total", outcome="duplicate"),
                     applied=delta(b, a, "enrichment_events_total", outcome="applied"),
                     producer_dropped=delta(b, a, "kafka_producer_events_total", outcome="dropped"),
                     producer_delivery_failures=delta(b, a, "kafka_producer_delivery_failures_total"),
                     failures_from=with_client(origins(b, a), c))
            C["enrichment-kill"] = c
            check(mode, "enrichment-kill", "the supervisor restarted the killed worker (restarts +1)",
                  c["supervisor_restarts"] == 1, c["supervisor_restarts"])
            check(mode, "enrichment-kill", "the group's lag is 0 after the load", c["lag_after"] == 0, c["lag_after"])
            check(mode, "enrichment-kill", "rows in enrichment_documents for the run's documents == 200 answers (exactly)",
                  rows is not None and rows == c["ok"], f"{rows} rows, {c['ok']} answers 200")
            check(mode, "enrichment-kill", "no document applied twice", rows is not None and rows == distinct,
                  f"{rows} rows, {distinct} distinct documents")
        # rows vs 200s for every run (reported)
        C["rows_vs_ok"] = {f["k"]: f["v"] for f in jl(f"{out}/{mode}/rows.jsonl")}
    json.dump({"counts": counts, "checks": checks}, open(f"{out}/counts.json", "w"), indent=1)
    report(out, modes, counts, checks, tail)
    failed = [c for c in checks if not c["pass"]]
    for c in checks:
        print(f"{'PASS' if c['pass'] else 'FAIL'} {c['mode']}/{c['fault']}: {c['check']} — {c['measured']}")
    return 1 if failed or not checks else 0

def fmt_from(o):
    return ", ".join(f"{k}: {v}" for k, v in sorted(o.items(), key=lambda kv: -kv[1])) or "—"

def findings(modes, M, tail):
    """Sentences about what the run showed, each built from its numbers."""
    f = []
    for m in modes:
        c = M[m].get("redis-outage")
        if c:
            rev = [n for n, v in c["after_redis_back"].items() if v == "reverted to defaults"]
            kept = [n for n, v in c["after_redis_back"].items() if v == "kept last-known"]
            was = {n: cm[0] for n, cm in c["client_mode"].items()}
            flip = [n for n in rev if was.get(n) != "resilient"]
            n, fields = len(c["after_redis_back"]), c["redis_hash_fields_after_restart"]
            if rev:
                s = (f"**{m}, Redis back empty**: {len(rev)} of {n} replicas reverted to the flag defaults "
                     f"as soon as they could read the store again (it had {fields} fields), {len(kept)} kept "
                     f"their last-known values")
                if flip:
                    s += f"; client.mode went {was[flip[0]]} → resilient on {len(flip)} replicas with no one setting it"
                f.append(s + ". During the outage every replica kept its last-known flags; an *empty* store, "
                         "unlike an unreachable one, read as \"every flag at its default\".")
            else:
                f.append(f"**{m}, Redis back empty**: {len(kept)} of {n} replicas kept their last-known flags "
                         f"once they could read the store again (it had {fields} fields), as during the "
                         f"outage: an empty store is not taken for \"every flag at its default\".")
    return f

def report(out, modes, counts, checks, tail):
    M = counts["modes"]
    L = []
    p = L.append
    facts = {f["k"]: f["v"] for f in jl(f"{out}/facts.jsonl")}
    p("# Faults under open-loop load, both client modes\n")
    p("Written by `scripts/faults-check.sh` (issue 17) from one run: every number below was measured "
      "by that run (its raw files: load series, metric snapshots, events, `counts.json`). "
      "Assertions are on counts (requests, rows, metric deltas); durations are reported only.\n")
    p(f"- Load: `labctl load`, open loop (Poisson arrivals), {counts['rate_rps']} rps, fresh documents, "
      f"to a native lab on 127.0.0.1 ({facts.get('lab_shape', '?')}), `{counts['profile']}` binaries, "
      f"{facts.get('cpus', '?')} CPUs.")
    p("- One fresh lab per mode; in each, the faults in this order: PostgreSQL restart, Redis outage, "
      "kill -9 of an entity-service, kill -9 of an enrichment worker, rolling restarts.")
    p(f"- \"Failed\" = any answer other than 200 (5xx, 429, client timeout or connection error). "
      f"\"Last {tail} s\" = the load's last {tail} seconds by intended send time. \"From\" = the "
      "error-table rows the gateway answered with (`lab_errors_total{hop, origin, status}` deltas).")
    p(f"- Whole run: {facts.get('elapsed_s', '?')} s. Checks: {sum(c['pass'] for c in checks)} of "
      f"{len(checks)} passed.\n")
    fl = findings(modes, M, tail)
    if fl:
        p("## Findings\n")
        for x in fl:
            p(f"- {x}")
        p("")
    def row(label, f):
        cells = []
        for m in modes:
            try:
                cells.append(str(f(M[m])))
            except (KeyError, TypeError, IndexError):
                cells.append("—")
        p(f"| {label} | " + " | ".join(cells) + " |")
    def table(fault, rows):
        p("| | " + " | ".join(modes) + " |")
        p("|---|" + "---:|" * len(modes))
        for label, f in rows:
            row(label, lambda mm, f=f: f(mm[fault]))
        p("")
    def fails(c):
        return f"{c['failed']} of {c['sent']}"
    p("## 1. Redis down for 30 s\n")
    p("`redis-cli shutdown nosave`, 30 s, then Redis started again by `scripts/deps.sh` (as CI starts it: "
      "nothing on disk, so it comes back empty). Before the outage the run's client.mode and "
      f"`{MARKER_NAME}` (a flag nothing reads while `fault.entity.latency_ms` is 0) were set; "
      f"`{MARKER_NAME}` to a non-default variant, so that keeping and reverting can be told apart.\n")
    table("redis-outage", [
        ("requests sent", lambda c: c["sent"]),
        ("failed (non-200)", fails),
        ("failed, from", lambda c: fmt_from(c["failures_from"])),
        ("outage (Redis down → started)", lambda c: f"{c['outage_s']} s"),
        ("replicas reporting `lab_flags_store_reachable` 0 during", lambda c: f"{sum(v == 0 for v in c['reachable_during'].values())} of {len(c['reachable_during'])}"),
        ("replicas reporting 1 after", lambda c: f"{sum(v == 1 for v in c['reachable_after'].values())} of {len(c['reachable_after'])}"),
        ("gateway rate-limit decisions `fail_open`", lambda c: int(c["fail_open"])),
        ("`labctl flags set` during the outage: exit code", lambda c: c["set_during_outage_rc"]),
        ("Redis hash `lab:flags` fields after the restart", lambda c: c["redis_hash_fields_after_restart"]),
        ("replicas that kept last-known flags when Redis came back empty", lambda c: sum(v == "kept last-known" for v in c["after_redis_back"].values())),
        ("replicas that reverted to the defaults", lambda c: sum(v == "reverted to defaults" for v in c["after_redis_back"].values())),
        ("a flag set after: on every replica within", lambda c: f"{c['set_after_applied_s']:.2f} s"),
    ])
    for m in modes:
        c = M[m].get("redis-outage")
        if not c:
            continue
        p(f"**{m}**: client.mode and `{MARKER_NAME}` per replica, before the outage → during → after Redis came back (before the new set):\n")
        p("| replica | client.mode | " + MARKER_NAME + " | after Redis came back |")
        p("|---|---|---|---|")
        for n in sorted(c["client_mode"]):
            cm, mk = c["client_mode"][n], c["marker"][n]
            p(f"| {n} | {' → '.join(str(x) for x in cm)} | {' → '.join(str(x) for x in mk[:3])} | {c['after_redis_back'][n]} |")
        p("")
        if c["set_during_outage_error"]:
            p(f"`labctl flags set` during the outage ({m}), exit {c['set_during_outage_rc']}:\n")
            p("```\n" + c["set_during_outage_error"].strip() + "\n```\n")
    p("## 2. kill -9 of one enrichment worker mid-stream\n")
    p("The orchestrator publishes one `doc.ingested` per 200; the worker applies each "
      "`(tenant, doc, event_id)` once and commits offsets only after the write. Counted once the "
      "group's lag was 0: rows in `enrichment_documents` whose doc ids are this run's.\n")
    table("enrichment-kill", [
        ("requests sent / 200", lambda c: f"{c['sent']} / {c['ok']}"),
        ("failed, from", lambda c: fmt_from(c["failures_from"])),
        ("rows in enrichment_documents (distinct documents)", lambda c: f"{c['rows']} ({c['rows_distinct_docs']})"),
        ("events redelivered and found applied (`duplicate`)", lambda c: int(c["redelivered_found_applied"])),
        ("producer: dropped / delivery failures", lambda c: f"{int(c['producer_dropped'])} / {int(c['producer_delivery_failures'])}"),
        ("killed at second / back and ready after", lambda c: f"{c['kill_at_s']} / {c['back_after_s']} s"),
        ("group lag after / reached 0 after the load in", lambda c: f"{c['lag_after']} / {c['lag_zero_after_s']:.0f} s"),
    ])
    p("## Enrichment rows vs 200 answers, every run (reported)\n")
    p("Rows in `enrichment_documents` for each run's documents, counted after the group's lag was 0. "
      "Equal unless an event was lost, "
      "applied twice, or published for a request that did not end in a 200 (a legacy gateway attempt "
      "abandoned while its orchestrator finished).\n")
    p("| run | " + " | ".join(modes) + " |")
    p("|---|" + "---:|" * len(modes))
    for run in ["redis-outage", "enrichment-kill"]:
        row(run, lambda mm, run=run: mm["rows_vs_ok"][run])
    p("\n## Checks\n")
    for c in checks:
        p(f"- {'PASS' if c['pass'] else '**FAIL**'} {c['mode']} / {c['fault']}: {c['check']} — measured: `{c['measured']}`")
    open(f"{out}/faults.md", "w").write("\n".join(L) + "\n")

MARKER_NAME = os.environ.get("FAULTS_MARKER", "?")

if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "snap":
        snap(a[0], a[1])
    elif cmd == "wait-flag":
        sys.exit(wait_all(a[0], lambda s: flags_of(s).get(a[1]) == a[2], float(a[3]), f"{a[1]}={a[2]}"))
    elif cmd == "wait-gauge":
        sys.exit(wait_all(a[0], lambda s: value(s, a[1]) == float(a[2]), float(a[3]), f"{a[1]}={a[2]}"))
    elif cmd == "first-request":
        sys.exit(first_request(a[0], float(a[1])))
    elif cmd == "analyze":
        sys.exit(analyze(a[0], a[1].split(), int(a[2]), int(a[3]), a[4]))
    else:
        sys.exit(f"unknown command {cmd}")
PY
py() { python3 "$STATE/faults.py" "$@"; }
status() { "${LABCTL[@]}" status --json >"$STATE/status.json" && cp "$STATE/status.json" "${1:-/dev/null}"; }
snap() { status; py snap "$STATE/status.json" "$1/snap-$2.json"; }
# jline FILE KEY VALUE: one {"k": KEY, "v": VALUE} line; fact DIR KEY VALUE: into DIR/facts.jsonl.
jline() { python3 -c 'import json,sys; print(json.dumps({"k": sys.argv[1], "v": sys.argv[2]}))' "$2" "$3" >>"$1"; }
fact() { jline "$1/facts.jsonl" "$2" "$3"; }
getfact() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["k"] == sys.argv[2]][-1]["v"])' "$1/facts.jsonl" "$2"; }
mark() { printf '{"event":"%s","epoch":%s}\n' "$2" "$(date +%s.%N)" >>"$1/events.jsonl"; }
pid_of() { python3 -c 'import json,sys; print(next(r["pid"] for r in json.load(open(sys.argv[1]))["replicas"] if r["name"] == sys.argv[2]) or "")' "$STATE/status.json" "$1"; }
# ready_again NAME OLD_PID: the supervisor runs a new process for NAME and it is ready.
ready_again() {
    status
    python3 -c 'import json,sys; r=next(r for r in json.load(open(sys.argv[1]))["replicas"] if r["name"] == sys.argv[2]); sys.exit(0 if r["pid"] and str(r["pid"]) != sys.argv[3] and r["ready"] else 1)' \
        "$STATE/status.json" "$1" "$2"
}
all_ready() { status && python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s["replicas"] and all(r["ready"] for r in s["replicas"]) else 1)' "$STATE/status.json"; }
set_flag() { "${LABCTL[@]}" flags set "$1" "$2" >/dev/null; }
# set_mode MODE: every flag back to its default, client.mode=MODE, and every replica applying it.
set_mode() {
    "${LABCTL[@]}" flags reset >/dev/null
    set_flag client.mode "$1"
    status
    py wait-flag "$STATE/status.json" client.mode "$1" 15 >/dev/null || die "client.mode=$1 did not reach every replica"
    wait_for 60 all_ready || die "the lab is not ready in $1 mode: $(cat "$STATE/status.json")"
}

# start_load DIR DURATION: one open-loop run in the background; T0 = when its first request
# reached the gateway (the generator reads its data files first).
T0=""
start_load() {
    local dir="$1" seed=$((SEED_BASE + RUNS))
    RUNS=$((RUNS + 1))
    status
    "${LABCTL[@]}" load --gateway "http://127.0.0.1:$GW" --rate "$RATE" --duration "$2" \
        --seed "$seed" --out "$dir/load.json" >"$dir/load.log" 2>&1 &
    LOAD_PID=$!
    T0="$(py first-request "$STATE/status.json" 30)" ||
        { cat "$dir/load.log"; die "no request reached the gateway within 30 s"; }
    fact "$dir" load_t0_epoch "$T0"
    fact "$dir" seed "$seed"
}
wait_load() {
    local rc=0
    wait "$LOAD_PID" || rc=$?
    LOAD_PID=""
    ((rc == 0)) || { cat "$1/load.log"; die "labctl load failed (exit $rc)"; }
    grep -E '^  (sent|by status)' "$1/load.log" | sed 's/^ */    /'
}
at() {   # at SECONDS: sleep until SECONDS after the load's first request
    local s
    s="$(awk -v t0="$T0" -v at="$1" -v now="$(date +%s.%N)" 'BEGIN { d = t0 + at - now; printf "%.3f", (d > 0 ? d : 0) }')"
    sleep "$s"
}
# rows SEED: rows and distinct documents in enrichment_documents for the documents of the run with
# this --seed: `labctl load` names them doc_<tenant>_<2^40 + seed*10^9 + k> (load.rs STREAM_BASE,
# STREAM_STRIDE).
rows() {
    local lo=$((1099511627776 + $1 * 1000000000)) hi=$((1099511627776 + ($1 + 1) * 1000000000))
    PGCONNECT_TIMEOUT=5 psql -w -X "$DB" -Atq -F ' ' -c "SELECT count(*), count(DISTINCT (tenant_id, doc_id))
        FROM enrichment_documents WHERE doc_id ~ '^doc_[0-9]+_[0-9]+$'
        AND split_part(doc_id, '_', 3)::numeric >= $lo AND split_part(doc_id, '_', 3)::numeric < $hi"
}
lag() {
    "${LABCTL[@]}" kafka lag --brokers "$KAFKA" --json 2>>"$STATE/lag.err" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["total_lag"])'
}
# settle_enrichment DIR [SECONDS [NAME]]: wait until the group's lag is 0 twice, a second apart
# (bounded); every reading goes to DIR/NAMElag.log (-1: `labctl kafka lag` failed).
settle_enrichment() {
    local t0=$SECONDS n=-1 prev=-1
    while ((SECONDS - t0 < ${2:-60})); do
        n="$(lag || echo -1)"
        printf '%s %s\n' "$(date +%s.%N)" "$n" >>"$1/${3:-}lag.log"
        [[ "$n" == 0 && "$prev" == 0 ]] && break
        prev="$n"
        sleep 1
    done
    fact "$1" "${3:-}lag_after" "$n"
    fact "$1" "${3:-}lag_zero_after_s" "$((SECONDS - t0))"
}

# --- the faults -----------------------------------------------------------------------------------
fault_redis_outage() {
    local dir="$1/redis-outage" rc t
    mkdir -p "$dir"
    say "$MODE: Redis down 30 s mid-load (3 s → 33 s of 38 s)"
    fact "$dir" marker "$MARKER"
    fact "$dir" marker_before 0.5
    fact "$dir" marker_default "$(python3 -c 'import json,sys; print(json.load(open("deploy/flags/flags.json"))["flags"][sys.argv[1]]["defaultVariant"])' "$MARKER")"
    set_flag "$MARKER" 0.5
    status
    py wait-flag "$STATE/status.json" "$MARKER" 0.5 15 >/dev/null || die "$MARKER=0.5 did not reach every replica"
    snap "$dir" before
    start_load "$dir" 38
    at 3
    mark "$dir" redis-down
    redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
    wait_for 10 bash -c "! redis-cli -p $REDIS_PORT ping >/dev/null 2>&1" || die "Redis still answers after shutdown"
    status
    py wait-gauge "$STATE/status.json" lab_flags_store_reachable 0 10 >/dev/null || true   # asserted from the snapshot
    at 8
    rc=0
    RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 "${LABCTL[@]}" flags set "$MARKER" 0.25 >"$dir/set-during.out" 2>&1 || rc=$?
    fact "$dir" set_during_rc "$rc"
    fact "$dir" set_during_err "$(cat "$dir/set-during.out")"
    say "$MODE: labctl flags set during the outage: exit $rc: $(tr '\n' ' ' <"$dir/set-during.out")"
    snap "$dir" during
    at 33
    redis_start >"$dir/redis-start.log" 2>&1 || { cat "$dir/redis-start.log"; die "Redis did not start again"; }
    mark "$dir" redis-started
    wait_load "$dir"
    status
    t="$(py wait-gauge "$STATE/status.json" lab_flags_store_reachable 1 20)" || t=""
    fact "$dir" reachable_back_s "${t:-none}"
    sleep 1   # the reload that set reachable=1 applies what it read in the same step
    snap "$dir" back
    fact "$dir" hlen_after_restart "$(redis-cli -p "$REDIS_PORT" hlen lab:flags)"
    rc=0
    "${LABCTL[@]}" flags set "$MARKER" 0.25 >"$dir/set-after.out" 2>&1 || rc=$?
    fact "$dir" set_after_rc "$rc"
    if ((rc == 0)) && t="$(py wait-flag "$STATE/status.json" "$MARKER" 0.25 15)"; then
        fact "$dir" set_after_applied_s "$t"
    fi
    snap "$dir" after-set
    set_mode "$MODE"
}

# kill_replica DIR NAME: kill -9 NAME's process mid-load; the supervisor restarts it.
kill_replica() {
    local dir="$1" name="$2" pid
    status
    pid="$(pid_of "$name")"
    [[ -n "$pid" ]] || die "$name has no pid in labctl status"
    fact "$dir" victim "$name"
    fact "$dir" victim_pid "$pid"
    mark "$dir" kill
    kill -9 "$pid"
    wait_for 30 ready_again "$name" "$pid" || die "$name not restarted and ready within 30 s"
    mark "$dir" back
}

fault_enrichment_kill() {
    local dir="$1/enrichment-kill" r
    mkdir -p "$dir"
    say "$MODE: kill -9 of enrichment-1 mid-stream (at 6 s of 18 s), then rows vs 200s"
    settle_enrichment "$dir" 60 pre_   # earlier runs' events out of the way
    snap "$dir" before
    start_load "$dir" 18
    at 6
    kill_replica "$dir" enrichment-1
    wait_load "$dir"
    sleep 2   # the last events leave the producers
    settle_enrichment "$dir"
    snap "$dir" after
    r="$(rows "$(getfact "$dir" seed)")"
    fact "$dir" rows "${r% *}"
    fact "$dir" rows_distinct_docs "${r#* }"
}

# rows_vs_ok MODE_DIR: after the mode's last run, every run's rows next to its 200s (reported).
rows_vs_ok() {
    local f ok r
    for f in redis-outage enrichment-kill; do
        [[ -f "$1/$f/load.json" ]] || continue
        ok="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["by_status"].get("200", 0))' "$1/$f/load.json")"
        r="$(rows "$(getfact "$1/$f" seed)")"
        jline "$1/rows.jsonl" "$f" "${r% *} rows / $ok answers 200"
    done
}

# --- run ------------------------------------------------------------------------------------------
: >"$OUT/facts.jsonl"
fact "$OUT" cpus "$(nproc)"
fact "$OUT" lab_shape "1 edge-gateway, 2 orchestrators, 2 entity-services, 2 enrichment workers"
START=$SECONDS
for MODE in $MODES; do
    MDIR="$OUT/$MODE"
    rm -rf "$MDIR"
    mkdir -p "$MDIR"
    say "$MODE: fresh lab (ports $GW/$ORCH/$ENT/$ENR, Kafka $KAFKA)"
    "${LABCTL[@]}" flags reset >/dev/null
    set_flag client.mode "$MODE"
    no_fds "${LABCTL[@]}" up --gateway-port $GW --orchestrator-port $ORCH --entity-port $ENT \
        --enrichment-port $ENR --kafka "$KAFKA" --trace-sample 0 --bin-dir "$BIN" \
        </dev/null >"$MDIR/up.log" 2>&1 || { cat "$MDIR/up.log"; die "labctl up failed"; }
    set_mode "$MODE"
    say "$MODE: warm-up (5 s)"
    mkdir -p "$MDIR/warmup"
    start_load "$MDIR/warmup" 5
    wait_load "$MDIR/warmup"
    if wants redis-outage; then fault_redis_outage "$MDIR"; fi
    if wants enrichment-kill; then fault_enrichment_kill "$MDIR"; fi
    rows_vs_ok "$MDIR"
    "${LABCTL[@]}" down >/dev/null 2>&1 || true
    cp -r "$STATE/logs" "$MDIR/logs"
done
fact "$OUT" elapsed_s "$((SECONDS - START))"

say "report"
rc=0
FAULTS_ONLY="$ONLY" FAULTS_MARKER="$MARKER" py analyze "$OUT" "$MODES" "$RATE" "$TAIL" "$PROFILE" || rc=$?
say "report: $OUT/faults.md (counts: $OUT/counts.json)"
if ((PUBLISH)); then
    cp "$OUT/faults.md" docs/reports/faults.md
    say "published: docs/reports/faults.md"
fi
((rc == 0)) || die "some checks failed (above; the report says what was measured)"
say "every fault's counts are what they should be, in every mode"
