//! On-demand snapshots of chosen tables while streaming, merged with the binlog
//! so that each topic converges to its table's state: DBLog's algorithm, with
//! binlog positions as the watermarks instead of rows written to the source.
//!
//! One chunk at a time, between two transactions of the stream: the next
//! `snapshot.incremental_chunk_rows` rows of the table, by primary key, are read
//! in a consistent transaction whose exact binlog read point the server gives
//! (MariaDB: `Binlog_snapshot_position`, no lock; MySQL: the position under a
//! `FLUSH TABLES WITH READ LOCK` held only while the transaction starts). If the
//! stream has already passed that point (a server can send a transaction to
//! replicas a moment before its commit is visible to readers), the chunk is
//! read again after the stream's next item. The stream goes on; keys of the
//! table changed by transactions committing after the point are dropped from
//! the chunk, since the stream carries a newer state. When the stream reaches the point, the rest of the
//! chunk is sent as `op: r` events with `source.snapshot: "incremental"`, after
//! every change older than it and before every change newer than it, and the
//! next chunk is read. A schema change of the table drops a chunk not yet sent.
//!
//! The tables still to read and the last key sent ([`IncrementalState`]) are
//! stored with every committed position, so a restart goes on with the chunk
//! after the last one acknowledged. Requests arrive as [`signal`] rows.

pub mod signal;
mod state;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tracing::{info, warn};
use tributary_proto::debezium_json::encode_key;
use tributary_proto::{ChangeEvent, SnapshotMarker, SourceInfo};

pub use state::{CursorValue, IncrementalState, KeyCursor};

use crate::chunk_reader::ChunkReader;
use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::filter::TableFilter;
use crate::kafka_writer::KafkaWriter;
use crate::metrics::{CaptureMetrics, TableLabel};
use crate::position::BinlogPosition;
use crate::snapshot;
use crate::snapshot_progress::SnapshotProgress;

/// MySQL error: the table does not exist.
const ER_NO_SUCH_TABLE: u16 = 1146;
/// MySQL errors: unknown column; table definition changed during the transaction.
const ER_BAD_FIELD: u16 = 1054;
const ER_TABLE_DEF_CHANGED: u16 = 1412;
/// MySQL error: lock wait timeout exceeded.
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// Seconds a chunk's read lock (MySQL) may wait.
const LOCK_WAIT_S: u32 = 5;

/// What an attempt to read a chunk came to.
enum Chunked {
    /// A window holds the chunk.
    Read,
    /// Nothing read (the stream was ahead of the read point, or the table changed
    /// under it); try again when the stream has moved.
    Retry,
    /// The table cannot be read and left the queue.
    Skipped,
}

/// Runs the on-demand snapshots of one capture's stream.
pub(crate) struct Incremental {
    config: CaptureConfig,
    is_mariadb: bool,
    filter: TableFilter,
    metrics: CaptureMetrics,
    conn: Option<Conn>,
    state: IncrementalState,
    /// The first table's reader; dropped after a DDL so the next chunk sees the new columns.
    reader: Option<ChunkReader>,
    progress: Option<TableProgress>,
    window: Option<Window>,
}

struct TableProgress {
    label: TableLabel,
    bar: SnapshotProgress,
    done: u64,
}

/// A chunk read but not yet sent, and the binlog position its read saw.
struct Window {
    point: BinlogPosition,
    db: Arc<str>,
    table: Arc<str>,
    /// The columns the chunk was read with.
    columns: Arc<[String]>,
    /// Its key columns, in key order.
    key_columns: Arc<[String]>,
    /// Each row's Kafka key and event, in key order.
    rows: Vec<(Vec<u8>, ChangeEvent)>,
    /// Keys changed by transactions that committed after `point`.
    superseded: HashSet<Vec<u8>>,
    /// Keys of the table changed by the transaction being streamed.
    open_transaction: Vec<Vec<u8>>,
    last_key: Option<Vec<mysql_async::Value>>,
    complete: bool,
}

