//! Where on-demand snapshots read their chunks: the [`ChunkSource`] seam. A
//! chunk is read in a consistent read whose exact position in the change
//! stream the source gives (DBLog's select between watermarks, collapsed to
//! one point); [`crate::incremental`] merges it with the stream. MySQL/MariaDB
//! ([`crate::incremental::mysql_chunks`]) and PostgreSQL
//! ([`crate::postgres::pg_chunks`]) in production; an in-memory database in
//! the merge's tests.

use std::future::Future;
use std::sync::Arc;

use tributary_proto::{ChangeEvent, SourceInfo};

use crate::error::CaptureError;
use crate::incremental_state::KeyCursor;
use crate::source_position::SourcePosition;

/// A table opened for chunked reads.
#[derive(Debug, Clone)]
pub struct OpenedTable {
    /// What holds it, as the source spells it (its events' namespace: the
    /// database; for PostgreSQL, the schema).
    pub db: Arc<str>,
    /// Its name, as the source spells it.
    pub table: Arc<str>,
    /// Its columns, in table order (the columns of its rows' events).
    pub columns: Arc<[String]>,
    /// Its key columns, in key order (chunks follow them; cursors name them).
    pub key_columns: Arc<[String]>,
    /// The source's estimate of its rows.
    pub estimate: u64,
}

/// How a consistent read started, `P` being the source's positions.
#[derive(Debug)]
pub enum Begun<P> {
    /// It sees exactly the transactions committed up to this position.
    At(P),
    /// It could not start now (a lock wait timed out); try again later.
    Retry,
    /// The table cannot be snapshotted here (a privilege is missing); skip it.
    Skip,
}

/// What reading a chunk in a consistent read gave.
#[derive(Debug)]
pub enum ChunkRead {
    /// Rows in key order, as `op: r` events.
    Chunk {
        /// The events, each keyed as the table's change events are.
        rows: Vec<ChangeEvent>,
        /// The key of the last row (the next chunk starts after it).
        last_key: Option<KeyCursor>,
        /// No rows follow.
        complete: bool,
    },
    /// The table changed since it was opened: open it again, read again.
    Changed,
    /// The table is gone: skip it.
    Dropped,
}

/// Reads chunks of tables in consistent reads.
pub trait ChunkSource: Send {
    /// The source's positions.
    type Position: SourcePosition;

    /// Opens `db.table` (as requested); `None`, after saying why, when it
    /// cannot be snapshotted (no such table, not captured, no unique key).
    fn open(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<Option<OpenedTable>, CaptureError>> + Send;

    /// Starts a consistent read of the open table.
    fn begin(&mut self)
    -> impl Future<Output = Result<Begun<Self::Position>, CaptureError>> + Send;

    /// In the read begun at `point`: the chunk after `after` (the first when
    /// `None`), its events' `source` from `source`; ends the read.
    fn read(
        &mut self,
        after: Option<&KeyCursor>,
        point: &Self::Position,
        source: &SourceInfo,
    ) -> impl Future<Output = Result<ChunkRead, CaptureError>> + Send;

    /// Ends the read begun, without reading.
    fn abort(&mut self) -> impl Future<Output = Result<(), CaptureError>> + Send;

    /// Forgets the open table (a DDL ran: it is opened again with its new columns).
    fn close_table(&mut self);
}
