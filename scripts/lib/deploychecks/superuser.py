"""Section 11, the superuser (issue 28, "Inside the cluster"): only the PostgreSQL server holds the
superuser's password, nothing else logs in as it, and pg_hba refuses it on every TCP connection.

A gateway taken over may reach 5432 (it reads API keys there): if the superuser could log in over
TCP with a password some other pod carries, that pod would be a shell on the database. So:
  - no rendered kind object (the game-day Job too) but the postgres container of
    StatefulSet/postgres reads the Secret's superuser key, mounts or envFroms the whole Secret,
    carries the password's value, a postgres://postgres URL or PGUSER=postgres;
  - no compose service but `postgres`, and no x-* template, carries LAB_POSTGRES_PASSWORD, its
    value, such a URL or PGUSER=postgres;
  - the pg_hba.conf the server starts with is EVALUATED: the image's file (initdb's + the line the
    entrypoint appends) is rebuilt, every *.sh init script compose and kind mount at
    /docker-entrypoint-initdb.d runs on it (executed and sourced, as the entrypoint may do either),
    and the first matching line for postgres over TCP must be `reject`, for any database,
    replication included, from any address, with or without SSL; lab_owner must still reach
    scram-sha-256 and the socket must still let postgres in (init scripts, rotation).
"""
import base64
import json
import os
import re
import subprocess
import tempfile

from .common import FAIL, ROLE_SQL, ROOT, SECRET, fail, read

SUPERUSER = "postgres"
SUPERUSER_KEY = "postgres"            # its key in the Secret lab-database
COMPOSE_SUPERUSER_VAR = "LAB_POSTGRES_PASSWORD"
INITDB_DIR = os.path.dirname(ROLE_SQL)   # k8s/overlays/kind/postgres/initdb
INITDB_MOUNT = "/docker-entrypoint-initdb.d"
SUPERUSER_URL = re.compile(r"postgres(?:ql)?://postgres(?::[^@/\s\"]*)?@", re.I)
POD_KINDS = ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet", "Pod", "CronJob", "Rollout")

# What postgres:15-bookworm's entrypoint leaves in $PGDATA/pg_hba.conf before the init scripts run:
# initdb's sample with its default `trust` (the image passes no --auth), then pg_setup_hba_conf's
# `host all all all $POSTGRES_HOST_AUTH_METHOD` (docker-library/postgres, 15/bookworm/docker-entrypoint.sh).
IMAGE_HBA = """\
# TYPE  DATABASE        USER            ADDRESS                 METHOD

# "local" is for Unix domain socket connections only
local   all             all                                     trust
# IPv4 local connections:
host    all             all             127.0.0.1/32            trust
# IPv6 local connections:
host    all             all             ::1/128                 trust
# Allow replication connections from localhost, by a user with the
# replication privilege.
local   replication     all                                     trust
host    replication     all             127.0.0.1/32            trust
host    replication     all             ::1/128                 trust

host all all all scram-sha-256
"""
# Who tries: a pod of the cluster (10.244/16, kind's pod CIDR), compose's network, the laptop through
# the published port (Docker's gateway), and loopback inside the server's own pod or container.
PROBE_ADDRESSES = ("10.244.1.7", "172.18.0.5", "192.168.65.1", "127.0.0.1", "::1", "fd00::7")
PROBE_DATABASES = ("retry_storm_lab", "postgres", "template1", "replication")


def _walk_strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk_strings(v)
    elif obj is not None:
        yield str(obj)


def _pod_spec(d):
    spec = d.get("spec") or {}
    if d.get("kind") == "Pod":
        return spec
    if d.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return (spec.get("template") or {}).get("spec")


def superuser_password(docs):
    for d in docs:
        if d.get("kind") == "Secret" and d["metadata"]["name"] == SECRET:
            if SUPERUSER_KEY in (d.get("stringData") or {}):
                return d["stringData"][SUPERUSER_KEY]
            if SUPERUSER_KEY in (d.get("data") or {}):
                return base64.b64decode(d["data"][SUPERUSER_KEY]).decode()
    return None


