//! Turns binlog events into change events and commit positions.
//!
//! An [`EventDecoder`] follows one binlog stream of MariaDB or MySQL: the file
//! being read, the GTID state (MariaDB's per-domain state or MySQL's executed
//! GTID set), the open transaction, and the schemas of TABLE_MAP events
//! (filtered tables are skipped before their rows are decoded). It takes events
//! from wherever they come from (the replication connection of
//! [`crate::binlog_reader`], or recorded bytes in tests) and queues
//! [`ReaderItem`]s: every row change as a [`ChangeEvent`], and after each
//! committed transaction the [`BinlogPosition`] to resume from.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use mysql_async::binlog::EventType;
use mysql_async::binlog::events::{
    Event, EventData, GtidEvent, PreviousGtidsEvent, RowsEventData, TableMapEvent,
};
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, Conn, Pool};
use mysql_common::binlog::EventStreamReader;
use mysql_common::packets::Tag;
use prometheus_client::metrics::counter::Counter;
use tracing::{debug, info, warn};
use tributary_proto::gtid::{Gtid, MySqlSource};
use tributary_proto::{
    BinlogCoordinates, ChangeEvent, LogCoordinates, Op, SnapshotMarker, SourceInfo, TransactionInfo,
};

use crate::change_stream::{ReaderItem, SchemaChange};
use crate::config::FailureHandling;
use crate::ddl_replay::SchemaModel;
use crate::ddl_statement::{self, TableChangeKind};
use crate::error::CaptureError;
use crate::event_shape::EventShape;
use crate::filter::TableFilter;
use crate::gtid_state::{GtidSet, GtidState};
use crate::position::BinlogPosition;
use crate::restart_skip::{RestartSkip, RowsSkip, StartSkip};
use crate::row_change::{RowChange, row_changes};
use crate::row_image::RowImages;
use crate::row_query::RowQueries;
use crate::schema::TableSchema;
use crate::schema_change_record::DescribedChange;
use crate::source::{self, ServerInfo};
use crate::table_definition::Flavor;
use crate::table_model::TableModel;

/// The TABLE_MAP events seen so far, by table id: rows events are decoded with them.
pub trait TableMaps {
    /// The TABLE_MAP event of `table_id`, if one was read.
    fn table_map(&self, table_id: u64) -> Option<&TableMapEvent<'static>>;
}

impl TableMaps for BinlogStream {
    fn table_map(&self, table_id: u64) -> Option<&TableMapEvent<'static>> {
        self.get_tme(table_id)
    }
}

impl TableMaps for EventStreamReader {
    fn table_map(&self, table_id: u64) -> Option<&TableMapEvent<'static>> {
        self.get_tme(table_id)
    }
}

/// MariaDB event types that mysql_common does not decode.
const MARIADB_GTID: u8 = 162;
/// QUERY_EVENT's type code.
const QUERY_EVENT: u8 = 2;
/// MariaDB compressed query/rows events (`log_bin_compress=ON`).
const MARIADB_COMPRESSED: std::ops::RangeInclusive<u8> = 165..=168;
/// MariaDB GTID flag: the transaction is one statement with no COMMIT/XID (DDL).
const FL_STANDALONE: u8 = 1;

struct OpenTransaction {
    id: Arc<str>,
    /// One statement with no COMMIT/XID (DDL). A MySQL GTID is standalone
    /// until a `BEGIN` follows it.
    standalone: bool,
    events: u64,
    /// Events so far per table (by table id, which names one table within a transaction).
    per_table: HashMap<u64, u64>,
    /// The connection that ran it, from MySQL's `BEGIN` query event
    /// (`source.thread`); MariaDB starts transactions with a GTID event instead.
    thread: Option<u32>,
}

/// What the event that starts a transaction said about it.
#[derive(Default, Clone)]
struct TransactionStart {
    gtid: Option<Gtid>,
    /// MySQL 8's `original_commit_timestamp`, in milliseconds: when the
    /// transaction committed on the server that first ran it.
    commit_ts_ms: Option<i64>,
}

