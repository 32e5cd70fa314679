//! Configuration of local tables (`tributary tables run --config FILE`).
//!
//! ```yaml
//! data_dir: /var/lib/tributary/tables
//! kafka: { brokers: 127.0.0.1:19092, group_id: shop-tables }
//! rocksdb: { block_cache_mb: 256, bloom_filter_bits: 10, compression: lz4, write_buffer_mb: 64 }
//! tables:
//!   - name: users
//!     topic: shop.shop.users
//!     mode: partitioned        # or global: every instance holds every partition
//! ```

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use serde::Deserialize;
use tributary_proto::config_text::{self, ConfigError, HttpConfig, Validate};

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TablesConfig {
    /// Where RocksDB keeps its files (one database for all tables).
    pub data_dir: PathBuf,
    /// The Kafka cluster holding the change topics.
    pub kafka: KafkaConsumerConfig,
    /// RocksDB tuning.
    #[serde(default)]
    pub rocksdb: RocksDbConfig,
    /// The tables to materialize.
    pub tables: Vec<LocalTableConfig>,
    /// Most records applied in one atomic write batch.
    #[serde(default = "default_batch")]
    pub batch_max_records: usize,
    /// Periodic checkpoints of the store (none when absent).
    #[serde(default)]
    pub checkpoints: Option<CheckpointConfig>,
    /// HTTP endpoint for `/metrics`, `/healthz`, `/readyz`.
    #[serde(default)]
    pub metrics: HttpConfig,
}

/// Where and how often the running instance checkpoints its store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Destination directory (e.g. a mounted volume); one per instance lineage.
    pub dir: PathBuf,
    /// Seconds between checkpoints.
    #[serde(default = "default_checkpoint_interval")]
    pub interval_s: u64,
    /// Checkpoints kept; older ones and their unused files are deleted.
    #[serde(default = "default_keep")]
    pub keep: usize,
}

/// Kafka consumer settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConsumerConfig {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Consumer group of the instances sharing `partitioned` tables.
    #[serde(default = "default_group")]
    pub group_id: String,
    /// Extra librdkafka consumer properties, passed through.
    #[serde(default)]
    pub consumer: BTreeMap<String, String>,
}

/// Block compression of table files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// No compression.
    None,
    /// LZ4 (fast; the default).
    #[default]
    Lz4,
    /// Zstandard (smaller).
    Zstd,
}

/// RocksDB tuning.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocksDbConfig {
    /// Shared block cache, in MiB.
    #[serde(default = "default_block_cache")]
    pub block_cache_mb: usize,
    /// Bloom filter bits per key (0 disables).
    #[serde(default = "default_bloom")]
    pub bloom_filter_bits: f64,
    /// Block compression.
    #[serde(default)]
    pub compression: Compression,
    /// Memtable size per column family, in MiB.
    #[serde(default = "default_write_buffer")]
    pub write_buffer_mb: usize,
}

impl Default for RocksDbConfig {
    fn default() -> Self {
        RocksDbConfig {
            block_cache_mb: default_block_cache(),
            bloom_filter_bits: default_bloom(),
            compression: Compression::default(),
            write_buffer_mb: default_write_buffer(),
        }
    }
}

/// How instances share a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableMode {
    /// Each instance holds the partitions the consumer group assigns it.
    #[default]
    Partitioned,
    /// Every instance holds every partition.
    Global,
}

/// One local table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalTableConfig {
    /// Table name used by lookups.
    pub name: String,
    /// Change topic (Tributary/Debezium envelopes, or plain JSON upserts + tombstones).
    pub topic: String,
    /// Sharing mode.
    #[serde(default)]
    pub mode: TableMode,
}

fn default_batch() -> usize {
    1000
}
fn default_group() -> String {
    "tributary-tables".into()
}
fn default_block_cache() -> usize {
    256
}
fn default_bloom() -> f64 {
    10.0
}
fn default_write_buffer() -> usize {
    64
}
fn default_checkpoint_interval() -> u64 {
    3600
}
fn default_keep() -> usize {
    3
}

/// Default port of the HTTP endpoint.
pub const DEFAULT_HTTP_PORT: u16 = 9101;

impl TablesConfig {
    /// Reads, interpolates, parses and validates a file.
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        config_text::load(path)
    }

    /// Parses and validates text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        config_text::parse(text)
    }
}

impl Validate for TablesConfig {
    /// Checks what serde cannot.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.tables.is_empty() {
            return Err(ConfigError::new("tables", "declare at least one table"));
        }
        let (mut names, mut topics) = (HashSet::new(), HashSet::new());
        for (i, t) in self.tables.iter().enumerate() {
            config_text::check_name(format!("tables[{i}].name"), &t.name)?;
            if !names.insert(&t.name) {
                return Err(ConfigError::new(
                    format!("tables[{i}].name"),
                    format!("{:?} is declared twice", t.name),
                ));
            }
            if !topics.insert(&t.topic) {
                return Err(ConfigError::new(
                    format!("tables[{i}].topic"),
                    format!("{:?} feeds two tables", t.topic),
                ));
            }
        }
        if self.batch_max_records == 0 {
            return Err(ConfigError::new("batch_max_records", "must be at least 1"));
        }
        if self.rocksdb.block_cache_mb == 0 {
            return Err(ConfigError::new(
                "rocksdb.block_cache_mb",
                "must be at least 1",
            ));
        }
        if self.rocksdb.write_buffer_mb == 0 {
            return Err(ConfigError::new(
                "rocksdb.write_buffer_mb",
                "must be at least 1",
            ));
        }
        if let Some(c) = &self.checkpoints {
            if c.interval_s == 0 {
                return Err(ConfigError::new(
                    "checkpoints.interval_s",
                    "must be at least 1",
                ));
            }
            if c.keep == 0 {
                return Err(ConfigError::new("checkpoints.keep", "must be at least 1"));
            }
        }
        if !(0.0..=64.0).contains(&self.rocksdb.bloom_filter_bits) {
            return Err(ConfigError::new(
                "rocksdb.bloom_filter_bits",
                "must be between 0 and 64",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "
data_dir: /tmp/x
kafka: { brokers: 'b:1' }
tables:
  - { name: users, topic: s.d.users }
  - { name: products, topic: s.d.products, mode: global }
";

    #[test]
    fn parses_and_defaults() {
        let c = TablesConfig::parse(GOOD).unwrap();
        assert_eq!(c.tables[0].mode, TableMode::Partitioned);
        assert_eq!(c.tables[1].mode, TableMode::Global);
        assert_eq!(c.kafka.group_id, "tributary-tables");
        assert_eq!(c.rocksdb.compression, Compression::Lz4);
    }

    #[test]
    fn errors_name_the_field() {
        let field = |text: &str| TablesConfig::parse(text).unwrap_err().field;
        assert_eq!(
            field(&GOOD.replace("name: products", "name: users")),
            "tables[1].name"
        );
        assert_eq!(
            field(&GOOD.replace("s.d.products", "s.d.users")),
            "tables[1].topic"
        );
        assert_eq!(
            field(&GOOD.replace("mode: global", "mode: everywhere")),
            "tables[1].mode"
        );
        assert_eq!(
            field(&format!("{GOOD}rocksdb: {{ compression: brotli }}")),
            "rocksdb.compression"
        );
        assert_eq!(
            field(&format!("{GOOD}batch_max_records: 0")),
            "batch_max_records"
        );
    }
}
