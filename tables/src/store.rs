//! The RocksDB store behind local tables.
//!
//! One database per instance; one column family per (table, partition), named
//! `<table>@<partition>`, so a partition can be dropped or handed over on its
//! own. Rows live under their [`key_codec`](tributary_table_api::key_codec) key; metadata
//! under keys starting with `00`: the offset of the last applied record, the
//! newest source GTIDs applied and how the table's keys are written. The
//! offset is written in the same `WriteBatch` as the rows it covers, so a crash
//! never leaves data and offset out of step.
//!
//! A `versioned` table keeps its earlier versions in one more column family
//! per partition, `<table>@<partition>~history` ([`history`](crate::history)),
//! and its partition's stream time under a meta key.
//!
//! A `global` table keeps its rows in one more column family, `<table>@global`,
//! whatever partition they arrived on, each with the partition that owns it
//! ([`global_rows`](crate::global_rows)); its partitions' column families then
//! hold only their metadata.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Mutex;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, DBWithThreadMode, IteratorMode, MultiThreaded,
    Options, ReadOptions, WriteBatch,
};

use tributary_proto::gtid::AppliedGtids;

use crate::applied_log::AppliedLog;
use crate::config::{Compression, RocksDbConfig};
use crate::derived_rows::DerivedRows;
use crate::error::TableError;
use crate::global_rows::{self, Owner};
use crate::history::{self, STREAM_TIME_KEY, Stamp};
use crate::record_key::KeyShape;

type Db = DBWithThreadMode<MultiThreaded>;

/// Meta key: offset of the last applied record of the partition (i64, big-endian).
const OFFSET_KEY: &[u8] = b"\x00offset";
/// Meta key: how the table's keys are written ([`KeyShape`] as JSON; an earlier
/// version stored the column names alone, as a JSON array).
const KEY_SHAPE_KEY: &[u8] = b"\x00key_columns";
/// Meta key: the newest source GTID applied per domain (JSON array of strings).
const GTIDS_KEY: &[u8] = b"\x00gtids";
/// Meta key: how far the partition has applied a PostgreSQL source (JSON).
const WAL_KEY: &[u8] = b"\x00wal";

/// The database of one instance.
pub struct Store {
    db: Db,
    cf_options: Options,
    /// Memtable size of one column family, in bytes.
    write_buffer_bytes: usize,
    /// The block cache and the row cache, if any (counted as memory in use).
    caches: Vec<Cache>,
    /// Options of point reads, made once (creating them allocates on every get otherwise).
    point_reads: ReadOptions,
    partitions: Mutex<BTreeMap<String, BTreeSet<i32>>>,
    /// Rows in the lookup API's encoding and for jobs' joins, if kept
    /// ([`Self::with_derived_rows`]): every batch names its keys to them.
    derived: Option<DerivedRows>,
}

/// A reader of one history column family's versions, kept for many reads
/// ([`Store::version_reader`]): a read refreshes it, which costs little
/// unless a flush or a compaction changed the column family's files since
/// its last read, where creating an iterator for each read builds one over
/// every file. Between reads it holds the files it last read from (a
/// compaction's inputs stay on disk until its next read or its drop).
pub struct VersionReader<'a>(rocksdb::DBRawIteratorWithThreadMode<'a, Db>);

impl VersionReader<'_> {
    /// [`Store::version_at`] through this reader, as of now.
    pub fn version_at<R>(
        &mut self,
        key: &[u8],
        as_of: i64,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, TableError> {
        self.0.refresh()?;
        seek_version(&mut self.0, key, as_of, read)
    }
}

/// One seek of `versions` to the version of `key` valid at `as_of`.
fn seek_version<R>(
    versions: &mut rocksdb::DBRawIteratorWithThreadMode<'_, Db>,
    key: &[u8],
    as_of: i64,
    read: impl FnOnce(&[u8]) -> R,
) -> Result<Option<R>, TableError> {
    versions.seek(history::seek_key(key, as_of));
    match (versions.key(), versions.value()) {
        (Some(stored), Some(value)) if history::version_of(stored, key).is_some() => {
            Ok(Some(read(value)))
        }
        _ => {
            versions.status()?;
            Ok(None)
        }
    }
}

/// Where a table's rows are: in a partition's column family, or in the one
/// keyspace of a global table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Keyspace {
    /// The rows of one partition (a `partitioned` table).
    Partition(i32),
    /// Every row of a `global` table.
    Global,
}

impl Keyspace {
    /// Name of the column family holding these rows of `table`.
    pub fn cf_name(self, table: &str) -> String {
        match self {
            Keyspace::Partition(p) => cf_name(table, p),
            Keyspace::Global => format!("{table}@{GLOBAL}"),
        }
    }
}

const GLOBAL: &str = "global";

/// Which encoded keys a scan visits: those starting with `prefix`, from `from`
/// (inclusive) up to `to` (exclusive).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanBounds {
    /// Every visited key starts with these bytes (empty: any).
    pub prefix: Vec<u8>,
    /// First key visited (empty: the first row).
    pub from: Vec<u8>,
    /// First key not visited (`None`: no end).
    pub to: Option<Vec<u8>>,
}

/// An encoded key and its stored row bytes.
pub type StoredRow = (Vec<u8>, Vec<u8>);

/// Name of the column family of a table partition.
pub fn cf_name(table: &str, partition: i32) -> String {
    format!("{table}@{partition}")
}

/// Name of the column family of a versioned table partition's history.
pub fn history_cf_name(table: &str, partition: i32) -> String {
    format!("{table}@{partition}{HISTORY_SUFFIX}")
}

const HISTORY_SUFFIX: &str = "~history";

/// Key (in the default column family) of how a versioned table dates its versions.
fn dating_key(table: &str) -> Vec<u8> {
    format!("dating/{table}").into_bytes()
}

