//! Reads the binlog as a replica and turns it into change events and commit positions.
//!
//! One [`BinlogReader`] owns one replication connection. It tracks the binlog
//! file, the MariaDB GTID state and the open transaction, builds table schemas
//! from TABLE_MAP events (filtered tables are skipped before their rows are
//! decoded) and yields [`ReaderItem`]s: every row change as a [`ChangeEvent`],
//! and after each committed transaction the [`BinlogPosition`] to resume from.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use mysql_async::binlog::EventType;
use mysql_async::binlog::events::{Event, EventData, RowsEventData};
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Pool};
use tracing::{debug, info};
use tributary_proto::{ChangeEvent, Op, Row, SnapshotMarker, SourceInfo, TransactionInfo, Value};

use crate::error::CaptureError;
use crate::filter::TableFilter;
use crate::message_key::MessageKeyColumns;
use crate::position::{BinlogPosition, GtidState};
use crate::row_image::RowImages;
use crate::schema::TableSchema;
use crate::source::{self, ServerInfo};

/// What the reader yields.
#[derive(Debug)]
pub enum ReaderItem {
    /// One row change.
    Change(Box<ChangeEvent>),
    /// A transaction committed: everything before this is complete, resume from here.
    Commit(BinlogPosition),
    /// A DDL statement: the schema-history topic records it when `recorded`.
    SchemaChange(SchemaChange),
    /// The server is idle; the position between transactions, for the heartbeat topic.
    Heartbeat(BinlogPosition),
}

/// A DDL statement and where it is in the binlog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    /// The statement's default database (may be empty).
    pub db: String,
    /// The statement as the server logged it.
    pub ddl: String,
    /// Binlog file, position after the statement, and its GTID.
    pub position: BinlogPosition,
    /// Whether the schema history keeps it: its default database may hold
    /// captured tables, or it has none (the statement names its tables).
    pub recorded: bool,
}

/// MariaDB event types that mysql_common does not decode.
const MARIADB_GTID: u8 = 162;
/// MariaDB compressed query/rows events (`log_bin_compress=ON`).
const MARIADB_COMPRESSED: std::ops::RangeInclusive<u8> = 165..=168;
/// MariaDB GTID flag: the transaction is one statement with no COMMIT/XID (DDL).
const FL_STANDALONE: u8 = 1;

struct OpenTransaction {
    id: Arc<str>,
    standalone: bool,
    events: u64,
    /// Events so far per table (by table id, which names one table within a transaction).
    per_table: HashMap<u64, u64>,
}

struct CachedTable {
    raw: Vec<u8>,
    schema: Option<Arc<TableSchema>>,
}

/// A replication connection turned into change events.
pub struct BinlogReader {
    stream: BinlogStream,
    server_name: Arc<str>,
    filter: TableFilter,
    keys: MessageKeyColumns,
    info: ServerInfo,
    pool: Pool,
    tables: HashMap<u64, CachedTable>,
    /// The binlog file being read (shared by the events of its rows).
    file: Arc<str>,
    gtid: GtidState,
    seen_format_description: bool,
    trx: Option<OpenTransaction>,
    pending_gtid: Option<(u32, u32, u64)>,
    out: VecDeque<ReaderItem>,
    started_from: BinlogPosition,
}

/// Everything needed to open a reader.
pub struct ReaderSetup<'a> {
    /// Source connection settings.
    pub source: &'a crate::config::SourceConfig,
    /// Topic prefix / `source.name`.
    pub server_name: &'a str,
    /// Which tables to capture.
    pub filter: TableFilter,
    /// Key columns chosen by configuration.
    pub keys: MessageKeyColumns,
    /// Result of preflight.
    pub info: ServerInfo,
    /// Pool for `information_schema` look-ups.
    pub pool: Pool,
}

impl<'a> ReaderSetup<'a> {
    /// The set-up a capture config asks for: its source, server name and table
    /// filter, with a new look-up pool.
    pub fn of(config: &'a crate::config::CaptureConfig, info: ServerInfo) -> Self {
        ReaderSetup {
            source: &config.source,
            server_name: &config.server_name,
            filter: TableFilter::of(config),
            keys: config.message_key_columns.clone(),
            info,
            pool: Pool::new(source::opts(&config.source)),
        }
    }
}