/// A MySQL 8 TRANSACTION_PAYLOAD event (`binlog_transaction_compression=ON`)
/// whose inner events are being read.
#[derive(Clone, Copy)]
struct Payload {
    start: u64,
    end: u64,
    /// Rows of the payload's events so far: its events share one position,
    /// so their rows are numbered through the payload.
    rows: u32,
}

struct CachedTable {
    raw: Vec<u8>,
    schema: Option<Arc<TableSchema>>,
}

/// What a decoder needs besides the events.
pub struct DecoderSetup {
    /// Which tables to capture.
    pub filter: TableFilter,
    /// How their events are shaped (names, keys, columns, values, schemas).
    pub shape: EventShape,
    /// Result of preflight.
    pub info: ServerInfo,
    /// Pool for `information_schema` look-ups (TABLE_MAPs without full
    /// metadata, declared lengths for `columns:` rules).
    pub pool: Pool,
    /// What a rows event that cannot be decoded does
    /// (`events.event.processing.failure.handling.mode`).
    pub failure_handling: FailureHandling,
    /// Counts the rows events skipped.
    pub events_skipped: Counter,
    /// What of the first transaction was sent before (`source.start_skip`).
    pub start_skip: Option<StartSkip>,
    /// The tables at the start (`None`: each read from the server at its
    /// first DDL statement).
    pub schemas: Option<SchemaModel>,
}

/// Binlog events in, [`ReaderItem`]s out.
pub struct EventDecoder {
    setup: DecoderSetup,
    /// Skipping what a Debezium offset says was sent (`source.start_skip`).
    restart: Option<RestartSkip>,
    tables: HashMap<u64, CachedTable>,
    /// The binlog file being read (shared by the events of its rows).
    file: Arc<str>,
    gtid: GtidState,
    /// MySQL: whether `gtid` holds every transaction before the position (a
    /// start given as a GTID set, read from the server, or a file's
    /// PREVIOUS_GTIDS read from its start). Until it does, positions carry no
    /// GTID set, so that a restart never asks the server for a set with holes.
    mysql_set_complete: bool,
    /// Whether the current file is read from its start.
    from_file_start: bool,
    seen_format_description: bool,
    trx: Option<OpenTransaction>,
    pending: TransactionStart,
    payload: Option<Payload>,
    /// `events.include.query`: the statement of the rows being decoded.
    queries: Option<RowQueries>,
    /// The tables as DDL left them at the position, for the schema change
    /// topic (made at its first DDL statement).
    schemas: Option<SchemaModel>,
    out: VecDeque<ReaderItem<BinlogPosition>>,
}

impl EventDecoder {
    /// A decoder for a stream that starts at `from`.
    pub fn new(mut setup: DecoderSetup, from: &BinlogPosition) -> Result<Self, CaptureError> {
        let gtid = from
            .gtid
            .as_deref()
            .map(GtidState::parse)
            .transpose()
            .map_err(|e| CaptureError::ServerSetup(e.to_string()))?
            .unwrap_or_default();
        let mysql_set_complete = setup.info.gtid_mode_on && from.gtid.is_some();
        // A stored MySQL set with gtid_mode no longer ON cannot be kept up.
        let gtid = match gtid {
            GtidState::MySql(_) if !mysql_set_complete => GtidState::Empty,
            gtid => gtid,
        };
        Ok(EventDecoder {
            mysql_set_complete,
            tables: HashMap::new(),
            file: from.file.as_str().into(),
            gtid,
            from_file_start: from.pos <= 4,
            seen_format_description: false,
            trx: None,
            pending: TransactionStart::default(),
            payload: None,
            queries: setup
                .shape
                .include_query
                .then(|| RowQueries::new(setup.info.is_mariadb.then(|| setup.pool.clone()))),
            schemas: setup.schemas.take(),
            out: VecDeque::new(),
            restart: setup.start_skip.map(RestartSkip::new),
            setup,
        })
    }

