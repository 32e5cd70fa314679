//! The change event: one row change, as Debezium's MySQL connector models it.

use std::sync::Arc;

use crate::value::Value;

/// What happened to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `r`: read by a snapshot.
    Read,
    /// `c`: inserted.
    Create,
    /// `u`: updated.
    Update,
    /// `d`: deleted.
    Delete,
}

impl Op {
    /// The one-letter code of the envelope's `op` field.
    pub fn code(self) -> &'static str {
        match self {
            Op::Read => "r",
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
        }
    }

    /// Parses the envelope's `op` field.
    pub fn from_code(code: &str) -> Option<Op> {
        match code {
            "r" => Some(Op::Read),
            "c" => Some(Op::Create),
            "u" => Some(Op::Update),
            "d" => Some(Op::Delete),
            _ => None,
        }
    }
}

/// `source.snapshot`: whether the event came from a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapshotMarker {
    /// Streamed from the binlog.
    #[default]
    False,
    /// Read by a snapshot.
    True,
    /// The first event of a snapshot (the first row of its first table).
    First,
    /// The first row of a table other than the snapshot's first.
    FirstInDataCollection,
    /// The last row of a table other than the snapshot's last.
    LastInDataCollection,
    /// The last event of a snapshot.
    Last,
    /// Read by an on-demand snapshot while streaming.
    Incremental,
}

impl SnapshotMarker {
    /// The string Debezium writes.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMarker::False => "false",
            SnapshotMarker::True => "true",
            SnapshotMarker::First => "first",
            SnapshotMarker::FirstInDataCollection => "first_in_data_collection",
            SnapshotMarker::LastInDataCollection => "last_in_data_collection",
            SnapshotMarker::Last => "last",
            SnapshotMarker::Incremental => "incremental",
        }
    }

    /// The marker written as `text` (`false` for anything else).
    pub fn parse(text: &str) -> SnapshotMarker {
        [
            SnapshotMarker::True,
            SnapshotMarker::First,
            SnapshotMarker::FirstInDataCollection,
            SnapshotMarker::LastInDataCollection,
            SnapshotMarker::Last,
            SnapshotMarker::Incremental,
        ]
        .into_iter()
        .find(|m| m.as_str() == text)
        .unwrap_or(SnapshotMarker::False)
    }
}

/// A row image: column names (shared by every row of one table version) and values.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Column names, in table order.
    pub columns: Arc<[String]>,
    /// One value per column.
    pub values: Vec<Value>,
}

/// `source`: where in the source database the change came from. The strings are
/// shared by every row of a rows event (`Arc<str>`: a clone per row costs no allocation).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourceInfo {
    /// The configured `server_name` (the topic prefix).
    pub name: Arc<str>,
    /// Commit time of the change on the source, in milliseconds since the epoch.
    pub ts_ms: i64,
    /// Snapshot marker.
    pub snapshot: SnapshotMarker,
    /// Database name (MySQL's database, PostgreSQL's database: its schema is
    /// in [`WalCoordinates::schema`]).
    pub db: Arc<str>,
    /// Table name.
    pub table: Arc<str>,
    /// Where the change is in the source's log, in the source's own terms.
    pub log: LogCoordinates,
}

impl SourceInfo {
    /// What holds the table, and names its topic (`<server>.<namespace>.<table>`):
    /// the database for MySQL/MariaDB, the schema for PostgreSQL (whose
    /// database is one per capture).
    pub fn namespace(&self) -> &str {
        match &self.log {
            LogCoordinates::Binlog(_) => &self.db,
            LogCoordinates::Wal(wal) => &wal.schema,
        }
    }

    /// The binlog coordinates, for a MySQL/MariaDB change.
    pub fn binlog(&self) -> Option<&BinlogCoordinates> {
        match &self.log {
            LogCoordinates::Binlog(binlog) => Some(binlog),
            LogCoordinates::Wal(_) => None,
        }
    }

    /// The binlog coordinates to fill in; a source block that held WAL
    /// coordinates gets empty binlog ones first.
    pub fn binlog_mut(&mut self) -> &mut BinlogCoordinates {
        if !matches!(self.log, LogCoordinates::Binlog(_)) {
            self.log = LogCoordinates::Binlog(BinlogCoordinates::default());
        }
        match &mut self.log {
            LogCoordinates::Binlog(binlog) => binlog,
            LogCoordinates::Wal(_) => unreachable!("made a binlog position above"),
        }
    }
}