impl BinlogReader {
    /// Connects as a replica and requests the binlog from `from`.
    pub async fn open(setup: ReaderSetup<'_>, from: &BinlogPosition) -> Result<Self, CaptureError> {
        let mut conn = source::connect(setup.source).await?;
        let use_gtid = setup.info.is_mariadb && from.gtid.is_some();
        if setup.info.is_mariadb {
            // Without this MariaDB replaces GTID events with BEGIN queries and dummies.
            conn.query_drop("SET @mariadb_slave_capability=4").await?;
        }
        if setup.source.heartbeat_s > 0 {
            let ns = setup.source.heartbeat_s * 1_000_000_000;
            conn.query_drop(format!("SET @master_heartbeat_period={ns}"))
                .await?;
        }
        if let (true, Some(gtid)) = (use_gtid, &from.gtid) {
            conn.exec_drop("SET @slave_connect_state=?", (gtid.as_str(),))
                .await?;
            conn.query_drop("SET @slave_gtid_strict_mode=0").await?;
        }
        let request = BinlogStreamRequest::new(setup.source.server_id);
        let request = if use_gtid {
            request
        } else {
            request
                .with_filename(from.file.as_bytes())
                .with_pos(from.pos)
        };
        let stream = conn
            .get_binlog_stream(request)
            .await
            .map_err(|e| dump_error(e, from, &setup))?;
        info!(position = %from, by_gtid = use_gtid, "binlog stream opened");
        Ok(BinlogReader {
            stream,
            server_name: setup.server_name.into(),
            filter: setup.filter,
            keys: setup.keys,
            gtid: from
                .gtid
                .as_deref()
                .map(GtidState::parse)
                .transpose()
                .map_err(CaptureError::ServerSetup)?
                .unwrap_or_default(),
            info: setup.info,
            pool: setup.pool,
            tables: HashMap::new(),
            file: from.file.as_str().into(),
            seen_format_description: false,
            trx: None,
            pending_gtid: None,
            out: VecDeque::new(),
            started_from: from.clone(),
        })
    }

    /// Ends the replication connection and the look-up pool.
    pub async fn close(self) {
        let pool = self.pool.clone();
        drop(self);
        pool.disconnect().await.ok();
    }

