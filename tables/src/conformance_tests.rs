//! The tables of this crate pass the table conformance suite of
//! `tributary-table-api`: local tables (global, and partitioned over four
//! partitions) over a RocksDB store written through the materializer's own
//! record path ([`apply`](crate::apply)), keeping rows for joins in memory
//! as jobs' tables do (and one that keeps none, read from RocksDB every
//! time), a partitioned one keeping its history (as-of reads), and a remote
//! table over a backend that answers from a map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tempfile::TempDir;
use tributary_table_api::conformance::{Change, Fixture};
use tributary_table_api::{Table, key_codec};

use crate::TablesConfig;
use crate::apply::{Applier, Layout, Record};
use crate::config::TableMode;
use crate::history::VersionRule;
use crate::local_table::{LocalTable, Partitioning, SharedShape};
use crate::metrics::TablesMetrics;
use crate::partition_check::expected_partition;
use crate::progress::Progress;
use crate::record_key;
use crate::remote::RemoteTable;
use crate::remote::backend::{Backend, BackendError};
use crate::store::Store;

/// The key object of `row` (or of a delete's key): the key columns in key order.
fn key_of(key_columns: &[&str], row: &Value) -> Map<String, Value> {
    key_columns
        .iter()
        .map(|c| ((*c).to_owned(), row[*c].clone()))
        .collect()
}

/// Local tables in a fresh store, written as the materializer writes records.
struct Local {
    mode: TableMode,
    partitions: u32,
    /// Rows kept for joins (`join_row_cache_mb`).
    join_row_cache_mb: usize,
    /// Keeps the store's directory while the table is used.
    dir: Mutex<Option<TempDir>>,
}

impl Local {
    fn global() -> Self {
        Local {
            mode: TableMode::Global,
            partitions: 3,
            join_row_cache_mb: 64,
            dir: Mutex::default(),
        }
    }

    fn partitioned() -> Self {
        Local {
            mode: TableMode::Partitioned,
            partitions: 4,
            join_row_cache_mb: 64,
            dir: Mutex::default(),
        }
    }

    /// Partitioned, every row read from RocksDB.
    fn partitioned_uncached() -> Self {
        Local {
            join_row_cache_mb: 0,
            ..Local::partitioned()
        }
    }
}

impl Local {
    /// The table `changes` leave, each applied as the materializer applies a
    /// record: a plain row or tombstone, or (with a time) a change event
    /// committed then, to a table versioned for `history_us` µs.
    async fn build(
        &self,
        name: &str,
        key: &[&str],
        changes: Vec<(Option<i64>, Change)>,
        history_us: Option<i64>,
    ) -> Arc<dyn Table> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mode = match self.mode {
            TableMode::Global => "global",
            TableMode::Partitioned => "partitioned",
        };
        let versioned = history_us
            .map(|us| format!(", versioned: {{ history: {us}us }}"))
            .unwrap_or_default();
        let config = TablesConfig::parse(&format!(
            "data_dir: {}\nkafka: {{ brokers: b }}\njoin_row_cache_mb: {}\ntables: [{{ name: {name}, topic: t, mode: {mode}{versioned} }}]\n",
            dir.path().display(),
            self.join_row_cache_mb
        ))
        .expect("a tables config");
        let table_config = &config.tables[0];
        let (encoded, joined) = config.derived_rows_bytes();
        let store = Store::open(dir.path(), &config.rocksdb).expect("a store");
        let store = Arc::new(store.with_derived_rows(encoded, joined));
        let progress = Arc::new(Progress::default());
        let partitioning = Partitioning::of(table_config);
        let layout = Layout {
            partitioning: (self.mode == TableMode::Partitioned).then_some(partitioning),
            partitions: self.partitions,
            fill_unavailable: false,
            versioned: table_config.versioned.as_ref().map(VersionRule::of),
            key: table_config.key.clone(),
        };
        if self.mode == TableMode::Global {
            store
                .ensure_global(name, self.partitions)
                .expect("a keyspace");
        }
        for partition in 0..self.partitions as i32 {
            progress.assign(name, partition, 0, Default::default());
        }
        let shape = SharedShape::default();
        let mut applier = Applier::default();
        let mut stream_times: HashMap<i32, Option<i64>> = HashMap::new();
        for (offset, (time, change)) in changes.into_iter().enumerate() {
            let (key, payload) = match (change, time) {
                (Change::Upsert(row), None) => (key_of(key, &row), Some(row)),
                (Change::Delete(deleted), None) => (key_of(key, &deleted), None),
                (Change::Upsert(row), Some(t)) => (
                    key_of(key, &row),
                    Some(json!({"op": "c", "before": null, "after": row, "source": {"ts_us": t}})),
                ),
                (Change::Delete(deleted), Some(t)) => (
                    key_of(key, &deleted),
                    Some(
                        json!({"op": "d", "before": deleted, "after": null, "source": {"ts_us": t}}),
                    ),
                ),
            };
            let key = serde_json::to_vec(&key).expect("JSON");
            let payload = payload.map(|value| serde_json::to_vec(&value).expect("JSON"));
            // On the partition a producer hashing the key would write it to.
            let parsed = record_key::parse(&key).expect("a record key");
            let partition = expected_partition(partitioning, &parsed, self.partitions);
            let record = Record {
                partition,
                key: Some(&key),
                payload: payload.as_deref(),
                timestamp_ms: offset as i64,
                offset: offset as i64,
            };
            let stream_time = stream_times.entry(partition).or_default();
            let mut batch = store.batch();
            let applied = applier
                .apply(&shape, &mut batch, name, &layout, record, stream_time)
                .expect("the store writes");
            applied.expect("the suite's records apply");
            if let Some(t) = *stream_time {
                batch
                    .stream_time(name, partition, t)
                    .expect("the store writes");
                progress.set_stream_time(name, partition, t);
            }
            batch.commit().expect("the store commits");
        }
        *self.dir.lock().expect("dir lock") = Some(dir);
        Arc::new(LocalTable::new(
            table_config,
            self.partitions,
            store,
            progress,
            TablesMetrics::default(),
            shape,
        ))
    }
}