fn parse_cf_name(name: &str) -> Option<(String, Keyspace)> {
    let (table, rest) = name.rsplit_once('@')?;
    let keyspace = match rest {
        GLOBAL => Keyspace::Global,
        partition => Keyspace::Partition(partition.parse().ok()?),
    };
    Some((table.to_owned(), keyspace))
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path, config: &RocksDbConfig) -> Result<Self, TableError> {
        // HyperClockCache: lock-free lookups (the LRU cache's shard mutex showed in profiles).
        // 0 = let RocksDB size its table from the blocks it sees.
        let cache = Cache::new_hyper_clock_cache(config.block_cache_mb << 20, 0);
        let mut table_options = BlockBasedOptions::default();
        table_options.set_block_cache(&cache);
        if config.bloom_filter_bits > 0.0 {
            table_options.set_bloom_filter(config.bloom_filter_bits, false);
        }
        // Point lookups: a hash index inside data blocks, and index/filter blocks held by
        // the table readers rather than fetched from the block cache on every get.
        table_options.set_data_block_index_type(rocksdb::DataBlockIndexType::BinaryAndHash);
        table_options.set_data_block_hash_ratio(0.75);
        // Fewer entries to decode after a data block's restart point (default 16).
        table_options.set_block_restart_interval(4);
        let mut cf_options = Options::default();
        cf_options.set_block_based_table_factory(&table_options);
        cf_options.set_write_buffer_size(config.write_buffer_mb << 20);
        cf_options.set_compression_type(match config.compression {
            Compression::None => DBCompressionType::None,
            Compression::Lz4 => DBCompressionType::Lz4,
            Compression::Zstd => DBCompressionType::Zstd,
        });
        let mut db_options = cf_options.clone();
        // An LRU cache: the HyperClockCache takes only fixed-size (block) keys.
        let row_cache =
            (config.row_cache_mb > 0).then(|| Cache::new_lru_cache(config.row_cache_mb << 20));
        if let Some(row_cache) = &row_cache {
            db_options.set_row_cache(row_cache);
        }
        db_options.create_if_missing(true);
        db_options.create_missing_column_families(true);
        let existing = Db::list_cf(&db_options, dir).unwrap_or_else(|_| vec!["default".into()]);
        let db = Db::open_cf_with_opts(
            &db_options,
            dir,
            existing.iter().map(|n| (n.as_str(), cf_options.clone())),
        )?;
        let caches = std::iter::once(cache).chain(row_cache).collect();
        let mut store = Self::with_db(db, cf_options, caches, &existing);
        store.write_buffer_bytes = config.write_buffer_mb << 20;
        Ok(store)
    }

    /// Opens an existing store read-only (inspection while nothing writes, or alongside a writer).
    pub fn open_read_only(dir: &Path) -> Result<Self, TableError> {
        let options = Options::default();
        let existing = Db::list_cf(&options, dir)?;
        let db = Db::open_cf_for_read_only(&options, dir, &existing, false)?;
        Ok(Self::with_db(db, options, Vec::new(), &existing))
    }

    fn with_db(db: Db, cf_options: Options, caches: Vec<Cache>, cfs: &[String]) -> Self {
        let mut partitions: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        for (table, keyspace) in cfs.iter().filter_map(|n| parse_cf_name(n)) {
            if let Keyspace::Partition(partition) = keyspace {
                partitions.entry(table).or_default().insert(partition);
            }
        }
        Store {
            db,
            cf_options,
            write_buffer_bytes: 0,
            caches,
            point_reads: ReadOptions::default(),
            partitions: Mutex::new(partitions),
            derived: None,
        }
    }

    /// Keeps up to `encoded_bytes` of rows in the lookup API's encoding and
    /// `joined_bytes` of rows for jobs' joins (see [`DerivedRows`]); 0
    /// keeps none of that form.
    pub fn with_derived_rows(mut self, encoded_bytes: u64, joined_bytes: u64) -> Self {
        self.derived = DerivedRows::new(encoded_bytes, joined_bytes);
        self
    }

    /// The caches of derived rows, if any form is kept.
    pub fn derived_rows(&self) -> Option<&DerivedRows> {
        self.derived.as_ref()
    }

    /// Creates the column family of a partition if it does not exist.
    pub fn ensure_partition(&self, table: &str, partition: i32) -> Result<(), TableError> {
        let name = cf_name(table, partition);
        if self.db.cf_handle(&name).is_none() {
            self.db.create_cf(&name, &self.cf_options)?;
        }
        self.partitions
            .lock()
            .expect("partition map lock")
            .entry(table.to_owned())
            .or_default()
            .insert(partition);
        Ok(())
    }

    /// Whether `table` has a global keyspace here.
    pub fn has_global(&self, table: &str) -> bool {
        self.db
            .cf_handle(&Keyspace::Global.cf_name(table))
            .is_some()
    }

    /// Creates the global keyspace of `table`, fed by `partitions` partitions,
    /// if it does not exist. Its memtable gets the room of that many partitions
    /// (what the rows had when stored per partition), so it is flushed as
    /// rarely and lookups search as few table files.
    pub fn ensure_global(&self, table: &str, partitions: u32) -> Result<(), TableError> {
        let name = Keyspace::Global.cf_name(table);
        if self.db.cf_handle(&name).is_none() {
            self.db.create_cf(&name, &self.cf_options)?;
        }
        if self.write_buffer_bytes > 0 {
            let cf = self.db.cf_handle(&name).expect("just ensured");
            let bytes = self.write_buffer_bytes * partitions.max(1) as usize;
            self.db
                .set_options_cf(&cf, &[("write_buffer_size", &bytes.to_string())])?;
        }
        Ok(())
    }

    /// Removes every row, version and position of `table`, so it is rebuilt from its topic.
    pub fn drop_table(&self, table: &str) -> Result<(), TableError> {
        let partitions = self
            .partitions
            .lock()
            .expect("partition map lock")
            .remove(table)
            .unwrap_or_default();
        let names: Vec<String> = partitions
            .iter()
            .flat_map(|p| [cf_name(table, *p), history_cf_name(table, *p)])
            .chain(std::iter::once(Keyspace::Global.cf_name(table)))
            .filter(|name| self.db.cf_handle(name).is_some())
            .collect();
        let drop = || -> Result<(), TableError> {
            for name in &names {
                self.db.drop_cf(name)?;
            }
            Ok(())
        };
        match &self.derived {
            Some(derived) => derived.clear(drop)?,
            None => drop()?,
        }
        self.db.delete(dating_key(table))?;
        Ok(())
    }

    /// Removes a table's history (it is no longer versioned).
    pub fn drop_history(&self, table: &str) -> Result<(), TableError> {
        for partition in self.partitions(table) {
            let name = history_cf_name(table, partition);
            if self.db.cf_handle(&name).is_some() {
                self.db.drop_cf(&name)?;
            }
        }
        self.db.delete(dating_key(table))?;
        Ok(())
    }

    /// How the table's versions are dated, as recorded ([`Self::record_dating`]).
    pub fn dating(&self, table: &str) -> Result<Option<String>, TableError> {
        let raw = self.db.get_pinned(dating_key(table))?;
        Ok(raw.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Records how the table's versions are dated (a versioned table's history
    /// is rebuilt when that changes).
    pub fn record_dating(&self, table: &str, dating: &str) -> Result<(), TableError> {
        self.db.put(dating_key(table), dating)?;
        Ok(())
    }

    /// Partitions of `table` present in this store.
    pub fn partitions(&self, table: &str) -> Vec<i32> {
        self.partitions
            .lock()
            .expect("partition map lock")
            .get(table)
            .map(|p| p.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Every column family of a table keyspace in the store.
    fn all_cfs(&self) -> Vec<std::sync::Arc<rocksdb::BoundColumnFamily<'_>>> {
        let names: Vec<String> = {
            let partitions = self.partitions.lock().expect("partition map lock");
            partitions
                .iter()
                .flat_map(|(t, ps)| {
                    ps.iter()
                        .flat_map(move |p| [cf_name(t, *p), history_cf_name(t, *p)])
                        .chain(std::iter::once(Keyspace::Global.cf_name(t)))
                })
                .collect()
        };
        names.iter().filter_map(|n| self.db.cf_handle(n)).collect()
    }

    fn cf(
        &self,
        table: &str,
        partition: i32,
    ) -> Option<std::sync::Arc<rocksdb::BoundColumnFamily<'_>>> {
        self.db.cf_handle(&cf_name(table, partition))
    }

    /// Offset of the last record applied to a partition, if any.
    pub fn stored_offset(&self, table: &str, partition: i32) -> Result<Option<i64>, TableError> {
        let Some(cf) = self.cf(table, partition) else {
            return Ok(None);
        };
        let raw = self.db.get_pinned_cf(&cf, OFFSET_KEY)?;
        Ok(raw
            .and_then(|b| <[u8; 8]>::try_from(&b[..]).ok())
            .map(i64::from_be_bytes))
    }

    /// How far a partition has applied its source's log (empty if nothing recorded).
    pub fn stored_log(&self, table: &str, partition: i32) -> Result<AppliedLog, TableError> {
        let corrupt = |what: &str, problem: String| TableError::Corrupt {
            table: table.to_owned(),
            problem: format!("stored {what}: {problem}"),
        };
        let mut log = AppliedLog::default();
        let Some(cf) = self.cf(table, partition) else {
            return Ok(log);
        };
        if let Some(raw) = self.db.get_pinned_cf(&cf, GTIDS_KEY)? {
            let texts: Vec<String> =
                serde_json::from_slice(&raw).map_err(|e| corrupt("GTIDs", e.to_string()))?;
            log.gtids =
                AppliedGtids::from_strings(&texts).map_err(|e| corrupt("GTIDs", e.to_string()))?;
        }
        if let Some(raw) = self.db.get_pinned_cf(&cf, WAL_KEY)? {
            log.wal =
                serde_json::from_slice(&raw).map_err(|e| corrupt("WAL progress", e.to_string()))?;
        }
        Ok(log)
    }

    /// The stream time of a versioned table's partition (µs), if it applied any version.
    pub fn stored_stream_time(
        &self,
        table: &str,
        partition: i32,
    ) -> Result<Option<i64>, TableError> {
        let Some(cf) = self.cf(table, partition) else {
            return Ok(None);
        };
        let raw = self.db.get_pinned_cf(&cf, STREAM_TIME_KEY)?;
        Ok(raw
            .and_then(|b| <[u8; 8]>::try_from(&b[..]).ok())
            .map(i64::from_be_bytes))
    }

    /// Reads in place the stored version of `key` valid at `as_of` (µs), in
    /// the history column family named `cf` (see [`history_cf_name`]); `None`
    /// when the key has no version that old. One seek.
    pub fn version_at<R>(
        &self,
        cf: &str,
        key: &[u8],
        as_of: i64,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, TableError> {
        let Some(cf) = self.db.cf_handle(cf) else {
            return Ok(None);
        };
        seek_version(&mut self.db.raw_iterator_cf(&cf), key, as_of, read)
    }

    /// A reader of the versions in the history column family `cf`, to keep
    /// for many reads (`None` until the column family exists).
    pub fn version_reader(&self, cf: &str) -> Option<VersionReader<'_>> {
        let cf = self.db.cf_handle(cf)?;
        Some(VersionReader(self.db.raw_iterator_cf(&cf)))
    }

    /// Bytes of a table's history on disk (its history column families' table files).
    pub fn history_bytes(&self, table: &str) -> u64 {
        self.partitions(table)
            .into_iter()
            .filter_map(|p| self.db.cf_handle(&history_cf_name(table, p)))
            .filter_map(|cf| {
                self.db
                    .property_int_value_cf(&cf, "rocksdb.total-sst-files-size")
                    .ok()
                    .flatten()
            })
            .sum()
    }

    /// How the table's keys are written, as recorded by the materializer.
    pub fn key_shape(&self, table: &str) -> Result<Option<KeyShape>, TableError> {
        /// The recorded shape, or the column names an earlier version recorded.
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Recorded {
            Shape(KeyShape),
            Columns(Vec<String>),
        }
        for partition in self.partitions(table) {
            if let Some(cf) = self.cf(table, partition)
                && let Some(raw) = self.db.get_pinned_cf(&cf, KEY_SHAPE_KEY)?
            {
                let recorded = serde_json::from_slice(&raw).map_err(|e| TableError::Corrupt {
                    table: table.to_owned(),
                    problem: format!("key columns: {e}"),
                })?;
                return Ok(Some(match recorded {
                    Recorded::Shape(shape) => shape,
                    Recorded::Columns(columns) => KeyShape {
                        columns,
                        quoted: Vec::new(),
                        scalar: false,
                        schema: None,
                    },
                }));
            }
        }
        Ok(None)
    }

    /// Reads the stored row bytes of `key` in place, in the partition whose
    /// column family is named `cf` (see [`cf_name`]).
    pub fn get_with<R>(
        &self,
        cf: &str,
        key: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, TableError> {
        let Some(cf) = self.db.cf_handle(cf) else {
            return Ok(None);
        };
        Ok(self
            .db
            .get_pinned_cf_opt(&cf, key, &self.point_reads)?
            .map(|v| read(&v)))
    }

    /// Reads the stored row bytes of several keys of one column family in
    /// place, with one batched read (RocksDB's `MultiGet`): `read` sees each
    /// row found; the answers come in the order of `keys`.
    pub fn multi_get_with<R>(
        &self,
        cf: &str,
        keys: &[&[u8]],
        mut read: impl FnMut(&[u8]) -> R,
    ) -> Result<Vec<Option<R>>, TableError> {
        let Some(cf) = self.db.cf_handle(cf) else {
            return Ok(std::iter::repeat_with(|| None).take(keys.len()).collect());
        };
        self.db
            .batched_multi_get_cf_opt(&cf, keys, false, &self.point_reads)
            .into_iter()
            .map(|found| Ok(found?.map(|v| read(&v))))
            .collect()
    }

    /// The stored row bytes of `key` in a partition (lookups go through
    /// [`LocalTable`](crate::LocalTable), which names its partitions once).
    #[cfg(test)]
    pub(crate) fn get(
        &self,
        table: &str,
        partition: i32,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, TableError> {
        self.get_with(&cf_name(table, partition), key, <[u8]>::to_vec)
    }

    /// Whether a keyspace of `table` holds any row.
    pub fn has_rows(&self, table: &str, keyspace: Keyspace) -> Result<bool, TableError> {
        let Some(cf) = self.db.cf_handle(&keyspace.cf_name(table)) else {
            return Ok(false);
        };
        let first = [0x01];
        let mut rows = self
            .db
            .iterator_cf(&cf, IteratorMode::From(&first, rocksdb::Direction::Forward));
        Ok(rows.next().transpose()?.is_some())
    }

    /// Up to `limit` rows of a keyspace within `bounds`, in key order.
    pub fn scan(
        &self,
        table: &str,
        keyspace: Keyspace,
        bounds: &ScanBounds,
        limit: usize,
    ) -> Result<Vec<StoredRow>, TableError> {
        let Some(cf) = self.db.cf_handle(&keyspace.cf_name(table)) else {
            return Ok(Vec::new());
        };
        // Rows start at 0x01: metadata keys (0x00…) are never visited.
        let start = [&[0x01][..], &bounds.prefix, &bounds.from]
            .into_iter()
            .max()
            .expect("three candidates");
        let mut rows = Vec::new();
        for item in self
            .db
            .iterator_cf(&cf, IteratorMode::From(start, rocksdb::Direction::Forward))
        {
            let (key, value) = item?;
            let past_end = bounds.to.as_deref().is_some_and(|to| &key[..] >= to);
            if !key.starts_with(&bounds.prefix) || past_end || rows.len() >= limit {
                break;
            }
            let row = match keyspace {
                Keyspace::Partition(_) => &value[..],
                Keyspace::Global => match global_rows::decode(&value) {
                    Some((_, row)) => row,
                    None => {
                        return Err(TableError::Corrupt {
                            table: table.to_owned(),
                            problem: "a global row without its header".into(),
                        });
                    }
                },
            };
            rows.push((key.to_vec(), row.to_vec()));
        }
        Ok(rows)
    }

    /// RocksDB's estimate of the rows in a keyspace.
    pub fn estimate_rows(&self, table: &str, keyspace: Keyspace) -> u64 {
        self.db
            .cf_handle(&keyspace.cf_name(table))
            .and_then(|cf| {
                self.db
                    .property_int_value_cf(&cf, "rocksdb.estimate-num-keys")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0)
    }

    /// Bytes on disk (SST files) and in memory (memtables, block and row
    /// caches, derived rows).
    pub fn size_and_memory(&self) -> (u64, u64) {
        let cfs = self.all_cfs();
        let sum = |property: &str| -> u64 {
            cfs.iter()
                .filter_map(|cf| self.db.property_int_value_cf(cf, property).ok().flatten())
                .sum()
        };
        let cache: u64 = self
            .caches
            .iter()
            .map(|c| c.get_usage() as u64)
            .sum::<u64>()
            + self.derived.as_ref().map_or(0, DerivedRows::bytes);
        (
            sum("rocksdb.total-sst-files-size"),
            sum("rocksdb.cur-size-all-mem-tables") + cache,
        )
    }

    /// Flushes every memtable to table files, so the next open has no log to replay.
    pub fn flush(&self) -> Result<(), TableError> {
        for cf in self.all_cfs() {
            self.db.flush_cf(&cf)?;
        }
        Ok(())
    }

    /// Writes a consistent RocksDB checkpoint (hard links) into `dir`, which must not exist.
    pub fn checkpoint(&self, dir: &Path) -> Result<(), TableError> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        Ok(())
    }

    /// Starts an atomic batch.
    pub fn batch(&self) -> ApplyBatch<'_> {
        ApplyBatch {
            store: self,
            batch: WriteBatch::default(),
            cfs: Vec::new(),
            history_cfs: Vec::new(),
            owners: HashMap::new(),
            held: HashMap::new(),
            written: Written::default(),
        }
    }
}

/// A column family handle.
type Cf<'a> = std::sync::Arc<rocksdb::BoundColumnFamily<'a>>;

/// Column families of (table, partition), found once per batch.
type CfCache<'a> = Vec<(String, i32, Cf<'a>)>;

/// The column family of `table`'s `partition` in `cache`, found by `open` the
/// first time a batch asks for it.
fn cached_cf<'a>(
    cache: &mut CfCache<'a>,
    table: &str,
    partition: i32,
    open: impl FnOnce() -> Result<Cf<'a>, TableError>,
) -> Result<Cf<'a>, TableError> {
    if let Some((_, _, cf)) = cache.iter().find(|(t, p, _)| t == table && *p == partition) {
        return Ok(cf.clone());
    }
    let cf = open()?;
    cache.push((table.to_owned(), partition, cf.clone()));
    Ok(cf)
}

