//! Configuration of local tables (`tributary tables run --config FILE`).
//!
//! ```yaml
//! data_dir: /var/lib/tributary/tables
//! group_id: shop-tables                  # instances in one group split `partitioned` tables
//! kafka: { brokers: 127.0.0.1:19092 }     # the shared section (TLS, SASL: see tributary_kafka)
//! rocksdb: { block_cache_mb: 256, row_cache_mb: 0, bloom_filter_bits: 10, compression: lz4, write_buffer_mb: 64 }
//! join_row_cache_mb: 64                # rows kept as jobs' joins read them (0: none)
//! tables:
//!   - name: users
//!     topic: shop.shop.users
//!     mode: partitioned        # or global: every instance holds every partition
//!     partitioner: murmur2     # how the topic's producer partitions (partitioned only)
//!     key_format: json         # how it writes keys: json | json_spaced | json_with_schema
//!     fill_unavailable_values: false   # true: PostgreSQL's unchanged-TOAST placeholders take the held value
//!     versioned: { history: 7d }       # keep earlier versions for as-of reads (partitioned only);
//!                                      # each valid from source.ts_ms, or `column: updated_at` (unit: ms | us | s)
//! ```

pub mod grpc;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};
use tributary_config::{ConfigError, HttpConfig, Validate};
pub use tributary_kafka::KafkaConfig;

pub use crate::record_key::KeyFormat;
use grpc::GrpcConfig;
pub use tributary_proto::event_time::TimeUnit;
pub use tributary_proto::partition::Partitioner;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TablesConfig {
    /// Where RocksDB keeps its files (one database for all tables).
    pub data_dir: PathBuf,
    /// Consumer group of the instances sharing `partitioned` tables (also names
    /// the routing topic and the global tables' readers).
    #[serde(default = "default_group")]
    pub group_id: String,
    /// The Kafka cluster holding the change topics.
    pub kafka: KafkaConfig,
    /// RocksDB tuning.
    #[serde(default)]
    pub rocksdb: RocksDbConfig,
    /// Most MiB of rows kept in front of RocksDB as jobs' joins read them
    /// (whole, or the columns a join selects), so that a row joined again
    /// is neither read nor parsed; 0 keeps none. A write to a row stops its
    /// entries (and those of the few rows sharing its stripe) from being
    /// served until read again.
    #[serde(default = "default_join_row_cache_mb")]
    pub join_row_cache_mb: usize,
    /// The tables to materialize.
    #[serde(default)]
    pub tables: Vec<LocalTableConfig>,
    /// Tables looked up in a remote store, behind a cache and a rate limit.
    #[serde(default)]
    pub remote: Vec<RemoteTableConfig>,
    /// Most records applied in one atomic write batch.
    #[serde(default = "default_batch")]
    pub batch_max_records: usize,
    /// Most MiB of records (keys and values) in one atomic write batch, and in
    /// each consumer's prefetch queue (at most librdkafka's 64 MiB default).
    #[serde(default = "default_batch_mb")]
    pub batch_max_mb: u64,
    /// Periodic checkpoints of the store (none when absent).
    #[serde(default)]
    pub checkpoints: Option<CheckpointConfig>,
    /// HTTP endpoint for `/metrics`, `/healthz`, `/readyz`.
    #[serde(default)]
    pub metrics: HttpConfig,
    /// The gRPC lookup API (not served when absent).
    #[serde(default)]
    pub grpc: Option<GrpcConfig>,
    /// How remote tables' rate limits with a `budget_group` are shared
    /// between processes.
    #[serde(default)]
    pub budgets: BudgetsConfig,
}

/// The topic where processes sharing a rate limit (`rate_limit.budget_group`)
/// announce their parts of it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsConfig {
    /// Compacted topic (created when missing); every process of a group must
    /// name the same one.
    #[serde(default = "default_budgets_topic")]
    pub topic: String,
    /// Announcements are repeated this often, in milliseconds (a lower rate or
    /// a change of demand is announced at once).
    #[serde(default = "default_budgets_interval")]
    pub publish_interval_ms: u64,
    /// A process silent this long (milliseconds) loses its part; keep it under
    /// the jobs' consumer session timeout, so that the part of an instance
    /// that died is free before its partitions move.
    #[serde(default = "default_member_timeout")]
    pub member_timeout_ms: u64,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        BudgetsConfig {
            topic: default_budgets_topic(),
            publish_interval_ms: default_budgets_interval(),
            member_timeout_ms: default_member_timeout(),
        }
    }
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
    /// Row cache, in MiB (0: none): found rows by key, so a hit skips the
    /// index, filter and data blocks. Worth it when lookups outnumber writes
    /// and the hot rows fit (every row, for uniformly spread keys).
    #[serde(default)]
    pub row_cache_mb: usize,
    /// Bloom filter bits per key (0 disables).
    #[serde(default = "default_bloom")]
    pub bloom_filter_bits: f64,
    /// Block compression.
    #[serde(default)]
    pub compression: Compression,
    /// Memtable size per column family, in MiB (a global table's keyspace gets
    /// this times its partition count).
    #[serde(default = "default_write_buffer")]
    pub write_buffer_mb: usize,
}

