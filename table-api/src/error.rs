//! [`LookupError`]: what a lookup through the [`Table`](crate::Table) interface
//! can fail with, whatever holds the rows.

/// Why a table could not answer a lookup or a scan.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// A lookup key does not fit the table's key.
    #[error("bad key for table {table}: {problem}")]
    BadKey {
        /// Table name.
        table: String,
        /// What is wrong with the key.
        problem: String,
    },
    /// The key's partition is not held by this instance.
    #[error("table {table}: partition {partition} is not held by this instance")]
    NotOwned {
        /// Table name.
        table: String,
        /// The key's partition.
        partition: i32,
    },
    /// The store behind the table cannot answer now (a remote table's backend
    /// failed, its breaker is open, its rate limit is spent): trying later may work.
    #[error("table {table}: {problem}")]
    Unavailable {
        /// Table name.
        table: String,
        /// What failed.
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
    /// A stored value is not what the table writes.
    #[error("table {table}: corrupt stored value: {problem}")]
    Corrupt {
        /// Table name.
        table: String,
        /// What is wrong.
        problem: String,
    },
    /// The local store failed.
    #[error("table {table}: {source}")]
    Storage {
        /// Table name.
        table: String,
        /// The store's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
