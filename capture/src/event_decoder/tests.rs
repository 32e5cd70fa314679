//! The decoder on recorded MySQL 8.0 binlog events.
//!
//! No MySQL server runs on the machines that build Tributary (the MariaDB path
//! is tested end to end in `tests/`), so these events are written byte by byte
//! from MySQL's documented event layouts (`Log_event_header`,
//! `Format_description_event`, `Gtid_event`, `Previous_gtids_event`,
//! `Table_map_event` with `binlog_row_metadata=FULL`, `Rows_event` v2,
//! `Transaction_payload_event`), with CRC32 checksums, as a MySQL 8.0.36
//! server sends them to a replica: a fake ROTATE first, then the file's events.
//! They are read with mysql_common's `EventStreamReader`, as the replication
//! connection reads them, and the decoder's output is compared with the values
//! written into the events.

use std::io::Cursor;

use mysql_async::binlog::events::TransactionPayloadEvent;
use mysql_common::binlog::EventStreamReader;
use mysql_common::binlog::consts::BinlogVersion;
use tributary_proto::{Op, Row, Value};

use super::*;
use crate::charset::Collations;
use crate::column_rules::ColumnRules;
use crate::config::{Patterns, UndecodableText};
use crate::event_shape::DecodeOptions;
use crate::message_key::MessageKeyColumns;
use crate::server_rules::ServerRules;
use crate::value_modes::ValueModes;

const SERVER_ID: u32 = 1;
const FILE: &str = "binlog.000007";
const SOURCE_A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
const SOURCE_B: &str = "8f5ad0c4-1f6e-11ef-a1c2-0242ac120002";
const USERS_TABLE_ID: u64 = 90;

/// Event type codes (MySQL's `Log_event_type`).
mod code {
    pub(super) const QUERY: u8 = 2;
    pub(super) const ROTATE: u8 = 4;
    pub(super) const FORMAT_DESCRIPTION: u8 = 15;
    pub(super) const XID: u8 = 16;
    pub(super) const ROWS_QUERY: u8 = 29;
    pub(super) const TABLE_MAP: u8 = 19;
    pub(super) const WRITE_ROWS: u8 = 30;
    pub(super) const UPDATE_ROWS: u8 = 31;
    pub(super) const DELETE_ROWS: u8 = 32;
    pub(super) const GTID: u8 = 33;
    pub(super) const ANONYMOUS_GTID: u8 = 34;
    pub(super) const PREVIOUS_GTIDS: u8 = 35;
    pub(super) const TRANSACTION_PAYLOAD: u8 = 40;
}

/// A binlog file as the server sends it, event by event.
struct Binlog {
    events: Vec<Vec<u8>>,
    /// Where the next event starts.
    pos: u32,
}

impl Binlog {
    /// The stream of `FILE` from `start`: the fake ROTATE that names the file
    /// (its checksum sent as part of the name, before any FORMAT_DESCRIPTION says
    /// there are checksums) and the FORMAT_DESCRIPTION, which the server sends
    /// whatever the start.
    fn starting_at(start: u32) -> Self {
        let mut binlog = Binlog {
            events: Vec::new(),
            pos: 4,
        };
        let mut rotate = u64::from(start).to_le_bytes().to_vec();
        rotate.extend_from_slice(FILE.as_bytes());
        binlog
            .events
            .push(event(code::ROTATE, 0, &rotate, 0, 0x20, true));
        binlog.append(
            code::FORMAT_DESCRIPTION,
            1_700_000_000,
            &format_description(),
        );
        binlog.pos = binlog.pos.max(start);
        binlog
    }

    /// Appends an event of the file; returns where it starts.
    fn append(&mut self, type_code: u8, timestamp: u32, body: &[u8]) -> u32 {
        let start = self.pos;
        self.pos += (19 + body.len() + 4) as u32;
        let bytes = event(type_code, timestamp, body, self.pos, 0, true);
        self.events.push(bytes);
        start
    }
}

/// One event: the 19-byte header, the body and (unless inside a transaction
/// payload) the CRC32 of both.
fn event(
    type_code: u8,
    timestamp: u32,
    body: &[u8],
    log_pos: u32,
    flags: u16,
    crc: bool,
) -> Vec<u8> {
    let size = 19 + body.len() + if crc { 4 } else { 0 };
    let mut bytes = Vec::with_capacity(size);
    bytes.extend_from_slice(&timestamp.to_le_bytes());
    bytes.push(type_code);
    bytes.extend_from_slice(&SERVER_ID.to_le_bytes());
    bytes.extend_from_slice(&(size as u32).to_le_bytes());
    bytes.extend_from_slice(&log_pos.to_le_bytes());
    bytes.extend_from_slice(&flags.to_le_bytes());
    bytes.extend_from_slice(body);
    if crc {
        let checksum = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
    }
    bytes
}

