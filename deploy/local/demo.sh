#!/usr/bin/env bash
# The end-to-end demo: starts the local stack, creates a small `shop` database,
# runs `tributary capture`, makes inserts/updates/deletes and prints the change
# events that arrive in Kafka; then runs an enrichment job that joins the
# captured orders with the captured users (a local table) and prints the
# enriched orders, and looks the users table up over the gRPC lookup API.
# `--postgres` captures the same `shop` tables from the stack's PostgreSQL
# (schema `shop`, same topics) instead of MariaDB.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
case "${1:-}" in
  "") source_kind=mysql ;;
  --postgres) source_kind=postgres ;;
  *) echo "usage: $0 [--postgres]" >&2; exit 2 ;;
esac
"$repo_root/deploy/local/up.sh"
cd "$repo_root"
echo "[demo] building tributary (the first build compiles RocksDB and librdkafka: ~15 min on 2 cores)"
cargo build --quiet --bin tributary
bin="$CARGO_TARGET_DIR/debug/tributary"
server="demo$(date +%s)"
if [ "$source_kind" = mysql ]; then
  sql() { mariadb --no-defaults --socket="$mariadb_dir/mysqld.sock" -uroot "$@"; }
  sql <<'SQL'
DROP DATABASE IF EXISTS shop;
CREATE DATABASE shop;
CREATE TABLE shop.users (id INT PRIMARY KEY, name VARCHAR(50), email VARCHAR(100), tier ENUM('free','pro'));
CREATE TABLE shop.products (sku VARCHAR(20) PRIMARY KEY, title VARCHAR(100), price DECIMAL(10,2));
CREATE TABLE shop.orders (id INT PRIMARY KEY, user_id INT, sku VARCHAR(20), quantity INT);
SQL
  source_block="source:
  host: 127.0.0.1
  port: $TRIBUTARY_MYSQL_PORT
  user: tributary
  password: \${TRIBUTARY_MYSQL_PASSWORD:-tributary}
  server_id: 4242
include:
  databases: [shop]"
else
  sql() { psql -q -v ON_ERROR_STOP=1 "$TRIBUTARY_PG_URL" "$@"; }
  sql <<'SQL'
DROP PUBLICATION IF EXISTS demo_shop;
DROP SCHEMA IF EXISTS shop CASCADE;
CREATE SCHEMA shop;
CREATE TYPE shop.tier AS ENUM ('free', 'pro');
CREATE TABLE shop.users (id INT PRIMARY KEY, name VARCHAR(50), email VARCHAR(100), tier shop.tier);
CREATE TABLE shop.products (sku VARCHAR(20) PRIMARY KEY, title VARCHAR(100), price DECIMAL(10,2));
CREATE TABLE shop.orders (id INT PRIMARY KEY, user_id INT, sku VARCHAR(20), quantity INT);
GRANT USAGE ON SCHEMA shop TO tributary;
GRANT SELECT ON ALL TABLES IN SCHEMA shop TO tributary;
CREATE PUBLICATION demo_shop FOR TABLES IN SCHEMA shop;
SQL
  source_block="source:
  kind: postgres
  host: 127.0.0.1
  port: $TRIBUTARY_PG_PORT
  user: tributary
  password: \${TRIBUTARY_PG_PASSWORD:-tributary}
  database: postgres
  slot.name: $server
  slot.drop.on.stop: true
  publication.name: demo_shop
  publication.autocreate.mode: disabled
include:
  databases: [shop]"
fi

demo_dir="$TRIBUTARY_STACK_DIR/demo"
mkdir -p "$demo_dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$demo_dir/capture.yaml" <<YAML
server_name: $server
$source_block
kafka:
  brokers: $TRIBUTARY_KAFKA_BROKERS
metrics:
  listen: 127.0.0.1:$port
YAML
"$bin" validate "$demo_dir/capture.yaml"
"$bin" capture --config "$demo_dir/capture.yaml" 2>"$demo_dir/capture.log" &
capture_pid=$!
trap 'kill $capture_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 $capture_pid 2>/dev/null || { cat "$demo_dir/capture.log"; exit 1; }
  sleep 0.2
done
echo "[demo] capture is streaming (metrics: http://127.0.0.1:$port/metrics)"

