//! Capture from PostgreSQL end to end, against the stack's private
//! PostgreSQL and broker: `tributary capture` with `source.kind: postgres`
//! snapshots a table while it is written, streams what follows from its
//! replication slot, and its topic ends as the table is (checked against the
//! server's own `SELECT`); the slot is confirmed no further than the
//! position capture stored.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use common::postgres::{PgCapture, pg_connect, pg_port};
use common::{
    Record, TributaryProcess, committed, next_random, random_seed, read_raw, read_topic, unique,
};
use serde_json::{Value, json};
use tributary_proto::grpc::v1::{self, lookup_client::LookupClient};
use tributary_proto::grpc::{from_json, to_json};
use tributary_proto::lsn::Lsn;

/// The table as the server reads it: `id` → `{id, name, price}`.
async fn rows(pg: &PgCapture) -> Result<BTreeMap<i64, Value>> {
    let rows = pg
        .client
        .query(
            &format!(
                "SELECT id::int8, name, price::text FROM {} ORDER BY id",
                pg.table
            ),
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let id: i64 = r.get(0);
            let name: Option<String> = r.get(1);
            let price: Option<String> = r.get(2);
            (id, json!({ "id": id, "name": name, "price": price }))
        })
        .collect())
}

/// The table a change topic describes: each key's last `after`; deletes
/// and tombstones remove it.
fn materialize(records: &[Record]) -> BTreeMap<i64, Value> {
    let mut table = BTreeMap::new();
    for record in records {
        let Some(id) = record.key["id"].as_i64() else {
            continue;
        };
        match record.value.as_ref().map(|v| &v["after"]) {
            Some(after) if after.is_object() => {
                table.insert(id, after.clone());
            }
            _ => {
                table.remove(&id);
            }
        }
    }
    table
}

/// The LSN of the newest position capture stored.
async fn stored_lsn(server_name: &str) -> Option<Lsn> {
    let records = read_raw(
        &format!("{server_name}.offsets"),
        Duration::from_secs(2),
        |_| false,
    )
    .await;
    let last = records.iter().rev().find(|r| r.value.is_some())?;
    last.json()["lsn"].as_str()?.parse().ok()
}

#[tokio::test]
async fn a_table_is_snapshotted_while_written_then_streamed_and_its_topic_ends_as_the_table()
-> Result<()> {
    let pg = PgCapture::new("id int PRIMARY KEY, name text, price numeric(10,2)").await?;
    let t = &pg.table;
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} SELECT g, 'row ' || g, g * 1.25 FROM generate_series(1, 10) g"
        ))
        .await?;
    let capture = TributaryProcess::capture(&pg.yaml());
    // Written while the snapshot starts and after: inserts, updates, a moved key, deletes.
    for step in 0..5 {
        let id = 11 + step;
        pg.client
            .batch_execute(&format!(
                "INSERT INTO {t} VALUES ({id}, 'new {id}', {id}.5); \
                 UPDATE {t} SET name = name || ' changed', price = price + 1 WHERE id = {};",
                1 + step
            ))
            .await?;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    pg.client
        .batch_execute(&format!(
            "UPDATE {t} SET id = 100 WHERE id = 6; DELETE FROM {t} WHERE id IN (7, 12); \
             UPDATE {t} SET name = NULL WHERE id = 8;"
        ))
        .await?;
    let expected = rows(&pg).await?;
    let want = expected.clone();
    let records = read_topic(&pg.topic(), Duration::from_secs(60), move |records| {
        materialize(records) == want
    })
    .await;
    assert_eq!(materialize(&records), expected, "log:\n{}", capture.log());

    // Snapshot rows, then streamed changes, written as Debezium's PostgreSQL connector writes them.
    let values: Vec<&Value> = records.iter().filter_map(|r| r.value.as_ref()).collect();
    let reads = values.iter().filter(|v| v["op"] == "r").count();
    assert!((10..=15).contains(&reads), "{reads} snapshot rows");
    let moved = values
        .iter()
        .find(|v| v["op"] == "c" && v["after"]["id"] == 100)
        .expect("the moved key's create");
    for v in &values {
        assert_eq!(v["source"]["connector"], "postgresql", "{v}");
        assert_eq!(v["source"]["schema"], "public", "{v}");
        assert_eq!(v["source"]["db"], "postgres", "{v}");
        assert_eq!(v["source"]["table"], *t, "{v}");
    }
    assert!(moved["source"]["lsn"].as_u64().is_some(), "{moved}");
    assert!(moved["source"]["txId"].as_u64().is_some(), "{moved}");
    let price = &values.iter().find(|v| v["op"] == "r").unwrap()["after"]["price"];
    assert!(price.as_str().is_some_and(|p| p.contains('.')), "{price}");

    // The slot follows the stored positions, never ahead of them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let confirmed = pg
            .confirmed()
            .await?
            .expect("the slot exists while capture runs");
        let stored = stored_lsn(&pg.server_name)
            .await
            .expect("a stored position");
        assert!(
            confirmed <= stored,
            "slot confirmed at {confirmed}, ahead of the stored {stored}"
        );
        let last_change = moved["source"]["lsn"].as_u64().unwrap();
        if confirmed.0 > last_change {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot stays at {confirmed}, behind the change at {}",
            Lsn(last_change)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    assert_eq!(
        pg.confirmed().await?,
        None,
        "slot.drop.on.stop drops the slot"
    );
    pg.drop().await
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_sigkills_during_snapshot_and_streaming_lose_nothing() -> Result<()> {
    sigkills_under_load("").await
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_sigkills_in_exactly_once_mode_commit_each_change_once() -> Result<()> {
    sigkills_under_load("delivery: exactly_once\n").await
}

/// Rows in the table before capture first starts.
const PRELOADED: i64 = 20_000;

/// 20 SIGKILLs of capture during its snapshot and under a write load, with
/// `extra` in its config. The topic's final state must equal the table; with
/// exactly-once delivery, as a read_committed consumer sees it, no streamed
/// change is committed twice.
async fn sigkills_under_load(extra: &str) -> Result<()> {
    let mut pg = PgCapture::new("id int PRIMARY KEY, v int").await?;
    pg.snapshot = "mode: initial, chunk_rows: 2000".into();
    pg.extra = extra.to_owned();
    let exactly_once = extra.contains("exactly_once");
    let t = pg.table.clone();
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} SELECT g, 0 FROM generate_series(1, {PRELOADED}) g"
        ))
        .await?;
    let mut seed = random_seed();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn(write_load(t.clone(), PRELOADED, seed, stop.clone()));

    let mut capture = TributaryProcess::capture(&pg.yaml());
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(300 + next_random(&mut seed) % 2200)).await;
        capture.kill();
        capture = TributaryProcess::capture(&pg.yaml());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.await??;

    topic_ends_as_the_table(&pg, exactly_once, &capture).await?;
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_on_demand_snapshot_under_load_and_sigkills_ends_as_the_table() -> Result<()> {
    on_demand_snapshot_under_kills("").await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_on_demand_snapshot_in_exactly_once_mode_under_sigkills_ends_as_the_table() -> Result<()>
{
    on_demand_snapshot_under_kills("delivery: exactly_once\n").await
}

/// Rows in the table an on-demand snapshot reads.
const ON_DEMAND_ROWS: i64 = 4_000;

/// A capture that streams without an initial snapshot (`snapshot.mode:
/// never`) is asked for an on-demand snapshot (`tributary snapshot`) while
/// the table is written, and SIGKILLed 6 times during it, with `extra` in its
/// config. The rows written before capture started reach the topic only
/// through the snapshot; the topic must end as the table.
async fn on_demand_snapshot_under_kills(extra: &str) -> Result<()> {
    let mut pg = PgCapture::new("id int PRIMARY KEY, v int").await?;
    pg.snapshot = "mode: never, incremental_chunk_rows: 150".into();
    pg.extra = extra.to_owned();
    pg.add_signal_table().await?;
    let t = pg.table.clone();
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} SELECT g, 0 FROM generate_series(1, {ON_DEMAND_ROWS}) g"
        ))
        .await?;
    let mut capture = TributaryProcess::capture(&pg.yaml());
    wait_for_slot(&pg, &capture).await?;
    let mut seed = random_seed();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn(write_load(t.clone(), ON_DEMAND_ROWS, seed, stop.clone()));
    request_snapshot(&pg);
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(800 + next_random(&mut seed) % 2000)).await;
        capture.kill();
        capture = TributaryProcess::capture(&pg.yaml());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.await??;
    let exactly_once = extra.contains("exactly_once");
    let records = topic_ends_as_the_table(&pg, exactly_once, &capture).await?;
    assert_on_demand_rows(&records);
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await
}

