"""Section 8 (env): every LAB_* variable the manifests set for a service is one it reads, and the
required ones are set."""
import os
import re
import tomllib

import yaml

from .common import ROOT, SERVICES, binary_of_image, fail, k8s_containers


def crate_absent(service):
    """A service whose crate is not in the tree yet (enrichment, issue 5, lands during issue 7):
    its contract cannot be read, so its containers are skipped with a printed note."""
    return not os.path.exists(os.path.join(ROOT, f"services/{service}/config/defaults.toml"))


# Names a manifest already sets for a service whose code does not read them YET (announced by
# another issue). Setting them is harmless (lab_core::config ignores a section the service does
# not have); each one is printed as PENDING, and the exemption ends by itself when the code reads it.
# Issue 17 (the admin listener): every service's [admin] host/port, and the gateway's
# upstream.orchestrators_admin (its readiness prober asks the orchestrators' admin port).
ADMIN_ENV = {"LAB_ADMIN__HOST", "LAB_ADMIN__PORT"}
PENDING = {
    "edge-gateway": ADMIN_ENV | {"LAB_UPSTREAM__ORCHESTRATORS_ADMIN"},
    "orchestrator": {"LAB_KAFKA__BROKERS", "LAB_KAFKA__TOPIC"} | ADMIN_ENV,   # issue 5: doc.ingested publisher
    "entity-service": ADMIN_ENV,
    "enrichment": ADMIN_ENV,
}
PENDING_SEEN = set()


# ------------------------------------------------------------------ environment drift
def struct_fields(src, struct):
    m = re.search(r"pub struct " + re.escape(struct) + r"\s*\{(.*?)\n\}", src, re.S)
    return set(re.findall(r"pub (\w+):", m.group(1))) if m else None


def valid_env(service):
    """{LAB_SECTION__KEY} a service accepts: its defaults.toml keys, plus fields of the section
    structs its configuration.rs declares, in its own sources or the lab crate it names (sections
    whose keys are all optional, like orchestrator [budget], are empty in the TOML)."""
    with open(os.path.join(ROOT, f"services/{service}/config/defaults.toml"), "rb") as f:
        toml = tomllib.load(f)
    keys = {(s, k) for s, t in toml.items() if isinstance(t, dict) for k in t}
    src = open(os.path.join(ROOT, f"services/{service}/src/configuration.rs"), encoding="utf-8").read()
    settings = re.search(r"pub struct Settings\s*\{(.*?)\n\}", src, re.S)
    if settings:
        for section, ty in re.findall(r"pub (\w+): ([\w:]+)", settings.group(1)):
            # A section struct from a lab crate (`lab_flags::FlagSettings`): read it there.
            crate = ty.split("::")[0] if "::" in ty else None
            lib = os.path.join(ROOT, "crates", (crate or "").replace("_", "-"), "src", "lib.rs")
            home = open(lib, encoding="utf-8").read() if crate and os.path.exists(lib) else src
            fields = struct_fields(home, ty.split("::")[-1])
            if fields and section in toml:
                keys |= {(section, k) for k in fields}
    names = {f"LAB_{s.upper()}__{k.upper()}" for s, k in keys}
    return names | {"LAB_CONFIG_FILE"}, set(toml)


# labctl's flags live in labctl and in the lab-* crates it is a command line over (lab-native's
# UpArgs, lab-load's LoadArgs, ...): their clap `env = "LAB_..."` are labctl's variables.
LABCTL_SOURCES = ["services/labctl/src"] + sorted(
    os.path.join("crates", d, "src") for d in os.listdir(os.path.join(ROOT, "crates")) if d.startswith("lab-")
)


def labctl_env():
    # Every clap `env = "LAB_..."` in labctl's sources (subcommands declare their own).
    names = set()
    for top in LABCTL_SOURCES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(".rs"):
                    src = open(os.path.join(dirpath, f), encoding="utf-8").read()
                    names |= set(re.findall(r'env\s*=\s*"(LAB_\w+)"', src))
    return names


