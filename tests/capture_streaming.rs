//! End-to-end tests of streaming capture against the local stack's MariaDB and broker.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use serde_json::{Value as Json, json};

const WAIT: Duration = Duration::from_secs(60);

/// How a column's expected JSON is built from the SQL expression's text.
#[derive(Clone, Copy)]
enum Expect {
    Int,
    Float,
    Str,
    Bool,
}

/// Every type family: (column, definition, SQL expression computing the expected
/// Debezium value from the stored row, kind of that value).
const TYPES: &[(&str, &str, &str, Expect)] = &[
    ("ti", "TINYINT", "ti", Expect::Int),
    ("tiu", "TINYINT UNSIGNED", "tiu", Expect::Int),
    ("si", "SMALLINT", "si", Expect::Int),
    ("siu", "SMALLINT UNSIGNED", "siu", Expect::Int),
    ("mi", "MEDIUMINT", "mi", Expect::Int),
    ("miu", "MEDIUMINT UNSIGNED", "miu", Expect::Int),
    ("i", "INT", "i", Expect::Int),
    ("iu", "INT UNSIGNED", "iu", Expect::Int),
    ("bi", "BIGINT", "bi", Expect::Int),
    ("biu", "BIGINT UNSIGNED", "biu", Expect::Int),
    ("dec1", "DECIMAL(20,6)", "CAST(dec1 AS CHAR)", Expect::Str),
    ("dec0", "DECIMAL(5,0)", "CAST(dec0 AS CHAR)", Expect::Str),
    ("f", "FLOAT", "f", Expect::Float),
    ("d", "DOUBLE", "d", Expect::Float),
    ("dt", "DATE", "DATEDIFF(dt, '1970-01-01')", Expect::Int),
    (
        "tm",
        "TIME(6)",
        "CAST(ROUND(TIME_TO_SEC(tm) * 1000000) AS SIGNED)",
        Expect::Int,
    ),
    ("tm0", "TIME", "TIME_TO_SEC(tm0) * 1000000", Expect::Int),
    (
        "dt0",
        "DATETIME",
        "TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', dt0) * 1000",
        Expect::Int,
    ),
    (
        "dt3",
        "DATETIME(3)",
        "FLOOR(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', dt3) / 1000)",
        Expect::Int,
    ),
    (
        "dt6",
        "DATETIME(6)",
        "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', dt6)",
        Expect::Int,
    ),
    (
        "ts",
        "TIMESTAMP(3) NULL",
        "CONCAT(DATE_FORMAT(ts, '%Y-%m-%dT%H:%i:%s.'), LEFT(DATE_FORMAT(ts, '%f'), 3), 'Z')",
        Expect::Str,
    ),
    (
        "ts0",
        "TIMESTAMP NULL",
        "DATE_FORMAT(ts0, '%Y-%m-%dT%H:%i:%sZ')",
        Expect::Str,
    ),
    ("yr", "YEAR", "yr + 0", Expect::Int),
    ("c", "CHAR(10)", "c", Expect::Str),
    ("vc", "VARCHAR(100)", "vc", Expect::Str),
    ("tx", "TEXT", "tx", Expect::Str),
    (
        "l1",
        "VARCHAR(20) CHARACTER SET latin1",
        "CONVERT(l1 USING utf8mb4)",
        Expect::Str,
    ),
    ("bin", "BINARY(4)", "TO_BASE64(bin)", Expect::Str),
    ("vb", "VARBINARY(10)", "TO_BASE64(vb)", Expect::Str),
    ("bl", "BLOB", "TO_BASE64(bl)", Expect::Str),
    (
        "en",
        "ENUM('small','medium','large')",
        "CAST(en AS CHAR)",
        Expect::Str,
    ),
    ("st", "SET('a','b','c')", "CAST(st AS CHAR)", Expect::Str),
    ("b1", "BIT(1)", "b1 + 0", Expect::Bool),
    (
        "b12",
        "BIT(12)",
        "TO_BASE64(UNHEX(CONCAT(LPAD(HEX((b12 + 0) & 255), 2, '0'), LPAD(HEX((b12 + 0) >> 8), 2, '0'))))",
        Expect::Str,
    ),
    ("js", "JSON", "js", Expect::Str),
    ("nul", "INT NULL", "nul", Expect::Int),
];

const TYPE_ROWS: &[&str] = &[
    "(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, \
      18446744073709551615, '-12345678901234.123456', 99999, 1.5, -2.25e100, '2024-02-29', '-838:59:59.000000', \
      '838:59:59', '2024-02-29 23:59:59', '1969-12-31 23:59:59.999', '2038-01-19 03:14:08.123456', \
      '2024-01-02 03:04:05.678', '2001-09-09 01:46:40', 2155, 'abc', 'héllo 😀 wörld', REPEAT('long text ', 300), 'café €', \
      X'00FF1020', X'DEADBEEF', X'000102', 'large', 'a,c', b'1', b'101000000011', '{\"a\": [1, 2]}', NULL)",
    "(2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0, '0.000001', -5, 1.1, 0, \
      '1970-01-01', '-00:00:01.500000', '00:00:00', '1970-01-01 00:00:00', '2000-06-15 12:00:00.5', \
      '1900-01-01 00:00:00.000001', '1970-01-01 00:00:01.000', '2038-01-19 03:14:07', 1901, '', '', '', '', \
      X'00000000', X'', X'', 'small', '', b'0', b'000000000001', '[]', 42)",
];

