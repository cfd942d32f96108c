"""Section 11 (least-privilege): the admin port off the public port, each service's own database
role, the kind PostgreSQL and seed Job; runs the compose and NetworkPolicy checks too."""
import json
import os
import re

import yaml

from .common import (
    ADMIN_PORT,
    API_PORT,
    DB_ROLE,
    LIBRARY_LOADED,
    OWNER_ROLE,
    REDIS_OPERATOR,
    REDIS_SECRET,
    REDIS_URL_VARS,
    REDIS_USER,
    REDIS_USERS,
    ROLE_ENV,
    ROLE_SQL,
    ROOT,
    SECRET,
    check_admin_list,
    fail,
    k8s_containers,
    read,
    redis_users,
    secret_key_of,
    split_url,
)
from .compose_privilege import check_compose, interpolate
from .envcontract import LABCTL_NO_DATABASE, LABCTL_NO_REDIS
from .netpol import ANY, EXPECT, INNER, Pod, connects, lab_pods, policies_of
from .superuser import cmd_superuser

PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def check_k8s_db_url(where, c, var, role, secret=SECRET):
    """var is set in the container's own env (never a ConfigMap), connects as `role`, and its password is
    $(X) with X an EARLIER env entry from the Secret's key `role` (Kubernetes expands only earlier ones).
    Redis URLs too: `role` is then the ACL user, `secret` REDIS_SECRET."""
    entries = c.get("env", [])
    names = [e["name"] for e in entries]
    if var not in names:
        fail(f"{where}: {var} must be set in the container's env (it carries a password: no ConfigMap)")
        return
    url = entries[names.index(var)].get("value") or ""
    user, password, host, port = split_url(url)
    if user != role:
        fail(f"{where}: {var} connects as {user!r}, want {role!r}")
    m = re.fullmatch(r"\$\((\w+)\)", password or "")
    if not m:
        fail(f"{where}: {var} password must be $(VAR) from the Secret {secret}, got {password!r}")
        return
    ref = m.group(1)
    if ref not in names[:names.index(var)]:
        fail(f"{where}: {var} uses $({ref}) but {ref} is not an env entry before it")
        return
    name, key = secret_key_of(entries[names.index(ref)])
    if key != role or not name:
        fail(f"{where}: {ref} must come from secretKeyRef key {role!r} (Secret {secret}), got {name}/{key}")


def check_service_container(where, b, env, c, pod_meta):
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    if ports.get("admin") != ADMIN_PORT:
        fail(f"{where}: needs containerPort admin {ADMIN_PORT}, has {ports}")
    if b != "enrichment" and ports.get("http") != API_PORT:
        fail(f"{where}: needs containerPort http {API_PORT}, has {ports}")
    if env.get("LAB_ADMIN__HOST") != "0.0.0.0" or str(env.get("LAB_ADMIN__PORT")) != str(ADMIN_PORT):
        fail(f"{where}: LAB_ADMIN__HOST/PORT must be 0.0.0.0/{ADMIN_PORT}, got "
             f"{env.get('LAB_ADMIN__HOST')}/{env.get('LAB_ADMIN__PORT')}")
    for probe in PROBES:
        http = (c.get(probe) or {}).get("httpGet")
        if http and http.get("port") not in ("admin", ADMIN_PORT):
            fail(f"{where}: {probe} goes to port {http.get('port')}, not the admin port")
        if http and http.get("path") not in ("/livez", "/readyz"):
            fail(f"{where}: {probe} path {http.get('path')} is not /livez or /readyz")
    ann = (pod_meta or {}).get("annotations") or {}
    if ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") != str(ADMIN_PORT):
        fail(f"{where}: prometheus.io/port is {ann.get('prometheus.io/port')}, not the admin port {ADMIN_PORT}")
    role = DB_ROLE.get(b)
    if role:
        check_k8s_db_url(where, c, "LAB_DATABASE__URL", role)
    elif "LAB_DATABASE__URL" in env:
        fail(f"{where}: {b} has no database access: drop LAB_DATABASE__URL")
    for var in REDIS_URL_VARS:
        if var in env:
            check_k8s_db_url(where, c, var, REDIS_USER[b], REDIS_SECRET)
    if b == "edge-gateway":
        check_admin_list(where, env)


