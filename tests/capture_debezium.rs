//! End-to-end tests of Debezium's options (`compat: debezium`, `values:`)
//! against the local stack's MariaDB and broker: every value is compared with
//! what the database itself computes from the stored row, in snapshot and
//! streamed events alike.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use num_bigint::BigInt;
use serde_json::{Value as Json, json};

const WAIT: Duration = Duration::from_secs(60);

/// How an event's value is read back into the text the database's expression gives.
#[derive(Clone, Copy, Debug)]
enum Read {
    /// A JSON string, as it is.
    Text,
    /// A JSON integer, as its decimal text.
    Integer,
    /// A JSON number compared as a double with the expression's double.
    Double,
    /// Connect's Decimal of this scale: base64 of the unscaled value's
    /// two's-complement bytes, read back as decimal text with the scale's digits.
    Decimal(usize),
}

/// Columns whose representation the modes change: (column, definition).
const COLUMNS: &[(&str, &str)] = &[
    ("dec1", "DECIMAL(20,6)"),
    ("dec0", "DECIMAL(5,0)"),
    ("dec65", "DECIMAL(65,30)"),
    ("biu", "BIGINT UNSIGNED"),
    ("tm", "TIME(6)"),
    ("tm0", "TIME"),
    ("dt6", "DATETIME(6)"),
    ("dt3", "DATETIME(3)"),
    ("bin", "BINARY(4)"),
    ("vb", "VARBINARY(10)"),
    ("bl", "BLOB NULL"),
];

const ROWS: &[&str] = &[
    "(1, '-12345678901234.123456', 99999, '-99999999999999999999999999999999999.999999999999999999999999999999', \
      18446744073709551615, '23:59:59.999999', '24:00:00', '1969-12-31 23:59:59.999999', \
      '2024-02-29 12:00:00.123', X'FF', X'FBFF003E', X'00')",
    "(2, '0.000001', -5, '0', 9223372036854775808, '00:00:00', '00:00:01', \
      '2038-01-19 03:14:08.123456', '1900-01-01 00:00:00.001', X'00000000', X'', NULL)",
    "(3, '-0.000001', 0, '0.000000000000000000000000000001', 0, '12:34:56.789999', '01:02:03', \
      '1970-01-01 00:00:00.000999', '1970-01-01 00:00:00.000', X'01020304', X'FFFFFFFFFFFFFFFFFFFF', X'3E3F')",
];

/// The table of [`COLUMNS`] in a fresh database, with `rows` of [`ROWS`] in it.
async fn modes_table(conn: &mut mysql_async::Conn, rows: &[&str]) -> String {
    let db = create_db(conn, "dbzmodes").await;
    let columns: Vec<String> = COLUMNS
        .iter()
        .map(|(c, def)| format!("`{c}` {def}"))
        .collect();
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (id INT PRIMARY KEY, {})",
        columns.join(", ")
    ))
    .await
    .unwrap();
    insert(conn, &db, rows).await;
    db
}

async fn insert(conn: &mut mysql_async::Conn, db: &str, rows: &[&str]) {
    if !rows.is_empty() {
        conn.query_drop(format!("INSERT INTO `{db}`.t VALUES {}", rows.join(", ")))
            .await
            .unwrap();
    }
}

/// A fresh database (`prefix`…) with the tables `ddl` creates (`DB` stands
/// for its name), captured from now on with the extra `options`.
async fn capture_from_now(
    conn: &mut mysql_async::Conn,
    prefix: &str,
    ddl: &str,
    options: &str,
) -> (String, CaptureSetup, TributaryProcess) {
    let db = create_db(conn, prefix).await;
    if !ddl.is_empty() {
        conn.query_drop(ddl.replace("DB", &db)).await.unwrap();
    }
    let mut setup = CaptureSetup::new(&db, &gtid_now(conn).await);
    setup.extra = options.into();
    let capture = TributaryProcess::capture(&setup.yaml());
    (db, setup, capture)
}

/// The payload of a record written with schemas (`{"schema", "payload"}`), else the record.
fn payload(json: &Json) -> &Json {
    match (json.get("schema"), json.get("payload")) {
        (Some(_), Some(payload)) => payload,
        _ => json,
    }
}

/// An event's value as the text its [`Read`] compares.
fn read_back(read: Read, value: &Json) -> Option<String> {
    use base64::Engine as _;
    match (read, value) {
        (_, Json::Null) => None,
        (Read::Text, Json::String(s)) => Some(s.clone()),
        (Read::Integer, Json::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        (Read::Double, Json::Number(n)) => Some(n.as_f64().unwrap().to_string()),
        (Read::Decimal(scale), Json::String(s)) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
            let unscaled = BigInt::from_signed_bytes_be(&bytes);
            let digits = format!("{:0>width$}", unscaled.magnitude(), width = scale + 1);
            let sign = if unscaled < BigInt::ZERO { "-" } else { "" };
            let (whole, fraction) = digits.split_at(digits.len() - scale);
            Some(match scale {
                0 => format!("{sign}{whole}"),
                _ => format!("{sign}{whole}.{fraction}"),
            })
        }
        (read, other) => panic!("{other} is not what {read:?} reads"),
    }
}

/// Captures the table (a snapshot of row 1, then rows 2 and 3 streamed) with
/// `options` and checks every column of every event against `expected`:
/// (column, SQL expression computing the expected text from the stored row, how to read the event).
async fn check_modes(options: &str, expected: &[(&str, &str, Read)]) -> Vec<Record> {
    let mut conn = root_conn().await;
    let db = modes_table(&mut conn, &ROWS[..1]).await;
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(10);
    setup.extra = options.into();
    let capture = TributaryProcess::capture(&setup.yaml());
    let topic = setup.topic("t");
    read_topic(&topic, WAIT, |r| !r.is_empty()).await;
    insert(&mut conn, &db, &ROWS[1..]).await;
    let records = read_topic(&topic, WAIT, |r| r.len() >= ROWS.len()).await;
    assert_eq!(records.len(), ROWS.len(), "log:\n{}", capture.log());
    let exprs: Vec<String> = expected
        .iter()
        .map(|(_, e, _)| format!("CAST({e} AS CHAR)"))
        .collect();
    let rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SELECT id, {} FROM `{db}`.t ORDER BY id",
            exprs.join(", ")
        ))
        .await
        .unwrap();
    for row in rows {
        let id: i64 = row.get(0).unwrap();
        let record = records
            .iter()
            .find(|r| *payload(&r.key) == json!({ "id": id }))
            .expect("an event per row");
        let event = payload(record.value.as_ref().unwrap());
        assert_eq!(event["op"], if id == 1 { "r" } else { "c" });
        for (i, (column, expr, read)) in expected.iter().enumerate() {
            let mut want: Option<String> = row.get(i + 1).unwrap();
            if let (Read::Double, Some(text)) = (read, &want) {
                want = Some(text.parse::<f64>().unwrap().to_string());
            }
            assert_eq!(
                read_back(*read, &event["after"][*column]),
                want,
                "row {id}, column {column} ({expr}): {}",
                event["after"][*column]
            );
        }
    }
    records
}