    /// The next change or commit; `None` when the server ends the stream.
    pub async fn next(&mut self) -> Result<Option<ReaderItem>, CaptureError> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Ok(Some(item));
            }
            let event = match self.stream.next().await {
                None => return Ok(None),
                Some(Ok(event)) => event,
                Some(Err(e)) => return Err(self.stream_error(e)),
            };
            self.handle(event).await?;
        }
    }

    fn stream_error(&self, err: mysql_async::Error) -> CaptureError {
        match err {
            mysql_async::Error::Server(ref s) if s.code == 1236 => CaptureError::PositionLost {
                position: self.started_from.to_string(),
                offsets_topic: format!("{}.offsets", self.server_name),
                detail: s.message.clone(),
            },
            other => source::explain_privilege_error(other, self.info.is_mariadb, true),
        }
    }

    fn decode_error(&self, event: &Event, detail: impl Into<String>) -> CaptureError {
        let header = event.header();
        CaptureError::Decode {
            file: self.file.to_string(),
            pos: u64::from(header.log_pos().saturating_sub(header.event_size())),
            detail: detail.into(),
        }
    }

    async fn handle(&mut self, event: Event) -> Result<(), CaptureError> {
        let header = event.header();
        let raw_type = header.event_type_raw();
        if raw_type == MARIADB_GTID {
            return self.on_mariadb_gtid(&event);
        }
        if MARIADB_COMPRESSED.contains(&raw_type) {
            return Err(self.decode_error(&event, "compressed binlog event (log_bin_compress=ON) cannot be decoded; set log_bin_compress=OFF"));
        }
        let data = match event.read_data() {
            Ok(Some(data)) => data,
            Ok(None) => return Ok(()),
            Err(e) => return Err(self.decode_error(&event, e.to_string())),
        };
        match data {
            EventData::FormatDescriptionEvent(_) => self.seen_format_description = true,
            EventData::RotateEvent(rotate) => {
                let mut name = rotate.name_raw().to_vec();
                if !self.seen_format_description && name.len() > 4 {
                    // The rotate sent before the format description carries the CRC32 in its name.
                    name.truncate(name.len() - 4);
                }
                self.file = String::from_utf8_lossy(&name).into();
                debug!(file = %self.file, pos = rotate.position(), "rotate");
            }
            EventData::QueryEvent(query) => {
                let sql = query.query();
                let sql = sql.trim();
                if sql.eq_ignore_ascii_case("BEGIN") {
                    if self.trx.is_none() {
                        self.begin(format!("{}:{}", self.file, header.log_pos()), false);
                    }
                } else if sql.eq_ignore_ascii_case("COMMIT") {
                    self.commit(&event);
                } else {
                    // DDL: schemas come from the next TABLE_MAP; drop the fallback cache.
                    self.tables.clear();
                    let db = query.schema().into_owned();
                    self.out.push_back(ReaderItem::SchemaChange(SchemaChange {
                        recorded: self.filter.records_ddl_of(&db),
                        db,
                        ddl: sql.to_owned(),
                        position: BinlogPosition {
                            file: self.file.to_string(),
                            pos: u64::from(header.log_pos()),
                            gtid: self.pending_gtid.map(|(d, s, n)| format!("{d}-{s}-{n}")),
                            ts_ms: i64::from(header.timestamp()) * 1000,
                            ..Default::default()
                        },
                    }));
                    if self.trx.as_ref().is_none_or(|t| t.standalone) {
                        self.commit(&event);
                    }
                }
            }
            EventData::XidEvent(_) => self.commit(&event),
            EventData::HeartbeatEvent if self.trx.is_none() => {
                self.out.push_back(ReaderItem::Heartbeat(BinlogPosition {
                    file: self.file.to_string(),
                    pos: u64::from(header.log_pos()),
                    gtid: (!self.gtid.is_empty()).then(|| self.gtid.to_string()),
                    ts_ms: now_ms(),
                    ..Default::default()
                }));
            }
            EventData::TableMapEvent(tme) => {
                let table_id = tme.table_id();
                let same = self
                    .tables
                    .get(&table_id)
                    .is_some_and(|t| t.raw == event.data());
                if !same {
                    let db = tme.database_name().into_owned();
                    let table = tme.table_name().into_owned();
                    let schema = if self.filter.decodes(&db, &table) {
                        let fallback = if TableSchema::table_map_is_complete(&tme) {
                            None
                        } else {
                            Some(source::info_columns(&self.pool, &db, &table).await?)
                        };
                        let collations = &self.info.collations;
                        let schema =
                            TableSchema::from_table_map(&tme, fallback.as_deref(), collations)
                                .and_then(|s| s.keyed_by(&self.keys))
                                .map_err(|e| self.decode_error(&event, e))?;
                        Some(Arc::new(schema))
                    } else {
                        None
                    };
                    self.tables.insert(
                        table_id,
                        CachedTable {
                            raw: event.data().to_vec(),
                            schema,
                        },
                    );
                }
            }
            EventData::RowsEvent(rows) => self.on_rows(&event, &rows)?,
            _ => {}
        }
        Ok(())
    }

    fn on_mariadb_gtid(&mut self, event: &Event) -> Result<(), CaptureError> {
        let data = event.data();
        if data.len() < 13 {
            return Err(self.decode_error(event, "GTID event shorter than 13 bytes"));
        }
        let seq = u64::from_le_bytes(data[0..8].try_into().expect("8 bytes"));
        let domain = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
        let flags = data[12];
        let server = event.header().server_id();
        self.pending_gtid = Some((domain, server, seq));
        self.begin(
            format!("{domain}-{server}-{seq}"),
            flags & FL_STANDALONE != 0,
        );
        Ok(())
    }

    fn begin(&mut self, id: String, standalone: bool) {
        self.trx = Some(OpenTransaction {
            id: id.into(),
            standalone,
            events: 0,
            per_table: HashMap::new(),
        });
    }

    fn commit(&mut self, event: &Event) {
        if let Some((domain, server, seq)) = self.pending_gtid.take() {
            self.gtid.advance(domain, server, seq);
        }
        self.trx = None;
        let header = event.header();
        self.out.push_back(ReaderItem::Commit(BinlogPosition {
            file: self.file.to_string(),
            pos: u64::from(header.log_pos()),
            gtid: (!self.gtid.is_empty()).then(|| self.gtid.to_string()),
            ts_ms: i64::from(header.timestamp()) * 1000,
            ..Default::default()
        }));
    }

    fn on_rows(&mut self, event: &Event, rows: &RowsEventData<'_>) -> Result<(), CaptureError> {
        let table_id = rows.table_id();
        let unknown_table = || {
            format!(
                "rows event for table id {table_id}, whose TABLE_MAP was not read: the start position \
                 is inside a transaction; resume from a GTID or from the start of a transaction"
            )
        };
        let Some(cached) = self.tables.get(&table_id) else {
            return Err(self.decode_error(event, unknown_table()));
        };
        let Some(schema) = cached.schema.clone() else {
            return Ok(()); // a table the filter excludes
        };
        let Some(tme) = self.stream.get_tme(table_id) else {
            return Err(self.decode_error(event, unknown_table()));
        };
        let op = match event.header().event_type() {
            Ok(EventType::WRITE_ROWS_EVENT | EventType::WRITE_ROWS_EVENT_V1) => Op::Create,
            Ok(
                EventType::UPDATE_ROWS_EVENT
                | EventType::UPDATE_ROWS_EVENT_V1
                | EventType::PARTIAL_UPDATE_ROWS_EVENT,
            ) => Op::Update,
            Ok(EventType::DELETE_ROWS_EVENT | EventType::DELETE_ROWS_EVENT_V1) => Op::Delete,
            other => {
                return Err(
                    self.decode_error(event, format!("unexpected rows event type {other:?}"))
                );
            }
        };
        let header = event.header();
        let pos = u64::from(header.log_pos().saturating_sub(header.event_size()));
        let ts_ms = i64::from(header.timestamp()) * 1000;
        let now_ms = now_ms();
        let trx = self.trx.get_or_insert_with(|| OpenTransaction {
            id: format!("{}:{pos}", self.file).into(),
            standalone: false,
            events: 0,
            per_table: HashMap::new(),
        });
        let gtid: Option<Arc<str>> = self
            .pending_gtid
            .map(|(d, s, n)| format!("{d}-{s}-{n}").into());
        let decode_error = |detail: String| CaptureError::Decode {
            file: self.file.to_string(),
            pos,
            detail: format!("{}.{}: {detail}", schema.db, schema.table),
        };
        let partial = matches!(
            event.header().event_type(),
            Ok(EventType::PARTIAL_UPDATE_ROWS_EVENT)
        );
        let images = RowImages::new(&schema, tme, rows, partial).map_err(decode_error)?;
        let mut table_order = trx.per_table.get(&table_id).copied().unwrap_or(0);
        for (row, pair) in images.enumerate() {
            let (before, after) = pair.map_err(|e| decode_error(format!("row {row}: {e}")))?;
            let source = SourceInfo {
                name: self.server_name.clone(),
                ts_ms,
                snapshot: SnapshotMarker::False,
                db: schema.db.clone(),
                table: schema.table.clone(),
                server_id: header.server_id(),
                gtid: gtid.clone(),
                file: self.file.clone(),
                pos,
                row: row as u32,
            };
            for change in row_changes(&schema, op, before, after)
                .into_iter()
                .flatten()
            {
                trx.events += 1;
                table_order += 1;
                self.out.push_back(ReaderItem::Change(Box::new(ChangeEvent {
                    op: change.op,
                    key: change.key,
                    before: change.before,
                    after: change.after,
                    source: source.clone(),
                    ts_ms: now_ms,
                    transaction: Some(TransactionInfo {
                        id: trx.id.clone(),
                        total_order: trx.events,
                        data_collection_order: table_order,
                    }),
                })));
            }
        }
        trx.per_table.insert(table_id, table_order);
        Ok(())
    }
}