/// MySQL 8.0's FORMAT_DESCRIPTION body: binlog version 4, server version,
/// creation time, header length 19, the post-header length of each event type
/// (1 to 41), and checksum algorithm 1 (CRC32).
fn format_description() -> Vec<u8> {
    let mut body = 4u16.to_le_bytes().to_vec();
    let mut version = b"8.0.36".to_vec();
    version.resize(50, 0);
    body.extend_from_slice(&version);
    body.extend_from_slice(&0u32.to_le_bytes());
    body.push(19);
    body.extend_from_slice(&[
        0, 13, 0, 8, 0, 0, 0, 0, 4, 0, 4, 0, 0, 0, 98, 0, 4, 26, 8, 0, 0, 0, 8, 8, 8, 2, 0, 0, 0,
        10, 10, 10, 42, 42, 0, 18, 52, 0, 10, 40, 0,
    ]);
    body.push(1);
    body
}

/// MySQL's packed (length-encoded) integer.
fn packed(n: u64) -> Vec<u8> {
    match n {
        0..251 => vec![n as u8],
        251..65_536 => [&[0xfc][..], &(n as u16).to_le_bytes()].concat(),
        _ => [&[0xfe][..], &n.to_le_bytes()].concat(),
    }
}

fn uuid_bytes(text: &str) -> [u8; 16] {
    *uuid::Uuid::parse_str(text).unwrap().as_bytes()
}

/// A GTID event (or ANONYMOUS_GTID, with a zero UUID and number 0). The commit
/// timestamps are in microseconds; when they differ (a transaction that came
/// through a replica), bit 55 of the immediate one says the original follows.
fn gtid_body(source: &str, number: u64, immediate_us: u64, original_us: u64) -> Vec<u8> {
    let mut body = vec![0x00];
    body.extend_from_slice(&uuid_bytes(source));
    body.extend_from_slice(&number.to_le_bytes());
    body.push(2); // logical timestamps follow
    body.extend_from_slice(&7u64.to_le_bytes()); // last_committed
    body.extend_from_slice(&8u64.to_le_bytes()); // sequence_number
    if immediate_us == original_us {
        body.extend_from_slice(&immediate_us.to_le_bytes()[..7]);
    } else {
        body.extend_from_slice(&(immediate_us | 1 << 55).to_le_bytes()[..7]);
        body.extend_from_slice(&original_us.to_le_bytes()[..7]);
    }
    body.extend_from_slice(&packed(400)); // transaction length
    body.extend_from_slice(&80036u32.to_le_bytes()); // immediate server version
    body
}

fn previous_gtids_body(sources: &[(&str, &[(u64, u64)])]) -> Vec<u8> {
    let mut body = (sources.len() as u64).to_le_bytes().to_vec();
    for (source, intervals) in sources {
        body.extend_from_slice(&uuid_bytes(source));
        body.extend_from_slice(&(intervals.len() as u64).to_le_bytes());
        for (first, last) in *intervals {
            body.extend_from_slice(&first.to_le_bytes());
            body.extend_from_slice(&(last + 1).to_le_bytes()); // end is exclusive
        }
    }
    body
}

/// The connection that runs the statements of [`query_body`].
const THREAD: u32 = 11;

fn query_body(db: &str, sql: &str) -> Vec<u8> {
    query_body_by(THREAD, db, sql)
}

fn query_body_by(thread: u32, db: &str, sql: &str) -> Vec<u8> {
    let mut body = thread.to_le_bytes().to_vec();
    body.extend_from_slice(&0u32.to_le_bytes()); // execution time
    body.push(db.len() as u8);
    body.extend_from_slice(&0u16.to_le_bytes()); // error code
    body.extend_from_slice(&0u16.to_le_bytes()); // status variables: none
    body.extend_from_slice(db.as_bytes());
    body.push(0);
    body.extend_from_slice(sql.as_bytes());
    body
}

fn xid_body(xid: u64) -> Vec<u8> {
    xid.to_le_bytes().to_vec()
}

