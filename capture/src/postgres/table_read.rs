//! Reading a table's rows in a snapshot (the initial one and on-demand
//! chunks alike): the table described from the catalog as a Relation
//! message would describe it, its columns selected in their text form (what
//! pgoutput sends, so both are decoded alike), the rows streamed as the
//! server sends them ([`rows`]), each made an `op: r` event.

use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use tokio_postgres::{Client, SimpleQueryMessage, SimpleQueryRow};
use tributary_proto::{ChangeEvent, LogCoordinates, Op, SourceInfo};

use crate::chunk_size::FIXED_VALUE_BYTES;
use crate::error::CaptureError;
use crate::event_shape::EventShape;
use crate::postgres::catalog::{self, CatalogColumn, CatalogTypes};
use crate::postgres::now_ms;
use crate::postgres::pg_table::PgTable;
use crate::postgres::pgoutput::{Datum, Relation, RelationColumn, ReplicaIdentity};
use crate::postgres::server::quote;
use crate::row_change::row_changes;

/// A table as a snapshot reads it.
pub(crate) struct CatalogTable {
    /// How its rows decode.
    pub table: Arc<PgTable>,
    /// Its columns in the catalog (the primary key's among them).
    pub columns: Vec<CatalogColumn>,
}

impl CatalogTable {
    /// `schema.table` as the catalog has it now, in `client`'s transaction;
    /// `None` when there is no such table. `at` names the snapshot in errors.
    pub(crate) async fn describe(
        client: &Client,
        schema: &str,
        name: &str,
        shape: &EventShape,
        at: &str,
    ) -> Result<Option<CatalogTable>, CaptureError> {
        let Some(oid) = catalog::table_oid(client, schema, name).await? else {
            return Ok(None);
        };
        let columns = catalog::table_columns(client, oid).await?;
        let oids: Vec<u32> = columns.iter().map(|c| c.type_oid).collect();
        let types = CatalogTypes::read(client, &oids).await?;
        let relation = Relation {
            oid,
            namespace: schema.to_owned(),
            name: name.to_owned(),
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
        let table = PgTable::new(&relation, &types, &columns, shape).map_err(|e| {
            CaptureError::WalDecode {
                lsn: format!("{at} (snapshot)"),
                detail: e.to_string(),
            }
        })?;
        Ok(Some(CatalogTable {
            table: Arc::new(table),
            columns,
        }))
    }

    /// Its primary key's columns, in key order (empty without one).
    pub(crate) fn primary_key(&self) -> Vec<&CatalogColumn> {
        let mut key: Vec<&CatalogColumn> = self
            .columns
            .iter()
            .filter(|c| c.key_position.is_some())
            .collect();
        key.sort_by_key(|c| c.key_position);
        key
    }

    /// `SELECT <every column> FROM <table>`, quoted.
    pub(crate) fn select(&self) -> String {
        let schema = &self.table.schema;
        let columns: Vec<String> = schema.names.iter().map(|n| quote(n)).collect();
        format!(
            "SELECT {} FROM {}.{}",
            columns.join(", "),
            quote(&schema.db),
            quote(&schema.table)
        )
    }

    /// `ORDER BY` the primary key (empty without one).
    pub(crate) fn order_by_key(&self) -> String {
        let key: Vec<String> = self.primary_key().iter().map(|c| quote(&c.name)).collect();
        if key.is_empty() {
            String::new()
        } else {
            format!(" ORDER BY {}", key.join(", "))
        }
    }

    /// `source` made the source block of this table's snapshot events in `database`.
    pub(crate) fn source(&self, source: &SourceInfo, database: &str) -> SourceInfo {
        let mut source = source.clone();
        source.db = database.into();
        source.table = self.table.schema.table.clone();
        if let LogCoordinates::Wal(wal) = &mut source.log {
            wal.schema = self.table.schema.db.clone();
        }
        source
    }

    /// A selected row as `op: r` events (one, or none for a table whose
    /// `columns:` rules filter it out), `source` from [`Self::source`].
    pub(crate) fn events(
        &self,
        row: &SimpleQueryRow,
        source: &SourceInfo,
        shape: &EventShape,
        at: &str,
    ) -> Result<impl Iterator<Item = ChangeEvent>, CaptureError> {
        let tuple: Vec<Datum> = (0..row.len())
            .map(|i| match row.get(i) {
                Some(text) => Datum::Text(text.as_bytes().to_vec()),
                None => Datum::Null,
            })
            .collect();
        let values = self
            .table
            .values(&tuple, &shape.decode.modes)
            .map_err(|e| CaptureError::WalDecode {
                lsn: format!("{at} (snapshot)"),
                detail: e.to_string(),
            })?;
        let schema = &self.table.schema;
        let source = source.clone();
        Ok(row_changes(schema, Op::Create, None, Some(values))
            .into_iter()
            .flatten()
            .map(move |change| ChangeEvent {
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
            }))
    }
}

/// The rows `query` selects, as the server sends them: held one message
/// batch at a time (tokio-postgres's channel to the session is bounded), so
/// a reader that stops early holds no more; the rest are skipped by the
/// session before its next query.
pub(crate) async fn rows(
    client: &Client,
    query: &str,
) -> Result<impl Stream<Item = Result<SimpleQueryRow, CaptureError>>, CaptureError> {
    let stream = client.simple_query_raw(query).await?;
    Ok(stream
        .map_err(CaptureError::from)
        .try_filter_map(|message| async move {
            Ok(match message {
                SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
        }))
}

/// The bytes a row holds, as the chunk bound counts them: each value's
/// text, a NULL as a fixed value.
pub(crate) fn row_bytes(row: &SimpleQueryRow) -> u64 {
    (0..row.len())
        .map(|i| {
            row.get(i)
                .map_or(FIXED_VALUE_BYTES, |text| text.len() as u64)
        })
        .sum()
}
