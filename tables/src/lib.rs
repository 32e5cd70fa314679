//! Tributary tables: state you can look up in microseconds instead of calling a database.
//!
//! - [`table`]: the [`Table`] trait every table answers (get, multi-get, scan, describe).
//! - [`key_codec`]: the order-preserving key encoding that makes prefix scans meaningful.
//! - [`record_key`]: record keys normalised (whitespace, member order, schema
//!   wrappers, quoted integers) and written back as their producer wrote them.
//! - [`store`]: the RocksDB store: one column family per (table, partition), offsets
//!   written in the same batch as the rows; [`global_rows`]: the one keyspace of
//!   a global table and which partition owns each key.
//! - [`partition_check`]: whether a topic's records sit where a partitioned
//!   table's partitioner puts them (startup sample, `validate --connect`).
//! - [`materializer`]: follows change topics into the store, resuming from stored offsets.
//! - [`follower`]: partitions of partitioned tables chosen by an owner (an enricher job).
//! - [`progress`]: held partitions and readiness.
//! - [`local_table`]: [`LocalTable`], a [`Table`] over the store.
//! - [`checkpoint`]: consistent, incremental checkpoints and restore.
//! - [`config`], [`error`], [`metrics`].
//!
//! - [`grpc`]: the gRPC lookup API over local and remote tables (routing between
//!   instances, read-your-position, TLS and tokens).
//! - [`remote`]: remote tables (MySQL/MariaDB, HTTP JSON, another instance's
//!   lookup API) behind a cache, batching, a rate limit, timeouts, retries and
//!   a circuit breaker, with CDC invalidation.

pub mod checkpoint;
pub mod config;
pub mod error;
pub mod follower;
pub mod global_rows;
pub mod grpc;
pub mod key_codec;
pub mod local_table;
pub mod materializer;
pub mod metrics;
pub mod partition_check;
pub mod progress;
pub mod record_key;
pub mod remote;
mod row_columns;
pub mod store;
pub mod table;

pub use config::TablesConfig;
pub use error::TableError;
pub use follower::Follower;
pub use local_table::LocalTable;
pub use metrics::TablesMetrics;
pub use table::{Columns, KeyRange, Table, TableDescription};