/// Row changes and offsets written atomically.
pub struct ApplyBatch<'a> {
    store: &'a Store,
    batch: WriteBatch,
    /// Column families this batch writes to (a handful), found once per batch.
    cfs: CfCache<'a>,
    /// History column families this batch writes to.
    history_cfs: CfCache<'a>,
    /// Owners of the global keys this batch wrote or deleted (`None`), newer than the store's.
    owners: HashMap<(String, Vec<u8>), Option<Owner>>,
    /// Rows this batch wrote or deleted (`None`) that later records may read
    /// back ([`Self::remember`]).
    held: HashMap<(String, Keyspace, Vec<u8>), Option<Vec<u8>>>,
    /// Row keys this batch writes or deletes, when the store keeps derived rows.
    written: Written,
}

/// Row keys a batch writes or deletes, by column family.
#[derive(Default)]
struct Written {
    /// (table, keyspace, column family name), each once.
    cfs: Vec<(String, Keyspace, String)>,
    /// Keys, each with the index of its column family in `cfs`.
    keys: Vec<(usize, Vec<u8>)>,
}

impl Written {
    fn note(&mut self, table: &str, keyspace: Keyspace, key: &[u8]) {
        let cf = match self
            .cfs
            .iter()
            .position(|(t, k, _)| *k == keyspace && t == table)
        {
            Some(cf) => cf,
            None => {
                let name = keyspace.cf_name(table);
                self.cfs.push((table.to_owned(), keyspace, name));
                self.cfs.len() - 1
            }
        };
        self.keys.push((cf, key.to_vec()));
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + Clone {
        self.keys
            .iter()
            .map(|(cf, key)| (self.cfs[*cf].2.as_str(), key.as_slice()))
    }
}

impl<'a> ApplyBatch<'a> {
    fn cf(&mut self, table: &str, partition: i32) -> Result<Cf<'a>, TableError> {
        let store: &'a Store = self.store;
        cached_cf(&mut self.cfs, table, partition, || {
            store.ensure_partition(table, partition)?;
            Ok(store.cf(table, partition).expect("just ensured"))
        })
    }