impl Incremental {
    /// Continues `resumed` (stored with the start position), if any.
    pub(crate) fn new(
        config: &CaptureConfig,
        is_mariadb: bool,
        metrics: &CaptureMetrics,
        resumed: Option<IncrementalState>,
    ) -> Self {
        let state = resumed.unwrap_or_default();
        if let Some(table) = state.tables.first() {
            info!(%table, remaining = state.tables.len(), "resuming the on-demand snapshot");
        }
        Incremental {
            config: config.clone(),
            is_mariadb,
            filter: TableFilter::of(config),
            metrics: metrics.clone(),
            conn: None,
            state,
            reader: None,
            progress: None,
            window: None,
        }
    }

    /// Whether `event` is a row of the signal table (never published).
    pub(crate) fn is_signal(&self, event: &ChangeEvent) -> bool {
        self.filter
            .is_signal_table(&event.source.db, &event.source.table)
    }

    /// Queues the tables a signal row asks for; a bad signal is logged and ignored.
    pub(crate) fn on_signal(&mut self, event: &ChangeEvent) {
        let tables = match signal::requested_tables(event) {
            Ok(tables) => tables,
            Err(reason) => {
                warn!(%reason, key = ?event.key.values, "ignoring a signal row");
                return;
            }
        };
        for table in tables {
            let captured = table
                .split_once('.')
                .is_some_and(|(db, t)| self.filter.captures(db, t));
            if !captured {
                warn!(%table, "snapshot requested for a table this capture does not capture; ignored");
            } else if self.state.tables.contains(&table) {
                info!(%table, "snapshot requested again while it is pending; ignored");
            } else {
                info!(%table, "on-demand snapshot requested");
                self.state.tables.push(table);
            }
        }
    }

    /// A change streamed from the binlog: a key of the table being read is kept
    /// until its transaction commits. A row of another shape than the chunk's
    /// means the table changed: the chunk is dropped and read again.
    pub(crate) fn observe(&mut self, event: &ChangeEvent) {
        let Some(w) = &mut self.window else {
            return;
        };
        if w.table != event.source.table || w.db != event.source.db {
            return;
        }
        let columns = event.after.as_ref().or(event.before.as_ref());
        if columns.is_some_and(|row| *row.columns != *w.columns) {
            self.on_schema_change();
        } else {
            w.open_transaction.push(encode_key(event));
        }
    }

    /// A DDL was streamed: a chunk not yet sent is dropped (its rows have the old
    /// shape), and the next one is read with the table's columns as they are now.
    pub(crate) fn on_schema_change(&mut self) {
        if self.window.take().is_some() {
            info!("schema change during an on-demand snapshot: its current chunk is read again");
        }
        self.reader = None;
    }

    /// A transaction committed at `position`, whose events have been sent: the
    /// chunk is sent when the stream has reached its window's end. The caller
    /// commits the position [`stamp`](Self::stamp)ed afterwards.
    pub(crate) async fn on_commit(
        &mut self,
        position: &BinlogPosition,
        writer: &mut KafkaWriter,
    ) -> Result<(), CaptureError> {
        let Some(w) = &mut self.window else {
            return Ok(());
        };
        let keys = std::mem::take(&mut w.open_transaction);
        if position.is_after(&w.point) {
            w.superseded.extend(keys);
        }
        if position.reached(&w.point) || position.same_transactions(&w.point) {
            self.send_chunk(writer).await?;
        }
        Ok(())
    }

    /// Does what does not wait for the stream, which has reached `at` and is
    /// between two transactions: reads the next chunk, or sends one whose read
    /// point the stream has passed (committing `at` with the new state). False
    /// when there is nothing to do until the stream moves.
    pub(crate) async fn step(
        &mut self,
        at: &BinlogPosition,
        writer: &mut KafkaWriter,
    ) -> Result<bool, CaptureError> {
        match &self.window {
            None if self.state.tables.is_empty() => return Ok(false),
            None => match self.read_chunk(at).await? {
                Chunked::Read => return Ok(true),
                // Read again once the stream has moved on.
                Chunked::Retry => return Ok(false),
                Chunked::Skipped => {} // store the shorter queue
            },
            Some(w) if !at.reached(&w.point) && !at.same_transactions(&w.point) => {
                return Ok(false);
            }
            Some(_) => self.send_chunk(writer).await?,
        }
        writer.commit(self.stamp(at.clone())).await?;
        Ok(true)
    }