#[async_trait]
impl Fixture for Local {
    fn scans(&self) -> bool {
        true
    }

    async fn table(&self, name: &str, key: &[&str], changes: Vec<Change>) -> Arc<dyn Table> {
        let changes = changes.into_iter().map(|c| (None, c)).collect();
        self.build(name, key, changes, None).await
    }

    async fn versioned_table(
        &self,
        name: &str,
        key: &[&str],
        changes: Vec<(i64, Change)>,
        history_us: i64,
    ) -> Option<Arc<dyn Table>> {
        // A global table keeps no history.
        if self.mode == TableMode::Global {
            return None;
        }
        let changes = changes.into_iter().map(|(t, c)| (Some(t), c)).collect();
        Some(self.build(name, key, changes, Some(history_us)).await)
    }
}

/// A backend answering from a map of encoded keys to rows.
struct MapBackend(HashMap<Vec<u8>, Value>);

#[async_trait]
impl Backend for MapBackend {
    async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError> {
        keys.iter()
            .map(|key| {
                let encoded =
                    key_codec::encode(key).map_err(|e| BackendError::permanent(e.to_string()))?;
                Ok(self.0.get(&encoded).cloned())
            })
            .collect()
    }
}

/// Remote tables (cache, batching and all) over a [`MapBackend`].
struct Remote;

#[async_trait]
impl Fixture for Remote {
    fn scans(&self) -> bool {
        false
    }

    async fn table(&self, name: &str, key: &[&str], changes: Vec<Change>) -> Arc<dyn Table> {
        let config = TablesConfig::parse(&format!(
            "data_dir: /x\nkafka: {{ brokers: b }}\nremote:\n  - name: {name}\n    mysql: {{ url: 'mysql://u@h', table: d.t, key: {key:?} }}\n"
        ))
        .expect("a tables config");
        let mut rows = HashMap::new();
        for change in changes {
            let (key, row) = match change {
                Change::Upsert(row) => (key_of(key, &row), Some(row)),
                Change::Delete(deleted) => (key_of(key, &deleted), None),
            };
            let encoded = key_codec::encode(key.values()).expect("a key");
            match row {
                Some(row) => rows.insert(encoded, row),
                None => rows.remove(&encoded),
            };
        }
        let backend = Arc::new(MapBackend(rows));
        Arc::new(RemoteTable::new(
            &config.remote[0],
            backend,
            None,
            &TablesMetrics::default(),
        ))
    }
}

mod global_local_table {
    use super::*;
    tributary_table_api::table_conformance!(Local::global());
}

mod partitioned_local_table {
    use super::*;
    tributary_table_api::table_conformance!(Local::partitioned());
}

mod partitioned_local_table_without_rows_kept_for_joins {
    use super::*;
    tributary_table_api::table_conformance!(Local::partitioned_uncached());
}

mod remote_table {
    use super::*;
    tributary_table_api::table_conformance!(Remote);
}
