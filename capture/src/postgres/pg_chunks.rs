//! On-demand snapshot chunks from PostgreSQL (a [`ChunkSource`]): each chunk
//! is read under its own [`ExportedSnapshot`], whose consistent point is the
//! chunk's exact place in the stream, by primary key after the last key
//! sent. Keys are kept as their text form and compared as the column's type
//! (`(k1, k2) > ('…'::t1, '…'::t2)`), which orders as the `ORDER BY` does.
//! Chunks are bounded by rows and bytes as MySQL's are ([`ChunkAsk`]): rows
//! are streamed, and the row that reaches `snapshot.chunk_max_mb` ends the
//! chunk.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use tracing::warn;
use tributary_proto::SourceInfo;

use crate::chunk_size::{ChunkAsk, ChunkBounds};
use crate::chunk_source::{Begun, ChunkRead, ChunkSource, OpenedTable};
use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::event_shape::EventShape;
use crate::filter::TableFilter;
use crate::incremental_state::{CursorValue, KeyCursor};
use crate::postgres::catalog::CatalogColumn;
use crate::postgres::exported_snapshot::ExportedSnapshot;
use crate::postgres::now_ms;
use crate::postgres::server::{self, Session, quote};
use crate::postgres::table_read::{self, CatalogTable};
use crate::postgres::wal_position::WalPosition;

/// Chunks of the tables of one PostgreSQL database.
pub(crate) struct PgChunks {
    config: CaptureConfig,
    filter: TableFilter,
    shape: EventShape,
    session: Option<Session>,
    /// The open table, as opened.
    open: Option<OpenedTable>,
    /// Rows the open table's next chunk asks for.
    ask: ChunkAsk,
    /// The snapshot of the read begun.
    read: Option<ExportedSnapshot>,
    /// No snapshot is exported before then (the last one waited too long).
    retry_at: Option<Instant>,
}

/// How long a chunk waits for its snapshot while the stream waits for it:
/// the server exports one once the transactions running when it is asked
/// for have ended.
const EXPORT_WAIT: Duration = Duration::from_secs(2);

/// How long the stream goes on before a chunk whose snapshot waited too
/// long asks again.
const EXPORT_RETRY: Duration = Duration::from_secs(10);

impl PgChunks {
    /// Chunks of the tables `config` captures (a session is opened on first use).
    pub(crate) fn new(config: &CaptureConfig, shape: EventShape) -> Self {
        PgChunks {
            config: config.clone(),
            filter: TableFilter::of(config),
            shape,
            session: None,
            open: None,
            ask: ChunkAsk::new(chunk_bounds(config)),
            read: None,
            retry_at: None,
        }
    }

    async fn session(&mut self) -> Result<&Session, CaptureError> {
        if self.session.is_none() {
            self.session = Some(server::connect(&self.config.source).await?);
        }
        Ok(self.session.as_ref().expect("connected above"))
    }

    fn database(&self) -> &str {
        self.config.source.database.as_deref().unwrap_or_default()
    }

    /// Reads the open table's chunk after `after` under the snapshot begun
    /// (ended once read, or when the table is found dropped or changed).
    async fn read_under_snapshot(
        &mut self,
        after: Option<&KeyCursor>,
        point: &WalPosition,
        source: &SourceInfo,
    ) -> Result<ChunkRead, CaptureError> {
        let opened = self.open.clone().expect("a table is open");
        let at = point.lsn.to_string();
        let session = self.session.as_ref().expect("a read was begun");
        let described =
            CatalogTable::describe(&session.client, &opened.db, &opened.table, &self.shape, &at)
                .await;
        let found = match described? {
            Some(found) => found,
            None => {
                self.abort().await?;
                warn!(table = %format!("{}.{}", opened.db, opened.table), "the table was dropped during its on-demand snapshot; skipped");
                return Ok(ChunkRead::Dropped);
            }
        };
        let key = found.primary_key();
        if *found.table.schema.names != *opened.columns
            || key.iter().map(|c| &c.name).ne(opened.key_columns.iter())
        {
            self.abort().await?;
            self.open = None;
            return Ok(ChunkRead::Changed);
        }
        let after = match after {
            Some(cursor) => after_key(cursor, &key)?,
            None => String::new(),
        };
        let asked = self.ask.rows();
        let query = format!(
            "{}{after}{} LIMIT {asked}",
            found.select(),
            found.order_by_key()
        );
        let source = found.source(source, self.database());
        let key_at: Vec<usize> = key
            .iter()
            .map(|c| {
                let names = &found.table.schema.names;
                names.iter().position(|n| *n == c.name).expect("a column")
            })
            .collect();
        let (mut rows, mut read, mut bytes, mut last_key) = (Vec::new(), 0, 0, None);
        {
            // Dropped before the session's next query, which skips the rows left.
            let mut selected = std::pin::pin!(table_read::rows(&session.client, &query).await?);
            while !self.ask.full(bytes) {
                let Some(row) = selected.try_next().await? else {
                    break;
                };
                read += 1;
                bytes += table_read::row_bytes(&row);
                rows.extend(found.events(&row, &source, &self.shape, &at)?);
                last_key = Some(KeyCursor {
                    columns: opened.key_columns.to_vec(),
                    values: key_at
                        .iter()
                        .map(|&i| CursorValue::Bytes(row.get(i).unwrap_or_default().into()))
                        .collect(),
                });
            }
        }
        let cut = self.ask.full(bytes);
        self.ask.after(read, bytes, cut);
        if let Some(exported) = self.read.take() {
            exported.end(&session.client).await?;
        }
        Ok(ChunkRead::Chunk {
            rows,
            last_key,
            complete: !cut && read < asked,
        })
    }
}