#[tokio::test(flavor = "multi_thread")]
async fn debeziums_defaults_and_connect_times_and_hex_binaries() {
    let records = check_modes(
        "compat: debezium\nvalues: { time.precision.mode: connect, binary.handling.mode: hex }\n",
        &[
            // decimal.handling.mode=precise (Debezium's default).
            ("dec1", "dec1", Read::Decimal(6)),
            ("dec0", "dec0", Read::Decimal(0)),
            ("dec65", "dec65", Read::Decimal(30)),
            // bigint.unsigned.handling.mode=long (Debezium's default): wraps.
            ("biu", "CAST(biu AS SIGNED)", Read::Integer),
            // time.precision.mode=connect: milliseconds, rounded down.
            ("tm", "FLOOR(TIME_TO_SEC(tm) * 1000)", Read::Integer),
            ("tm0", "TIME_TO_SEC(tm0) * 1000", Read::Integer),
            (
                "dt6",
                "FLOOR(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', dt6) / 1000)",
                Read::Integer,
            ),
            (
                "dt3",
                "FLOOR(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', dt3) / 1000)",
                Read::Integer,
            ),
            // binary.handling.mode=hex: lowercase, BINARY(n) padded.
            ("bin", "LOWER(HEX(bin))", Read::Text),
            ("vb", "LOWER(HEX(vb))", Read::Text),
            ("bl", "LOWER(HEX(bl))", Read::Text),
        ],
    )
    .await;
    // provide.transaction.metadata=false and JSON with schemas (Debezium's defaults).
    for record in &records {
        let value = record.value.as_ref().unwrap();
        assert!(value["schema"].is_object(), "{value}");
        assert_eq!(value["payload"]["transaction"], Json::Null, "{value}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn double_decimals_precise_bigints_and_url_safe_binaries() {
    let records = check_modes(
        "values: { decimal.handling.mode: double, bigint.unsigned.handling.mode: precise, \
         binary.handling.mode: base64-url-safe }\n",
        &[
            ("dec1", "CAST(dec1 AS DOUBLE)", Read::Double),
            ("dec0", "CAST(dec0 AS DOUBLE)", Read::Double),
            ("dec65", "CAST(dec65 AS DOUBLE)", Read::Double),
            ("biu", "biu", Read::Decimal(0)),
            // time.precision.mode=adaptive_time_microseconds (both defaults).
            (
                "tm",
                "CAST(ROUND(TIME_TO_SEC(tm) * 1000000) AS SIGNED)",
                Read::Integer,
            ),
            (
                "dt6",
                "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', dt6)",
                Read::Integer,
            ),
            (
                "bin",
                "REPLACE(REPLACE(TO_BASE64(bin), '+', '-'), '/', '_')",
                Read::Text,
            ),
            (
                "vb",
                "REPLACE(REPLACE(TO_BASE64(vb), '+', '-'), '/', '_')",
                Read::Text,
            ),
        ],
    )
    .await;
    // Tributary's default for what is not set: streamed events carry their
    // transaction block (snapshot reads belong to none).
    let streamed: Vec<_> = events(&records)
        .into_iter()
        .filter(|e| e["op"] == "c")
        .collect();
    assert_eq!(streamed.len(), 2);
    for event in streamed {
        assert!(event["transaction"]["id"].is_string(), "{event}");
    }
}

/// With `compat: debezium` records are the JsonConverter's `{"schema",
/// "payload"}` (its default `schemas.enable=true`): every column's field has
/// the Connect type Debezium gives it, `optional` as the database says the
/// column is nullable, in table order; names follow `<prefix>.<db>.<table>`.
#[tokio::test(flavor = "multi_thread")]
async fn records_carry_debeziums_connect_schemas() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzschema").await;
    // (column, definition, Connect type, semantic name)
    let columns: &[(&str, &str, &str, Option<&str>)] = &[
        ("id", "INT NOT NULL", "int32", None),
        ("name", "VARCHAR(20) NOT NULL", "string", None),
        ("note", "TEXT NULL", "string", None),
        (
            "price",
            "DECIMAL(10,2) NULL",
            "bytes",
            Some("org.apache.kafka.connect.data.Decimal"),
        ),
        (
            "at",
            "DATETIME(6) NULL",
            "int64",
            Some("io.debezium.time.MicroTimestamp"),
        ),
        ("flag", "BIT(1) NULL", "boolean", None),
        ("big", "BIGINT UNSIGNED NOT NULL", "int64", None),
    ];
    let defs: Vec<String> = columns
        .iter()
        .map(|(c, d, ..)| format!("`{c}` {d}"))
        .collect();
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t ({}, PRIMARY KEY (id))",
        defs.join(", ")
    ))
    .await
    .unwrap();
    insert_row(&mut conn, &db, 1).await;
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(10);
    setup.extra = "compat: debezium\n".into();
    let capture = TributaryProcess::capture(&setup.yaml());
    let topic = setup.topic("t");
    read_raw(&topic, WAIT, |r| !r.is_empty()).await;
    insert_row(&mut conn, &db, 2).await;
    let records = read_raw(&topic, WAIT, |r| r.len() >= 2).await;
    assert_eq!(records.len(), 2, "log:\n{}", capture.log());

    let nullable: Vec<(String, String)> = conn
        .query(format!(
            "SELECT COLUMN_NAME, IS_NULLABLE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION"
        ))
        .await
        .unwrap();
    let prefix = format!("{}.{db}.t", setup.server_name);
    for record in &records {
        let key: Json = serde_json::from_slice(record.key.as_deref().unwrap()).unwrap();
        assert_eq!(
            key["schema"],
            json!({"type": "struct", "fields": [{"type": "int32", "optional": false, "field": "id"}],
                   "optional": false, "name": format!("{prefix}.Key")})
        );
        let value = record.json();
        let schema = &value["schema"];
        assert_eq!(schema["name"], format!("{prefix}.Envelope"));
        assert_eq!(schema["version"], 2);
        let envelope_fields: Vec<&str> = schema["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap())
            .collect();
        assert_eq!(
            envelope_fields,
            [
                "before",
                "after",
                "source",
                "transaction",
                "op",
                "ts_ms",
                "ts_us",
                "ts_ns"
            ]
        );
        let after = &schema["fields"][1];
        assert_eq!(after["name"], format!("{prefix}.Value"));
        let fields = after["fields"].as_array().unwrap();
        assert_eq!(fields.len(), nullable.len());
        for (field, ((column, is_nullable), (_, def, ty, name))) in
            fields.iter().zip(nullable.iter().zip(columns))
        {
            assert_eq!(field["field"], column.as_str());
            assert_eq!(field["optional"], is_nullable == "YES", "{column} ({def})");
            assert_eq!(field["type"], *ty, "{column} ({def})");
            assert_eq!(field["name"].as_str(), *name, "{column} ({def})");
        }
        let payload = &value["payload"];
        let id = payload["after"]["id"].as_i64().unwrap();
        assert_eq!(key["payload"], json!({ "id": id }));
        let (price, big): (String, String) = conn
            .query_first(format!(
                "SELECT CAST(price AS CHAR), CAST(CAST(big AS SIGNED) AS CHAR) FROM `{db}`.t WHERE id = {id}"
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            read_back(Read::Decimal(2), &payload["after"]["price"]),
            Some(price)
        );
        assert_eq!(
            read_back(Read::Integer, &payload["after"]["big"]),
            Some(big)
        );
        assert_eq!(payload["transaction"], Json::Null);
    }
}

async fn insert_row(conn: &mut mysql_async::Conn, db: &str, id: i64) {
    conn.query_drop(format!(
        "INSERT INTO `{db}`.t VALUES ({id}, 'n{id}', NULL, -{id}.05, '2024-01-02 03:04:05.123456', b'1', \
         18446744073709551615 - {id})"
    ))
    .await
    .unwrap();
}

/// `columns:` (Debezium's `column.*`): an excluded column leaves the value and
/// its schema, masks and truncations change values as the database's own
/// `REPEAT`/`LEFT` say, a hash is MariaDB's `SHA2` of salt and value (cut to
/// the column's length), the key keeps its column; snapshot and stream alike.
#[tokio::test(flavor = "multi_thread")]
async fn columns_are_excluded_masked_hashed_and_truncated() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzcols").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (id INT PRIMARY KEY, email VARCHAR(20), ssn VARCHAR(11), \
         bio TEXT, secret VARCHAR(10), note VARCHAR(40) NULL) DEFAULT CHARSET=utf8mb4"
    ))
    .await
    .unwrap();
    let insert = |id: i64| {
        format!(
            "INSERT INTO `{db}`.t VALUES ({id}, 'u{id}@example.org', '123-45-{id:04}', \
             'a biography of user {id}, grüße', 'pw{id}', NULL)"
        )
    };
    conn.query_drop(insert(1)).await.unwrap();
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(10);
    setup.extra = format!(
        "compat: debezium\n\
         columns:\n\
         \x20 column.exclude.list: '{db}\\.t\\.secret'\n\
         \x20 column.mask.with.4.chars: '{db}.t.ssn, {db}.t.id'\n\
         \x20 column.truncate.to.5.chars: '{db}.T.BIO'\n\
         \x20 column.mask.hash.v2.SHA-256.with.salt.pepper: '{db}.t.email'\n"
    );
    let capture = TributaryProcess::capture(&setup.yaml());
    let topic = setup.topic("t");
    read_raw(&topic, WAIT, |r| !r.is_empty()).await;
    conn.query_drop(insert(2)).await.unwrap();
    let records = read_raw(&topic, WAIT, |r| r.len() >= 2).await;
    assert_eq!(records.len(), 2, "log:\n{}", capture.log());
    for record in &records {
        let key: Json = serde_json::from_slice(record.key.as_deref().unwrap()).unwrap();
        let value = record.json();
        let after = &value["payload"]["after"];
        let id = after["id"].as_i64().unwrap();
        assert_eq!(
            key["payload"],
            json!({ "id": id }),
            "the key is never masked"
        );
        let (email, ssn, bio, note): (String, String, String, Option<String>) = conn
            .query_first(format!(
                "SELECT LEFT(SHA2(CONCAT('pepper', email), 256), 20), REPEAT('*', 4), LEFT(bio, 5), note \
                 FROM `{db}`.t WHERE id = {id}"
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            after,
            &json!({ "id": id, "email": email, "ssn": ssn, "bio": bio, "note": note }),
            "id is an INT: masks apply to text only"
        );
        let fields = value["schema"]["fields"][1]["fields"].as_array().unwrap();
        let field = |name: &str| fields.iter().find(|f| f["field"] == name).cloned();
        assert_eq!(field("secret"), None, "excluded from the schema too");
        assert_eq!(
            field("email").unwrap()["parameters"],
            json!({ "masked": "true" })
        );
        assert_eq!(
            field("ssn").unwrap()["parameters"],
            json!({ "masked": "true" })
        );
        assert_eq!(
            field("bio").unwrap()["parameters"],
            json!({ "truncateLength": "5" })
        );
    }
    assert!(
        !capture.log().contains("pepper"),
        "the salt is never logged:\n{}",
        capture.log()
    );
}

