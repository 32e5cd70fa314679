//! [`LocalTable`]: a [`Table`] answered from the local RocksDB store.
//!
//! A `global` table answers every key from its one keyspace. A `partitioned`
//! table finds a key's partition as its producer did: the configured
//! partitioner over the key's bytes in the configured key format, written in
//! the shape its records have ([`record_key`](crate::record_key)).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption, Guard};

use async_trait::async_trait;
use serde_json::{Map, Value};
use tributary_proto::partition::Partitioner;
use tributary_table_api::key_values::{Expect, key_values};
use tributary_table_api::{
    AsOf, AsOfRead, Columns, KeyRange, LookupError, PartitionState, RawColumns, Table,
    TableDescription, key_codec,
};

use crate::config::{LocalTableConfig, TableMode};
use crate::error::TableError;
use crate::record_key::{self, KeyFormat, KeyShape};
use bytes::Bytes;
use prometheus_client::metrics::family::Family;
use tributary_metrics::{StripedCounter, StripedHistogram};

use crate::derived_rows::Rows;
use crate::global_rows;
use crate::history::{self, VersionRule};
use crate::history_readers::HistoryReaders;
use crate::metrics::{ResultLabel, TableLabel, TablesMetrics};
use crate::progress::Progress;
use crate::store::{Keyspace, ScanBounds, Store, history_cf_name};

/// Where a key's row is looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In the global keyspace: any instance holding the table answers.
    Anywhere,
    /// In this partition.
    Partition(i32),
}

/// A key of a table, located: its stored form and where it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    encoded: Vec<u8>,
    placement: Placement,
}

impl Located {
    /// Where the key lives.
    pub fn placement(&self) -> Placement {
        self.placement
    }
}

/// Locates keys of a table in the key shape it had when the locator was
/// made ([`LocalTable::locator`]): a batch's keys take the shape once.
pub struct Locator<'t> {
    table: &'t LocalTable,
    shape: Shape,
}

impl Locator<'_> {
    /// Where `key` lives and how it is stored. Whether this instance holds
    /// it is checked when it is read.
    pub fn locate(&self, key: &Value) -> Result<Located, LookupError> {
        let (table, shape) = (self.table, &self.shape);
        table.with_key_values(&shape.columns, key, Expect::Full, |values| {
            Ok(Located {
                encoded: table.encode(values)?,
                placement: table.placement_of(shape, values),
            })
        })
    }
}

/// How a table finds a key's partition: from the key's bytes in `format`,
/// hashed by `partitioner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Partitioning {
    /// The producer's partitioner.
    pub partitioner: Partitioner,
    /// How the producer serialises keys.
    pub format: KeyFormat,
}

impl Partitioning {
    /// The partitioning a table's config declares (defaults: murmur2, compact JSON).
    pub fn of(config: &LocalTableConfig) -> Self {
        Partitioning {
            partitioner: config.partitioner.unwrap_or_default(),
            format: config.key_format.unwrap_or_default(),
        }
    }

    /// The partition of the key with these values (in `shape.columns` order).
    pub fn partition<V: Borrow<Value>>(
        self,
        shape: &KeyShape,
        values: &[V],
        partitions: u32,
    ) -> i32 {
        self.partitioner
            .partition(&shape.bytes(values, self.format), partitions)
    }

    /// How a config names it.
    pub fn describe(self) -> String {
        format!(
            "partitioner: {}, key_format: {}",
            self.partitioner.name(),
            self.format.name()
        )
    }
}

/// How a table's keys are written: set by its materializer whenever the
/// records show a new shape, read by every lookup (without a lock: two
/// cores reading a lock's count in turn move its line between them).
pub type SharedShape = Arc<ArcSwapOption<KeyShape>>;

/// A table's key shape as one lookup reads it (an arc-swap guard: no lock,
/// and no reference count taken unless the thread holds many guards at once).
struct Shape(Guard<Option<Arc<KeyShape>>>);

impl std::ops::Deref for Shape {
    type Target = KeyShape;

    fn deref(&self) -> &KeyShape {
        self.0.as_deref().expect("only a set shape is handed out")
    }
}

