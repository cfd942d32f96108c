"""Shared by the checks: the repository (ROOT) and scratch dir (WORK), failure reporting, reading
files, the lab containers of a render, and the admin-port / database-role facts (issue 17)."""
import os
import re

ROOT = os.environ["ROOT"]
WORK = os.environ["WORK"]
SERVICES = ["edge-gateway", "orchestrator", "entity-service", "enrichment"]


FAIL = []


def fail(msg):
    FAIL.append(msg)
    print(f"  FAIL {msg}")


def rel(p):
    return os.path.relpath(p, ROOT)


def read(p):
    with open(os.path.join(ROOT, p), encoding="utf-8") as f:
        return f.read()


def binary_of_image(image):
    m = re.search(r"(edge-gateway|orchestrator|entity-service|enrichment|labctl)(?::|$|@)", image or "")
    return m.group(1) if m else None


def k8s_containers(docs):
    cms = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d.get("kind") == "ConfigMap"}
    for d in docs:
        spec = d.get("spec", {})
        tpl = spec.get("template", {}).get("spec") if d.get("kind") in ("Deployment", "StatefulSet", "Job") else None
        if not tpl:
            continue
        for c in tpl.get("initContainers", []) + tpl.get("containers", []):
            env = {}
            for ef in c.get("envFrom", []):
                ref = ef.get("configMapRef", {}).get("name")
                if ref not in cms:
                    fail(f"{d['kind']}/{d['metadata']['name']}: envFrom ConfigMap {ref} not in the same render")
                env.update(cms.get(ref, {}))
            for e in c.get("env", []):
                env[e["name"]] = e.get("value")
            yield f"{d['kind']}/{d['metadata']['name']}[{c['name']}]", binary_of_image(c.get("image")), env, c


# compose's file_sd targets (<container>:9901, issue 17), mounted over targets/native. They used
# to live in deploy/docker/prometheus-targets (scraping the public port).
COMPOSE_TARGETS = "deploy/prometheus/targets/compose"


# ------------------------------------------------------------------ admin port + least privilege (issue 17)
API_PORT, ADMIN_PORT = 8080, 9901
DB_ROLE = {"edge-gateway": "lab_gateway", "entity-service": "lab_entity_service", "enrichment": "lab_enrichment"}
# labctl's role (issue 28): the database's owner, not the superuser.
OWNER_ROLE = "lab_owner"
# PostgreSQL's first start makes each role with the password in this variable of the server's
# environment (k8s/overlays/kind/postgres/initdb/10-lab-roles.sql; kind and compose mount that folder).
ROLE_ENV = {OWNER_ROLE: "LAB_OWNER_DB_PASSWORD", "lab_gateway": "LAB_GATEWAY_DB_PASSWORD",
            "lab_entity_service": "LAB_ENTITY_SERVICE_DB_PASSWORD", "lab_enrichment": "LAB_ENRICHMENT_DB_PASSWORD"}
ROLE_SQL = "k8s/overlays/kind/postgres/initdb/10-lab-roles.sql"
SECRET = "lab-database"


# ------------------------------------------------------------------ Redis ACL users (issue 28)
# One user per role; lab_flags::acl (crates/lab-flags/src/acl.rs) writes the rules, and
# crates/lab-flags/tests/deploy_acl.rs keeps the rule words of compose and kind equal to them.
# Checked here: who logs in as whom, and where each password comes from.
REDIS_SECRET = "lab-redis"
REDIS_OPERATOR = "lab-operator"
REDIS_USER = {"edge-gateway": "lab-gateway", "orchestrator": "lab-service", "entity-service": "lab-service",
              "enrichment": "lab-service"}
REDIS_USERS = {REDIS_OPERATOR} | set(REDIS_USER.values())
# Redis's probe: up, and the gateway's rate-limit function loaded (its library's name listed; the
# gateway's user may only call it). redis-cli exits 0 on an error reply: the probe greps the name.
LIBRARY_LOADED = "FUNCTION LIST LIBRARYNAME retry_storm_lab | grep -qx retry_storm_lab"
# The Redis URLs a service reads (the gateway's rate limiter has its own).
REDIS_URL_VARS = ("LAB_FLAGS__REDIS_URL", "LAB_RATELIMIT__REDIS_URL")


def redis_users(args):
    """redis-server's arguments -> ({user: the words after its name}, [users named twice]): one
    `--user NAME WORD...` directive each, ended by the next word starting with `--`."""
    args = [str(a) for a in args]
    users, dupes, i = {}, [], 0
    while i < len(args):
        if args[i] == "--user" and i + 1 < len(args):
            j = i + 2
            while j < len(args) and not args[j].startswith("--"):
                j += 1
            if args[i + 1] in users:
                dupes.append(args[i + 1])
            users[args[i + 1]] = args[i + 2:j]
            i = j
        else:
            i += 1
    return users, dupes


def split_url(url):
    from urllib.parse import urlsplit
    u = urlsplit(url)
    return u.username, u.password, u.hostname, u.port


def secret_key_of(entry):
    ref = ((entry or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
    return ref.get("name"), ref.get("key")


def check_admin_list(where, env):
    """upstream.orchestrators_admin is parallel to upstream.orchestrators: same hosts, same order, admin port."""
    pub = [u.strip() for u in (env.get("LAB_UPSTREAM__ORCHESTRATORS") or "").split(",") if u.strip()]
    adm = [u.strip() for u in (env.get("LAB_UPSTREAM__ORCHESTRATORS_ADMIN") or "").split(",") if u.strip()]
    if len(pub) != len(adm):
        fail(f"{where}: LAB_UPSTREAM__ORCHESTRATORS_ADMIN has {len(adm)} URLs for {len(pub)} orchestrators")
    for p, a in zip(pub, adm, strict=False):   # unequal lengths are reported just above
        if split_url(p)[2] != split_url(a)[2] or split_url(a)[3] != ADMIN_PORT:
            fail(f"{where}: admin URL {a} is not {split_url(p)[2]}:{ADMIN_PORT} (parallel to {p})")