/// TABLE_MAP of `shop.users (id INT PRIMARY KEY, name VARCHAR(20) utf8mb4,
/// city VARCHAR(20) latin1)`, with the metadata of `binlog_row_metadata=FULL`.
fn users_table_map() -> Vec<u8> {
    let mut body = USERS_TABLE_ID.to_le_bytes()[..6].to_vec();
    body.extend_from_slice(&1u16.to_le_bytes()); // flags
    for name in ["shop", "users"] {
        body.push(name.len() as u8);
        body.extend_from_slice(name.as_bytes());
        body.push(0);
    }
    body.extend_from_slice(&packed(3));
    body.extend_from_slice(&[3, 15, 15]); // LONG, VARCHAR, VARCHAR
    // Column metadata: each VARCHAR's maximum length in bytes (20 × 4, 20 × 1).
    let metadata = [80u16.to_le_bytes(), 20u16.to_le_bytes()].concat();
    body.extend_from_slice(&packed(metadata.len() as u64));
    body.extend_from_slice(&metadata);
    body.push(0b110); // nullable: name, city
    let mut field = |kind: u8, value: Vec<u8>| {
        body.push(kind);
        body.extend_from_slice(&packed(value.len() as u64));
        body.extend_from_slice(&value);
    };
    field(1, vec![0x00]); // SIGNEDNESS: id is signed
    // DEFAULT_CHARSET: utf8mb4_0900_ai_ci (255); the second text column
    // (city) latin1_swedish_ci (8).
    field(2, [packed(255), packed(1), packed(8)].concat());
    let names: Vec<u8> = ["id", "name", "city"]
        .iter()
        .flat_map(|n| [&[n.len() as u8][..], n.as_bytes()].concat())
        .collect();
    field(4, names); // COLUMN_NAME
    field(8, packed(0)); // SIMPLE_PRIMARY_KEY: id
    body
}

/// One image of a `users` row: the null bitmap, then the values.
fn users_image(id: i32, name: &[u8], city: &[u8]) -> Vec<u8> {
    let mut image = vec![0x00];
    image.extend_from_slice(&id.to_le_bytes());
    for text in [name, city] {
        image.push(text.len() as u8);
        image.extend_from_slice(text);
    }
    image
}

/// A v2 rows event of `users` with every column in each image.
fn users_rows_body(images: &[Vec<u8>], update: bool) -> Vec<u8> {
    let mut body = USERS_TABLE_ID.to_le_bytes()[..6].to_vec();
    body.extend_from_slice(&1u16.to_le_bytes()); // STMT_END_F
    body.extend_from_slice(&2u16.to_le_bytes()); // no extra row data
    body.extend_from_slice(&packed(3));
    body.push(0b111); // columns in the (before) image
    if update {
        body.push(0b111); // columns in the after image
    }
    for image in images {
        body.extend_from_slice(image);
    }
    body
}

/// A TRANSACTION_PAYLOAD event: `inner` events (no checksums, position 0)
/// compressed with zstd, after the header fields (type, length, value).
fn payload_body(inner: &[Vec<u8>]) -> Vec<u8> {
    let raw: Vec<u8> = inner.concat();
    let compressed = zstd::encode_all(&raw[..], 3).unwrap();
    let mut body = Vec::new();
    for (field, value) in [(2, 0), (3, raw.len() as u64), (1, compressed.len() as u64)] {
        body.extend_from_slice(&packed(field));
        body.extend_from_slice(&packed(packed(value).len() as u64));
        body.extend_from_slice(&packed(value));
    }
    body.push(0); // end of the header fields
    body.extend_from_slice(&compressed);
    body
}

fn decoder(
    from: &BinlogPosition,
    gtid_mode_on: bool,
    failure_handling: FailureHandling,
) -> EventDecoder {
    let setup = DecoderSetup {
        filter: TableFilter::new(&Patterns::default(), &Patterns::default()),
        shape: EventShape {
            server_name: "shop-mysql".into(),
            keys: MessageKeyColumns::default(),
            columns: ColumnRules::default(),
            decode: DecodeOptions {
                undecodable: UndecodableText::Stop,
                modes: ValueModes::TRIBUTARY,
                schemas: false,
                replace_null_with_default: false,
                zero_dates_as_epoch: false,
                doubles: tributary_proto::json_number::DoubleFormat::Compact,
            },
            connector: "mysql",
            debezium_schema_changes: false,
            include_query: false,
            signal_table: None,
        },
        info: ServerInfo {
            version: "8.0.36".into(),
            is_mariadb: false,
            full_row_metadata: true,
            collations: Collations::new([(255, "utf8mb4".into()), (8, "latin1".into())]),
            gtid_mode_on,
            schema_rules: ServerRules::of("8.0.36"),
        },
        // Never connected to: every TABLE_MAP here has full metadata.
        pool: Pool::new("mysql://nobody@127.0.0.1:9/none"),
        failure_handling,
        events_skipped: Default::default(),
        start_skip: None,
        schemas: None,
    };
    EventDecoder::new(setup, from).unwrap()
}

/// Feeds the events to a decoder as the replication connection does (a
/// TRANSACTION_PAYLOAD event, then the events inside it), collecting its output.
async fn decode(
    binlog: &Binlog,
    from: &BinlogPosition,
) -> Result<Vec<ReaderItem<BinlogPosition>>, CaptureError> {
    decode_with(binlog, from, true, FailureHandling::Fail).await
}