def check_labctl_container(where, env, c):
    args = [str(a) for a in c.get("args") or []]
    if args and args[0] in LABCTL_NO_DATABASE:
        if "LAB_DATABASE_URL" in env:
            fail(f"{where}: labctl {args[0]} needs no database: drop LAB_DATABASE_URL (least privilege)")
    elif "LAB_DATABASE_URL" in env:
        check_k8s_db_url(where, c, "LAB_DATABASE_URL", OWNER_ROLE)
    if args and args[0] in LABCTL_NO_REDIS:
        if "LAB_REDIS_URL" in env:
            fail(f"{where}: labctl {args[0]} never touches Redis: drop LAB_REDIS_URL (least privilege)")
    elif "LAB_REDIS_URL" in env:
        check_k8s_db_url(where, c, "LAB_REDIS_URL", REDIS_OPERATOR, REDIS_SECRET)


def check_k8s_render(label, docs):
    n = m = 0
    by_name = {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}
    for where, b, env, c in k8s_containers(docs):
        pod_meta = by_name[where.split("[")[0]]["spec"]["template"].get("metadata")
        if b in DB_ROLE or b == "orchestrator":
            check_service_container(f"{label} {where}", b, env, c, pod_meta)
            n += 1
        elif b == "labctl":
            check_labctl_container(f"{label} {where}", env, c)
            m += 1
    for d in docs:
        if d.get("kind") != "Service":
            continue
        spec, name = d["spec"], d["metadata"]["name"]
        admin = [p for p in spec.get("ports", []) if p.get("port") == ADMIN_PORT or p.get("targetPort") in ("admin", ADMIN_PORT)]
        if admin and spec.get("type", "ClusterIP") != "ClusterIP":
            fail(f"{label} Service/{name}: an admin port in a {spec.get('type')} Service reaches outside the cluster")
        if admin and spec.get("clusterIP") != "None" and name != "orchestrator":
            fail(f"{label} Service/{name}: only the orchestrator's ClusterIP Service carries the admin port "
                 f"(the gateway's readiness prober); headless ones may, for game days")
        if name == "orchestrator" and not admin:
            fail(f"{label} Service/orchestrator: needs port admin {ADMIN_PORT} (LAB_UPSTREAM__ORCHESTRATORS_ADMIN)")
    print(f"  ok   {label}: {n} service container(s): admin port 9901, probes and scrape on it, own DB role (none for orchestrator), "
          "own Redis user" + (f"; {m} labctl container(s): Redis as {REDIS_OPERATOR} where used (none in the seed Job)" if m else ""))


def check_kind_database(docs):
    sts = [d for d in docs if d.get("kind") == "StatefulSet" and d["metadata"]["name"] == "postgres"]
    if not sts:
        fail("kind: no StatefulSet/postgres")
        return
    c = sts[0]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c.get("env", [])}
    if (env.get("POSTGRES_HOST_AUTH_METHOD") or {}).get("value") != "scram-sha-256":
        fail("kind StatefulSet/postgres: POSTGRES_HOST_AUTH_METHOD must be scram-sha-256 (never trust)")
    if secret_key_of(env.get("POSTGRES_PASSWORD")) != (SECRET, "postgres"):
        fail(f"kind StatefulSet/postgres: POSTGRES_PASSWORD must come from Secret {SECRET} key postgres")
    for role, var in ROLE_ENV.items():
        if secret_key_of(env.get(var)) != (SECRET, role):
            fail(f"kind StatefulSet/postgres: {var} (the first start makes {role} with it) must come from "
                 f"Secret {SECRET} key {role}")
    sec = [d for d in docs if d.get("kind") == "Secret" and d["metadata"]["name"] == SECRET]
    keys = set(sec[0].get("stringData") or sec[0].get("data") or {}) if sec else set()
    if keys != {"postgres"} | set(ROLE_ENV):
        fail(f"kind Secret/{SECRET}: keys {sorted(keys)} != postgres + {sorted(ROLE_ENV)}")
    elif "lab-only" not in json.dumps(sec[0]["metadata"]):
        fail(f"kind Secret/{SECRET}: mark it lab-only (its values are published)")
    # The init ConfigMap carries every file of the folder compose mounts (superuser.py evaluates its pg_hba).
    cms = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"].startswith("postgres-initdb")]
    folder = os.path.dirname(ROLE_SQL)
    want = sorted(os.listdir(os.path.join(ROOT, folder)))
    if not cms or sorted(cms[0].get("data") or {}) != want:
        fail(f"kind ConfigMap/postgres-initdb: files {sorted((cms[0].get('data') or {}) if cms else [])} != {folder}/ {want}")
    # The seed Job: db prepare, then seed, both labctl as lab_owner (no psql step: the roles and their
    # passwords are the server's first start's business).
    seed = [d for d in docs if d.get("kind") == "Job" and d["metadata"]["name"] == "seed"]
    spec = seed[0]["spec"]["template"]["spec"] if seed else {}
    steps = spec.get("initContainers", []) + spec.get("containers", [])
    order = [(c.get("args") or c.get("command") or [None])[0] for c in steps]
    if order != ["db", "seed"]:
        fail(f"kind Job/seed: steps {order}, want ['db', 'seed'] (labctl db prepare, labctl seed)")
    sql = read(ROLE_SQL)
    for role, var in ROLE_ENV.items():
        if not re.search(rf"^\\getenv (\w+) {var}$", sql, re.M) or not re.search(rf"ALTER ROLE {role}\b[^;]*\bPASSWORD :'\w+'", sql):
            fail(f"{ROLE_SQL}: must \\getenv {var} and ALTER ROLE {role} ... PASSWORD :'var'")
    for what, pattern in (("lab_owner NOSUPERUSER NOCREATEROLE NOCREATEDB",
                           rf"ALTER ROLE {OWNER_ROLE}\b[^;]*\bNOSUPERUSER\b[^;]*\bNOCREATEROLE\b[^;]*\bNOCREATEDB\b"),
                          ("GRANT pg_read_all_stats TO lab_owner WITH ADMIN OPTION",
                           rf"GRANT pg_read_all_stats TO {OWNER_ROLE} WITH ADMIN OPTION;"),
                          ("ALTER DATABASE retry_storm_lab OWNER TO lab_owner", rf"ALTER DATABASE retry_storm_lab OWNER TO {OWNER_ROLE};")):
        if not re.search(pattern, sql):
            fail(f"{ROLE_SQL}: must say {what}")
    print(f"  ok   kind PostgreSQL: scram-sha-256, Secret/{SECRET} (lab-only), the first start makes the roles "
          f"({', '.join(ROLE_ENV)}; {OWNER_ROLE} owns the database), seed Job = db prepare -> seed as {OWNER_ROLE}")