/// The view of rows for joins holding them whole; the columns a join selects
/// are views 1 and up ([`LocalTable::view_of`]).
const WHOLE_ROW: u32 = 0;

/// Most selections of columns whose rows a table keeps for joins (one per
/// join of the table, usually): rows of others are read on every lookup.
const MAX_SELECTIONS: usize = 64;

/// A materialized table held (in whole or in part) by this instance.
pub struct LocalTable {
    name: String,
    topic: String,
    partition_count: u32,
    /// `None` for a global table.
    partitioning: Option<Partitioning>,
    store: Arc<Store>,
    progress: Arc<Progress>,
    get_seconds: StripedHistogram,
    /// Rows read through the store's encoded rows: found there, or not.
    encoded_hits: StripedCounter,
    encoded_misses: StripedCounter,
    /// Rows read through the store's rows for joins: found there, or not.
    join_hits: StripedCounter,
    join_misses: StripedCounter,
    /// The selections of columns asked for, in order: selection `i` is the
    /// view `i + 1` of the rows for joins.
    selections: ArcSwap<Vec<Box<[String]>>>,
    key_shape: SharedShape,
    /// Column family names of the row keyspaces (one per partition, or the
    /// global one), made once (not per lookup).
    cf_names: Vec<String>,
    /// A versioned table's rule and the readers of its partitions' histories.
    history: Option<(VersionRule, HistoryReaders)>,
}

impl LocalTable {
    /// A table over `store`, fed from its topic with `partition_count` partitions.
    pub fn new(
        config: &LocalTableConfig,
        partition_count: u32,
        store: Arc<Store>,
        progress: Arc<Progress>,
        metrics: TablesMetrics,
        key_shape: SharedShape,
    ) -> Self {
        let name = config.name.as_str();
        let (partitioning, cf_names) = match config.mode {
            TableMode::Global => (None, vec![Keyspace::Global.cf_name(name)]),
            TableMode::Partitioned => (
                Some(Partitioning::of(config)),
                (0..partition_count as i32)
                    .map(|p| Keyspace::Partition(p).cf_name(name))
                    .collect(),
            ),
        };
        let counter = |family: &Family<ResultLabel, StripedCounter>, result: &str| {
            family
                .get_or_create(&ResultLabel {
                    table: name.to_owned(),
                    result: result.to_owned(),
                })
                .clone()
        };
        let history = config.versioned.as_ref().map(|v| {
            let names = (0..partition_count as i32)
                .map(|p| history_cf_name(name, p))
                .collect();
            (
                VersionRule::of(v),
                HistoryReaders::new(store.clone(), names),
            )
        });
        LocalTable {
            name: name.to_owned(),
            topic: config.topic.clone(),
            partition_count,
            partitioning,
            store,
            progress,
            get_seconds: metrics
                .get_seconds
                .get_or_create(&TableLabel {
                    table: name.to_owned(),
                })
                .clone(),
            encoded_hits: counter(&metrics.grpc_row_cache, "hit"),
            encoded_misses: counter(&metrics.grpc_row_cache, "miss"),
            join_hits: counter(&metrics.join_row_cache, "hit"),
            join_misses: counter(&metrics.join_row_cache, "miss"),
            selections: ArcSwap::default(),
            key_shape,
            cf_names,
            history,
        }
    }

    /// How keys are written, once the first record has been materialized.
    fn key_shape(&self) -> Result<Option<Shape>, LookupError> {
        let shape = self.key_shape.load();
        if shape.is_some() {
            return Ok(Some(Shape(shape)));
        }
        let Some(stored) = self
            .store
            .key_shape(&self.name)
            .map_err(|e| self.storage(e))?
        else {
            return Ok(None);
        };
        // A shape the materializer set meanwhile wins over the stored one.
        let stored = Arc::new(stored);
        self.key_shape
            .rcu(|now| now.clone().or_else(|| Some(stored.clone())));
        Ok(Some(Shape(self.key_shape.load())))
    }

    fn bad_key(&self, problem: impl Into<String>) -> LookupError {
        LookupError::BadKey {
            table: self.name.clone(),
            problem: problem.into(),
        }
    }

    fn storage(&self, error: TableError) -> LookupError {
        LookupError::Storage {
            table: self.name.clone(),
            source: Box::new(error),
        }
    }