    /// Stores (replaces) a row.
    pub fn upsert(
        &mut self,
        table: &str,
        partition: i32,
        key: &[u8],
        row: &[u8],
    ) -> Result<(), TableError> {
        let cf = self.cf(table, partition)?;
        self.batch.put_cf(&cf, key, row);
        self.note(table, Keyspace::Partition(partition), key);
        Ok(())
    }

    /// Removes a row.
    pub fn delete(&mut self, table: &str, partition: i32, key: &[u8]) -> Result<(), TableError> {
        let cf = self.cf(table, partition)?;
        self.batch.delete_cf(&cf, key);
        self.note(table, Keyspace::Partition(partition), key);
        Ok(())
    }

    /// Names a written row key to the store's derived rows, if kept.
    fn note(&mut self, table: &str, keyspace: Keyspace, key: &[u8]) {
        if self.store.derived.is_some() {
            self.written.note(table, keyspace, key);
        }
    }

    fn history_cf(&mut self, table: &str, partition: i32) -> Result<Cf<'a>, TableError> {
        let store: &'a Store = self.store;
        cached_cf(&mut self.history_cfs, table, partition, || {
            store.ensure_partition(table, partition)?;
            let name = history_cf_name(table, partition);
            if store.db.cf_handle(&name).is_none() {
                store.db.create_cf(&name, &store.cf_options)?;
            }
            Ok(store.db.cf_handle(&name).expect("just ensured"))
        })
    }

    /// Stores a version of `key` in a partition's history (`row`: `None` for a delete).
    pub(crate) fn put_version(
        &mut self,
        table: &str,
        partition: i32,
        key: &[u8],
        stamp: Stamp,
        row: Option<&[u8]>,
    ) -> Result<(), TableError> {
        let cf = self.history_cf(table, partition)?;
        self.batch.put_cf(
            &cf,
            history::version_key(key, stamp.valid_from, stamp.offset),
            history::encode_version(row),
        );
        Ok(())
    }

    /// Hands `visit` each stored version of `key` in a partition's history,
    /// newest first (its stamp, stored key and value), until it breaks.
    /// Versions put by this batch are not seen.
    fn each_version(
        &mut self,
        table: &str,
        partition: i32,
        key: &[u8],
        mut visit: impl FnMut(Stamp, &[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), TableError> {
        let cf = self.history_cf(table, partition)?;
        let mut versions = self.store.db.raw_iterator_cf(&cf);
        versions.seek(key);
        while let (Some(entry), Some(value)) = (versions.key(), versions.value()) {
            let Some(stamp) = history::version_of(entry, key) else {
                break;
            };
            if visit(stamp, entry, value).is_break() {
                break;
            }
            versions.next();
        }
        versions.status()?;
        Ok(())
    }

    /// Whether `key` has stored versions in a partition's history.
    pub(crate) fn has_versions(
        &mut self,
        table: &str,
        partition: i32,
        key: &[u8],
    ) -> Result<bool, TableError> {
        let mut found = false;
        self.each_version(table, partition, key, |_, _, _| {
            found = true;
            ControlFlow::Break(())
        })?;
        Ok(found)
    }

    /// Whether the stored version of `key` written at `offset` is a delete.
    pub(crate) fn deleted_at(
        &mut self,
        table: &str,
        partition: i32,
        key: &[u8],
        offset: i64,
    ) -> Result<bool, TableError> {
        let mut deleted = false;
        self.each_version(table, partition, key, |stamp, _, value| {
            if stamp.offset != offset {
                return ControlFlow::Continue(());
            }
            deleted = matches!(history::decode_version(value), Ok(None));
            ControlFlow::Break(())
        })?;
        Ok(deleted)
    }

    /// Deletes the stored versions of `key` that retention removes at
    /// `horizon` ([`history::expired`]); returns how many. Versions put by
    /// this batch are not seen (a later write of the key trims them).
    pub(crate) fn trim_versions(
        &mut self,
        table: &str,
        partition: i32,
        key: &[u8],
        horizon: i64,
    ) -> Result<usize, TableError> {
        let mut stored = Vec::new();
        self.each_version(table, partition, key, |stamp, entry, _| {
            stored.push((stamp.valid_from, entry.to_vec()));
            ControlFlow::Continue(())
        })?;
        let times: Vec<i64> = stored.iter().map(|(t, _)| *t).collect();
        let expired = history::expired(&times, horizon);
        let removed = expired.len();
        let cf = self.history_cf(table, partition)?;
        for (_, entry) in &stored[expired] {
            self.batch.delete_cf(&cf, entry);
        }
        Ok(removed)
    }

    /// Records a versioned table partition's stream time, with its offset.
    pub(crate) fn stream_time(
        &mut self,
        table: &str,
        partition: i32,
        micros: i64,
    ) -> Result<(), TableError> {
        let cf = self.cf(table, partition)?;
        self.batch
            .put_cf(&cf, STREAM_TIME_KEY, micros.to_be_bytes());
        Ok(())
    }

    /// Records the offset of the last record this batch applies to a partition.
    pub fn offset(&mut self, table: &str, partition: i32, offset: i64) -> Result<(), TableError> {
        let cf = self.cf(table, partition)?;
        self.batch.put_cf(&cf, OFFSET_KEY, offset.to_be_bytes());
        Ok(())
    }

    /// Records how far a partition has applied its source's log, with its offset.
    pub fn log(&mut self, table: &str, partition: i32, log: &AppliedLog) -> Result<(), TableError> {
        let cf = self.cf(table, partition)?;
        if !log.gtids.is_empty() {
            let texts = serde_json::to_vec(&log.gtids.to_strings()).expect("strings serialize");
            self.batch.put_cf(&cf, GTIDS_KEY, texts);
        }
        if !log.wal.is_empty() {
            let json = serde_json::to_vec(&log.wal).expect("WAL progress serializes");
            self.batch.put_cf(&cf, WAL_KEY, json);
        }
        Ok(())
    }

    /// Records how the table's keys are written.
    pub fn key_shape(
        &mut self,
        table: &str,
        partition: i32,
        shape: &KeyShape,
    ) -> Result<(), TableError> {
        let cf = self.cf(table, partition)?;
        self.batch.put_cf(
            &cf,
            KEY_SHAPE_KEY,
            serde_json::to_vec(shape).expect("a key shape serializes"),
        );
        Ok(())
    }

    /// Writes a row (`Some`) or deletes it (`None`) in a global table's keyspace,
    /// if the record of `owner` supersedes the one that wrote it last
    /// ([`Owner::supersedes`]). Returns whether it did (a delete of a key that
    /// is not there counts as done).
    pub fn apply_global(
        &mut self,
        table: &str,
        key: &[u8],
        owner: Owner,
        row: Option<&[u8]>,
    ) -> Result<bool, TableError> {
        let store: &'a Store = self.store;
        let name = Keyspace::Global.cf_name(table);
        let cf = store
            .db
            .cf_handle(&name)
            .ok_or_else(|| TableError::Corrupt {
                table: table.to_owned(),
                problem: format!("column family {name} is missing"),
            })?;
        let batch_key = (table.to_owned(), key.to_vec());
        let stored = match self.owners.get(&batch_key) {
            Some(owner) => *owner,
            None => store
                .db
                .get_pinned_cf_opt(&cf, key, &store.point_reads)?
                .and_then(|v| global_rows::decode(&v).map(|(owner, _)| owner)),
        };
        if stored.is_none() && row.is_none() {
            return Ok(true);
        }
        if !owner.supersedes(stored, row.is_some()) {
            return Ok(false);
        }
        self.note(table, Keyspace::Global, key);
        match row {
            Some(row) => {
                self.batch.put_cf(&cf, key, global_rows::encode(owner, row));
                self.owners.insert(batch_key, Some(owner));
            }
            None => {
                self.batch.delete_cf(&cf, key);
                self.owners.insert(batch_key, None);
            }
        }
        Ok(true)
    }

    /// Notes the row this batch wrote for `key` (`None`: deleted), for
    /// [`Self::held_row`] to give back before the batch is committed.
    pub fn remember(&mut self, table: &str, keyspace: Keyspace, key: &[u8], row: Option<Vec<u8>>) {
        self.held
            .insert((table.to_owned(), keyspace, key.to_vec()), row);
    }

    /// The row `key` holds in a keyspace of `table` as of this batch: what
    /// the batch [`remember`](Self::remember)ed, else what is stored.
    pub fn held_row(
        &self,
        table: &str,
        keyspace: Keyspace,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, TableError> {
        if let Some(row) = self.held.get(&(table.to_owned(), keyspace, key.to_vec())) {
            return Ok(row.clone());
        }
        let stored = self
            .store
            .get_with(&keyspace.cf_name(table), key, <[u8]>::to_vec)?;
        Ok(match keyspace {
            Keyspace::Partition(_) => stored,
            Keyspace::Global => stored
                .as_deref()
                .and_then(global_rows::decode)
                .map(|(_, row)| row.to_vec()),
        })
    }

    /// Writes everything at once.
    pub fn commit(self) -> Result<(), TableError> {
        let (db, batch) = (&self.store.db, self.batch);
        match &self.store.derived {
            Some(derived) => derived.write(self.written.iter(), || db.write(batch))?,
            None => db.write(batch)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use tributary_table_api::Columns;

    use super::*;

    #[test]
    fn rows_and_offsets_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), &RocksDbConfig::default()).unwrap();
            let mut batch = store.batch();
            batch
                .upsert("users", 2, b"\x06k1\x00\x01", b"{\"a\":1}")
                .unwrap();
            batch
                .upsert("users", 2, b"\x06k2\x00\x01", b"{\"a\":2}")
                .unwrap();
            batch.offset("users", 2, 41).unwrap();
            batch.commit().unwrap();
            let mut batch = store.batch();
            batch.delete("users", 2, b"\x06k1\x00\x01").unwrap();
            batch.offset("users", 2, 42).unwrap();
            let log = AppliedLog {
                gtids: AppliedGtids::from_strings(&["0-1-9"]).unwrap(),
                wal: serde_json::from_str(r#"{"lsn":77,"xids":[5,6]}"#).unwrap(),
            };
            batch.log("users", 2, &log).unwrap();
            batch.commit().unwrap();
        }
        let store = Store::open(dir.path(), &RocksDbConfig::default()).unwrap();
        assert_eq!(store.partitions("users"), [2]);
        assert_eq!(store.stored_offset("users", 2).unwrap(), Some(42));
        assert_eq!(store.stored_offset("users", 1).unwrap(), None);
        let log = store.stored_log("users", 2).unwrap();
        assert_eq!(log.gtids.to_strings(), ["0-1-9"]);
        assert_eq!(log.wal.lsn(), Some(tributary_proto::lsn::Lsn(77)));
        assert!(store.stored_log("users", 1).unwrap().is_empty());
        assert_eq!(store.get("users", 2, b"\x06k1\x00\x01").unwrap(), None);
        assert_eq!(
            store.get("users", 2, b"\x06k2\x00\x01").unwrap().unwrap(),
            b"{\"a\":2}"
        );
        let rows = store
            .scan("users", Keyspace::Partition(2), &ScanBounds::default(), 10)
            .unwrap();
        assert_eq!(rows.len(), 1, "metadata keys are not rows");
        let mut batch = store.batch();
        for k in [b"\x06a\x00\x01", b"\x06b\x00\x01", b"\x06c\x00\x01"] {
            batch.upsert("users", 2, k, b"{}").unwrap();
        }
        batch.commit().unwrap();
        let bounds = ScanBounds {
            from: b"\x06b".to_vec(),
            to: Some(b"\x06k".to_vec()),
            ..ScanBounds::default()
        };
        let keys: Vec<Vec<u8>> = store
            .scan("users", Keyspace::Partition(2), &bounds, 10)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            keys,
            [b"\x06b\x00\x01".to_vec(), b"\x06c\x00\x01".to_vec()],
            "from is inclusive, to exclusive"
        );
        let limited = store
            .scan("users", Keyspace::Partition(2), &ScanBounds::default(), 2)
            .unwrap();
        assert_eq!(limited.len(), 2);
        drop(store);
        let read_only = Store::open_read_only(dir.path()).unwrap();
        assert_eq!(read_only.stored_offset("users", 2).unwrap(), Some(42));
    }

    #[test]
    fn a_global_keyspace_keeps_the_row_of_the_partition_that_owns_each_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &RocksDbConfig::default()).unwrap();
        store.ensure_global("kv", 3).unwrap();
        let owner = |partition, timestamp| Owner {
            partition,
            timestamp,
        };
        let get = |key: &[u8]| {
            store
                .get_with(&Keyspace::Global.cf_name("kv"), key, |v| {
                    global_rows::decode(v).unwrap().1.to_vec()
                })
                .unwrap()
        };
        let mut batch = store.batch();
        assert!(
            batch
                .apply_global("kv", b"\x06a", owner(0, 10), Some(b"v1"))
                .unwrap()
        );
        // In the same batch: the key moved to partition 2 (newer), then the old
        // partition's clean-up tombstone and an old version arrive.
        assert!(
            batch
                .apply_global("kv", b"\x06a", owner(2, 20), Some(b"v2"))
                .unwrap()
        );
        assert!(
            !batch
                .apply_global("kv", b"\x06a", owner(0, 30), None)
                .unwrap()
        );
        assert!(
            !batch
                .apply_global("kv", b"\x06a", owner(0, 15), Some(b"old"))
                .unwrap()
        );
        batch.offset("kv", 0, 4).unwrap();
        batch.commit().unwrap();
        assert_eq!(get(b"\x06a").unwrap(), b"v2");
        // Across batches, from the stored owner.
        let mut batch = store.batch();
        assert!(
            !batch
                .apply_global("kv", b"\x06a", owner(1, 5), Some(b"x"))
                .unwrap()
        );
        assert!(
            batch
                .apply_global("kv", b"\x06b", owner(1, 5), Some(b"b"))
                .unwrap()
        );
        batch.commit().unwrap();
        assert_eq!(get(b"\x06a").unwrap(), b"v2");
        let mut batch = store.batch();
        assert!(
            batch
                .apply_global("kv", b"\x06a", owner(2, 1), None)
                .unwrap()
        );
        batch.commit().unwrap();
        assert_eq!(get(b"\x06a"), None, "the owner deletes it");
        let rows = store
            .scan("kv", Keyspace::Global, &ScanBounds::default(), 10)
            .unwrap();
        assert_eq!(
            rows,
            [(b"\x06b".to_vec(), b"b".to_vec())],
            "without headers"
        );
        assert!(store.has_rows("kv", Keyspace::Global).unwrap());
        assert!(
            !store.has_rows("kv", Keyspace::Partition(0)).unwrap(),
            "offsets are not rows"
        );
        assert_eq!(store.stored_offset("kv", 0).unwrap(), Some(4));

        store.drop_table("kv").unwrap();
        assert!(!store.has_global("kv"));
        assert!(store.partitions("kv").is_empty());
        assert_eq!(store.stored_offset("kv", 0).unwrap(), None);
    }

    /// Every row a batch writes or deletes, in a partition or a global
    /// keyspace, drops its derived row; a superseded global write does not,
    /// nor does a write of another key; dropping the table drops them all.
    #[test]
    fn committed_writes_drop_their_keys_derived_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &RocksDbConfig::default())
            .unwrap()
            .with_derived_rows(1 << 20, 1 << 20);
        store.ensure_global("g", 2).unwrap();
        let (part, global) = (cf_name("p", 0), Keyspace::Global.cf_name("g"));
        let derived = store.derived_rows().unwrap();
        let (encoded, joined) = (derived.encoded().unwrap(), derived.joined(1).unwrap());
        let keep = |cf: &str, key: &[u8]| {
            let start = encoded.start(key).unwrap();
            encoded.keep(cf, key, start, Bytes::from_static(b"derived"));
            let row = Columns::Shared(Arc::new(serde_json::json!("derived")));
            joined.keep(cf, key, start, row);
        };
        // Both forms are served, or neither.
        let kept = |cf: &str, key: &[u8]| {
            let served = encoded.get(cf, key).is_some();
            assert_eq!(joined.get(cf, key).is_some(), served, "{cf}");
            served
        };
        let owner = |partition, timestamp| Owner {
            partition,
            timestamp,
        };
        // Keys are counted in stripes by their bytes alone: the global
        // table's untouched key differs from every written one.
        for key in [&b"\x06a"[..], b"\x06b", b"\x06c"] {
            keep(&part, key);
        }
        keep(&global, b"\x06a");
        keep(&global, b"\x06d");
        let mut batch = store.batch();
        batch.upsert("p", 0, b"\x06a", b"1").unwrap();
        batch.delete("p", 0, b"\x06b").unwrap();
        batch
            .apply_global("g", b"\x06a", owner(0, 10), Some(b"1"))
            .unwrap();
        batch.offset("p", 0, 1).unwrap();
        batch.commit().unwrap();
        assert!(!kept(&part, b"\x06a") && !kept(&part, b"\x06b") && !kept(&global, b"\x06a"));
        assert!(kept(&part, b"\x06c") && kept(&global, b"\x06d"));
        keep(&global, b"\x06a");
        let mut batch = store.batch();
        assert!(
            !batch
                .apply_global("g", b"\x06a", owner(1, 5), Some(b"old"))
                .unwrap(),
            "superseded"
        );
        batch.commit().unwrap();
        assert!(kept(&global, b"\x06a"), "nothing was written");
        store.drop_table("g").unwrap();
        assert!(!kept(&global, b"\x06a") && !kept(&part, b"\x06c"));
    }

    #[test]
    fn the_row_cache_is_filled_and_never_serves_a_replaced_or_deleted_row() {
        let dir = tempfile::tempdir().unwrap();
        let config = RocksDbConfig {
            row_cache_mb: 8,
            ..RocksDbConfig::default()
        };
        let store = Store::open(dir.path(), &config).unwrap();
        let key = b"\x06k\x00\x01";
        let write = |value: Option<&[u8]>| {
            let mut batch = store.batch();
            match value {
                Some(v) => batch.upsert("users", 0, key, v).unwrap(),
                None => batch.delete("users", 0, key).unwrap(),
            }
            batch.commit().unwrap();
            store.flush().unwrap(); // into a table file, where the row cache applies
        };
        let row_cache = &store.caches[1];
        write(Some(b"{\"v\":1}"));
        let before = row_cache.get_usage();
        assert_eq!(store.get("users", 0, key).unwrap().unwrap(), b"{\"v\":1}");
        assert!(
            row_cache.get_usage() > before,
            "a get from a table file fills the row cache"
        );
        write(Some(b"{\"v\":2}"));
        assert_eq!(store.get("users", 0, key).unwrap().unwrap(), b"{\"v\":2}");
        write(None);
        assert_eq!(store.get("users", 0, key).unwrap(), None);
    }

    #[test]
    fn a_multi_get_answers_in_the_order_asked_from_files_and_memtable() {
        let dir = tempfile::tempdir().unwrap();
        let config = RocksDbConfig {
            row_cache_mb: 8,
            ..RocksDbConfig::default()
        };
        let store = Store::open(dir.path(), &config).unwrap();
        let write = |key: &[u8], value: Option<&[u8]>| {
            let mut batch = store.batch();
            match value {
                Some(v) => batch.upsert("users", 0, key, v).unwrap(),
                None => batch.delete("users", 0, key).unwrap(),
            }
            batch.commit().unwrap();
        };
        write(b"a", Some(b"1"));
        write(b"b", Some(b"2"));
        write(b"c", Some(b"3"));
        store.flush().unwrap();
        write(b"b", Some(b"2, replaced in the memtable"));
        write(b"c", None);
        write(b"d", Some(b"4, only in the memtable"));
        let keys: [&[u8]; 6] = [b"d", b"a", b"x", b"b", b"c", b"a"];
        let read = |cf: &str| {
            store
                .multi_get_with(cf, &keys, |v| String::from_utf8(v.to_vec()).unwrap())
                .unwrap()
        };
        let one_by_one: Vec<Option<String>> = keys
            .iter()
            .map(|k| {
                store
                    .get("users", 0, k)
                    .unwrap()
                    .map(|v| String::from_utf8(v).unwrap())
            })
            .collect();
        assert_eq!(read(&cf_name("users", 0)), one_by_one);
        assert_eq!(
            one_by_one,
            [
                Some("4, only in the memtable".to_owned()),
                Some("1".to_owned()),
                None,
                Some("2, replaced in the memtable".to_owned()),
                None,
                Some("1".to_owned()),
            ]
        );
        assert_eq!(
            read(&cf_name("users", 7)),
            vec![None; 6],
            "no such keyspace"
        );
    }

    #[test]
    fn versions_are_read_as_of_a_time_and_trimmed_behind_the_horizon() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &RocksDbConfig::default()).unwrap();
        let (key, other) = (b"\x06k\x00\x01".as_slice(), b"\x06l\x00\x01".as_slice());
        let stamp = |valid_from, offset| Stamp { valid_from, offset };
        let mut batch = store.batch();
        for (t, offset, row) in [
            (10, 0, Some(&b"{\"v\":1}"[..])),
            (20, 1, Some(b"{\"v\":2}")),
            (30, 2, None),
            (40, 3, Some(b"{\"v\":4}")),
        ] {
            batch
                .put_version("users", 1, key, stamp(t, offset), row)
                .unwrap();
        }
        batch
            .put_version("users", 1, other, stamp(5, 4), Some(b"{}"))
            .unwrap();
        batch.stream_time("users", 1, 40).unwrap();
        batch.commit().unwrap();
        let cf = history_cf_name("users", 1);
        let at = |t| {
            store
                .version_at(&cf, key, t, |v| {
                    history::decode_version(v).unwrap().map(<[u8]>::to_vec)
                })
                .unwrap()
        };
        assert_eq!(at(9), None, "no version that old");
        assert_eq!(at(10), Some(Some(b"{\"v\":1}".to_vec())));
        assert_eq!(at(29), Some(Some(b"{\"v\":2}".to_vec())));
        assert_eq!(at(35), Some(None), "deleted then");
        assert_eq!(at(i64::MAX), Some(Some(b"{\"v\":4}".to_vec())));
        assert_eq!(store.stored_stream_time("users", 1).unwrap(), Some(40));
        assert_eq!(store.stored_stream_time("users", 0).unwrap(), None);

        // Horizon 25: the version of 20 answers reads at 25; the one of 10 goes.
        let mut batch = store.batch();
        assert_eq!(batch.trim_versions("users", 1, key, 25).unwrap(), 1);
        assert_eq!(batch.trim_versions("users", 1, other, 25).unwrap(), 0);
        batch.commit().unwrap();
        assert_eq!(at(10), None);
        assert_eq!(at(25), Some(Some(b"{\"v\":2}".to_vec())));
        let mut batch = store.batch();
        assert_eq!(batch.trim_versions("users", 1, key, 41).unwrap(), 2);
        batch.commit().unwrap();
        assert_eq!(at(35), None, "only the newest version is left");
        assert_eq!(at(41), Some(Some(b"{\"v\":4}".to_vec())));

        store.flush().unwrap();
        assert!(store.history_bytes("users") > 0, "the history is on disk");
        store.drop_history("users").unwrap();
        assert_eq!(at(41), None, "no history once dropped");
        assert_eq!(store.history_bytes("users"), 0);
        assert_eq!(store.stored_stream_time("users", 1).unwrap(), Some(40));
    }
}