/// [`decode`] from a server whose `gtid_mode` is ON or not.
async fn decode_in_mode(
    binlog: &Binlog,
    from: &BinlogPosition,
    gtid_mode_on: bool,
) -> Result<Vec<ReaderItem<BinlogPosition>>, CaptureError> {
    decode_with(binlog, from, gtid_mode_on, FailureHandling::Fail).await
}

/// [`decode_in_mode`] with `event.processing.failure.handling.mode`.
async fn decode_with(
    binlog: &Binlog,
    from: &BinlogPosition,
    gtid_mode_on: bool,
    failure_handling: FailureHandling,
) -> Result<Vec<ReaderItem<BinlogPosition>>, CaptureError> {
    let mut reader = EventStreamReader::new(BinlogVersion::Version4);
    let mut decoder = decoder(from, gtid_mode_on, failure_handling);
    let mut items = Vec::new();
    for bytes in &binlog.events {
        let event = reader.read(&bytes[..]).unwrap().unwrap();
        let payload = (event.header().event_type_raw() == code::TRANSACTION_PAYLOAD).then(|| {
            let payload: TransactionPayloadEvent<'_> = event.read_event().unwrap();
            payload.danger_decompress()
        });
        decoder.handle(event, &reader).await?;
        if let Some(payload) = payload {
            let mut inner = Cursor::new(payload);
            while let Some(event) = reader.read_decompressed(&mut inner).unwrap() {
                decoder.handle(event, &reader).await?;
            }
        }
        items.extend(std::iter::from_fn(|| decoder.pop()));
    }
    Ok(items)
}

fn changes(items: &[ReaderItem<BinlogPosition>]) -> Vec<&ChangeEvent> {
    items
        .iter()
        .filter_map(|i| match i {
            ReaderItem::Change(c) => Some(&**c),
            _ => None,
        })
        .collect()
}

fn commits(items: &[ReaderItem<BinlogPosition>]) -> Vec<&BinlogPosition> {
    items
        .iter()
        .filter_map(|i| match i {
            ReaderItem::Commit(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn column<'a>(row: Option<&'a Row>, name: &str) -> &'a Value {
    let row = row.expect("a row image");
    let i = row.columns.iter().position(|c| &**c == name).unwrap();
    &row.values[i]
}

fn text(value: &Value) -> &str {
    match value {
        Value::String(s) => s,
        other => panic!("not text: {other:?}"),
    }
}

const ZOE_UTF8: &[u8] = "Zoë ✓".as_bytes();
const ZURICH_LATIN1: &[u8] = b"Z\xfcrich";

/// Commit timestamps, in microseconds since the epoch.
const ORIGINAL_US: u64 = 1_700_000_100_123_456;
const IMMEDIATE_US: u64 = 1_700_000_105_654_321;
const HEADER_TS: u32 = 1_700_000_107;

#[tokio::test]
async fn with_include_query_rows_carry_the_statement_of_their_rows_query_event() {
    let mut binlog = Binlog::starting_at(4);
    let statements = [
        "INSERT INTO users VALUES (42, 'Zoë ✓', 'Zürich')",
        "UPDATE users SET name = 'Zoe'",
    ];
    let rows_query = |sql: &str| [&[sql.len() as u8][..], sql.as_bytes()].concat();
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_A, 6, IMMEDIATE_US, IMMEDIATE_US),
    );
    binlog.append(code::QUERY, HEADER_TS, &query_body("shop", "BEGIN"));
    binlog.append(code::ROWS_QUERY, HEADER_TS, &rows_query(statements[0]));
    binlog.append(code::TABLE_MAP, HEADER_TS, &users_table_map());
    let insert = users_rows_body(&[users_image(42, ZOE_UTF8, ZURICH_LATIN1)], false);
    binlog.append(code::WRITE_ROWS, HEADER_TS, &insert);
    binlog.append(code::ROWS_QUERY, HEADER_TS, &rows_query(statements[1]));
    binlog.append(code::TABLE_MAP, HEADER_TS, &users_table_map());
    let update = users_rows_body(
        &[
            users_image(42, ZOE_UTF8, ZURICH_LATIN1),
            users_image(42, b"Zoe", ZURICH_LATIN1),
        ],
        true,
    );
    binlog.append(code::UPDATE_ROWS, HEADER_TS, &update);
    binlog.append(code::XID, HEADER_TS, &xid_body(1001));
    // The next transaction was logged without its statement.
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_A, 7, IMMEDIATE_US, IMMEDIATE_US),
    );
    binlog.append(code::QUERY, HEADER_TS, &query_body("shop", "BEGIN"));
    binlog.append(code::TABLE_MAP, HEADER_TS, &users_table_map());
    let delete = users_rows_body(&[users_image(42, b"Zoe", ZURICH_LATIN1)], false);
    binlog.append(code::DELETE_ROWS, HEADER_TS, &delete);
    binlog.append(code::XID, HEADER_TS, &xid_body(1002));

    let from = BinlogPosition {
        file: FILE.into(),
        pos: 4,
        ..Default::default()
    };
    let mut decoder = decoder(&from, true, FailureHandling::Fail);
    decoder.queries = Some(RowQueries::new(None));
    let mut reader = EventStreamReader::new(BinlogVersion::Version4);
    let mut items = Vec::new();
    for bytes in &binlog.events {
        let event = reader.read(&bytes[..]).unwrap().unwrap();
        decoder.handle(event, &reader).await.unwrap();
        items.extend(std::iter::from_fn(|| decoder.pop()));
    }
    let queries: Vec<_> = changes(&items)
        .iter()
        .map(|c| c.source.binlog().unwrap().query.clone())
        .collect();
    assert_eq!(
        queries,
        [Some(statements[0].into()), Some(statements[1].into()), None]
    );
}