    fn corrupt(&self, problem: impl Into<String>) -> LookupError {
        LookupError::Corrupt {
            table: self.name.clone(),
            problem: problem.into(),
        }
    }

    /// Hands `with` the key's values in key order, normalised as record keys
    /// are ([`record_key::integer_in`]): as they are in `key` unless one of
    /// them is an integer written as a string (nothing is copied then).
    fn with_key_values<R>(
        &self,
        columns: &[String],
        key: &Value,
        expect: Expect,
        with: impl FnOnce(&[&Value]) -> Result<R, LookupError>,
    ) -> Result<R, LookupError> {
        let values = key_values(&self.name, columns, key, expect)?;
        if values.iter().all(|v| record_key::integer_in(v).is_none()) {
            return with(&values);
        }
        let normalised: Vec<Value> = values
            .iter()
            .map(|&v| record_key::integer_in(v).unwrap_or_else(|| v.clone()))
            .collect();
        with(&normalised.iter().collect::<Vec<_>>())
    }

    /// The encoding of the key (or prefix) with these values.
    fn encode(&self, values: &[&Value]) -> Result<Vec<u8>, LookupError> {
        key_codec::encode(values.iter().copied()).map_err(|e| self.bad_key(e.to_string()))
    }

    /// Where the key with these values lives.
    fn placement_of(&self, shape: &KeyShape, values: &[&Value]) -> Placement {
        match self.partitioning {
            None => Placement::Anywhere,
            Some(partitioning) => {
                Placement::Partition(partitioning.partition(shape, values, self.partition_count))
            }
        }
    }

    /// Where `key` lives and how it is stored (`None` until the first record
    /// has been materialized, when the key columns are not known yet). Whether
    /// this instance holds it is checked when it is read.
    pub fn locate(&self, key: &Value) -> Result<Option<Located>, LookupError> {
        self.locator()?
            .map(|locator| locator.locate(key))
            .transpose()
    }

