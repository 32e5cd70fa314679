//! The consistent initial snapshot: every captured table's current rows as `op: r`
//! events, then the position streaming continues from. The rows come from a
//! [`SnapshotSource`] (MySQL/MariaDB: [`mysql_snapshot`]) and go to a
//! [`ChangeSink`], marked as Debezium marks them: `first` (the first row of
//! the first table), `first_in_data_collection` and `last_in_data_collection`
//! (a table's first and last rows), `last` (the very last event), `true`.
//! With Debezium's schema change topic, the source's schema change records
//! ([`SnapshotSource::schema_changes`]) go first.
//!
//! No position is stored until the whole snapshot is acknowledged: a snapshot
//! interrupted by a crash or a stop starts over at the next start (the
//! repeated `r` events are upserts of the same rows), and streaming then
//! continues from the first interrupted snapshot's position, so that a row it
//! sent which was deleted before the next snapshot gets its delete.

use std::ops::ControlFlow;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use tributary_proto::{ChangeEvent, SnapshotMarker, SourceInfo};

use crate::change_stream::SchemaChange;
use crate::error::CaptureError;
use crate::metrics::{CaptureMetrics, TableLabel};
use crate::sink::ChangeSink;
use crate::snapshot_progress::SnapshotProgress;
use crate::snapshot_source::{SnapshotRows, SnapshotSource, TableRead};
use crate::source_position::{CapturePosition, SourcePosition};

pub(crate) mod mysql_snapshot;
mod schema_snapshot;

/// Rows between progress updates (a table without a primary key is one chunk).
const PROGRESS_EVERY_ROWS: u64 = 1024;

/// Reads every table of `source` into `writer`; returns the position streaming
/// continues from, or `None` when `shutdown` interrupted it. `interrupted` is
/// the stored start of an earlier snapshot that did not complete: streaming
/// then continues from there. `server_name` names the events' source.
pub async fn run<S: SnapshotSource>(
    server_name: &str,
    source: &mut S,
    writer: &mut impl ChangeSink<S::Position>,
    metrics: &CaptureMetrics,
    shutdown: &CancellationToken,
    interrupted: Option<S::Position>,
) -> Result<Option<S::Position>, CaptureError> {
    let (position, tables) = source.begin().await?;
    info!(%position, tables = tables.len(), "snapshot started");
    // Stored before any row is sent: if this snapshot is cut short, the next one
    // streams from the earliest snapshot start (see `interrupted`).
    let stream_from = match interrupted {
        Some(earlier) => {
            info!(%earlier, "an earlier snapshot did not complete: streaming will start at its position");
            earlier
        }
        None => {
            writer
                .store_now(&CapturePosition {
                    snapshot_incomplete: true,
                    ..CapturePosition::at(position.clone())
                })
                .await?;
            position.clone()
        }
    };
    let started = Instant::now();
    let ts_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut events_source = SourceInfo {
        name: server_name.into(),
        ts_ms,
        snapshot: SnapshotMarker::True,
        ..SourceInfo::default()
    };
    position.mark_source(&mut events_source);
    // The latest record, held back so the very last one can be marked `last`
    // (a schema change record when no table has a row, as in Debezium).
    let mut held: Option<Held<S::Position>> = None;
    for described in source.schema_changes(&tables, &events_source).await? {
        let (db, ddl) = described
            .effects
            .first()
            .map(|(effect, _)| (effect.db.clone(), effect.ddl.clone()))
            .unwrap_or_default();
        let change = SchemaChange {
            db,
            ddl,
            position: position.clone(),
            recorded: true,
            described: Some(described),
        };
        if let Some(previous) = held.replace(Held::Schema(Box::new(change))) {
            previous.send(writer).await?;
        }
    }
    for (order, table) in tables.iter().enumerate() {
        if shutdown.is_cancelled() {
            info!("snapshot interrupted; it starts over at the next start");
            return Ok(None);
        }
        let label = TableLabel {
            table: table.name(),
        };
        metrics
            .snapshot_rows_estimated
            .get_or_create(&label)
            .set(table.estimate as i64);
        let mut rows = TableRows {
            writer: &mut *writer,
            positions: std::marker::PhantomData,
            held: &mut held,
            shutdown,
            metrics,
            progress: SnapshotProgress::new(&label.table, table.estimate),
            label,
            done: 0,
            first_table: order == 0,
        };
        match source.read_table(table, &events_source, &mut rows).await? {
            TableRead::Read => rows.finish(),
            TableRead::Gone => warn!(table = %table.name(), "the table is gone; skipped"),
            TableRead::Stopped => {
                info!("snapshot interrupted; it starts over at the next start");
                return Ok(None);
            }
        }
    }
    if let Some(mut last) = held.take() {
        last.mark(SnapshotMarker::Last);
        last.send(writer).await?;
    }
    source.end().await?;
    info!(%position, %stream_from, seconds = started.elapsed().as_secs_f64(), "snapshot complete");
    Ok(Some(stream_from))
}

