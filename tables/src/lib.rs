//! Tributary tables: state you can look up in microseconds instead of calling a database.
//!
//! Every table answers the [`Table`](tributary_table_api::Table) trait of
//! `tributary-table-api`, and passes its conformance suite (`conformance_tests`).
//!
//! - [`record_key`]: record keys normalised (whitespace, member order, schema
//!   wrappers, quoted integers) and written back as their producer wrote them.
//! - [`store`]: the RocksDB store: one column family per (table, partition), offsets
//!   written in the same batch as the rows; [`global_rows`]: the one keyspace of
//!   a global table and which partition owns each key; `history`: the
//!   versions a `versioned` table keeps for reads as of a time.
//! - [`partition_check`]: whether a topic's records sit where a partitioned
//!   table's partitioner puts them (startup sample, `validate --connect`).
//! - [`materializer`]: follows change topics into the store, resuming from stored offsets;
//!   `apply` is what one change record does to the store.
//! - [`follower`]: partitions of partitioned tables chosen by an owner (an enricher job).
//! - [`job_tables`]: [`JobTables`], the tables enricher jobs join, started together.
//! - [`progress`]: held partitions and readiness; [`applied_log`]: how far
//!   each has applied its source's log (GTIDs, PostgreSQL WAL positions).
//! - [`local_table`]: [`LocalTable`], a [`Table`] over the store;
//!   [`derived_rows`]: rows kept converted in front of it (encoded for the
//!   lookup API, as jobs' joins read them), never older than the store's.
//! - [`checkpoint`]: consistent, incremental checkpoints and restore.
//! - [`config`], [`error`], [`metrics`]; `announce`: a compacted topic where
//!   instances announce their state to each other (routing, shared rate limits).
//!
//! - [`grpc`]: the gRPC lookup API over local and remote tables (routing between
//!   instances, read-your-position, TLS and tokens).
//! - [`remote`]: remote tables (MySQL/MariaDB, HTTP JSON, another instance's
//!   lookup API) behind a cache, batching, a rate limit, timeouts, retries and
//!   a circuit breaker, with CDC invalidation.

mod announce;
pub mod applied_log;
mod apply;
pub mod checkpoint;
pub mod config;
#[cfg(test)]
mod conformance_tests;
pub mod derived_rows;
pub mod error;
pub mod follower;
pub mod global_rows;
pub mod grpc;
mod history;
mod history_readers;
pub mod job_tables;
pub mod local_table;
pub mod materializer;
pub mod metrics;
pub mod partition_check;
pub mod progress;
pub mod record_key;
pub mod remote;
pub mod store;
mod unavailable_fill;

pub use config::TablesConfig;
pub use error::TableError;
pub use follower::Follower;
pub use job_tables::JobTables;
pub use local_table::LocalTable;
pub use metrics::TablesMetrics;
