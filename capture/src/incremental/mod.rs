//! On-demand snapshots of chosen tables while streaming, merged with the binlog
//! so that each topic converges to its table's state: DBLog's algorithm, with
//! binlog positions as the watermarks instead of rows written to the source.
//!
//! One chunk at a time, between two transactions of the stream: the next
//! `snapshot.incremental_chunk_rows` rows of the table, by primary key, are read
//! in a consistent read whose exact position in the stream the source gives
//! ([`ChunkSource`]; MySQL/MariaDB: [`mysql_chunks`], PostgreSQL:
//! [`crate::postgres::pg_chunks`]). If the
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

pub(crate) mod mysql_chunks;
pub mod signal;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{info, warn};
use tributary_proto::debezium_json::encode_key;
use tributary_proto::json_number::DoubleFormat;
use tributary_proto::{ChangeEvent, SnapshotMarker, SourceInfo};

use crate::chunk_source::{Begun, ChunkRead, ChunkSource, OpenedTable};
use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::filter::TableFilter;
use crate::incremental_state::{IncrementalState, KeyCursor};
use crate::metrics::{CaptureMetrics, TableLabel};
use crate::sink::ChangeSink;
use crate::snapshot_progress::SnapshotProgress;
use crate::source_position::{CapturePosition, SourcePosition};

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

/// Runs the on-demand snapshots of one capture's stream, reading chunks from `C`.
pub(crate) struct Incremental<C: ChunkSource> {
    server_name: Arc<str>,
    filter: TableFilter,
    metrics: CaptureMetrics,
    chunks: C,
    state: IncrementalState,
    /// The first table, opened; closed after a DDL so the next chunk sees the new columns.
    opened: Option<OpenedTable>,
    progress: Option<TableProgress>,
    window: Option<Window<C::Position>>,
}

struct TableProgress {
    label: TableLabel,
    bar: SnapshotProgress,
    done: u64,
}

/// A chunk read but not yet sent, and the position its read saw.
struct Window<P> {
    point: P,
    db: Arc<str>,
    table: Arc<str>,
    /// The columns the chunk was read with.
    columns: Arc<[String]>,
    /// Each row's Kafka key and event, in key order.
    rows: Vec<(Vec<u8>, ChangeEvent)>,
    /// Keys changed by transactions that committed after `point`.
    superseded: HashSet<Vec<u8>>,
    /// Keys of the table changed by the transaction being streamed.
    open_transaction: Vec<Vec<u8>>,
    last_key: Option<KeyCursor>,
    complete: bool,
}

impl<C: ChunkSource> Incremental<C> {
    /// Continues `resumed` (stored with the start position), if any, reading
    /// chunks from `chunks`.
    pub(crate) fn new(
        config: &CaptureConfig,
        chunks: C,
        metrics: &CaptureMetrics,
        resumed: Option<IncrementalState>,
    ) -> Self {
        let state = resumed.unwrap_or_default();
        if let Some(table) = state.tables.first() {
            match &state.after {
                Some(after) => info!(
                    %table, %after, remaining = state.tables.len(),
                    "resuming the on-demand snapshot"
                ),
                None => {
                    info!(%table, remaining = state.tables.len(), "resuming the on-demand snapshot")
                }
            }
        }
        Incremental {
            server_name: config.server_name.as_str().into(),
            filter: TableFilter::of(config),
            metrics: metrics.clone(),
            chunks,
            state,
            opened: None,
            progress: None,
            window: None,
        }
    }

    /// Whether `event` is a row of the signal table (never published).
    pub(crate) fn is_signal(&self, event: &ChangeEvent) -> bool {
        self.filter
            .is_signal_table(event.source.namespace(), &event.source.table)
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
        if w.table != event.source.table || *w.db != *event.source.namespace() {
            return;
        }
        let columns = event.after.as_ref().or(event.before.as_ref());
        if columns.is_some_and(|row| *row.columns != *w.columns) {
            self.on_schema_change();
        } else {
            w.open_transaction.push(key_identity(event));
        }
    }

    /// A DDL was streamed: a chunk not yet sent is dropped (its rows have the old
    /// shape), and the next one is read with the table's columns as they are now.
    pub(crate) fn on_schema_change(&mut self) {
        if self.window.take().is_some() {
            info!("schema change during an on-demand snapshot: its current chunk is read again");
        }
        self.close_table();
    }