def check_kind_redis(docs):
    """The kind Redis: no default user, each role's user with its password from the Secret (the rule
    words are crates/lab-flags/tests/deploy_acl.rs's business), a readiness probe that logs in and
    finds the gateway's rate-limit function loaded (the loader's text is deploy_acl.rs's too)."""
    dep = [d for d in docs if d.get("kind") == "Deployment" and d["metadata"]["name"] == "redis"]
    if not dep:
        fail("kind: no Deployment/redis")
        return
    c = dep[0]["spec"]["template"]["spec"]["containers"][0]
    where, env = "kind Deployment/redis", {e["name"]: e for e in c.get("env", [])}
    users, dupes = redis_users((c.get("command") or []) + (c.get("args") or []))
    if dupes:
        fail(f"{where}: users named twice: {dupes}")
    if users.get("default") != ["off"]:
        fail(f"{where}: needs `--user default off` (no login without a user), got {users.get('default')}")
    if set(users) - REDIS_USERS - {"default"}:
        fail(f"{where}: users {sorted(set(users) - REDIS_USERS - {'default'})} are nobody's (k8s/README.md)")
    for u in sorted(REDIS_USERS):
        words = users.get(u) or []
        m = re.fullmatch(r">\$\((\w+)\)", words[1]) if len(words) > 1 and words[0] == "on" else None
        if not m:
            fail(f"{where}: needs `--user {u} on >$(VAR) RULES...`, got {words[:2]}")
        elif secret_key_of(env.get(m.group(1))) != (REDIS_SECRET, u):
            fail(f"{where}: {m.group(1)} must come from Secret {REDIS_SECRET} key {u}")
    probe = " ".join(map(str, ((c.get("readinessProbe") or {}).get("exec") or {}).get("command") or []))
    pu = re.search(r"--user (\S+)", probe)
    if not pu or LIBRARY_LOADED not in probe:
        fail(f"{where}: the readiness probe must log in (--user) and look for the gateway's function "
             f"({LIBRARY_LOADED!r}; redis-cli exits 0 on NOAUTH): {probe!r}")
    elif secret_key_of(env.get("REDISCLI_AUTH")) != (REDIS_SECRET, pu.group(1)):
        fail(f"{where}: REDISCLI_AUTH (the probe's password) must come from Secret {REDIS_SECRET} key {pu.group(1)}")
    sec = [d for d in docs if d.get("kind") == "Secret" and d["metadata"]["name"] == REDIS_SECRET]
    keys = set(sec[0].get("stringData") or sec[0].get("data") or {}) if sec else set()
    if keys != REDIS_USERS:
        fail(f"kind Secret/{REDIS_SECRET}: keys {sorted(keys)} != {sorted(REDIS_USERS)}")
    elif "lab-only" not in json.dumps(sec[0]["metadata"]):
        fail(f"kind Secret/{REDIS_SECRET}: mark it lab-only (its values are published)")
    print(f"  ok   kind Redis: default user off, users {sorted(REDIS_USERS)} with passwords from Secret/{REDIS_SECRET} "
          f"(lab-only), the probe logs in")