impl Default for RocksDbConfig {
    fn default() -> Self {
        RocksDbConfig {
            block_cache_mb: default_block_cache(),
            row_cache_mb: 0,
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
    /// The partitioner the topic's producer used (partitioned tables; murmur2,
    /// as Kafka's Java client and Debezium, when absent): lookups find a key's
    /// partition with it.
    #[serde(default)]
    pub partitioner: Option<Partitioner>,
    /// How the producer wrote keys (partitioned tables; compact JSON when absent):
    /// the partitioner hashes these bytes.
    #[serde(default)]
    pub key_format: Option<KeyFormat>,
    /// Replace Debezium's `__debezium_unavailable_value` placeholder (a
    /// PostgreSQL TOASTed value an update left unchanged) with the value the
    /// table holds for the key, so rows stay whole without `REPLICA IDENTITY FULL`.
    #[serde(default)]
    pub fill_unavailable_values: bool,
    /// Keep each key's earlier versions, for reads as of a time (how: the
    /// crate's `history` module).
    #[serde(default)]
    pub versioned: Option<VersionedConfig>,
    /// The key columns, in key order: a job's join is checked against them
    /// before it runs, and the table checks each record's key against them
    /// (a record keyed otherwise stops the table, naming its offset). Learnt
    /// from the first record when absent.
    #[serde(default)]
    pub key: Option<Vec<String>>,
}

/// How a versioned table keeps its history.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionedConfig {
    /// How far back reads answer (`7d`, `12h`, `90m`): a version is removed
    /// once its successor became valid longer than this before the newest
    /// version the partition has applied.
    #[serde(deserialize_with = "history_duration")]
    pub history: std::time::Duration,
    /// The row column that says when each version became valid; absent: the
    /// change's commit time in the source (`source.ts_ms`).
    #[serde(default)]
    pub column: Option<String>,
    /// The unit of `column` when it holds numbers (texts are UTC times).
    #[serde(default)]
    pub unit: Option<TimeUnit>,
}

fn history_duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<std::time::Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("{text:?}: {e} (e.g. 7d, 12h, 90m)")))
}

/// A remote table: lookups go to a backend, protected by the layers below.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteTableConfig {
    /// Table name used by lookups.
    pub name: String,
    /// A MySQL/MariaDB table rows are read from (exactly one backend: `mysql`,
    /// `http` or `tributary`).
    #[serde(default)]
    pub mysql: Option<MySqlBackendConfig>,
    /// An HTTP service rows are read from.
    #[serde(default)]
    pub http: Option<HttpBackendConfig>,
    /// A table of another Tributary instance, read through its lookup API.
    #[serde(default)]
    pub tributary: Option<TributaryBackendConfig>,
    /// Cache of rows (and of misses).
    #[serde(default)]
    pub cache: CacheConfig,
    /// Backend calls per second (cache hits are free); unlimited when absent.
    #[serde(default)]
    pub rate_limit: Option<RateLimitConfig>,
    /// Coalescing of concurrent lookups into one call.
    #[serde(default)]
    pub batch: BatchConfig,
    /// Time limit of one backend call, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Retries of retryable failures (connection lost, timeout).
    #[serde(default)]
    pub retries: RetryPolicyConfig,
    /// Circuit breaker.
    #[serde(default)]
    pub breaker: BreakerConfig,
    /// Change topic of the source table: each change evicts the cached key, so
    /// cached rows stay fresh without a short TTL.
    #[serde(default)]
    pub invalidate_from: Option<String>,
}

/// The MySQL/MariaDB backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MySqlBackendConfig {
    /// `mysql://user:password@host:port` (`${VAR}` for secrets).
    pub url: String,
    /// `db.table`.
    pub table: String,
    /// Key columns, in key order (a lookup key gives their values).
    pub key: Vec<String>,
    /// Columns returned (every column when absent); must include the key.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
}

/// The HTTP JSON backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpBackendConfig {
    /// URL template, `{column}` replaced by the key's (percent-encoded) values:
    /// `http://catalog/products/{sku}`. 200 + JSON object: the row; 404: none.
    pub url: String,
    /// Key columns, in key order.
    pub key: Vec<String>,
}