impl ChunkSource for PgChunks {
    type Position = WalPosition;

    async fn open(&mut self, name: &str) -> Result<Option<OpenedTable>, CaptureError> {
        let (schema, table) = name.split_once('.').expect("checked when requested");
        if !self.filter.captures(schema, table) {
            warn!(table = %name, "snapshot requested for a table this capture does not capture; skipped");
            return Ok(None);
        }
        let shape = self.shape.clone();
        let client = &self.session().await?.client;
        let Some(found) = CatalogTable::describe(client, schema, table, &shape, "now").await?
        else {
            warn!(table = %name, "on-demand snapshot of a table that does not exist; skipped");
            return Ok(None);
        };
        let key: Vec<String> = found.primary_key().iter().map(|c| c.name.clone()).collect();
        if key.is_empty() || *found.table.schema.key_names != *key {
            warn!(table = %name, "a table without a primary key cannot be snapshotted while streaming, nor one whose events message_key_columns keys by other columns (its rows cannot be matched with the stream by a unique key); skipped");
            return Ok(None);
        }
        let estimate: i64 = client
            .query_one(
                "SELECT greatest(c.reltuples, 0)::int8 FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&schema, &table],
            )
            .await?
            .get(0);
        let opened = OpenedTable {
            db: found.table.schema.db.clone(),
            table: found.table.schema.table.clone(),
            columns: found.table.schema.names.clone(),
            key_columns: key.into(),
            estimate: estimate as u64,
        };
        self.open = Some(opened.clone());
        self.ask = ChunkAsk::new(chunk_bounds(&self.config));
        Ok(Some(opened))
    }

    async fn begin(&mut self) -> Result<Begun<WalPosition>, CaptureError> {
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return Ok(Begun::Retry);
        }
        let source = self.config.source.clone();
        let client = &self.session().await?.client;
        let Some(exported) = ExportedSnapshot::begin_within(&source, client, EXPORT_WAIT).await?
        else {
            self.retry_at = Some(Instant::now() + EXPORT_RETRY);
            return Ok(Begun::Retry);
        };
        let point = WalPosition {
            lsn: exported.point,
            tx_id: None,
            ts_ms: now_ms(),
        };
        self.read = Some(exported);
        Ok(Begun::At(point))
    }

    async fn read(
        &mut self,
        after: Option<&KeyCursor>,
        point: &WalPosition,
        source: &SourceInfo,
    ) -> Result<ChunkRead, CaptureError> {
        let read = self.read_under_snapshot(after, point, source).await;
        if read.is_err() {
            // The error ends the run; the snapshot ends first.
            self.abort().await?;
        }
        read
    }

    async fn abort(&mut self) -> Result<(), CaptureError> {
        if let (Some(exported), Some(session)) = (self.read.take(), &self.session) {
            exported.end(&session.client).await?;
        }
        Ok(())
    }

    fn close_table(&mut self) {
        self.open = None;
    }
}

/// On-demand chunks' bounds: `snapshot.incremental_chunk_rows` and `chunk_max_mb`.
fn chunk_bounds(config: &CaptureConfig) -> ChunkBounds {
    ChunkBounds {
        rows: config.snapshot.incremental_chunk_rows,
        bytes: config.snapshot.chunk_max_mb.saturating_mul(1 << 20),
    }
}

/// ` WHERE (k1, k2) > ('…'::t1, '…'::t2)`: the rows after `cursor`, whose
/// values are the key's text forms.
fn after_key(cursor: &KeyCursor, key: &[&CatalogColumn]) -> Result<String, CaptureError> {
    let values = cursor
        .values
        .iter()
        .zip(key)
        .map(|(value, column)| match value {
            CursorValue::Bytes(text) => std::str::from_utf8(text)
                .map(|text| format!("'{}'::{}", text.replace('\'', "''"), column.type_name))
                .map_err(|_| bad_cursor(cursor)),
            _ => Err(bad_cursor(cursor)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let columns: Vec<String> = key.iter().map(|c| quote(&c.name)).collect();
    Ok(format!(
        " WHERE ({}) > ({})",
        columns.join(", "),
        values.join(", ")
    ))
}

/// A stored cursor that is not a PostgreSQL key's text.
fn bad_cursor(cursor: &KeyCursor) -> CaptureError {
    CaptureError::ServerSetup(format!(
        "the stored on-demand snapshot cursor {cursor:?} does not hold the key's text: \
         it was not written by a PostgreSQL capture"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, type_name: &str) -> CatalogColumn {
        CatalogColumn {
            name: name.into(),
            not_null: true,
            key_position: Some(1),
            type_oid: 0,
            type_modifier: -1,
            type_name: type_name.into(),
            default: None,
        }
    }

    #[test]
    fn the_next_chunk_starts_after_the_keys_text_compared_as_its_type() {
        let (region, id) = (column("region", "text"), column("Id", "bigint"));
        let cursor = KeyCursor {
            columns: vec!["region".into(), "Id".into()],
            values: vec![
                CursorValue::Bytes(b"o'hare".to_vec()),
                CursorValue::Bytes(b"42".to_vec()),
            ],
        };
        assert_eq!(
            after_key(&cursor, &[&region, &id]).unwrap(),
            r#" WHERE ("region", "Id") > ('o''hare'::text, '42'::bigint)"#
        );
        let mysql = KeyCursor {
            values: vec![CursorValue::Int(1), CursorValue::Int(2)],
            ..cursor
        };
        let err = after_key(&mysql, &[&region, &id]).unwrap_err().to_string();
        assert!(err.contains("not written by a PostgreSQL capture"), "{err}");
    }
}