/// A record held back until the next one comes. One lives per snapshot;
/// rows, the hot path, are not boxed.
#[allow(clippy::large_enum_variant)]
enum Held<P> {
    /// A schema change record (Debezium's schema change topic).
    Schema(Box<SchemaChange<P>>),
    /// A row's `op: r` event.
    Row(ChangeEvent),
}

impl<P: SourcePosition> Held<P> {
    fn mark(&mut self, marker: SnapshotMarker) {
        match self {
            Held::Schema(change) => {
                if let Some(described) = &mut change.described {
                    described.source.snapshot = marker;
                }
            }
            Held::Row(event) => event.source.snapshot = marker,
        }
    }

    async fn send(self, writer: &mut impl ChangeSink<P>) -> Result<(), CaptureError> {
        match self {
            Held::Schema(change) => writer.send_schema_change(&change).await,
            Held::Row(event) => writer.send(&event).await,
        }
    }
}

/// One table's rows on their way to the sink, counted.
struct TableRows<'a, W, P> {
    writer: &'a mut W,
    /// The positions of the sink's source.
    positions: std::marker::PhantomData<P>,
    /// The latest event, sent when the next one comes.
    held: &'a mut Option<Held<P>>,
    shutdown: &'a CancellationToken,
    metrics: &'a CaptureMetrics,
    progress: SnapshotProgress,
    label: TableLabel,
    done: u64,
    /// The snapshot's first table: its first row is marked `first`.
    first_table: bool,
}

impl<P: SourcePosition, W: ChangeSink<P>> SnapshotRows for TableRows<'_, W, P> {
    async fn row(&mut self, mut event: ChangeEvent) -> Result<ControlFlow<()>, CaptureError> {
        event.source.snapshot = match (self.done, self.first_table) {
            (0, true) => SnapshotMarker::First,
            (0, false) => SnapshotMarker::FirstInDataCollection,
            _ => SnapshotMarker::True,
        };
        if let Some(previous) = self.held.replace(Held::Row(event)) {
            previous.send(self.writer).await?;
        }
        self.done += 1;
        if self.done.is_multiple_of(PROGRESS_EVERY_ROWS) {
            self.report();
        }
        Ok(if self.shutdown.is_cancelled() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    }
}

impl<W, P> TableRows<'_, W, P> {
    fn report(&mut self) {
        self.metrics
            .snapshot_rows_done
            .get_or_create(&self.label)
            .set(self.done as i64);
        self.progress.update(self.done);
    }

    /// The table is read: its last row (still held) is marked as such,
    /// unless it is the snapshot's first (`first` comes before
    /// `last_in_data_collection`, as in Debezium).
    fn finish(&mut self) {
        if let Some(Held::Row(last)) = self.held.as_mut().filter(|_| self.done > 0)
            && last.source.snapshot != SnapshotMarker::First
        {
            last.source.snapshot = SnapshotMarker::LastInDataCollection;
        }
        self.report();
        self.progress.finish(self.done);
    }
}
