//! The consistent initial snapshot: every captured table's current rows as `op: r`
//! events, then the binlog position streaming continues from.
//!
//! MariaDB: one `START TRANSACTION WITH CONSISTENT SNAPSHOT` and its
//! `Binlog_snapshot_file/position` status give rows and position consistent with
//! each other without any lock; MySQL: the same under a short
//! `FLUSH TABLES WITH READ LOCK`, released as soon as the position is read.
//! Tables are read in primary-key order, in chunks of `snapshot.chunk_rows`
//! (keyset pagination, one transaction). No position is stored until the whole
//! snapshot is acknowledged: a snapshot interrupted by a crash or a stop starts
//! over at the next start (the repeated `r` events are upserts of the same rows).

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use tributary_proto::{ChangeEvent, SnapshotMarker, SourceInfo};

use crate::chunk_reader::ChunkReader;
use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::filter::TableFilter;
use crate::metrics::{CaptureMetrics, TableLabel};
use crate::position::BinlogPosition;
use crate::sink::ChangeSink;
use crate::snapshot_progress::SnapshotProgress;
use crate::source::{self, ServerInfo};

/// Reads every captured table; returns the position streaming continues from,
/// or `None` when `shutdown` interrupted it. `interrupted` is the stored start of an
/// earlier snapshot that did not complete: streaming then continues from there, so
/// that rows it sent which were deleted before this snapshot get their delete.
pub async fn run(
    config: &CaptureConfig,
    info: &ServerInfo,
    writer: &mut impl ChangeSink,
    metrics: &CaptureMetrics,
    shutdown: &CancellationToken,
    interrupted: Option<BinlogPosition>,
) -> Result<Option<BinlogPosition>, CaptureError> {
    let mut conn = connect(config).await?;
    let position = begin(&mut conn, info.is_mariadb).await?;
    let filter = TableFilter::of(config);
    let tables: Vec<(String, String, u64)> = conn
        .query("SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'")
        .await?;
    let tables: Vec<_> = tables
        .into_iter()
        .filter(|(db, table, _)| filter.captures(db, table))
        .collect();
    info!(%position, tables = tables.len(), "snapshot started");
    // Stored before any row is sent: if this snapshot is cut short, the next one
    // streams from the earliest snapshot start (see `interrupted`).
    let stream_from = match interrupted {
        Some(earlier) => {
            info!(%earlier, "an earlier snapshot did not complete: streaming will start at its position");
            BinlogPosition {
                snapshot_incomplete: false,
                ..earlier
            }
        }
        None => {
            writer
                .store_now(&BinlogPosition {
                    snapshot_incomplete: true,
                    ..position.clone()
                })
                .await?;
            position.clone()
        }
    };
    let started = Instant::now();
    let ts_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut snapshot = Snapshot {
        metrics,
        position: &position,
        source: SourceInfo {
            name: config.server_name.as_str().into(),
            ts_ms,
            snapshot: SnapshotMarker::True,
            db: "".into(),
            table: "".into(),
            server_id: 0,
            gtid: position.gtid.as_deref().map(Arc::from),
            file: position.file.as_str().into(),
            pos: position.pos,
            row: 0,
        },
        held: None,
    };
    for (db, table, estimate) in &tables {
        let label = TableLabel {
            table: format!("{db}.{table}"),
        };
        metrics
            .snapshot_rows_estimated
            .get_or_create(&label)
            .set(*estimate as i64);
        let reader = ChunkReader::new(
            &mut conn,
            db,
            table,
            config.snapshot.chunk_rows,
            &config.message_key_columns,
            config.source.undecodable_text,
        )
        .await?;
        let Some(reader) = reader else {
            warn!(%db, %table, "the table is gone; skipped");
            continue;
        };
        if !reader.has_primary_key() {
            warn!(%db, %table, "no primary key: the table is read in one pass (its events have the key message_key_columns gives it, else a null key)");
        }
        let done = snapshot
            .read_table(&mut conn, &reader, writer, &label, *estimate, shutdown)
            .await?;
        if !done {
            info!("snapshot interrupted; it starts over at the next start");
            return Ok(None);
        }
    }
    snapshot.finish(writer).await?;
    conn.query_drop("COMMIT").await?;
    info!(%position, %stream_from, seconds = started.elapsed().as_secs_f64(), "snapshot complete");
    Ok(Some(stream_from))
}