REQUIRED = {
    "edge-gateway": {"LAB_HTTP__HOST", "LAB_DATABASE__URL", "LAB_UPSTREAM__ORCHESTRATORS", "LAB_FLAGS__REDIS_URL",
                     "LAB_RATELIMIT__REDIS_URL", "LAB_UPSTREAM__ORCHESTRATORS_ADMIN"} | ADMIN_ENV,
    "orchestrator": {"LAB_HTTP__HOST", "LAB_ENTITY__URLS", "LAB_FLAGS__REDIS_URL"} | ADMIN_ENV,
    "entity-service": {"LAB_HTTP__HOST", "LAB_DATABASE__URL", "LAB_FLAGS__REDIS_URL"} | ADMIN_ENV,
    "enrichment": {"LAB_HTTP__HOST", "LAB_DATABASE__URL", "LAB_KAFKA__BROKERS", "LAB_FLAGS__REDIS_URL"} | ADMIN_ENV,
    # LAB_DATABASE_URL (lab_owner, the database's owner) too, except for labctl commands that never touch the
    # database (LABCTL_NO_DATABASE): least privilege, the flag Jobs get Redis only. LAB_REDIS_URL
    # (the operator's Redis user) likewise, except for the commands that never touch Redis
    # (LABCTL_NO_REDIS: db prepare and seed, the seed Job).
    "labctl": {"LAB_REDIS_URL"},
}
LABCTL_NO_DATABASE = {"flags"}
LABCTL_NO_REDIS = {"db", "seed"}


def check_env_set(where, binary, env, args=None):
    if binary == "labctl" and not (args and str(args[0]) in LABCTL_NO_DATABASE) and "LAB_DATABASE_URL" not in env:
        fail(f"{where}: labctl {' '.join(map(str, args or []))} needs LAB_DATABASE_URL "
             f"(only {sorted(LABCTL_NO_DATABASE)} run without the database)")
    if binary == "labctl":
        valid, sections = labctl_env(), set()
    else:
        valid, sections = valid_env(binary)
    for name in sorted(env):
        if not name.startswith("LAB_"):
            continue
        if binary != "labctl":
            section = name[4:].split("__", 1)[0].lower() if "__" in name else None
            # Variables outside the service's sections are ignored by lab_core::config (by design:
            # scripts' own LAB_* names); inside a section an unknown key fails at startup.
            if name not in valid and name in PENDING.get(binary, set()):
                PENDING_SEEN.add((binary, name))
            elif name not in valid:
                fail(f"{where}: {name} is not read by {binary} "
                     f"({'unknown key in [' + section + ']' if section in sections else 'no such section'}; "
                     f"valid: services/{binary}/config/defaults.toml)")
        elif name not in valid:
            fail(f"{where}: {name} is not a labctl variable ({', '.join(LABCTL_SOURCES)})")
    required = REQUIRED[binary]
    if binary == "labctl" and args and str(args[0]) in LABCTL_NO_REDIS:
        required = required - {"LAB_REDIS_URL"}
    for name in sorted(required - set(env)):
        fail(f"{where}: required {name} is not set for {binary}")


def cmd_env(render_files):
    absent = [s for s in SERVICES if crate_absent(s)]
    for s in absent:
        print(f"  NOTE services/{s} is not in the tree yet: its containers are NOT checked (skipped)")
    print("  services read: " + "; ".join(f"{s}: {len(valid_env(s)[0])} names" for s in SERVICES if s not in absent)
          + f"; labctl: {sorted(labctl_env())}")
    skipped = 0
    # compose
    compose = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml")))
    n = 0
    for name, svc in compose["services"].items():
        b = binary_of_image(svc.get("image", ""))
        if not b:
            continue
        if b in absent:
            skipped += 1
            continue
        env = svc.get("environment", {})
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        cmd_args = svc.get("command")
        check_env_set(f"docker-compose.yml services.{name}", b, env, cmd_args if isinstance(cmd_args, list) else None)
        n += 1
    print(f"  compose: {n} lab containers checked")
    for label, path in render_files:
        docs = [d for d in yaml.safe_load_all(open(path)) if d]
        m = 0
        for where, b, env, c in k8s_containers(docs):
            if b in absent:
                skipped += 1
            elif b:
                check_env_set(f"{label} {where}", b, env, c.get("args"))
                m += 1
        print(f"  {label}: {m} lab containers checked")
    if skipped:
        print(f"  NOTE {skipped} containers of {absent} skipped: crate absent")
    for b, name in sorted(PENDING_SEEN):
        print(f"  PENDING {b} does not read {name} yet (announced; set in the manifests, not verified)")
