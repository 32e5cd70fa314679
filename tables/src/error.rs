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
    /// A lookup key does not fit the table's key.
    #[error("bad key for table {table}: {problem}")]
    BadKey {
        /// Table name.
        table: String,
        /// What is wrong with the key.
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
    /// The key's partition is not held by this instance.
    #[error("table {table}: partition {partition} is not held by this instance")]
    NotOwned {
        /// Table name.
        table: String,
        /// The key's partition.
        partition: i32,
    },
    /// A remote table's backend could not answer.
    #[error("table {table}: {problem}")]
    Remote {
        /// Table name.
        table: String,
        /// What failed (breaker open, rate limit, backend error).
        problem: String,
    },
    /// The table cannot do this.
    #[error("table {table}: {operation} is not supported")]
    Unsupported {
        /// Table name.
        table: String,
        /// The operation.
        operation: &'static str,
    },
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
    /// A stored value is not what the materializer writes.
    #[error("table {table}: corrupt stored value: {problem}")]
    Corrupt {
        /// Table name.
        table: String,
        /// What is wrong.
        problem: String,
    },
}