/// What one row change is, before its source and transaction are attached.
struct RowChange {
    op: Op,
    key: Row,
    before: Option<Row>,
    after: Option<Row>,
}

/// The change events of one row: an update that changes the primary key becomes a
/// delete of the old key and a create of the new one, as Debezium does.
fn row_changes(
    schema: &TableSchema,
    op: Op,
    before: Option<Vec<Value>>,
    after: Option<Vec<Value>>,
) -> [Option<RowChange>; 2] {
    let row = |values: Vec<Value>| Row {
        columns: schema.names.clone(),
        values,
    };
    let key_of = |values: &[Value]| Row {
        columns: schema.key_names.clone(),
        values: schema.key.iter().map(|&i| values[i].clone()).collect(),
    };
    let event = |op, key, before, after| {
        Some(RowChange {
            op,
            key,
            before,
            after,
        })
    };
    match (op, before, after) {
        (Op::Update, Some(b), Some(a)) => {
            let (old_key, new_key) = (key_of(&b), key_of(&a));
            if old_key == new_key {
                [event(Op::Update, new_key, Some(row(b)), Some(row(a))), None]
            } else {
                [
                    event(Op::Delete, old_key, Some(row(b)), None),
                    event(Op::Create, new_key, None, Some(row(a))),
                ]
            }
        }
        (_, Some(b), None) => [event(Op::Delete, key_of(&b), Some(row(b)), None), None],
        (_, None, Some(a)) => [event(Op::Create, key_of(&a), None, Some(row(a))), None],
        _ => [None, None],
    }
}

fn dump_error(
    err: mysql_async::Error,
    from: &BinlogPosition,
    setup: &ReaderSetup<'_>,
) -> CaptureError {
    match err {
        mysql_async::Error::Server(ref s) if s.code == 1236 => CaptureError::PositionLost {
            position: from.to_string(),
            offsets_topic: format!("{}.offsets", setup.server_name),
            detail: s.message.clone(),
        },
        other => source::explain_privilege_error(other, setup.info.is_mariadb, true),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
