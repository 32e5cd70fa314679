//! Text in every character set family capture decodes, against the real
//! MariaDB: snapshot reads, inserts, updates and deletes carry exactly the text
//! the server itself gives for `CONVERT(col USING utf8mb4)` (and `HEX()` for
//! binary), read back independently. A character set capture cannot decode
//! stops capture with an error naming the database, table, column and binlog
//! position, rather than publishing a different value.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use serde_json::Value as Json;

/// Character sets and a text each can hold, with characters outside ASCII
/// where the set has any.
const SAMPLES: &[(&str, &str)] = &[
    ("utf8mb3", "Ünïcödé 中文 ∑"),
    ("utf8mb4", "4-byte 😀 𝄞 and 中文"),
    ("latin1", "café Ünïcödé € ‰"),
    ("latin2", "Zażółć gęślą jaźń"),
    ("cp1250", "Příliš žluťoučký kůň"),
    ("cp1251", "Привет, мир! Ёё"),
    ("koi8r", "Съешь же ещё этих булок"),
    ("greek", "Καλημέρα κόσμε"),
    ("hebrew", "שלום עולם"),
    ("gbk", "中文测试，简体"),
    ("gb2312", "中文测试"),
    ("big5", "繁體中文測試"),
    ("sjis", "日本語テキスト、カタカナ"),
    ("ujis", "日本語テキスト、ひらがな"),
    ("euckr", "한국어 텍스트"),
    ("ucs2", "Ünïcödé Ж 中"),
    ("utf16", "Ünïcödé 😀 中"),
    ("utf16le", "Ünïcödé 😀 中"),
    ("utf32", "Ünïcödé 😀 中"),
    ("ascii", "plain ASCII text"),
];

/// `CONVERT(v USING utf8mb4)` and `CONVERT(c USING utf8mb4)` of row `id`, from the server.
async fn server_text(
    conn: &mut mysql_async::Conn,
    db: &str,
    table: &str,
    id: i64,
) -> (String, String) {
    conn.exec_first(
        format!(
            "SELECT CONVERT(v USING utf8mb4), CONVERT(c USING utf8mb4) FROM `{db}`.`{table}` WHERE id = ?"
        ),
        (id,),
    )
    .await
    .unwrap()
    .unwrap()
}

/// The `v` and `c` of an event's row image.
fn texts(image: &Json) -> (String, String) {
    (
        image["v"].as_str().unwrap().to_owned(),
        image["c"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn every_character_set_reaches_kafka_as_the_server_reads_it() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "charsets").await;
    for (charset, sample) in SAMPLES {
        conn.query_drop(format!(
            "CREATE TABLE `{db}`.`t_{charset}` (id INT PRIMARY KEY, \
             v VARCHAR(60) CHARACTER SET {charset}, c CHAR(12) CHARACTER SET {charset});
             INSERT INTO `{db}`.`t_{charset}` VALUES (1, '{sample}', LEFT('{sample}', 12))"
        ))
        .await
        .unwrap();
    }
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t_binary (id INT PRIMARY KEY, v VARBINARY(20));
         INSERT INTO `{db}`.t_binary VALUES (1, 0x00FF80C3);"
    ))
    .await
    .unwrap();
    let mut snapshot = Vec::new();
    for (charset, _) in SAMPLES {
        snapshot.push(server_text(&mut conn, &db, &format!("t_{charset}"), 1).await);
    }

    let setup = CaptureSetup::new(&db, "").with_snapshot(100);
    let capture = TributaryProcess::capture(&setup.yaml());
    // A first snapshot record means the snapshot's consistent read has begun:
    // what changes from here on is streamed.
    read_raw(&setup.topic("t_binary"), Duration::from_secs(60), |r| {
        !r.is_empty()
    })
    .await;
    for (charset, sample) in SAMPLES {
        conn.query_drop(format!(
            "INSERT INTO `{db}`.`t_{charset}` VALUES (2, REVERSE('{sample}'), RIGHT('{sample}', 5));
             UPDATE `{db}`.`t_{charset}` SET v = CONCAT(v, ' ', v), c = LEFT(REVERSE(c), 12) WHERE id = 1;"
        ))
        .await
        .unwrap();
    }
    let mut streamed = Vec::new();
    for (charset, _) in SAMPLES {
        let table = format!("t_{charset}");
        let row2 = server_text(&mut conn, &db, &table, 2).await;
        let row1 = server_text(&mut conn, &db, &table, 1).await;
        streamed.push((row1, row2));
        conn.query_drop(format!("DELETE FROM `{db}`.`{table}` WHERE id = 2"))
            .await
            .unwrap();
    }

    for (((charset, _), snap), (row1, row2)) in SAMPLES.iter().zip(&snapshot).zip(&streamed) {
        // r(1), u(1) on one partition; c(2), d(2), tombstone on another.
        let records = read_raw(
            &setup.topic(&format!("t_{charset}")),
            Duration::from_secs(60),
            |r| r.len() >= 5,
        )
        .await;
        let events: Vec<Json> = records
            .iter()
            .filter(|r| r.value.is_some())
            .map(|r| r.json())
            .collect();
        let of = |op: &str, id: i64| {
            events
                .iter()
                .find(|e| e["op"] == op && (e["after"]["id"] == id || e["before"]["id"] == id))
                .unwrap_or_else(|| panic!("{charset}: no {op} of {id}; log:\n{}", capture.log()))
        };
        assert_eq!(&texts(&of("r", 1)["after"]), snap, "{charset}: snapshot");
        assert_eq!(
            &texts(&of("u", 1)["before"]),
            snap,
            "{charset}: update, before"
        );
        assert_eq!(
            &texts(&of("u", 1)["after"]),
            row1,
            "{charset}: update, after"
        );
        assert_eq!(&texts(&of("c", 2)["after"]), row2, "{charset}: insert");
        assert_eq!(
            &texts(&of("d", 2)["before"]),
            row2,
            "{charset}: delete, before"
        );
    }
    let binary = read_raw(&setup.topic("t_binary"), Duration::from_secs(60), |r| {
        !r.is_empty()
    })
    .await;
    let hex: String = conn
        .query_first(format!("SELECT HEX(v) FROM `{db}`.t_binary"))
        .await
        .unwrap()
        .unwrap();
    let bytes = base64_decode(binary[0].json()["after"]["v"].as_str().unwrap());
    let ours: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    assert_eq!(ours, hex, "binary: bytes as they are");

    // A character set capture does not decode: it stops, naming where.
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t_dec8 (id INT PRIMARY KEY, v VARCHAR(10) CHARACTER SET dec8);
         INSERT INTO `{db}`.t_dec8 VALUES (1, 'x');"
    ))
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let wanted = [
        format!("{db}.t_dec8"),
        "column `v`".to_owned(),
        "character set dec8 is not decoded yet".to_owned(),
    ];
    while !wanted.iter().all(|w| capture.log().contains(w.as_str())) {
        assert!(Instant::now() < deadline, "log:\n{}", capture.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let dec8 = read_raw(&setup.topic("t_dec8"), Duration::from_secs(2), |r| {
        !r.is_empty()
    })
    .await;
    assert!(
        dec8.is_empty(),
        "nothing published for the undecodable row: {dec8:?}"
    );
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}
