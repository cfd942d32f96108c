"""Section 10 (replicas): every replica reachable: headless Services, the game-day Job's targets,
Prometheus jobs/targets, doc.ingested with 12 partitions."""
import glob
import json
import os
import re

import yaml

from .common import COMPOSE_TARGETS, ROOT, binary_of_image, fail, k8s_containers
from .envcontract import check_env_set


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
