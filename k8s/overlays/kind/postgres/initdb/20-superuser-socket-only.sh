#!/usr/bin/env bash
# The superuser logs in over the local socket only (issue 28): a pod that reaches 5432 - the
# gateway does, for its key lookup - must not be able to try the superuser's password at all.
#
# The official image writes $PGDATA/pg_hba.conf at initdb: initdb's sample (local socket and
# 127.0.0.1/::1 `trust`) plus `host all all all scram-sha-256` (POSTGRES_HOST_AUTH_METHOD). This
# puts two `reject` lines for postgres BEFORE all of them; pg_hba takes the first matching line,
# so every TCP connection as postgres is refused, from anywhere, loopback inside the container
# included, with or without SSL (`host` covers hostssl and hostnossl), to any database
# (`all`) and for replication (which `all` does not cover). `local` lines stay as the image has
# them: the init scripts, pg_isready and `psql -U postgres` inside the container use the socket.
#
# Why here and not an hba_file: this keeps the image's own file and its defaults, and runs once,
# like the rest of /docker-entrypoint-initdb.d. The server the entrypoint starts for the init
# scripts has already read pg_hba.conf (and listens on no TCP port); the entrypoint stops it and
# starts the real one afterwards, which reads this file. A volume initialised before this script
# existed keeps its old file: drop it once (k8s/README.md).
#
# Works executed (kind mounts it 0555; git keeps it 100755 for compose) or sourced by the
# entrypoint: everything runs in a subshell, nothing exits the caller or leaks a variable.
(
  set -euo pipefail
  hba="$PGDATA/pg_hba.conf"
  marker='# retry-storm-lab: the superuser over the local socket only (20-superuser-socket-only.sh)'
  if ! grep -qxF "$marker" "$hba"; then
    tmp="$(mktemp "$hba.XXXXXX")"   # 0600, in $PGDATA: the rename below is atomic
    {
      printf '%s\n' "$marker"
      printf '%s\n' 'host    all             postgres        all                     reject'
      printf '%s\n' 'host    replication     postgres        all                     reject'
      printf '\n'
      cat "$hba"
    } >"$tmp"
    mv "$tmp" "$hba"
  fi
  echo "pg_hba.conf: postgres over TCP rejected (socket only)"
)
