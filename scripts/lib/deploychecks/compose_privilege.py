"""Section 11, compose's side: admin ports unpublished, published ports on 127.0.0.1, one database
role per service (labctl: lab_owner) with the passwords the postgres service makes them with, one
Redis user per role (no default user), Prometheus targets on the admin ports. The superuser's
side (only postgres has its password, pg_hba) is superuser.py's."""
import glob
import json
import os
import re

import yaml

from .common import (
    ADMIN_PORT,
    COMPOSE_TARGETS,
    DB_ROLE,
    LIBRARY_LOADED,
    OWNER_ROLE,
    REDIS_OPERATOR,
    REDIS_URL_VARS,
    REDIS_USER,
    REDIS_USERS,
    ROLE_ENV,
    ROOT,
    binary_of_image,
    check_admin_list,
    fail,
    redis_users,
    rel,
    split_url,
)

# Native admin ports: public + 1000, the rule `labctl up` applies (crates/lab-native/src/supervise.rs,
# admin_port). The committed target files are checked against it here; scripts that talk to a
# running lab ask `labctl status --json` instead (scripts/lib/lab_status.py).
NATIVE_ADMIN_RULE = "public + 1000: admin_port in crates/lab-native/src/supervise.rs"
NATIVE_ADMIN = {"edge-gateway": [9080], "orchestrator": [9101, 9102, 9103], "entity-service": [9201, 9202],
                "enrichment": [9301, 9302]}


def interpolate(v):
    """compose's ${VAR:-default} with the defaults (the checked-in lab values, not this shell's)."""
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", str(v))


def check_compose_redis(svcs, envs):
    """redis: no default user, each role's user with a password, a healthcheck that logs in; every
    client logs in as its role's user with that password (the rule words: deploy_acl.rs)."""
    where, redis = "docker-compose.yml services.redis", svcs.get("redis") or {}
    if not isinstance(redis.get("command"), list):
        fail(f"{where}: command must be a list (redis-server ... --user NAME WORD...)")
        return
    users, dupes = redis_users([interpolate(a) for a in redis["command"]])
    if dupes:
        fail(f"{where}: users named twice: {dupes}")
    if users.get("default") != ["off"]:
        fail(f"{where}: needs `--user default off` (no login without a user), got {users.get('default')}")
    pw = {}
    for u in sorted(REDIS_USERS):
        words = users.get(u) or []
        if len(words) < 2 or words[0] != "on" or len(words[1]) < 2 or not words[1].startswith(">"):
            fail(f"{where}: needs `--user {u} on >PASSWORD RULES...`, got {words[:2]}")
        else:
            pw[u] = words[1][1:]
    test = " ".join(map(str, (redis.get("healthcheck") or {}).get("test", [])))
    hu = re.search(r"--user (\S+)", test)
    if not hu or LIBRARY_LOADED not in test:
        fail(f"{where}: the healthcheck must log in (--user) and look for the gateway's function "
             f"({LIBRARY_LOADED!r}; redis-cli exits 0 on NOAUTH): {test!r}")
    elif envs["redis"].get("REDISCLI_AUTH") != pw.get(hu.group(1)) and f"--pass {pw.get(hu.group(1))}" not in interpolate(test):
        fail(f"{where}: the healthcheck's password (REDISCLI_AUTH) is not {hu.group(1)}'s")
    n = 0
    for name, svc in sorted(svcs.items()):
        b, env = binary_of_image(svc.get("image", "")), envs[name]
        want = {v: REDIS_USER[b] for v in REDIS_URL_VARS} if b in REDIS_USER else {"LAB_REDIS_URL": REDIS_OPERATOR} \
            if b == "labctl" else {}
        for var, user in want.items():
            if var not in env:
                continue
            got, password, _, _ = split_url(env[var])
            n += 1
            if got != user:
                fail(f"docker-compose.yml services.{name}: {var} logs in as {got!r}, want {user!r}")
            elif password != pw.get(user):
                fail(f"docker-compose.yml services.{name}: {var}'s password is not the one redis gives {user}")
    print(f"  ok   compose Redis: default user off, users {sorted(REDIS_USERS)}, the healthcheck logs in; "
          f"{n} URLs each as its role's user with its password")


