#!/usr/bin/env bash
# scripts/chain-limit.sh — issue 17, "the chain against its physical limit": how many lookups a
# second PostgreSQL serves on this machine when nothing else runs (pgbench), how many the whole
# chain (gateway -> orchestrator -> entity-service -> PostgreSQL) gets through at its highest
# sustainable rate, the ratio of the two, and where the rest of the CPU goes (perf profiles of
# one orchestrator, one entity-service, the gateway and the lab's PostgreSQL backends, and the
# whole machine's CPU split by process). docs/reports/chain-limit.md is one run's report.
#
#   1. pgbench, the lab down: `pgbench -S -M prepared` on pgbench's own tables in a scratch
#      database (CHAIN_PGBENCH_DB, dropped afterwards), then the lab's hot candidate lookup
#      (crates/lab-db: queries::CANDIDATE_LOOKUP, verbatim) as a custom script against the lab
#      database, its (tenant, kind, locale) drawn per transaction from a sample of the seeded
#      entities — nothing is written to the lab database.
#   2. a fresh native lab (`labctl up`), resilient mode, the cache warmed by CHAIN_WARMUP_SECONDS
#      of load, then open-loop `labctl load` steps at CHAIN_RATES; the highest step whose p99
#      (200s, from intended send) is under CHAIN_P99_MS with >= CHAIN_OK_PCT % 200s is the
#      chain's maximum sustainable rate. Steps stop early once one is far past the bound.
#   3. that rate again for CHAIN_PROFILE_SECONDS + 10 s with `perf record -F 499 --call-graph
#      dwarf` (or -g where DWARF stacks cannot be sampled) on one orchestrator, one
#      entity-service, the gateway, the lab's PostgreSQL backends and tansu, at once; per-thread
#      CPU from /proc either way (the fallback when perf cannot sample at all).
#
#   scripts/chain-limit.sh                  # ~6-7 min under the lock; report in .lab/reports/chain-limit-<ts>/
#   scripts/chain-limit.sh --publish        # and copy the report to docs/reports/chain-limit.*
#   scripts/chain-limit.sh --report-only DIR [--publish]   # redraw a run's report, no measuring
#
# Env knobs: CHAIN_RATES ("600 800 1000 1200 1400 1600"), CHAIN_STEP_SECONDS (20),
#   CHAIN_WARMUP_RATE (500), CHAIN_WARMUP_SECONDS (60), CHAIN_P99_MS (250), CHAIN_OK_PCT (99),
#   CHAIN_PGBENCH_CLIENTS ("2 4 8"), CHAIN_PGBENCH_SECONDS (15), CHAIN_PGBENCH_SCALE (10: 1M rows,
#   the size of the lab's entities), CHAIN_PGBENCH_DB (chain_limit_pgbench), CHAIN_PROFILE_SECONDS
#   (15), CHAIN_PERF_HZ (499), CHAIN_HOT_PER_TXN (8 hot lookups per pgbench transaction),
#   CHAIN_KAFKA (default KAFKA_BOOTSTRAP; '' runs the lab without Kafka and enrichment, to see the
#   chain without the broker), CHAIN_OUT, CHAIN_LOCK (/tmp/lab-heavy.lock), CHAIN_UP_ARGS (extra
#   `labctl up` args),
#   CARGO_TARGET_DIR, LAB_DATABASE_URL, LAB_STATE_DIR, KAFKA_BOOTSTRAP.
#
# Bounded: every load is open loop, time-bounded and sent to 127.0.0.1 only; the lab, pgbench's
# scratch database and every background process are gone on every exit path. The measuring part
# (pgbench, the lab, the load, perf) holds `flock -x` on CHAIN_LOCK; preparing and the report do
# not. Needs the release build and a seeded database (scripts/lab.sh does both) and refuses to
# run while another native lab is up in the same state dir.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
say() { printf '[chain-limit] %s\n' "$*"; }
die() { printf '[chain-limit] ERROR: %s\n' "$*" >&2; exit 1; }

PUBLISH=0 REPORT_ONLY=""
while (($#)); do
    case "$1" in
        --publish) PUBLISH=1 ;;
        --report-only) REPORT_ONLY="${2:?--report-only DIR}"; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
    shift
done

BIN="${CARGO_TARGET_DIR:-target}/release"
LABCTL="$BIN/labctl"
DB_URL="${LAB_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/retry_storm_lab}"
PG_BASE="${DB_URL%/*}"
LAB_DB="${DB_URL##*/}"
LAB_DB="${LAB_DB%%\?*}"
PGB_DB="${CHAIN_PGBENCH_DB:-chain_limit_pgbench}"
STATE="${LAB_STATE_DIR:-.lab}"
RATES="${CHAIN_RATES:-600 800 1000 1200 1400 1600}"
STEP_S="${CHAIN_STEP_SECONDS:-20}"
# Warm: fresh documents never repeat, so the caches need tens of thousands of documents to reach
# their steady hit rate (services/orchestrator/config/defaults.toml: 65% after 60,000).
WARM_RATE="${CHAIN_WARMUP_RATE:-500}"
WARM_S="${CHAIN_WARMUP_SECONDS:-60}"
P99_MS="${CHAIN_P99_MS:-250}"
OK_PCT="${CHAIN_OK_PCT:-99}"
PGB_CLIENTS="${CHAIN_PGBENCH_CLIENTS:-2 4 8}"
PGB_S="${CHAIN_PGBENCH_SECONDS:-15}"
PGB_SCALE="${CHAIN_PGBENCH_SCALE:-10}"
PROF_S="${CHAIN_PROFILE_SECONDS:-15}"
# 499 Hz, not perf's customary 99: at the chain's maximum each service replica uses ~0.1 core,
# which 99 Hz would sample ~150 times in 15 s.
PERF_HZ="${CHAIN_PERF_HZ:-499}"
KAFKA="${CHAIN_KAFKA-${KAFKA_BOOTSTRAP:-127.0.0.1:9092}}"
# Hot lookups per pgbench transaction: one parameter pick (a round trip) serves this many.
HOT_PER_TXN="${CHAIN_HOT_PER_TXN:-8}"
LOCK="${CHAIN_LOCK:-/tmp/lab-heavy.lock}"
OUT="${REPORT_ONLY:-${CHAIN_OUT:-$STATE/reports/chain-limit-$(date +%s)}}"

# --- the report (also the whole of --report-only) -------------------------------------------------
render() {
    python3 - "$OUT" > "$OUT/chain-limit.md" <<'PY'
import json, os, re, sys, glob, datetime
out = sys.argv[1]
meta = json.load(open(f"{out}/meta.json"))
P99, OKP = meta["p99_ms"], meta["ok_pct"]

def prom(path):
    """{name: [(labels, value)]} of one Prometheus text scrape."""
    m = {}
    if not os.path.exists(path):
        return m
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        mm = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)', line)
        if not mm:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', mm.group(2) or ""))
        try:
            m.setdefault(mm.group(1), []).append((labels, float(mm.group(3))))
        except ValueError:
            pass
    return m

def total(scrape, name, **want):
    return sum(v for l, v in scrape.get(name, []) if all(l.get(k) == w for k, w in want.items()))

replicas = json.load(open(f"{out}/replicas.json")) if os.path.exists(f"{out}/replicas.json") else []
by_pid = {str(r["pid"]): r["name"] for r in replicas}

def category(pid, comm, cmd, load_pid, pg_client=None):
    if pid in by_pid:
        return by_pid[pid]
    if load_pid and pid == str(load_pid):
        return "labctl load (the load generator)" if comm == "labctl" else "pgbench (its client)"
    if comm == "postgres" or cmd.startswith("postgres"):
        if f" {meta['lab_db']} " in f" {cmd} ":
            owner = by_pid.get((pg_client or {}).get(pid, ""), "")
            svc_ = re.sub(r"-\d+$", "", owner) if owner else "other clients"
            return f"postgres backends of the lab database: {svc_}"
        if f" {meta['pgbench_db']} " in f" {cmd} ":
            return "postgres backends of the pgbench database"
        return "postgres (other: background workers, autovacuum)"
    if comm.startswith("tansu"):
        return "tansu (Kafka protocol broker)"
    if comm.startswith("redis-server"):
        return "redis"
    if comm == "labctl" and " supervise" in cmd:
        return "labctl supervise (supervisor + OTLP receiver)"
    if comm == "perf":
        return "perf (the profiler itself)"
    if not cmd:
        return "kernel threads: " + (comm.split("-", 1)[1] if comm.startswith("kworker") and "-" in comm else re.sub(r"[/.:]\S*$", "", comm))
    return f"other: {comm}"

def cpu_split(step_dir, load_pid):
    a, b = (json.load(open(f"{step_dir}/{n}.json")) for n in ("cpu0", "cpu1"))
    dt, clk = b["t"] - a["t"], a["clk"]
    split = {}
    for pid, (comm, cmd, ticks, *start) in b["procs"].items():
        before = a["procs"].get(pid)
        same = before and (before[3:] == start if start else before[0] == comm)
        d = ticks - (before[2] if same else 0)
        if d > 0:
            c = category(pid, comm, cmd, load_pid, {**a.get("pg_client", {}), **b.get("pg_client", {})})
            split[c] = split.get(c, 0) + d / clk / dt
    ca, cb = a["cpu"], b["cpu"]
    tot = sum(cb) - sum(ca)
    idle = (cb[3] + cb[4]) - (ca[3] + ca[4])
    busy_cores = (tot - idle) / tot * meta["cores"] if tot else 0.0
    threads = {}
    for pid, tasks in b.get("tasks", {}).items():
        ta = a.get("tasks", {}).get(pid, {})
        g = {}
        for tid, (comm, ticks, *_) in tasks.items():
            d = ticks - (ta.get(tid, [comm, 0])[1])
            key = re.sub(r"[-_ ]?\d+$", "", comm) or comm
            n, s = g.get(key, (0, 0.0))
            g[key] = (n + 1, s + d / clk / dt)
        threads[by_pid.get(pid, "tansu" if b["procs"].get(pid, [""])[0].startswith("tansu") else pid)] = g
    return split, busy_cores, dt, threads