/// An update of the key is a delete of the old key (and its tombstone) naming
/// the new key in `__debezium.newkey`, then a create naming the old one in
/// `__debezium.oldkey`, as Kafka Connect's default header converter writes a
/// key struct; with `compat: debezium` every record carries Debezium's context
/// headers too.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_change_names_the_other_key_in_debeziums_headers() {
    let mut conn = root_conn().await;
    let (db, setup, capture) = capture_from_now(
        &mut conn,
        "dbzkeys",
        "CREATE TABLE `DB`.t (id INT, tag VARCHAR(10), v INT, PRIMARY KEY (id, tag))",
        "compat: debezium\nconverter: { schemas.enable: false }\n",
    )
    .await;
    for sql in [
        "INSERT INTO `DB`.t VALUES (1, 'a\"b', 10)",
        "UPDATE `DB`.t SET id = 2 WHERE id = 1",
    ] {
        conn.query_drop(sql.replace("DB", &db)).await.unwrap();
    }
    let records = read_raw(&setup.topic("t"), WAIT, |r| r.len() >= 4).await;
    assert_eq!(records.len(), 4, "log:\n{}", capture.log());
    // Keys 1 and 2 may be on different partitions: find each record by what it is.
    let what = |r: &RawRecord| {
        let key: Json = serde_json::from_slice(r.key.as_deref().unwrap()).unwrap();
        let op = match &r.value {
            Some(_) => r.json()["op"].as_str().unwrap().to_owned(),
            None => "tombstone".to_owned(),
        };
        (key["id"].as_i64().unwrap(), op)
    };
    let at = |id: i64, op: &str| {
        records
            .iter()
            .position(|r| what(r) == (id, op.to_owned()))
            .unwrap_or_else(|| panic!("no {op} of key {id}"))
    };
    let order = [at(1, "c"), at(1, "d"), at(1, "tombstone"), at(2, "c")];
    let records: Vec<&RawRecord> = order.iter().map(|&i| &records[i]).collect();
    let header = |i: usize, name: &str| records[i].headers.get(name).cloned();
    let (old_key, new_key) = (r#"{"id":1,"tag":"a\"b"}"#, r#"{"id":2,"tag":"a\"b"}"#);
    assert_eq!(header(0, "__debezium.newkey"), None);
    assert_eq!(header(0, "__debezium.oldkey"), None);
    assert_eq!(header(1, "__debezium.newkey").as_deref(), Some(new_key));
    assert_eq!(
        header(2, "__debezium.newkey").as_deref(),
        Some(new_key),
        "the tombstone too"
    );
    assert_eq!(header(3, "__debezium.oldkey").as_deref(), Some(old_key));
    assert_eq!(header(3, "__debezium.newkey"), None);
    let run = header(0, "__debezium.context.runId").unwrap();
    for i in 0..4 {
        assert_eq!(
            header(i, "__debezium.context.connectorLogicalName").as_deref(),
            Some(setup.server_name.as_str())
        );
        assert_eq!(header(i, "__debezium.context.taskId").as_deref(), Some("0"));
        assert_eq!(
            header(i, "__debezium.context.connectorName").as_deref(),
            Some("mysql")
        );
        assert_eq!(
            header(i, "__debezium.context.runId").as_deref(),
            Some(run.as_str())
        );
    }
    assert_eq!(run.len(), 36, "a UUID: {run}");
}