def check_compose():
    compose = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml")))
    svcs = compose["services"]
    envs = {n: {k: interpolate(v) for k, v in (s.get("environment") or {}).items()} for n, s in svcs.items()}
    pw = {}
    for name, svc in sorted(svcs.items()):
        b = binary_of_image(svc.get("image", ""))
        env, where = envs[name], f"docker-compose.yml services.{name}"
        for p in svc.get("ports", []) or []:
            parts = interpolate(p if isinstance(p, str) else f"{p.get('host_ip', '')}:{p.get('published')}:{p.get('target')}").split(":")
            if len(parts) != 3 or parts[0] != "127.0.0.1":
                fail(f"{where}: port {p} is not bound to 127.0.0.1")
            if parts[-1].split("/")[0] == str(ADMIN_PORT):
                fail(f"{where}: publishes the admin port {ADMIN_PORT}: admin ports are never published")
        if b in DB_ROLE or b == "orchestrator":
            if env.get("LAB_ADMIN__HOST") != "0.0.0.0" or str(env.get("LAB_ADMIN__PORT")) != str(ADMIN_PORT):
                fail(f"{where}: LAB_ADMIN__HOST/PORT must be 0.0.0.0/{ADMIN_PORT}")
            test = " ".join(map(str, (svc.get("healthcheck") or {}).get("test", [])))
            if f"127.0.0.1:{ADMIN_PORT}/livez" not in test:
                fail(f"{where}: healthcheck must ask 127.0.0.1:{ADMIN_PORT}/livez, got {test!r}")
            role = DB_ROLE.get(b)
            if role:
                user, password, _, _ = split_url(env.get("LAB_DATABASE__URL", ""))
                if user != role or not password:
                    fail(f"{where}: LAB_DATABASE__URL must connect as {role} with a password, got user {user!r}")
                pw.setdefault(role, set()).add(password)
                deps = svc.get("depends_on") or {}
                if (deps.get("db-prepare") or {}).get("condition") != "service_completed_successfully":
                    fail(f"{where}: must depend on db-prepare (service_completed_successfully): its role's grants")
            elif "LAB_DATABASE__URL" in env:
                fail(f"{where}: the orchestrator has no database access: drop LAB_DATABASE__URL")
            if b == "edge-gateway":
                check_admin_list(where, env)
        if b == "labctl" and "LAB_DATABASE_URL" in env:
            user, password, _, _ = split_url(env["LAB_DATABASE_URL"])
            if user != OWNER_ROLE or not password:
                fail(f"{where}: labctl connects as {OWNER_ROLE} (the database's owner) with a password, got user {user!r}")
            pw.setdefault(OWNER_ROLE, set()).add(password)
        for item in (env.get("LAB_GAMEDAY_TARGETS") or "").split(","):
            if item.strip() and split_url(item.split("=", 1)[1].strip())[3] != ADMIN_PORT:
                fail(f"{where}: LAB_GAMEDAY_TARGETS {item.strip()} is not an admin URL (:{ADMIN_PORT})")
    pg = envs["postgres"]
    if pg.get("POSTGRES_HOST_AUTH_METHOD") != "scram-sha-256":
        fail("docker-compose.yml postgres: POSTGRES_HOST_AUTH_METHOD must be scram-sha-256 (never trust)")
    if not pg.get("POSTGRES_PASSWORD"):
        fail("docker-compose.yml postgres: POSTGRES_PASSWORD must be set (the image refuses to initialise without it)")
    # The first start makes each role with the value of its variable in the postgres service
    # (k8s/overlays/kind/postgres/initdb/10-lab-roles.sql): the URLs must carry the same.
    for role, var in ROLE_ENV.items():
        pw.setdefault(role, set()).add(pg.get(var))
    if "db-role-passwords" in svcs:
        fail("docker-compose.yml: db-role-passwords is gone (it logged in as the superuser over TCP): "
             "the postgres service's first start sets the passwords")
    if svcs.get("db-prepare", {}).get("command") != ["db", "prepare"] \
            or ((svcs.get("db-prepare") or {}).get("depends_on", {}).get("postgres") or {}).get("condition") != "service_healthy":
        fail("docker-compose.yml: db-prepare must run labctl db prepare once postgres is healthy")
    check_compose_redis(svcs, envs)
    for role, values in sorted(pw.items()):
        if len(values) != 1 or None in values or "" in values:
            fail(f"docker-compose.yml: the {role} password differs between its users ({len(values)} values)")
    for f in sorted(glob.glob(os.path.join(ROOT, COMPOSE_TARGETS, "*.json"))):
        for group in json.load(open(f)):
            for t in group["targets"]:
                if not t.endswith(f":{ADMIN_PORT}"):
                    fail(f"{rel(f)}: {t} is not an admin port ({ADMIN_PORT})")
    for job, ports in NATIVE_ADMIN.items():
        got = [int(t.rsplit(":", 1)[1]) for g in json.load(open(os.path.join(ROOT, f"deploy/prometheus/targets/native/{job}.json")))
               for t in g["targets"]]
        if got != ports:
            fail(f"deploy/prometheus/targets/native/{job}.json: ports {got}, want the admin ports {ports} ({NATIVE_ADMIN_RULE})")
    print(f"  ok   compose: admin ports unpublished, every published port on 127.0.0.1, scram-sha-256, one role per service "
          f"and labctl as {OWNER_ROLE} (passwords = the postgres service's), targets on :{ADMIN_PORT}; native targets on {NATIVE_ADMIN_RULE}")
