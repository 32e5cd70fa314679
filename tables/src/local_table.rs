//! [`LocalTable`]: a [`Table`] answered from the local RocksDB store.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tributary_proto::partition::partition_for_key;

use crate::error::TableError;
use crate::key_codec;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{TableLabel, TablesMetrics};
use crate::progress::Progress;
use crate::row_columns;
use crate::store::{ScanBounds, Store, cf_name};
use crate::table::{Columns, KeyRange, PartitionState, Table, TableDescription};

/// A materialized table held (in whole or in part) by this instance.
pub struct LocalTable {
    name: String,
    topic: String,
    partition_count: u32,
    store: Arc<Store>,
    progress: Arc<Progress>,
    get_seconds: Histogram,
    key_columns: OnceLock<Vec<String>>,
    /// Column family names by partition, made once (not per lookup).
    cf_names: Vec<String>,
}

impl LocalTable {
    /// A table over `store`, fed from `topic` with `partition_count` partitions.
    pub fn new(
        name: &str,
        topic: &str,
        partition_count: u32,
        store: Arc<Store>,
        progress: Arc<Progress>,
        metrics: TablesMetrics,
    ) -> Self {
        LocalTable {
            name: name.to_owned(),
            topic: topic.to_owned(),
            partition_count,
            store,
            progress,
            get_seconds: metrics
                .get_seconds
                .get_or_create(&TableLabel {
                    table: name.to_owned(),
                })
                .clone(),
            key_columns: OnceLock::new(),
            cf_names: (0..partition_count as i32)
                .map(|p| cf_name(name, p))
                .collect(),
        }
    }

    /// Key column names, once the first record has been materialized.
    fn key_columns(&self) -> Result<Option<&[String]>, TableError> {
        if let Some(columns) = self.key_columns.get() {
            return Ok(Some(columns));
        }
        Ok(self
            .store
            .key_columns(&self.name)?
            .map(|c| self.key_columns.get_or_init(|| c).as_slice()))
    }

    fn bad_key(&self, problem: impl Into<String>) -> TableError {
        TableError::BadKey {
            table: self.name.clone(),
            problem: problem.into(),
        }
    }

    /// The key's values in key order; `full` requires every key column.
    fn key_values<'k>(
        &self,
        columns: &[String],
        key: &'k Value,
        full: bool,
    ) -> Result<Vec<&'k Value>, TableError> {
        let values = match key {
            Value::Object(map) => {
                if let Some(extra) = map.keys().find(|k| !columns.contains(k)) {
                    return Err(self.bad_key(format!(
                        "`{extra}` is not a key column (key columns: {columns:?})"
                    )));
                }
                let mut values = Vec::new();
                for column in columns {
                    match map.get(column) {
                        Some(v) => values.push(v),
                        None if full => {
                            return Err(self.bad_key(format!("missing key column `{column}`")));
                        }
                        None => break,
                    }
                }
                if values.len() != map.len() {
                    return Err(self.bad_key(format!(
                        "a prefix must name leading key columns in order {columns:?}"
                    )));
                }
                values
            }
            Value::Array(values) => values.iter().collect(),
            Value::Null if !full => Vec::new(),
            scalar => vec![scalar],
        };
        if full && values.len() != columns.len() {
            return Err(self.bad_key(format!(
                "expected {} key values ({columns:?}), got {}",
                columns.len(),
                values.len()
            )));
        }
        if values.len() > columns.len() {
            return Err(self.bad_key(format!("more values than key columns {columns:?}")));
        }
        Ok(values)
    }

    /// The partition Kafka's partitioner gives the record key of these values:
    /// murmur2 of the key's compact JSON object, as the producer wrote it.
    fn partition_of(&self, columns: &[String], values: &[&Value]) -> i32 {
        let mut bytes = Vec::with_capacity(16 * columns.len() + 2);
        bytes.push(b'{');
        for (i, (column, value)) in columns.iter().zip(values).enumerate() {
            if i > 0 {
                bytes.push(b',');
            }
            serde_json::to_writer(&mut bytes, column).expect("writing to a Vec");
            bytes.push(b':');
            serde_json::to_writer(&mut bytes, value).expect("writing to a Vec");
        }
        bytes.push(b'}');
        partition_for_key(&bytes, self.partition_count)
    }

    /// Looks `key` up and hands the stored row bytes to `read`, timing the lookup.
    fn lookup<R>(
        &self,
        key: &Value,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, TableError> {
        let started = Instant::now();
        let Some(columns) = self.key_columns()? else {
            return Ok(None); // nothing materialized yet
        };
        let values = self.key_values(columns, key, true)?;
        let partition = self.partition_of(columns, &values);
        if !self.progress.holds(&self.name, partition) {
            return Err(TableError::NotOwned {
                table: self.name.clone(),
                partition,
            });
        }
        let encoded = key_codec::encode(values.iter().copied()).map_err(|e| self.bad_key(e))?;
        let Some(cf) = self.cf_names.get(partition as usize) else {
            return Ok(None);
        };
        let row = self.store.get_with(cf, &encoded, read)?;
        self.get_seconds.observe(started.elapsed().as_secs_f64());
        Ok(row)
    }

    /// The row of `key` as its stored JSON bytes, without decoding it (for callers
    /// that pass JSON on, such as the lookup API).
    pub fn get_json_bytes(&self, key: &Value) -> Result<Option<Vec<u8>>, TableError> {
        self.lookup(key, <[u8]>::to_vec)
    }

    /// The partition `key` lives in (`None` until the first record has been
    /// materialized, when the key columns are not known yet).
    pub fn partition_of_key(&self, key: &Value) -> Result<Option<i32>, TableError> {
        let Some(columns) = self.key_columns()? else {
            return Ok(None);
        };
        let values = self.key_values(columns, key, true)?;
        Ok(Some(self.partition_of(columns, &values)))
    }

    /// The bytes `key` sorts by in scans (to merge scans of several instances).
    pub fn sort_key(&self, key: &Value) -> Result<Vec<u8>, TableError> {
        let Some(columns) = self.key_columns()? else {
            return Ok(Vec::new());
        };
        let values = self.key_values(columns, key, true)?;
        key_codec::encode(values.iter().copied()).map_err(|e| self.bad_key(e))
    }

    fn parse_row(&self, raw: &[u8]) -> Result<Value, TableError> {
        serde_json::from_slice(raw).map_err(|e| TableError::Corrupt {
            table: self.name.clone(),
            problem: e.to_string(),
        })
    }
}

