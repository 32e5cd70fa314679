//! Streaming from a PostgreSQL replication slot (a [`ChangeStream`]): the
//! `pgoutput` messages of committed transactions, in commit order, turned
//! into change events and commit positions.
//!
//! Tables are described when their Relation message arrives (before their
//! first change, and again after DDL), from the message and the catalog;
//! the schema history records each new shape as the table's definition.
//! The slot is confirmed up to the last position capture has stored
//! ([`KafkaWriter::stored_positions`](crate::kafka_writer::KafkaWriter::stored_positions)),
//! never further: the server keeps the WAL of everything not yet stored.
//! While the captured tables are idle, heartbeats carry the server's WAL
//! end (every transaction before it has been sent), so the slot keeps up
//! with WAL that other tables write; `heartbeat.action.query` runs at each.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use pgwire_replication::{PgWireError, ReplicationClient, ReplicationEvent};
use tokio::sync::watch;
use tracing::debug;
use tributary_proto::lsn::Lsn;
use tributary_proto::{
    ChangeEvent, LogCoordinates, Op, SnapshotMarker, SourceInfo, TransactionInfo, WalCoordinates,
};

use crate::change_stream::{ChangeStream, ReaderItem, SchemaChange};
use crate::config::CaptureConfig;
use crate::error::CaptureError;
use crate::event_shape::EventShape;
use crate::filter::TableFilter;
use crate::position_store::offsets_topic;
use crate::postgres::catalog::{self, CatalogTypes};
use crate::postgres::now_ms;
use crate::postgres::pg_table::PgTable;
use crate::postgres::pgoutput::{self, Message, Relation};
use crate::postgres::server::{self, Session};
use crate::postgres::wal_position::WalPosition;
use crate::row_change::row_changes;

/// Milliseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_MS: i64 = 946_684_800_000;

/// A transaction being read.
struct OpenTransaction {
    xid: u32,
    /// Debezium's transaction id: `<xid>:<commit LSN>`.
    id: Arc<str>,
    ts_ms: i64,
    events: u64,
    per_table: HashMap<u32, u64>,
}

/// The change stream of one PostgreSQL database.
pub struct WalStream {
    client: ReplicationClient,
    /// Catalog queries and `heartbeat.action.query`.
    catalog: Session,
    shape: EventShape,
    filter: TableFilter,
    server_name: Arc<str>,
    database: Arc<str>,
    heartbeat_query: Option<String>,
    /// Tables by OID; `None`: not captured.
    tables: HashMap<u32, Option<Arc<PgTable>>>,
    out: VecDeque<ReaderItem<WalPosition>>,
    trx: Option<OpenTransaction>,
    /// The end of the last transaction read (or where the stream started).
    at: WalPosition,
    /// The commit LSN of the last transaction read (Debezium's `sequence`).
    last_commit: Option<Lsn>,
    stored: watch::Receiver<Option<WalPosition>>,
    heartbeat: Option<tokio::time::Interval>,
}

impl WalStream {
    /// Starts streaming from the slot after `from`; `stored` follows the
    /// positions capture stores.
    pub async fn open(
        config: &CaptureConfig,
        shape: EventShape,
        from: &WalPosition,
        stored: watch::Receiver<Option<WalPosition>>,
    ) -> Result<WalStream, CaptureError> {
        let catalog = server::connect(&config.source).await?;
        let mut client =
            ReplicationClient::connect(server::replication_config(&config.source, from.lsn))
                .await?;
        if let Err(e) = client.wait_started().await {
            return Err(slot_error(e, config, from));
        }
        debug!(%from, slot = config.source.slot_name(), "streaming from the replication slot");
        let heartbeat = (config.source.heartbeat_s > 0).then(|| {
            let period = Duration::from_secs(config.source.heartbeat_s);
            tokio::time::interval_at(tokio::time::Instant::now() + period, period)
        });
        Ok(WalStream {
            client,
            catalog,
            filter: TableFilter::of(config),
            server_name: config.server_name.as_str().into(),
            database: config.source.database.as_deref().unwrap_or_default().into(),
            heartbeat_query: config.source.heartbeat_action_query.clone(),
            shape,
            tables: HashMap::new(),
            out: VecDeque::new(),
            trx: None,
            at: *from,
            last_commit: None,
            stored,
            heartbeat,
        })
    }

