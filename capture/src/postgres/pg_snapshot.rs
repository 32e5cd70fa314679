//! The initial snapshot's reads from PostgreSQL (a [`SnapshotSource`]),
//! without any lock.
//!
//! A replication session creates a temporary slot that exports its
//! snapshot (`CREATE_REPLICATION_SLOT … TEMPORARY LOGICAL pgoutput
//! (SNAPSHOT 'export')`); an ordinary session reads every table in a
//! `REPEATABLE READ` transaction under that snapshot (`SET TRANSACTION
//! SNAPSHOT`): it sees exactly the transactions that commit before the
//! slot's consistent point, which is the snapshot's position. Streaming
//! then starts there from capture's own slot (created before, so it holds
//! the WAL after that point), and the server sends exactly the transactions
//! that commit after it. Tables are read in primary-key order through a
//! cursor, `snapshot.chunk_rows` rows at a time, as text (what pgoutput
//! sends, decoded alike).

use std::sync::Arc;

use pgwire_replication::ReplicationClient;
use tokio_postgres::SimpleQueryMessage;
use tributary_proto::{ChangeEvent, LogCoordinates, Op, SourceInfo};

use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::event_shape::EventShape;
use crate::postgres::catalog::{self, CatalogTypes};
use crate::postgres::lsn::Lsn;
use crate::postgres::now_ms;
use crate::postgres::pg_table::PgTable;
use crate::postgres::pgoutput::{Datum, Relation, RelationColumn, ReplicaIdentity};
use crate::postgres::server::{self, Session, quote};
use crate::postgres::wal_position::WalPosition;
use crate::row_change::row_changes;
use crate::schema_change_record::DescribedChange;
use crate::snapshot_source::{SnapshotRows, SnapshotSource, SnapshotTable, TableRead};

/// The captured tables of one PostgreSQL database, read under one exported snapshot.
pub(crate) struct PgSnapshot<'a> {
    config: &'a CaptureConfig,
    shape: EventShape,
    /// The replication session whose temporary slot exported the snapshot:
    /// the snapshot lives while it stays idle.
    exporter: Option<ReplicationClient>,
    /// The session of the reading transaction.
    reader: Option<Session>,
    /// Where the snapshot is (named in decoding errors).
    at: WalPosition,
}

impl<'a> PgSnapshot<'a> {
    /// The tables `config` captures (connected on [`SnapshotSource::begin`]).
    pub(crate) fn new(config: &'a CaptureConfig, shape: EventShape) -> Self {
        PgSnapshot {
            config,
            shape,
            exporter: None,
            reader: None,
            at: WalPosition::default(),
        }
    }

    fn reader(&self) -> &Session {
        self.reader.as_ref().expect("the snapshot was begun")
    }
}

