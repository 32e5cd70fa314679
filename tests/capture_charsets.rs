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
    ("latin5", "Türkçe ğış İŞ"),
    ("latin7", "Ąčęėįšųūž"),
    ("cp1256", "مرحبا بالعالم"),
    ("cp1257", "Ąčęėįšųūž"),
    ("cp866", "Привет, мир"),
    ("koi8u", "Привіт, їжак"),
    ("macroman", "Café ñ ü"),
    ("cp850", "Café ñ ü"),
    ("cp852", "Zażółć gęślą"),
    ("macce", "Zażółć gęślą"),
    ("keybcs2", "Příliš žluťoučký"),
    ("dec8", "Café ñ"),
    ("hp8", "Café ñ"),
    ("tis620", "สวัสดี"),
    ("armscii8", "Բարեւ"),
    ("geostd8", "გამარჯობა"),
    ("cp932", "日本語①"),
    ("eucjpms", "日本語テキスト"),
];

/// ENUM/SET labels outside ASCII, per character set.
const ENUM_LABELS: &[(&str, [&str; 2])] = &[
    ("latin2", ["zółć", "gęś"]),
    ("cp1251", ["мир", "дом"]),
    ("sjis", ["日本", "東京"]),
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
    for (charset, labels) in ENUM_LABELS {
        let quoted: Vec<String> = labels.iter().map(|l| format!("'{l}'")).collect();
        let list = quoted.join(",");
        conn.query_drop(format!(
            "CREATE TABLE `{db}`.`e_{charset}` (id INT PRIMARY KEY,              e ENUM({list}) CHARACTER SET {charset}, s SET({list}) CHARACTER SET {charset});
             INSERT INTO `{db}`.`e_{charset}` VALUES (1, '{}', '{}')",
            labels[0],
            labels.join(",")
        ))
        .await
        .unwrap();
    }
    let mut snapshot = Vec::new();
    for (charset, _) in SAMPLES {
        snapshot.push(server_text(&mut conn, &db, &format!("t_{charset}"), 1).await);
    }

    // The signal table of on-demand snapshots, as a DBA sets it up.
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.signals (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT);
         GRANT INSERT ON `{db}`.signals TO 'tributary'@'127.0.0.1'"
    ))
    .await
    .unwrap();
    let setup = CaptureSetup::new(&db, "").with_snapshot(100);
    let yaml = setup.yaml().replace(
        "snapshot: { mode: initial, chunk_rows: 100 }",
        &format!("snapshot: {{ mode: initial, chunk_rows: 100, signal_table: '{db}.signals' }}"),
    );
    assert_ne!(yaml, setup.yaml(), "the snapshot settings were replaced");
    let config = write_config(&yaml);
    let capture = TributaryProcess::start(&["capture"], &config, &[]);
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
    for (charset, labels) in ENUM_LABELS {
        conn.query_drop(format!(
            "INSERT INTO `{db}`.`e_{charset}` VALUES (2, '{}', '{}')",
            labels[1], labels[1]
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
    // ENUM and SET labels come from the TABLE_MAP in the column's character set.
    for (charset, _) in ENUM_LABELS {
        let table = format!("e_{charset}");
        let records = read_raw(&setup.topic(&table), Duration::from_secs(60), |r| {
            r.len() >= 2
        })
        .await;
        for record in records {
            let after = &record.json()["after"];
            let id = after["id"].as_i64().unwrap();
            let expected: (String, String) = conn
                .exec_first(
                    format!(
                        "SELECT CONVERT(e USING utf8mb4), CONVERT(s USING utf8mb4) FROM `{db}`.`{table}` WHERE id = ?"
                    ),
                    (id,),
                )
                .await
                .unwrap()
                .unwrap();
            let got = (
                after["e"].as_str().unwrap().to_owned(),
                after["s"].as_str().unwrap().to_owned(),
            );
            assert_eq!(got, expected, "{table} row {id}");
        }
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
    assert_eq!(self::hex(&bytes), hex, "binary: bytes as they are");

    // On-demand snapshots of every table, while streaming: the rows as they are now.
    let tables: Vec<String> = SAMPLES
        .iter()
        .map(|(cs, _)| format!("{db}.t_{cs}"))
        .collect();
    let requested = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["snapshot", "--config"])
        .arg(&config)
        .args(&tables)
        .output()
        .unwrap();
    assert!(requested.status.success(), "{requested:?}");
    for ((charset, _), (row1, _)) in SAMPLES.iter().zip(&streamed) {
        let records = read_raw(
            &setup.topic(&format!("t_{charset}")),
            Duration::from_secs(90),
            |r| {
                r.iter()
                    .any(|r| r.value.is_some() && r.json()["source"]["snapshot"] == "incremental")
            },
        )
        .await;
        let on_demand = records
            .iter()
            .filter(|r| r.value.is_some())
            .map(RawRecord::json)
            .find(|e| e["source"]["snapshot"] == "incremental")
            .unwrap_or_else(|| {
                panic!(
                    "{charset}: no on-demand snapshot row; log:\n{}",
                    capture.log()
                )
            });
        assert_eq!(
            &texts(&on_demand["after"]),
            row1,
            "{charset}: on-demand snapshot"
        );
    }

    // Text the server stores but has no Unicode character for (big5 A15A reads
    // as U+FFFD): capture stops, naming where, and publishes nothing for it.
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t_undecodable (id INT PRIMARY KEY, v VARCHAR(10) CHARACTER SET big5);
         INSERT INTO `{db}`.t_undecodable VALUES (1, _binary 0xA15A);"
    ))
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let wanted = [
        format!("{db}.t_undecodable"),
        "column `v`".to_owned(),
        "bytes A15A are not valid big5".to_owned(),
    ];
    while !wanted.iter().all(|w| capture.log().contains(w.as_str())) {
        assert!(Instant::now() < deadline, "log:\n{}", capture.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let published = read_raw(&setup.topic("t_undecodable"), Duration::from_secs(2), |r| {
        !r.is_empty()
    })
    .await;
    assert!(
        published.is_empty(),
        "nothing published for the undecodable row: {published:?}"
    );
}

/// Text the server stores but that is not valid in its character set (big5
/// A15A, which the server itself reads as U+FFFD). By default capture stops,
/// in a snapshot as in the binlog, naming the column, and publishes nothing for
/// the table. With `undecodable_text: base64` it goes out as its raw bytes
/// (base64), with headers naming the columns, in a snapshot read and on insert,
/// update and delete; the other columns of the row, and valid rows, are text as
/// always.
#[tokio::test(flavor = "multi_thread")]
async fn undecodable_text_stops_capture_or_goes_out_as_raw_bytes_with_a_header() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "undecodable").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(10) CHARACTER SET big5, \
         c VARCHAR(10) CHARACTER SET latin2);
         INSERT INTO `{db}`.t VALUES (3, _binary 0xA15A, 'ćma');"
    ))
    .await
    .unwrap();

    let stopping = CaptureSetup::new(&db, "").with_snapshot(100);
    let capture = TributaryProcess::start(&["capture"], &write_config(&stopping.yaml()), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let wanted = [
        format!("snapshot of {db}.t, column `v`"),
        "bytes A15A are not valid big5".to_owned(),
    ];
    while !wanted.iter().all(|w| capture.log().contains(w.as_str())) {
        assert!(Instant::now() < deadline, "log:\n{}", capture.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(capture);
    let published = read_raw(&stopping.topic("t"), Duration::from_secs(1), |r| {
        !r.is_empty()
    })
    .await;
    assert!(published.is_empty(), "nothing published: {published:?}");

    let setup = CaptureSetup::new(&db, "").with_snapshot(100);
    let yaml = setup
        .yaml()
        .replace("server_id:", "undecodable_text: base64, server_id:");
    assert_ne!(yaml, setup.yaml());
    let capture = TributaryProcess::start(&["capture"], &write_config(&yaml), &[]);
    read_raw(&setup.topic("t"), Duration::from_secs(60), |r| {
        !r.is_empty()
    })
    .await;
    conn.query_drop(format!(
        "INSERT INTO `{db}`.t VALUES (1, _binary 0xA15A, 'żółw'), (2, '繁體', 'gęś');
         UPDATE `{db}`.t SET c = 'łoś' WHERE id = 1;
         DELETE FROM `{db}`.t WHERE id = 1;"
    ))
    .await
    .unwrap();
    // What the server holds, read back independently: the bytes of v, and
    // the text of row 2 as the server converts it.
    let v3: String = conn
        .query_first(format!("SELECT HEX(v) FROM `{db}`.t WHERE id = 3"))
        .await
        .unwrap()
        .unwrap();
    let (v2, c2): (String, String) = conn
        .query_first(format!(
            "SELECT CONVERT(v USING utf8mb4), CONVERT(c USING utf8mb4) FROM `{db}`.t WHERE id = 2"
        ))
        .await
        .unwrap()
        .unwrap();
    let records = read_raw(&setup.topic("t"), Duration::from_secs(60), |r| r.len() >= 6).await;
    let events: Vec<(&RawRecord, Json)> = records
        .iter()
        .filter(|r| r.value.is_some())
        .map(|r| (r, r.json()))
        .collect();
    assert_eq!(events.len(), 5, "r, c, c, u, d; log:\n{}", capture.log());
    for (record, event) in &events {
        let image = if event["op"] == "d" {
            &event["before"]
        } else {
            &event["after"]
        };
        if image["id"] == 2 {
            assert_eq!(image["v"], v2.as_str());
            assert_eq!(image["c"], c2.as_str());
            assert!(record.headers.is_empty(), "{:?}", record.headers);
            continue;
        }
        assert_eq!(
            hex(&base64_decode(image["v"].as_str().unwrap())),
            v3,
            "{event}"
        );
        assert!(
            ["żółw", "łoś", "ćma"].contains(&image["c"].as_str().unwrap()),
            "{event}"
        );
        assert_eq!(
            record
                .headers
                .get("tributary.undecodable.columns")
                .map(String::as_str),
            Some("v"),
            "{event}"
        );
        assert_eq!(
            record
                .headers
                .get("tributary.undecodable.encoding")
                .map(String::as_str),
            Some("base64")
        );
    }
    assert!(
        events
            .iter()
            .any(|(_, e)| e["op"] == "r" && e["after"]["id"] == 3)
    );
    let update = events.iter().find(|(_, e)| e["op"] == "u").unwrap();
    assert_eq!(
        hex(&base64_decode(update.1["before"]["v"].as_str().unwrap())),
        v3
    );
    assert!(
        capture.log().contains("published as raw bytes"),
        "a warning says so"
    );
}

/// A snapshot pages through a table by its primary key; a text key outside
/// UTF-8 (here cp932 with its binary collation, not the default one) is compared
/// as the bytes the table holds: every row is read once, none skipped, even
/// two keys that are one character (cp932 has NEC and JIS codes for `∵`), which
/// a key sent back as text would not tell apart.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_pages_exactly_through_a_text_key_in_a_legacy_character_set() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "sjiskey").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (k VARCHAR(10) CHARACTER SET cp932 COLLATE cp932_bin PRIMARY KEY, n INT);
         INSERT INTO `{db}`.t VALUES ('東京', 1), ('大阪', 2), ('ｶﾀｶﾅ', 3), ('カタカナ', 4),
             ('abc', 5), ('ABC', 6), ('日本語', 7), ('①', 8), ('～', 9),
             (_binary 0x81E6, 10), (_binary 0x879A, 11);"
    ))
    .await
    .unwrap();
    let expected = server_keys(&mut conn, &db).await;
    let setup = CaptureSetup::new(&db, "").with_snapshot(2);
    let capture = TributaryProcess::start(&["capture"], &write_config(&setup.yaml()), &[]);
    // Every row (the records of other partitions may come after `last`).
    let rows = expected.len();
    let records = read_raw(&setup.topic("t"), Duration::from_secs(60), move |r| {
        r.len() >= rows && r.iter().any(|r| r.json()["source"]["snapshot"] == "last")
    })
    .await;
    let mut keys: Vec<String> = records
        .iter()
        .map(|r| r.json()["after"]["k"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    assert_eq!(keys, expected, "log:\n{}", capture.log());
}

/// The keys of `db.t` (column `k`) as the server converts them to utf8mb4, sorted.
async fn server_keys(conn: &mut mysql_async::Conn, db: &str) -> Vec<String> {
    let mut keys: Vec<String> = conn
        .query(format!("SELECT CONVERT(k USING utf8mb4) FROM `{db}`.t"))
        .await
        .unwrap();
    keys.sort();
    keys
}

/// An on-demand snapshot cursor stored by a version before keys outside
/// UTF-8 were kept as their bytes (converted text, no `hex:` mark) cannot be
/// compared with the table's bytes: capture says so and reads the table again
/// from its first row, so no row is skipped.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_versions_text_cursor_reads_the_table_again_from_its_start() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "oldcursor").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (k VARCHAR(10) CHARACTER SET latin1 PRIMARY KEY, n INT);
         INSERT INTO `{db}`.t VALUES ('a', 1), ('b', 2), ('c', 3), ('é', 4);"
    ))
    .await
    .unwrap();
    let expected = server_keys(&mut conn, &db).await;
    let status: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .unwrap();
    let (file, pos): (String, u64) = (status.get(0).unwrap(), status.get(1).unwrap());
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    // The position an older version stored mid-way through `t`, after
    // 'bbbbbb' (read as a `hex:` cursor, it would mean "after 0xBB": only 'é').
    let offsets = format!("{}.offsets", setup.server_name);
    create_topic_with(&offsets, 1, "compact").await;
    let stored = serde_json::json!({
        "file": file, "pos": pos, "gtid": setup.gtid, "ts_ms": 0,
        "incremental": { "tables": [format!("{db}.t")],
                         "after": { "columns": ["k"], "values": [{ "bytes": b"bbbbbb".to_vec() }] } },
    });
    let key = serde_json::json!({ "server": setup.server_name });
    produce(&offsets, 1, &[(key, Some(stored.to_string().into_bytes()))]).await;

    let capture = TributaryProcess::capture(&setup.yaml());
    capture
        .wait_for_log("table snapshot done", Duration::from_secs(60))
        .await;
    assert!(
        capture.log().contains(
            "cursor stored by an older version; the table is read again from its first row"
        ),
        "{}",
        capture.log()
    );
    let count = expected.len();
    let records = read_raw(&setup.topic("t"), Duration::from_secs(60), move |r| {
        r.len() >= count
    })
    .await;
    let mut keys: Vec<String> = records
        .iter()
        .map(|r| {
            assert_eq!(r.json()["source"]["snapshot"], "incremental");
            r.json()["after"]["k"].as_str().unwrap().to_owned()
        })
        .collect();
    keys.sort();
    assert_eq!(keys, expected, "log:\n{}", capture.log());
}