fn expected_json(kind: Expect, text: Option<String>) -> Json {
    match (kind, text) {
        (_, None) => Json::Null,
        (Expect::Int, Some(t)) => {
            Json::Number(t.parse().unwrap_or_else(|_| panic!("{t} is an integer")))
        }
        (Expect::Float, Some(t)) => json!(t.parse::<f64>().unwrap()),
        (Expect::Str, Some(t)) => Json::String(t),
        (Expect::Bool, Some(t)) => Json::Bool(t == "1"),
    }
}

/// Creates the all-types table in a fresh database.
async fn types_table(conn: &mut mysql_async::Conn) -> String {
    let db = create_db(conn, "types").await;
    let columns: Vec<String> = TYPES
        .iter()
        .map(|(c, def, ..)| format!("`{c}` {def}"))
        .collect();
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (id INT PRIMARY KEY, {}) DEFAULT CHARSET=utf8mb4",
        columns.join(", ")
    ))
    .await
    .unwrap();
    db
}

/// Checks each row's event (of kind `op`) against values the database computes from the stored rows.
async fn check_type_events(conn: &mut mysql_async::Conn, db: &str, records: &[Record], op: &str) {
    let exprs: Vec<String> = TYPES
        .iter()
        .map(|(_, _, e, _)| format!("CAST({e} AS CHAR)"))
        .collect();
    let rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SELECT id, {} FROM `{db}`.t ORDER BY id",
            exprs.join(", ")
        ))
        .await
        .unwrap();
    assert_eq!(records.len(), rows.len(), "one event per row");
    for row in rows {
        let id: i64 = row.get(0).unwrap();
        let record = records
            .iter()
            .find(|r| r.key == json!({ "id": id }))
            .expect("an event per row");
        let value = record.value.as_ref().unwrap();
        assert_eq!(value["op"], op);
        for (i, (column, def, _, kind)) in TYPES.iter().enumerate() {
            let text: Option<String> = row.get(i + 1).unwrap();
            assert_eq!(
                value["after"][*column],
                expected_json(*kind, text),
                "row {id}, column {column} ({def})"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_type_family_round_trips() {
    let mut conn = root_conn().await;
    let db = types_table(&mut conn).await;
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let _capture = TributaryProcess::capture(&setup.yaml());
    conn.query_drop(format!(
        "INSERT INTO `{db}`.t VALUES {}",
        TYPE_ROWS.join(", ")
    ))
    .await
    .unwrap();
    let records = read_topic(&setup.topic("t"), WAIT, |r| r.len() >= 2).await;
    check_type_events(&mut conn, &db, &records, "c").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_snapshot_maps_every_type_family_the_same_way() {
    let mut conn = root_conn().await;
    let db = types_table(&mut conn).await;
    conn.query_drop(format!(
        "INSERT INTO `{db}`.t VALUES {}",
        TYPE_ROWS.join(", ")
    ))
    .await
    .unwrap();
    let setup = CaptureSetup::new(&db, "").with_snapshot(1);
    let _capture = TributaryProcess::capture(&setup.yaml());
    let records = read_topic(&setup.topic("t"), WAIT, |r| r.len() >= 2).await;
    check_type_events(&mut conn, &db, &records, "r").await;
    // In the order the snapshot read them (by primary key; the records may
    // sit in different partitions).
    let mut markers: Vec<(i64, &str)> = records
        .iter()
        .map(|r| {
            let value = r.value.as_ref().unwrap();
            let id = value["after"]["id"].as_i64().unwrap();
            (id, value["source"]["snapshot"].as_str().unwrap())
        })
        .collect();
    markers.sort_unstable();
    let markers: Vec<&str> = markers.into_iter().map(|(_, m)| m).collect();
    // One table of two rows: Debezium marks them `first` and `last`.
    assert_eq!(markers, ["first", "last"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_then_stream_under_concurrent_writes_equals_the_table() {
    const ROWS: i64 = 20_000;
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "seam").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)"))
        .await
        .unwrap();
    for start in (1..=ROWS).step_by(5000) {
        let values: Vec<String> = (start..start + 5000)
            .map(|id| format!("({id}, 0)"))
            .collect();
        conn.query_drop(format!("INSERT INTO `{db}`.t VALUES {}", values.join(",")))
            .await
            .unwrap();
    }
    let setup = CaptureSetup::new(&db, "").with_snapshot(500);
    let capture = TributaryProcess::capture(&setup.yaml());
    // Writes while the snapshot runs and after it: updates, deletes, inserts.
    for round in 1..=40i64 {
        conn.query_drop(format!(
            "UPDATE `{db}`.t SET v = {round} WHERE id % 40 = {}",
            round % 40
        ))
        .await
        .unwrap();
        conn.query_drop(format!("DELETE FROM `{db}`.t WHERE id = {}", round * 401))
            .await
            .unwrap();
        conn.query_drop(format!(
            "INSERT INTO `{db}`.t VALUES ({}, {round})",
            ROWS + round
        ))
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let rows: Vec<(i64, i64)> = conn
        .query(format!("SELECT id, v FROM `{db}`.t"))
        .await
        .unwrap();
    let expected: BTreeMap<i64, Json> = rows
        .into_iter()
        .map(|(id, v)| (id, json!({ "id": id, "v": v })))
        .collect();
    let target = expected.clone();
    let records = read_topic(&setup.topic("t"), Duration::from_secs(120), move |r| {
        replay_map(r) == target
    })
    .await;
    let state = replay_map(&records);
    assert_eq!(state.len(), expected.len(), "log:\n{}", capture.log());
    for (id, row) in &expected {
        assert_eq!(state.get(id), Some(row), "row {id}");
    }
    // Nothing doubled across the seam: streamed events all come after the snapshot's position.
    let snapshot_at = records
        .iter()
        .filter_map(|r| r.value.as_ref())
        .find(|v| v["op"] == "r")
        .map(|v| {
            (
                v["source"]["file"].as_str().unwrap().to_owned(),
                v["source"]["pos"].as_u64().unwrap(),
            )
        })
        .expect("snapshot events");
    for v in events(&records).into_iter().filter(|v| v["op"] != "r") {
        let at = (
            v["source"]["file"].as_str().unwrap().to_owned(),
            v["source"]["pos"].as_u64().unwrap(),
        );
        assert!(
            at >= snapshot_at,
            "streamed event at {at:?} precedes the snapshot at {snapshot_at:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn inserts_updates_deletes_and_tombstones() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "ops").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.users (id INT PRIMARY KEY, name VARCHAR(50), score INT)"
    ))
    .await
    .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let _capture = TributaryProcess::capture(&setup.yaml());
    for sql in [
        "INSERT INTO `DB`.users VALUES (1, 'ann', 10)",
        "UPDATE `DB`.users SET score = 11 WHERE id = 1",
        "INSERT INTO `DB`.users VALUES (2, 'bob', 20)",
        "DELETE FROM `DB`.users WHERE id = 2",
        "UPDATE `DB`.users SET id = 3 WHERE id = 1",
    ] {
        conn.query_drop(sql.replace("DB", &db)).await.unwrap();
    }
    // c, u, c, d + tombstone, and the key change: d + tombstone + c.
    let records = read_topic(&setup.topic("users"), WAIT, |r| r.len() >= 8).await;
    assert_eq!(records.len(), 8, "{records:#?}");
    let by_key = |id: i64| -> Vec<&Record> {
        let mut rs: Vec<&Record> = records
            .iter()
            .filter(|r| r.key == json!({ "id": id }))
            .collect();
        rs.sort_by_key(|r| r.offset);
        rs
    };
    let ops = |rs: &[&Record]| -> Vec<String> {
        rs.iter()
            .map(|r| {
                r.value
                    .as_ref()
                    .map_or("tombstone".into(), |v| v["op"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    let one = by_key(1);
    assert_eq!(ops(&one), ["c", "u", "d", "tombstone"]);
    let update = one[1].value.as_ref().unwrap();
    assert_eq!(
        update["before"],
        json!({ "id": 1, "name": "ann", "score": 10 })
    );
    assert_eq!(
        update["after"],
        json!({ "id": 1, "name": "ann", "score": 11 })
    );
    assert_eq!(update["source"]["db"], db.as_str());
    assert_eq!(update["source"]["table"], "users");
    assert_eq!(update["source"]["name"], setup.server_name.as_str());
    assert!(
        update["source"]["gtid"]
            .as_str()
            .unwrap()
            .starts_with("0-1-")
    );
    assert!(update["source"]["pos"].as_u64().unwrap() > 0);
    let two = by_key(2);
    assert_eq!(ops(&two), ["c", "d", "tombstone"]);
    let delete = two[1].value.as_ref().unwrap();
    assert_eq!(
        delete["before"],
        json!({ "id": 2, "name": "bob", "score": 20 })
    );
    assert_eq!(delete["after"], Json::Null);
    assert_eq!(ops(&by_key(3)), ["c"]);
    // Every record of a key is in one partition: the one Kafka's murmur2 picks.
    for r in &records {
        let key = serde_json::to_vec(&r.key).unwrap();
        assert_eq!(
            r.partition,
            tributary_proto::partition::partition_for_key(&key, 3),
            "{r:?}"
        );
    }

    let (_, metrics) = http_get(setup.metrics_port, "/metrics").await;
    let line = format!("tributary_capture_events_total{{table=\"{db}.users\"}} 6");
    assert!(metrics.contains(&line), "expected `{line}` in:\n{metrics}");
}

/// `events:` takes Debezium's options under their names: without tombstones,
/// transaction blocks or schema changes, a delete is one record, every
/// `transaction` is null and no schema history is written.
#[tokio::test(flavor = "multi_thread")]
async fn debeziums_event_options_drop_tombstones_transaction_blocks_and_schema_changes() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "evopts").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)"))
        .await
        .unwrap();
    let mut setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    setup.extra = "events: { tombstones.on.delete: false, provide.transaction.metadata: false, \
                   include.schema.changes: false }\n"
        .into();
    let capture = TributaryProcess::capture(&setup.yaml());
    for sql in [
        "INSERT INTO `DB`.t VALUES (1, 10)",
        "DELETE FROM `DB`.t WHERE id = 1",
        "ALTER TABLE `DB`.t ADD COLUMN w INT",
        "INSERT INTO `DB`.t VALUES (2, 20, 200)",
    ] {
        conn.query_drop(sql.replace("DB", &db)).await.unwrap();
    }
    let topic = setup.topic("t");
    read_topic(&topic, WAIT, |r| {
        r.iter().any(|r| r.key == json!({ "id": 2 }))
    })
    .await;
    // Everything written before the last row is in the topic by now (a
    // tombstone would follow its delete at once): read it all again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let records = read_topic(&topic, Duration::from_secs(3), |_| false).await;
    let ops = |id: i64| -> Vec<String> {
        records
            .iter()
            .filter(|r| r.key == json!({ "id": id }))
            .map(|r| {
                r.value
                    .as_ref()
                    .map_or("tombstone".into(), |v| v["op"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    assert_eq!(ops(1), ["c", "d"], "no tombstone; log:\n{}", capture.log());
    assert_eq!(ops(2), ["c"]);
    for event in events(&records) {
        assert!(event.as_object().unwrap().contains_key("transaction"));
        assert_eq!(event["transaction"], Json::Null, "{event}");
    }
    let last = events(&records)
        .into_iter()
        .find(|e| e["after"]["id"] == 2)
        .unwrap();
    assert_eq!(last["after"], json!({ "id": 2, "v": 20, "w": 200 }));
    let history = format!("{}.schema-history", setup.server_name);
    let recorded = read_raw(&history, Duration::from_secs(2), |_| false).await;
    assert!(
        recorded.is_empty(),
        "schema changes were recorded: {recorded:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_keeps_its_id_and_order() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "trx").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.a (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    conn.query_drop(format!("CREATE TABLE `{db}`.b (id INT PRIMARY KEY, v INT)"))
        .await
        .unwrap();
    conn.query_drop(format!("INSERT INTO `{db}`.b VALUES (1, 0)"))
        .await
        .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let _capture = TributaryProcess::capture(&setup.yaml());
    conn.query_drop(format!(
        "BEGIN; INSERT INTO `{db}`.a VALUES (1), (2), (3); UPDATE `{db}`.b SET v = 1 WHERE id = 1; COMMIT"
    ))
    .await
    .unwrap();
    let gtid = gtid_now(&mut conn).await;
    let a = read_topic(&setup.topic("a"), WAIT, |r| r.len() >= 3).await;
    let b = read_topic(&setup.topic("b"), WAIT, |r| !r.is_empty()).await;
    let mut all: Vec<&Json> = events(&a);
    all.extend(events(&b));
    assert_eq!(all.len(), 4);
    let mut orders: Vec<(u64, u64, String)> = all
        .iter()
        .map(|e| {
            assert_eq!(
                e["transaction"]["id"],
                gtid.as_str(),
                "the transaction id is its GTID"
            );
            (
                e["transaction"]["total_order"].as_u64().unwrap(),
                e["transaction"]["data_collection_order"].as_u64().unwrap(),
                e["source"]["table"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    orders.sort();
    assert_eq!(
        orders,
        [
            (1, 1, "a".into()),
            (2, 2, "a".into()),
            (3, 3, "a".into()),
            (4, 1, "b".into())
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn include_and_exclude_patterns() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "filter").await;
    for t in ["public", "secret", "audit_1"] {
        conn.query_drop(format!("CREATE TABLE `{db}`.{t} (id INT PRIMARY KEY)"))
            .await
            .unwrap();
    }
    let mut setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    setup.extra = format!("exclude: {{ tables: ['{db}\\.secret', '{db}\\.audit_.*'] }}\n");
    let _capture = TributaryProcess::capture(&setup.yaml());
    for t in ["secret", "audit_1", "public"] {
        conn.query_drop(format!("INSERT INTO `{db}`.{t} VALUES (1)"))
            .await
            .unwrap();
    }
    let public = read_topic(&setup.topic("public"), WAIT, |r| !r.is_empty()).await;
    assert_eq!(public.len(), 1);
    // The excluded tables were changed first; by now their events would have arrived.
    for t in ["secret", "audit_1"] {
        let excluded = read_topic(&setup.topic(t), Duration::from_secs(2), |r| !r.is_empty()).await;
        assert!(excluded.is_empty(), "{t} is excluded but has {excluded:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_a_load_skips_nothing() {
    const ROWS: i64 = 50_000;
    const BATCH: i64 = 250;
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "crash").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.items (id INT PRIMARY KEY, qty INT, note VARCHAR(40))"
    ))
    .await
    .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let mut capture = TributaryProcess::capture(&setup.yaml());

    // The load: inserts in batches, with updates and deletes of earlier rows along the way.
    let load_db = db.clone();
    let loader = tokio::spawn(async move {
        let mut conn = root_conn().await;
        for start in (1..=ROWS).step_by(BATCH as usize) {
            let values: Vec<String> = (start..start + BATCH)
                .map(|id| format!("({id}, {id}, 'n{id}')"))
                .collect();
            conn.query_drop(format!(
                "INSERT INTO `{load_db}`.items VALUES {}",
                values.join(",")
            ))
            .await
            .unwrap();
            conn.query_drop(format!("UPDATE `{load_db}`.items SET qty = qty + 1 WHERE id BETWEEN {start} AND {} AND id % 10 = 0", start + BATCH - 1)).await.unwrap();
            conn.query_drop(format!(
                "DELETE FROM `{load_db}`.items WHERE id BETWEEN {start} AND {} AND id % 25 = 0",
                start + BATCH - 1
            ))
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });

    let topic = setup.topic("items");
    let seen = read_topic(&topic, WAIT, |r| r.len() >= 5_000).await;
    assert!(seen.len() >= 5_000, "capture made progress before the kill");
    capture.kill();
    assert!(
        !loader.is_finished(),
        "the kill happened in the middle of the load"
    );
    let _restarted = TributaryProcess::capture(&setup.yaml());
    loader.await.unwrap();

    // Final state of the database, and of the topic replayed into a map keyed by PK.
    let rows: Vec<(i64, i64, String)> = conn
        .query(format!("SELECT id, qty, note FROM `{db}`.items"))
        .await
        .unwrap();
    let expected: BTreeMap<i64, Json> = rows
        .into_iter()
        .map(|(id, qty, note)| (id, json!({ "id": id, "qty": qty, "note": note })))
        .collect();
    // Read until every insert has been seen and the replayed state has the table's size.
    let expected_len = expected.len();
    let records = read_topic(&topic, Duration::from_secs(180), move |records| {
        records.len() >= ROWS as usize
            && created_ids(records).len() as i64 == ROWS
            && replay_map(records).len() == expected_len
    })
    .await;
    let state = replay_map(&records);
    assert_eq!(
        state.len(),
        expected.len(),
        "rows in the replayed topic vs the table"
    );
    for (id, row) in &expected {
        assert_eq!(state.get(id), Some(row), "row {id}");
    }
    // Nothing skipped: every inserted id has a create event.
    assert_eq!(
        created_ids(&records).len() as i64,
        ROWS,
        "every insert was captured"
    );
    assert!(expected.len() < ROWS as usize, "some rows were deleted");
}

fn created_ids(records: &[Record]) -> std::collections::BTreeSet<i64> {
    records
        .iter()
        .filter_map(|r| r.value.as_ref())
        .filter(|e| e["op"] == "c")
        .map(|e| e["after"]["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn names_and_types_from_information_schema_without_full_row_metadata() {
    let server = PrivateMariaDb::start(&["--binlog-row-metadata=MINIMAL"]);
    let mut conn = server.root_conn().await;
    conn.query_drop(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT UNSIGNED PRIMARY KEY, big BIGINT UNSIGNED, \
         size ENUM('s','m','l'), tags SET('x','y'), l1 VARCHAR(10) CHARACTER SET latin1, raw VARBINARY(4), \
         note TEXT CHARACTER SET utf8mb4)",
    )
    .await
    .unwrap();
    let setup = CaptureSetup::new("shop", &gtid_now(&mut conn).await);
    let yaml = setup.yaml_on(server.port);
    let capture = TributaryProcess::capture(&yaml);
    conn.query_drop(
        "INSERT INTO shop.t VALUES (4294967295, 18446744073709551615, 'm', 'x,y', 'café', X'01FF', 'ünï 😀')",
    )
    .await
    .unwrap();
    let records = read_topic(&setup.topic("t"), WAIT, |r| !r.is_empty()).await;
    assert_eq!(records.len(), 1, "log:\n{}", capture.log());
    assert_eq!(records[0].key, json!({ "id": 4294967295u64 }));
    assert_eq!(
        records[0].value.as_ref().unwrap()["after"],
        json!({ "id": 4294967295u64, "big": 18446744073709551615u64, "size": "m", "tags": "x,y",
                "l1": "café", "raw": "Af8=", "note": "ünï 😀" })
    );
    assert!(
        capture.log().contains("information_schema"),
        "the fallback is announced at start-up"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn resumes_after_a_graceful_stop_across_a_binlog_rotation_without_duplicates() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "resume").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let topic = setup.topic("t");
    let capture = TributaryProcess::capture(&setup.yaml());
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (1), (2)"))
        .await
        .unwrap();
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (3)"))
        .await
        .unwrap();
    assert_eq!(read_topic(&topic, WAIT, |r| r.len() >= 3).await.len(), 3);
    let (ok, log) = tokio::task::spawn_blocking(move || capture.terminate(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(ok, "SIGTERM drains and exits 0; log:\n{log}");
    // Changes made while capture is down are picked up from the stored position.
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (4), (5)"))
        .await
        .unwrap();
    let _capture = TributaryProcess::capture(&setup.yaml());
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (6)"))
        .await
        .unwrap();
    let records = read_topic(&topic, WAIT, |r| r.len() >= 6).await;
    // Nothing more arrives: a graceful stop stores the exact position, so nothing repeats.
    let settled = read_topic(&topic, Duration::from_secs(3), |r| r.len() > 6).await;
    let mut ids: Vec<i64> = settled
        .iter()
        .map(|r| r.key["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6], "{records:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn schema_changes_mid_stream_are_recorded_and_later_rows_take_the_new_shape() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "ddl").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY, a INT)"))
        .await
        .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let _capture = TributaryProcess::capture(&setup.yaml());
    let statements = [
        format!("INSERT INTO `{db}`.t VALUES (1, 10)"),
        format!("ALTER TABLE `{db}`.t ADD COLUMN b VARCHAR(10) DEFAULT 'x'"),
        format!("INSERT INTO `{db}`.t VALUES (2, 20, 'y')"),
        format!("ALTER TABLE `{db}`.t DROP COLUMN a"),
        format!("INSERT INTO `{db}`.t VALUES (3, 'z')"),
        format!("RENAME TABLE `{db}`.t TO `{db}`.t2"),
        format!("INSERT INTO `{db}`.t2 VALUES (4, 'w')"),
    ];
    for sql in &statements {
        conn.query_drop(sql).await.unwrap();
    }
    let t = read_topic(&setup.topic("t"), WAIT, |r| r.len() >= 3).await;
    let after = |records: &[Record], id: i64| {
        records
            .iter()
            .find(|r| r.key["id"] == id)
            .unwrap()
            .value
            .as_ref()
            .unwrap()["after"]
            .clone()
    };
    assert_eq!(after(&t, 1), json!({ "id": 1, "a": 10 }));
    assert_eq!(after(&t, 2), json!({ "id": 2, "a": 20, "b": "y" }));
    assert_eq!(after(&t, 3), json!({ "id": 3, "b": "z" }));
    let t2 = read_topic(&setup.topic("t2"), WAIT, |r| !r.is_empty()).await;
    assert_eq!(
        after(&t2, 4),
        json!({ "id": 4, "b": "w" }),
        "a renamed table is captured under its new name"
    );

    let history_topic = format!("{}.schema-history", setup.server_name);
    let ddl_of = |r: &Record| {
        r.value.as_ref().unwrap()["ddl"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let history = read_topic(&history_topic, WAIT, move |r| {
        r.iter()
            .filter(|r| ddl_of(r).contains("RENAME TABLE"))
            .count()
            >= 1
    })
    .await;
    let ours: Vec<&Json> = history
        .iter()
        .filter_map(|r| r.value.as_ref())
        .filter(|v| v["ddl"].as_str().unwrap().contains(&db))
        .collect();
    let ddls: Vec<&str> = ours.iter().map(|v| v["ddl"].as_str().unwrap()).collect();
    assert_eq!(
        ddls,
        [
            statements[1].as_str(),
            statements[3].as_str(),
            statements[5].as_str()
        ],
        "every DDL, in order"
    );
    for v in ours {
        assert!(
            v["position"]["pos"].as_u64().unwrap() > 0
                && v["position"]["gtid"].as_str().unwrap().starts_with("0-1-"),
            "{v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn create_drop_and_truncate_mid_stream_are_recorded_and_capture_goes_on() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "tables").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v INT)"))
        .await
        .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let _capture = TributaryProcess::capture(&setup.yaml());
    let ddl = [
        format!("CREATE TABLE `{db}`.b (id INT PRIMARY KEY, s VARCHAR(10))"),
        format!("TRUNCATE TABLE `{db}`.a"),
        format!("DROP TABLE `{db}`.b"),
        format!("CREATE TABLE `{db}`.b (id INT PRIMARY KEY, n INT, extra INT)"),
    ];
    let statements = [
        format!("INSERT INTO `{db}`.a VALUES (1, 1)"),
        ddl[0].clone(),
        format!("INSERT INTO `{db}`.b VALUES (1, 'x')"),
        ddl[1].clone(),
        format!("INSERT INTO `{db}`.a VALUES (2, 2)"),
        ddl[2].clone(),
        ddl[3].clone(),
        format!("INSERT INTO `{db}`.b VALUES (2, 5, 6)"),
    ];
    for sql in &statements {
        conn.query_drop(sql).await.unwrap();
    }
    let after = |records: &[Record], id: i64| {
        records
            .iter()
            .find(|r| r.key["id"] == id)
            .and_then(|r| r.value.as_ref())
            .map(|v| v["after"].clone())
    };
    let a = read_topic(&setup.topic("a"), WAIT, |r| r.len() >= 2).await;
    assert_eq!(after(&a, 1), Some(json!({ "id": 1, "v": 1 })));
    assert_eq!(
        after(&a, 2),
        Some(json!({ "id": 2, "v": 2 })),
        "capture goes on after TRUNCATE"
    );
    let b = read_topic(&setup.topic("b"), WAIT, |r| r.len() >= 2).await;
    assert_eq!(
        after(&b, 1),
        Some(json!({ "id": 1, "s": "x" })),
        "a table created mid-stream"
    );
    assert_eq!(
        after(&b, 2),
        Some(json!({ "id": 2, "n": 5, "extra": 6 })),
        "a table dropped and created again with another shape"
    );

    let history_topic = format!("{}.schema-history", setup.server_name);
    let mine = {
        let db = db.clone();
        move |r: &Record| {
            r.value
                .as_ref()
                .and_then(|v| v["ddl"].as_str())
                .filter(|d| d.contains(&db))
                .map(str::to_owned)
        }
    };
    let history = read_topic(&history_topic, WAIT, {
        let mine = mine.clone();
        move |r| r.iter().filter_map(&mine).count() >= 4
    })
    .await;
    let recorded: Vec<String> = history.iter().filter_map(mine).collect();
    assert_eq!(recorded.len(), 4, "{recorded:?}");
    // The server may rewrite a statement (DROP TABLE gains a comment): compare its start.
    for (got, sent) in recorded.iter().zip(&ddl) {
        let verb: String = sent.split('`').next().unwrap().to_owned();
        assert!(got.starts_with(&verb), "{got:?} should record {sent:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_source_sends_heartbeats_with_its_position() {
    let server = tokio::task::spawn_blocking(|| PrivateMariaDb::start(&[]))
        .await
        .unwrap();
    let mut conn = server.root_conn().await;
    conn.query_drop("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    let setup = CaptureSetup::new("shop", "").with_snapshot(100);
    let yaml = setup.yaml_on(server.port).replace(
        &format!("server_id: {}", setup.server_id),
        &format!("server_id: {}, heartbeat_s: 1", setup.server_id),
    );
    let capture = TributaryProcess::capture(&yaml);
    // Nothing happens on the source; heartbeats still arrive, each with the current position.
    let topic = format!("{}.heartbeat", setup.server_name);
    let beats = read_topic(&topic, Duration::from_secs(30), |r| r.len() >= 2).await;
    assert!(
        beats.len() >= 2,
        "heartbeats while idle; log:\n{}",
        capture.log()
    );
    let (file, _): (String, u64) = {
        let status: mysql_async::Row = conn
            .query_first("SHOW MASTER STATUS")
            .await
            .unwrap()
            .unwrap();
        (status.get(0).unwrap(), status.get(1).unwrap())
    };
    for beat in &beats {
        let value = beat.value.as_ref().unwrap();
        assert_eq!(value["position"]["file"], file.as_str());
        assert!(value["position"]["pos"].as_u64().unwrap() > 4, "{value}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_commits_events_with_their_positions() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "eos").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let mut setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    setup.extra = "delivery: exactly_once\n".into();
    let topic = setup.topic("t");
    let capture = TributaryProcess::capture(&setup.yaml());
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (1), (2)"))
        .await
        .unwrap();
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (3)"))
        .await
        .unwrap();
    assert_eq!(
        read_topic(&topic, WAIT, |r| r.len() >= 3).await.len(),
        3,
        "log:\n{}",
        capture.log()
    );
    let (ok, log) = tokio::task::spawn_blocking(move || capture.terminate(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(ok, "{log}");
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (4)"))
        .await
        .unwrap();
    let _capture = TributaryProcess::capture(&setup.yaml());
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (5)"))
        .await
        .unwrap();
    let records = read_topic(&topic, WAIT, |r| r.len() >= 5).await;
    let settled = read_topic(&topic, Duration::from_secs(3), |r| r.len() > 5).await;
    let mut ids: Vec<i64> = settled
        .iter()
        .map(|r| r.key["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4, 5], "each change once: {records:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn switching_delivery_modes_resumes_where_the_other_stopped() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "modes").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let mut setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let topic = setup.topic("t");
    // Each run captures three inserts and stops cleanly; the next, in the other
    // mode, must resume exactly after them: no insert lost, none written twice.
    for (run, mode) in [
        "at_least_once",
        "exactly_once",
        "at_least_once",
        "exactly_once",
    ]
    .iter()
    .enumerate()
    {
        setup.extra = format!("delivery: {mode}\n");
        let capture = TributaryProcess::capture(&setup.yaml());
        let first = run as i64 * 3 + 1;
        conn.query_drop(format!(
            "INSERT INTO `{db}`.t VALUES ({first}), ({}), ({})",
            first + 1,
            first + 2
        ))
        .await
        .unwrap();
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let (records, _) = committed::read_topic(&topic, 3).await;
            let ids: Vec<i64> = records
                .iter()
                .map(|r| Record::parse(r).key["id"].as_i64().unwrap())
                .collect();
            let mut sorted = ids.clone();
            sorted.sort();
            if sorted == (1..first + 3).collect::<Vec<_>>() {
                break;
            }
            assert!(
                sorted.len() < (first + 2) as usize && std::time::Instant::now() < deadline,
                "run {run} ({mode}): committed ids {sorted:?}; log:\n{}",
                capture.log()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (clean, log) = capture.terminate(Duration::from_secs(30));
        assert!(clean, "{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_exactly_once_instance_fences_the_first() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "fence").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let mut first = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    first.extra = "delivery: exactly_once\n".into();
    let topic = first.topic("t");
    let a = TributaryProcess::capture(&first.yaml());
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (1)"))
        .await
        .unwrap();
    assert_eq!(read_topic(&topic, WAIT, |r| !r.is_empty()).await.len(), 1);
    // The same datastream (server_name) started again, as a second replica.
    let mut second = CaptureSetup::new(&db, &first.gtid);
    second.server_name = first.server_name.clone();
    second.extra = first.extra.clone();
    let _b = TributaryProcess::capture(&second.yaml());
    tokio::time::sleep(Duration::from_secs(3)).await;
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (2)"))
        .await
        .unwrap();
    let (ok, log) = tokio::task::spawn_blocking(move || a.wait_exit(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(!ok, "the fenced instance stops");
    assert!(
        log.contains("took over its Kafka transactions (fenced)"),
        "log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_sigkills_during_snapshot_and_streaming_lose_nothing() {
    sigkills_under_load("kills", "").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_sigkills_in_exactly_once_mode_commit_each_change_once() {
    sigkills_under_load("eoskills", "delivery: exactly_once\n").await;
}

/// 20 SIGKILLs of capture during its snapshot and under a write load, with
/// `extra` in its config. The topics' final state must equal the tables; with
/// exactly-once delivery, as a read_committed consumer sees them (transaction
/// markers read from the raw batches), every insert is committed exactly once
/// and no streamed change is committed twice.
async fn sigkills_under_load(prefix: &str, extra: &str) {
    const PER_TABLE: i64 = 34_000;
    const TABLES: [&str; 3] = ["a", "b", "c"];
    let exactly_once = extra.contains("exactly_once");
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, prefix).await;
    for t in TABLES {
        conn.query_drop(format!(
            "CREATE TABLE `{db}`.{t} (id INT PRIMARY KEY, v INT)"
        ))
        .await
        .unwrap();
        for start in (1..=PER_TABLE).step_by(8500) {
            let values: Vec<String> = (start..start + 8500)
                .map(|id| format!("({id}, 0)"))
                .collect();
            conn.query_drop(format!(
                "INSERT INTO `{db}`.{t} VALUES {}",
                values.join(",")
            ))
            .await
            .unwrap();
        }
    }
    let mut seed = random_seed();
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(2000);
    setup.extra = extra.to_owned();

    // Mixed changes across the tables for the whole run.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = spawn_random_writer(
        db.clone(),
        TABLES.map(String::from).to_vec(),
        PER_TABLE,
        seed,
        Duration::from_millis(5),
        stop.clone(),
    );

    let mut capture = TributaryProcess::capture(&setup.yaml());
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(300 + next_random(&mut seed) % 2200)).await;
        capture.kill();
        capture = TributaryProcess::capture(&setup.yaml());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();

    for t in TABLES {
        let rows: Vec<(i64, i64)> = conn
            .query(format!("SELECT id, v FROM `{db}`.{t}"))
            .await
            .unwrap();
        let expected: BTreeMap<i64, Json> = rows
            .into_iter()
            .map(|(id, v)| (id, json!({ "id": id, "v": v })))
            .collect();
        let topic = setup.topic(t);
        let records = if exactly_once {
            committed_records_once(&topic, &expected, &capture).await
        } else {
            let target = expected.clone();
            // Replays incrementally: the topic holds every repeated snapshot.
            let mut replayed = 0;
            let mut state = BTreeMap::new();
            read_topic(&topic, Duration::from_secs(180), move |records| {
                apply_records(&mut state, &records[replayed..]);
                replayed = records.len();
                state == target
            })
            .await
        };
        let mut state = BTreeMap::new();
        apply_records(&mut state, &records);
        assert_eq!(
            state.len(),
            expected.len(),
            "table {t}: rows (seed printed above)"
        );
        for (id, row) in &expected {
            assert_eq!(state.get(id), Some(row), "table {t}, row {id}");
        }
    }
}

/// Waits until the committed records of `topic` replay to `expected`, then checks
/// that no insert and no streamed change was committed twice and none is missing.
/// Returns the committed records in offset order per partition.
async fn committed_records_once(
    topic: &str,
    expected: &BTreeMap<i64, Json>,
    capture: &TributaryProcess,
) -> Vec<Record> {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let (records, aborted) = loop {
        let (committed, aborted) = committed::read_topic(topic, 3).await;
        let records: Vec<Record> = committed.iter().map(Record::parse).collect();
        if replay_map(&records) == *expected || std::time::Instant::now() > deadline {
            break (records, aborted);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    println!(
        "{topic}: {} committed records, {aborted} aborted",
        records.len()
    );
    assert_eq!(
        replay_map(&records),
        *expected,
        "committed state of {topic}; log:\n{}",
        capture.log()
    );
    // Each streamed change once: a binlog event's rows have one (file, pos, row).
    let mut changes = std::collections::BTreeMap::new();
    for value in events(&records).into_iter().filter(|v| v["op"] != "r") {
        let source = &value["source"];
        let id = (
            source["file"].as_str().unwrap().to_owned(),
            source["pos"].as_i64().unwrap(),
            source["row"].as_i64().unwrap(),
        );
        *changes.entry(id).or_insert(0) += 1;
    }
    let doubled: Vec<_> = changes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        doubled.is_empty(),
        "{topic}: changes committed twice: {doubled:?}"
    );
    // Each insert of the load once: the load never deletes the ids it inserts
    // (past the preloaded ones), so each is in the table, and was read by a
    // snapshot or streamed once as a create.
    let mut creates = BTreeMap::new();
    let mut snapshotted = std::collections::BTreeSet::new();
    for value in events(&records) {
        let id = value["after"]["id"].as_i64();
        match (value["op"].as_str(), id) {
            (Some("c"), Some(id)) => *creates.entry(id).or_insert(0) += 1,
            (Some("r"), Some(id)) => {
                snapshotted.insert(id);
            }
            _ => {}
        }
    }
    let twice: Vec<_> = creates.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{topic}: inserts committed twice: {twice:?}"
    );
    let missing: Vec<_> = expected
        .keys()
        .filter(|id| **id > 34_000 && !creates.contains_key(id) && !snapshotted.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{topic}: inserts never committed: {missing:?}"
    );
    records
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_and_stream_keys_follow_the_primary_key_order() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "keyorder").await;
    // Key columns declared in another order than the table's.
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (a INT, b INT, v INT, PRIMARY KEY (b, a)); \
         INSERT INTO `{db}`.t VALUES (1, 10, 0), (2, 20, 0)"
    ))
    .await
    .unwrap();
    let setup = CaptureSetup::new(&db, "").with_snapshot(1);
    let capture = TributaryProcess::capture(&setup.yaml());
    let topic = setup.topic("t");
    read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 2).await;
    conn.query_drop(format!("UPDATE `{db}`.t SET v = 1 WHERE a = 1"))
        .await
        .unwrap();
    let records = read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 3).await;
    let key_of = |op: &str| {
        records
            .iter()
            .find(|r| {
                r.value
                    .as_ref()
                    .is_some_and(|v| v["op"] == op && v["after"]["a"] == 1)
            })
            .map(|r| (r.key.to_string(), r.partition))
            .unwrap_or_else(|| panic!("no {op} event for a = 1; log:\n{}", capture.log()))
    };
    let (snapshot_key, snapshot_partition) = key_of("r");
    assert_eq!(
        snapshot_key, r#"{"b":10,"a":1}"#,
        "key columns in key order"
    );
    assert_eq!(
        key_of("u"),
        (snapshot_key, snapshot_partition),
        "same key bytes, same partition"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_chunks_page_exactly_through_decimal_keys_beyond_double_precision() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "deckey").await;
    // Keys a double cannot tell apart: each chunk must start exactly after the last key.
    let keys = [
        "10000000000000000000001",
        "10000000000000000000002",
        "10000000000000000000003",
    ];
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (k DECIMAL(30,0) PRIMARY KEY, v INT); INSERT INTO `{db}`.t VALUES ({}, 1), ({}, 2), ({}, 3)",
        keys[0], keys[1], keys[2]
    ))
    .await
    .unwrap();
    let setup = CaptureSetup::new(&db, "").with_snapshot(1);
    let capture = TributaryProcess::capture(&setup.yaml());
    let records = read_topic(&setup.topic("t"), Duration::from_secs(30), |r| r.len() >= 3).await;
    let mut read: Vec<String> = records
        .iter()
        .map(|r| r.key["k"].as_str().unwrap_or_default().to_owned())
        .collect();
    read.sort();
    assert_eq!(read, keys, "one chunk per row; log:\n{}", capture.log());
}