def check_k8s_superuser(label, docs, password):
    """Only StatefulSet/postgres's postgres container, as POSTGRES_PASSWORD, reads the superuser's key."""
    readers = []
    for d in docs:
        kind, name = d.get("kind"), d["metadata"]["name"]
        if kind == "Secret" and name == SECRET:
            continue   # the store itself
        obj = f"{label} {kind}/{name}"
        text = json.dumps(d)
        if password and password in text:
            fail(f"{obj}: carries the superuser's password (the value of Secret {SECRET} key {SUPERUSER_KEY}) "
                 "literally: only the postgres server may know it")
        if SUPERUSER_URL.search(text):
            fail(f"{obj}: has a postgres://postgres URL: nothing connects as the superuser over TCP "
                 "(pg_hba rejects it; labctl is lab_owner)")
        spec = _pod_spec(d) if kind in POD_KINDS else None
        if not spec:
            continue
        server = kind == "StatefulSet" and name == "postgres"
        for v in spec.get("volumes") or []:
            srcs = [v.get("secret") or {}] + [s.get("secret") or {} for s in (v.get("projected") or {}).get("sources") or []]
            if any(s.get("secretName", s.get("name")) == SECRET for s in srcs):
                fail(f"{obj}: volume {v['name']} mounts Secret {SECRET}, the superuser's key included: "
                     "read single keys with secretKeyRef")
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            where = f"{obj}[{c['name']}]"
            for ef in c.get("envFrom") or []:
                if (ef.get("secretRef") or {}).get("name") == SECRET:
                    fail(f"{where}: envFrom Secret {SECRET} hands it the superuser's password: use secretKeyRef per key")
            for e in c.get("env") or []:
                ref = ((e.get("valueFrom") or {}).get("secretKeyRef")) or {}
                if ref.get("name") == SECRET and ref.get("key") == SUPERUSER_KEY:
                    if server and c["name"] == "postgres" and e["name"] == "POSTGRES_PASSWORD":
                        readers.append(where)
                    else:
                        fail(f"{where}: {e['name']} reads the superuser's password (Secret {SECRET} key "
                             f"{SUPERUSER_KEY}): only the postgres server may (POSTGRES_PASSWORD)")
                if e["name"] == "PGUSER" and e.get("value") == SUPERUSER and not server:
                    fail(f"{where}: PGUSER=postgres: nothing but the server's own socket logs in as the superuser")
    return readers


def check_compose_superuser(compose, interpolate):
    """Only services.postgres knows LAB_POSTGRES_PASSWORD; no service or x-* template logs in as postgres."""
    pg_env = (compose["services"].get("postgres") or {}).get("environment") or {}
    password = interpolate(pg_env.get("POSTGRES_PASSWORD", "")) or None
    parts = [(f"services.{n}", s) for n, s in compose["services"].items() if n != "postgres"]
    parts += [(k, v) for k, v in compose.items() if k.startswith("x-")]
    for where, obj in parts:
        raw = json.dumps(obj)
        text = interpolate(raw)
        if COMPOSE_SUPERUSER_VAR in raw or (password and password in text):
            fail(f"docker-compose.yml {where}: carries the superuser's password ({COMPOSE_SUPERUSER_VAR}): "
                 "only services.postgres may (POSTGRES_PASSWORD)")
        if SUPERUSER_URL.search(text):
            fail(f"docker-compose.yml {where}: has a postgres://postgres URL: labctl connects as lab_owner, "
                 "and pg_hba rejects the superuser over TCP")
        env = obj.get("environment") if isinstance(obj, dict) else None
        if isinstance(env, dict) and env.get("PGUSER") == SUPERUSER:
            fail(f"docker-compose.yml {where}: PGUSER=postgres: the superuser logs in over the socket only "
                 "(docker compose exec postgres psql -U postgres)")
    return password


# ------------------------------------------------------------------ pg_hba, evaluated
def _hba_lines(text):
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            out.append(line.split())
    return out


def _addr_match(spec, addr):
    import ipaddress
    if spec in ("all", "samehost", "samenet") or not re.match(r"^[0-9a-fA-F:.]+(/\d+)?$", spec):
        return True    # samehost/samenet/host names: assume they match (conservative)
    try:
        return ipaddress.ip_address(addr) in ipaddress.ip_network(spec, strict=False)
    except ValueError:
        return False


