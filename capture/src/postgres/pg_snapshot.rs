//! The initial snapshot's reads from PostgreSQL (a [`SnapshotSource`]),
//! without any lock: every table read under one [`ExportedSnapshot`], whose
//! consistent point is the snapshot's position. Streaming then starts there
//! from capture's own slot (created before, so it holds the WAL after that
//! point), and the server sends exactly the transactions that commit after
//! it. Tables are read in primary-key order through a cursor,
//! `snapshot.chunk_rows` rows a fetch, streamed as the server sends them
//! (a fetch of large rows is never held whole), as text ([`table_read`]).

use futures::TryStreamExt;
use tributary_proto::SourceInfo;

use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::event_shape::EventShape;
use crate::postgres::exported_snapshot::ExportedSnapshot;
use crate::postgres::now_ms;
use crate::postgres::server::{self, Session};
use crate::postgres::table_read::{self, CatalogTable};
use crate::postgres::wal_position::WalPosition;
use crate::schema_change_record::DescribedChange;
use crate::snapshot_source::{SnapshotRows, SnapshotSource, SnapshotTable, TableRead};

/// The captured tables of one PostgreSQL database, read under one exported snapshot.
pub(crate) struct PgSnapshot<'a> {
    config: &'a CaptureConfig,
    shape: EventShape,
    /// The snapshot being read, and the session reading it.
    read: Option<(ExportedSnapshot, Session)>,
    /// Where the snapshot is (named in decoding errors).
    at: WalPosition,
}

impl<'a> PgSnapshot<'a> {
    /// The tables `config` captures (connected on [`SnapshotSource::begin`]).
    pub(crate) fn new(config: &'a CaptureConfig, shape: EventShape) -> Self {
        PgSnapshot {
            config,
            shape,
            read: None,
            at: WalPosition::default(),
        }
    }

    fn reader(&self) -> &Session {
        &self.read.as_ref().expect("the snapshot was begun").1
    }
}

impl SnapshotSource for PgSnapshot<'_> {
    type Position = WalPosition;

    async fn begin(&mut self) -> Result<(WalPosition, Vec<SnapshotTable>), CaptureError> {
        let reader = server::connect(&self.config.source).await?;
        let exported = ExportedSnapshot::begin(&self.config.source, &reader.client).await?;
        let tables = server::captured_tables(&reader.client, self.config)
            .await?
            .into_iter()
            .map(|t| SnapshotTable {
                db: t.schema,
                table: t.table,
                estimate: t.estimate,
            })
            .collect();
        self.at = WalPosition {
            lsn: exported.point,
            tx_id: None,
            ts_ms: now_ms(),
        };
        self.read = Some((exported, reader));
        Ok((self.at, tables))
    }

    /// Debezium's PostgreSQL connector has no schema change topic.
    async fn schema_changes(
        &mut self,
        _tables: &[SnapshotTable],
        _source: &SourceInfo,
    ) -> Result<Vec<DescribedChange>, CaptureError> {
        Ok(Vec::new())
    }

    async fn read_table<R: SnapshotRows>(
        &mut self,
        table: &SnapshotTable,
        source: &SourceInfo,
        rows: &mut R,
    ) -> Result<TableRead, CaptureError> {
        let at = self.at.lsn.to_string();
        let client = &self.reader().client;
        let Some(read) =
            CatalogTable::describe(client, &table.db, &table.table, &self.shape, &at).await?
        else {
            return Ok(TableRead::Gone);
        };
        client
            .batch_execute(&format!(
                "DECLARE tributary_snapshot NO SCROLL CURSOR FOR {}{}",
                read.select(),
                read.order_by_key()
            ))
            .await?;
        let database = self.config.source.database.as_deref().unwrap_or_default();
        let source = read.source(source, database);
        let fetch = format!(
            "FETCH {} FROM tributary_snapshot",
            self.config.snapshot.chunk_rows
        );
        let mut stopped = false;
        'chunks: loop {
            let mut fetched_rows = std::pin::pin!(table_read::rows(client, &fetch).await?);
            let mut fetched = 0;
            while let Some(row) = fetched_rows.try_next().await? {
                fetched += 1;
                for event in read.events(&row, &source, &self.shape, &at)? {
                    if rows.row(event).await?.is_break() {
                        stopped = true;
                        break 'chunks;
                    }
                }
            }
            if fetched < self.config.snapshot.chunk_rows {
                break;
            }
        }
        client.batch_execute("CLOSE tributary_snapshot").await?;
        Ok(if stopped {
            TableRead::Stopped
        } else {
            TableRead::Read
        })
    }

    async fn end(&mut self) -> Result<(), CaptureError> {
        if let Some((exported, reader)) = self.read.take() {
            exported.end(&reader.client).await?;
        }
        Ok(())
    }
}