    /// Handles one event of the replication session.
    async fn on_event(&mut self, event: ReplicationEvent) -> Result<(), CaptureError> {
        match event {
            ReplicationEvent::Begin {
                final_lsn,
                xid,
                commit_time_micros,
            } => {
                self.trx = Some(OpenTransaction {
                    xid,
                    id: format!("{xid}:{}", final_lsn.as_u64()).into(),
                    ts_ms: commit_time_micros.div_euclid(1000) + PG_EPOCH_MS,
                    events: 0,
                    per_table: HashMap::new(),
                });
            }
            ReplicationEvent::XLogData {
                wal_start, data, ..
            } => {
                let lsn = Lsn(wal_start.as_u64());
                let message = pgoutput::decode(&data).map_err(|e| CaptureError::WalDecode {
                    lsn: lsn.to_string(),
                    detail: e.to_string(),
                })?;
                self.on_message(lsn, message).await?;
            }
            ReplicationEvent::Commit {
                lsn,
                end_lsn,
                commit_time_micros,
            } => {
                let trx = self.trx.take();
                self.at = WalPosition {
                    lsn: Lsn(end_lsn.as_u64()),
                    tx_id: trx.map(|t| t.xid),
                    ts_ms: commit_time_micros.div_euclid(1000) + PG_EPOCH_MS,
                };
                self.last_commit = Some(Lsn(lsn.as_u64()));
                self.out.push_back(ReaderItem::Commit(self.at));
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                // Every transaction that commits before the server's WAL end has been sent.
                let wal_end = Lsn(wal_end.as_u64());
                if self.trx.is_none() && wal_end > self.at.lsn {
                    self.at = WalPosition {
                        lsn: wal_end,
                        tx_id: None,
                        ts_ms: now_ms(),
                    };
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Handles one `pgoutput` message at `lsn`.
    async fn on_message(&mut self, lsn: Lsn, message: Message) -> Result<(), CaptureError> {
        let (relation, op, before, after) = match message {
            Message::Relation(relation) => return self.describe(lsn, relation).await,
            Message::Insert { relation, new } => (relation, Op::Create, None, Some(new)),
            Message::Update { relation, old, new } => {
                (relation, Op::Update, old.map(|o| o.tuple), Some(new))
            }
            Message::Delete { relation, old } => (relation, Op::Delete, Some(old.tuple), None),
            // Debezium skips truncations by default; transactions come as their own events.
            _ => return Ok(()),
        };
        let table = match self.tables.get(&relation) {
            Some(Some(table)) => table.clone(),
            Some(None) => return Ok(()),
            None => {
                return Err(CaptureError::WalDecode {
                    lsn: lsn.to_string(),
                    detail: format!("a change of relation {relation} before its Relation message"),
                });
            }
        };
        let decode = |tuple: Option<Vec<pgoutput::Datum>>| {
            tuple
                .map(|t| table.values(&t, &self.shape.decode.modes))
                .transpose()
                .map_err(|e| CaptureError::WalDecode {
                    lsn: lsn.to_string(),
                    detail: e.to_string(),
                })
        };
        let (before, after) = (decode(before)?, decode(after)?);
        let Some(trx) = self.trx.as_mut() else {
            return Err(CaptureError::WalDecode {
                lsn: lsn.to_string(),
                detail: "a change outside a transaction".into(),
            });
        };
        let schema = &table.schema;
        let source = SourceInfo {
            name: self.server_name.clone(),
            ts_ms: trx.ts_ms,
            snapshot: SnapshotMarker::False,
            db: self.database.clone(),
            table: schema.table.clone(),
            log: LogCoordinates::Wal(Box::new(WalCoordinates {
                schema: schema.db.clone(),
                tx_id: Some(u64::from(trx.xid)),
                lsn: Some(lsn.0),
                last_commit_lsn: self.last_commit.map(|l| l.0),
                xmin: None,
            })),
        };
        let now = now_ms();
        for change in row_changes(schema, op, before, after).into_iter().flatten() {
            trx.events += 1;
            let order = trx.per_table.entry(relation).or_default();
            *order += 1;
            self.out.push_back(ReaderItem::Change(Box::new(ChangeEvent {
                op: change.op,
                key: change.key,
                before: change.before,
                after: change.after,
                source: source.clone(),
                ts_ms: now,
                transaction: Some(TransactionInfo {
                    id: trx.id.clone(),
                    total_order: trx.events,
                    data_collection_order: *order,
                }),
                undecodable: Vec::new(),
                schemas: schema.record_schemas.clone(),
                key_change: change.key_change,
            })));
        }
        Ok(())
    }

    /// Describes a table from its Relation message and the catalog.
    async fn describe(&mut self, lsn: Lsn, relation: Relation) -> Result<(), CaptureError> {
        // The signal table's rows are read too: they ask for on-demand snapshots.
        if !self.filter.decodes(&relation.namespace, &relation.name) {
            self.tables.insert(relation.oid, None);
            return Ok(());
        }
        let client = &self.catalog.client;
        let oids: Vec<u32> = relation.columns.iter().map(|c| c.type_oid).collect();
        let types = CatalogTypes::read(client, &oids).await?;
        let columns = catalog::table_columns(client, relation.oid).await?;
        let table = PgTable::new(&relation, &types, &columns, &self.shape).map_err(|e| {
            CaptureError::WalDecode {
                lsn: lsn.to_string(),
                detail: e.to_string(),
            }
        })?;
        debug!(table = %table.name(), columns = relation.columns.len(), "table described");
        // The schema history records each shape once per session: the first
        // seen, and each one DDL changes (pgoutput also repeats unchanged ones).
        let changed = match self.tables.get(&relation.oid) {
            Some(Some(known)) => known.schema.columns != table.schema.columns,
            _ => !self
                .filter
                .is_signal_table(&relation.namespace, &relation.name),
        };
        if changed {
            self.out
                .push_back(ReaderItem::SchemaChange(Box::new(SchemaChange {
                    db: relation.namespace.clone(),
                    ddl: catalog::definition(&relation.namespace, &relation.name, &columns),
                    position: self.at,
                    recorded: true,
                    described: None,
                })));
        }
        self.tables.insert(relation.oid, Some(Arc::new(table)));
        Ok(())
    }

    /// Confirms the last stored position to the slot.
    fn confirm_stored(&mut self) {
        if let Some(position) = *self.stored.borrow_and_update() {
            self.client
                .update_applied_lsn(pgwire_replication::Lsn::from_u64(position.lsn.0));
        }
    }

    /// A heartbeat between transactions: runs `heartbeat.action.query`.
    async fn beat(&mut self) -> Result<(), CaptureError> {
        if let Some(query) = &self.heartbeat_query {
            self.catalog.client.batch_execute(query).await?;
        }
        if self.trx.is_none() {
            self.out.push_back(ReaderItem::Heartbeat(self.at));
        }
        Ok(())
    }
}

impl ChangeStream for WalStream {
    type Position = WalPosition;

    async fn next(&mut self) -> Result<Option<ReaderItem<WalPosition>>, CaptureError> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Ok(Some(item));
            }
            let heartbeat = &mut self.heartbeat;
            let beat = async {
                match heartbeat {
                    Some(interval) => {
                        interval.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = self.client.recv() => match event? {
                    Some(event) => self.on_event(event).await?,
                    None => return Ok(None),
                },
                Ok(()) = self.stored.changed() => self.confirm_stored(),
                () = beat => self.beat().await?,
            }
        }
    }

    async fn close(mut self) {
        if let Err(e) = self.client.shutdown().await {
            debug!(error = %e, "replication session ended");
        }
    }
}

/// A replication session that would not start: a missing or invalidated
/// slot loses the position (a new snapshot recovers).
fn slot_error(e: PgWireError, config: &CaptureConfig, from: &WalPosition) -> CaptureError {
    let text = e.to_string();
    let lost = ["does not exist", "invalidated", "can no longer get changes"];
    if e.is_server() && lost.iter().any(|l| text.contains(l)) {
        return CaptureError::PositionLost {
            position: format!("{from} in replication slot {}", config.source.slot_name()),
            offsets_topic: offsets_topic(&config.server_name),
            detail: text,
        };
    }
    e.into()
}
