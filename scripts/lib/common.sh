# shellcheck shell=bash
# scripts/lib/common.sh — sourced, not run: the helpers every script of scripts/ used to define for
# itself (issue 25). Sourced by all of them but test.sh.
#
#   LOG_TAG=deps
#   source "$HERE/lib/common.sh"
#
# Messages. The sourcing script sets LOG_TAG (its short name) first, and may set the rest to keep
# its own look:
#   LOG_FMT   printf format of say/step, one %s        default '[TAG] %s\n'
#   LOG_ERR   what die's message starts with           default '[TAG] ERROR: '
#   LOG_FD    the fd say/step write to                 default 1 (2: stdout is the script's data)
#   say MSG... / step MSG...   progress
#   warn MSG...                '[TAG] WARNING: MSG' on stderr
#   die WHAT [FIX]             WHAT, and '[TAG]   fix: FIX' when given, on stderr; exit 1
#
# Tools and processes:
#   LAB_TOOLS_DIR              where the pinned tools live (default ~/.cache/retry-storm-lab/tools)
#   find_python                a python that can make a venv with pip (LAB_PYTHON first)
#   venv_install PY VENV ARG...   a fresh venv at VENV, `pip install ARG...` in it, quiet unless it fails
#   cargo_on_path              add ~/.cargo/bin to PATH when cargo is not on it (CI, cron, sudo)
#   port_open HOST PORT        something accepts TCP connections there (2 s at most)
#   wait_until SECONDS CMD...  poll CMD every 0.5 s until it succeeds (0) or time runs out (1)
#
# The native lab's addresses come from `labctl status --json` only (scripts/lib/lab_status.py):
#   lab_admin_urls SERVICE LABCTL...   the admin base URLs (/metrics) of SERVICE's replicas, comma-
#                                      separated, as the labctl that runs the lab reports them
#                                      (LABCTL...: that binary and its global flags, e.g. --state-dir)

: "${LOG_TAG:?set LOG_TAG before sourcing scripts/lib/common.sh}"
: "${LOG_FMT:=[$LOG_TAG] %s\n}"
: "${LOG_ERR:=[$LOG_TAG] ERROR: }"
: "${LOG_FD:=1}"
LAB_TOOLS_DIR="${LAB_TOOLS_DIR:-${HOME:-/root}/.cache/retry-storm-lab/tools}"
LAB_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# shellcheck disable=SC2059  # the format is the script's own LOG_FMT
say() { printf "$LOG_FMT" "$*" >&"$LOG_FD"; }
step() { say "$@"; }
warn() { printf '[%s] WARNING: %s\n' "$LOG_TAG" "$*" >&2; }
die() {
    printf '%s%s\n' "$LOG_ERR" "$1" >&2
    [[ $# -gt 1 ]] && printf '[%s]   fix: %s\n' "$LOG_TAG" "$2" >&2
    exit 1
}

# Pick a python able to make a venv with pip (pyenv's and Debian's with python3-venv both do).
find_python() {
    local p
    for p in ${LAB_PYTHON:+"$LAB_PYTHON"} python3 /usr/bin/python3; do
        if command -v "$p" >/dev/null && "$p" -c 'import venv, ensurepip' 2>/dev/null; then
            command -v "$p"; return 0
        fi
    done
    return 1
}

# venv_install PY VENV PIP_ARG...: VENV made anew by PY (a half-made or stale venv is ours to
# rebuild), then `pip install PIP_ARG...` in it. pip's output is shown only when it fails (return 1).
venv_install() {
    local py="$1" venv="$2" out rc=0
    shift 2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    out="$(mktemp)"
    { "$py" -m venv "$venv" &&
      "$venv/bin/python" -m pip install --no-input --disable-pip-version-check -q "$@"; } >"$out" 2>&1 || rc=$?
    ((rc == 0)) || cat "$out" >&2
    rm -f "$out"
    return "$rc"
}

cargo_on_path() {
    if ! command -v cargo >/dev/null && [[ -x "${HOME:-/root}/.cargo/bin/cargo" ]]; then
        export PATH="${HOME:-/root}/.cargo/bin:$PATH"
    fi
}

# TCP connect with bash's /dev/tcp: no curl/nc needed. `timeout` guards against a SYN that
# is never answered (a refused connection on loopback fails at once anyway).
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

wait_until() {
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        ((SECONDS >= deadline)) && return 1
        sleep 0.5
    done
}

lab_admin_urls() {
    local service="$1"
    shift
    "$@" status --json | python3 "$LAB_LIB_DIR/lab_status.py" admin-urls "$service"
}