/// A change's place in its source's log: Debezium's MySQL connector's
/// `source` fields, or its PostgreSQL connector's.
#[derive(Debug, Clone, PartialEq)]
pub enum LogCoordinates {
    /// A MySQL/MariaDB binlog.
    Binlog(BinlogCoordinates),
    /// PostgreSQL's write-ahead log (boxed: binlog changes, the many, stay small).
    Wal(Box<WalCoordinates>),
}

impl Default for LogCoordinates {
    fn default() -> Self {
        LogCoordinates::Binlog(BinlogCoordinates::default())
    }
}

/// Where a MySQL/MariaDB change is: `server_id`, `gtid`, `file`, `pos`, `row`,
/// `thread`, `query`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BinlogCoordinates {
    /// Server id of the server that wrote the event.
    pub server_id: u32,
    /// GTID of the transaction, when the server has GTIDs.
    pub gtid: Option<Arc<str>>,
    /// Binlog file of the rows event.
    pub file: Arc<str>,
    /// Start position of the rows event in `file`.
    pub pos: u64,
    /// Index of the row within the rows event.
    pub row: u32,
    /// Id of the connection (thread) that ran the transaction, from MySQL's
    /// `BEGIN` event; MariaDB's binlog has none (as in Debezium: `null`).
    pub thread: Option<u32>,
    /// The statement that changed the row (`include.query`), from MariaDB's
    /// ANNOTATE_ROWS or MySQL's ROWS_QUERY event.
    pub query: Option<Arc<str>>,
}

/// Where a PostgreSQL change is: `schema`, `txId`, `lsn`, `sequence`, `xmin`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WalCoordinates {
    /// The table's schema (`public`).
    pub schema: Arc<str>,
    /// The transaction id (`txId`).
    pub tx_id: Option<u64>,
    /// The LSN of the message the change came in (`lsn`).
    pub lsn: Option<u64>,
    /// The LSN of the last commit before it: with `lsn`, Debezium's `sequence`.
    pub last_commit_lsn: Option<u64>,
    /// The transaction's `xmin` (`xmin`), when known.
    pub xmin: Option<u64>,
}

/// `transaction`: the event's place in its source transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct TransactionInfo {
    /// Transaction id (the GTID where there is one, else `file:pos` of its start).
    pub id: Arc<str>,
    /// 1-based position of the event among all events of the transaction.
    pub total_order: u64,
    /// 1-based position of the event among the transaction's events for this table.
    pub data_collection_order: u64,
}

/// One row change.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEvent {
    /// What happened.
    pub op: Op,
    /// The primary-key columns of the row: the Kafka record key.
    pub key: Row,
    /// Row image before the change (updates, deletes).
    pub before: Option<Row>,
    /// Row image after the change (snapshot reads, inserts, updates).
    pub after: Option<Row>,
    /// Source position and metadata.
    pub source: SourceInfo,
    /// When Tributary processed the event, in milliseconds since the epoch.
    pub ts_ms: i64,
    /// Transaction block.
    pub transaction: Option<TransactionInfo>,
    /// Text columns whose bytes are not valid in their character set, carried
    /// as those bytes ([`Value::Bytes`](crate::Value::Bytes)) because capture was
    /// told to (`source.undecodable_text: base64`); empty otherwise.
    pub undecodable: Vec<Arc<str>>,
    /// The Kafka Connect schemas the key and value are written with
    /// (`{"schema", "payload"}`); `None` writes them without.
    pub schemas: Option<Arc<RecordSchemas>>,
    /// Set on the two events of an update that changed the row's key.
    pub key_change: Option<KeyChange>,
}

/// An update that changed a row's key is a delete of the old key and a
/// create of the new one; each names the other key (Debezium's
/// `__debezium.newkey` and `__debezium.oldkey` record headers).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyChange {
    /// On the delete of the old key: the new key.
    NewKey(Row),
    /// On the create of the new key: the old key.
    OldKey(Row),
}

impl KeyChange {
    /// The record header it is written as, and the key.
    pub fn header(&self) -> (&'static str, &Row) {
        match self {
            KeyChange::NewKey(key) => ("__debezium.newkey", key),
            KeyChange::OldKey(key) => ("__debezium.oldkey", key),
        }
    }
}

/// The Kafka Connect schemas of a table version's records, as JSON text
/// rendered once and shared by its events: Kafka's `JsonConverter` with
/// `schemas.enable=true` writes each record as `{"schema": …, "payload": …}`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordSchemas {
    /// The key's schema; `None` when the table's records have no key.
    pub key: Option<String>,
    /// The envelope's schema.
    pub value: String,
}