/// The backend of another Tributary's lookup API (`BatchGet`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TributaryBackendConfig {
    /// `http://host:port`, or `https://host:port` for TLS.
    pub endpoint: String,
    /// The table's name there.
    pub table: String,
    /// Key columns, in key order.
    pub key: Vec<String>,
    /// Bearer token the server requires (`${VAR}`).
    #[serde(default)]
    pub token: Option<String>,
    /// PEM CA bundle to trust (https).
    #[serde(default)]
    pub ca: Option<std::path::PathBuf>,
}

/// The one backend of a remote table.
#[derive(Debug, Clone, Copy)]
pub enum BackendConfig<'a> {
    /// A MySQL/MariaDB table.
    MySql(&'a MySqlBackendConfig),
    /// An HTTP JSON service.
    Http(&'a HttpBackendConfig),
    /// Another Tributary's lookup API.
    Tributary(&'a TributaryBackendConfig),
}

/// Cache of a remote table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Most cached keys (0 disables the cache).
    #[serde(default = "default_cache_entries")]
    pub max_entries: u64,
    /// Lifetime of a cached row, in seconds.
    #[serde(default = "default_ttl")]
    pub ttl_s: u64,
    /// Lifetime of a cached miss (no row), in seconds.
    #[serde(default = "default_negative_ttl")]
    pub negative_ttl_s: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: default_cache_entries(),
            ttl_s: default_ttl(),
            negative_ttl_s: default_negative_ttl(),
        }
    }
}

/// Rate limit of the requests a backend serves (a statement per batch for
/// MySQL and the lookup API, a `GET` per key for HTTP).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Requests per second: this process's, or with `budget_group` the group's total.
    pub per_second: u32,
    /// Requests allowed at once after a quiet period (shared like the rate).
    #[serde(default = "default_burst")]
    pub burst: u32,
    /// Longest wait for a permit, in milliseconds; then the lookup fails.
    #[serde(default = "default_max_wait")]
    pub max_wait_ms: u64,
    /// Every process whose remote tables name this group shares one budget
    /// of `per_second` (jobs' instances, other jobs, lookup APIs).
    #[serde(default)]
    pub budget_group: Option<String>,
    /// The least fraction of its part a process keeps while the backend
    /// signals overload (HTTP 429/503, MySQL "too many connections", timeouts).
    #[serde(default = "default_floor")]
    pub floor: f64,
}

/// Batching of backend calls.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Most keys per call.
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
    /// How long the first key waits for others, in milliseconds.
    #[serde(default = "default_window")]
    pub window_ms: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_keys: default_max_keys(),
            window_ms: default_window(),
        }
    }
}

/// Retries of a failed backend call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicyConfig {
    /// Further attempts.
    #[serde(default = "default_retries")]
    pub max: u32,
    /// Backoff before the first retry, in milliseconds (doubling, jittered).
    #[serde(default = "default_backoff")]
    pub backoff_ms: u64,
}

impl Default for RetryPolicyConfig {
    fn default() -> Self {
        RetryPolicyConfig {
            max: default_retries(),
            backoff_ms: default_backoff(),
        }
    }
}

/// Circuit breaker of a remote table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failed calls that open it.
    #[serde(default = "default_failures")]
    pub failures: u32,
    /// Seconds it stays open before one call probes the backend.
    #[serde(default = "default_open")]
    pub open_s: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: default_failures(),
            open_s: default_open(),
        }
    }
}

fn default_timeout_ms() -> u64 {
    1000
}
fn default_cache_entries() -> u64 {
    100_000
}
fn default_ttl() -> u64 {
    300
}
fn default_negative_ttl() -> u64 {
    30
}
fn default_burst() -> u32 {
    10
}
fn default_max_wait() -> u64 {
    1000
}
fn default_floor() -> f64 {
    0.1
}
fn default_budgets_topic() -> String {
    "tributary.budgets".to_owned()
}
fn default_budgets_interval() -> u64 {
    250
}
fn default_member_timeout() -> u64 {
    2000
}
fn default_max_keys() -> usize {
    100
}
fn default_window() -> u64 {
    2
}
fn default_retries() -> u32 {
    2
}
fn default_backoff() -> u64 {
    50
}
fn default_failures() -> u32 {
    5
}
fn default_open() -> u64 {
    10
}

fn default_batch() -> usize {
    1000
}
fn default_batch_mb() -> u64 {
    64
}
fn default_join_row_cache_mb() -> usize {
    64
}
fn default_group() -> String {
    "tributary-tables".into()
}
/// Largest RocksDB size setting, in MiB (1 TiB): sizes are shifted into bytes.
const MAX_MIB: usize = 1 << 20;

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

