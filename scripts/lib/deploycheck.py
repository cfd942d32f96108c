#!/usr/bin/env python3
"""The Python checks of scripts/validate-deploy.sh (issue 7): the deployment files read as data.

Called only by scripts/validate-deploy.sh, in its deploy venv (PyYAML, helm-python-sdk), as
    "$VENV/bin/python" scripts/lib/deploycheck.py SUBCOMMAND [ARGS]
with ROOT (the repository), WORK (the run's scratch dir: the kustomize renders it reads, the Helm
renders and rule files it writes) and, for `helm`, K8S_VERSION in the environment.

Subcommands, by validate-deploy.sh section: sync check|write (1), helm (4), promql RENDER (5),
docker-inputs (7), env LABEL=RENDER... (8), prometheus (9), replicas BASE KIND JOB (10),
least-privilege KIND LEGACY ROLLOUTS HELM JOB and kind-prometheus-static OUT (11).
Each prints what it checked and every problem as "  FAIL ...", naming the file and the fix, and
exits 1 if there was any. This file only dispatches: the checks live in scripts/lib/deploychecks/
(common, manifests, envcontract, prometheus, dockerinputs, replicas, least_privilege,
compose_privilege, superuser, netpol).
"""
import sys

from deploychecks import (
    dockerinputs,
    envcontract,
    least_privilege,
    manifests,
    prometheus,
    replicas,
)
from deploychecks.common import FAIL

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "sync":
        manifests.cmd_sync(write=sys.argv[2] == "write")
    elif cmd == "env":
        envcontract.cmd_env([tuple(a.split("=", 1)) for a in sys.argv[2:]])
    elif cmd == "helm":
        manifests.cmd_helm()
    elif cmd == "promql":
        prometheus.cmd_promql(sys.argv[2])
    elif cmd == "docker-inputs":
        dockerinputs.cmd_docker_inputs()
    elif cmd == "prometheus":
        prometheus.cmd_prometheus()
    elif cmd == "replicas":
        replicas.cmd_replicas(*sys.argv[2:5])
    elif cmd == "least-privilege":
        least_privilege.cmd_least_privilege(*sys.argv[2:7])
    elif cmd == "kind-prometheus-static":
        prometheus.cmd_kind_prometheus_static(sys.argv[2])
    sys.exit(1 if FAIL else 0)