def split_rows(split, min_cores=0.01):
    """The split's rows, biggest first; 'other: x' rows under min_cores folded into one."""
    rows, rest = [], 0.0
    for k, v in sorted(split.items(), key=lambda kv: -kv[1]):
        if v < min_cores:
            rest += v
        else:
            rows.append((k, v))
    if rest >= 0.005:
        rows.append(("everything else (each < %.2f cores)" % min_cores, rest))
    return rows

def step_row(d):
    s = json.load(open(f"{d}/step.json"))
    load = json.load(open(f"{d}/load.json"))
    sent = load["sent"] or 1
    st = load["by_status"]
    ok = st.get("200", 0)
    five = sum(v for k, v in st.items() if k.startswith("5"))
    other = sent - ok - five
    dt = s["t1"] - s["t0"]
    es0 = [prom(f"{d}/metrics0/{r['name']}.prom") for r in replicas if r["service"] == "entity-service"]
    es1 = [prom(f"{d}/metrics1/{r['name']}.prom") for r in replicas if r["service"] == "entity-service"]
    or0 = [prom(f"{d}/metrics0/{r['name']}.prom") for r in replicas if r["service"] == "orchestrator"]
    or1 = [prom(f"{d}/metrics1/{r['name']}.prom") for r in replicas if r["service"] == "orchestrator"]
    inc = lambda a, b, name, **w: sum(total(y, name, **w) - total(x, name, **w) for x, y in zip(a, b))
    spans = inc(es0, es1, "entity_service_spans_total")
    exact = inc(es0, es1, "entity_db_query_duration_seconds_count", query="exact")
    cand = inc(es0, es1, "entity_db_query_duration_seconds_count", query="candidate")
    cand_s = inc(es0, es1, "entity_db_query_duration_seconds_sum", query="candidate")
    exact_s = inc(es0, es1, "entity_db_query_duration_seconds_sum", query="exact")
    hits = inc(or0, or1, "orchestrator_cache_requests_total", result="hit")
    lookups = inc(or0, or1, "orchestrator_cache_requests_total")
    split, busy, cdt, threads = cpu_split(d, s.get("load_pid"))
    gw0 = [prom(f"{d}/metrics0/{r['name']}.prom") for r in replicas if r["service"] == "edge-gateway"]
    gw1 = [prom(f"{d}/metrics1/{r['name']}.prom") for r in replicas if r["service"] == "edge-gateway"]
    origins = {}
    for x, y in zip(gw0, gw1):
        for l, v in y.get("lab_errors_total", []):
            before = sum(v0 for l0, v0 in x.get("lab_errors_total", []) if l0 == l)
            if v - before > 0 and l.get("status", "").startswith("5"):
                k = f"{l.get('hop', '?')}/{l.get('origin', '?')}"
                origins[k] = origins.get(k, 0) + v - before
    xacts = None
    if os.path.exists(f"{d}/xacts0") and os.path.exists(f"{d}/xacts1"):
        try:
            xacts = (int(open(f"{d}/xacts1").read()) - int(open(f"{d}/xacts0").read())) / dt
        except ValueError:
            pass
    pg = split.get("postgres backends of the lab database: entity-service", 0.0)
    resolves = inc(es0, es1, "entity_db_query_duration_seconds_count", query="acquire")
    p = load["ok_latency_ms"]
    ok_pct = 100.0 * ok / sent
    passed = p["p99"] <= P99 and ok_pct >= OKP
    return dict(name=s["name"], rate=s["rate"], seconds=s["seconds"], sent=load["sent"],
        achieved=load["achieved_rps"], ok_rps=load["ok_rps"], ok_pct=ok_pct, five=five, other=other,
        p50=p["p50"], p99=p["p99"], all_p99=load["all_latency_ms"]["p99"], spans_s=spans / dt,
        stmts_s=(exact + cand) / dt, exact_s=exact / dt, cand_s=cand / dt,
        cand_ms=1e3 * cand_s / cand if cand else None, exact_ms=1e3 * exact_s / exact if exact else None,
        spans_per_doc=lookups / ok if ok else None, hit_pct=100 * hits / lookups if lookups else None,
        es_spans_per_doc=spans / ok if ok else None,
        busy=busy, split=split, threads=threads, passed=passed, overload=load["client_overload"],
        by_status=st, origins=origins, xacts_s=xacts, pg_cores=pg, resolves_s=resolves / dt,
        pg_all=sum(v for k, v in split.items() if k.startswith("postgres backends of the lab database")),
        pg_us_per_stmt=1e6 * pg / ((exact + cand) / dt) if exact + cand else None,
        cpu_ms_per_doc=1e3 * busy / load["ok_rps"] if load["ok_rps"] else None)

steps = [step_row(d) for d in sorted(glob.glob(f"{out}/steps/*"), key=lambda d: json.load(open(f"{d}/step.json"))["order"])]
warm = [s for s in steps if s["name"] == "warmup"]
ladder = [s for s in steps if s["name"].startswith("rate-")]
prof = next((s for s in steps if s["name"] == "profile"), None)
best = max((s for s in ladder if s["passed"]), key=lambda s: s["rate"], default=None)
pgb = json.load(open(f"{out}/pgbench.json")) if os.path.exists(f"{out}/pgbench.json") else []
def pg_best(kind):
    return max((r for r in pgb if r["script"] == kind), key=lambda r: r["lookups_s"], default=None)
best_s, best_hot = pg_best("select-only"), pg_best("hot-candidate-lookup")