/// A transaction left open keeps the server from exporting an on-demand
/// chunk's snapshot until it ends: streaming goes on meanwhile (the chunk
/// gives up after a moment, says why, and asks again later), and the
/// snapshot completes once the transaction has ended.
#[tokio::test(flavor = "multi_thread")]
async fn an_open_transaction_delays_an_on_demand_snapshot_but_not_the_stream() -> Result<()> {
    const ROWS: i64 = 200;
    let mut pg = PgCapture::new("id int PRIMARY KEY, v int").await?;
    pg.snapshot = "mode: never, incremental_chunk_rows: 50".into();
    pg.add_signal_table().await?;
    let t = pg.table.clone();
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} SELECT g, 0 FROM generate_series(1, {ROWS}) g"
        ))
        .await?;
    let capture = TributaryProcess::capture(&pg.yaml());
    wait_for_slot(&pg, &capture).await?;
    let blocker = pg_connect().await?;
    blocker
        .batch_execute(&format!(
            "BEGIN; INSERT INTO {t} VALUES ({}, 0)",
            ROWS + 1_000_000
        ))
        .await?;
    request_snapshot(&pg);
    let marker = ROWS + 1;
    pg.client
        .batch_execute(&format!("INSERT INTO {t} VALUES ({marker}, 1)"))
        .await?;
    let records = read_topic(&pg.topic(), Duration::from_secs(30), move |records| {
        records.iter().any(|r| r.key["id"] == marker)
    })
    .await;
    assert!(
        records.iter().any(|r| r.key["id"] == marker),
        "the stream stopped behind the open transaction; log:\n{}",
        capture.log()
    );
    assert!(
        capture.log().contains("waits for transactions still open"),
        "{}",
        capture.log()
    );
    blocker.batch_execute("COMMIT").await?;
    // Writes move the stream on, past the chunk's next try.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn(write_load(t.clone(), ROWS, random_seed(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(15)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.await??;
    let records = topic_ends_as_the_table(&pg, false, &capture).await?;
    assert_on_demand_rows(&records);
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await
}