    /// The next decoded item, if any is queued.
    pub fn pop(&mut self) -> Option<ReaderItem<BinlogPosition>> {
        self.out.pop_front()
    }

    /// Ends the look-up pool.
    pub async fn close(self) {
        self.setup.pool.disconnect().await.ok();
    }

    fn decode_error(&self, event: &Event, detail: impl Into<String>) -> CaptureError {
        CaptureError::Decode {
            file: self.file.to_string(),
            pos: self.start_of(event),
            detail: detail.into(),
        }
    }

    /// Where `event` starts (an event inside a transaction payload: where the payload starts).
    fn start_of(&self, event: &Event) -> u64 {
        let header = event.header();
        match (header.log_pos(), self.payload) {
            (0, Some(payload)) => payload.start,
            (end, _) => u64::from(end.saturating_sub(header.event_size())),
        }
    }

    /// Where the event after `event` starts (an event inside a transaction
    /// payload: where the payload ends).
    fn end_of(&self, event: &Event) -> u64 {
        match (event.header().log_pos(), self.payload) {
            (0, Some(payload)) => payload.end,
            (end, _) => u64::from(end),
        }
    }

    /// Decodes one event; what it yields is queued for [`EventDecoder::pop`].
    pub async fn handle(
        &mut self,
        event: Event,
        maps: &impl TableMaps,
    ) -> Result<(), CaptureError> {
        if let Some(restart) = &mut self.restart
            && !restart.started()
            && starts_transaction(&event)
        {
            restart.on_begin();
        }
        // One await, the event held once: this future is part of the reader's
        // `next`, made and moved for every row.
        let handled = self.handle_event(&event, maps).await;
        if let Some(restart) = &mut self.restart {
            restart.after_event();
            if restart.done() {
                info!("the start's skipped events and rows are skipped (source.start_skip)");
                self.restart = None;
            }
        }
        handled
    }

