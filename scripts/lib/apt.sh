# shellcheck shell=bash
# scripts/lib/apt.sh — sourced, not run, after scripts/lib/common.sh (step, warn, die): Debian
# packages installed when missing, as scripts/deps.sh always did. Used by deps.sh (the build's and
# the services' packages), lint.sh (shellcheck) and screenshot.sh (chromium).
#
#   apt_ensure LOG PKG...   install the PKGs that are not installed; apt's chatter goes to LOG and
#                           is shown (its tail) only when it fails. LAB_SKIP_APT=1: only warn about
#                           what is missing. Sets APT_INSTALLED to what it installed.
#   pkg_installed PKG       dpkg says PKG is installed
#   as_root CMD...          CMD as root (sudo when not root)
#   nolock CMD...           CMD without fd 9 (deps.sh's lock): a daemon it leaves behind must not hold it

APT_UPDATED=0
# shellcheck disable=SC2034  # APT_INSTALLED is for the sourcing script
APT_INSTALLED=()

pkg_installed() { [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]; }

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $*" "re-run as root, or run that command yourself"
    fi
}

# Commands that leave a daemon behind must not inherit fd 9 (deps.sh's lock), or the daemon would
# hold the lock forever and the next deps.sh would wait for it. Prefix them with `nolock`.
nolock() { "$@" 9>&-; }

apt_ensure() {
    local log="$1" p missing=()
    shift
    APT_INSTALLED=()
    for p in "$@"; do pkg_installed "$p" || missing+=("$p"); done
    if ((${#missing[@]} == 0)); then
        step "apt: all $# packages present"
        return
    fi
    if [[ "${LAB_SKIP_APT:-0}" == 1 ]]; then
        warn "apt: skipped (LAB_SKIP_APT=1) but missing: ${missing[*]} — later steps may fail"
        return
    fi
    command -v apt-get >/dev/null || die "apt: missing ${missing[*]} and no apt-get here" \
        "install the equivalents of: ${missing[*]}, then re-run with LAB_SKIP_APT=1"

    mkdir -p "$(dirname "$log")"
    step "apt: installing ${missing[*]} (log $log)"
    if ((APT_UPDATED == 0)); then
        nolock as_root apt-get update >"$log" 2>&1 || {
            tail -n 20 "$log" >&2
            die "apt-get update failed (log tail above)" "check the network / apt sources"
        }
        APT_UPDATED=1
    fi
    # nolock: postgresql's and redis' postinst may start daemons.
    nolock as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y \
        --no-install-recommends "${missing[@]}" </dev/null >>"$log" 2>&1 || {
        tail -n 20 "$log" >&2
        die "apt-get install failed for: ${missing[*]} (log tail above)" \
            "run: apt-get install ${missing[*]}  and read its error"
    }
    # shellcheck disable=SC2034  # for the sourcing script
    APT_INSTALLED=("${missing[@]}")
    step "apt: installed ${#missing[@]} package(s)"
}
