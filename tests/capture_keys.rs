//! Record keys as Debezium chooses them, against the real stack: the primary
//! key; without one, the unique key whose columns are all NOT NULL (in the
//! index's column order, read back from `information_schema` here); without
//! that, a null key; and `message_key_columns` over all of these. Snapshot and
//! streamed events alike. A local table refuses a topic of null keys.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use prometheus_client::registry::Registry;
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;
use tributary_tables::materializer::Materializer;
use tributary_tables::{TableError, TablesConfig, TablesMetrics};

/// The columns of `index` in index order, as the server lists them.
async fn index_columns(
    conn: &mut mysql_async::Conn,
    db: &str,
    table: &str,
    index: &str,
) -> Vec<String> {
    conn.exec(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = ? ORDER BY SEQ_IN_INDEX",
        (db, table, index),
    )
    .await
    .unwrap()
}

/// The record key Debezium writes for `row`: the key columns in key order.
fn key_of(row: &Json, columns: &[String]) -> Vec<u8> {
    let mut out = String::from("{");
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{}:{}", json!(c), row[c]));
    }
    out.push('}');
    out.into_bytes()
}

/// The `op` of each change event.
fn ops_of(records: &[RawRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| r.json()["op"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_follow_debeziums_rules_in_snapshots_and_streams() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "keys").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.nokey (id INT, v VARCHAR(10));
         CREATE TABLE `{db}`.uniq (a INT NOT NULL, b VARCHAR(10) NOT NULL, c INT, UNIQUE KEY uk (b, a));
         CREATE TABLE `{db}`.nullable_uniq (a INT, u INT NULL, UNIQUE KEY (u));
         CREATE TABLE `{db}`.custom (id INT PRIMARY KEY, device VARCHAR(10), ts INT);
         INSERT INTO `{db}`.nokey VALUES (1, 'one');
         INSERT INTO `{db}`.uniq VALUES (1, 'x', 10);
         INSERT INTO `{db}`.nullable_uniq VALUES (1, NULL);
         INSERT INTO `{db}`.custom VALUES (1, 'd1', 100);"
    ))
    .await
    .unwrap();
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(100);
    setup.extra = format!("message_key_columns: '{db}.custom:device,ts'\n");
    let capture = TributaryProcess::capture(&setup.yaml());
    // Wait for the snapshot of the last table, then change every table while streaming.
    read_raw(&setup.topic("custom"), Duration::from_secs(60), |r| {
        !r.is_empty()
    })
    .await;
    conn.query_drop(format!(
        "INSERT INTO `{db}`.nokey VALUES (2, 'two');
         UPDATE `{db}`.nokey SET v = 'uno' WHERE id = 1;
         DELETE FROM `{db}`.nokey WHERE id = 2;
         INSERT INTO `{db}`.uniq VALUES (2, 'y', 20);
         UPDATE `{db}`.uniq SET c = 11 WHERE a = 1;
         INSERT INTO `{db}`.nullable_uniq VALUES (2, 7);
         UPDATE `{db}`.custom SET ts = 101 WHERE id = 1;"
    ))
    .await
    .unwrap();

    // No key at all: null keys, one update event (no delete + create), no
    // tombstone, every event on partition 0.
    let nokey = read_raw(&setup.topic("nokey"), Duration::from_secs(60), |r| {
        r.len() >= 4
    })
    .await;
    assert_eq!(
        ops_of(&nokey),
        ["r", "c", "u", "d"],
        "log:\n{}",
        capture.log()
    );
    assert!(
        nokey.iter().all(|r| r.key.is_none() && r.partition == 0),
        "{nokey:?}"
    );
    assert!(
        nokey.iter().all(|r| r.value.is_some()),
        "no tombstone without a key"
    );
    let nullable = read_raw(
        &setup.topic("nullable_uniq"),
        Duration::from_secs(60),
        |r| r.len() >= 2,
    )
    .await;
    assert!(
        nullable.iter().all(|r| r.key.is_none()),
        "a unique key with a nullable column is no key: {nullable:?}"
    );

    // The unique NOT NULL key, in the index's column order (not the table's).
    let uk = index_columns(&mut conn, &db, "uniq", "uk").await;
    assert_eq!(uk, ["b", "a"], "the server's own index order");
    let uniq = read_raw(&setup.topic("uniq"), Duration::from_secs(60), |r| {
        r.len() >= 3
    })
    .await;
    // Records of different keys are on different partitions: compare as a set.
    let mut ops = ops_of(&uniq);
    ops.sort();
    assert_eq!(ops, ["c", "r", "u"], "the key did not change: one update");
    let rows: BTreeMap<i64, Json> = conn
        .query::<(i64, String, i64), _>(format!("SELECT a, b, c FROM `{db}`.uniq"))
        .await
        .unwrap()
        .into_iter()
        .map(|(a, b, c)| (a, json!({ "a": a, "b": b, "c": c })))
        .collect();
    for record in &uniq {
        let after = &record.json()["after"];
        let a = after["a"].as_i64().unwrap();
        assert_eq!(
            record.key.as_deref().unwrap(),
            key_of(&rows[&a], &uk),
            "{after}"
        );
    }

    // message_key_columns wins over the primary key; a changed key column is
    // a delete of the old key and a create of the new one, as for a primary key.
    let custom = read_raw(&setup.topic("custom"), Duration::from_secs(60), |r| {
        r.len() >= 4
    })
    .await;
    let mut by_key: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    for r in &custom {
        let key = String::from_utf8(r.key.clone().unwrap()).unwrap();
        let op = r
            .value
            .as_ref()
            .map(|_| r.json()["op"].as_str().unwrap().to_owned());
        by_key.entry(key).or_default().push(op);
    }
    let expected = BTreeMap::from([
        (
            r#"{"device":"d1","ts":100}"#.to_owned(),
            vec![Some("r".to_owned()), Some("d".to_owned()), None],
        ),
        (
            r#"{"device":"d1","ts":101}"#.to_owned(),
            vec![Some("c".to_owned())],
        ),
    ]);
    assert_eq!(
        by_key, expected,
        "snapshot read, delete of the old key and its tombstone, create of the new key"
    );

    // A local table over a topic of null keys refuses to start, naming the topic.
    let dir = tempfile::tempdir().unwrap();
    let config = TablesConfig::parse(&format!(
        "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\ntables:\n  - {{ name: nokey, topic: '{}', mode: global }}\n",
        dir.path().display(),
        brokers(),
        setup.topic("nokey")
    ))
    .unwrap();
    let metrics = TablesMetrics::register(&mut Registry::default());
    match Materializer::start(&config, metrics, CancellationToken::new()).await {
        Err(TableError::Partitioning { problem, .. }) => {
            assert!(problem.contains(&setup.topic("nokey")), "{problem}");
            assert!(problem.contains("a record without a key"), "{problem}");
        }
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("a local table over null keys started"),
    }
}