    async fn handle_event(
        &mut self,
        event: &Event,
        maps: &impl TableMaps,
    ) -> Result<(), CaptureError> {
        let header = event.header();
        let raw_type = header.event_type_raw();
        if header.log_pos() != 0 && self.payload.take().is_some() && self.trx.is_some() {
            return Err(self.decode_error(
                event,
                "the compressed transaction before this event was not read to its end \
                 (its payload could not be decompressed)",
            ));
        }
        if raw_type == MARIADB_GTID {
            return self.on_mariadb_gtid(event);
        }
        if MARIADB_COMPRESSED.contains(&raw_type) {
            return Err(self.decode_error(event, "compressed binlog event (log_bin_compress=ON) cannot be decoded; set log_bin_compress=OFF"));
        }
        let data = match event.read_data() {
            Ok(Some(data)) => data,
            Ok(None) => return Ok(()),
            Err(e) => return Err(self.decode_error(event, e.to_string())),
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
                self.from_file_start = rotate.position() <= 4;
                debug!(file = %self.file, pos = rotate.position(), "rotate");
            }
            EventData::GtidEvent(gtid) => self.on_mysql_gtid(event, &gtid, true),
            EventData::AnonymousGtidEvent(anonymous) => {
                if self.mysql_set_complete {
                    // gtid_mode is not ON (any more): no set can say where
                    // capture is; positions resume by file and offset.
                    warn!(file = %self.file, "an anonymous (GTID-less) transaction: positions no longer keep a GTID set");
                    self.mysql_set_complete = false;
                    self.gtid = GtidState::Empty;
                }
                self.on_mysql_gtid(event, &anonymous.0, false)
            }
            EventData::PreviousGtidsEvent(previous) => self.on_previous_gtids(&previous),
            EventData::TransactionPayloadEvent(_) => {
                let start = self.start_of(event);
                self.payload = Some(Payload {
                    start,
                    end: u64::from(header.log_pos()),
                    rows: 0,
                });
            }
            EventData::QueryEvent(query) => {
                let sql = query.query();
                let sql = sql.trim();
                match Statement::of(sql) {
                    Statement::Begin => {
                        if self.trx.is_none() {
                            let start = self.start_of(event);
                            self.begin(format!("{}:{}", self.file, header.log_pos()), false, start);
                        }
                        if let Some(trx) = &mut self.trx {
                            trx.standalone = false;
                            trx.thread = Some(query.thread_id());
                        }
                    }
                    Statement::End => self.commit(event),
                    Statement::InTransaction => {}
                    Statement::Ddl { opens_transaction } => {
                        // Schemas come from the next TABLE_MAP; drop the fallback cache.
                        self.tables.clear();
                        let db = query.schema().into_owned();
                        let described = if self.setup.shape.debezium_schema_changes {
                            // Boxed, as every query below: see `on_table_map`.
                            Some(Box::pin(self.describe(event, &db, sql)).await?)
                        } else {
                            None
                        };
                        self.out
                            .push_back(ReaderItem::SchemaChange(Box::new(SchemaChange {
                                // Debezium records the DDL of every database.
                                recorded: described.is_some()
                                    || self.setup.filter.records_ddl_of(&db),
                                db,
                                ddl: sql.to_owned(),
                                position: self.position_after(event, true),
                                described,
                            })));
                        match &mut self.trx {
                            // MySQL 8.0.21+ logs CREATE TABLE … SELECT as one
                            // transaction: the rows and an XID follow.
                            Some(trx) if opens_transaction => trx.standalone = false,
                            Some(trx) if !trx.standalone => {}
                            _ => self.commit(event),
                        }
                    }
                }
            }
            // XA: the rows are logged (and published) at XA PREPARE; the
            // later XA COMMIT or XA ROLLBACK is a transaction of its own.
            EventData::XidEvent(_) | EventData::XaPrepareLogEvent(_) => self.commit(event),
            EventData::HeartbeatEvent if self.trx.is_none() => {
                let position = BinlogPosition {
                    ts_ms: now_ms(),
                    ..self.position_after(event, false)
                };
                self.out.push_back(ReaderItem::Heartbeat(position));
            }
            EventData::TableMapEvent(tme) => self.on_table_map(event, &tme).await?,
            EventData::RowsQueryEvent(query) => {
                let pos = self.start_of(event);
                if let Some(queries) = &mut self.queries {
                    queries.rows_query(query.query_raw(), &self.file, pos);
                }
            }
            EventData::RowsEvent(rows) => {
                let (queued, events) = (self.out.len(), self.trx.as_ref().map(|t| t.events));
                if let Err(error) = self.on_rows(event, &rows, maps) {
                    // Nothing of the event is sent: what it queued is taken back.
                    self.out.truncate(queued);
                    if let (Some(trx), Some(events)) = (self.trx.as_mut(), events) {
                        trx.events = events;
                    }
                    self.on_failure(error)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A rows event that cannot be decoded: capture stops on it, or, as
    /// `event.processing.failure.handling.mode` says, skips it.
    fn on_failure(&mut self, error: CaptureError) -> Result<(), CaptureError> {
        match self.setup.failure_handling {
            FailureHandling::Fail => return Err(error),
            FailureHandling::Warn => warn!(
                %error,
                "rows event skipped (event.processing.failure.handling.mode: warn): its rows are not published"
            ),
            FailureHandling::Skip => debug!(
                %error,
                "rows event skipped (event.processing.failure.handling.mode: skip)"
            ),
        }
        self.setup.events_skipped.inc();
        Ok(())
    }

    /// What Debezium's schema change topic records of the DDL statement
    /// `sql` (run in `db`): its effects, each changed table as the statement
    /// left it ([`SchemaModel`]; read from the server where the model does not
    /// have it).
    async fn describe(
        &mut self,
        event: &Event,
        db: &str,
        sql: &str,
    ) -> Result<DescribedChange, CaptureError> {
        let source = SourceInfo {
            name: self.setup.shape.server_name.clone(),
            ts_ms: self.ts_ms(event),
            snapshot: SnapshotMarker::False,
            db: db.into(),
            table: "".into(),
            log: LogCoordinates::Binlog(BinlogCoordinates {
                server_id: event.header().server_id(),
                gtid: self.pending.gtid.as_ref().map(|g| g.to_string().into()),
                file: self.file.clone(),
                pos: self.start_of(event),
                row: 0,
                thread: None,
                query: None,
            }),
        };
        let flavor = Flavor {
            mariadb_connector: self.setup.shape.connector == "mariadb",
        };
        let rules = self.setup.info.schema_rules;
        let schemas = self.schemas.get_or_insert_with(|| SchemaModel::new(rules));
        // A connection only for what the model does not have.
        let mut conn = None;
        for needed in schemas.databases_needed(sql, db) {
            let conn = lookup_conn(&mut conn, &self.setup.pool).await?;
            let charset: Option<String> = conn
                .exec_first(
                    "SELECT DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA \
                     WHERE SCHEMA_NAME = ?",
                    (&needed,),
                )
                .await?;
            if let Some(charset) = charset {
                schemas.set_database(&needed, &charset);
            }
        }
        schemas.apply(sql, db);
        let mut effects = Vec::new();
        for effect in ddl_statement::effects(sql, db) {
            let definition = match &effect.table {
                Some((kind, table)) if *kind != TableChangeKind::Drop => {
                    match schemas.table(&effect.db, table) {
                        Some(model) => Some(model.definition(flavor)),
                        None => {
                            let conn = lookup_conn(&mut conn, &self.setup.pool).await?;
                            let model = TableModel::read(conn, &effect.db, table).await?;
                            model.map(|model| {
                                let definition = model.definition(flavor);
                                schemas.set_table(&effect.db, table, model);
                                definition
                            })
                        }
                    }
                }
                _ => None,
            };
            effects.push((effect, definition));
        }
        Ok(DescribedChange { source, effects })
    }

    /// Caches the table's schema by table id. The queries it may run are
    /// boxed, as `describe`'s: a future has room for its largest await, and
    /// the reader's `next`, whose future is made and moved for every row,
    /// would carry theirs (kilobytes copied per row).
    async fn on_table_map(
        &mut self,
        event: &Event,
        tme: &TableMapEvent<'_>,
    ) -> Result<(), CaptureError> {
        let table_id = tme.table_id();
        let (start, end) = (self.start_of(event), self.end_of(event));
        if let Some(queries) = &mut self.queries {
            let captured = self
                .setup
                .filter
                .decodes(&tme.database_name(), &tme.table_name());
            Box::pin(queries.table_map(&self.file, (start, end), captured)).await?;
        }
        let same = self
            .tables
            .get(&table_id)
            .is_some_and(|t| t.raw == event.data());
        if same {
            return Ok(());
        }
        let db = tme.database_name().into_owned();
        let table = tme.table_name().into_owned();
        let schema = if self.setup.filter.decodes(&db, &table) {
            let complete = TableSchema::table_map_is_complete(tme);
            let info = if !complete || self.setup.shape.needs_info() {
                let mut info =
                    Box::pin(source::info_columns(&self.setup.pool, &db, &table)).await?;
                // The server shows today's defaults; the model, those of the position.
                if let Some(model) = self.schemas.as_ref().and_then(|s| s.table(&db, &table)) {
                    model.set_defaults_of(&mut info);
                }
                Some(info)
            } else {
                None
            };
            let fallback = info.as_deref().filter(|_| !complete);
            let collations = &self.setup.info.collations;
            let schema = TableSchema::from_table_map(tme, fallback, collations)
                .and_then(|s| self.setup.shape.table(s, info.as_deref()))
                .map_err(|e| self.decode_error(event, e.to_string()))?;
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
        Ok(())
    }

    /// MySQL: a file starts with the set of every transaction before it; read
    /// from its start, it completes a GTID set that was not known.
    fn on_previous_gtids(&mut self, previous: &PreviousGtidsEvent<'_>) {
        let usable = self.setup.info.gtid_mode_on && self.from_file_start;
        if self.mysql_set_complete || !usable {
            return;
        }
        let mut set = GtidSet::default();
        for sid in previous.sids() {
            let source = mysql_source(sid.uuid(), sid.tag());
            for interval in sid.intervals() {
                // MySQL's intervals end before their `end`.
                set.add_range(&source, interval.start(), interval.end() - 1);
            }
        }
        info!(file = %self.file, gtids = %set, "MySQL GTID set read from the file's PREVIOUS_GTIDS");
        self.gtid = GtidState::MySql(set);
        self.mysql_set_complete = true;
    }

    fn on_mariadb_gtid(&mut self, event: &Event) -> Result<(), CaptureError> {
        let data = event.data();
        if data.len() < 13 {
            return Err(self.decode_error(event, "GTID event shorter than 13 bytes"));
        }
        let sequence = u64::from_le_bytes(data[0..8].try_into().expect("8 bytes"));
        let domain = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
        let flags = data[12];
        let gtid = Gtid::MariaDb {
            domain,
            server: event.header().server_id(),
            sequence,
        };
        self.begin(
            gtid.to_string(),
            flags & FL_STANDALONE != 0,
            self.start_of(event),
        );
        self.pending = TransactionStart {
            gtid: Some(gtid),
            commit_ts_ms: None,
        };
        Ok(())
    }

    /// A MySQL GTID (`identified`) or ANONYMOUS_GTID event: a transaction starts.
    fn on_mysql_gtid(&mut self, event: &Event, data: &GtidEvent, identified: bool) {
        let gtid = identified.then(|| Gtid::MySql {
            source: mysql_source(data.sid(), data.tag()),
            transaction: data.gno(),
        });
        let id = match &gtid {
            Some(gtid) => gtid.to_string(),
            None => format!("{}:{}", self.file, self.start_of(event)),
        };
        // Standalone (DDL) until a BEGIN says otherwise.
        self.begin(id, true, self.start_of(event));
        let original = data.original_commit_timestamp();
        self.pending = TransactionStart {
            gtid,
            commit_ts_ms: (original > 0).then_some((original / 1000) as i64),
        };
    }

    /// A transaction starts with the event at `start`.
    fn begin(&mut self, id: String, standalone: bool, start: u64) {
        if let Some(queries) = &mut self.queries {
            queries.begin(start);
        }
        self.trx = Some(OpenTransaction {
            id: id.into(),
            standalone,
            events: 0,
            per_table: HashMap::new(),
            thread: None,
        });
    }

    /// The transaction's commit time: MySQL's original commit timestamp when
    /// the GTID event carried one, else the event's own (whole seconds).
    fn ts_ms(&self, event: &Event) -> i64 {
        self.pending
            .commit_ts_ms
            .unwrap_or_else(|| i64::from(event.header().timestamp()) * 1000)
    }

    /// The position after `event`, with the GTID state after the pending
    /// transaction when `with_pending`.
    fn position_after(&self, event: &Event, with_pending: bool) -> BinlogPosition {
        let mut state = self.gtid.clone();
        if let (true, Some(gtid)) = (with_pending, &self.pending.gtid) {
            self.advance(&mut state, gtid);
        }
        let gtid = if state.is_empty() {
            // MySQL with GTIDs on but none executed yet: an empty, complete set.
            self.mysql_set_complete.then(String::new)
        } else {
            Some(state.to_string())
        };
        BinlogPosition {
            file: self.file.to_string(),
            pos: self.end_of(event),
            gtid,
            ts_ms: self.ts_ms(event),
        }
    }

    fn advance(&self, state: &mut GtidState, gtid: &Gtid) {
        // A MySQL set with holes would make a restart fetch old transactions again.
        if matches!(gtid, Gtid::MariaDb { .. }) || self.mysql_set_complete {
            state.advance(gtid);
        }
    }

    fn commit(&mut self, event: &Event) {
        let position = self.position_after(event, true);
        if let Some(gtid) = self.pending.gtid.take() {
            let mut state = std::mem::take(&mut self.gtid);
            self.advance(&mut state, &gtid);
            self.gtid = state;
        }
        self.pending = TransactionStart::default();
        self.trx = None;
        self.payload = None;
        self.out.push_back(ReaderItem::Commit(position));
    }

    fn on_rows(
        &mut self,
        event: &Event,
        rows: &RowsEventData<'_>,
        maps: &impl TableMaps,
    ) -> Result<(), CaptureError> {
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
        let Some(tme) = maps.table_map(table_id) else {
            return Err(self.decode_error(event, unknown_table()));
        };
        let sent_before = match self.restart.as_mut().map(RestartSkip::rows_event) {
            Some(RowsSkip::Whole) => return Ok(()),
            Some(RowsSkip::First(rows)) => u64::from(rows),
            None => 0,
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
        let pos = self.start_of(event);
        let ts_ms = self.ts_ms(event);
        let now_ms = now_ms();
        let query = self.queries.as_ref().and_then(RowQueries::current);
        let trx = self.trx.get_or_insert_with(|| OpenTransaction {
            id: format!("{}:{pos}", self.file).into(),
            standalone: false,
            events: 0,
            per_table: HashMap::new(),
            thread: None,
        });
        // A transaction with a GTID has it as its id (no text made per event).
        let gtid: Option<Arc<str>> = self.pending.gtid.is_some().then(|| trx.id.clone());
        let decode_error = |detail: String| CaptureError::Decode {
            file: self.file.to_string(),
            pos,
            detail: format!("{}.{}: {detail}", schema.db, schema.table),
        };
        let partial = matches!(
            event.header().event_type(),
            Ok(EventType::PARTIAL_UPDATE_ROWS_EVENT)
        );
        let mut images = RowImages::new(&schema, tme, rows, partial, self.setup.shape.decode)
            .map_err(|e| decode_error(e.to_string()))?;
        let mut table_order = trx.per_table.get(&table_id).copied().unwrap_or(0);
        // Events inside a transaction payload share its position: number their
        // rows through the payload, so that (file, pos, row) names one row.
        let inner = event.header().log_pos() == 0;
        let mut row = match self.payload {
            Some(payload) if inner => payload.rows,
            _ => 0,
        };
        let mut index = 0;
        while let Some(pair) = images.next() {
            let (before, after) = pair.map_err(|e| decode_error(format!("row {row}: {e}")))?;
            index += 1;
            if index <= sent_before {
                row += 1;
                continue;
            }
            let undecodable: Vec<Arc<str>> = images
                .raw_text_columns()
                .iter()
                .map(|&i| schema.columns[i].name.as_str().into())
                .collect();
            if !undecodable.is_empty() {
                warn!(
                    table = %format!("{}.{}", schema.db, schema.table),
                    columns = %undecodable.join(","),
                    position = %format!("{}:{pos}", self.file),
                    row,
                    "text not valid in its character set published as raw bytes (undecodable_text: base64)"
                );
            }
            let source = SourceInfo {
                name: self.setup.shape.server_name.clone(),
                ts_ms,
                snapshot: SnapshotMarker::False,
                db: schema.db.clone(),
                table: schema.table.clone(),
                log: LogCoordinates::Binlog(BinlogCoordinates {
                    server_id: header.server_id(),
                    gtid: gtid.clone(),
                    file: self.file.clone(),
                    pos,
                    row,
                    thread: trx.thread,
                    query: query.clone(),
                }),
            };
            let mut push = |change: RowChange, source: SourceInfo| {
                trx.events += 1;
                table_order += 1;
                self.out.push_back(ReaderItem::Change(Box::new(ChangeEvent {
                    op: change.op,
                    key: change.key,
                    before: change.before,
                    after: change.after,
                    source,
                    ts_ms: now_ms,
                    transaction: Some(TransactionInfo {
                        id: trx.id.clone(),
                        total_order: trx.events,
                        data_collection_order: table_order,
                    }),
                    undecodable: undecodable.clone(),
                    schemas: schema.record_schemas.clone(),
                    key_change: change.key_change,
                })));
            };
            // The row's one event takes its source; only a key change's two share it.
            match row_changes(&schema, op, before, after) {
                [Some(first), Some(second)] => {
                    push(first, source.clone());
                    push(second, source);
                }
                [Some(change), None] | [None, Some(change)] => push(change, source),
                [None, None] => {}
            }
            row += 1;
        }
        trx.per_table.insert(table_id, table_order);
        if let Some(payload) = self.payload.as_mut().filter(|_| inner) {
            payload.rows = row;
        }
        Ok(())
    }
}

/// Whether `event` starts a transaction as Debezium counts its events:
/// MariaDB's GTID event, MySQL's `BEGIN`.
fn starts_transaction(event: &Event) -> bool {
    match event.header().event_type_raw() {
        MARIADB_GTID => true,
        QUERY_EVENT => matches!(
            event.read_data(),
            Ok(Some(EventData::QueryEvent(query))) if query.query().trim().eq_ignore_ascii_case("BEGIN")
        ),
        _ => false,
    }
}

/// The source of a MySQL GTID (tags compare without case: kept in lower case).
fn mysql_source(uuid: [u8; 16], tag: Option<&Tag<'_>>) -> MySqlSource {
    MySqlSource {
        uuid: uuid::Uuid::from_bytes(uuid),
        tag: tag.map(|t| t.as_str().to_ascii_lowercase().into()),
    }
}

/// What a QUERY event's statement is to the transaction around it.
#[derive(Debug, PartialEq)]
enum Statement {
    /// `BEGIN`, `XA START`: a transaction of several statements starts.
    Begin,
    /// `COMMIT`, `ROLLBACK`, `XA COMMIT`/`XA ROLLBACK` (of a prepared XA transaction).
    End,
    /// `SAVEPOINT`, `ROLLBACK TO`, `RELEASE SAVEPOINT`, `XA END`: nothing to record.
    InTransaction,
    /// Anything else is DDL, recorded in the schema history; MySQL 8.0.21+
    /// ends an atomic `CREATE TABLE … SELECT` with `START TRANSACTION`.
    Ddl { opens_transaction: bool },
}

impl Statement {
    fn of(sql: &str) -> Statement {
        let words: Vec<String> = sql
            .split_whitespace()
            .take(2)
            .map(str::to_ascii_uppercase)
            .collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["BEGIN"] | ["XA", "START" | "BEGIN"] => Statement::Begin,
            ["COMMIT" | "ROLLBACK"] | ["XA", "COMMIT" | "ROLLBACK"] => Statement::End,
            ["SAVEPOINT", _] | ["ROLLBACK", "TO"] | ["RELEASE", "SAVEPOINT"] | ["XA", "END"] => {
                Statement::InTransaction
            }
            _ => Statement::Ddl {
                opens_transaction: sql
                    .to_ascii_uppercase()
                    .trim_end_matches(';')
                    .trim_end()
                    .ends_with("START TRANSACTION"),
            },
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The look-up connection in `conn`, taken from `pool` at first use.
async fn lookup_conn<'a>(
    conn: &'a mut Option<Conn>,
    pool: &Pool,
) -> Result<&'a mut Conn, CaptureError> {
    if conn.is_none() {
        *conn = Some(pool.get_conn().await?);
    }
    Ok(conn.as_mut().expect("taken above"))
}

#[cfg(test)]
mod tests;
