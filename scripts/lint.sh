#!/usr/bin/env bash
# scripts/lint.sh — the scripts' own lint (issue 25). Run by scripts/test.sh; ~3 s once installed.
#
#   1. ruff (PyPI, pinned, in a venv under LAB_TOOLS_DIR) over scripts/lib/**/*.py, with the rules of
#      scripts/lib/ruff.toml
#   2. shellcheck (Debian's package, installed with apt when missing; LAB_SKIP_APT=1 refuses) over
#      scripts/*.sh and scripts/lib/*.sh, following `source` (scripts/.shellcheckrc); a script in
#      EXEMPT (none now) at severity error only
#   3. node --check over scripts/lib/*.js
#   4. the shape rules (scripts/lib/script_shape.py): every shell script at most 300 lines, no
#      heredoc over 50 lines (EXEMPT's scripts excepted: none now)
#
# Every step runs, so one run shows every finding; exit 1 if any step found something.
# Env: LAB_TOOLS_DIR, LAB_PYTHON (the venv), LAB_SKIP_APT, LAB_STATE_DIR (apt's log).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
LOG_TAG=lint
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"   # step, die, find_python, venv_install, LAB_TOOLS_DIR
# shellcheck source=lib/apt.sh
source "$HERE/lib/apt.sh"      # apt_ensure

RUFF_VERSION="0.17.6"   # pinned, bump deliberately (the rules are listed in scripts/lib/ruff.toml)
RUFF_VENV="$LAB_TOOLS_DIR/venvs/ruff-$RUFF_VERSION"
# Scripts held to severity error only while they wait for a rewrite (none now).
EXEMPT=()

# --- tools ----------------------------------------------------------------------------------------
mkdir -p "$LAB_TOOLS_DIR/venvs"
exec 8>"$LAB_TOOLS_DIR/.lint.lock"
flock -w 600 8 || die "timed out waiting for $LAB_TOOLS_DIR/.lint.lock"
if [[ "$("$RUFF_VENV/bin/ruff" --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]]; then
    py="$(find_python)" || die "no python3 that can create a venv (import venv, ensurepip)" \
        "apt-get install python3-venv, or set LAB_PYTHON=/path/to/python3"
    step "installing ruff==$RUFF_VERSION into $RUFF_VENV"
    venv_install "$py" "$RUFF_VENV" "ruff==$RUFF_VERSION" ||
        die "pip install ruff==$RUFF_VERSION failed (output above)" \
            "check access to the Python package index (pip config list)"
fi
flock -u 8
if ! command -v shellcheck >/dev/null; then
    apt_ensure "${LAB_STATE_DIR:-.lab}/logs/apt.log" shellcheck
    command -v shellcheck >/dev/null || die "shellcheck is not installed" "apt-get install shellcheck"
fi
command -v node >/dev/null || die "node not found (node --check of scripts/lib/*.js)" "apt-get install nodejs"

# --- checks ---------------------------------------------------------------------------------------
failed=()
owned=()
for f in scripts/*.sh scripts/lib/*.sh; do
    [[ " ${EXEMPT[*]} " == *" $f "* ]] || owned+=("$f")
done

step "ruff $RUFF_VERSION (rules: scripts/lib/ruff.toml) over scripts/lib/ and its packages"
"$RUFF_VENV/bin/ruff" check --no-cache --config scripts/lib/ruff.toml scripts/lib/*.py scripts/lib/*/*.py || failed+=(ruff)

step "$(shellcheck --version | sed -n 's/^version: /shellcheck /p') over ${#owned[@]} scripts${EXEMPT[*]:+; ${EXEMPT[*]} at severity error}"
if shellcheck -x "${owned[@]}" && { ((${#EXEMPT[@]} == 0)) || shellcheck -x -S error "${EXEMPT[@]}"; }; then
    echo "  no findings"
else
    failed+=(shellcheck)
fi

step "node --check over scripts/lib/*.js"
js_ok=1
for f in scripts/lib/*.js; do node --check "$f" || js_ok=0; done
((js_ok)) && echo "  $(find scripts/lib -maxdepth 1 -name '*.js' | wc -l) file(s) parse" || failed+=(node)

step "shape: every script at most 300 lines, no heredoc over 50 lines"
python3 scripts/lib/script_shape.py scripts/*.sh scripts/lib/*.sh || failed+=(shape)

((${#failed[@]} == 0)) || die "lint failed: ${failed[*]} (findings above)"
step "ok: ruff, shellcheck, node --check, shape"
