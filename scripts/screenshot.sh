#!/usr/bin/env bash
# scripts/screenshot.sh — look at what the lab drew: a report.html in headless Chromium, as a PNG.
#
#   scripts/screenshot.sh <report.html> <out.png> [WIDTHxHEIGHT] [#anchor]
#
# Installs Debian's `chromium` when it is missing (apt; LAB_SKIP_APT=1 to refuse). The page is
# self-contained (no network at view time), so Chromium runs with the network features off.
# An anchor (`#trace-legacy`, `#blindfold-legacy`) scrolls to that part of the report first.
set -euo pipefail

html="${1:?usage: scripts/screenshot.sh <report.html> <out.png> [WIDTHxHEIGHT] [#anchor]}"
out="${2:?usage: scripts/screenshot.sh <report.html> <out.png> [WIDTHxHEIGHT] [#anchor]}"
size="${3:-1600x1300}"
anchor="${4:-}"
[[ -f "$html" ]] || { echo "no such file: $html" >&2; exit 2; }
[[ "$size" =~ ^[0-9]+x[0-9]+$ ]] || { echo "size must be WIDTHxHEIGHT, got $size" >&2; exit 2; }

if ! command -v chromium >/dev/null; then
    if [[ "${LAB_SKIP_APT:-0}" == 1 ]]; then
        echo "chromium is not installed (and LAB_SKIP_APT=1): apt-get install chromium" >&2
        exit 1
    fi
    echo "[screenshot] installing Debian's chromium (once)" >&2
    HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    LOG_TAG=screenshot LOG_FD=2
    # shellcheck source=lib/common.sh
    source "$HERE/lib/common.sh"
    # shellcheck source=lib/apt.sh
    source "$HERE/lib/apt.sh"   # apt_ensure: apt-get update once if needed, then install; log on failure
    apt_ensure "${LAB_STATE_DIR:-$HERE/../.lab}/logs/apt.log" chromium
fi

abs="$(cd "$(dirname "$html")" && pwd)/$(basename "$html")"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
mkdir -p "$(dirname "$out")"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --hide-scrollbars --window-size="${size/x/,}" \
    --screenshot="$out" "file://$abs$anchor" >/dev/null 2>&1
[[ -s "$out" ]] || { echo "chromium wrote no screenshot to $out" >&2; exit 1; }
echo "$out"
