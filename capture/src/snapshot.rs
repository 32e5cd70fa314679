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

use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use tributary_proto::{ChangeEvent, Op, Row, SnapshotMarker, SourceInfo};

use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::filter::TableFilter;
use crate::kafka_writer::KafkaWriter;
use crate::metrics::{CaptureMetrics, TableLabel};
use crate::position::BinlogPosition;
use crate::row_decoder::decode_value;
use crate::schema::TableSchema;
use crate::snapshot_progress::SnapshotProgress;
use crate::source::{self, ServerInfo};

/// Reads every captured table; returns the position streaming continues from,
/// or `None` when `shutdown` interrupted it. `interrupted` is the stored start of an
/// earlier snapshot that did not complete: streaming then continues from there, so
/// that rows it sent which were deleted before this snapshot get their delete.
pub async fn run(
    config: &CaptureConfig,
    info: &ServerInfo,
    writer: &mut KafkaWriter,
    metrics: &CaptureMetrics,
    shutdown: &CancellationToken,
    interrupted: Option<BinlogPosition>,
) -> Result<Option<BinlogPosition>, CaptureError> {
    let mut conn = source::connect(&config.source).await?;
    conn.query_drop("SET time_zone = '+00:00'").await?;
    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await?;
    let position = begin(&mut conn, info).await?;
    let filter = TableFilter::new(&config.include, &config.exclude);
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
        config,
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
        let columns = source::info_columns_on(&mut conn, db, table).await?;
        let schema = TableSchema::from_info_columns(db, table, &columns);
        let has_primary_key = columns.iter().any(|c| c.primary);
        if !has_primary_key {
            warn!(%db, %table, "no primary key: events are keyed by every column and the table is read in one pass");
        }
        let done = snapshot
            .read_table(
                &mut conn,
                &schema,
                writer,
                &label,
                has_primary_key,
                shutdown,
            )
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

/// Starts the snapshot transaction and returns the binlog position it sees.
async fn begin(conn: &mut Conn, info: &ServerInfo) -> Result<BinlogPosition, CaptureError> {
    if info.is_mariadb {
        conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            .await?;
        let status: Vec<(String, String)> =
            conn.query("SHOW STATUS LIKE 'binlog_snapshot_%'").await?;
        let value = |name: &str| {
            status
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        if let (Some(file), Some(pos)) = (
            value("Binlog_snapshot_file"),
            value("Binlog_snapshot_position"),
        ) {
            let pos: u64 = pos.parse().map_err(|_| {
                CaptureError::ServerSetup(format!("bad Binlog_snapshot_position {pos:?}"))
            })?;
            let gtid: Option<String> = conn
                .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), pos))
                .await?
                .flatten();
            return Ok(BinlogPosition {
                file,
                pos,
                gtid: gtid.filter(|g| !g.is_empty()),
                ts_ms: 0,
                ..Default::default()
            });
        }
        conn.query_drop("ROLLBACK").await?;
    }
    // MySQL: hold a global read lock only while the transaction starts and the position is read.
    conn.query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .map_err(|e| source::explain_privilege_error(e, info.is_mariadb, false))?;
    conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        .await?;
    let position = source::current_position(conn, info.is_mariadb).await;
    conn.query_drop("UNLOCK TABLES").await?;
    position
}

struct Snapshot<'a> {
    config: &'a CaptureConfig,
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
        schema: &TableSchema,
        writer: &mut KafkaWriter,
        label: &TableLabel,
        has_primary_key: bool,
        shutdown: &CancellationToken,
    ) -> Result<bool, CaptureError> {
        let quote = |name: &str| format!("`{}`", name.replace('`', "``"));
        let columns: Vec<String> = schema.columns.iter().map(|c| quote(&c.name)).collect();
        let key: Vec<String> = schema.key.iter().map(|&i| columns[i].clone()).collect();
        let from = format!(
            "SELECT {} FROM {}.{}",
            columns.join(", "),
            quote(&schema.db),
            quote(&schema.table)
        );
        let chunk = self.config.snapshot.chunk_rows;
        let first = format!("{from} ORDER BY {} LIMIT {chunk}", key.join(", "));
        let next = format!(
            "{from} WHERE ({}) > ({}) ORDER BY {} LIMIT {chunk}",
            key.join(", "),
            vec!["?"; key.len()].join(", "),
            key.join(", ")
        );
        let mut last_key: Option<Vec<mysql_async::Value>> = None;
        let mut done = 0u64;
        let estimate = self
            .metrics
            .snapshot_rows_estimated
            .get_or_create(label)
            .get();
        let mut progress = SnapshotProgress::new(&label.table, estimate.max(0) as u64);
        loop {
            if shutdown.is_cancelled() {
                return Ok(false);
            }
            let rows: Vec<mysql_async::Row> = match &last_key {
                None if !has_primary_key => conn.exec(&from, Params::Empty).await?,
                None => conn.exec(&first, Params::Empty).await?,
                Some(values) => conn.exec(&next, Params::Positional(values.clone())).await?,
            };
            let count = rows.len();
            for mut row in rows {
                last_key = Some(
                    schema
                        .key
                        .iter()
                        .map(|&i| row.as_ref(i).cloned().unwrap_or(mysql_async::Value::NULL))
                        .collect(),
                );
                let mut values = Vec::with_capacity(schema.columns.len());
                for (i, column) in schema.columns.iter().enumerate() {
                    let raw = row.take::<mysql_async::Value, _>(i).map(BinlogValue::Value);
                    values.push(decode_value(&column.kind, raw).map_err(|e| {
                        CaptureError::Decode {
                            file: self.position.file.clone(),
                            pos: self.position.pos,
                            detail: format!(
                                "snapshot of {}.{}, column `{}`: {e}",
                                schema.db, schema.table, column.name
                            ),
                        }
                    })?);
                }
                self.emit(schema, values, writer).await?;
            }
            done += count as u64;
            self.metrics
                .snapshot_rows_done
                .get_or_create(label)
                .set(done as i64);
            progress.update(done);
            // Without a primary key there is no order to resume from: one pass.
            if count < chunk || !has_primary_key {
                break;
            }
        }
        progress.finish(done);
        Ok(true)
    }

    async fn emit(
        &mut self,
        schema: &TableSchema,
        values: Vec<tributary_proto::Value>,
        writer: &mut KafkaWriter,
    ) -> Result<(), CaptureError> {
        let key = Row {
            columns: schema.key_names.clone(),
            values: schema.key.iter().map(|&i| values[i].clone()).collect(),
        };
        let event = ChangeEvent {
            op: Op::Read,
            key,
            before: None,
            after: Some(Row {
                columns: schema.names.clone(),
                values,
            }),
            source: SourceInfo {
                db: schema.db.clone(),
                table: schema.table.clone(),
                ..self.source.clone()
            },
            ts_ms: self.source.ts_ms,
            transaction: None,
        };
        if let Some(previous) = self.held.replace(event) {
            writer.send(&previous).await?;
        }
        Ok(())
    }

    async fn finish(&mut self, writer: &mut KafkaWriter) -> Result<(), CaptureError> {
        if let Some(mut last) = self.held.take() {
            last.source.snapshot = SnapshotMarker::Last;
            writer.send(&last).await?;
        }
        Ok(())
    }
}