def _name_match(field, name, db=False):
    for item in field.split(","):
        if item == "all":
            if not (db and name == "replication"):
                return True
        elif item.startswith("/"):
            if re.search(item[1:], name) and not (db and name == "replication"):
                return True
        elif item.startswith(("+", "@")) or item in ("sameuser", "samerole"):
            return True    # group or file: assume it matches (conservative)
        elif item == name:
            return True
    return False


def first_match(hba, conn_type, database, user, addr=None, ssl=False):
    """pg_hba's first matching line for a connection (conn_type local or host), or None (rejected)."""
    for f in _hba_lines(hba):
        t = f[0]
        if conn_type == "local":
            if t != "local":
                continue
            db, us, method = f[1], f[2], f[3] if len(f) > 3 else None
        else:
            if t not in ("host", "hostssl", "hostnossl", "hostgssenc", "hostnogssenc"):
                continue
            if (t == "hostssl" and not ssl) or (t == "hostnossl" and ssl):
                continue
            db, us = f[1], f[2]
            if len(f) > 4 and re.match(r"^\d", f[4]) and "/" not in f[3]:
                addr_spec, method = f"{f[3]}/{f[4]}", f[5] if len(f) > 5 else None   # address + netmask
            else:
                addr_spec, method = f[3], f[4] if len(f) > 4 else None
            # The probes are not GSS-encrypted; a hostgssenc line counts when it would let one in
            # (conservative both ways: it never counts as the reject).
            if (t == "hostgssenc" and method == "reject") or not _addr_match(addr_spec, addr):
                continue
        if _name_match(db, database, db=True) and _name_match(us, user):
            return " ".join(f), method
    return None, None


def _run_init_scripts(scripts, how):
    """The image's pg_hba.conf after the *.sh init scripts (name -> text), run in the entrypoint's order."""
    with tempfile.TemporaryDirectory() as pgdata:
        hba = os.path.join(pgdata, "pg_hba.conf")
        with open(hba, "w") as f:
            f.write(IMAGE_HBA)
        for name in sorted(scripts):
            path = os.path.join(pgdata, "..init-" + name)
            with open(path, "w") as f:
                f.write(scripts[name])
            # executed (mode 0555 in kind, git's +x in compose) or sourced into the entrypoint's shell
            cmd = ["bash", path] if how == "executed" else ["bash", "-Eeo", "pipefail", "-c", '. "$0"', path]
            r = subprocess.run(cmd, env={"PGDATA": pgdata, "PATH": os.environ["PATH"]}, capture_output=True, text=True)
            if r.returncode != 0:
                return None, f"{name} ({how}) exits {r.returncode}: {r.stderr.strip()[:200]}"
        return open(hba).read(), None


def check_hba(where, scripts):
    """Evaluate the pg_hba.conf the server starts with, given the init scripts that the deployment mounts."""
    failed_before = len(FAIL)
    results = {}
    for how in ("executed", "sourced"):
        hba, err = _run_init_scripts({n: t for n, t in scripts.items() if n.endswith(".sh")}, how)
        if err:
            fail(f"{where}: init script {err}")
            return
        results[how] = hba
    if results["executed"] != results["sourced"]:
        fail(f"{where}: the init scripts leave a different pg_hba.conf when sourced than when executed")
    hba = results["executed"]
    bad = []
    for db in PROBE_DATABASES:
        for addr in PROBE_ADDRESSES:
            for ssl in (False, True):
                line, method = first_match(hba, "host", db, SUPERUSER, addr, ssl)
                if method not in (None, "reject"):
                    bad.append(f"{db}@{addr}{' ssl' if ssl else ''} -> {line!r}")
    if bad:
        fail(f"{where}: pg_hba lets the superuser in over TCP ({len(bad)} of "
             f"{len(PROBE_DATABASES) * len(PROBE_ADDRESSES) * 2} probes), e.g. {bad[0]}; "
             f"want `host all {SUPERUSER} all reject` (and replication) before every other line "
             f"({INITDB_DIR}/*.sh, mounted at {INITDB_MOUNT})")
    line, method = first_match(hba, "host", "retry_storm_lab", "lab_owner", "10.244.1.7")
    if method != "scram-sha-256":
        fail(f"{where}: lab_owner over TCP meets {line!r}, want scram-sha-256 (labctl connects so)")
    line, method = first_match(hba, "local", "retry_storm_lab", SUPERUSER)
    if method in (None, "reject"):
        fail(f"{where}: postgres over the socket meets {line!r}: the init scripts and password rotation "
             "(psql -U postgres inside the container) need it")
    if len(FAIL) == failed_before:
        print(f"  ok   {where}: pg_hba evaluated: postgres over TCP rejected ({len(PROBE_DATABASES)} databases incl. "
              f"replication x {len(PROBE_ADDRESSES)} addresses x ssl/no ssl), lab_owner scram-sha-256, socket kept")