f0 = lambda v, d=0: "—" if v is None else f"{v:,.{d}f}"
pr = print
ts = datetime.datetime.fromtimestamp(meta["started"], datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
pr(f"# The chain against its physical limit: {meta['cores']} cores, one run\n")
pr(f"Measured by `scripts/chain-limit.sh` on {ts} ({meta['cores']} cores, {meta['cpu_model']}; PostgreSQL {meta['pg_version']}; "
   f"release binaries built with `[profile.release] debug = {meta['release_debug']}`). Everything below comes from this one run: "
   f"first pgbench with the lab down, then a fresh native lab in resilient mode, warmed, stepped up open loop, "
   f"then profiled at its maximum sustainable rate. Raw files: `{meta['out']}`.\n")

pr("## 1. What PostgreSQL serves alone (pgbench, lab down)\n")
pr(f"`-M prepared -j 2 -T {meta['pgbench_seconds']}`, one run per client count. *select-only* is `pgbench -S` on pgbench's own "
   f"tables (scale {meta['pgbench_scale']}: {meta['pgbench_scale'] * 100_000:,} accounts, in the scratch database `{meta['pgbench_db']}`, dropped afterwards). "
   f"*hot candidate lookup* is the lab's hot statement, `queries::CANDIDATE_LOOKUP` verbatim, against `{meta['lab_db']}`; each transaction "
   f"first picks {meta['hot_per_txn']} (tenant, kind, locale) triples from {meta['hot_params']:,} sampled entities (tenants in proportion to their size, "
   f"each tenant's document locale from the corpus; a one-row `SELECT … \\gset` over constant arrays: no table is created), then runs "
   f"{meta['hot_per_txn']} hot lookups, so lookups/s is {meta['hot_per_txn']} × TPS and the pick's cost is in the transaction latency. "
   f"Per-statement latencies are pgbench's own (`-r`).\n")
pr("| script | clients | TPS | lookups per transaction | lookups/s | latency avg ms (transaction) | lookup ms (per statement) | parameter pick ms | CPU: postgres backends / pgbench client / tansu / rest (cores) |")
pr("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for r in pgb:
    cs = "—"
    if os.path.exists(f"{out}/{r['cpu_dir']}/cpu1.json"):
        sp, busy, _, _ = cpu_split(f"{out}/{r['cpu_dir']}", open(f"{out}/{r['cpu_dir']}/pid").read().strip())
        pgc = sum(v for k, v in sp.items() if k.startswith("postgres backends"))
        cl = sp.get("pgbench (its client)", 0.0)
        tn = sp.get("tansu (Kafka protocol broker)", 0.0)
        r["cpu"] = {"busy": busy, "postgres_backends": pgc, "pgbench": cl, "tansu": tn, "split": sp}
        cs = f"{pgc:.2f} / {cl:.2f} / {tn:.2f} / {max(0.0, busy - pgc - cl - tn):.2f}"
    pr(f"| {r['script']} | {r['clients']} | {f0(r['tps'])} | {r['lookups_per_txn']} | {f0(r['lookups_s'])} | {f0(r['latency_ms'], 3)} | {f0(r.get('stmt_ms'), 3)} | {f0(r.get('pick_ms'), 3)} | {cs} |")
noisy = [r for r in pgb if r.get("cpu") and max(0.0, r["cpu"]["busy"] - r["cpu"]["postgres_backends"] - r["cpu"]["pgbench"] - r["cpu"]["tansu"]) >= 0.1]
if noisy:
    pr("\n*rest* is everything else on the machine; where it reached 0.1 cores, the biggest: " + "; ".join(
        f"{r['script']} at {r['clients']} clients: " + ", ".join(f"{k.replace('other: ', '')} {v:.2f}" for k, v in sorted(
            ((k, v) for k, v in r["cpu"]["split"].items() if not k.startswith("postgres backends") and k != "pgbench (its client)"),
            key=lambda kv: -kv[1])[:3]) for r in noisy) + " (other jobs on the shared machine).")
if os.path.exists(f"{out}/hot-plan.txt"):
    plan = [l.rstrip() for l in open(f"{out}/hot-plan.txt") if l.strip()]
    shape = next((l.strip() for l in plan if "→" in l or "->" in l), None)
    state = [l.strip() for l in plan if l.strip().startswith(("entities:", "locale"))]
    if shape:
        pr(f"\nThe lab database as both measurements found it (`labctl db status` before the run): the hot statement's generic plan "
           f"is {shape}; " + "; ".join(state) + ". Both sides of the ratio ran against this same state.")
pr()

pr("## 2. What the whole chain sustains (open loop through the gateway)\n")
pr(f"A fresh `labctl up` (1 gateway, 2 orchestrators, 2 entity-services, "
   + (f"2 enrichment workers, Kafka at {meta['kafka']}" if meta.get("kafka") else "no Kafka (`--kafka ''`)")
   + f"; trace sample and everything else as `labctl up` defaults), `client.mode=resilient`, warmed with {f0(warm[0]['rate']) if warm else '—'} rps for {warm[0]['seconds'] if warm else '—'} s, then "
   f"`labctl load` (Poisson arrivals, fresh never-repeating documents, size tenant mix) for {meta['step_seconds']} s per step. "
   f"Latency is from each request's intended send time. **The bound: p99 of the 200s <= {P99:g} ms with >= {OKP:g} % 200s.** Why {P99:g} ms: "
   f"the user's budget is 3 s, so a p99 a twelfth of it leaves all the room a retry or a slow tenant needs, and it is a few times the "
   f"chain's own healthy p99 (the lowest step's, {f0(ladder[0]['p99']) if ladder else '—'} ms here; docs/reports/soak.md's first 5 minutes: tens of ms) — "
   f"a p99 past it means queues, not work. *lookups/s* is entity-service's resolved spans per second (`entity_service_spans_total`, "
   f"both replicas), the spans the orchestrators' caches did not answer; *statements/s* is its exact-match plus candidate-lookup "
   f"executions (`entity_db_query_duration_seconds_count`).\n")
pr("| step | offered rps | answered 200/s | 200 % | p50 ms | p99 ms | 5xx | spans per doc (cache hit %) | lookups/s | statements/s (exact + candidate) | PostgreSQL transactions/s (all clients of the lab db) | hot lookup ms (chain) | machine CPU busy (cores) | CPU ms per answered doc | within bound |")
pr("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for s in warm + ladder:
    verdict = "warm-up" if s["name"] == "warmup" else ("**yes**" if s["passed"] else "no")
    pr(f"| {s['name']} | {f0(s['rate'])} | {f0(s['ok_rps'])} | {s['ok_pct']:.2f} | {f0(s['p50'], 1)} | {f0(s['p99'], 0)} | {s['five']:,} | "
       f"{f0(s['spans_per_doc'], 1)} ({f0(s['hit_pct'], 1)}) | {f0(s['spans_s'])} | {f0(s['exact_s'])} + {f0(s['cand_s'])} | {f0(s['xacts_s'])} | {f0(s['cand_ms'], 2)} | "
       f"{s['busy']:.2f} | {f0(s['cpu_ms_per_doc'], 2)} | {verdict} |")
five_rows = [s for s in warm + ladder if s["origins"]]
if five_rows:
    pr("\nWhere the 5xx came from (the gateway's `lab_errors_total` by hop/origin): " + "; ".join(
        f"{s['name']}: " + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(s["origins"].items(), key=lambda kv: -kv[1])) for s in five_rows) + ".")
stopped = meta.get("stopped_early")
if stopped:
    pr(f"\nThe ladder stopped after `{stopped}`: far past the bound, higher steps would only measure a deeper queue.")
if best:
    pr(f"\n**Maximum sustainable rate: {f0(best['rate'])} rps offered** ({f0(best['ok_rps'])} answered 200/s, p99 {f0(best['p99'])} ms, "
       f"{best['ok_pct']:.2f} % 200s); {f0(best['spans_s'])} lookups/s and {f0(best['stmts_s'])} statements/s reach PostgreSQL.")
else:
    pr(f"\n**No step stayed within the bound**: the ratio below uses the lowest step.")
ref = best or (ladder[0] if ladder else None)
pr()

pr("## 3. The ratio\n")
if ref and best_s and best_hot:
    pr("| chain at its maximum | per second | vs pgbench -S at its best | vs the hot statement at its best |")
    pr("|---|---:|---:|---:|")
    pr(f"| lookups (resolved spans) | {f0(ref['spans_s'])} | {100*ref['spans_s']/best_s['lookups_s']:.1f} % of {f0(best_s['lookups_s'])} | {100*ref['spans_s']/best_hot['lookups_s']:.1f} % of {f0(best_hot['lookups_s'])} |")
    pr(f"| statements (exact + candidate) | {f0(ref['stmts_s'])} | {100*ref['stmts_s']/best_s['lookups_s']:.1f} % | {100*ref['stmts_s']/best_hot['lookups_s']:.1f} % |")
    pr(f"| hot candidate lookups | {f0(ref['cand_s'])} | {100*ref['cand_s']/best_s['lookups_s']:.1f} % | {100*ref['cand_s']/best_hot['lookups_s']:.1f} % |")
    pr(f"\nA document costs the chain {f0(ref['spans_per_doc'], 1)} span lookups, {f0(ref['hit_pct'], 1)} % of them answered by the "
       f"orchestrators' caches; {f0(ref['es_spans_per_doc'], 1)} per document reach entity-service, in "
       f"{f0(ref['stmts_s'] / ref['ok_rps'] if ref['ok_rps'] else None, 2)} statements. The hot lookup takes {f0(ref['cand_ms'], 2)} ms on "
       f"average inside the chain (entity-service's view, pool wait included) against {f0(best_hot.get('stmt_ms'), 3)} ms per statement in pgbench "
       f"at {best_hot['clients']} clients.\n")
split_src = ref
if split_src:
    pr(f"## 4. Where the CPU goes at {f0(split_src['rate'])} rps (whole machine, /proc, the step itself)\n")
    pr(f"Sampled from `/proc/<pid>/stat` at the start and end of the step ({split_src['seconds']} s of load). The machine was "
       f"{split_src['busy']:.2f} of {meta['cores']} cores busy (`/proc/stat`).\n")
    idle = cpu_split(f"{out}/idle", None) if os.path.exists(f"{out}/idle/cpu1.json") else None
    if idle:
        pr(f"*idle lab* is the same lab up with no load for {idle[2]:.0f} s before the warm-up ({idle[1]:.2f} cores busy).\n")
    pr("| process | cores at the max rate | share of the machine | cores, idle lab |")
    pr("|---|---:|---:|---:|")
    for k, v in split_rows(split_src["split"]):
        iv = (idle[0].get(k, 0.0) if k != "labctl load (the load generator)" else None) if idle else None
        pr(f"| {k} | {v:.2f} | {100*v/meta['cores']:.1f} % | {'—' if iv is None else f'{iv:.2f}'} |")
    gen = split_src["split"].get("labctl load (the load generator)", 0.0)
    svc = sum(v for k, v in split_src["split"].items() if re.match(r"(edge-gateway|orchestrator|entity-service)-\d", k))
    pg = split_src["pg_all"]
    pr(f"\nThe load generator takes {gen:.2f} cores ({100*gen/meta['cores']:.0f} % of the machine) — CPU the chain does not get; the "
       f"services {svc:.2f}, PostgreSQL's lab backends {pg:.2f}. In pgbench the same PostgreSQL had the machine to itself "
       f"(pgbench's own client included).\n")

pr("## 5. CPU profiles at that rate\n")
pm = meta.get("profile") or {}
if prof:
    dw = meta.get("dwarf_probe_samples", 0)
    pr(f"A second run at {f0(prof['rate'])} rps (p99 {f0(prof['p99'])} ms, {prof['ok_pct']:.2f} % 200s); `{pm.get('command', 'perf record')}` "
       f"for {meta['profile_seconds']} s on each process below at once. Sampler: **{pm.get('sampler', '?')}**; "
       f"{meta.get('perf_hz', 99)} Hz because each service replica uses only ~0.1 core here (99 Hz would give ~150 samples). "
       f"Self time from `perf report --no-children --sort dso,sym -g none`; inclusive shares from every sample's whole stack "
       f"(`perf script`), which needs DWARF unwinding: the release binaries have no frame pointers, so `-g` chains end at the first "
       f"Rust frame (a 2 s DWARF probe on orchestrator-1 got {dw} samples, so DWARF {'was used' if dw else 'could not be used: -g, self time only'}). "
       + (f"perf itself took {prof['split'].get('perf (the profiler itself)', 0.0):.2f} cores during the window, so this run's "
          f"latency is not the step's ({'outside' if not prof['passed'] else 'still within'} the bound: p99 {f0(prof['p99'])} ms, {prof['ok_pct']:.2f} % 200s). ")
       + f"Symbols: {meta.get('symbols', '?')}. PostgreSQL and tansu have no symbols of their own beyond their exports (Debian's "
       f"postgres without -dbgsym, tansu's wheel stripped), so their entries are partly addresses.\n")
for t in pm.get("targets", []):
    path = f"{out}/profile/{t['name']}.top.json"
    pr(f"### {t['name']} (pid {t['pid']})\n")
    if prof and t["name"] in prof["threads"]:
        th = prof["threads"][t["name"]]
        pr("Threads (cores, /proc during the profile): " + ", ".join(
            f"{k} ×{n} {c:.2f}" for k, (n, c) in sorted(th.items(), key=lambda kv: -kv[1][1]) if c >= 0.005) + "\n")
    if not os.path.exists(path):
        log = f"{out}/profile/{t['name']}.record.log"
        why = open(log).readline().strip() if os.path.exists(log) else ""
        pr(f"(no perf samples{': `' + why + '`' if why else ''})\n")
        continue
    top = json.load(open(path))
    pr(f"{top['samples']:,} samples. By object: " + ", ".join(f"{d} {p:.1f} %" for d, p in top["dso"][:5]) + ".\n")
    pr("| self % | object | symbol |")
    pr("|---:|---|---|")
    for p, dso, sym in top["sym"][:12]:
        sym = sym if len(sym) <= 110 else sym[:107] + "…"
        pr(f"| {p:.2f} | {dso} | `{sym.replace('|', '¦')}` |")
    if top.get("families"):
        pr("\nSelf time by family (summed over symbols): " + ", ".join(f"{k} {v:.1f} %" for k, v in top["families"] if v >= 1) + ".")
    if top.get("inclusive"):
        pr(f"\nInclusive (share of the {top['stack_samples']:,} samples with the family anywhere on the stack; they overlap): "
           + ", ".join(f"{k} {v:.0f} %" for k, v in top["inclusive"] if v >= 1) + ".")
    if top.get("own"):
        pr("\nThe lab's own functions, inclusive: " + ", ".join(
            f"`{k if len(k) <= 70 else k[:67] + '…'}` {v:.0f} %" for k, v in top["own"][:8]) + ".")
    pr()

# --- what is cheap to fix: each item only where this run's numbers show it ---------------------
def top_of(name):
    path = f"{out}/profile/{name}.top.json"
    return json.load(open(path)) if os.path.exists(path) else {}
def incl(name, family):
    return next((v for k, v in top_of(name).get("inclusive", []) if k.startswith(family)), 0.0)
def own(name, fn):
    return next((v for k, v in top_of(name).get("own", []) if k == fn), 0.0)
items = []
if ref:
    sp = ref["split"]
    cores = meta["cores"]
    tansu = sp.get("tansu (Kafka protocol broker)", 0.0)
    tansu_idle = idle[0].get("tansu (Kafka protocol broker)", 0.0) if split_src and idle else None
    tth = (prof or {}).get("threads", {}).get("tansu", {})
    if tansu >= 0.2 * cores:
        items.append(
            f"**The Kafka broker, not the chain, is the biggest consumer of the machine**: tansu used {tansu:.2f} cores at "
            f"{f0(ref['rate'])} rps ({100*tansu/cores:.0f} % of the machine){f' and {tansu_idle:.2f} with no load at all' if tansu_idle is not None else ''}"
            + (f", on {sum(n for n, _ in tth.values())} threads" if tth else "") + "; the services together used "
            f"{svc:.2f}. "
            + ("Its cost does not come from the traffic (as much or more with no load than at the maximum): an idle cost, not a per-event one. "
               if tansu_idle is not None and tansu_idle >= 0.8 * tansu else "")
            + "It is off the request path (nothing waits on it), so it only competes for CPU. Cheap levers, in order: "
            f"measure the chain without it (`CHAIN_KAFKA='' scripts/chain-limit.sh`: `labctl up --kafka ''`); try "
            f"`TOKIO_WORKER_THREADS=2` for the tansu that scripts/deps.sh starts (a Tokio runtime sized for 2 cores; not "
            f"measured here); and revisit `LAB_KAFKA__BATCH_MAX_EVENTS=1`, the native lab's tansu-watermark workaround that makes "
            f"every document its own produce request (rdkafka is {incl('orchestrator-1', 'Kafka'):.0f} % of orchestrator-1's samples).")
    # The first step where the limit's 503s are more than noise (0.5 % of the requests).
    lim = [s_ for s_ in ladder if any("concurrency_limited" in k for k in s_["origins"])
           and sum(s_["origins"].values()) >= 0.005 * s_["sent"]]
    if lim:
        first = lim[0]
        what = ", ".join(f"{k} {v:,.0f}" for k, v in first["origins"].items())
        if first["busy"] >= 0.9 * cores:
            items.append(
                f"**The maximum is set by the CPU; the orchestrators' concurrency limit is only what fails first**: its 503s first "
                f"pass 0.5 % of the requests at {f0(first['rate'])} rps ({what}), with the machine {first['busy']:.2f} of {cores} cores busy; the hot lookup "
                f"took {f0(first['cand_ms'], 2)} ms inside the chain against {f0(best_hot.get('stmt_ms') if best_hot else None, 3)} ms in pgbench — "
                f"waiting for a core, not PostgreSQL work (its backends for entity-service used {first['pg_cores']:.2f} cores). The limit "
                f"(`[resilient] max_concurrency = 16` per orchestrator) turns that queueing into fast 503s, as designed; raising it or "
                f"`resilience.concurrency_adaptive` would trade the 503s for latency. What raises the maximum is CPU given back: the "
                f"items below.")
        else:
            items.append(
                f"**The orchestrators' static concurrency limit sheds before the machine is busy**: its 503s first pass 0.5 % of the "
                f"requests at {f0(first['rate'])} rps ({what}), with {first['busy']:.2f} of {cores} cores busy and the hot lookup at {f0(first['cand_ms'], 2)} ms. "
                f"`[resilient] max_concurrency = 16` per orchestrator is sized from connection counts (2 × 16 / 2), not measured; cheap "
                f"to try: the ladder with `labctl flags set resilience.concurrency_adaptive on`, or `LAB_RESILIENT__MAX_CONCURRENCY`.")
    if ref["resolves_s"] and ref["stmts_s"]:
        rt = (ref["stmts_s"] + 3 * ref["resolves_s"]) / ref["resolves_s"]
        chain_us = ref["pg_us_per_stmt"]
        pgb_us = 1e6 * best_hot["cpu"]["postgres_backends"] / best_hot["lookups_s"] if best_hot and best_hot.get("cpu") else None
        items.append(
            f"**Three of every resolve's round trips to PostgreSQL carry no lookup**: with a budget the fixed client's request runs "
            f"`BEGIN`, `SET LOCAL statement_timeout`, its lookups, `COMMIT` (services/entity-service/src/resolve.rs); at "
            f"{f0(ref['rate'])} rps entity-service ran {f0(ref['resolves_s'])} such transactions/s for {f0(ref['stmts_s'])} lookup statements/s, "
            f"~{rt:.1f} round trips per transaction. The PostgreSQL backends serving entity-service spent {f0(chain_us)} µs of CPU per lookup statement "
            f"(the transaction's other three statements, and the exact match's `= ANY` over the batch, included) in the chain"
            + (f" against {f0(pgb_us)} µs per hot lookup in pgbench" if pgb_us else "") + ". Cheap: send "
            f"`BEGIN; SET LOCAL statement_timeout = N` as one simple-query batch (one round trip, not two), or skip the transaction "
            f"when the batch is one statement.")
    jac = own("entity-service-1", "entity_service::score::jaccard")
    if jac >= 3:
        items.append(
            f"**entity-service's scoring allocates on every comparison**: `score::jaccard` is {jac:.0f} % of entity-service-1's samples "
            f"(inclusive) — two `HashSet`s (SipHash, heap) per span × candidate, 20 candidates per unmatched span, and each candidate's "
            f"name re-tokenized for every span. Cheap: tokenize the candidates once per kind, compare small sorted token slices.")
    tr = {n: incl(n, "tracing subscriber") for n in ("edge-gateway-1", "orchestrator-1", "entity-service-1")}
    if max(tr.values()) >= 5:
        items.append(
            "**Span bookkeeping for unsampled requests**: the tracing subscriber and OpenTelemetry layer are on "
            + ", ".join(f"{v:.0f} % of {k}'s" for k, v in tr.items()) + " samples (inclusive) with `labctl up`'s 10 % trace sample; "
            "spans are built for every request and dropped at export. Cheap to check: one ladder with "
            "`CHAIN_UP_ARGS='--trace-sample 0'`; if it moves the maximum, skip span creation below the sampling decision.")
    al = {n: incl(n, "allocator") for n in ("edge-gateway-1", "orchestrator-1", "entity-service-1")}
    jemalloc = any("_rjem_" in sym for _, _, sym in top_of("orchestrator-1").get("sym", []))
    if max(al.values()) >= 8 and not jemalloc:
        items.append("**malloc/free**: " + ", ".join(f"{v:.0f} % of {k}'s samples" for k, v in al.items())
                     + " (inclusive); a faster global allocator (mimalloc, jemalloc) is a two-line change per binary.")
    gen = sp.get("labctl load (the load generator)", 0.0)
    items.append(
        f"**Not a fix, a caveat**: the load generator took {gen:.2f} cores ({100*gen/cores:.0f} % of the machine) at the maximum and "
        f"pgbench's own client {best_s['cpu']['pgbench']:.2f} cores in the -S run, so both sides of the ratio pay for their client; "
        f"the chain's CPU per answered document fell from {f0(ladder[0]['cpu_ms_per_doc'], 2)} ms at {f0(ladder[0]['rate'])} rps to "
        f"{f0(ref['cpu_ms_per_doc'], 2)} ms at {f0(ref['rate'])} rps: much of the machine's load is fixed cost that does not grow with the rate."
        if best_s and best_s.get("cpu") else
        f"**Not a fix, a caveat**: the load generator took {gen:.2f} cores ({100*gen/cores:.0f} % of the machine) at the maximum.")
    dw = meta.get("dwarf_probe_samples", 0)
    items.append(
        f"**Profiling settings** (Cargo.toml unchanged): `[profile.release] debug = {meta['release_debug']}` already keeps symbols and "
        f"line tables, which is all perf needs for names. What the binaries lack is frame pointers, so `perf record -g` stops at the "
        f"first Rust frame; " + (f"DWARF unwinding works on this machine ({dw} samples in the 2 s probe) and was used, at the price of "
        f"an 8 KB stack copy per sample." if dw else "DWARF unwinding got no samples here, so only self time is shown.")
        + " For cheap whole-stack profiles, a profiling build with `RUSTFLAGS='-C force-frame-pointers=yes'` (no Cargo profile key "
        "sets it on stable) would make `-g` work at any frequency.")
if items:
    pr("## 6. What is cheap to fix on the hot path (for the lead; nothing here was changed)\n")
    for i, t in enumerate(items, 1):
        pr(f"{i}. {t}")
    pr()
pr(f"\nRaw: `summary.json` beside this report (every step, the pgbench runs, the CPU split, the profiles' top entries).")

json.dump({"meta": meta, "pgbench": pgb, "steps": [{k: v for k, v in s.items() if k != "threads"} for s in steps],
           "max_sustainable_rps": best["rate"] if best else None},
          open(f"{out}/summary.json", "w"), indent=1, default=str)
PY
}

# --- the profiles, summarized (also redone by --report-only) --------------------------------------
analyse() {
    python3 - "$OUT" <<'PY'
import glob, gzip, json, os, re, sys
out = sys.argv[1]
# Families of symbols: what a self-time entry is spending on (first match wins).
FAM = [("kernel (syscalls, TCP loopback, scheduler)", r"^\[kernel|kallsyms"),
       ("allocator (malloc/free/realloc, jemalloc)", r"malloc|free|realloc|_int_|alloc::alloc|__rdl_|cfree|arena|_rjem_|\bje_|rallocx|mallocx|sdallocx"),
       ("memcpy/memmove/memset/strlen", r"mem(cpy|move|set|cmp)|strlen|__memc"),
       ("JSON (serde_json)", r"serde_json|serde::"),
       ("tracing / OpenTelemetry / protobuf export", r"tracing|opentelemetry|otel|prost|tonic"),
       ("metrics (prometheus)", r"prometheus"),
       ("HTTP (hyper, h2, http, reqwest, axum, tower)", r"hyper|\bh2::|\bhttp::|reqwest|axum|tower|httparse"),
       ("tokio runtime and sync", r"tokio|parking_lot|crossbeam|futures|std::sync|std::thread"),
       ("PostgreSQL client (tokio-postgres, deadpool)", r"postgres|deadpool|postgres_protocol"),
       ("hashing / crypto (sha2, hash maps)", r"sha2|hashbrown|siphash|SipHasher|ahash|fxhash|hash::"),
       ("text (normalize, spans, unicode, regex, jaccard)", r"normalize|candidate_spans|guess_kind|unicode|regex|aho_corasick|jaccard|score|char"),
       ("LRU cache", r"lru"),
       ("libc (other)", r"libc|ld-linux"),
       ("postgres executor / planner / index", r"Exec|exec_|index|btree|_bt_|heap|Plan|plan|tuple|slot|hash_search|LWLock|Snapshot|pq_|PortalRun|postgres$")]
# Inclusive families: the share of samples with at least one frame of the family on the stack
# (so they overlap, and nest: the HTTP server frames hold the handler's).
INCL = [("syscalls (any kernel frame)", r"kernel", "dso"),
        ("scheduler: park / wake / context switch", r"finish_task_switch|futex|park|epoll_wait|schedule", "sym"),
        ("allocator (malloc / free, jemalloc)", r"^(malloc|free|cfree|realloc|calloc|_int_malloc|_int_free|_int_realloc|malloc_consolidate|__libc_malloc|__libc_free|__rust_alloc|__rust_dealloc|__rdl_|_rjem_|do_rallocx|je_|sdallocx|mallocx)", "sym"),
        ("JSON (serde_json)", r"serde_json", "sym"),
        ("tracing subscriber + OpenTelemetry (span bookkeeping, export)", r"tracing_subscriber|tracing_opentelemetry|opentelemetry|tracing_core::dispatcher", "sym"),
        ("Prometheus metrics", r"prometheus::", "sym"),
        ("HTTP client to the next hop (reqwest / hyper client)", r"reqwest::|hyper::client|hyper_util::client", "sym"),
        ("Kafka producer (rdkafka)", r"rdkafka|rd_kafka", "sym"),
        ("PostgreSQL client (tokio-postgres, deadpool)", r"tokio_postgres|postgres_protocol|deadpool", "sym"),
        ("Redis (flags, rate limits)", r"^redis::|<redis::", "sym"),
        ("API key hashing (sha2)", r"sha2", "sym"),
        ("document text: spans, normalize, kind", r"lab_api::text", "sym"),
        ("orchestrator LRU cache", r"lru::|orchestrator::cache", "sym"),
        ("PostgreSQL: executor", r"^Exec|ExecutorRun|standard_ExecutorRun|PortalRun", "sym"),
        ("PostgreSQL: planner / plan cache", r"planner|GetCachedPlan|BuildCachedPlan|CheckCachedPlan|RevalidateCachedQuery|pg_plan_", "sym"),
        ("PostgreSQL: transaction start/commit", r"StartTransaction|CommitTransaction|AbortTransaction|exec_simple_query", "sym"),
        ("PostgreSQL: protocol (socket read/write, pq_)", r"^pq_|secure_read|secure_write|socket_", "sym")]
OWN = r"^<?(orchestrator|entity_service|edge_gateway|lab_api|lab_core|entity_client|entity_client_legacy|lab_flags|lab_kafka|lab_contract|lab_db)::"
targets = [l.rstrip("\n").split("\t") for l in open(f"{out}/profile/targets.tsv") if l.strip()] if os.path.exists(f"{out}/profile/targets.tsv") else []
for name, pid in targets:
    rep = f"{out}/profile/{name}.report.txt"
    if not os.path.exists(rep):
        continue
    text = open(rep).read()
    sp = f"{out}/profile/{name}.samples"
    samples = int(open(sp).read().strip() or 0) if os.path.exists(sp) else 0
    sym = []
    for line in text.splitlines():
        mm = re.match(r"^\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$", line)
        if mm:
            sym.append((float(mm.group(1)), mm.group(2), mm.group(4)))
    dso = []
    for line in open(f"{out}/profile/{name}.dso.txt"):
        mm = re.match(r"^\s+([\d.]+)%\s+(\S+)\s*$", line)
        if mm:
            dso.append((mm.group(2), float(mm.group(1))))
    fam = {}
    for p, d, s in sym:
        key = next((k for k, rx in FAM if re.search(rx, d if k.startswith("kernel") else s)), "other (the service's own code, unresolved)")
        fam[key] = fam.get(key, 0) + p
    incl, own, n = {}, {}, 0
    st = f"{out}/profile/{name}.stacks.gz"
    if os.path.exists(st):
        frames = []
        def flush():
            global n
            if not frames:
                return
            n += 1
            hit = {k for k, rx, where in INCL for sym_, dso_ in frames if re.search(rx, dso_ if where == "dso" else sym_)}
            for k in hit:
                incl[k] = incl.get(k, 0) + 1
            for k in {re.sub(r"::\{\{closure\}\}", "", f) for f, _ in frames if re.match(OWN, f)}:
                own[k] = own.get(k, 0) + 1
            frames.clear()
        for line in gzip.open(st, "rt", errors="replace"):
            mm = re.match(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
            if mm:
                frames.append((re.sub(r"\+0x[0-9a-f]+$", "", mm.group(1)), mm.group(2)))
            elif not line.strip():
                flush()
        flush()
    json.dump({"samples": samples, "sym": sym[:40], "dso": dso[:10],
               "families": sorted(fam.items(), key=lambda kv: -kv[1]),
               "stack_samples": n,
               "inclusive": sorted(((k, 100 * v / n) for k, v in incl.items()), key=lambda kv: -kv[1]) if n else [],
               "own": sorted(((k, 100 * v / n) for k, v in own.items()), key=lambda kv: -kv[1])[:12] if n else []},
              open(f"{out}/profile/{name}.top.json", "w"), indent=1)
PY
}

publish() {
    mkdir -p docs/reports
    cp "$OUT/chain-limit.md" docs/reports/chain-limit.md
    cp "$OUT/summary.json" docs/reports/data/chain-limit.json
    say "published docs/reports/chain-limit.md and data/chain-limit.json"
}

if [[ -n "$REPORT_ONLY" ]]; then
    [[ -f "$OUT/meta.json" ]] || die "$OUT has no meta.json (not a chain-limit run)"
    analyse
    render
    cat "$OUT/chain-limit.md"
    ((PUBLISH)) && publish
    exit 0
fi

# --- preparing (no lock) -------------------------------------------------------------------------
[[ -x "$LABCTL" ]] || die "build first: cargo build --release --bins (no $LABCTL)"
for tool in pgbench psql perf curl python3; do
    command -v "$tool" >/dev/null || die "$tool not found (pgbench/psql: postgresql-client; perf: linux-perf)"
done
mkdir -p "$OUT/steps" "$OUT/profile" "$OUT/bin"
say "output: $OUT"

# A snapshot of every process's CPU ticks (and the threads of the pids in $2), for the CPU split.
cat > "$OUT/bin/snap.py" <<'PY'
import json, os, sys, time
out, want = sys.argv[1], set(filter(None, (sys.argv[2] if len(sys.argv) > 2 else "").split(",")))
def stat(path):
    """comm, utime + stime, starttime (a kernel worker's comm changes with its work queue: the
    start time, not the name, says whether it is still the same task)."""
    s = open(path).read()
    r = s.rfind(")")
    f = s[r + 2:].split()
    return s[s.find("(") + 1:r], int(f[11]) + int(f[12]), int(f[19])
snap = {"t": time.time(), "clk": os.sysconf("SC_CLK_TCK"),
        "cpu": [int(x) for x in open("/proc/stat").readline().split()[1:9]], "procs": {}, "tasks": {}}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        comm, ticks, start = stat(f"/proc/{pid}/stat")
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
        snap["procs"][pid] = [comm, cmd, ticks, start]
        if pid in want:
            snap["tasks"][pid] = {t: list(stat(f"/proc/{pid}/task/{t}/stat")) for t in os.listdir(f"/proc/{pid}/task")}
    except (OSError, ValueError, IndexError):
        pass
# Which process is on the other end of each PostgreSQL backend: a backend's title names its
# client's port ("postgres: ... 127.0.0.1(48396) idle"); the socket with that local port belongs
# to the client.
import re
inode_pid = {}
for pid in snap["procs"]:
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                l = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if l.startswith("socket:["):
                inode_pid[l[8:-1]] = pid
    except OSError:
        pass
port_inode = {}
for tab in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        for line in open(tab).readlines()[1:]:
            f = line.split()
            port_inode[int(f[1].rsplit(":", 1)[1], 16)] = f[9]
    except OSError:
        pass
snap["pg_client"] = {}
for pid, (comm, cmd, *_) in snap["procs"].items():
    m = re.search(r"\((\d+)\)", cmd) if comm == "postgres" else None
    if m and int(m.group(1)) in port_inode:
        owner = inode_pid.get(port_inode[int(m.group(1))])
        if owner and owner != pid:
            snap["pg_client"][pid] = owner
json.dump(snap, open(out, "w"))
PY

# The release profile's debug setting, as Cargo.toml says it (reported, never changed).
REL_DEBUG="$(awk '/^\[profile.release\]/{f=1;next} /^\[/{f=0} f&&/^debug/{sub(/^debug *= */,"");print}' Cargo.toml)"
REL_DEBUG="${REL_DEBUG:-false (unset)}"

# --- cleanup: only what this script started ------------------------------------------------------
LAB_UP=0 PGB_CREATED=0 BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    if ((LAB_UP)); then "$LABCTL" down >/dev/null 2>&1 || true; fi
    if ((LAB_UP)); then "$LABCTL" flags reset >/dev/null 2>&1 || true; fi
    if ((PGB_CREATED)); then psql -q "$PG_BASE/postgres" -c "DROP DATABASE IF EXISTS $PGB_DB" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# --- the measuring part: under the shared lock ---------------------------------------------------
say "waiting for the lock $LOCK (other labs, loads and builds take turns)"
exec 9>>"$LOCK"
flock -x 9
say "lock held"
STARTED=$(date +%s)

lab_pid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("supervisor_pid", 0))' \
    "$STATE/run/lab.json" 2>/dev/null || echo 0)"
if [[ "$lab_pid" != 0 ]] && kill -0 "$lab_pid" 2>/dev/null; then
    die "a native lab is up in $STATE (supervisor $lab_pid): not this script's; stop it first (labctl down)"
fi
"$LABCTL" --database-url "$DB_URL" seed --if-empty > "$OUT/seed.log" 2>&1 9>&- ||
    { tail -n 20 "$OUT/seed.log"; die "seed failed"; }
"$LABCTL" --database-url "$DB_URL" db status > "$OUT/hot-plan.txt" 2>&1 9>&- || true

# 1a. pgbench -S on its own tables, in a scratch database.
say "pgbench: initialising scale $PGB_SCALE in the scratch database $PGB_DB"
psql -q "$PG_BASE/postgres" -c "DROP DATABASE IF EXISTS $PGB_DB" >/dev/null
psql -q "$PG_BASE/postgres" -c "CREATE DATABASE $PGB_DB" >/dev/null
PGB_CREATED=1
pgbench -i -q -s "$PGB_SCALE" "$PG_BASE/$PGB_DB" > "$OUT/pgbench-init.log" 2>&1 9>&- ||
    { tail -n 20 "$OUT/pgbench-init.log"; die "pgbench -i failed"; }

# 1b. The hot statement with parameters drawn from the seeded data: a random sample of entities
# (tenants in proportion to their size, kinds as the catalogue has them) with each tenant's
# document locale from the corpus (NULL for English-home tenants). pgbench's \gset turns a NULL
# into '' and `locale = '' OR locale IS NULL` selects exactly the rows `locale = NULL OR ...` does.
say "pgbench: the hot candidate lookup's parameters from the seeded data"
psql -AtF $'\t' "$DB_URL" -c "SELECT tenant_id, kind FROM entities TABLESAMPLE BERNOULLI (1) REPEATABLE (17)" \
    > "$OUT/hot-sample.tsv"
python3 - "$OUT" "${LAB_DATA_DIR:-$STATE/data}/corpus.jsonl" crates/lab-db/src/lib.rs "$HOT_PER_TXN" <<'PY'
import json, random, re, sys
out, corpus, lib, per = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
loc = {}
for line in open(corpus):
    d = json.loads(line)
    loc.setdefault(d["tenant_id"], d.get("locale"))
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/hot-sample.tsv") if l.strip()]
rows = [(int(t), k) for t, k in rows if int(t) in loc]
random.Random(17).shuffle(rows)
rows = rows[:2000]
assert rows, "no sampled entity belongs to a tenant of the corpus"
src = open(lib).read()
m = re.search(r'pub const CANDIDATE_LOOKUP: &str = "\\\n(.*?)";', src, re.S)
assert m, "queries::CANDIDATE_LOOKUP not found in crates/lab-db/src/lib.rs"
stmt = m.group(1).strip()
q = lambda s: "NULL" if s is None else "'" + s.replace("'", "''") + "'"
kinds = sorted({k for _, k in rows})
locales = sorted({loc[t] for t, _ in rows if loc[t]}) + [None]
# Fixed-width arrays without NULLs: subscripting them is O(1), so the pick stays cheap; the
# kind and locale are indexes into two short arrays of text.
ta = ",".join(str(t) for t, _ in rows)
ka = ",".join(str(kinds.index(k) + 1) for _, k in rows)
la = ",".join(str(locales.index(loc[t]) + 1) for t, _ in rows)
K = "ARRAY[" + ",".join(q(k) for k in kinds) + "]::text[]"
L = "ARRAY[" + ",".join(q(l) for l in locales) + "]::text[]"
with open(f"{out}/hot.sql", "w") as f:
    for j in range(1, per + 1):
        f.write(f"\\set i{j} random(1, {len(rows)})\n")
    cols = ", ".join(f"a.t[:i{j}] AS t{j}, ({K})[a.k[:i{j}]] AS k{j}, ({L})[a.l[:i{j}]] AS l{j}" for j in range(1, per + 1))
    f.write(f"SELECT {cols} FROM (SELECT ARRAY[{ta}]::bigint[] AS t, ARRAY[{ka}]::int[] AS k, ARRAY[{la}]::int[] AS l) a \\gset\n")
    for j in range(1, per + 1):
        f.write(stmt.replace("$1", f":t{j}").replace("$2", f":k{j}").replace("$3", f":l{j}") + ";\n")
open(f"{out}/hot-params.count", "w").write(str(len(rows)))
PY

# run_sampled DIR SECONDS CMD...: CMD in the background, CPU snapshots 1 s after it starts and
# 1 s before it should end (while it still runs: an exited process's ticks are lost to /proc).
run_sampled() {
    local d="$1" secs="$2" pid
    shift 2
    mkdir -p "$d"
    "$@" 9>&- &
    pid=$!
    BG_PIDS=("$pid")
    echo "$pid" > "$d/pid"
    sleep 1
    python3 "$OUT/bin/snap.py" "$d/cpu0.json" "${SNAP_TASKS:-}"
    # (snap.py itself takes a few tenths of a second on a busy machine: stay clear of the end)
    sleep "$(python3 -c "print(max(0.5, $secs - 3.5))")"
    python3 "$OUT/bin/snap.py" "$d/cpu1.json" "${SNAP_TASKS:-}"
    wait "$pid"
}

pgb_run() { # script-name clients args...
    local name="$1" c="$2"
    shift 2
    say "pgbench $name: $c clients, $PGB_S s"
    run_sampled "$OUT/pgbench/$name-c$c" "$PGB_S" \
        pgbench -M prepared -n -r -c "$c" -j 2 -T "$PGB_S" "$@" > "$OUT/pgbench-$name-c$c.log" 2>&1 ||
        { tail -n 20 "$OUT/pgbench-$name-c$c.log"; die "pgbench $name -c $c failed"; }
    BG_PIDS=()
    grep -E '^(tps|latency average)' "$OUT/pgbench-$name-c$c.log" | sed 's/^/    /'
}
for c in $PGB_CLIENTS; do pgb_run select-only "$c" -S "$PG_BASE/$PGB_DB"; done
for c in $PGB_CLIENTS; do pgb_run hot-candidate-lookup "$c" -f "$OUT/hot.sql" "$DB_URL"; done
psql -q "$PG_BASE/postgres" -c "DROP DATABASE IF EXISTS $PGB_DB" >/dev/null
PGB_CREATED=0
python3 - "$OUT" <<'PY'
import glob, json, re, sys
out = sys.argv[1]
rows = []
for path in glob.glob(f"{out}/pgbench-*-c*.log"):
    name, c = re.search(r"pgbench-(.*)-c(\d+)\.log$", path).groups()
    text = open(path).read()
    tps = float(re.search(r"^tps = ([\d.]+)", text, re.M).group(1))
    lat = float(re.search(r"^latency average = ([\d.]+) ms", text, re.M).group(1))
    # -r: "   0.123  0  SELECT ..." per statement (pgbench 15: latency, failures, text).
    stmts = [(float(a), s) for a, s in re.findall(r"^\s+([\d.]+)\s+\d+\s+(\S.*)$", text, re.M)]
    hot = [ms for ms, s in stmts if s.startswith("SELECT id, canonical_name")]
    pick = [ms for ms, s in stmts if s.startswith("SELECT a.t[")]
    per = len(hot) or 1
    r = {"script": name, "clients": int(c), "tps": tps, "lookups_per_txn": per, "lookups_s": tps * per,
         "latency_ms": lat, "stmt_ms": sum(hot) / len(hot) if hot else None, "pick_ms": pick[0] if pick else None,
         "cpu_dir": f"pgbench/{name}-c{c}"}
    rows.append(r)
rows.sort(key=lambda r: (r["script"] != "select-only", r["clients"]))
json.dump(rows, open(f"{out}/pgbench.json", "w"), indent=1)
PY

# 2. The chain.
say "fresh native lab (labctl up), resilient mode"
# shellcheck disable=SC2086  # CHAIN_UP_ARGS is a list of flags
"$LABCTL" --database-url "$DB_URL" up --kafka "$KAFKA" ${CHAIN_UP_ARGS:-} \
    > "$OUT/up.log" 2>&1 9>&- || { cat "$OUT/up.log"; LAB_UP=1; die "labctl up failed"; }
LAB_UP=1
"$LABCTL" status --json > "$OUT/status.json" 9>&-

# Where each replica serves /metrics: its admin_url when `labctl status --json` names one (the
# admin-port plan: public + 1000), else the admin port if it answers, else the public port (the
# binaries before the admin listener).
metrics_url() { # public-url admin-url
    local pub="$1" adm="$2" guess
    if [[ -n "$adm" ]]; then echo "$adm/metrics"; return 0; fi
    guess="${pub%:*}:$((${pub##*:} + 1000))"
    # Into a variable first: with pipefail, `curl | grep -q` fails when grep stops reading early.
    local body
    body="$(curl -fsS -m 5 "$guess/metrics" 2>/dev/null || true)"
    if grep -q '^# TYPE' <<< "$body"; then echo "$guess/metrics"; return 0; fi
    body="$(curl -fsS -m 5 "$pub/metrics" 2>/dev/null || true)"
    if grep -q '^# TYPE' <<< "$body"; then echo "$pub/metrics"; return 0; fi
    return 1
}
: > "$OUT/replicas.tsv"
while IFS=$'\t' read -r name pid url adm; do
    m="$(metrics_url "$url" "$adm")" || die "$name: no /metrics at its admin or public port ($url)"
    printf '%s\t%s\t%s\t%s\n' "$name" "$pid" "$url" "$m" >> "$OUT/replicas.tsv"
done < <(python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["replicas"]:
    print(r["name"], r.get("pid") or 0, r["url"], r.get("admin_url") or "", sep="\t")' "$OUT/status.json")
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/replicas.tsv") if l.strip()]
json.dump([{"name": n, "pid": int(p), "url": u, "metrics": m, "service": re.sub(r"-\d+$", "", n)} for n, p, u, m in rows],
          open(f"{out}/replicas.json", "w"), indent=1)
PY
say "metrics at: $(cut -f1,4 "$OUT/replicas.tsv" | tr '\t' '=' | tr '\n' ' ')"
pid_of() { awk -F'\t' -v n="$1" '$1 == n {print $2}' "$OUT/replicas.tsv"; }
SCRAPED="$(awk -F'\t' '$1 ~ /^(entity-service|orchestrator|edge-gateway)-/ {print $1 "\t" $4}' "$OUT/replicas.tsv")"

"$LABCTL" flags reset > /dev/null 9>&-
"$LABCTL" flags set client.mode resilient > /dev/null 9>&-
deadline=$((SECONDS + 15))
while :; do
    missing=""
    while IFS=$'\t' read -r name m; do
        body="$(curl -fsS -m 5 "$m" 2>/dev/null || true)"
        grep -qF 'lab_flag_variant{flag="client.mode",variant="resilient"} 1' <<< "$body" || missing="$missing $name"
    done <<< "$SCRAPED"
    [[ -z "$missing" ]] && break
    ((SECONDS < deadline)) || die "client.mode=resilient not applied within 15 s by:$missing"
    sleep 0.5
done
say "client.mode=resilient on every replica"

# Transactions PostgreSQL has finished in the lab database (every resolve is one, and each
# of its statements is one round trip: BEGIN, SET LOCAL, the lookups, COMMIT).
pg_xacts() {
    psql -At "$PG_BASE/postgres" -c "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$LAB_DB'" 2>/dev/null || echo 0
}
ORDER=0
# step NAME RATE SECONDS [profile]: one open-loop load, with scrapes and CPU snapshots around it.
# The rates (spans/s, statements/s) are over the scrapes' interval; the CPU split over the
# snapshots' (the whole step, or the perf window for the profile step).
step() {
    local name="$1" rate="$2" secs="$3" profile="${4:-}" d="$OUT/steps/$1" load_pid t0 t1
    mkdir -p "$d/metrics0" "$d/metrics1"
    ORDER=$((ORDER + 1))
    while IFS=$'\t' read -r n m; do curl -fsS -m 3 "$m" > "$d/metrics0/$n.prom" || true; done <<< "$SCRAPED"
    pg_xacts > "$d/xacts0"
    t0=$(date +%s.%N)
    if [[ -n "$profile" ]]; then
        "$LABCTL" load --rate "$rate" --duration "$secs" --seed "$ORDER" --out "$d/load.json" \
            > "$d/load.log" 2>&1 9>&- &
        load_pid=$!
        BG_PIDS=("$load_pid")
        echo "$load_pid" > "$d/pid"
        # Past the load's first seconds (connections opening), then the profile window alone.
        sleep 5
        profile_now "$d"
        wait "$load_pid" || { tail -n 20 "$d/load.log"; die "labctl load ($name) failed"; }
    else
        run_sampled "$d" "$secs" "$LABCTL" load --rate "$rate" --duration "$secs" --seed "$ORDER" \
            --out "$d/load.json" > "$d/load.log" 2>&1 || { tail -n 20 "$d/load.log"; die "labctl load ($name) failed"; }
        load_pid="$(cat "$d/pid")"
    fi
    BG_PIDS=()
    while IFS=$'\t' read -r n m; do curl -fsS -m 3 "$m" > "$d/metrics1/$n.prom" || true; done <<< "$SCRAPED"
    t1=$(date +%s.%N)
    pg_xacts > "$d/xacts1"
    printf '{"name":"%s","order":%d,"rate":%s,"seconds":%s,"t0":%s,"t1":%s,"load_pid":%d}\n' \
        "$name" "$ORDER" "$rate" "$secs" "$t0" "$t1" "$load_pid" > "$d/step.json"
    LAST_VERDICT="$(python3 - "$d/load.json" "$P99_MS" "$OK_PCT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); p99 = r["ok_latency_ms"]["p99"]; ok = 100 * r["by_status"].get("200", 0) / max(1, r["sent"])
bound, okb = float(sys.argv[2]), float(sys.argv[3])
v = "pass" if p99 <= bound and ok >= okb else ("far" if p99 > 4 * bound or ok < 90 else "fail")
print(f"{v} p99 {p99:.0f} ms, 200s {ok:.2f} %, {r['ok_rps']:.0f} ok/s, by status {r['by_status']}")
PY
)"
    say "  $name ($rate rps, $secs s): $LAST_VERDICT"
}

