//! Table errors.

/// Everything a table operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] tributary_config::ConfigError),
    /// RocksDB failed.
    #[error("rocksdb: {0}")]
    Storage(#[from] rocksdb::Error),
    /// Kafka failed.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A Kafka client could not be built, or the cluster could not be reached.
    #[error(transparent)]
    KafkaClient(#[from] tributary_kafka::ClientError),
    /// A lookup failed.
    #[error(transparent)]
    Lookup(#[from] tributary_table_api::LookupError),
    /// A remote table's backend cannot be built from its settings.
    #[error("table {table}: {problem}")]
    Backend {
        /// Table name.
        table: String,
        /// What is wrong.
        problem: String,
    },
    /// A file operation (checkpoints) failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The table is not known here.
    #[error("no table named {0}")]
    UnknownTable(String),
    /// The lookup API cannot start or stopped.
    #[error("lookup API: {0}")]
    Api(String),
    /// A partitioned table's topic was not written with its partitioner and key
    /// format (lookups would miss rows).
    #[error("table {table}: {problem}")]
    Partitioning {
        /// Table name.
        table: String,
        /// What disagrees, and the settings that would fit.
        problem: String,
    },
    /// A record keyed by other columns than the table's declared key (joins
    /// were checked against the declared key: the table stops rather than
    /// answer them wrongly).
    #[error(
        "table {table}: the record at partition {partition} offset {offset} is keyed by \
         {found:?}, not by the declared key {declared:?}: fix the declared key (tables \
         config `key:`, or the SQL job's CREATE TABLE … PRIMARY KEY) or the topic's keys"
    )]
    KeyMismatch {
        /// Table name.
        table: String,
        /// Partition of the record.
        partition: i32,
        /// Offset of the record.
        offset: i64,
        /// The declared key columns.
        declared: Vec<String>,
        /// The record's key columns.
        found: Vec<String>,
    },
    /// A stored value is not what the materializer writes.
    #[error("table {table}: corrupt stored value: {problem}")]
    Corrupt {
        /// Table name.
        table: String,
        /// What is wrong.
        problem: String,
    },
}