sql <<'SQL'
INSERT INTO shop.users VALUES (1, 'Ada', 'ada@example.com', 'pro'), (2, 'Linus', 'linus@example.com', 'free');
INSERT INTO shop.products VALUES ('SKU-1', 'Keyboard', 49.90);
UPDATE shop.users SET tier = 'pro' WHERE id = 2;
DELETE FROM shop.users WHERE id = 1;
SQL

echo "[demo] change events in $server.shop.users:"
"$bin" tail --brokers "$TRIBUTARY_KAFKA_BROKERS" --topic "$server.shop.users" --max 5 --idle-timeout 10
echo "[demo] change events in $server.shop.products:"
"$bin" tail --brokers "$TRIBUTARY_KAFKA_BROKERS" --topic "$server.shop.products" --max 1 --idle-timeout 10
echo "[demo] capture metrics:"
curl -fs "http://127.0.0.1:$port/metrics" | grep '^tributary_capture_events_total' || true

echo "[demo] enrichment: orders (change topic) joined with users (local table from CDC)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
enrich_port=$(free_port)
grpc_port=$(free_port)
cat >"$demo_dir/tables.yaml" <<YAML
data_dir: $demo_dir/tables-$server
kafka: { brokers: $TRIBUTARY_KAFKA_BROKERS }
tables:
  - { name: users, topic: $server.shop.users, mode: global }
grpc: { listen: 127.0.0.1:$grpc_port }
YAML
cat >"$demo_dir/jobs.yaml" <<YAML
kafka: { brokers: $TRIBUTARY_KAFKA_BROKERS }
tables: tables.yaml
metrics: { listen: 127.0.0.1:$enrich_port }
jobs:
  - name: orders-enriched
    group_id: $server.orders-enriched
    input: { topics: [$server.shop.orders], format: change }
    joins:
      - { table: users, key: user_id, select: [name, tier], rename: { name: customer }, into: user }
    output: { topic: $server.orders.enriched, key: id }
    dead_letter: { topic: $server.orders.dlq }
YAML
"$bin" validate "$demo_dir/jobs.yaml"
echo "[demo] the same job in SQL (docs/sql.md), and the plan it compiles to:"
cat >"$demo_dir/jobs.sql" <<SQL
SET kafka.brokers = '$TRIBUTARY_KAFKA_BROKERS';
SET tables = 'tables.yaml';
CREATE STREAM orders (proc_time AS PROCTIME()) WITH (topic = '$server.shop.orders', format = 'change');
CREATE STREAM orders_enriched (PRIMARY KEY (id) NOT ENFORCED) WITH (topic = '$server.orders.enriched');
CREATE TABLE users (PRIMARY KEY (id) NOT ENFORCED);
CREATE JOB orders_enriched WITH (dead_letter_topic = '$server.orders.dlq', group_id = '$server.orders-enriched') AS
INSERT INTO orders_enriched
SELECT o.*, CASE WHEN u IS NOT NULL THEN STRUCT(u.name AS customer, u.tier) END AS user
FROM orders AS o
LEFT JOIN users FOR SYSTEM_TIME AS OF o.proc_time AS u ON u.id = o.user_id;
SQL
cat "$demo_dir/jobs.sql"
"$bin" explain "$demo_dir/jobs.sql"
sql <<'SQL'
INSERT INTO shop.orders VALUES (100, 2, 'SKU-1', 1), (101, 1, 'SKU-1', 3), (102, 2, 'SKU-1', 2);
SQL
"$bin" enrich --config "$demo_dir/jobs.yaml" 2>"$demo_dir/enrich.log" &
enrich_pid=$!
trap 'kill $capture_pid $enrich_pid 2>/dev/null || true' EXIT
echo "[demo] enriched orders in $server.orders.enriched (user 1 was deleted: user is null):"
"$bin" tail --brokers "$TRIBUTARY_KAFKA_BROKERS" --topic "$server.orders.enriched" --max 3 --idle-timeout 30
curl -fs "http://127.0.0.1:$enrich_port/metrics" | grep -E '^tributary_enrich_(events_(in|out)|join_lookups)_total' || true
echo "[demo] the same users table over the gRPC lookup API (tributary lookup):"
"$bin" lookup --endpoint "http://127.0.0.1:$grpc_port" users 1 2
"$bin" lookup --endpoint "http://127.0.0.1:$grpc_port" users --describe
kill -TERM $enrich_pid $capture_pid
wait $enrich_pid $capture_pid || true
echo "[demo] done; logs: $demo_dir/capture.log, $demo_dir/enrich.log"