impl RemoteTableConfig {
    /// The backend, when exactly one is declared (as `validate` requires).
    pub fn backend(&self) -> Option<BackendConfig<'_>> {
        let declared = [
            self.mysql.as_ref().map(BackendConfig::MySql),
            self.http.as_ref().map(BackendConfig::Http),
            self.tributary.as_ref().map(BackendConfig::Tributary),
        ];
        let mut declared = declared.into_iter().flatten();
        match (declared.next(), declared.next()) {
            (Some(backend), None) => Some(backend),
            _ => None,
        }
    }

    /// Key columns, in key order.
    pub fn key_columns(&self) -> &[String] {
        match self.backend() {
            Some(BackendConfig::MySql(m)) => &m.key,
            Some(BackendConfig::Http(h)) => &h.key,
            Some(BackendConfig::Tributary(t)) => &t.key,
            None => &[],
        }
    }

    fn validate(&self, i: usize) -> Result<(), ConfigError> {
        let at = |field: &str| format!("remote[{i}].{field}");
        tributary_config::check_name(at("name"), &self.name)?;
        match self.backend() {
            Some(BackendConfig::MySql(_)) => {}
            Some(BackendConfig::Tributary(t)) => {
                if !(t.endpoint.starts_with("http://") || t.endpoint.starts_with("https://")) {
                    return Err(ConfigError::new(
                        at("tributary.endpoint"),
                        "must be an http:// or https:// URL",
                    ));
                }
                if t.key.is_empty() {
                    return Err(ConfigError::new(
                        at("tributary.key"),
                        "name the key columns",
                    ));
                }
                return self.validate_layers(i);
            }
            Some(BackendConfig::Http(h)) => {
                if !h.url.starts_with("http://") {
                    return Err(ConfigError::new(
                        at("http.url"),
                        "must be an http:// URL template",
                    ));
                }
                if let Some(k) = h.key.iter().find(|k| !h.url.contains(&format!("{{{k}}}"))) {
                    return Err(ConfigError::new(
                        at("http.url"),
                        format!("must name the key column {k:?} as {{{k}}}"),
                    ));
                }
                if h.key.is_empty() {
                    return Err(ConfigError::new(at("http.key"), "name the key columns"));
                }
                return self.validate_layers(i);
            }
            None => {
                return Err(ConfigError::new(
                    at("name"),
                    "declare exactly one backend: mysql, http or tributary",
                ));
            }
        }
        let m = self.mysql.as_ref().expect("matched above");
        if !m.url.starts_with("mysql://") {
            return Err(ConfigError::new(at("mysql.url"), "must be a mysql:// URL"));
        }
        if m.table.split('.').count() != 2 || m.table.split('.').any(str::is_empty) {
            return Err(ConfigError::new(
                at("mysql.table"),
                format!("{:?} must be db.table", m.table),
            ));
        }
        if m.key.is_empty() {
            return Err(ConfigError::new(at("mysql.key"), "name the key columns"));
        }
        if let Some(columns) = &m.columns
            && let Some(k) = m.key.iter().find(|k| !columns.contains(k))
        {
            return Err(ConfigError::new(
                at("mysql.columns"),
                format!("must include the key column {k:?}"),
            ));
        }
        self.validate_layers(i)
    }

    fn validate_layers(&self, i: usize) -> Result<(), ConfigError> {
        let at = |field: &str| format!("remote[{i}].{field}");
        let positive = [
            ("timeout_ms", self.timeout_ms),
            ("batch.max_keys", self.batch.max_keys as u64),
            ("breaker.failures", u64::from(self.breaker.failures)),
            ("breaker.open_s", self.breaker.open_s),
        ];
        if let Some(l) = &self.rate_limit {
            if l.per_second == 0 || l.burst == 0 {
                return Err(ConfigError::new(
                    at("rate_limit"),
                    "per_second and burst must be at least 1",
                ));
            }
            if !(l.floor > 0.0 && l.floor <= 1.0) {
                return Err(ConfigError::new(
                    at("rate_limit.floor"),
                    format!("must be a fraction in (0, 1], not {}", l.floor),
                ));
            }
            if let Some(group) = &l.budget_group {
                tributary_config::check_name(at("rate_limit.budget_group"), group)?;
            }
        }
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::new(at(field), "must be at least 1"));
            }
        }
        Ok(())
    }
}