    /// `position` with the state of the snapshots in progress, to be stored.
    pub(crate) fn stamp(&self, mut position: BinlogPosition) -> BinlogPosition {
        position.incremental = (!self.state.tables.is_empty()).then(|| self.state.clone());
        position
    }

    async fn connection(&mut self) -> Result<&mut Conn, CaptureError> {
        if self.conn.is_none() {
            let mut conn = snapshot::connect(&self.config).await?;
            if !self.is_mariadb {
                // The read lock of each chunk's start waits for running statements
                // while blocking writes: give up soon and try again later.
                conn.query_drop(format!("SET SESSION lock_wait_timeout = {LOCK_WAIT_S}"))
                    .await?;
            }
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// Reads the first table's next chunk into a window, the stream being at `at`.
    async fn read_chunk(&mut self, at: &BinlogPosition) -> Result<Chunked, CaptureError> {
        let name = self.state.tables[0].clone();
        if self.reader.is_none() && !self.open_table(&name).await? {
            self.finish_table();
            return Ok(Chunked::Skipped);
        }
        let is_mariadb = self.is_mariadb;
        let conn = self.conn.as_mut().expect("opened with the table");
        let point = match snapshot::begin(conn, is_mariadb).await {
            Ok(point) => point,
            Err(CaptureError::MissingGrant { grant, detail }) => {
                warn!(table = %name, %grant, %detail, "the capture user may not take the read lock an on-demand snapshot chunk needs on this server; skipped");
                self.finish_table();
                return Ok(Chunked::Skipped);
            }
            Err(CaptureError::Database(mysql_async::Error::Server(e)))
                if e.code == ER_LOCK_WAIT_TIMEOUT =>
            {
                warn!(table = %name, "the read lock for an on-demand snapshot chunk timed out; trying again");
                return Ok(Chunked::Retry);
            }
            Err(e) => return Err(e),
        };
        if at.is_after(&point) && !at.same_transactions(&point) {
            // The stream sent a transaction this read cannot see yet.
            conn.query_drop("ROLLBACK").await?;
            return Ok(Chunked::Retry);
        }
        let reader = self.reader.as_ref().expect("opened above");
        let after: Option<Vec<mysql_async::Value>> = self
            .state
            .after
            .as_ref()
            .map(|key| key.values.iter().map(mysql_async::Value::from).collect());
        let chunk = match reader.read(conn, after.as_deref(), &point).await {
            Ok(chunk) => chunk,
            // Dropped or altered since its columns were read: capture goes on.
            Err(CaptureError::Database(mysql_async::Error::Server(e)))
                if matches!(
                    e.code,
                    ER_NO_SUCH_TABLE | ER_BAD_FIELD | ER_TABLE_DEF_CHANGED
                ) =>
            {
                conn.query_drop("ROLLBACK").await?;
                if e.code == ER_NO_SUCH_TABLE {
                    warn!(table = %name, "the table was dropped during its on-demand snapshot; skipped");
                    self.finish_table();
                    return Ok(Chunked::Skipped);
                }
                info!(table = %name, "the table changed while a chunk was read: the chunk is read again");
                self.reader = None;
                return Ok(Chunked::Retry);
            }
            Err(e) => return Err(e),
        };
        conn.query_drop("COMMIT").await?;
        let source = SourceInfo {
            name: self.config.server_name.as_str().into(),
            ts_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            snapshot: SnapshotMarker::Incremental,
            gtid: point.gtid.as_deref().map(Arc::from),
            file: point.file.as_str().into(),
            pos: point.pos,
            ..SourceInfo::default()
        };
        let rows = chunk
            .rows
            .into_iter()
            .map(|row| {
                let event = reader.event(row, &source);
                (encode_key(&event), event)
            })
            .collect();
        let schema = reader.schema();
        self.window = Some(Window {
            point,
            db: schema.db.clone(),
            table: schema.table.clone(),
            columns: schema.names.clone(),
            key_columns: schema.key_names.clone(),
            rows,
            superseded: HashSet::new(),
            open_transaction: Vec::new(),
            last_key: chunk.last_key,
            complete: chunk.complete,
        });
        Ok(Chunked::Read)
    }

    /// Prepares to read `name` (under the server's spelling of its names); false
    /// when it cannot be snapshotted.
    async fn open_table(&mut self, name: &str) -> Result<bool, CaptureError> {
        let (db, table) = name.split_once('.').expect("checked when requested");
        let chunk_rows = self.config.snapshot.incremental_chunk_rows;
        self.connection().await?;
        let (conn, filter) = (self.conn.as_mut().expect("connected"), &self.filter);
        let found: Option<(String, String, u64)> = conn
            .exec_first(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                (db, table),
            )
            .await?;
        let reader = match &found {
            // The request was checked as typed; check the server's spelling too.
            Some((db, table, _)) if !filter.captures(db, table) => {
                warn!(table = %name, "snapshot requested for a table this capture does not capture; skipped");
                return Ok(false);
            }
            Some((db, table, _)) => {
                let keys = &self.config.message_key_columns;
                let undecodable = self.config.source.undecodable_text;
                ChunkReader::new(conn, db, table, chunk_rows, keys, undecodable).await?
            }
            None => None,
        };
        let Some(reader) = reader else {
            warn!(table = %name, "on-demand snapshot of a table that does not exist; skipped");
            return Ok(false);
        };
        if !reader.keyed_by_primary_key() {
            warn!(table = %name, "a table without a primary key cannot be snapshotted while streaming, nor one whose events message_key_columns keys by other columns (its rows cannot be matched with the stream by a unique key); skipped");
            return Ok(false);
        }
        if self.progress.is_none() {
            let label = TableLabel {
                table: name.to_owned(),
            };
            let estimate = found.map_or(0, |(_, _, rows)| rows);
            self.metrics
                .snapshot_rows_estimated
                .get_or_create(&label)
                .set(estimate as i64);
            info!(table = %name, estimate, after = ?self.state.after, "on-demand snapshot of the table starts");
            self.progress = Some(TableProgress {
                bar: SnapshotProgress::new(name, estimate),
                label,
                done: 0,
            });
        }
        if self
            .state
            .after
            .as_ref()
            .is_some_and(|after| *after.columns != *reader.schema().key_names)
        {
            warn!(table = %name, "the primary key changed during the on-demand snapshot; reading the table again from the start");
            self.state.after = None;
        }
        self.reader = Some(reader);
        Ok(true)
    }

    /// Sends the window's rows that the stream did not supersede.
    async fn send_chunk(&mut self, writer: &mut KafkaWriter) -> Result<(), CaptureError> {
        let w = self.window.take().expect("a window is open");
        let read = w.rows.len() as u64;
        for (key, event) in &w.rows {
            if !w.superseded.contains(key) {
                writer.send(event).await?;
            }
        }
        if let Some(p) = &mut self.progress {
            p.done += read;
            p.bar.update(p.done);
            self.metrics
                .snapshot_rows_done
                .get_or_create(&p.label)
                .set(p.done as i64);
        }
        if w.complete {
            self.finish_table();
        } else if let Some(key) = w.last_key {
            self.state.after = Some(KeyCursor {
                columns: w.key_columns.to_vec(),
                values: key.iter().map(CursorValue::from).collect(),
            });
        }
        Ok(())
    }

    fn finish_table(&mut self) {
        self.state.tables.remove(0);
        self.state.after = None;
        self.reader = None;
        if let Some(p) = self.progress.take() {
            p.bar.finish(p.done);
        }
    }
}
