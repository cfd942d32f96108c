# shellcheck shell=bash
# scripts/lib/own_lab.sh — sourced, not run: a native lab of a check's own, as k6-check.sh and
# scenarios-check.sh run one — a debug build (cached after the tests), its own database and seed
# files, a temporary state dir, its own ports, no tracing and no Kafka (unless asked); on exit it
# is stopped, Redis started again if a fault left it down, and the runtime flags (shared with any
# native lab through Redis) are reset. Needs common.sh.
#
#   refuse_if_lab_up               die when a native lab is up in .lab: a check sets the runtime
#                                  flags in the same Redis
#   own_lab_up NAME GW ORCH ENT [ENR KAFKA]
#                                  the lab, on public ports GW/ORCH/ENT (admin ports: what labctl
#                                  decides); with ENR and KAFKA (host:port), enrichment workers
#                                  from port ENR consuming from that broker. Sets LABCTL (labctl and the lab's global flags: the
#                                  database retry_storm_lab_NAME, seed files in
#                                  $LAB_TOOLS_DIR/NAME-data, kept with the database they match)
#                                  and OWN_LAB_STATE; seeds --small once; an EXIT trap takes it down.

refuse_if_lab_up() {
    local pid
    pid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("supervisor_pid", 0))' \
        .lab/run/lab.json 2>/dev/null || echo 0)"
    if [[ "$pid" != 0 ]] && kill -0 "$pid" 2>/dev/null; then
        die "a native lab is up (.lab): this check sets the same runtime flags; stop it first (labctl down)"
    fi
}

own_lab_down() {
    "${LABCTL[@]}" down >/dev/null 2>&1 || true
    # A run that stopped Redis (fault stop redis) and did not get to start it: started again with
    # the configuration it had (nothing to do when it answers).
    "${LABCTL[@]}" fault start redis >/dev/null 2>&1 || say "Redis did NOT come back: bash scripts/deps.sh"
    "${LABCTL[@]}" flags reset >/dev/null 2>&1 || true
    rm -rf "$OWN_LAB_STATE"
}

own_lab_up() {
    local name="$1" gw="$2" orch="$3" ent="$4" enr="${5:-}" kafka="${6:-}"
    local target="${CARGO_TARGET_DIR:-target}"
    say "building the services (debug; cached after the tests)"
    cargo build --bins -q
    OWN_LAB_STATE="$(mktemp -d "/tmp/$name-check.XXXXXX")"
    LABCTL=("$target/debug/labctl" --database-url "postgres://postgres@127.0.0.1:5432/retry_storm_lab_$name"
        --state-dir "$OWN_LAB_STATE" --data-dir "$LAB_TOOLS_DIR/$name-data")
    trap own_lab_down EXIT
    "${LABCTL[@]}" seed --small --if-empty >"$OWN_LAB_STATE/seed.log" 2>&1 ||
        { cat "$OWN_LAB_STATE/seed.log"; die "seed failed"; }
    local kafka_args=(--kafka '')
    if [[ -n "$kafka" ]]; then kafka_args=(--kafka "$kafka" --enrichment-port "$enr"); fi
    "${LABCTL[@]}" up --gateway-port "$gw" --orchestrator-port "$orch" --entity-port "$ent" \
        "${kafka_args[@]}" --trace-sample 0 --bin-dir "$target/debug" >"$OWN_LAB_STATE/up.log" 2>&1 ||
        { cat "$OWN_LAB_STATE/up.log"; die "labctl up failed"; }
}