impl VersionedConfig {
    fn validate(&self, at: &str, mode: TableMode) -> Result<(), ConfigError> {
        if mode == TableMode::Global {
            return Err(ConfigError::new(
                at,
                "applies to partitioned tables only: a global table's partitions may hold \
                 versions of one key that it cannot order",
            ));
        }
        if self.history.is_zero() {
            return Err(ConfigError::new(
                format!("{at}.history"),
                "must be longer than zero",
            ));
        }
        if self.column.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err(ConfigError::new(
                format!("{at}.column"),
                "name a column, or leave it out for source.ts_ms",
            ));
        }
        if self.unit.is_some() && self.column.is_none() {
            return Err(ConfigError::new(
                format!("{at}.unit"),
                "applies to a time column only (source.ts_ms is in milliseconds)",
            ));
        }
        Ok(())
    }
}

impl TablesConfig {
    /// Bytes of rows the store keeps derived from their stored bytes: in the
    /// lookup API's encoding (`grpc.row_cache_mb`, with a `grpc` section),
    /// and as jobs' joins read them (`join_row_cache_mb`).
    pub fn derived_rows_bytes(&self) -> (u64, u64) {
        let encoded = self.grpc.as_ref().map_or(0, |g| g.row_cache_mb as u64);
        (encoded << 20, (self.join_row_cache_mb as u64) << 20)
    }

    /// Reads, interpolates, parses and validates a file that declares tables
    /// of its own (to run or serve them).
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let config: Self = tributary_config::load(path)?;
        if config.tables.is_empty() && config.remote.is_empty() {
            return Err(ConfigError::new(
                "tables",
                "declare at least one table (tables: local, remote: remote)",
            ));
        }
        Ok(config)
    }

    /// Loads the tables config `file` that `referrer` (a job file) names,
    /// relative to `referrer`'s directory; an error names both. It may
    /// declare no table when the job file's SQL declares them
    /// ([`TablesConfig::declare_tables`]).
    pub fn load_referenced(
        referrer: &std::path::Path,
        file: &std::path::Path,
    ) -> Result<Self, ConfigError> {
        let file = referrer
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join(file);
        tributary_config::load(&file).map_err(|e: ConfigError| {
            ConfigError::new(
                format!("tables ({}): {}", file.display(), e.field),
                e.problem,
            )
        })
    }

    /// The names of every table, local and remote.
    pub fn names(&self) -> Vec<&str> {
        let local = self.tables.iter().map(|t| t.name.as_str());
        local
            .chain(self.remote.iter().map(|r| r.name.as_str()))
            .collect()
    }

    /// The key columns of every table that declares them (remote tables
    /// always do; local ones with `key:`).
    pub fn keys(&self) -> HashMap<String, Vec<String>> {
        let local = self
            .tables
            .iter()
            .filter_map(|t| Some((t.name.clone(), t.key.clone()?)));
        let remote = self
            .remote
            .iter()
            .map(|r| (r.name.clone(), r.key_columns().to_vec()));
        local.chain(remote).collect()
    }

    /// Adds the tables a SQL job file declares with their settings (`CREATE
    /// TABLE name (PRIMARY KEY (…)) WITH (topic = …)`: `entry` holds what the
    /// file's entry for it would), and declares the key of those it only
    /// names (an empty `entry`), for them to check against their data. Returns
    /// every table's key then known ([`TablesConfig::keys`]).
    pub fn declare_tables<'d>(
        &mut self,
        declared: impl IntoIterator<Item = (&'d str, &'d [String], &'d Map<String, Value>)>,
    ) -> Result<HashMap<String, Vec<String>>, ConfigError> {
        for (name, key, entry) in declared {
            let field = format!("CREATE TABLE {name}");
            if entry.is_empty() {
                if let Some(table) = self.tables.iter_mut().find(|t| t.name == name)
                    && table.key.is_none()
                {
                    table.key = Some(key.to_vec());
                }
                continue;
            }
            let mut entry = entry.clone();
            entry.insert("name".into(), Value::from(name));
            let backend = ["mysql", "http", "tributary"]
                .into_iter()
                .find(|b| entry.contains_key(*b));
            // The key goes where the entry keeps it: a remote backend's `key`,
            // a local table's `key`.
            let keyed = match backend {
                Some(backend) => entry.get_mut(backend).and_then(Value::as_object_mut),
                None => Some(&mut entry),
            };
            if let Some(keyed) = keyed
                && !key.is_empty()
                && keyed
                    .insert("key".into(), Value::from(key.to_vec()))
                    .is_some()
            {
                return Err(ConfigError::new(
                    field,
                    "the key is the PRIMARY KEY (…): no `key` option",
                ));
            }
            let entry = Value::Object(entry);
            let problem = |e: serde_json::Error| ConfigError::new(&field, e.to_string());
            match backend {
                Some(_) => self
                    .remote
                    .push(serde_json::from_value(entry).map_err(problem)?),
                None => self
                    .tables
                    .push(serde_json::from_value(entry).map_err(problem)?),
            }
        }
        self.validate()?;
        Ok(self.keys())
    }

    /// The names of the local tables that keep history (`versioned`).
    pub fn versioned_names(&self) -> Vec<&str> {
        let versioned = self.tables.iter().filter(|t| t.versioned.is_some());
        versioned.map(|t| t.name.as_str()).collect()
    }

    /// Whether anything here uses Kafka: local tables, a remote table
    /// invalidated from a change topic, or one whose rate limit is shared.
    pub fn uses_kafka(&self) -> bool {
        !self.tables.is_empty()
            || self.remote.iter().any(|r| {
                r.invalidate_from.is_some()
                    || r.rate_limit
                        .as_ref()
                        .is_some_and(|l| l.budget_group.is_some())
            })
    }

    /// Parses and validates text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        tributary_config::parse(text)
    }
}