    /// A locator of this table's keys, for many keys with the key shape
    /// read once (`None` until the first record has been materialized).
    pub fn locator(&self) -> Result<Option<Locator<'_>>, LookupError> {
        Ok(self
            .key_shape()?
            .map(|shape| Locator { table: self, shape }))
    }

    /// The keyspace a located key is read from: refused when its partition
    /// is held elsewhere.
    fn keyspace_of(&self, located: &Located) -> Result<usize, LookupError> {
        self.keyspace_where(located, |p| self.progress.holds(&self.name, p))
    }

    /// The keyspaces located keys are read from, with one look at which
    /// partitions are held for all of them.
    fn keyspaces_of(&self, keys: &[&Located]) -> Result<Vec<usize>, LookupError> {
        let held = self.held_partitions();
        keys.iter()
            .map(|key| self.keyspace_where(key, |p| held.binary_search(&p).is_ok()))
            .collect()
    }

    /// The partitions of this table held here, in order, with one look at
    /// the progress (none for a global table, whose keys need none).
    pub fn held_partitions(&self) -> Vec<i32> {
        if self.is_global() {
            Vec::new()
        } else {
            self.progress.held_partitions(&self.name)
        }
    }

    /// The keyspace of a located key, where `holds` says which partitions
    /// are held here.
    fn keyspace_where(
        &self,
        located: &Located,
        holds: impl FnOnce(i32) -> bool,
    ) -> Result<usize, LookupError> {
        match located.placement {
            Placement::Anywhere => Ok(0),
            Placement::Partition(partition) if holds(partition) => Ok(partition as usize),
            Placement::Partition(partition) => Err(LookupError::NotOwned {
                table: self.name.clone(),
                partition,
            }),
        }
    }

    /// Looks `key` up and hands the stored row (its JSON bytes, in place) to
    /// `read`, timing the lookup.
    pub fn read_row<R>(
        &self,
        key: &Value,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, LookupError> {
        match self.locate(key)? {
            Some(located) => self.read_located(&located, read),
            None => Ok(None),
        }
    }

    /// Reads a located key's row, handing it (its JSON bytes, in place) to
    /// `read`, timing the lookup.
    pub fn read_located<R>(
        &self,
        key: &Located,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, LookupError> {
        let started = Instant::now();
        let row = self.read_one(key, read)?;
        self.get_seconds.observe(started.elapsed().as_secs_f64());
        Ok(row)
    }

    /// [`Self::read_located`], untimed.
    fn read_one<R>(
        &self,
        key: &Located,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, LookupError> {
        self.read_in(self.keyspace_of(key)?, key, read)
    }

    /// Reads a located key's row from `keyspace` (where it lives, held
    /// here), handing it to `read`.
    fn read_in<R>(
        &self,
        keyspace: usize,
        key: &Located,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, LookupError> {
        self.store
            .get_with(&self.cf_names[keyspace], &key.encoded, |value| {
                self.stored_row(value, read)
            })
            .map_err(|e| self.storage(e))?
            .transpose()
    }

    /// The rows of a scan in key order, at most `limit`: each key as an
    /// object of the key columns, each row as its stored JSON bytes (for
    /// callers that pass rows on without a JSON tree, such as the lookup API).
    pub fn scan_stored(
        &self,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<(Value, Vec<u8>)>, LookupError> {
        let Some(shape) = self.key_shape()? else {
            return Ok(Vec::new());
        };
        let columns = &shape.columns;
        let encode = |bound: &Value| {
            self.with_key_values(columns, bound, Expect::Prefix, |v| self.encode(v))
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
        let keyspaces: Vec<Keyspace> = if self.is_global() {
            vec![Keyspace::Global]
        } else {
            self.progress
                .of_table(&self.name)
                .into_iter()
                .map(|(p, _)| Keyspace::Partition(p))
                .collect()
        };
        let mut rows = Vec::new();
        for keyspace in keyspaces {
            let found = self.store.scan(&self.name, keyspace, &bounds, limit);
            rows.extend(found.map_err(|e| self.storage(e))?);
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows.truncate(limit);
        rows.into_iter()
            .map(|(key, raw)| {
                let key_values =
                    key_codec::decode(&key).map_err(|e| self.corrupt(e.to_string()))?;
                let key: Map<String, Value> = columns.iter().cloned().zip(key_values).collect();
                Ok((Value::Object(key), raw))
            })
            .collect()
    }

    /// Reads the rows of located keys (in the order given, misses as `None`)
    /// with one batched RocksDB read per keyspace, handing each stored row
    /// (its JSON bytes, in place) to `read`: for callers that pass rows on
    /// without a JSON tree (the lookup API, through [`Self::read_derived`],
    /// when the store keeps no derived rows). Timed as one lookup.
    pub fn read_rows<R>(
        &self,
        keys: &[&Located],
        read: impl FnMut(&[u8]) -> R,
    ) -> Result<Vec<Option<R>>, LookupError> {
        let started = Instant::now();
        let rows = self.read_stored(keys, read)?;
        self.get_seconds.observe(started.elapsed().as_secs_f64());
        Ok(rows)
    }

    /// Reads the rows of located keys (in the order given, misses as `None`)
    /// in the form `derive` makes from their stored JSON bytes (the lookup
    /// API's encoding), from the store's derived rows where they are kept
    /// there, keeping there what is made. Timed as one lookup.
    pub fn read_derived(
        &self,
        keys: &[&Located],
        mut derive: impl FnMut(&[u8]) -> Result<Bytes, LookupError>,
    ) -> Result<Vec<Option<Bytes>>, LookupError> {
        let Some(derived) = self.store.derived_rows().and_then(|d| d.encoded()) else {
            let rows = self.read_rows(keys, derive)?;
            return rows.into_iter().map(Option::transpose).collect();
        };
        let started = Instant::now();
        let mut rows = Vec::with_capacity(keys.len());
        let mut missed = Vec::new();
        for (i, (key, keyspace)) in keys.iter().zip(self.keyspaces_of(keys)?).enumerate() {
            let cf = &self.cf_names[keyspace];
            let row = derived.get(cf, &key.encoded);
            if row.is_none() {
                missed.push((i, cf, derived.start(&key.encoded)));
            }
            rows.push(row);
        }
        self.encoded_hits.inc_by((keys.len() - missed.len()) as u64);
        self.encoded_misses.inc_by(missed.len() as u64);
        if !missed.is_empty() {
            let missed_keys: Vec<&Located> = missed.iter().map(|(i, ..)| keys[*i]).collect();
            let read = self.read_stored(&missed_keys, &mut derive)?;
            for ((i, cf, start), row) in missed.into_iter().zip(read) {
                let row = row.transpose()?;
                if let (Some(row), Some(start)) = (&row, start) {
                    let row = Bytes::copy_from_slice(row);
                    derived.keep(cf, &keys[i].encoded, start, row);
                }
                rows[i] = row;
            }
        }
        self.get_seconds.observe(started.elapsed().as_secs_f64());
        Ok(rows)
    }

    /// [`Self::read_rows`], untimed.
    fn read_stored<R>(
        &self,
        keys: &[&Located],
        mut read: impl FnMut(&[u8]) -> R,
    ) -> Result<Vec<Option<R>>, LookupError> {
        if let [key] = keys {
            return Ok(vec![self.read_one(key, read)?]);
        }
        let mut by_keyspace: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, keyspace) in self.keyspaces_of(keys)?.into_iter().enumerate() {
            by_keyspace.entry(keyspace).or_default().push(i);
        }
        let mut rows: Vec<Option<R>> = std::iter::repeat_with(|| None).take(keys.len()).collect();
        for (keyspace, indices) in by_keyspace {
            let encoded: Vec<&[u8]> = indices.iter().map(|&i| &keys[i].encoded[..]).collect();
            let found = self
                .store
                .multi_get_with(&self.cf_names[keyspace], &encoded, |value| {
                    self.stored_row(value, &mut read)
                })
                .map_err(|e| self.storage(e))?;
            for (i, row) in indices.into_iter().zip(found) {
                rows[i] = row.transpose()?;
            }
        }
        Ok(rows)
    }

    /// The store's rows for joins in the view of `columns` (the whole row
    /// when `None`), if the store keeps them and the view is numbered.
    fn joined_rows(&self, columns: Option<&[String]>) -> Option<Rows<'_, Columns>> {
        let derived = self.store.derived_rows()?;
        let whole = derived.joined(WHOLE_ROW)?;
        match columns {
            None => Some(whole),
            Some(columns) => derived.joined(self.view_of(columns)?),
        }
    }

    /// The view of rows for joins holding the columns `columns` selects,
    /// numbered as first asked for (`None` past [`MAX_SELECTIONS`]).
    fn view_of(&self, columns: &[String]) -> Option<u32> {
        let find = |selections: &[Box<[String]>]| selections.iter().position(|s| **s == *columns);
        let index = match find(&self.selections.load()) {
            Some(index) => index,
            None => {
                // Numbered once, whichever lookup asks first.
                let mut index = None;
                self.selections.rcu(|now| {
                    index = find(now);
                    if index.is_some() || now.len() == MAX_SELECTIONS {
                        return now.clone();
                    }
                    let mut more = Vec::clone(now);
                    more.push(columns.into());
                    index = Some(more.len() - 1);
                    Arc::new(more)
                });
                index?
            }
        };
        Some(index as u32 + 1)
    }

    /// The row for joins of a located key in `rows`' view: kept there, or
    /// read, made by `decode` from its stored JSON bytes and kept. Timed as
    /// one lookup.
    fn read_joined(
        &self,
        key: &Located,
        rows: Rows<'_, Columns>,
        decode: impl FnOnce(&[u8]) -> Result<Columns, LookupError>,
    ) -> Result<Option<Columns>, LookupError> {
        let started = Instant::now();
        let keyspace = self.keyspace_of(key)?;
        let cf = &self.cf_names[keyspace];
        let row = match rows.get(cf, &key.encoded) {
            Some(row) => {
                self.join_hits.inc();
                Some(row)
            }
            None => {
                self.join_misses.inc();
                let start = rows.start(&key.encoded);
                let row = self.read_in(keyspace, key, decode)?.transpose()?;
                if let (Some(row), Some(start)) = (&row, start) {
                    rows.keep(cf, &key.encoded, start, row.clone());
                }
                row
            }
        };
        self.get_seconds.observe(started.elapsed().as_secs_f64());
        Ok(row)
    }

    /// The texts of `columns` in a stored row, in that order (none for a
    /// column it lacks, nor for any when the row is not an object).
    fn select(&self, raw: &[u8], columns: &[String]) -> Result<Columns, LookupError> {
        let selected = match RawColumns::select(raw, columns) {
            Ok(selected) => selected,
            // Not an object (no columns), or the reason it is not JSON.
            Err(_) => self
                .parse_row(raw)
                .map(|_| RawColumns::absent(columns.len()))?,
        };
        Ok(Columns::Raw(Arc::new(selected)))
    }

    /// Hands a stored value's row to `read`: a global table's values carry a
    /// header before the row.
    fn stored_row<R>(&self, value: &[u8], read: impl FnOnce(&[u8]) -> R) -> Result<R, LookupError> {
        if self.is_global() {
            let (_, row) = global_rows::decode(value)
                .ok_or_else(|| self.corrupt("a global row without its header"))?;
            Ok(read(row))
        } else {
            Ok(read(value))
        }
    }

    /// The version of `key` valid at `as_of` (µs since the epoch), as its
    /// stored JSON bytes, of a versioned table.
    pub fn get_json_bytes_as_of(
        &self,
        key: &Value,
        as_of: i64,
    ) -> Result<AsOfRead<Vec<u8>>, LookupError> {
        let Some((rule, readers)) = &self.history else {
            return Err(LookupError::Unsupported {
                table: self.name.clone(),
                operation: "an as-of lookup (the table keeps no history: declare it `versioned`)",
            });
        };
        let Some(located) = self.locate(key)? else {
            return Ok(AsOfRead {
                answer: AsOf::Absent,
                complete_until: self.complete_until_first_version(),
            });
        };
        let Placement::Partition(partition) = located.placement else {
            return Err(self.corrupt("a versioned table without partitions"));
        };
        self.keyspace_of(&located)?;
        let held = self.progress.held_versions(&self.name, partition);
        let read = |answer| AsOfRead {
            answer,
            complete_until: held.map_or(i64::MIN, |h| h.complete_until),
        };
        if let Some(horizon) = rule.horizon(held.and_then(|h| h.stream_time))
            && as_of < horizon
        {
            return Ok(read(AsOf::BeyondHistory { horizon }));
        }
        let found = readers
            .version_at(partition as usize, &located.encoded, as_of, |v| {
                history::decode_version(v).map(|row| row.map(<[u8]>::to_vec))
            })
            .map_err(|e| self.storage(e))?;
        match found {
            None | Some(Ok(None)) => Ok(read(AsOf::Absent)),
            Some(Ok(Some(row))) => Ok(read(AsOf::Row(row))),
            Some(Err(e)) => Err(self.corrupt(e.to_string())),
        }
    }

    /// Before the table's first record (no key shape yet): complete only as
    /// far as every held partition is.
    fn complete_until_first_version(&self) -> i64 {
        self.progress
            .of_table(&self.name)
            .iter()
            .filter_map(|(p, _)| self.progress.held_versions(&self.name, *p))
            .map(|h| h.complete_until)
            .min()
            .unwrap_or(i64::MIN)
    }

    /// The row of `key` as its stored JSON bytes, without decoding it (for callers
    /// that pass JSON on, such as the lookup API).
    pub fn get_json_bytes(&self, key: &Value) -> Result<Option<Vec<u8>>, LookupError> {
        self.read_row(key, <[u8]>::to_vec)
    }

    /// Partitions of the table's topic.
    pub fn partition_count(&self) -> u32 {
        self.partition_count
    }

    /// Whether every instance holds every row (a `global` table).
    pub fn is_global(&self) -> bool {
        self.partitioning.is_none()
    }

    /// The bytes `key` sorts by in scans (to merge scans of several instances).
    pub fn sort_key(&self, key: &Value) -> Result<Vec<u8>, LookupError> {
        let Some(shape) = self.key_shape()? else {
            return Ok(Vec::new());
        };
        self.with_key_values(&shape.columns, key, Expect::Full, |v| self.encode(v))
    }

    fn parse_row(&self, raw: &[u8]) -> Result<Value, LookupError> {
        serde_json::from_slice(raw).map_err(|e| self.corrupt(e.to_string()))
    }
}

#[async_trait]
impl Table for LocalTable {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &Value) -> Result<Option<Value>, LookupError> {
        self.read_row(key, |raw| self.parse_row(raw))?.transpose()
    }

    async fn multi_get(&self, keys: &[Value]) -> Result<Vec<Option<Value>>, LookupError> {
        let Some(locator) = self.locator()? else {
            return Ok(vec![None; keys.len()]); // nothing materialized yet
        };
        let located = keys
            .iter()
            .map(|key| locator.locate(key))
            .collect::<Result<Vec<_>, _>>()?;
        let located: Vec<&Located> = located.iter().collect();
        self.read_rows(&located, |raw| self.parse_row(raw))?
            .into_iter()
            .map(Option::transpose)
            .collect()
    }

    async fn get_as_of(&self, key: &Value, as_of: i64) -> Result<AsOfRead, LookupError> {
        let read = self.get_json_bytes_as_of(key, as_of)?;
        Ok(AsOfRead {
            answer: match read.answer {
                AsOf::Row(raw) => AsOf::Row(self.parse_row(&raw)?),
                AsOf::Absent => AsOf::Absent,
                AsOf::BeyondHistory { horizon } => AsOf::BeyondHistory { horizon },
            },
            complete_until: read.complete_until,
        })
    }

    /// Whole, from the store's rows for joins when it keeps them.
    async fn get_shared(&self, key: &Value) -> Result<Option<Arc<Value>>, LookupError> {
        let Some(rows) = self.joined_rows(None) else {
            return Ok(self.get(key).await?.map(Arc::new));
        };
        let Some(located) = self.locate(key)? else {
            return Ok(None);
        };
        let whole = |raw: &[u8]| Ok(Columns::Shared(Arc::new(self.parse_row(raw)?)));
        let row = self.read_joined(&located, rows, whole)?;
        Ok(row.map(|row| match row {
            Columns::Shared(row) => row,
            Columns::Raw(_) => unreachable!("the whole-row view keeps whole rows"),
        }))
    }

    /// The selected columns' text, taken from the stored row (the other
    /// columns skipped): from the store's rows for joins when it keeps them.
    async fn get_columns(
        &self,
        key: &Value,
        columns: &[String],
    ) -> Result<Option<Columns>, LookupError> {
        let Some(located) = self.locate(key)? else {
            return Ok(None);
        };
        let select = |raw: &[u8]| self.select(raw, columns);
        match self.joined_rows(Some(columns)) {
            Some(rows) => self.read_joined(&located, rows, select),
            None => self.read_located(&located, select)?.transpose(),
        }
    }

    async fn scan(
        &self,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<(Value, Value)>, LookupError> {
        self.scan_stored(range, limit)?
            .into_iter()
            .map(|(key, raw)| Ok((key, self.parse_row(&raw)?)))
            .collect()
    }

    async fn describe(&self) -> TableDescription {
        let partitions: Vec<PartitionState> = self
            .progress
            .of_table(&self.name)
            .into_iter()
            .map(|(partition, p)| PartitionState {
                partition,
                next_offset: p.next_offset,
                end_at_assignment: p.end_at_assignment,
                ready: p.ready,
                rows_estimate: if self.is_global() {
                    0
                } else {
                    self.store
                        .estimate_rows(&self.name, Keyspace::Partition(partition))
                },
                misplaced_records: p.misplaced,
                lag: p.lag(),
                latest_end: p.latest_end.or(p.end_at_assignment),
                applied_gtids: p.log.gtids.to_strings(),
                applied_lsn: p.log.wal.lsn().map(|lsn| lsn.to_string()),
            })
            .collect();
        TableDescription {
            name: self.name.clone(),
            kind: "local",
            topic: self.topic.clone(),
            key_columns: self
                .key_shape()
                .ok()
                .flatten()
                .map(|shape| shape.columns.clone())
                .unwrap_or_default(),
            partition_count: self.partition_count,
            global: self.is_global(),
            rows_estimate: if self.is_global() {
                self.store.estimate_rows(&self.name, Keyspace::Global)
            } else {
                partitions.iter().map(|p| p.rows_estimate).sum()
            },
            partitions,
        }
    }
}