# 3. perf on one orchestrator, one entity-service, the gateway and the lab database's PostgreSQL
# backends, all at once, for PROF_S seconds; per-thread CPU from /proc either way.
PROFILE_CMD="perf record -F $PERF_HZ -g -p PID -- sleep $PROF_S" DWARF_SAMPLES=0 CALL_GRAPH=(-g)
profile_now() { # step-dir: its CPU snapshots bracket the perf window (perf's own cost included)
    local d="$1" pg_pids name pid pids=() names=() tasks
    tasks="$(pid_of orchestrator-1),$(pid_of entity-service-1),$(pid_of edge-gateway-1),$(cat "$STATE/run/tansu.pid" 2>/dev/null || true)"
    # Long-lived backends only (the pools'), each still alive: perf -p refuses the whole list
    # when one pid in it has gone.
    pg_pids="$(psql -At "$PG_BASE/postgres" -c "SELECT pid FROM pg_stat_activity
        WHERE datname = '$LAB_DB' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
          AND backend_start < now() - interval '10 seconds'" |
        while read -r p; do { kill -0 "$p" 2>/dev/null && printf '%s,' "$p"; } || true; done)"
    pg_pids="${pg_pids%,}"
    for name in orchestrator-1 entity-service-1 edge-gateway-1; do
        names+=("$name"); pids+=("$(pid_of "$name")")
    done
    [[ -n "$pg_pids" ]] && { names+=("postgres-lab-backends"); pids+=("$pg_pids"); }
    pid="$(cat "$STATE/run/tansu.pid" 2>/dev/null || true)"
    if [[ -n "$pid" ]] && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == tansu* ]]; then
        names+=("tansu"); pids+=("$pid")
    fi
    # Call graphs: the release binaries have no frame pointers, so `-g` (frame-pointer chains)
    # stops after the first Rust frame; DWARF unwinding (a copy of each sample's user stack,
    # unwound by perf afterwards with .eh_frame) gives whole stacks. A 2 s probe on
    # orchestrator-1 decides: some kernels in VMs drop every sample that carries a user stack.
    perf record -F "$PERF_HZ" --call-graph dwarf -o "$OUT/profile/dwarf-probe.data" -p "$(pid_of orchestrator-1)" \
        -- sleep 2 > "$OUT/profile/dwarf-probe.record.log" 2>&1 9>&- || true
    DWARF_SAMPLES="$(perf script -i "$OUT/profile/dwarf-probe.data" -F tid 2>/dev/null | wc -l)" || DWARF_SAMPLES=0
    DWARF_SAMPLES="${DWARF_SAMPLES//[^0-9]/}"
    DWARF_SAMPLES="${DWARF_SAMPLES:-0}"
    if ((DWARF_SAMPLES > 0)); then CALL_GRAPH=(--call-graph dwarf); else CALL_GRAPH=(-g); fi
    PROFILE_CMD="perf record -F $PERF_HZ ${CALL_GRAPH[*]} -p PID -- sleep $PROF_S"
    : > "$OUT/profile/targets.tsv"
    local i perf_pids=()
    for i in "${!names[@]}"; do
        printf '%s\t%s\n' "${names[$i]}" "${pids[$i]}" >> "$OUT/profile/targets.tsv"
        perf record -F "$PERF_HZ" "${CALL_GRAPH[@]}" -o "$OUT/profile/${names[$i]}.data" -p "${pids[$i]}" \
            -- sleep "$PROF_S" > "$OUT/profile/${names[$i]}.record.log" 2>&1 9>&- &
        perf_pids+=($!)
        BG_PIDS+=($!)
    done
    python3 "$OUT/bin/snap.py" "$d/cpu0.json" "$tasks"
    sleep "$((PROF_S - 1))"
    python3 "$OUT/bin/snap.py" "$d/cpu1.json" "$tasks"
    for i in "${perf_pids[@]}"; do wait "$i" || true; done
    BG_PIDS=("${BG_PIDS[0]}")   # the load, still running
}