#[tokio::test]
async fn mysql_transactions_carry_their_gtids_and_positions_the_executed_set() {
    let mut binlog = Binlog::starting_at(4);
    binlog.append(
        code::PREVIOUS_GTIDS,
        HEADER_TS,
        &previous_gtids_body(&[(SOURCE_A, &[(1, 5)]), (SOURCE_B, &[(1, 3), (5, 9)])]),
    );
    // A:6, through a replica: the original commit time is not the immediate one.
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_A, 6, IMMEDIATE_US, ORIGINAL_US),
    );
    binlog.append(code::QUERY, HEADER_TS, &query_body("shop", "BEGIN"));
    binlog.append(code::TABLE_MAP, HEADER_TS, &users_table_map());
    let insert_at = binlog.append(
        code::WRITE_ROWS,
        HEADER_TS,
        &users_rows_body(&[users_image(42, ZOE_UTF8, ZURICH_LATIN1)], false),
    );
    binlog.append(code::XID, HEADER_TS, &xid_body(1001));
    let first_commit = binlog.pos;
    // A:7, a DDL statement: no BEGIN, no XID.
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_A, 7, IMMEDIATE_US, IMMEDIATE_US),
    );
    let ddl = "ALTER TABLE users ADD COLUMN note TEXT";
    binlog.append(code::QUERY, HEADER_TS, &query_body("shop", ddl));
    let ddl_end = binlog.pos;
    // B:10, compressed (binlog_transaction_compression=ON), two statements.
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_B, 10, ORIGINAL_US, ORIGINAL_US),
    );
    let update = users_rows_body(
        &[
            users_image(42, ZOE_UTF8, ZURICH_LATIN1),
            users_image(42, b"Zoe", ZURICH_LATIN1),
        ],
        true,
    );
    let insert = users_rows_body(&[users_image(43, b"Ann", b"Bern")], false);
    let inner = [
        inner_event(code::QUERY, &query_body("shop", "BEGIN")),
        inner_event(code::TABLE_MAP, &users_table_map()),
        inner_event(code::UPDATE_ROWS, &update),
        inner_event(code::WRITE_ROWS, &insert),
        inner_event(code::XID, &xid_body(1003)),
    ];
    let payload_at = binlog.append(code::TRANSACTION_PAYLOAD, HEADER_TS, &payload_body(&inner));
    let payload_end = binlog.pos;
    // An anonymous transaction (gtid_mode=ON_PERMISSIVE lets both kinds in):
    // from here on no GTID set can say where capture is.
    let anonymous_at = binlog.append(
        code::ANONYMOUS_GTID,
        HEADER_TS,
        &gtid_body(
            "00000000-0000-0000-0000-000000000000",
            0,
            IMMEDIATE_US,
            IMMEDIATE_US,
        ),
    );
    binlog.append(code::QUERY, HEADER_TS, &query_body_by(27, "shop", "BEGIN"));
    binlog.append(code::TABLE_MAP, HEADER_TS, &users_table_map());
    let delete = users_rows_body(&[users_image(42, b"Zoe", ZURICH_LATIN1)], false);
    binlog.append(code::DELETE_ROWS, HEADER_TS, &delete);
    binlog.append(code::XID, HEADER_TS, &xid_body(1002));
    let anonymous_end = binlog.pos;

    let from = BinlogPosition {
        file: FILE.into(),
        pos: 4,
        ..Default::default()
    };
    let items = decode(&binlog, &from).await.unwrap();
    let a = |n: u64| format!("{SOURCE_A}:{n}");
    let changes = changes(&items);
    assert_eq!(changes.len(), 4, "{items:#?}");

    let insert = changes[0];
    assert_eq!(insert.op, Op::Create);
    assert_eq!(
        insert.source.binlog().unwrap().thread,
        Some(THREAD),
        "the BEGIN's thread"
    );
    assert_eq!(
        insert.source.binlog().unwrap().gtid.as_deref(),
        Some(a(6).as_str())
    );
    assert_eq!(&*insert.transaction.as_ref().unwrap().id, a(6).as_str());
    assert_eq!(
        insert.source.ts_ms,
        (ORIGINAL_US / 1000) as i64,
        "original_commit_timestamp"
    );
    assert_eq!(
        (
            &*insert.source.binlog().unwrap().file,
            insert.source.binlog().unwrap().pos
        ),
        (FILE, u64::from(insert_at))
    );
    assert_eq!(text(column(insert.after.as_ref(), "name")), "Zoë ✓");
    assert_eq!(
        text(column(insert.after.as_ref(), "city")),
        "Zürich",
        "latin1 column"
    );
    assert_eq!(column(Some(&insert.key), "id"), &Value::Int(42));

    let b10 = format!("{SOURCE_B}:10");
    let (update, created) = (changes[1], changes[2]);
    assert_eq!((update.op, created.op), (Op::Update, Op::Create));
    for change in [update, created] {
        assert_eq!(
            change.source.binlog().unwrap().gtid.as_deref(),
            Some(b10.as_str())
        );
        assert_eq!(&*change.transaction.as_ref().unwrap().id, b10.as_str());
        assert_eq!(
            change.source.binlog().unwrap().pos,
            u64::from(payload_at),
            "where the payload starts"
        );
    }
    assert_eq!(
        (
            update.source.binlog().unwrap().row,
            created.source.binlog().unwrap().row
        ),
        (0, 1),
        "rows numbered through the payload: (file, pos, row) names one row"
    );
    assert_eq!(text(column(update.before.as_ref(), "name")), "Zoë ✓");
    assert_eq!(text(column(update.after.as_ref(), "name")), "Zoe");
    assert_eq!(text(column(created.after.as_ref(), "city")), "Bern");

    let delete = changes[3];
    assert_eq!(delete.op, Op::Delete);
    assert_eq!(delete.source.binlog().unwrap().gtid, None, "anonymous");
    assert_eq!(
        delete.source.binlog().unwrap().thread,
        Some(27),
        "its own BEGIN's thread"
    );
    let anonymous_id = format!("{FILE}:{anonymous_at}");
    assert_eq!(
        &*delete.transaction.as_ref().unwrap().id,
        anonymous_id.as_str()
    );
    assert_eq!(delete.source.ts_ms, (IMMEDIATE_US / 1000) as i64);

    let schema_change = items
        .iter()
        .find_map(|i| match i {
            ReaderItem::SchemaChange(c) => Some(c),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (schema_change.db.as_str(), schema_change.ddl.as_str()),
        ("shop", ddl)
    );
    let b_before = format!("{SOURCE_B}:1-3:5-9");
    let after_ddl = format!("{SOURCE_A}:1-7,{b_before}");
    assert_eq!(
        schema_change.position.gtid.as_deref(),
        Some(after_ddl.as_str())
    );

    let positions: Vec<(u64, Option<&str>, i64)> = commits(&items)
        .iter()
        .map(|p| (p.pos, p.gtid.as_deref(), p.ts_ms))
        .collect();
    let after_payload = format!("{SOURCE_A}:1-7,{SOURCE_B}:1-3:5-10");
    assert_eq!(
        positions,
        [
            (
                u64::from(first_commit),
                Some(format!("{SOURCE_A}:1-6,{b_before}").as_str()),
                (ORIGINAL_US / 1000) as i64
            ),
            (
                u64::from(ddl_end),
                Some(after_ddl.as_str()),
                (IMMEDIATE_US / 1000) as i64
            ),
            (
                u64::from(payload_end),
                Some(after_payload.as_str()),
                (ORIGINAL_US / 1000) as i64
            ),
            (u64::from(anonymous_end), None, (IMMEDIATE_US / 1000) as i64),
        ]
    );
    assert!(commits(&items).iter().all(|p| p.file == FILE));
}