impl Validate for TablesConfig {
    /// Checks what serde cannot.
    fn validate(&self) -> Result<(), ConfigError> {
        self.metrics.validate("metrics")?;
        self.kafka.validate("kafka")?;
        if self.group_id.trim().is_empty() {
            return Err(ConfigError::new("group_id", "must not be empty"));
        }
        let (mut names, mut topics) = (HashSet::new(), HashSet::new());
        let mut groups: HashMap<&str, &RateLimitConfig> = HashMap::new();
        for (i, r) in self.remote.iter().enumerate() {
            r.validate(i)?;
            let Some(l) = &r.rate_limit else { continue };
            let Some(group) = &l.budget_group else {
                continue;
            };
            if self.remote.iter().any(|t| &t.name == group) {
                return Err(ConfigError::new(
                    format!("remote[{i}].rate_limit.budget_group"),
                    format!(
                        "{group:?} is a remote table's name: name the group apart from the tables"
                    ),
                ));
            }
            let first = *groups.entry(group.as_str()).or_insert(l);
            if (first.per_second, first.burst, first.floor) != (l.per_second, l.burst, l.floor) {
                return Err(ConfigError::new(
                    format!("remote[{i}].rate_limit"),
                    format!(
                        "budget group {group:?} is given another per_second, burst or floor by an \
                         earlier table: tables of one group share one limit"
                    ),
                ));
            }
        }
        for (i, r) in self.remote.iter().enumerate() {
            if !names.insert(&r.name) {
                return Err(ConfigError::new(
                    format!("remote[{i}].name"),
                    format!("{:?} is declared twice", r.name),
                ));
            }
        }
        for (i, t) in self.tables.iter().enumerate() {
            tributary_config::check_name(format!("tables[{i}].name"), &t.name)?;
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
            if t.mode == TableMode::Global {
                let set = [
                    ("partitioner", t.partitioner.is_some()),
                    ("key_format", t.key_format.is_some()),
                ];
                if let Some((field, _)) = set.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::new(
                        format!("tables[{i}].{field}"),
                        "applies to partitioned tables only: a global table finds every key \
                         whatever partition it arrived on",
                    ));
                }
            }
            if let Some(v) = &t.versioned {
                v.validate(&format!("tables[{i}].versioned"), t.mode)?;
            }
            if let Some(key) = &t.key
                && (key.is_empty() || key.iter().any(|c| c.trim().is_empty()))
            {
                return Err(ConfigError::new(
                    format!("tables[{i}].key"),
                    "name the key columns, none empty (or leave it out to learn them from the \
                     first record)",
                ));
            }
        }
        if self.batch_max_records == 0 {
            return Err(ConfigError::new("batch_max_records", "must be at least 1"));
        }
        if self.batch_max_mb == 0 {
            return Err(ConfigError::new("batch_max_mb", "must be at least 1"));
        }
        let r = &self.rocksdb;
        for (field, mib, least) in [
            ("rocksdb.block_cache_mb", r.block_cache_mb, 1),
            ("rocksdb.row_cache_mb", r.row_cache_mb, 0),
            ("rocksdb.write_buffer_mb", r.write_buffer_mb, 1),
            ("join_row_cache_mb", self.join_row_cache_mb, 0),
        ] {
            if !(least..=MAX_MIB).contains(&mib) {
                return Err(ConfigError::new(
                    field,
                    format!("must be between {least} and {MAX_MIB} (MiB), not {mib}"),
                ));
            }
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
        if let Some(grpc) = &self.grpc {
            grpc.validate()?;
        }
        self.budgets.validate()
    }
}