/// Rows of 2 MiB read by an on-demand snapshot: each chunk ends at the row
/// that reaches `snapshot.chunk_max_mb`, so capture's resident memory stays
/// within its byte bounds (the chunk, and the producer's queue,
/// `max_pending_mb`) plus what handling 2 MiB rows costs whatever the bounds;
/// every row arrives whole. Read as one chunk of `incremental_chunk_rows`,
/// the table (80 MiB) and its events would be held at once.
#[tokio::test(flavor = "multi_thread")]
async fn large_rows_are_snapshotted_on_demand_within_the_byte_bounds() -> Result<()> {
    const ROW_BYTES: usize = 2 << 20;
    const ROWS: i64 = 40;
    const BOUND_MB: u64 = 4;
    /// What handling 2 MiB rows costs whatever the bounds.
    const FIXED_MB: u64 = 64;
    let mut pg = PgCapture::new("id int PRIMARY KEY, b text NOT NULL").await?;
    pg.snapshot = format!("mode: never, incremental_chunk_rows: 1024, chunk_max_mb: {BOUND_MB}");
    pg.extra = format!("max_pending_mb: {BOUND_MB}\n");
    pg.add_signal_table().await?;
    let t = pg.table.clone();
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} SELECT g, repeat(chr(65 + g % 26), {ROW_BYTES}) \
             FROM generate_series(1, {ROWS}) g"
        ))
        .await?;
    let yaml = pg.yaml().replace(
        &format!("brokers: '{}'", common::brokers()),
        &format!(
            "brokers: '{}', producer: {{ message.max.bytes: '16777216' }}",
            common::brokers()
        ),
    );
    let capture = TributaryProcess::start_for_memory(&["capture"], &common::write_config(&yaml));
    wait_for_slot(&pg, &capture).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = capture.memory_kib("VmRSS");
    request_snapshot(&pg);

    let expected: BTreeMap<i64, (usize, String)> = pg
        .client
        .query(
            &format!("SELECT id::int8, length(b)::int8, right(b, 16) FROM {t}"),
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), (r.get::<_, i64>(1) as usize, r.get(2))))
        .collect();
    let records = read_topic(&pg.topic(), Duration::from_secs(120), |r| {
        r.len() >= ROWS as usize
    })
    .await;
    let seen: BTreeMap<i64, (usize, String)> = records
        .iter()
        .filter_map(|r| r.value.as_ref())
        .map(|v| {
            let b = v["after"]["b"].as_str().expect("text");
            let tail = b[b.len().saturating_sub(16)..].to_owned();
            (v["after"]["id"].as_i64().expect("id"), (b.len(), tail))
        })
        .collect();
    assert_eq!(seen, expected, "log:\n{}", capture.log());
    capture
        .wait_for_log("table snapshot done", Duration::from_secs(60))
        .await;
    let grown_mib = capture.peak_growth_mib(idle_kib);
    eprintln!(
        "grew {grown_mib} MiB snapshotting {} MiB of rows",
        (ROWS as usize * ROW_BYTES) >> 20
    );
    assert!(
        grown_mib <= FIXED_MB + 8 * BOUND_MB,
        "resident memory grew {grown_mib} MiB with max_pending_mb and chunk_max_mb {BOUND_MB}; log:\n{}",
        capture.log()
    );
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await
}