impl SnapshotSource for PgSnapshot<'_> {
    type Position = WalPosition;

    async fn begin(&mut self) -> Result<(WalPosition, Vec<SnapshotTable>), CaptureError> {
        let source = &self.config.source;
        let mut exporter =
            ReplicationClient::connect_gated(server::replication_config(source, Lsn(0))).await?;
        let temporary = format!("{}_snapshot_{}", source.slot_name(), std::process::id());
        let rows = exporter
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT {temporary} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')"
            ))
            .await?;
        let field = |i: usize| {
            rows.first()
                .and_then(|row| row.get(i).cloned().flatten())
                .and_then(|b| String::from_utf8(b.to_vec()).ok())
                .ok_or_else(|| {
                    CaptureError::ServerSetup("CREATE_REPLICATION_SLOT returned no slot".into())
                })
        };
        let consistent_point: Lsn = field(1)?
            .parse()
            .map_err(|e| CaptureError::ServerSetup(format!("{e}")))?;
        let snapshot_name = field(2)?;
        let reader = server::connect(source).await?;
        reader
            .client
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT '{snapshot_name}'"
            ))
            .await?;
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
            lsn: consistent_point,
            tx_id: None,
            ts_ms: now_ms(),
        };
        self.exporter = Some(exporter);
        self.reader = Some(reader);
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
        let Some(pg_table) = self.describe(table).await? else {
            return Ok(TableRead::Gone);
        };
        let schema = &pg_table.schema;
        let columns: Vec<String> = schema.names.iter().map(|n| quote(n)).collect();
        let order: Vec<String> = schema.key.iter().map(|&i| columns[i].clone()).collect();
        let client = &self.reader().client;
        client
            .batch_execute(&format!(
                "DECLARE tributary_snapshot NO SCROLL CURSOR FOR SELECT {} FROM {}.{}{}",
                columns.join(", "),
                quote(&table.db),
                quote(&table.table),
                if order.is_empty() {
                    String::new()
                } else {
                    format!(" ORDER BY {}", order.join(", "))
                }
            ))
            .await?;
        let mut source = source.clone();
        source.db = self
            .config
            .source
            .database
            .as_deref()
            .unwrap_or_default()
            .into();
        source.table = schema.table.clone();
        if let LogCoordinates::Wal(wal) = &mut source.log {
            wal.schema = schema.db.clone();
        }
        let fetch = format!(
            "FETCH {} FROM tributary_snapshot",
            self.config.snapshot.chunk_rows
        );
        let mut stopped = false;
        'chunks: loop {
            let messages = client.simple_query(&fetch).await?;
            let mut fetched = 0;
            for message in messages {
                let SimpleQueryMessage::Row(row) = message else {
                    continue;
                };
                fetched += 1;
                let tuple: Vec<Datum> = (0..row.len())
                    .map(|i| match row.get(i) {
                        Some(text) => Datum::Text(text.as_bytes().to_vec()),
                        None => Datum::Null,
                    })
                    .collect();
                let values = pg_table
                    .values(&tuple, &self.shape.decode.modes)
                    .map_err(|e| CaptureError::WalDecode {
                        lsn: format!("{} (snapshot)", self.at.lsn),
                        detail: e.to_string(),
                    })?;
                for change in row_changes(schema, Op::Create, None, Some(values))
                    .into_iter()
                    .flatten()
                {
                    let event = ChangeEvent {
                        op: Op::Read,
                        key: change.key,
                        before: None,
                        after: change.after,
                        source: source.clone(),
                        ts_ms: now_ms(),
                        transaction: None,
                        undecodable: Vec::new(),
                        schemas: schema.record_schemas.clone(),
                        key_change: None,
                    };
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
        if let Some(reader) = &self.reader {
            reader.client.batch_execute("COMMIT").await?;
        }
        // Dropping the gated session before it starts ends it, and its temporary slot.
        self.exporter = None;
        Ok(())
    }
}

impl PgSnapshot<'_> {
    /// A table as of the snapshot, described from the catalog as a Relation
    /// message would; `None` when it is gone.
    async fn describe(&self, table: &SnapshotTable) -> Result<Option<Arc<PgTable>>, CaptureError> {
        let client = &self.reader().client;
        let Some(row) = client
            .query_opt(
                "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&table.db, &table.table],
            )
            .await?
        else {
            return Ok(None);
        };
        let oid: u32 = row.get(0);
        let columns = catalog::table_columns(client, oid).await?;
        let oids: Vec<u32> = columns.iter().map(|c| c.type_oid).collect();
        let types = CatalogTypes::read(client, &oids).await?;
        let relation = Relation {
            oid,
            namespace: table.db.clone(),
            name: table.table.clone(),
            replica_identity: ReplicaIdentity::Default,
            columns: columns
                .iter()
                .map(|c| RelationColumn {
                    key: c.key_position.is_some(),
                    name: c.name.clone(),
                    type_oid: c.type_oid,
                    type_modifier: c.type_modifier,
                })
                .collect(),
        };
        let pg_table = PgTable::new(&relation, &types, &columns, &self.shape).map_err(|e| {
            CaptureError::WalDecode {
                lsn: format!("{} (snapshot)", self.at.lsn),
                detail: e.to_string(),
            }
        })?;
        Ok(Some(Arc::new(pg_table)))
    }
}