/// An event inside a transaction payload: no checksum, position 0.
fn inner_event(type_code: u8, body: &[u8]) -> Vec<u8> {
    event(type_code, HEADER_TS, body, 0, 0, false)
}

#[tokio::test]
async fn an_atomic_create_table_select_commits_once_after_its_rows() {
    // MySQL 8.0.21+: GTID, `CREATE TABLE … START TRANSACTION`, rows, XID.
    let mut binlog = Binlog::starting_at(4);
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_A, 41, ORIGINAL_US, ORIGINAL_US),
    );
    let ddl = "CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR(20), city VARCHAR(20)) START TRANSACTION";
    binlog.append(code::QUERY, HEADER_TS, &query_body("shop", ddl));
    binlog.append(code::TABLE_MAP, HEADER_TS, &users_table_map());
    let row = users_image(1, b"x", b"y");
    binlog.append(code::WRITE_ROWS, HEADER_TS, &users_rows_body(&[row], false));
    binlog.append(code::XID, HEADER_TS, &xid_body(41));
    let from = BinlogPosition {
        gtid: Some(format!("{SOURCE_A}:1-40")),
        ..Default::default()
    };
    let items = decode(&binlog, &from).await.unwrap();
    let kinds: Vec<&str> = items
        .iter()
        .map(|i| match i {
            ReaderItem::SchemaChange(_) => "ddl",
            ReaderItem::Change(_) => "row",
            ReaderItem::Commit(_) => "commit",
            ReaderItem::Heartbeat(_) => "heartbeat",
        })
        .collect();
    assert_eq!(kinds, ["ddl", "row", "commit"]);
    let a41 = format!("{SOURCE_A}:41");
    assert_eq!(
        changes(&items)[0].source.binlog().unwrap().gtid.as_deref(),
        Some(a41.as_str())
    );
    let set = format!("{SOURCE_A}:1-41");
    assert_eq!(commits(&items)[0].gtid.as_deref(), Some(set.as_str()));
    assert_eq!(commits(&items)[0].pos, u64::from(binlog.pos));
}

