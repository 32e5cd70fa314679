#!/usr/bin/env bash
# Stops the local stack started by up.sh. Data stays in $TRIBUTARY_STACK_DIR
# (pass --wipe to delete it; the broker keeps nothing across restarts anyway).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

if [ -f "$mariadb_dir/mysqld.pid" ]; then
  mariadb-admin --no-defaults --socket="$mariadb_dir/mysqld.sock" -uroot shutdown 2>/dev/null \
    || kill "$(cat "$mariadb_dir/mysqld.pid")" 2>/dev/null || true
  echo "[stack] MariaDB stopped"
fi
if [ -f "$pg_dir/data/postmaster.pid" ]; then
  pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
  runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast stop >/dev/null 2>&1 || true
  echo "[stack] PostgreSQL stopped"
fi
if [ -f "$tansu_dir/tansu.pid" ]; then
  kill "$(cat "$tansu_dir/tansu.pid")" 2>/dev/null || true
  rm -f "$tansu_dir/tansu.pid"
  echo "[stack] Tansu stopped"
fi
for pid in "$tls_tansu_dir/socat.pid" "$tls_tansu_dir/tansu.pid"; do
  if [ -f "$pid" ]; then
    kill "$(cat "$pid")" 2>/dev/null || true
    rm -f "$pid"
    echo "[stack] TLS broker stopped"
  fi
done
if [ "${1:-}" = "--wipe" ]; then
  rm -rf "$TRIBUTARY_STACK_DIR"
  echo "[stack] $TRIBUTARY_STACK_DIR removed"
fi