impl BudgetsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.topic.trim().is_empty() {
            return Err(ConfigError::new("budgets.topic", "must not be empty"));
        }
        if self.publish_interval_ms < 50 {
            return Err(ConfigError::new(
                "budgets.publish_interval_ms",
                "must be at least 50",
            ));
        }
        if self.member_timeout_ms < 4 * self.publish_interval_ms {
            return Err(ConfigError::new(
                "budgets.member_timeout_ms",
                format!(
                    "must be at least four publish intervals ({} ms): a live process must \
                     not look silent",
                    4 * self.publish_interval_ms
                ),
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
        assert_eq!(c.group_id, "tributary-tables");
        assert_eq!(c.rocksdb.compression, Compression::Lz4);
        assert_eq!(c.rocksdb.row_cache_mb, 0, "no row cache unless asked for");
        let with_row_cache = GOOD.replace("tables:", "rocksdb: { row_cache_mb: 64 }\ntables:");
        let c = TablesConfig::parse(&with_row_cache).unwrap();
        assert_eq!(c.rocksdb.row_cache_mb, 64);
        assert_eq!(
            c.rocksdb.block_cache_mb, 256,
            "the others keep their defaults"
        );
        let field = |text: &str| TablesConfig::parse(text).unwrap_err().field;
        let rocksdb =
            |setting: &str| GOOD.replace("tables:", &format!("rocksdb: {{ {setting} }}\ntables:"));
        assert_eq!(
            field(&rocksdb("row_cache_mb: 99999999999")),
            "rocksdb.row_cache_mb"
        );
        assert_eq!(
            field(&rocksdb("block_cache_mb: 0")),
            "rocksdb.block_cache_mb"
        );
        assert_eq!(
            field(&rocksdb("write_buffer_mb: 0")),
            "rocksdb.write_buffer_mb"
        );
    }

    const REMOTE: &str = "
data_dir: /tmp/x
kafka: { brokers: 'b:1' }
remote:
  - name: products
    mysql: { url: 'mysql://r:pw@db:3306', table: shop.products, key: [sku], columns: [sku, title] }
    rate_limit: { per_second: 50 }
";

    #[test]
    fn remote_tables_parse_and_name_bad_fields() {
        let c = TablesConfig::parse(REMOTE).unwrap();
        let r = &c.remote[0];
        assert_eq!(r.cache.max_entries, 100_000);
        assert_eq!(r.rate_limit.as_ref().unwrap().burst, 10);
        assert_eq!(r.batch.max_keys, 100);
        let field = |text: &str| TablesConfig::parse(text).unwrap_err().field;
        assert_eq!(
            field(&REMOTE.replace("columns: [sku, title]", "columns: [title]")),
            "remote[0].mysql.columns"
        );
        assert_eq!(
            field(&REMOTE.replace("shop.products", "products")),
            "remote[0].mysql.table"
        );
        assert_eq!(
            field(&REMOTE.replace("mysql://", "http://")),
            "remote[0].mysql.url"
        );
        assert_eq!(
            field(&REMOTE.replace("per_second: 50", "per_second: 0")),
            "remote[0].rate_limit"
        );
        assert_eq!(
            field(&format!("{REMOTE}tables: [{{ name: products, topic: t }}]")),
            "tables[0].name"
        );
        assert_eq!(
            field(&REMOTE.replace("per_second: 50", "per_second: 50, floor: 0")),
            "remote[0].rate_limit.floor"
        );
        assert_eq!(
            field(&REMOTE.replace("per_second: 50", "per_second: 50, budget_group: 'a b'")),
            "remote[0].rate_limit.budget_group"
        );
        let shared = |second: &str| {
            format!(
                "{REMOTE}  - name: prices\n    http: {{ url: 'http://p/{{sku}}', key: [sku] }}\n    rate_limit: {second}\n"
            )
            .replace("per_second: 50 }", "per_second: 50, budget_group: db }")
        };
        assert!(TablesConfig::parse(&shared("{ per_second: 50, budget_group: db }")).is_ok());
        assert_eq!(
            field(
                &shared("{ per_second: 50, budget_group: db }")
                    .replace("group: db", "group: prices")
            ),
            "remote[0].rate_limit.budget_group",
            "a group is not named like a table"
        );
        assert_eq!(
            field(&shared("{ per_second: 60, budget_group: db }")),
            "remote[1].rate_limit",
            "one group, one limit"
        );
        assert_eq!(
            field(&format!(
                "{REMOTE}budgets: {{ publish_interval_ms: 500, member_timeout_ms: 1000 }}\n"
            )),
            "budgets.member_timeout_ms"
        );
        let far = "data_dir: /x\nkafka: { brokers: b }\nremote:\n  - name: far\n    tributary: { endpoint: 'http://t:50051', table: users, key: [id] }\n";
        let c = TablesConfig::parse(far).unwrap();
        assert_eq!(c.remote[0].key_columns(), ["id"]);
        assert_eq!(
            field(&far.replace("http://t", "t")),
            "remote[0].tributary.endpoint"
        );
        assert_eq!(
            field(&far.replace("key: [id]", "key: []")),
            "remote[0].tributary.key"
        );
        let two = far.replace(
            "    tributary:",
            "    http: { url: 'http://x/{id}', key: [id] }\n    tributary:",
        );
        assert_eq!(field(&two), "remote[0].name", "one backend only");
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
        assert_eq!(field(&format!("{GOOD}batch_max_mb: 0")), "batch_max_mb");
        assert_eq!(
            field(&format!("{GOOD}join_row_cache_mb: 2000000")),
            "join_row_cache_mb"
        );
    }

    #[test]
    fn versioned_tables_name_their_history_and_time() {
        let versioned = |spec: &str| {
            GOOD.replace(
                "topic: s.d.users }",
                &format!("topic: s.d.users, versioned: {spec} }}"),
            )
        };
        let c = TablesConfig::parse(&versioned("{ history: 7d }")).unwrap();
        let v = c.tables[0].versioned.as_ref().unwrap();
        assert_eq!(v.history, std::time::Duration::from_secs(7 * 86_400));
        assert_eq!((v.column.as_deref(), v.unit), (None, None));
        let c = TablesConfig::parse(&versioned("{ history: 12h, column: updated_at, unit: us }"))
            .unwrap();
        let v = c.tables[0].versioned.as_ref().unwrap();
        assert_eq!(v.column.as_deref(), Some("updated_at"));
        assert_eq!(v.unit, Some(TimeUnit::Us));
        let error = |text: &str| TablesConfig::parse(text).unwrap_err();
        let e = error(&versioned("{ history: seven days }"));
        assert_eq!(e.field, "tables[0].versioned.history");
        assert!(e.problem.contains("7d"), "{}", e.problem);
        for (spec, field) in [
            ("{ history: 0s }", "history"),
            ("{ history: 1d, unit: us }", "unit"),
            ("{ history: 1d, column: ' ' }", "column"),
            ("{ history: 1d, unit: weeks, column: c }", "unit"),
        ] {
            let at = format!("tables[0].versioned.{field}");
            assert_eq!(error(&versioned(spec)).field, at, "{spec}");
        }
        let global = GOOD.replace(
            "mode: global }",
            "mode: global, versioned: { history: 1d } }",
        );
        assert_eq!(error(&global).field, "tables[1].versioned");
    }

    #[test]
    fn tables_declared_by_a_sql_job_are_added_or_keyed() {
        let mut config = TablesConfig::parse(
            "data_dir: /x\nkafka: { brokers: b }\ntables: [{ name: users, topic: shop.users }]\n",
        )
        .unwrap();
        let entry = |json: serde_json::Value| json.as_object().unwrap().clone();
        let (id, sku) = (vec!["id".to_owned()], vec!["sku".to_owned()]);
        let (none, remote, local) = (
            Map::new(),
            entry(serde_json::json!({"mysql": {"url": "mysql://r@db", "table": "shop.products"}})),
            entry(serde_json::json!({"topic": "shop.stock", "mode": "global"})),
        );
        let keys = config
            .declare_tables([
                ("users", &id[..], &none),
                ("products", &sku[..], &remote),
                ("stock", &sku[..], &local),
            ])
            .unwrap();
        assert_eq!(
            config.tables[0].key,
            Some(id.clone()),
            "the file's table, keyed"
        );
        assert_eq!(config.remote[0].key_columns(), ["sku"]);
        assert_eq!(config.tables[1].mode, TableMode::Global);
        assert_eq!(
            (
                keys["users"].clone(),
                keys["products"].clone(),
                keys["stock"].clone()
            ),
            (id.clone(), sku.clone(), sku.clone())
        );
        let field = |declared: serde_json::Value| {
            let mut config = config.clone();
            let declared = entry(declared);
            config
                .declare_tables([("more", &sku[..], &declared)])
                .unwrap_err()
                .to_string()
        };
        assert!(field(serde_json::json!({"topic": "shop.stock"})).contains("feeds two tables"));
        assert!(
            field(serde_json::json!({"topc": "t"}))
                .contains("CREATE TABLE more: unknown field `topc`")
        );
        assert!(field(serde_json::json!({"topic": "t", "key": ["x"]})).contains("no `key` option"));
    }
}