#[test]
fn statements_are_told_apart_from_ddl() {
    let ddl = |opens_transaction| Statement::Ddl { opens_transaction };
    for (sql, expected) in [
        ("BEGIN", Statement::Begin),
        ("XA START 'x'", Statement::Begin),
        ("COMMIT", Statement::End),
        ("rollback", Statement::End),
        ("XA COMMIT 'x'", Statement::End),
        ("XA COMMIT 'x' ONE PHASE", Statement::End),
        ("XA ROLLBACK 'x'", Statement::End),
        ("SAVEPOINT `s1`", Statement::InTransaction),
        ("ROLLBACK TO `s1`", Statement::InTransaction),
        ("RELEASE SAVEPOINT s1", Statement::InTransaction),
        ("XA END 'x'", Statement::InTransaction),
        ("ALTER TABLE t ADD c INT", ddl(false)),
        (
            "CREATE TABLE t2 AS SELECT * FROM t START TRANSACTION",
            ddl(true),
        ),
        ("create table t (i int)", ddl(false)),
    ] {
        assert_eq!(Statement::of(sql), expected, "{sql}");
    }
}

/// One transaction of `A:number` inserting one row, appended to `binlog`.
fn append_insert(binlog: &mut Binlog, number: u64, id: i32) {
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_A, number, ORIGINAL_US, ORIGINAL_US),
    );
    binlog.append(code::QUERY, HEADER_TS, &query_body("shop", "BEGIN"));
    binlog.append(code::TABLE_MAP, HEADER_TS, &users_table_map());
    let row = users_image(id, b"x", b"y");
    binlog.append(code::WRITE_ROWS, HEADER_TS, &users_rows_body(&[row], false));
    binlog.append(code::XID, HEADER_TS, &xid_body(number));
}

#[tokio::test]
async fn a_start_inside_a_file_stores_no_gtid_set_with_holes() {
    // Started at a file offset: the transactions before it are unknown, so
    // positions carry no set (a restart resumes by file and offset) while
    // events still name their GTID.
    let mut binlog = Binlog::starting_at(1000);
    append_insert(&mut binlog, 12, 1);
    let from = BinlogPosition {
        file: FILE.into(),
        pos: 1000,
        ..Default::default()
    };
    let items = decode(&binlog, &from).await.unwrap();
    let a12 = format!("{SOURCE_A}:12");
    assert_eq!(
        changes(&items)[0].source.binlog().unwrap().gtid.as_deref(),
        Some(a12.as_str())
    );
    let commit = commits(&items)[0];
    assert_eq!(
        (commit.pos, commit.gtid.as_deref()),
        (u64::from(binlog.pos), None)
    );
}