/// A connection for consistent reads: UTC session, repeatable read, and text
/// as the tables hold it (no conversion to the connection's character set,
/// which would turn bytes the server has no character for into `?` or U+FFFD):
/// capture decodes it in each column's character set, as in the binlog.
pub(crate) async fn connect(config: &CaptureConfig) -> Result<Conn, CaptureError> {
    let mut conn = source::connect(&config.source).await?;
    conn.query_drop("SET time_zone = '+00:00', character_set_results = binary")
        .await?;
    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await?;
    Ok(conn)
}

/// Starts a consistent-snapshot transaction and returns the binlog position its
/// reads see exactly: every transaction committed up to it, none after.
pub(crate) async fn begin(
    conn: &mut Conn,
    is_mariadb: bool,
) -> Result<BinlogPosition, CaptureError> {
    if is_mariadb && let Some(position) = begin_at_exact_position(conn).await? {
        return Ok(position);
    }
    // MySQL: hold a global read lock only while the transaction starts and the position is read.
    conn.query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .map_err(|e| source::missing_grant(e, "RELOAD"))?;
    conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        .await?;
    let position = source::current_position(conn, is_mariadb).await;
    conn.query_drop("UNLOCK TABLES").await?;
    position
}

/// MariaDB: starts a consistent-snapshot transaction and returns the binlog
/// position its reads see (`Binlog_snapshot_file/position`), without any lock.
/// `None`, with no transaction open, when the server does not report it.
async fn begin_at_exact_position(conn: &mut Conn) -> Result<Option<BinlogPosition>, CaptureError> {
    conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        .await?;
    let status: Vec<(String, String)> = conn.query("SHOW STATUS LIKE 'binlog_snapshot_%'").await?;
    let value = |name: &str| {
        status
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let (Some(file), Some(pos)) = (
        value("Binlog_snapshot_file"),
        value("Binlog_snapshot_position"),
    ) else {
        conn.query_drop("ROLLBACK").await?;
        return Ok(None);
    };
    let pos: u64 = pos
        .parse()
        .map_err(|_| CaptureError::ServerSetup(format!("bad Binlog_snapshot_position {pos:?}")))?;
    let gtid: Option<String> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), pos))
        .await?
        .flatten();
    Ok(Some(BinlogPosition {
        file,
        pos,
        gtid: gtid.filter(|g| !g.is_empty()),
        ..Default::default()
    }))
}

struct Snapshot<'a> {
    metrics: &'a CaptureMetrics,
    position: &'a BinlogPosition,
    /// `source` of every event (the table filled in per event).
    source: SourceInfo,
    /// The latest event, held back so the very last one can be marked `last`.
    held: Option<ChangeEvent>,
}

impl Snapshot<'_> {
    /// Reads one table in key order; false when interrupted.
    async fn read_table(
        &mut self,
        conn: &mut Conn,
        reader: &ChunkReader,
        writer: &mut impl ChangeSink,
        label: &TableLabel,
        estimate: u64,
        shutdown: &CancellationToken,
    ) -> Result<bool, CaptureError> {
        let mut after: Option<Vec<mysql_async::Value>> = None;
        let mut done = 0u64;
        let mut progress = SnapshotProgress::new(&label.table, estimate);
        loop {
            if shutdown.is_cancelled() {
                return Ok(false);
            }
            let chunk = reader.read(conn, after.as_deref(), self.position).await?;
            done += chunk.rows.len() as u64;
            for row in chunk.rows {
                let event = reader.event(row, &self.source);
                if let Some(previous) = self.held.replace(event) {
                    writer.send(&previous).await?;
                }
            }
            self.metrics
                .snapshot_rows_done
                .get_or_create(label)
                .set(done as i64);
            progress.update(done);
            if chunk.complete {
                break;
            }
            after = chunk.last_key;
        }
        progress.finish(done);
        Ok(true)
    }

    async fn finish(&mut self, writer: &mut impl ChangeSink) -> Result<(), CaptureError> {
        if let Some(mut last) = self.held.take() {
            last.source.snapshot = SnapshotMarker::Last;
            writer.send(&last).await?;
        }
        Ok(())
    }
}