# The lab with no load at all: what every process costs by itself (consumers polling, probes).
say "idle lab: 8 s without load, after 10 s to settle (consumer groups joined)"
sleep 10
mkdir -p "$OUT/idle"
python3 "$OUT/bin/snap.py" "$OUT/idle/cpu0.json"
sleep 8
python3 "$OUT/bin/snap.py" "$OUT/idle/cpu1.json"
say "warm-up: $WARM_RATE rps for $WARM_S s (the orchestrators' caches fill)"
step warmup "$WARM_RATE" "$WARM_S"
STOPPED=""
MAX=""
for r in $RATES; do
    sleep 3
    step "rate-$(printf '%05d' "$r")" "$r" "$STEP_S"
    case "$LAST_VERDICT" in
        pass*) MAX="$r" ;;
        far*) STOPPED="rate-$r"; break ;;
    esac
done
PROFILE_RATE="${MAX:-${RATES%% *}}"
sleep 3
say "profile: $PROFILE_RATE rps for $((PROF_S + 10)) s, perf for $PROF_S s of it"
step profile "$PROFILE_RATE" "$((PROF_S + 10))" profile

# The perf reports: self time by object and symbol, and (DWARF stacks) every sample's whole
# stack for the inclusive shares. --no-inline: resolving inlined frames from the debug info
# would take minutes and adds nothing the families need.
SAMPLER="perf record (cpu-clock, $PERF_HZ Hz, ${CALL_GRAPH[*]})" PERF_FAILED=0
while IFS=$'\t' read -r name pid; do
    data="$OUT/profile/$name.data"
    if [[ ! -s "$data" ]] || grep -qiE 'permission|not supported|paranoid' "$OUT/profile/$name.record.log"; then
        PERF_FAILED=$((PERF_FAILED + 1))
        continue
    fi
    perf report -i "$data" --stdio --no-children -g none --sort dso,sym --percent-limit 0.01 \
        > "$OUT/profile/$name.report.txt" 2>/dev/null || true
    perf report -i "$data" --stdio --no-children -g none --sort dso \
        > "$OUT/profile/$name.dso.txt" 2>/dev/null || true
    perf script -i "$data" -F tid 2>/dev/null | wc -l > "$OUT/profile/$name.samples" || true
    if [[ "${CALL_GRAPH[*]}" == *dwarf* ]]; then
        perf script -i "$data" -F ip,sym,dso --no-inline 2>/dev/null | gzip -1 > "$OUT/profile/$name.stacks.gz" || true
    fi