    /// A transaction committed at `position`, whose events have been sent: the
    /// chunk is sent when the stream has reached its window's end. The caller
    /// commits the position [`stamp`](Self::stamp)ed afterwards.
    pub(crate) async fn on_commit(
        &mut self,
        position: &C::Position,
        writer: &mut impl ChangeSink<C::Position>,
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
        at: &C::Position,
        writer: &mut impl ChangeSink<C::Position>,
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
    pub(crate) fn stamp(&self, position: C::Position) -> CapturePosition<C::Position> {
        CapturePosition {
            incremental: (!self.state.tables.is_empty()).then(|| self.state.clone()),
            ..CapturePosition::at(position)
        }
    }

    /// Reads the first table's next chunk into a window, the stream being at `at`.
    async fn read_chunk(&mut self, at: &C::Position) -> Result<Chunked, CaptureError> {
        let name = self.state.tables[0].clone();
        if self.opened.is_none() && !self.open_table(&name).await? {
            self.finish_table();
            return Ok(Chunked::Skipped);
        }
        let point = match self.chunks.begin().await? {
            Begun::At(point) => point,
            Begun::Retry => return Ok(Chunked::Retry),
            Begun::Skip => {
                self.finish_table();
                return Ok(Chunked::Skipped);
            }
        };
        if at.is_after(&point) && !at.same_transactions(&point) {
            // The stream sent a transaction this read cannot see yet.
            self.chunks.abort().await?;
            return Ok(Chunked::Retry);
        }
        let mut source = SourceInfo {
            name: self.server_name.clone(),
            ts_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            snapshot: SnapshotMarker::Incremental,
            ..SourceInfo::default()
        };
        point.mark_source(&mut source);
        let (rows, last_key, complete) = match self
            .chunks
            .read(self.state.after.as_ref(), &point, &source)
            .await?
        {
            ChunkRead::Chunk {
                rows,
                last_key,
                complete,
            } => (rows, last_key, complete),
            ChunkRead::Changed => {
                self.close_table();
                return Ok(Chunked::Retry);
            }
            ChunkRead::Dropped => {
                self.finish_table();
                return Ok(Chunked::Skipped);
            }
        };
        let opened = self.opened.as_ref().expect("opened above");
        self.window = Some(Window {
            point,
            db: opened.db.clone(),
            table: opened.table.clone(),
            columns: opened.columns.clone(),
            rows: rows
                .into_iter()
                .map(|event| (key_identity(&event), event))
                .collect(),
            superseded: HashSet::new(),
            open_transaction: Vec::new(),
            last_key,
            complete,
        });
        Ok(Chunked::Read)
    }

    /// Opens `name` for chunked reads; false when it cannot be snapshotted.
    async fn open_table(&mut self, name: &str) -> Result<bool, CaptureError> {
        let Some(opened) = self.chunks.open(name).await? else {
            return Ok(false);
        };
        if self.progress.is_none() {
            let label = TableLabel {
                table: name.to_owned(),
            };
            self.metrics
                .snapshot_rows_estimated
                .get_or_create(&label)
                .set(opened.estimate as i64);
            info!(table = %name, estimate = opened.estimate, after = ?self.state.after, "on-demand snapshot of the table starts");
            self.progress = Some(TableProgress {
                bar: SnapshotProgress::new(name, opened.estimate),
                label,
                done: 0,
            });
        }
        if self
            .state
            .after
            .as_ref()
            .is_some_and(|after| *after.columns != *opened.key_columns)
        {
            warn!(table = %name, "the primary key changed during the on-demand snapshot; reading the table again from the start");
            self.state.after = None;
        }
        self.opened = Some(opened);
        Ok(true)
    }

    /// Sends the window's rows that the stream did not supersede.
    async fn send_chunk(
        &mut self,
        writer: &mut impl ChangeSink<C::Position>,
    ) -> Result<(), CaptureError> {
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
            self.state.after = Some(key);
        }
        Ok(())
    }

    fn close_table(&mut self) {
        self.opened = None;
        self.chunks.close_table();
    }

    fn finish_table(&mut self) {
        self.state.tables.remove(0);
        self.state.after = None;
        self.close_table();
        if let Some(p) = self.progress.take() {
            p.bar.finish(p.done);
        }
    }
}

/// A row's key as bytes, to tell the window's rows from the streamed ones:
/// both sides are written here alike, so the double format does not matter.
fn key_identity(event: &ChangeEvent) -> Vec<u8> {
    encode_key(event, DoubleFormat::Compact)
}