def kind_init_scripts(docs):
    """The files StatefulSet/postgres mounts at /docker-entrypoint-initdb.d, from the rendered ConfigMap."""
    sts = [d for d in docs if d.get("kind") == "StatefulSet" and d["metadata"]["name"] == "postgres"]
    if not sts:
        return None, "no StatefulSet/postgres"
    spec = sts[0]["spec"]["template"]["spec"]
    c = [c for c in spec["containers"] if c["name"] == "postgres"][0]
    mount = [m for m in c.get("volumeMounts") or [] if m["mountPath"] == INITDB_MOUNT]
    if not mount:
        return {}, f"mounts nothing at {INITDB_MOUNT}: pg_hba.conf is the image's"
    vol = [v for v in spec.get("volumes") or [] if v["name"] == mount[0]["name"]]
    cm_name = (vol[0].get("configMap") or {}).get("name") if vol else None
    cms = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cm_name]
    if not cms:
        return None, f"{INITDB_MOUNT} is not a ConfigMap of the render"
    mode = (vol[0]["configMap"].get("defaultMode") or 0o644)
    data = cms[0].get("data") or {}
    if any(n.endswith(".sh") for n in data) and not mode & 0o100:
        return None, f"ConfigMap {cm_name}'s *.sh are mounted without x (defaultMode {oct(mode)}): set 0555"
    return data, None


def compose_init_scripts(compose):
    vols = (compose["services"].get("postgres") or {}).get("volumes") or []
    src = [str(v).split(":")[0] for v in vols if str(v).split(":")[1:2] == [INITDB_MOUNT]]
    if not src:
        return {}, f"mounts nothing at {INITDB_MOUNT}: pg_hba.conf is the image's"
    d = os.path.normpath(src[0])
    if d != INITDB_DIR:
        return None, f"mounts {d} at {INITDB_MOUNT}, want ./{INITDB_DIR} (the files kind mounts too)"
    files = sorted(os.listdir(os.path.join(ROOT, d)))
    for n in files:
        if n.endswith(".sh") and not os.access(os.path.join(ROOT, d, n), os.X_OK):
            return None, f"{d}/{n} is not executable (git mode 100755)"
    return {n: read(os.path.join(d, n)) for n in files}, None


def cmd_superuser(kind, legacy, helm, job, compose, interpolate):
    failed_before = len(FAIL)
    password = superuser_password(kind)
    readers = []
    for label, docs in (("kustomize:kind", kind), ("kustomize:legacy", legacy), ("helm", helm),
                        ("k8s/jobs/gameday.yaml", job)):
        readers += [r for r in check_k8s_superuser(label, docs, password) if r.startswith("kustomize:kind")]
    if readers != ["kustomize:kind StatefulSet/postgres[postgres]"]:
        fail(f"kind: the superuser's key must be read by StatefulSet/postgres[postgres] alone, got {readers}")
    compose_password = check_compose_superuser(compose, interpolate)
    for where, (scripts, err) in (("kind StatefulSet/postgres", kind_init_scripts(kind)),
                                  ("docker-compose.yml services.postgres", compose_init_scripts(compose))):
        if err and scripts is None:
            fail(f"{where}: {err}")
            continue
        if err:
            print(f"  NOTE {where}: {err}")
        check_hba(where, scripts)
    if len(FAIL) == failed_before:
            print(f"  ok   superuser: its password only in StatefulSet/postgres (kind) and services.postgres (compose"
              f"{'' if compose_password else ': NOT SET'}); no postgres://postgres URL, no PGUSER=postgres elsewhere")