def cmd_least_privilege(kind_render, legacy_render, rollouts_render, helm_render_file, job_file):
    kind = [d for d in yaml.safe_load_all(open(kind_render)) if d]
    legacy = [d for d in yaml.safe_load_all(open(legacy_render)) if d]
    job = [d for d in yaml.safe_load_all(open(job_file)) if d]
    helm = [d for d in yaml.safe_load_all(open(helm_render_file)) if d]
    for label, docs in (("kustomize:kind", kind), ("kustomize:legacy", legacy), ("helm", helm),
                        # the Job's containers, with the kind ConfigMaps their envFrom names
                        ("k8s/jobs/gameday.yaml", [d for d in kind if d.get("kind") == "ConfigMap"] + job)):
        check_k8s_render(label, docs)
    kp = yaml.safe_load(open(os.path.join(ROOT, "k8s/overlays/kind/prometheus/prometheus.yml")))
    for sc in kp["scrape_configs"]:
        if not any(r.get("source_labels") == ["__meta_kubernetes_pod_container_port_name"] and r.get("regex") == "admin"
                   and r.get("action") == "keep" for r in sc.get("relabel_configs", [])):
            fail(f"k8s/overlays/kind/prometheus/prometheus.yml job {sc['job_name']}: must keep only the port named admin")
    check_kind_database(kind)
    check_kind_redis(kind)
    check_compose()
    cmd_superuser(kind, legacy, helm, job, yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml"))), interpolate)
    # NetworkPolicies: the legacy render has every kind pod plus a flags Job; add the game-day Job.
    docs = legacy + job
    pods, others = lab_pods(docs)
    pols = policies_of(docs)
    everyone = list(pods.values()) + others
    for (dst_id, port), want in EXPECT.items():
        dst = pods.get(dst_id)
        if not dst:
            fail(f"NetworkPolicy check: no pod {dst_id} in the kind render")
            continue
        got = {s.ident for s in everyone if s.ident != dst_id and connects(pols, s, dst, port)}
        expect = {s.ident for s in everyone if s.ident != dst_id and s.ident not in INNER} if want == ANY else want
        admitted = {s.ident for s in everyone if s.ident != dst_id and connects(pols, s, dst, port, egress=False)}
        admit_want = {s.ident for s in everyone if s.ident != dst_id} if want == ANY else want
        if got != expect:
            fail(f"NetworkPolicy: {dst_id}:{port} is reachable from {sorted(got)}, want {sorted(expect)}"
                 f" (extra {sorted(got - expect)}, missing {sorted(expect - got)})")
        elif admitted != admit_want:
            fail(f"NetworkPolicy: {dst_id}:{port}'s ingress rules alone admit {sorted(admitted)}, want {sorted(admit_want)} "
                 f"(extra {sorted(admitted - admit_want)}: only someone's egress policy stops them)")
        else:
            shown = f"{ANY} (other namespaces too) but {', '.join(sorted(INNER))}" if want == ANY else ', '.join(sorted(got)) or 'nobody'
            print(f"  ok   {dst_id}:{port} <- {shown}")
    dns = Pod("kube-dns", "kube-system", {"k8s-app": "kube-dns"}, {"kubernetes.io/metadata.name": "kube-system"})
    for s in ("edge-gateway", "orchestrator", "entity-service", "enrichment"):
        if not connects(pols, pods[s], dns, 53, "UDP"):
            fail(f"NetworkPolicy: {s} cannot reach cluster DNS (kube-system/kube-dns:53 UDP)")
    print("  ok   the four services reach cluster DNS; ingress rules alone and ingress + egress both give the table above")
    # Argo Rollouts' analysis (its controller, namespace argo-rollouts) must reach Prometheus.
    rdocs = [d for d in yaml.safe_load_all(open(rollouts_render)) if d]
    rpods, rothers = lab_pods(rdocs)
    argo = [o for o in rothers if o.ident == "argo-rollouts"][0]
    if not connects(policies_of(rdocs), argo, rpods["prometheus"], 9090):
        fail("k8s/overlays/rollouts: the argo-rollouts namespace cannot reach prometheus:9090: every analysis would error")
    else:
        print("  ok   k8s/overlays/rollouts: argo-rollouts -> prometheus:9090 (canary analysis)")
