//! PostgreSQL as a capture source: logical replication with the `pgoutput`
//! plugin. The server and its sessions ([`server`]), its log positions
//! ([`wal_position`], over [`tributary_proto::lsn`]), its messages ([`pgoutput`]), what is read from
//! the catalog ([`catalog`]), column types ([`pg_type`]), values from their
//! text form ([`text_value`]), column defaults ([`pg_default`]), tables with
//! their rows decoded ([`pg_table`]);
//! the initial snapshot ([`pg_snapshot`]), on-demand snapshot chunks
//! ([`pg_chunks`]), both read under an [`exported_snapshot`] as
//! [`table_read`] reads tables, and the stream ([`wal_stream`]).

pub mod catalog;
pub(crate) mod exported_snapshot;
pub(crate) mod pg_chunks;
pub(crate) mod pg_default;
pub(crate) mod pg_snapshot;
pub mod pg_table;
pub mod pg_type;
pub mod pgoutput;
pub mod server;
pub(crate) mod table_read;
pub mod text_value;
pub mod wal_position;
pub mod wal_stream;

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