#[tokio::test]
async fn a_start_from_a_gtid_set_adds_to_it() {
    // COM_BINLOG_DUMP_GTID: the server sends the file from its start and skips
    // the transactions of the set; the file's PREVIOUS_GTIDS says less than the set.
    let mut binlog = Binlog::starting_at(4);
    let previous = previous_gtids_body(&[(SOURCE_A, &[(1, 2)])]);
    binlog.append(code::PREVIOUS_GTIDS, HEADER_TS, &previous);
    append_insert(&mut binlog, 41, 1);
    let from = BinlogPosition {
        file: String::new(),
        pos: 4,
        gtid: Some(format!("{SOURCE_B}:1-3, {SOURCE_A}:1-40")),
        ..Default::default()
    };
    let items = decode(&binlog, &from).await.unwrap();
    let expected = format!("{SOURCE_A}:1-41,{SOURCE_B}:1-3");
    assert_eq!(commits(&items)[0].gtid.as_deref(), Some(expected.as_str()));
    // gtid_mode no longer ON (a stored set, a server switched to a permissive
    // mode): no set is kept, so the restart resumes by file and offset.
    let items = decode_in_mode(&binlog, &from, false).await.unwrap();
    let a41 = format!("{SOURCE_A}:41");
    assert_eq!(
        changes(&items)[0].source.binlog().unwrap().gtid.as_deref(),
        Some(a41.as_str())
    );
    assert_eq!(commits(&items)[0].gtid, None);
    // A MySQL server with GTIDs on and none executed yet: an empty set is
    // complete, and stays stored as such until the first GTID.
    let mut binlog = Binlog::starting_at(4);
    binlog.append(
        code::QUERY,
        HEADER_TS,
        &query_body("shop", "CREATE TABLE t (i INT)"),
    );
    let from = BinlogPosition {
        gtid: Some(String::new()),
        ..from
    };
    let items = decode(&binlog, &from).await.unwrap();
    assert_eq!(commits(&items)[0].gtid.as_deref(), Some(""));
}

#[tokio::test]
async fn a_compressed_transaction_not_read_to_its_end_stops_capture() {
    // What the replication connection yields when it cannot decompress a
    // payload: the TRANSACTION_PAYLOAD event, then none of its events.
    let mut binlog = Binlog::starting_at(4);
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_A, 3, ORIGINAL_US, ORIGINAL_US),
    );
    binlog.append(code::TRANSACTION_PAYLOAD, HEADER_TS, &payload_body(&[]));
    let next_gtid_at = binlog.pos;
    append_insert(&mut binlog, 4, 1);
    let from = BinlogPosition {
        file: FILE.into(),
        pos: 4,
        ..Default::default()
    };
    let err = decode(&binlog, &from).await.unwrap_err().to_string();
    assert!(err.contains("compressed transaction"), "{err}");
    assert!(
        err.contains(&format!("{FILE}:{next_gtid_at}")),
        "names the event after it: {err}"
    );
}

#[tokio::test]
async fn an_undecodable_rows_event_stops_capture_or_is_skipped_whole() {
    // One transaction: a rows event whose second row's name is not UTF-8,
    // then a valid one.
    let mut binlog = Binlog::starting_at(1000);
    binlog.append(
        code::GTID,
        HEADER_TS,
        &gtid_body(SOURCE_A, 7, ORIGINAL_US, ORIGINAL_US),
    );
    binlog.append(code::QUERY, HEADER_TS, &query_body("shop", "BEGIN"));
    binlog.append(code::TABLE_MAP, HEADER_TS, &users_table_map());
    let bad = [
        users_image(1, b"ok", b"y"),
        users_image(2, b"\xff\xfe", b"y"),
    ];
    binlog.append(code::WRITE_ROWS, HEADER_TS, &users_rows_body(&bad, false));
    let good = [users_image(3, b"fine", b"y")];
    binlog.append(code::WRITE_ROWS, HEADER_TS, &users_rows_body(&good, false));
    binlog.append(code::XID, HEADER_TS, &xid_body(7));
    let from = BinlogPosition {
        file: FILE.into(),
        pos: 1000,
        ..Default::default()
    };
    let error = decode(&binlog, &from).await.unwrap_err().to_string();
    assert!(
        error.contains("shop.users") && error.contains("row 1"),
        "{error}"
    );
    for mode in [FailureHandling::Warn, FailureHandling::Skip] {
        let items = decode_with(&binlog, &from, true, mode).await.unwrap();
        let published: Vec<(&Value, u64)> = changes(&items)
            .iter()
            .map(|e| {
                let id = column(e.after.as_ref(), "id");
                (id, e.transaction.as_ref().unwrap().total_order)
            })
            .collect();
        // Nothing of the skipped event, row 1 included; the order restarts.
        assert_eq!(published, [(&Value::Int(3), 1)], "{mode:?}");
        assert_eq!(
            commits(&items).len(),
            1,
            "{mode:?}: the transaction still commits"
        );
    }
}