/// Waits until capture has created its slot.
async fn wait_for_slot(pg: &PgCapture, capture: &TributaryProcess) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while pg.confirmed().await?.is_none() {
        assert!(
            Instant::now() < deadline,
            "no slot; log:\n{}",
            capture.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Asks for an on-demand snapshot of `pg`'s table (`tributary snapshot`).
fn request_snapshot(pg: &PgCapture) {
    let requested = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["snapshot", "--config"])
        .arg(common::write_config(&pg.yaml()))
        .arg(format!("public.{}", pg.table))
        .output()
        .expect("tributary snapshot runs");
    assert!(requested.status.success(), "{requested:?}");
}

/// The topic holds on-demand snapshot rows, marked as such.
fn assert_on_demand_rows(records: &[Record]) {
    let on_demand = records
        .iter()
        .filter_map(|r| r.value.as_ref())
        .filter(|v| v["op"] == "r")
        .inspect(|v| assert_eq!(v["source"]["snapshot"], "incremental", "{v}"))
        .count();
    assert!(on_demand > 0, "no on-demand snapshot rows");
}

/// Waits until `pg`'s topic (as a read_committed consumer sees it, with
/// exactly-once delivery) describes the table as the server reads it, and
/// asserts it does; with exactly-once delivery, also that no streamed change
/// is committed twice. Returns the topic's records.
async fn topic_ends_as_the_table(
    pg: &PgCapture,
    exactly_once: bool,
    capture: &TributaryProcess,
) -> Result<Vec<Record>> {
    let t = &pg.table;
    let rows = pg
        .client
        .query(&format!("SELECT id::int8, v::int8 FROM {t}"), &[])
        .await?;
    let expected: BTreeMap<i64, Value> = rows
        .iter()
        .map(|r| {
            let (id, v): (i64, i64) = (r.get(0), r.get(1));
            (id, json!({ "id": id, "v": v }))
        })
        .collect();
    let topic = pg.topic();
    let records = if exactly_once {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let (committed, _aborted) = committed::read_topic(&topic, 3).await;
            let records: Vec<Record> = committed.iter().map(Record::parse).collect();
            if materialize(&records) == expected || Instant::now() > deadline {
                break records;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    } else {
        let want = expected.clone();
        read_topic(&topic, Duration::from_secs(180), move |records| {
            materialize(records) == want
        })
        .await
    };
    assert_eq!(
        materialize(&records).len(),
        expected.len(),
        "rows (seed printed above); log:\n{}",
        capture.log()
    );
    assert_eq!(materialize(&records), expected, "(seed printed above)");
    if exactly_once {
        // Each streamed change once: a change's LSN, operation and key name it.
        let mut changes = BTreeMap::new();
        for record in &records {
            let Some(value) = record.value.as_ref().filter(|v| v["op"] != "r") else {
                continue;
            };
            let id = (
                value["source"]["lsn"].as_u64(),
                value["op"].to_string(),
                record.key.to_string(),
            );
            *changes.entry(id).or_insert(0) += 1;
        }
        let doubled: Vec<_> = changes.iter().filter(|(_, n)| **n > 1).collect();
        assert!(doubled.is_empty(), "changes committed twice: {doubled:?}");
    }
    Ok(records)
}

/// Mixed changes to `table` (ids 1 to `rows` at first) until `stop`: updates
/// of ranges of ids, deletes, and inserts of new ids, one transaction every
/// few milliseconds.
async fn write_load(
    table: String,
    rows: i64,
    mut seed: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<()> {
    let client = pg_connect().await?;
    let mut next_id = rows + 1;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let id = 1 + (next_random(&mut seed) % rows as u64) as i64;
        let sql = match next_random(&mut seed) % 4 {
            0 => {
                next_id += 1;
                format!("INSERT INTO {table} VALUES ({next_id}, 1)")
            }
            1 => format!("DELETE FROM {table} WHERE id = {id}"),
            _ => format!(
                "UPDATE {table} SET v = v + 1 WHERE id BETWEEN {id} AND {}",
                id + 20
            ),
        };
        client.batch_execute(&sql).await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// What a PostgreSQL source lacks is named with its fix: a missing
/// publication capture may not create, a signal table outside the
/// publication, a role without REPLICATION, and a
/// server whose `wal_level` is not `logical` (the machine's own PostgreSQL on
/// 5432, left at its default `replica`).
#[tokio::test]
async fn validate_names_the_fix_for_what_a_postgres_source_lacks() -> Result<()> {
    let pg = PgCapture::new("id int PRIMARY KEY").await?;
    let (ok, out) = common::validate_connect(&pg.yaml());
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("publication {} exists", pg.publication)),
        "{out}"
    );
    assert!(out.contains("1 tables captured"), "{out}");

    // A signal table outside the publication: its requests would never arrive.
    let signals = format!("{}_signals", pg.table);
    pg.client
        .batch_execute(&format!("CREATE TABLE {signals} (id text PRIMARY KEY)"))
        .await?;
    let with_signals = pg.yaml().replace(
        "chunk_rows: 3",
        &format!("chunk_rows: 3, signal_table: public.{signals}"),
    );
    let (ok, out) = common::validate_connect(&with_signals);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            "ALTER PUBLICATION {} ADD TABLE \"public\".\"{signals}\"",
            pg.publication
        )),
        "{out}"
    );

    let missing = unique("pgc_missing");
    let (ok, out) = common::validate_connect(&pg.yaml().replace(&pg.publication, &missing));
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("CREATE PUBLICATION {missing} FOR TABLE")),
        "{out}"
    );

    let role = unique("pgc_role");
    pg.client
        .batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'secret-pw'"))
        .await?;
    let (ok, out) = common::validate_connect(
        &pg.yaml()
            .replace("user: tributary", &format!("user: {role}"))
            .replace("password: tributary", "password: secret-pw"),
    );
    pg.client
        .batch_execute(&format!("DROP ROLE {role}"))
        .await?;
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("ALTER ROLE {role} REPLICATION")),
        "{out}"
    );
    assert!(
        !out.contains("secret-pw"),
        "the password stays out of errors: {out}"
    );

    let system = pg
        .yaml()
        .replace(&format!("port: {}", pg_port()), "port: 5432")
        .replace("user: tributary, password: tributary", "user: postgres");
    let (system_ok, system_level) = {
        let (client, connection) = tokio_postgres::connect(
            "postgres://postgres@127.0.0.1:5432/postgres",
            tokio_postgres::NoTls,
        )
        .await?;
        tokio::spawn(connection);
        let level: String = client.query_one("SHOW wal_level", &[]).await?.get(0);
        (level != "logical", level)
    };
    assert!(
        system_ok,
        "the machine's PostgreSQL on 5432 runs with wal_level {system_level}: this check needs it at its default"
    );
    let (ok, out) = common::validate_connect(&system);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            "wal_level property must be 'logical' but is: '{system_level}'"
        )) && out.contains("ALTER SYSTEM SET wal_level = logical"),
        "{out}"
    );
    pg.drop().await
}

