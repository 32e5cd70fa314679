//! Where the initial snapshot reads: the [`SnapshotSource`] seam. One
//! consistent read of every captured table, whose exact position in the
//! change stream the source gives, so that streaming continues from there
//! with no change lost and none sent twice. MySQL/MariaDB in production
//! ([`crate::snapshot::mysql_snapshot`]); [`crate::memory::MemorySnapshot`]
//! in the snapshot's tests.

use std::future::Future;
use std::ops::ControlFlow;

use tributary_proto::{ChangeEvent, SourceInfo};

use crate::error::CaptureError;
use crate::schema_change_record::DescribedChange;
use crate::source_position::SourcePosition;

/// A table the snapshot reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotTable {
    /// Its database, as the source spells it.
    pub db: String,
    /// Its name, as the source spells it.
    pub table: String,
    /// The source's estimate of its rows.
    pub estimate: u64,
}

impl SnapshotTable {
    /// `db.table`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.db, self.table)
    }
}

/// How reading a table ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableRead {
    /// Every row was handed over.
    Read,
    /// The table is gone: skipped.
    Gone,
    /// The receiver asked to stop (a shutdown).
    Stopped,
}

/// Receives a table's rows as they are read.
pub trait SnapshotRows: Send {
    /// One row's `op: r` event; `Break` stops the read (a shutdown).
    fn row(
        &mut self,
        event: ChangeEvent,
    ) -> impl Future<Output = Result<ControlFlow<()>, CaptureError>> + Send;
}

/// Reads every captured table in one consistent read.
pub trait SnapshotSource: Send {
    /// The source's positions.
    type Position: SourcePosition;

    /// Starts the read: the position it sees exactly (every transaction
    /// committed up to it, none after), and the tables to read.
    fn begin(
        &mut self,
    ) -> impl Future<Output = Result<(Self::Position, Vec<SnapshotTable>), CaptureError>> + Send;

    /// What Debezium's schema change topic records before the rows
    /// (`events.schema.changes.format: debezium`), in order, each with
    /// `source` as its `source` block; none otherwise.
    fn schema_changes(
        &mut self,
        tables: &[SnapshotTable],
        source: &SourceInfo,
    ) -> impl Future<Output = Result<Vec<DescribedChange>, CaptureError>> + Send;

    /// Reads `table` in key order, handing each row to `rows` as it comes;
    /// each event's `source` is `source` with the table filled in.
    fn read_table<R: SnapshotRows>(
        &mut self,
        table: &SnapshotTable,
        source: &SourceInfo,
        rows: &mut R,
    ) -> impl Future<Output = Result<TableRead, CaptureError>> + Send;

    /// Ends the read.
    fn end(&mut self) -> impl Future<Output = Result<(), CaptureError>> + Send;
}