done < "$OUT/profile/targets.tsv"
if ((PERF_FAILED == $(wc -l < "$OUT/profile/targets.tsv"))); then
    SAMPLER="/proc per-thread CPU only (perf could not sample: see profile/*.record.log)"
fi
"$LABCTL" status --json > "$OUT/status-end.json" 9>&- || true
"$LABCTL" down > "$OUT/down.log" 2>&1 9>&- || true
"$LABCTL" flags reset > /dev/null 2>&1 9>&- || true
LAB_UP=0
flock -u 9
exec 9>&-
say "measuring done ($(($(date +%s) - STARTED)) s under the lock); lock released"

# --- the report ----------------------------------------------------------------------------------
SYMBOLS="$(for b in orchestrator entity-service edge-gateway; do
    f="$BIN/$b"
    printf '%s: %s, %s; ' "$b" \
        "$(file -b "$f" 2>/dev/null | grep -oE 'not stripped|stripped' || echo '?')" \
        "$(readelf -S "$f" 2>/dev/null | grep -oE '\.debug_[a-z]+' | sort -u | tr '\n' ' ' | sed 's/ $//' || true)"
done)"
analyse
python3 - "$OUT" "$STARTED" "$REL_DEBUG" "$SYMBOLS" "$SAMPLER" "$PROFILE_CMD" "$STOPPED" "$DWARF_SAMPLES" <<PY
import json, os, subprocess, sys
out, started, rel, symbols, sampler, cmd, stopped, dwarf = sys.argv[1:9]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
pgv = subprocess.run(["psql", "-At", "$PG_BASE/postgres", "-c", "SHOW server_version"], capture_output=True, text=True).stdout.strip()
targets = [dict(zip(("name", "pid"), l.rstrip("\n").split("\t"))) for l in open(f"{out}/profile/targets.tsv") if l.strip()]
json.dump({"started": int(started), "out": out, "cores": os.cpu_count(), "cpu_model": cpu, "pg_version": pgv,
           "release_debug": rel, "symbols": symbols.strip("; "), "lab_db": "$LAB_DB", "pgbench_db": "$PGB_DB",
           "pgbench_scale": $PGB_SCALE, "pgbench_seconds": $PGB_S, "step_seconds": $STEP_S, "profile_seconds": $PROF_S,
           "p99_ms": float("$P99_MS"), "ok_pct": float("$OK_PCT"), "hot_params": int(open(f"{out}/hot-params.count").read()),
           "stopped_early": stopped or None, "hot_per_txn": $HOT_PER_TXN, "kafka": "$KAFKA",
           "perf_hz": $PERF_HZ, "dwarf_probe_samples": int(dwarf or 0),
           "profile": {"sampler": sampler, "command": cmd, "targets": targets}},
          open(f"{out}/meta.json", "w"), indent=1)
PY
render
cat "$OUT/chain-limit.md"
((PUBLISH)) && publish
say "report: $OUT/chain-limit.md"