/// `provide.transaction.metadata: true`: `<server_name>.transaction` gets a
/// BEGIN record before each transaction's first event and an END record with
/// its counts (per table as the database's own rows say) after its last; the
/// events' `transaction` blocks name the same ids.
#[tokio::test(flavor = "multi_thread")]
async fn transactions_have_begin_and_end_records_on_the_transaction_topic() {
    let mut conn = root_conn().await;
    let (db, setup, capture) = capture_from_now(
        &mut conn,
        "dbztxn",
        "CREATE TABLE `DB`.a (id INT PRIMARY KEY); CREATE TABLE `DB`.b (id INT PRIMARY KEY)",
        "events: { provide.transaction.metadata: true }\n",
    )
    .await;
    for sql in [
        "BEGIN; INSERT INTO `DB`.a VALUES (1), (2); INSERT INTO `DB`.b VALUES (1); COMMIT",
        "INSERT INTO `DB`.b VALUES (2), (3)",
    ] {
        conn.query_drop(sql.replace("DB", &db)).await.unwrap();
    }
    let topic = format!("{}.transaction", setup.server_name);
    let records = read_raw(&topic, WAIT, |r| r.len() >= 4).await;
    assert_eq!(records.len(), 4, "log:\n{}", capture.log());
    let values: Vec<Json> = records.iter().map(RawRecord::json).collect();
    let statuses: Vec<&str> = values
        .iter()
        .map(|v| v["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["BEGIN", "END", "BEGIN", "END"]);
    let mut events = read_topic(&setup.topic("a"), WAIT, |r| r.len() >= 2).await;
    events.extend(read_topic(&setup.topic("b"), WAIT, |r| r.len() >= 3).await);
    for (i, tables) in [(0, ["a", "b"].as_slice()), (2, ["b"].as_slice())] {
        let (begin, end) = (&values[i], &values[i + 1]);
        let id = begin["id"].as_str().unwrap();
        assert_eq!(end["id"], id);
        let key: Json = serde_json::from_slice(records[i].key.as_deref().unwrap()).unwrap();
        assert_eq!(key, json!({ "id": id }));
        assert_eq!(begin["event_count"], Json::Null);
        // The events of this transaction, by their own blocks.
        let mine: Vec<&Json> = events
            .iter()
            .filter_map(|r| r.value.as_ref())
            .filter(|v| v["transaction"]["id"] == id)
            .collect();
        assert_eq!(end["event_count"], mine.len(), "{end}");
        let mut expected = Vec::new();
        for table in tables {
            let count: i64 = conn
                .query_first(format!(
                    "SELECT COUNT(*) FROM `{db}`.{table} WHERE id IN (1, 2, 3)"
                ))
                .await
                .unwrap()
                .unwrap();
            let in_txn = mine
                .iter()
                .filter(|v| v["source"]["table"] == *table)
                .count() as i64;
            assert!(in_txn <= count);
            expected
                .push(json!({ "data_collection": format!("{db}.{table}"), "event_count": in_txn }));
        }
        assert_eq!(end["data_collections"], Json::Array(expected));
    }
    assert_eq!(values[1]["event_count"], 3);
    assert_eq!(values[3]["event_count"], 2);
}

/// With `include.query`, each streamed row carries, in `source.query`, the
/// statement that changed it, as the client sent it (MariaDB's ANNOTATE_ROWS
/// events, which capture lists with SHOW BINLOG EVENTS): two statements of
/// one transaction, a statement that changes a captured and an uncaptured
/// table, non-ASCII text, a transaction of 600 statements (several listing
/// windows), and a statement logged without its text (null, not the one
/// before it).
#[tokio::test(flavor = "multi_thread")]
async fn with_include_query_each_row_carries_the_statement_that_changed_it() {
    let mut conn = root_conn().await;
    let other = create_db(&mut conn, "dbzqother").await;
    conn.query_drop(format!(
        "CREATE TABLE `{other}`.o (id INT PRIMARY KEY, n INT); INSERT INTO `{other}`.o VALUES (1, 0)"
    ))
    .await
    .unwrap();
    let (db, setup, capture) = capture_from_now(
        &mut conn,
        "dbzquery",
        "CREATE TABLE `DB`.a (id INT PRIMARY KEY, v VARCHAR(40)) CHARACTER SET utf8mb4",
        "events: { include.query: true }\n",
    )
    .await;
    // (id, v after the statement, the statement)
    let mut expected: Vec<(i64, String, Option<String>)> = Vec::new();
    let mut run = async |sql: String, id: i64, v: &str, logged: bool| {
        conn.query_drop(&sql).await.unwrap();
        expected.push((id, v.to_owned(), logged.then_some(sql)));
    };
    run("BEGIN".into(), 0, "", false).await;
    let insert = format!("INSERT INTO `{db}`.a VALUES (1, 'héllo wörld ✓')");
    run(insert, 1, "héllo wörld ✓", true).await;
    let update = format!("UPDATE `{db}`.a SET v = CONCAT(v, '!') WHERE id = 1");
    run(update, 1, "héllo wörld ✓!", true).await;
    run("COMMIT".into(), 0, "", false).await;
    let joined = format!(
        "UPDATE `{other}`.o JOIN `{db}`.a ON o.id = a.id SET o.n = o.n + 1, a.v = 'joined'"
    );
    run(joined, 1, "joined", true).await;
    run("BEGIN".into(), 0, "", false).await;
    for id in 100..700 {
        let insert = format!("INSERT INTO `{db}`.a VALUES ({id}, 'row {id}')");
        run(insert, id, &format!("row {id}"), true).await;
    }
    run("COMMIT".into(), 0, "", false).await;
    run(
        "SET SESSION binlog_annotate_row_events = OFF".into(),
        0,
        "",
        false,
    )
    .await;
    let unannotated = format!("INSERT INTO `{db}`.a VALUES (5, 'no text')");
    run(unannotated, 5, "no text", false).await;
    expected.retain(|(id, _, _)| *id != 0);

    let events = read_topic(&setup.topic("a"), WAIT, |r| r.len() >= 603).await;
    let found: Vec<(i64, String, Option<String>)> = events
        .iter()
        .filter_map(|r| r.value.as_ref())
        .map(|v| {
            let after = &v["after"];
            (
                after["id"].as_i64().unwrap(),
                after["v"].as_str().unwrap().to_owned(),
                v["source"]["query"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let sorted = |mut rows: Vec<(i64, String, Option<String>)>| {
        rows.sort();
        rows
    };
    assert_eq!(sorted(found), sorted(expected), "log:\n{}", capture.log());
}

/// With `compat: debezium` an idle source's heartbeats are Debezium's:
/// `__debezium-heartbeat.<server_name>`, key `{"serverName"}`, value `{"ts_ms"}`.
#[tokio::test(flavor = "multi_thread")]
async fn heartbeats_are_debeziums_with_compat_debezium() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzhb").await;
    let mut setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    setup.extra = "compat: debezium\nconverter: { schemas.enable: false }\n".into();
    let yaml = setup
        .yaml()
        .replace("server_id:", "heartbeat_s: 1, server_id:");
    let capture = TributaryProcess::capture(&yaml);
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let topic = format!("__debezium-heartbeat.{}", setup.server_name);
    let records = read_raw(&topic, WAIT, |r| !r.is_empty()).await;
    assert!(!records.is_empty(), "log:\n{}", capture.log());
    let key: Json = serde_json::from_slice(records[0].key.as_deref().unwrap()).unwrap();
    assert_eq!(key, json!({ "serverName": setup.server_name }));
    let value = records[0].json();
    assert_eq!(value.as_object().unwrap().len(), 1, "{value}");
    let ts = value["ts_ms"].as_i64().unwrap();
    assert!(
        (started - 60_000..started + 60_000).contains(&ts),
        "{ts} vs {started}"
    );
}

/// Columns with defaults: (column, definition). The server computes each
/// literal default into the row `INSERT … (id) VALUES (1)` stores.
const DEFAULTED: &[(&str, &str)] = &[
    ("i", "INT DEFAULT -5"),
    ("ti", "TINYINT(1) DEFAULT 1"),
    ("bu", "BIGINT UNSIGNED DEFAULT 7"),
    ("d", "DECIMAL(5,2) DEFAULT 1.5"),
    ("f", "FLOAT DEFAULT 1.1"),
    ("db", "DOUBLE DEFAULT 1e20"),
    ("s", "VARCHAR(20) DEFAULT 'it''s \\\\ x'"),
    ("e", "ENUM('x','y') DEFAULT 'y'"),
    ("st", "SET('a','b') DEFAULT 'a,b'"),
    ("g", "BIT(3) DEFAULT b'101'"),
    ("b1", "BIT(1) DEFAULT b'1'"),
    ("dt", "DATE DEFAULT '2020-01-02'"),
    ("dtt", "DATETIME(3) DEFAULT '2021-02-03 04:05:06.789'"),
    ("ts", "TIMESTAMP(2) NULL DEFAULT '2020-01-01 01:02:03.45'"),
    ("tm", "TIME DEFAULT '-01:02:03'"),
    ("y", "YEAR DEFAULT 2024"),
    ("vb", "VARBINARY(4) DEFAULT 'ab'"),
];

/// A capture behind an `ALTER … SET DEFAULT` declares, for the rows before
/// it, the default of their time (the replayed table's), and replaces their
/// NULLs with it.
#[tokio::test(flavor = "multi_thread")]
async fn rows_before_an_alter_set_default_declare_the_default_of_their_time() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzdefaultlag").await;
    let before = gtid_now(&mut conn).await;
    // Rows 10 and 20 take the defaults of their time: the expected values.
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT DEFAULT 1, s VARCHAR(5) DEFAULT 'old'); \
         INSERT INTO `{db}`.t VALUES (1, NULL, NULL); INSERT INTO `{db}`.t (id) VALUES (10); \
         ALTER TABLE `{db}`.t ALTER COLUMN v SET DEFAULT 2, ALTER COLUMN s SET DEFAULT 'new'; \
         INSERT INTO `{db}`.t VALUES (2, NULL, NULL); INSERT INTO `{db}`.t (id) VALUES (20)"
    ))
    .await
    .unwrap();
    let stored: Vec<(i64, i64, String)> = conn
        .query(format!(
            "SELECT id, v, s FROM `{db}`.t WHERE id IN (10, 20) ORDER BY id"
        ))
        .await
        .unwrap();
    assert_ne!(stored[0].1, stored[1].1, "the default changed");
    // Capture starts only now, from before the table was created.
    let mut setup = CaptureSetup::new(&db, &before);
    setup.extra = "compat: debezium\n".into();
    let capture = TributaryProcess::capture(&setup.yaml());
    let records = read_raw(&setup.topic("t"), WAIT, |r| r.len() >= 4).await;
    assert_eq!(records.len(), 4, "log:\n{}", capture.log());
    for (row, (_, v, s)) in [1, 2].into_iter().zip(&stored) {
        let record = records
            .iter()
            .map(RawRecord::json)
            .find(|r| r["payload"]["after"]["id"] == row)
            .expect("an event per row");
        let after = &record["payload"]["after"];
        assert_eq!(
            (&after["v"], &after["s"]),
            (&json!(v), &json!(s)),
            "row {row}"
        );
        let fields = record["schema"]["fields"][1]["fields"]
            .as_array()
            .unwrap()
            .clone();
        let default =
            |name: &str| fields.iter().find(|f| f["field"] == name).unwrap()["default"].clone();
        assert_eq!(
            (default("v"), default("s")),
            (json!(v), json!(s)),
            "row {row}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn column_defaults_are_declared_and_replace_nulls_as_the_json_converter_does() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzdefault").await;
    let defs: Vec<String> = DEFAULTED
        .iter()
        .map(|(c, d)| format!("`{c}` {d}"))
        .collect();
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (id INT PRIMARY KEY, {}, \
         nn VARCHAR(5) NULL, ex INT DEFAULT (1 + 2), \
         cur DATETIME DEFAULT CURRENT_TIMESTAMP, \
         tsn TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, \
         zd DATE NOT NULL DEFAULT '2020-01-02', zn DATE NULL, \
         zdt DATETIME NOT NULL DEFAULT '2021-02-03 04:05:06', zne DATE NOT NULL); \
         INSERT INTO `{db}`.t (id, zne) VALUES (1, '1999-12-31');",
        defs.join(", ")
    ))
    .await
    .unwrap();
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(10);
    setup.extra = "compat: debezium\n".into();
    let capture = TributaryProcess::capture(&setup.yaml());
    let topic = setup.topic("t");
    read_raw(&topic, WAIT, |r| !r.is_empty()).await;
    // Every nullable column NULL.
    let nulls: Vec<&str> = DEFAULTED
        .iter()
        .map(|(c, _)| *c)
        .chain(["nn", "ex", "cur"])
        .collect();
    conn.query_drop(format!(
        "INSERT INTO `{db}`.t (id, zne, {}) VALUES (2, '1999-12-31', {})",
        nulls.join(", "),
        vec!["NULL"; nulls.len()].join(", ")
    ))
    .await
    .unwrap();
    // Zero dates (allowed without NO_ZERO_DATE): the epoch or the default in
    // NOT NULL columns, NULL in nullable ones, as Debezium's converters write them.
    conn.query_drop(format!(
        "SET SESSION sql_mode = ''; \
         INSERT INTO `{db}`.t (id, zd, zn, zdt, zne) \
         VALUES (3, '0000-00-00', '0000-00-00', '0000-00-00 00:00:00', '2020-00-05'); \
         SET SESSION sql_mode = DEFAULT"
    ))
    .await
    .unwrap();
    let records = read_raw(&topic, WAIT, |r| r.len() >= 3).await;
    assert_eq!(records.len(), 3, "log:\n{}", capture.log());
    let of_row = |id: i64| {
        records
            .iter()
            .map(RawRecord::json)
            .find(|r| r["payload"]["after"]["id"] == id)
            .expect("an event per row")
    };
    let (snapshot, streamed) = (of_row(1), of_row(2));
    // Doubles as Kafka's JsonConverter writes them (Java's Double.toString),
    // in the row and in the schema's default.
    let snapshot_text = records
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
        .find(|text| text.contains(r#""after":{"id":1,"#))
        .expect("the snapshot row's record");
    assert!(snapshot_text.contains(r#""db":1.0E20,"#), "{snapshot_text}");
    assert!(
        snapshot_text.contains(r#""default":1.0E20,"field":"db""#),
        "{snapshot_text}"
    );
    let defaults_row = &snapshot["payload"]["after"];
    let fields = snapshot["schema"]["fields"][1]["fields"]
        .as_array()
        .unwrap();
    let field = |name: &str| fields.iter().find(|f| f["field"] == name).unwrap().clone();
    for (column, definition) in DEFAULTED {
        // The schema declares what the server stored for DEFAULT…
        assert_eq!(
            field(column)["default"],
            defaults_row[*column],
            "{column} {definition}: {}",
            field(column)
        );
        // …after the parameters, before the field name, as the JsonConverter orders them.
        let keys: Vec<String> = field(column).as_object().unwrap().keys().cloned().collect();
        let at = keys.iter().position(|k| k == "default").unwrap();
        assert_eq!(&keys[at + 1..], ["field"], "{column}: {keys:?}");
        // …and a NULL is written as that default (replace.null.with.default).
        assert_eq!(
            streamed["payload"]["after"][*column], defaults_row[*column],
            "{column} {definition}"
        );
    }
    // No default declared: no DEFAULT, an expression.
    for column in ["nn", "ex"] {
        assert!(field(column).get("default").is_none(), "{}", field(column));
        assert_eq!(streamed["payload"]["after"][column], Json::Null, "{column}");
    }
    // CURRENT_TIMESTAMP: the epoch, as Debezium declares it.
    assert_eq!(field("cur")["default"], 0);
    assert_eq!(streamed["payload"]["after"]["cur"], 0);
    assert_eq!(field("tsn")["default"], "1970-01-01T00:00:00Z");
    // The server's own current time in a NOT NULL column is never replaced.
    assert_ne!(streamed["payload"]["after"]["tsn"], "1970-01-01T00:00:00Z");
    let zeros = &of_row(3)["payload"]["after"];
    let (zd, zdt): (i64, i64) = conn
        .query_first(format!(
            "SELECT DATEDIFF(zd, '1970-01-01'), TIMESTAMPDIFF(SECOND, '1970-01-01', zdt) * 1000 \
             FROM `{db}`.t WHERE id = 1"
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        zeros["zd"], zd,
        "a zero date in a NOT NULL column with a default"
    );
    assert_eq!(zeros["zdt"], zdt, "the same, DATETIME");
    assert_eq!(
        zeros["zne"], 0,
        "a zero date in a NOT NULL column without a default"
    );
    assert_eq!(zeros["zn"], Json::Null, "a zero date in a nullable column");
}

/// The records of `topic` about database `db`, parsed (the topic also holds
/// other databases' DDL, as Debezium's does).
async fn schema_changes_of(topic: &str, db: &str, count: usize) -> Vec<Json> {
    fn about(r: &RawRecord, db: &str) -> bool {
        r.json()["payload"]["databaseName"] == db
    }
    let owned = db.to_owned();
    let records = read_raw(topic, WAIT, move |r| {
        r.iter().filter(|r| about(r, &owned)).count() >= count
    })
    .await;
    records
        .iter()
        .filter(|r| about(r, db))
        .map(RawRecord::json)
        .collect()
}

/// The table each statement leaves, as the server's catalog shows it right
/// after the statement: the schema change topic's `table` for Debezium's
/// MySQL and MariaDB connectors, and the column names in catalog order.
struct Described {
    ddl: String,
    table: String,
    /// `None`: dropped.
    definitions: Option<[Json; 2]>,
    columns: Vec<String>,
}

/// Runs each `(statement, table it changes)` in `db`, recording what the
/// catalog says of the table right after it.
async fn run_ddl(
    conn: &mut mysql_async::Conn,
    db: &str,
    script: &[(&str, &str)],
    described: &mut Vec<Described>,
) {
    use tributary_capture::schema_change_record::table_json;
    use tributary_capture::table_definition::Flavor;
    use tributary_capture::table_model;
    for (sql, table) in script {
        let sql = sql.replace("DB", db);
        conn.query_drop(&sql).await.unwrap();
        let mut definitions = Vec::new();
        for mariadb_connector in [false, true] {
            let flavor = Flavor { mariadb_connector };
            let definition = table_model::read_definition(conn, db, table, flavor)
                .await
                .unwrap();
            definitions.extend(definition.map(|d| table_json(&d)));
        }
        let columns: Vec<String> = conn
            .exec(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (db, table),
            )
            .await
            .unwrap();
        described.push(Described {
            ddl: sql,
            table: (*table).to_owned(),
            definitions: definitions.try_into().ok(),
            columns,
        });
    }
}

/// The distinct schema change records of `db` (a restart may send one
/// again), once there are `count`.
async fn distinct_schema_changes(topic: &str, db: &str, count: usize) -> Vec<Json> {
    fn distinct(records: &[RawRecord], db: &str) -> Vec<Json> {
        let mut seen = std::collections::BTreeSet::new();
        records
            .iter()
            .map(|r| payload(&r.json()).clone())
            .filter(|p| p["databaseName"] == db)
            .filter(|p| {
                seen.insert((
                    p["source"]["pos"].to_string(),
                    p["source"]["table"].to_string(),
                ))
            })
            .collect()
    }
    let owned = db.to_owned();
    let records = read_raw(topic, WAIT, move |r| distinct(r, &owned).len() >= count).await;
    distinct(&records, db)
}

fn assert_described(records: &[Json], described: &[Described], log: &str) {
    assert_eq!(records.len(), described.len(), "log:\n{log}");
    for (record, expected) in records.iter().zip(described) {
        let what = &expected.ddl;
        assert_eq!(record["ddl"], *what, "log:\n{log}");
        let change = &record["tableChanges"][0];
        assert_eq!(record["source"]["table"], expected.table, "{what}");
        let mariadb = usize::from(record["source"]["connector"] == "mariadb");
        match &expected.definitions {
            None => assert_eq!(
                (&change["type"], &change["table"]),
                (&json!("DROP"), &Json::Null),
                "{what}"
            ),
            Some(definitions) => {
                assert_eq!(change["table"], definitions[mariadb], "{what}\nlog:\n{log}");
                let names: Vec<&str> = change["table"]["columns"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["name"].as_str().unwrap())
                    .collect();
                assert_eq!(names, expected.columns, "{what}");
            }
        }
    }
}

/// A capture that reads DDL after later statements ran (behind, or
/// restarted) describes each table as its statement left it: the DDL is
/// replayed onto the definitions before it, and a restart rebuilds them
/// from the topic's own records at its stored position.
#[tokio::test(flavor = "multi_thread")]
async fn a_capture_behind_its_ddl_describes_each_table_as_the_statement_left_it() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzreplay").await;
    let before = gtid_now(&mut conn).await;
    let mut described = Vec::new();
    let first = [
        (
            "CREATE TABLE `DB`.t (id INT PRIMARY KEY, name VARCHAR(20)) DEFAULT CHARSET=latin1",
            "t",
        ),
        (
            "ALTER TABLE `DB`.t ADD COLUMN price DECIMAL(10,2) NOT NULL DEFAULT 0 AFTER id, ADD note TEXT FIRST",
            "t",
        ),
        (
            "ALTER TABLE `DB`.t MODIFY name VARCHAR(50) CHARACTER SET utf8mb4 NOT NULL DEFAULT 'it''s'",
            "t",
        ),
        (
            "ALTER TABLE `DB`.t CHANGE id item_id BIGINT UNSIGNED NOT NULL AFTER note",
            "t",
        ),
        (
            "ALTER TABLE `DB`.t ALTER COLUMN price SET DEFAULT 5, RENAME COLUMN note TO memo",
            "t",
        ),
        (
            "ALTER TABLE `DB`.t DROP PRIMARY KEY, ADD PRIMARY KEY (item_id, name)",
            "t",
        ),
        ("CREATE TABLE `DB`.u LIKE `DB`.t", "u"),
        (
            "ALTER TABLE `DB`.u ADD COLUMN created DATETIME(3) DEFAULT '2020-1-2 03:04:05.5', \
             ADD flag BOOLEAN DEFAULT 1, ADD e ENUM('a','b') DEFAULT 'b' COMMENT 'choice'",
            "u",
        ),
        ("RENAME TABLE `DB`.t TO `DB`.t2", "t2"),
        ("ALTER TABLE `DB`.t2 DROP COLUMN memo", "t2"),
        ("DROP TABLE `DB`.`u`", "u"),
        (
            "ALTER TABLE `DB`.t2 ADD COLUMN code CHAR(2) CHARACTER SET utf8 COLLATE utf8_bin, \
             MODIFY price DECIMAL(12,3) NOT NULL DEFAULT 1.5 FIRST",
            "t2",
        ),
    ];
    run_ddl(&mut conn, &db, &first, &mut described).await;
    // Capture starts only now, from before the first statement.
    let mut setup = CaptureSetup::new(&db, &before);
    setup.extra = "compat: debezium\n".into();
    let capture = TributaryProcess::capture(&setup.yaml());
    let records = distinct_schema_changes(&setup.server_name, &db, described.len()).await;
    assert_described(&records, &described, &capture.log());
    let (stopped, log) = capture.terminate(WAIT);
    assert!(stopped, "log:\n{log}");
    // While it is stopped, more DDL: the restart must start from the tables
    // as they stood at its stored position.
    let second = [
        (
            "ALTER TABLE `DB`.t2 ADD COLUMN later INT NOT NULL DEFAULT 7",
            "t2",
        ),
        ("ALTER TABLE `DB`.t2 DROP COLUMN code", "t2"),
        (
            "CREATE TABLE `DB`.v (id SERIAL, d DATE DEFAULT '2021-3-4', f FLOAT DEFAULT 2.25, j JSON, \
             u VARCHAR(36) DEFAULT (uuid()), cd DATE DEFAULT CURRENT_DATE, n INT DEFAULT (-1), \
             at DATETIME DEFAULT (NOW()))",
            "v",
        ),
        ("ALTER TABLE `DB`.v MODIFY d DATE NOT NULL", "v"),
    ];
    run_ddl(&mut conn, &db, &second, &mut described).await;
    let capture = TributaryProcess::capture(&setup.yaml());
    let records = distinct_schema_changes(&setup.server_name, &db, described.len()).await;
    assert_described(&records, &described, &capture.log());
    assert!(
        capture
            .log()
            .contains("table definitions rebuilt from the schema change topic"),
        "log:\n{}",
        capture.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ddl_goes_to_debeziums_schema_change_topic_with_each_table_described() {
    let mut conn = root_conn().await;
    let (db, setup, capture) = capture_from_now(
        &mut conn,
        "dbzddl",
        "USE `DB`; CREATE TABLE t (id INT PRIMARY KEY, v INT) DEFAULT CHARSET=latin1",
        "compat: debezium\n",
    )
    .await;
    let topic = setup.server_name.clone();
    // Each statement once capture has recorded the one before (a capture
    // behind its DDL is tested below).
    let create = "CREATE TABLE t2 (id INT PRIMARY KEY AUTO_INCREMENT, \
                  s VARCHAR(20) CHARACTER SET utf8mb4 NOT NULL DEFAULT 'it''s', \
                  d DECIMAL(10,2), e ENUM('a','b'), \
                  ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP) \
                  DEFAULT CHARSET=latin1";
    let statements = [
        create,
        "ALTER TABLE t2 ADD COLUMN n INT NOT NULL COMMENT 'a note'",
        "RENAME TABLE t2 TO t3",
        "DROP TABLE t3",
        "CREATE INDEX i ON t (v)",
        "TRUNCATE TABLE t",
        "DROP INDEX i ON t",
    ];
    for (n, sql) in statements.iter().enumerate() {
        conn.query_drop(*sql).await.unwrap();
        // TRUNCATE is not recorded: wait for it with the next statement.
        if *sql != "TRUNCATE TABLE t" {
            let expected = n + usize::from(n < 5);
            schema_changes_of(&topic, &db, expected).await;
        }
    }
    let records = schema_changes_of(&topic, &db, 6).await;
    assert_eq!(records.len(), 6, "log:\n{}", capture.log());
    let payloads: Vec<&Json> = records.iter().map(|r| &r["payload"]).collect();
    for record in &records {
        assert_eq!(
            record["schema"]["name"],
            "io.debezium.connector.mysql.SchemaChangeValue"
        );
        assert_eq!(record["payload"]["source"]["snapshot"], "false");
        assert_eq!(record["payload"]["schemaName"], Json::Null);
    }
    let ddls: Vec<&str> = payloads
        .iter()
        .map(|p| p["ddl"].as_str().unwrap())
        .collect();
    assert_eq!(
        ddls,
        [
            create,
            statements[1],
            "RENAME TABLE t2 TO t3",
            &*format!("DROP TABLE `{db}`.`t3`"),
            "CREATE INDEX i ON t (v)",
            "DROP INDEX i ON t",
        ]
    );
    let change = |i: usize| payloads[i]["tableChanges"].clone();
    let id = |table: &str| format!("\"{db}\".\"{table}\"");
    // CREATE: the table as Debezium's parser reads MariaDB's SHOW CREATE TABLE.
    let created = change(0);
    assert_eq!(created[0]["type"], "CREATE");
    assert_eq!(created[0]["id"], id("t2"));
    let table = &created[0]["table"];
    assert_eq!(table["defaultCharsetName"], "latin1");
    assert_eq!(table["primaryKeyColumnNames"], json!(["id"]));
    let column = |table: &Json, name: &str| {
        table["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let attributes = |c: &Json| {
        json!([
            c["jdbcType"],
            c["typeName"],
            c["length"],
            c["scale"],
            c["charsetName"],
            c["position"],
            c["optional"],
            c["autoIncremented"],
            c["defaultValueExpression"],
            c["enumValues"]
        ])
    };
    assert_eq!(
        attributes(&column(table, "id")),
        json!([4, "INT", 11, null, null, 1, false, true, null, null])
    );
    assert_eq!(
        attributes(&column(table, "s")),
        json!([
            12, "VARCHAR", 20, null, "utf8mb4", 2, false, false, "it''s", null
        ])
    );
    assert_eq!(
        attributes(&column(table, "d")),
        json!([3, "DECIMAL", 10, 2, null, 3, true, false, null, null])
    );
    assert_eq!(
        attributes(&column(table, "e")),
        json!([
            1,
            "ENUM",
            1,
            null,
            "latin1",
            4,
            true,
            false,
            null,
            ["'a'", "'b'"]
        ])
    );
    assert_eq!(
        attributes(&column(table, "ts")),
        json!([
            2014,
            "TIMESTAMP",
            null,
            null,
            null,
            5,
            false,
            true,
            "1970-01-01 00:00:00",
            null
        ])
    );
    assert_eq!(payloads[0]["source"]["table"], "t2");
    assert_eq!(payloads[0]["source"]["db"], db.as_str());
    // ALTER: the new column; the MySQL connector writes no comments.
    let altered = change(1);
    assert_eq!(
        (altered[0]["type"].clone(), altered[0]["id"].clone()),
        (json!("ALTER"), json!(id("t2")))
    );
    let n = column(&altered[0]["table"], "n");
    assert_eq!(
        (n["position"].clone(), n["comment"].clone()),
        (json!(6), Json::Null)
    );
    // RENAME: an ALTER of the new name.
    assert_eq!(change(2)[0]["type"], "ALTER");
    assert_eq!(change(2)[0]["id"], id("t3"));
    // DROP: no table.
    assert_eq!(
        change(3),
        json!([{ "type": "DROP", "id": id("t3"), "table": null }])
    );
    // A non-unique index changes nothing Debezium models: recorded as it is.
    assert_eq!(change(4), json!([]));
    assert_eq!(payloads[4]["source"]["table"], "");
    // DROP INDEX: an ALTER of the table.
    assert_eq!(change(5)[0]["id"], id("t"));
    let raw = read_raw(&topic, WAIT, |r| !r.is_empty()).await;
    let ours: Vec<&RawRecord> = raw
        .iter()
        .filter(|r| r.json()["payload"]["databaseName"] == db)
        .collect();
    let key: Json = serde_json::from_slice(ours[0].key.as_deref().unwrap()).unwrap();
    assert_eq!(
        key["schema"]["name"],
        "io.debezium.connector.mysql.SchemaChangeKey"
    );
    assert_eq!(key["payload"], json!({ "databaseName": db }));
    // Debezium's context headers, as on change records.
    assert_eq!(
        ours[0]
            .headers
            .get("__debezium.context.connectorLogicalName"),
        Some(&setup.server_name)
    );
    assert_eq!(
        ours[0]
            .headers
            .get("__debezium.context.connectorName")
            .map(String::as_str),
        Some("mysql")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_starts_with_debeziums_schema_records() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzsnapddl").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.a (id INT PRIMARY KEY, s VARCHAR(5)) DEFAULT CHARSET=utf8mb4; \
         CREATE TABLE `{db}`.b (id BIGINT UNSIGNED PRIMARY KEY); \
         CREATE TABLE `{db}`.c (id INT PRIMARY KEY); \
         INSERT INTO `{db}`.a VALUES (1, 'x')"
    ))
    .await
    .unwrap();
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(10);
    // c is not captured, but described, as by Debezium's default
    // (schema.history.internal.store.only.captured.tables.ddl=false).
    setup.extra = format!("compat: debezium\nexclude: {{ tables: ['{db}\\.c'] }}\n");
    let capture = TributaryProcess::capture(&setup.yaml());
    let topic = setup.server_name.clone();
    let records = schema_changes_of(&topic, &db, 9).await;
    assert_eq!(records.len(), 9, "log:\n{}", capture.log());
    // Expected from the server itself.
    let (charset, collation): (String, String) = conn
        .exec_first(
            "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME \
             FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
            (&db,),
        )
        .await
        .unwrap()
        .unwrap();
    let mut shown = Vec::new();
    for table in ["a", "b", "c"] {
        let (_, ddl): (String, String) = conn
            .query_first(format!("SHOW CREATE TABLE `{db}`.{table}"))
            .await
            .unwrap()
            .unwrap();
        shown.push(ddl);
    }
    let ddls: Vec<&str> = records
        .iter()
        .map(|r| r["payload"]["ddl"].as_str().unwrap())
        .collect();
    assert_eq!(
        ddls,
        [
            format!("DROP TABLE IF EXISTS `{db}`.`a`"),
            format!("DROP TABLE IF EXISTS `{db}`.`b`"),
            format!("DROP TABLE IF EXISTS `{db}`.`c`"),
            format!("DROP DATABASE IF EXISTS `{db}`"),
            format!("CREATE DATABASE `{db}` CHARSET {charset} COLLATE {collation}"),
            format!("USE `{db}`"),
            shown[0].clone(),
            shown[1].clone(),
            shown[2].clone(),
        ]
    );
    for record in &records {
        assert_eq!(record["payload"]["source"]["snapshot"], "true");
    }
    let created = &records[6]["payload"]["tableChanges"][0];
    assert_eq!(created["type"], "CREATE");
    assert_eq!(created["table"]["defaultCharsetName"], "utf8mb4");
    assert_eq!(created["table"]["columns"][1]["charsetName"], "utf8mb4");
    let b = &records[7]["payload"]["tableChanges"][0]["table"]["columns"][0];
    assert_eq!(b["typeName"], "BIGINT UNSIGNED");
    // The server's character set first, on no database.
    let first = read_raw(&topic, WAIT, |r| !r.is_empty()).await[0].json();
    let set = first["payload"]["ddl"].as_str().unwrap();
    assert!(set.starts_with("SET character_set_server="), "{set}");
    assert_eq!(first["payload"]["databaseName"], "");
    // Then the rows.
    let rows = read_raw(&setup.topic("a"), WAIT, |r| !r.is_empty()).await;
    assert_eq!(rows[0].json()["payload"]["after"]["s"], "x");
}

#[tokio::test(flavor = "multi_thread")]
async fn geometries_are_debeziums_structs() {
    use base64::Engine as _;
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzgeo").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (id INT PRIMARY KEY, p POINT NOT NULL, g GEOMETRY NULL, l LINESTRING NULL); \
         INSERT INTO `{db}`.t VALUES (1, ST_GeomFromText('POINT(1.5 -2)', 4326), \
             ST_GeomFromText('POINT(3 4)'), ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0.5)', 3857))"
    ))
    .await
    .unwrap();
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(10);
    setup.extra = "compat: debezium\n".into();
    let capture = TributaryProcess::capture(&setup.yaml());
    let topic = setup.topic("t");
    read_raw(&topic, WAIT, |r| !r.is_empty()).await;
    conn.query_drop(format!(
        "INSERT INTO `{db}`.t VALUES (2, ST_GeomFromText('POINT(-0.25 1e10)'), \
             ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))', 4326), NULL)"
    ))
    .await
    .unwrap();
    let records = read_raw(&topic, WAIT, |r| r.len() >= 2).await;
    assert_eq!(records.len(), 2, "log:\n{}", capture.log());
    let schema = records[0].json()["schema"]["fields"][1]["fields"].clone();
    let names: Vec<&str> = schema
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "",
            "io.debezium.data.geometry.Point",
            "io.debezium.data.geometry.Geometry",
            "io.debezium.data.geometry.Geometry"
        ]
    );
    for record in &records {
        let after = record.json()["payload"]["after"].clone();
        let id = after["id"].as_i64().unwrap();
        for column in ["p", "g", "l"] {
            // The server's own reading of the stored value.
            let (x, y, srid, wkb): (Option<f64>, Option<f64>, Option<i64>, Option<String>) = conn
                .query_first(format!(
                    "SELECT IF(ST_GeometryType({column}) = 'POINT', ST_X({column}), NULL), \
                            IF(ST_GeometryType({column}) = 'POINT', ST_Y({column}), NULL), \
                            ST_SRID({column}), TO_BASE64(ST_AsWKB({column})) \
                     FROM `{db}`.t WHERE id = {id}"
                ))
                .await
                .unwrap()
                .unwrap();
            let value = &after[column];
            let Some(wkb) = wkb else {
                assert_eq!(*value, Json::Null, "row {id}, {column}");
                continue;
            };
            let ours = base64::engine::general_purpose::STANDARD
                .decode(value["wkb"].as_str().unwrap())
                .unwrap();
            let theirs = base64::engine::general_purpose::STANDARD
                .decode(wkb.replace('\n', ""))
                .unwrap();
            assert_eq!(ours, theirs, "row {id}, {column}: wkb");
            let srid = srid.filter(|s| *s != 0);
            assert_eq!(value["srid"].as_i64(), srid, "row {id}, {column}: srid");
            if column == "p" {
                assert_eq!(value["x"].as_f64(), x, "row {id}: x");
                assert_eq!(value["y"].as_f64(), y, "row {id}: y");
            } else {
                assert!(value.get("x").is_none(), "row {id}, {column}: {value}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_undecodable_rows_event_is_skipped_with_a_warning_when_asked() {
    let mut conn = root_conn().await;
    let (db, setup, capture) = capture_from_now(
        &mut conn,
        "dbzfail",
        "CREATE TABLE `DB`.t (id INT PRIMARY KEY, v VARCHAR(10) CHARACTER SET big5)",
        "events: { event.processing.failure.handling.mode: warn }\n",
    )
    .await;
    // Big5 A15A: bytes the server stores but has no character for.
    for row in ["(1, 'ok')", "(2, _binary 0xA15A)", "(3, 'next')"] {
        conn.query_drop(format!("INSERT INTO `{db}`.t VALUES {row}"))
            .await
            .unwrap();
    }
    let records = read_raw(&setup.topic("t"), WAIT, |r| r.len() >= 2).await;
    let ids: Vec<i64> = records
        .iter()
        .map(|r| r.json()["after"]["id"].as_i64().unwrap())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [1, 3], "log:\n{}", capture.log());
    let log = capture.log();
    assert!(
        log.contains("rows event skipped") && log.contains("bytes A15A are not valid big5"),
        "log:\n{log}"
    );
    let (_, metrics) = http_get(setup.metrics_port, "/metrics").await;
    assert!(
        metrics.contains("tributary_capture_events_skipped_total 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_inside_a_transaction_skips_what_debezium_sent_of_it() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzskip").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)"))
        .await
        .unwrap();
    let before = gtid_now(&mut conn).await;
    // One transaction: GTID, TABLE_MAP, WRITE_ROWS (3 rows), TABLE_MAP,
    // WRITE_ROWS (1 row), XID, as Debezium counts its events.
    conn.query_drop(format!(
        "BEGIN; INSERT INTO `{db}`.t VALUES (1, 1), (2, 2), (3, 3); \
         INSERT INTO `{db}`.t VALUES (4, 4); COMMIT"
    ))
    .await
    .unwrap();
    // A later transaction marks the end of what comes.
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (5, 5)"))
        .await
        .unwrap();
    // Debezium's offsets (gtids before the transaction) after it sent row 2
    // (2 events completed, 2 rows of the next), and after it sent row 3.
    for (events, rows, expected) in [(2, 2, [3, 4, 5].as_slice()), (3, 0, &[4, 5])] {
        let setup = CaptureSetup::new(&db, &before);
        let yaml = setup.yaml().replace(
            &format!("start: {{ gtid: '{before}' }}"),
            &format!(
                "start: {{ gtid: '{before}' }}, start_skip: {{ events: {events}, rows: {rows} }}"
            ),
        );
        let capture = TributaryProcess::capture(&yaml);
        let wanted = expected.len();
        let records = read_raw(&setup.topic("t"), WAIT, move |r| {
            r.len() >= wanted && r.iter().any(|r| r.json()["after"]["id"] == 5)
        })
        .await;
        let mut ids: Vec<i64> = records
            .iter()
            .map(|r| r.json()["after"]["id"].as_i64().unwrap())
            .collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            expected,
            "skip {events} events, {rows} rows; log:\n{}",
            capture.log()
        );
        assert!(
            capture.log().contains("source.start_skip"),
            "log:\n{}",
            capture.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_without_rows_marks_its_last_schema_record_last() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "dbzsnapempty").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.a (id INT PRIMARY KEY); CREATE TABLE `{db}`.b (id INT PRIMARY KEY)"
    ))
    .await
    .unwrap();
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(10);
    setup.extra = "compat: debezium\n".into();
    let capture = TributaryProcess::capture(&setup.yaml());
    let records = schema_changes_of(&setup.server_name, &db, 7).await;
    let markers: Vec<&str> = records
        .iter()
        .map(|r| r["payload"]["source"]["snapshot"].as_str().unwrap())
        .collect();
    assert_eq!(
        markers,
        ["true", "true", "true", "true", "true", "true", "last"],
        "log:\n{}",
        capture.log()
    );
    assert!(
        records[6]["payload"]["ddl"]
            .as_str()
            .unwrap()
            .starts_with("CREATE TABLE `b`")
    );
}