/// Every table of `capture/charsets` is what the server itself converts each
/// byte sequence to: `CONVERT(CONVERT(b USING cs) USING utf8mb4)` over every
/// sequence of one byte, of two bytes with a lead byte of 0x80 or more, and of
/// three bytes led by 0x8F (ujis, eucjpms). A sequence maps when the server
/// reads it as exactly one character other than `?` (its mark for bytes it
/// cannot read) and U+FFFD. `TRIBUTARY_WRITE_CHARSET_MAPS=1` writes the tables.
#[tokio::test(flavor = "multi_thread")]
async fn the_mapping_tables_are_the_servers() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "charmaps").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.seq (b VARBINARY(3))"))
        .await
        .unwrap();
    let mut sequences: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for lead in 0x80..=0xffu8 {
        sequences.extend((0..=255u8).map(|trail| vec![lead, trail]));
    }
    for second in 0xa1..=0xfeu8 {
        sequences.extend((0xa1..=0xfeu8).map(|third| vec![0x8f, second, third]));
    }
    for chunk in sequences.chunks(4000) {
        let values: Vec<String> = chunk.iter().map(|s| format!("(0x{})", hex(s))).collect();
        conn.query_drop(format!(
            "INSERT INTO `{db}`.seq VALUES {}",
            values.join(",")
        ))
        .await
        .unwrap();
    }
    let write = std::env::var_os("TRIBUTARY_WRITE_CHARSET_MAPS").is_some();
    let mut differing = Vec::new();
    for (name, committed) in tributary_capture::charset_map::MAPS {
        let rows: Vec<(Vec<u8>, Option<String>)> = conn
            .query(format!(
                "SELECT b, CONVERT(CONVERT(b USING {name}) USING utf8mb4) FROM `{db}`.seq ORDER BY LENGTH(b), b"
            ))
            .await
            .unwrap();
        let mut table = String::new();
        for (bytes, text) in rows {
            let mut chars = text.as_deref().unwrap_or_default().chars();
            let (Some(c), None) = (chars.next(), chars.next()) else {
                continue;
            };
            if (c == '?' && bytes != b"?") || c == '\u{fffd}' {
                continue;
            }
            table.push_str(&format!("{} {:X}\n", hex(&bytes), u32::from(c)));
        }
        if write {
            let path = format!("{}/capture/charsets/{name}.map", env!("CARGO_MANIFEST_DIR"));
            std::fs::write(path, &table).unwrap();
        } else if table != *committed {
            differing.push(*name);
        }
    }
    assert!(
        differing.is_empty(),
        "tables differ from the server's: {differing:?} (regenerate with TRIBUTARY_WRITE_CHARSET_MAPS=1)"
    );
}