#[async_trait]
impl Table for LocalTable {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &Value) -> Result<Option<Value>, TableError> {
        self.lookup(key, |raw| self.parse_row(raw))?.transpose()
    }

    async fn get_columns(
        &self,
        key: &Value,
        columns: &[String],
    ) -> Result<Option<Columns>, TableError> {
        let row = self.lookup(key, |raw| match row_columns::decode(raw, columns) {
            Ok(values) => Ok(Columns::Values(values)),
            // Not an object (no columns), or the reason it is not JSON.
            Err(_) => self
                .parse_row(raw)
                .map(|_| Columns::Values(vec![None; columns.len()])),
        })?;
        row.transpose()
    }

    async fn scan(
        &self,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<(Value, Value)>, TableError> {
        let Some(columns) = self.key_columns()? else {
            return Ok(Vec::new());
        };
        let encode = |bound: &Value| -> Result<Vec<u8>, TableError> {
            let values = self.key_values(columns, bound, false)?;
            key_codec::encode(values.iter().copied()).map_err(|e| self.bad_key(e))
        };
        let bounds = match range {
            KeyRange::Prefix(prefix) => ScanBounds {
                prefix: encode(prefix)?,
                ..ScanBounds::default()
            },
            KeyRange::Between { from, to } => ScanBounds {
                prefix: Vec::new(),
                from: from.as_ref().map(encode).transpose()?.unwrap_or_default(),
                to: to.as_ref().map(encode).transpose()?,
            },
        };
        // Keys are spread over partitions by hash: merge the held partitions in key order.
        let mut rows = Vec::new();
        for (partition, _) in self.progress.of_table(&self.name) {
            rows.extend(self.store.scan(&self.name, partition, &bounds, limit)?);
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows.truncate(limit);
        rows.into_iter()
            .map(|(key, raw)| {
                let key_values = key_codec::decode(&key).map_err(|e| TableError::Corrupt {
                    table: self.name.clone(),
                    problem: e,
                })?;
                let key: Map<String, Value> = columns.iter().cloned().zip(key_values).collect();
                Ok((Value::Object(key), self.parse_row(&raw)?))
            })
            .collect()
    }

    async fn describe(&self) -> TableDescription {
        let partitions = self
            .progress
            .of_table(&self.name)
            .into_iter()
            .map(|(partition, p)| PartitionState {
                partition,
                next_offset: p.next_offset,
                end_at_assignment: p.end_at_assignment,
                ready: p.ready,
                rows_estimate: self.store.estimate_rows(&self.name, partition),
                lag: p.lag(),
                latest_end: p.latest_end.or(p.end_at_assignment),
                applied_gtids: p.gtids.to_strings(),
            })
            .collect();
        TableDescription {
            name: self.name.clone(),
            kind: "local",
            topic: self.topic.clone(),
            key_columns: self
                .key_columns()
                .ok()
                .flatten()
                .map(<[String]>::to_vec)
                .unwrap_or_default(),
            partition_count: self.partition_count,
            partitions,
        }
    }
}
