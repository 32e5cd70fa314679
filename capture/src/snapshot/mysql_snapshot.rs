//! The initial snapshot's reads from MySQL/MariaDB (a [`SnapshotSource`]).
//!
//! MariaDB: one `START TRANSACTION WITH CONSISTENT SNAPSHOT` and its
//! `Binlog_snapshot_file/position` status give rows and position consistent
//! with each other without any lock; MySQL: the same under a short
//! `FLUSH TABLES WITH READ LOCK`, released as soon as the position is read.
//! Tables are read in primary-key order, in chunks of at most
//! `snapshot.chunk_rows` rows and `snapshot.chunk_max_mb` ([`ChunkReader`]:
//! keyset pagination, all in the one transaction), each row handed on as the
//! server sends it.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tracing::warn;
use tributary_proto::SourceInfo;

use crate::chunk_reader::ChunkReader;
use crate::chunk_size::ChunkBounds;
use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::event_shape::EventShape;
use crate::filter::TableFilter;
use crate::position::BinlogPosition;
use crate::schema_change_record::DescribedChange;
use crate::snapshot::schema_snapshot;
use crate::snapshot_source::{SnapshotRows, SnapshotSource, SnapshotTable, TableRead};
use crate::source;
use crate::table_definition::Flavor;

/// The tables of one MySQL/MariaDB server, read in one consistent transaction.
pub(crate) struct MySqlSnapshot<'a> {
    config: &'a CaptureConfig,
    is_mariadb: bool,
    /// The connection of the transaction, once begun.
    conn: Option<Conn>,
    /// The position the transaction sees (named in decoding errors).
    at: BinlogPosition,
    /// How the tables' events are shaped.
    shape: EventShape,
}

impl<'a> MySqlSnapshot<'a> {
    /// The tables `config` captures (connected on [`SnapshotSource::begin`]).
    pub(crate) fn new(config: &'a CaptureConfig, is_mariadb: bool, shape: EventShape) -> Self {
        MySqlSnapshot {
            config,
            is_mariadb,
            conn: None,
            at: BinlogPosition::default(),
            shape,
        }
    }
}

impl SnapshotSource for MySqlSnapshot<'_> {
    type Position = BinlogPosition;

    async fn begin(&mut self) -> Result<(BinlogPosition, Vec<SnapshotTable>), CaptureError> {
        let mut conn = connect(self.config).await?;
        let position = begin(&mut conn, self.is_mariadb).await?;
        let filter = TableFilter::of(self.config);
        let tables: Vec<(String, String, u64)> = conn
            .query(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(TABLE_ROWS, 0) \
                 FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' \
                 ORDER BY TABLE_SCHEMA, TABLE_NAME",
            )
            .await?;
        self.conn = Some(conn);
        self.at = position.clone();
        let tables = tables
            .into_iter()
            .filter(|(db, table, _)| filter.captures(db, table))
            .map(|(db, table, estimate)| SnapshotTable {
                db,
                table,
                estimate,
            })
            .collect();
        Ok((position, tables))
    }

    async fn schema_changes(
        &mut self,
        tables: &[SnapshotTable],
        source: &SourceInfo,
    ) -> Result<Vec<DescribedChange>, CaptureError> {
        if !self.shape.debezium_schema_changes {
            return Ok(Vec::new());
        }
        let conn = self.conn.as_mut().expect("the snapshot was begun");
        let flavor = Flavor {
            mariadb_connector: self.shape.connector == "mariadb",
        };
        schema_snapshot::schema_changes(conn, tables, source, flavor).await
    }

    async fn read_table<R: SnapshotRows>(
        &mut self,
        table: &SnapshotTable,
        source: &SourceInfo,
        rows: &mut R,
    ) -> Result<TableRead, CaptureError> {
        let config = self.config;
        let conn = self.conn.as_mut().expect("the snapshot was begun");
        let bounds = ChunkBounds {
            rows: config.snapshot.chunk_rows,
            bytes: config.snapshot.chunk_max_mb.saturating_mul(1 << 20),
        };
        let reader = ChunkReader::new(conn, &table.db, &table.table, bounds, &self.shape).await?;
        let Some(mut reader) = reader else {
            return Ok(TableRead::Gone);
        };
        if !reader.has_primary_key() {
            warn!(table = %table.name(), "no primary key: the table is read in one pass (its events have the key message_key_columns gives it, else a null key)");
        }
        let mut after: Option<Vec<mysql_async::Value>> = None;
        loop {
            let mut chunk = reader.rows(conn, after.as_deref(), &self.at).await?;
            while let Some(row) = chunk.next().await? {
                if rows.row(chunk.event(row, source)).await?.is_break() {
                    return Ok(TableRead::Stopped);
                }
            }
            let end = chunk.end();
            if end.complete {
                return Ok(TableRead::Read);
            }
            after = end.last_key;
        }
    }

    async fn end(&mut self) -> Result<(), CaptureError> {
        if let Some(conn) = &mut self.conn {
            conn.query_drop("COMMIT").await?;
        }
        Ok(())
    }
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
