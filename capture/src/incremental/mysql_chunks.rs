//! On-demand snapshot chunks from MySQL/MariaDB: each chunk is read in a
//! consistent-snapshot transaction whose exact binlog position the server
//! gives (MariaDB: `Binlog_snapshot_position`, no lock; MySQL: the position
//! under a `FLUSH TABLES WITH READ LOCK` held only while the transaction
//! starts), by primary key after the last key sent ([`ChunkReader`]).

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tracing::{info, warn};
use tributary_proto::SourceInfo;

use crate::chunk_reader::ChunkReader;
use crate::chunk_size::ChunkBounds;
use crate::chunk_source::{Begun, ChunkRead, ChunkSource, OpenedTable};
use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::event_shape::EventShape;
use crate::filter::TableFilter;
use crate::incremental_state::{CursorValue, KeyCursor};
use crate::position::BinlogPosition;
use crate::snapshot::mysql_snapshot;

/// MySQL error: the table does not exist.
const ER_NO_SUCH_TABLE: u16 = 1146;
/// MySQL errors: unknown column; table definition changed during the transaction.
const ER_BAD_FIELD: u16 = 1054;
const ER_TABLE_DEF_CHANGED: u16 = 1412;
/// MySQL error: lock wait timeout exceeded.
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// Seconds a chunk's read lock (MySQL) may wait.
const LOCK_WAIT_S: u32 = 5;

/// Chunks of the tables of one MySQL/MariaDB server.
pub(crate) struct MySqlChunks {
    config: CaptureConfig,
    is_mariadb: bool,
    filter: TableFilter,
    conn: Option<Conn>,
    /// The open table's name and reader.
    open: Option<(String, ChunkReader)>,
    /// How the tables' events are shaped.
    shape: EventShape,
}

impl MySqlChunks {
    /// Chunks of the tables `config` captures (a connection is made on first use).
    pub(crate) fn new(config: &CaptureConfig, is_mariadb: bool, shape: EventShape) -> Self {
        MySqlChunks {
            config: config.clone(),
            is_mariadb,
            filter: TableFilter::of(config),
            conn: None,
            open: None,
            shape,
        }
    }

    async fn connection(&mut self) -> Result<&mut Conn, CaptureError> {
        if self.conn.is_none() {
            let mut conn = mysql_snapshot::connect(&self.config).await?;
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

    fn name(&self) -> &str {
        self.open.as_ref().map_or("?", |(name, _)| name.as_str())
    }
}

impl ChunkSource for MySqlChunks {
    type Position = BinlogPosition;

    async fn open(&mut self, name: &str) -> Result<Option<OpenedTable>, CaptureError> {
        let (db, table) = name.split_once('.').expect("checked when requested");
        let bounds = ChunkBounds {
            rows: self.config.snapshot.incremental_chunk_rows,
            bytes: self.config.snapshot.chunk_max_mb.saturating_mul(1 << 20),
        };
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
                return Ok(None);
            }
            Some((db, table, _)) => ChunkReader::new(conn, db, table, bounds, &self.shape).await?,
            None => None,
        };
        let Some(reader) = reader else {
            warn!(table = %name, "on-demand snapshot of a table that does not exist; skipped");
            return Ok(None);
        };
        if !reader.keyed_by_primary_key() {
            warn!(table = %name, "a table without a primary key cannot be snapshotted while streaming, nor one whose events message_key_columns keys by other columns (its rows cannot be matched with the stream by a unique key); skipped");
            return Ok(None);
        }
        let schema = reader.schema();
        let opened = OpenedTable {
            db: schema.db.clone(),
            table: schema.table.clone(),
            columns: schema.names.clone(),
            key_columns: schema.key_names.clone(),
            estimate: found.map_or(0, |(_, _, rows)| rows),
        };
        self.open = Some((name.to_owned(), reader));
        Ok(Some(opened))
    }

    async fn begin(&mut self) -> Result<Begun<BinlogPosition>, CaptureError> {
        let name = self.name().to_owned();
        let is_mariadb = self.is_mariadb;
        let conn = self.connection().await?;
        match mysql_snapshot::begin(conn, is_mariadb).await {
            Ok(point) => Ok(Begun::At(point)),
            Err(CaptureError::MissingGrant { grant, detail }) => {
                warn!(table = %name, %grant, %detail, "the capture user may not take the read lock an on-demand snapshot chunk needs on this server; skipped");
                Ok(Begun::Skip)
            }
            Err(CaptureError::Database(mysql_async::Error::Server(e)))
                if e.code == ER_LOCK_WAIT_TIMEOUT =>
            {
                warn!(table = %name, "the read lock for an on-demand snapshot chunk timed out; trying again");
                Ok(Begun::Retry)
            }
            Err(e) => Err(e),
        }
    }

    async fn read(
        &mut self,
        after: Option<&KeyCursor>,
        point: &BinlogPosition,
        source: &SourceInfo,
    ) -> Result<ChunkRead, CaptureError> {
        let (name, reader) = self.open.as_mut().expect("a table is open");
        let conn = self.conn.as_mut().expect("a read was begun");
        let after: Option<Vec<mysql_async::Value>> =
            after.map(|key| key.values.iter().map(mysql_async::Value::from).collect());
        let chunk = match reader.read(conn, after.as_deref(), point).await {
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
                    return Ok(ChunkRead::Dropped);
                }
                info!(table = %name, "the table changed while a chunk was read: the chunk is read again");
                self.open = None;
                return Ok(ChunkRead::Changed);
            }
            Err(e) => return Err(e),
        };
        conn.query_drop("COMMIT").await?;
        let key_columns = reader.schema().key_names.to_vec();
        Ok(ChunkRead::Chunk {
            rows: chunk
                .rows
                .into_iter()
                .map(|row| reader.event(row, source))
                .collect(),
            last_key: chunk.end.last_key.map(|key| KeyCursor {
                columns: key_columns,
                values: key.iter().map(CursorValue::from).collect(),
            }),
            complete: chunk.end.complete,
        })
    }

    async fn abort(&mut self) -> Result<(), CaptureError> {
        if let Some(conn) = &mut self.conn {
            conn.query_drop("ROLLBACK").await?;
        }
        Ok(())
    }

    fn close_table(&mut self) {
        self.open = None;
    }
}
