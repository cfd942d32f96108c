"""Sections 5, 9 and 11: the Argo analysis queries as a rules file (promql), the Prometheus contract
compose relies on (prometheus), the kind Prometheus config made checkable by promtool
(kind-prometheus-static)."""
import glob
import json
import os
import re

import yaml

from .common import ADMIN_PORT, COMPOSE_TARGETS, ROOT, WORK, fail, rel


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


# ------------------------------------------------------------------ Prometheus contract
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
        code = "\n".join(line.split(" #")[0] for line in text.splitlines() if not line.lstrip().startswith("#"))
        for var in sorted(set(re.findall(r"\$\{(\w+)\}", code)) - set(genv)):
            fail(f"{rel(f)} uses ${{{var}}} but docker-compose.yml sets no {var} for grafana")
        for doc in yaml.safe_load_all(text):
            for prov in (doc or {}).get("providers", []) or []:
                path = prov.get("options", {}).get("path")
                mounts = [v.split(":")[1] for v in g.get("volumes", []) if v.split(":")[0].startswith("./grafana/dashboards")]
                if path and path not in mounts:
                    fail(f"{rel(f)}: dashboards provider path {path} is not where compose mounts grafana/dashboards ({mounts})")
    print(f"  compose mounts match deploy/prometheus/prometheus.yml (rules/*.yml, targets/native/{{{','.join(mine)}}})")


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