/// `REPLICA IDENTITY DEFAULT`: an update's `before` is null, a delete's holds
/// the key only, and a TOASTed value an update left alone is Debezium's
/// placeholder; `FULL`: `before` is the whole old row.
#[tokio::test]
async fn replica_identity_decides_before_images_and_unchanged_toast_is_a_placeholder() -> Result<()>
{
    let pg = PgCapture::new("id int PRIMARY KEY, name text, body text").await?;
    let t = &pg.table;
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} VALUES (1, 'a', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 2000) g)), \
               (2, 'two', 'small')"
        ))
        .await?;
    let capture = TributaryProcess::capture(&pg.yaml());
    // Streaming once the snapshot's rows are out.
    read_topic(&pg.topic(), Duration::from_secs(30), |records| {
        records.len() >= 2
    })
    .await;
    for statement in [
        "UPDATE {t} SET name = 'b' WHERE id = 1",
        "DELETE FROM {t} WHERE id = 2",
        "ALTER TABLE {t} REPLICA IDENTITY FULL",
        "INSERT INTO {t} VALUES (3, 'c', 'x')",
        "UPDATE {t} SET name = 'd' WHERE id = 3",
        "DELETE FROM {t} WHERE id = 3",
    ] {
        pg.client
            .batch_execute(&statement.replace("{t}", t))
            .await?;
    }
    let records = read_topic(&pg.topic(), Duration::from_secs(60), |records| {
        records
            .iter()
            .any(|r| r.key["id"] == 3 && r.value.as_ref().is_some_and(|v| v["op"] == "d"))
    })
    .await;
    let change = |id: i64, op: &str| -> Value {
        records
            .iter()
            .filter_map(|r| r.value.as_ref())
            .find(|v| v["op"] == op && (v["after"]["id"] == id || v["before"]["id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("no {op} of {id}; log:\n{}", capture.log()))
    };
    let update = change(1, "u");
    assert_eq!(update["before"], Value::Null, "{update}");
    assert_eq!(
        update["after"],
        json!({ "id": 1, "name": "b", "body": "__debezium_unavailable_value" })
    );
    let delete = change(2, "d");
    assert_eq!(
        delete["before"],
        json!({ "id": 2, "name": null, "body": null })
    );
    assert_eq!(
        change(3, "u")["before"],
        json!({ "id": 3, "name": "c", "body": "x" })
    );
    assert_eq!(
        change(3, "d")["before"],
        json!({ "id": 3, "name": "d", "body": "x" })
    );
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await
}

/// pgoutput sends no DDL, only a table's new shape (a Relation message) before
/// its next change: the schema history records it as the table's definition,
/// and the events after it carry the new column.
/// With `compat: debezium`, records carry Kafka Connect schemas as
/// Debezium's PostgreSQL connector declares them (its documented type
/// mappings): the envelope and key named after the topic, the PostgreSQL
/// source block, and one Connect type per column type; the payload is the
/// event a capture without schemas writes.
#[tokio::test]
async fn records_carry_debeziums_postgresql_connect_schemas_when_asked() -> Result<()> {
    let mut pg = PgCapture::new(
        "id int PRIMARY KEY, small int2, big int8, flag bool, price numeric(10,2), \
         u uuid, doc jsonb, day date, at timestamptz, tags text[]",
    )
    .await?;
    // Debezium's value modes, and Connect schemas on (the JsonConverter's default).
    pg.extra = "compat: debezium\n".into();
    let t = pg.table.clone();
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} VALUES (1, 2, 3, true, 4.50, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', \
             '{{\"k\": 1}}', '2024-02-29', '2024-02-29 12:00:00+00', ARRAY['x', 'y'])"
        ))
        .await?;
    let capture = TributaryProcess::capture(&pg.yaml());
    let records = read_raw(&pg.topic(), Duration::from_secs(30), |r| !r.is_empty()).await;
    let record = records
        .first()
        .unwrap_or_else(|| panic!("no record; log:\n{}", capture.log()));
    let value = record.json();
    let schema = &value["schema"];
    let prefix = format!("{}.public.{t}", pg.server_name);
    assert_eq!(schema["name"], format!("{prefix}.Envelope"), "{schema}");
    let key: Value = serde_json::from_slice(record.key.as_deref().expect("a key"))?;
    assert_eq!(key["schema"]["name"], format!("{prefix}.Key"), "{key}");
    assert_eq!(key["payload"], json!({ "id": 1 }));
    let field = schema_field;
    assert_eq!(
        field(schema, "source")["name"],
        "io.debezium.connector.postgresql.Source"
    );
    let after = field(schema, "after");
    assert_eq!(after["name"], format!("{prefix}.Value"));
    // (column, Connect type, semantic name), per Debezium's PostgreSQL type mappings.
    for (column, ty, name) in [
        ("id", "int32", None),
        ("small", "int16", None),
        ("big", "int64", None),
        ("flag", "boolean", None),
        (
            "price",
            "bytes",
            Some("org.apache.kafka.connect.data.Decimal"),
        ),
        ("u", "string", Some("io.debezium.data.Uuid")),
        ("doc", "string", Some("io.debezium.data.Json")),
        ("day", "int32", Some("io.debezium.time.Date")),
        ("at", "string", Some("io.debezium.time.ZonedTimestamp")),
        ("tags", "array", None),
    ] {
        let f = field(&after, column);
        assert_eq!(f["type"], ty, "{column}: {f}");
        assert_eq!(f["name"].as_str(), name, "{column}: {f}");
    }
    assert_eq!(field(&after, "price")["parameters"]["scale"], "2");
    assert_eq!(field(&after, "tags")["items"]["type"], "string");
    let columns: Vec<&str> = value["payload"]["after"]
        .as_object()
        .expect("an after row")
        .keys()
        .map(String::as_str)
        .collect();
    let declared: Vec<&str> = after["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(columns, declared);
    assert_eq!(value["payload"]["source"]["connector"], "postgresql");
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await
}

/// The field `name` of a Connect struct schema.
fn schema_field(block: &Value, name: &str) -> Value {
    block["fields"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["field"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no field {name} in {block}"))
}

/// Column defaults in the Connect schemas, as Debezium's PostgreSQL
/// connector declares them: a literal default is the value the server
/// writes into a row that leaves its column out (read back from the row's
/// own event); a function's value is Debezium's stand-in for the type (its
/// zero, the epoch), as a row holding it is written.
#[tokio::test]
async fn connect_schemas_declare_column_defaults_as_debezium_does() -> Result<()> {
    let literals = [
        ("n", "int DEFAULT -5"),
        ("big", "int8 DEFAULT 9223372036854775807"),
        ("price", "numeric(10,2) DEFAULT 1.5"),
        ("ratio", "float8 DEFAULT 0.25"),
        ("name", "varchar(20) DEFAULT 'it''s'"),
        ("flag", "bool DEFAULT true"),
        ("day", "date DEFAULT '2024-02-29'"),
        ("u", "uuid DEFAULT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
        ("doc", "jsonb DEFAULT '{\"k\": 1}'"),
        ("tags", "text[] DEFAULT '{a,b}'"),
    ];
    // (column, definition, Debezium's stand-in for a function's value)
    let generated = [
        (
            "at",
            "timestamptz DEFAULT now()",
            "'1970-01-01 00:00:00+00'",
        ),
        ("seq", "serial", "0"),
        ("cost", "numeric(6,3) DEFAULT random()", "0"),
    ];
    let columns: Vec<String> = std::iter::once("id int PRIMARY KEY".to_owned())
        .chain(literals.iter().map(|(n, d)| format!("{n} {d}")))
        .chain(generated.iter().map(|(n, d, _)| format!("{n} {d}")))
        .chain(["bare text".to_owned()])
        .collect();
    let mut pg = PgCapture::new(&columns.join(", ")).await?;
    pg.extra = "compat: debezium\n".into();
    let t = pg.table.clone();
    // Row 1 takes every default; row 2 holds the stand-ins.
    let (names, stand_ins): (Vec<&str>, Vec<&str>) =
        generated.iter().map(|(n, _, v)| (*n, *v)).unzip();
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} (id) VALUES (1); INSERT INTO {t} (id, {}) VALUES (2, {})",
            names.join(", "),
            stand_ins.join(", ")
        ))
        .await?;
    let capture = TributaryProcess::capture(&pg.yaml());
    let records = read_raw(&pg.topic(), Duration::from_secs(30), |r| r.len() >= 2).await;
    let after_of = |id: i64| -> Value {
        records
            .iter()
            .map(|r| r.json())
            .find(|v| v["payload"]["after"]["id"] == id)
            .unwrap_or_else(|| panic!("no row {id}; log:\n{}", capture.log()))
    };
    let value = after_of(1);
    let after = schema_field(&value["schema"], "after");
    let defaults = &value["payload"]["after"];
    for (column, _) in literals {
        let declared = schema_field(&after, column);
        assert_eq!(
            declared["default"], defaults[column],
            "{column}: {declared}"
        );
    }
    let stand_ins = &after_of(2)["payload"]["after"];
    for column in names {
        let declared = schema_field(&after, column);
        assert_eq!(
            declared["default"], stand_ins[column],
            "{column}: {declared}"
        );
    }
    let bare = schema_field(&after, "bare");
    assert!(bare.get("default").is_none(), "{bare}");
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await
}

/// A local table with `fill_unavailable_values` keeps rows whole under
/// `REPLICA IDENTITY DEFAULT`: the TOASTed values updates leave out are
/// filled from the row it holds (also when the earlier change is in the same
/// batch), and equal the server's `SELECT`, while the events keep Debezium's
/// placeholder.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_that_asks_fills_unchanged_toast_values_from_the_row_it_holds() -> Result<()> {
    let pg = PgCapture::new("id int PRIMARY KEY, name text, body text").await?;
    let t = &pg.table;
    // md5 text does not compress: each body is stored out of line (TOASTed).
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} SELECT i, 'row ' || i, \
               (SELECT string_agg(md5(i::text || g::text), '') FROM generate_series(1, 300) g) \
             FROM generate_series(1, 4) i"
        ))
        .await?;
    let capture = TributaryProcess::capture(&pg.yaml());
    let data = tempfile::tempdir()?;
    let grpc = common::free_port();
    let metrics = common::free_port();
    let yaml = format!(
        "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\n\
         grpc: {{ listen: '127.0.0.1:{grpc}' }}\nmetrics: {{ listen: '127.0.0.1:{metrics}' }}\n\
         tables:\n  - {{ name: filled, topic: '{topic}', mode: global, fill_unavailable_values: true }}\n",
        data.path().display(),
        common::brokers(),
        topic = pg.topic()
    );
    let tables = TributaryProcess::start(&["tables", "run"], &common::write_config(&yaml), &[]);
    // Streamed once the snapshot's rows are out: each update below is an event.
    read_topic(&pg.topic(), Duration::from_secs(30), |records| {
        records.len() >= 4
    })
    .await;
    for statement in [
        "UPDATE {t} SET name = 'once' WHERE id = 1",
        "UPDATE {t} SET name = 'twice' WHERE id IN (1, 2)",
        "UPDATE {t} SET name = 'thrice' WHERE id IN (1, 2, 3)",
    ] {
        pg.client
            .batch_execute(&statement.replace("{t}", t))
            .await?;
    }
    let rows = pg
        .client
        .query(&format!("SELECT id::int8, name, body FROM {t}"), &[])
        .await?;
    let expected: BTreeMap<i64, Value> = rows
        .iter()
        .map(|r| {
            let (id, name, body): (i64, String, String) = (r.get(0), r.get(1), r.get(2));
            (id, json!({ "id": id, "name": name, "body": body }))
        })
        .collect();
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{grpc}"))?.connect_lazy();
    let mut client = LookupClient::new(channel);
    let mut lookup = async |table: &str, id: i64| -> Option<Value> {
        let response = client
            .get(v1::GetRequest {
                table: table.into(),
                key: Some(from_json(&json!(id))),
                min_position: None,
                as_of_us: None,
            })
            .await
            .ok()?
            .into_inner();
        response.row.map(|r| to_json(&r).expect("a row"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut filled = BTreeMap::new();
    while filled != expected {
        assert!(
            Instant::now() < deadline,
            "the filled table holds {filled:?}; log:\n{}\ncapture:\n{}",
            tables.log(),
            capture.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        filled.clear();
        for id in expected.keys() {
            if let Some(row) = lookup("filled", *id).await {
                filled.insert(*id, row);
            }
        }
    }
    // The events themselves carry Debezium's placeholder.
    let records = read_topic(&pg.topic(), Duration::from_secs(10), |records| {
        records.len() >= 10
    })
    .await;
    let last_of_3 = records
        .iter()
        .rev()
        .find(|r| r.key["id"] == 3)
        .and_then(|r| r.value.clone())
        .expect("row 3's update");
    assert_eq!(last_of_3["after"]["name"], "thrice", "{last_of_3}");
    assert_eq!(
        last_of_3["after"]["body"], "__debezium_unavailable_value",
        "{last_of_3}"
    );
    let (_, body) = common::try_http_get(metrics, "/metrics")
        .await
        .expect("metrics");
    assert_eq!(
        common::metric_sum(&body, "tributary_table_unavailable_values_filled_total"),
        6.0,
        "{body}"
    );
    for process in [tables, capture] {
        let (clean, log) = process.terminate(Duration::from_secs(30));
        assert!(clean, "{log}");
    }
    pg.drop().await
}

/// Read your own write on PostgreSQL: a row updated just before is seen by a
/// lookup that names the writer's transaction (`pg_current_xact_id()`) and
/// the WAL position after its commit (`pg_current_wal_lsn()`), while other
/// rows are written all the time (the position alone suffices) and when the
/// table is quiet (only the transaction id can show it), and for a
/// transaction the table applies in many batches (it counts once whole); a
/// position nothing reached waits until the deadline and says how far the
/// partition got.
#[tokio::test(flavor = "multi_thread")]
async fn a_lookup_waits_for_the_writers_postgresql_transaction() -> Result<()> {
    let mut pg = PgCapture::new("id int PRIMARY KEY, qty int").await?;
    pg.extra = "topics: { partitions: 3 }\n".into();
    let t = pg.table.clone();
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {t} SELECT i, 0 FROM generate_series(1, 400) i"
        ))
        .await?;
    let capture = TributaryProcess::capture(&pg.yaml());
    let data = tempfile::tempdir()?;
    let grpc = common::free_port();
    let yaml = format!(
        "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\n\
         grpc: {{ listen: '127.0.0.1:{grpc}' }}\n\
         batch_max_records: 1\n\
         tables:\n  - {{ name: items, topic: '{topic}' }}\n",
        data.path().display(),
        common::brokers(),
        topic = pg.topic()
    );
    let tables = TributaryProcess::start(&["tables", "run"], &common::write_config(&yaml), &[]);
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{grpc}"))?.connect_lazy();
    let mut client = LookupClient::new(channel);
    let get = |id: i64, position: Option<v1::WalPosition>| {
        let mut request = tonic::Request::new(v1::GetRequest {
            table: "items".into(),
            key: Some(from_json(&json!(id))),
            min_position: position.map(|wal| v1::Position {
                kind: Some(v1::position::Kind::Wal(wal)),
            }),
            as_of_us: None,
        });
        request.set_timeout(Duration::from_secs(10));
        request
    };
    let qty_of = |response: v1::GetResponse| {
        response
            .row
            .map(|r| to_json(&r).expect("a row")["qty"].clone())
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while client
        .get(get(400, None))
        .await
        .ok()
        .and_then(|r| qty_of(r.into_inner()))
        != Some(json!(0))
    {
        assert!(
            Instant::now() < deadline,
            "the snapshot never arrived: {}",
            tables.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Another writer keeps every partition busy with rows 301..=400.
    let stop = tokio_util::sync::CancellationToken::new();
    let busy = {
        let (stop, t) = (stop.clone(), t.clone());
        let other = pg_connect().await?;
        tokio::spawn(async move {
            let mut id = 300;
            while !stop.is_cancelled() {
                id = if id == 400 { 301 } else { id + 1 };
                other
                    .execute(
                        &format!("UPDATE {t} SET qty = qty + 1 WHERE id = {id}"),
                        &[],
                    )
                    .await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            anyhow::Ok(())
        })
    };
    // Runs `statements` in one transaction; returns its position.
    let mut write_all = async |statements: &str| -> Result<v1::WalPosition> {
        let txn = pg.client.transaction().await?;
        txn.batch_execute(statements).await?;
        let xid: String = txn
            .query_one("SELECT pg_current_xact_id()::text", &[])
            .await?
            .get(0);
        txn.commit().await?;
        let lsn: String = pg
            .client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await?
            .get(0);
        Ok(v1::WalPosition {
            lsn,
            xid: Some(xid.parse()?),
        })
    };
    let mut write = async |id: i64, qty: i64| {
        write_all(&format!("UPDATE {t} SET qty = {qty} WHERE id = {id}")).await
    };
    let mut stale_without_position = 0;
    for i in 0..20i64 {
        let (id, qty) = (1 + i * 13, 1000 + i);
        let mut position = write(id, qty).await?;
        if i % 2 == 1 {
            // Later changes of the busy writer show it.
            position.xid = None;
        }
        let plain = qty_of(client.get(get(id, None)).await?.into_inner());
        stale_without_position += i32::from(plain != Some(json!(qty)));
        let read = client
            .get(get(id, Some(position.clone())))
            .await?
            .into_inner();
        assert_eq!(
            qty_of(read),
            Some(json!(qty)),
            "the read after {position:?} saw the old row"
        );
    }
    println!(
        "reads without a position that missed the write just made: {stale_without_position}/20"
    );
    stop.cancel();
    busy.await??;
    // Quiet: nothing will follow this write, only its transaction id shows it.
    let position = write(7, 7777).await?;
    let read = client
        .get(get(7, Some(position.clone())))
        .await?
        .into_inner();
    assert_eq!(
        qty_of(read),
        Some(json!(7777)),
        "the read after {position:?} saw the old row"
    );
    // The same through the command line.
    let write_again = write(7, 7778).await?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["lookup", "--endpoint", &format!("http://127.0.0.1:{grpc}")])
        .args(["--lsn", &write_again.lsn])
        .args(["--xid", &write_again.xid.expect("an xid").to_string()])
        .args(["items", "7"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(printed["qty"], 7778, "{printed}");
    // One transaction of 300 changes, applied one record per batch
    // (batch_max_records: 1): a read of its last row waits for all of it in
    // the row's partition, not for its first change there.
    // (Checked to fail, in most rounds, when a batch cut inside a transaction
    // counts it as whole.)
    let mut split = None;
    for round in 0..5 {
        let position = write_all(&format!(
            "UPDATE {t} SET qty = {round} WHERE id BETWEEN 1 AND 299; \
             UPDATE {t} SET qty = {round} + 100 WHERE id = 300;"
        ))
        .await?;
        for (id, qty) in [(300, round + 100), (1, round)] {
            let read = client
                .get(get(id, Some(position.clone())))
                .await?
                .into_inner();
            assert_eq!(
                qty_of(read),
                Some(json!(qty)),
                "row {id} after {position:?}"
            );
        }
        split = Some(position);
    }
    let split = split.expect("five rounds");
    // A position nothing reached waits until the deadline and says how far it got.
    let mut request = get(
        7,
        Some(v1::WalPosition {
            lsn: "FFFFFFFF/0".into(),
            xid: None,
        }),
    );
    request.set_timeout(Duration::from_millis(300));
    let err = client.get(request).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    let message = err.message();
    assert!(
        message.contains("not yet a change at LSN FFFFFFFF/0"),
        "{message}"
    );
    let described = client
        .describe_table(v1::DescribeTableRequest {
            table: "items".into(),
        })
        .await?
        .into_inner();
    let applied: Vec<Lsn> = described
        .partitions
        .iter()
        .map(|p| p.applied_lsn.parse())
        .collect::<Result<_, _>>()?;
    let last: Lsn = split.lsn.parse()?;
    assert!(applied.iter().all(|lsn| *lsn > Lsn(0)), "{applied:?}");
    assert!(
        applied
            .iter()
            .any(|lsn| message.contains(&format!("(LSN {lsn})"))),
        "{message}"
    );
    assert!(
        applied.iter().all(|lsn| *lsn < last),
        "{applied:?} vs {last}"
    );
    for process in [tables, capture] {
        let (clean, log) = process.terminate(Duration::from_secs(30));
        assert!(clean, "{log}");
    }
    pg.drop().await
}

#[tokio::test]
async fn a_new_shape_is_recorded_in_the_schema_history_and_carried_by_later_events() -> Result<()> {
    let pg = PgCapture::new("id int PRIMARY KEY, name text").await?;
    let t = &pg.table;
    pg.client
        .batch_execute(&format!("INSERT INTO {t} VALUES (1, 'a')"))
        .await?;
    let capture = TributaryProcess::capture(&pg.yaml());
    read_topic(&pg.topic(), Duration::from_secs(30), |records| {
        !records.is_empty()
    })
    .await;
    for statement in [
        "INSERT INTO {t} VALUES (2, 'b')",
        "ALTER TABLE {t} ADD COLUMN price numeric(10,2) NOT NULL DEFAULT 0",
        "INSERT INTO {t} VALUES (3, 'c', 1.5)",
    ] {
        pg.client
            .batch_execute(&statement.replace("{t}", t))
            .await?;
    }
    let records = read_topic(&pg.topic(), Duration::from_secs(30), |records| {
        records.iter().any(|r| r.key["id"] == 3)
    })
    .await;
    let third = records
        .iter()
        .find(|r| r.key["id"] == 3)
        .and_then(|r| r.value.clone())
        .expect("the third row");
    assert_eq!(
        third["after"],
        json!({ "id": 3, "name": "c", "price": "1.50" })
    );
    let history = read_raw(
        &format!("{}.schema-history", pg.server_name),
        Duration::from_secs(10),
        |records| records.len() >= 2,
    )
    .await;
    let ddls: Vec<String> = history
        .iter()
        .map(|r| r.json()["ddl"].as_str().unwrap_or_default().to_owned())
        .collect();
    let expected = format!(
        "CREATE TABLE \"public\".\"{t}\" (\"id\" integer NOT NULL, \"name\" text, \
         \"price\" numeric(10,2) NOT NULL, PRIMARY KEY (\"id\"))"
    );
    assert_eq!(
        ddls.last(),
        Some(&expected),
        "{ddls:#?}; log:\n{}",
        capture.log()
    );
    assert_eq!(
        ddls.len(),
        2,
        "the first shape, then the new one: {ddls:#?}"
    );
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await
}
