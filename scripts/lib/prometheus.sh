# shellcheck shell=bash
# scripts/lib/prometheus.sh — sourced, not run. Prometheus tools from Debian's `prometheus`
# package WITHOUT its ~330 MB of dependencies: `apt-get download` fetches the .deb alone and
# `dpkg-deb -x` unpacks it; only the binaries asked for are kept, in
# ${LAB_TOOLS_DIR:-~/.cache/retry-storm-lab/tools}/prometheus-deb/bin, linked from $TOOLS/bin.
# Both are static Go binaries, so the package's dependencies are not needed to run them.
#
#   source scripts/lib/prometheus.sh
#   prom_install promtool                # offline checks (scripts/observability-check.sh), ~46 MB
#   prom_install promtool prometheus     # + the server (scripts/alerts-gameday.sh), ~70 MB more
#   "$(prom_tool_path prometheus)" --version
#
# Idempotent: a tool whose link already answers `--version` is not reinstalled. Installing a
# second tool later keeps the first. Needs apt-get and dpkg-deb; refreshes the package lists
# once (as root) when a fresh container has none, unless LAB_SKIP_APT=1.
# Used by: scripts/observability-check.sh, scripts/alerts-gameday.sh.

PROM_TOOLS_DIR="${LAB_TOOLS_DIR:-${HOME:-/root}/.cache/retry-storm-lab/tools}"

prom_tool_path() {
  printf '%s/bin/%s\n' "$PROM_TOOLS_DIR" "$1"
}

# prom_install TOOL... — make every named binary of the package (promtool, prometheus) runnable
# at $(prom_tool_path TOOL). Returns non-zero (with the reason on stderr) when it cannot.
prom_install() {
  local dest="$PROM_TOOLS_DIR/prometheus-deb" missing=() t
  for t in "$@"; do
    if ! "$(prom_tool_path "$t")" --version >/dev/null 2>&1; then
      missing+=("$t")
    fi
  done
  ((${#missing[@]} == 0)) && return 0
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "prom_install: need apt-get and dpkg-deb to install ${missing[*]} (or install them yourself)" >&2
    return 1
  fi
  local tmp rc=0
  tmp="$(mktemp -d)"
  _prom_install_from_deb "$tmp" "$dest" "${missing[@]}" || rc=$?
  rm -rf "$tmp"
  return "$rc"
}

_prom_install_from_deb() {
  local tmp="$1" dest="$2" t deb
  shift 2
  printf '==> installing %s into %s (apt-get download prometheus + dpkg-deb -x, no dependencies)\n' \
    "$*" "$PROM_TOOLS_DIR" >&2
  if ! (cd "$tmp" && apt-get download prometheus >"$tmp/apt.log" 2>&1); then
    # A fresh container has no package lists yet; refresh them once (needs root).
    if [[ "${LAB_SKIP_APT:-0}" == 1 ]] || [[ "$(id -u)" != 0 ]]; then
      cat "$tmp/apt.log" >&2
      echo "prom_install: apt-get download prometheus failed (run 'apt-get update' as root)" >&2
      return 1
    fi
    if ! apt-get update -qq >"$tmp/apt-update.log" 2>&1; then
      cat "$tmp/apt-update.log" >&2
      echo "prom_install: apt-get update failed" >&2
      return 1
    fi
    if ! (cd "$tmp" && apt-get download prometheus >"$tmp/apt.log" 2>&1); then
      cat "$tmp/apt.log" >&2
      echo "prom_install: apt-get download prometheus failed" >&2
      return 1
    fi
  fi
  deb="$(find "$tmp" -maxdepth 1 -name 'prometheus_*.deb' | head -n1)"
  if [[ -z "$deb" ]]; then
    echo "prom_install: apt-get download produced no prometheus_*.deb" >&2
    return 1
  fi
  dpkg-deb -x "$deb" "$tmp/x"
  mkdir -p "$dest/bin" "$PROM_TOOLS_DIR/bin"
  for t in "$@"; do
    if [[ ! -x "$tmp/x/usr/bin/$t" ]]; then
      echo "prom_install: the package has no usr/bin/$t" >&2
      return 1
    fi
    # Copy to a temporary name and rename: a running prometheus keeps its (old) inode.
    cp "$tmp/x/usr/bin/$t" "$dest/bin/.$t.new"
    mv -f "$dest/bin/.$t.new" "$dest/bin/$t"
    ln -sfn "$dest/bin/$t" "$(prom_tool_path "$t")"
    if ! "$(prom_tool_path "$t")" --version >/dev/null 2>&1; then
      echo "prom_install: $(prom_tool_path "$t") does not run" >&2
      return 1
    fi
  done
  basename "$deb" >"$dest/SOURCE"
}
