#!/usr/bin/env bash
# scripts/lab.sh — the lab's main job, natively (no Docker needed):
#   dependencies → release build → seed (once) → labctl up → real extractions → a short
#   open-loop load sample → status → labctl down.
#
# Env:
#   LAB_SEED_ARGS   extra args for `labctl seed` (e.g. "--small" on a laptop; default: full 1M/2000)
#   LAB_LOAD_RATE   requests/s of the load sample (default 50), LAB_LOAD_SECONDS (default 15)
#   LAB_KEEP_UP=1   leave the lab running at the end (stop it with: target/release/labctl down)
#   CARGO_TARGET_DIR, LAB_DATABASE_URL, LAB_STATE_DIR, LAB_DATA_DIR as usual.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/.."
say() { printf '\n[lab] %s\n' "$*"; }

if ! command -v cargo >/dev/null && [[ -x "${HOME:-/root}/.cargo/bin/cargo" ]]; then
    export PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi

say "dependencies (PostgreSQL, Redis, Kafka-protocol broker)"
bash scripts/deps.sh

say "release build of the services and labctl"
cargo build --release --bins
BIN="${CARGO_TARGET_DIR:-target}/release"
LABCTL="$BIN/labctl"

say "seed (skipped when already seeded; reseed with: $LABCTL seed --force)"
# shellcheck disable=SC2086  # LAB_SEED_ARGS is a list of flags
"$LABCTL" seed --if-empty ${LAB_SEED_ARGS:-}

say "labctl up: 1 gateway, 2 orchestrators, 2 entity-services, 2 enrichment workers"
"$LABCTL" up
if [[ "${LAB_KEEP_UP:-0}" != 1 ]]; then
    trap 'say "labctl down"; "$LABCTL" down' EXIT
fi

say "three real extractions through the gateway"
"$LABCTL" extract --count 3

say "open-loop load sample: ${LAB_LOAD_RATE:-50} rps for ${LAB_LOAD_SECONDS:-15} s"
mkdir -p .lab/reports
"$LABCTL" load --rate "${LAB_LOAD_RATE:-50}" --duration "${LAB_LOAD_SECONDS:-15}" \
    --out .lab/reports/load-sample.json

say "the asynchronous path: every extraction became a doc.ingested event; the enrichment group's lag"
# A few seconds for the last events to be applied and their offsets committed (every second).
sleep 3
"$LABCTL" kafka lag

say "status"
"$LABCTL" status
