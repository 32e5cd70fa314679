//! Tributary's wire formats, free of I/O.
//!
//! - [`value`]: typed column values as capture decodes them from the binlog.
//! - [`envelope`]: the change event ([`ChangeEvent`], [`Op`], [`SourceInfo`]).
//! - [`debezium_json`]: the Debezium-compatible JSON codec for keys and envelopes.
//! - [`partition`]: Kafka's murmur2 partitioner, so Java clients and Tributary agree.
//! - [`json_number`]: doubles in JSON, compact or as Java writes them.
//! - [`event_time`]: times in events and rows (numbers in a unit, UTC texts) as microseconds.
//! - [`gtid`]: MariaDB GTIDs and the newest applied per domain (read-your-position).
//! - [`unavailable`]: Debezium's placeholder for values the source did not send.
//! - [`grpc`]: the gRPC lookup API `tributary.v1` (generated) and its JSON mapping.

pub mod crypto_provider;
pub mod debezium_json;
pub mod envelope;
pub mod error;
pub mod event_time;
pub mod grpc;
pub mod gtid;
pub mod json_number;
mod json_writer;
pub mod lsn;
pub mod partition;
pub mod unavailable;
pub mod value;

pub use envelope::{
    BinlogCoordinates, ChangeEvent, KeyChange, LogCoordinates, Op, RecordSchemas, Row,
    SnapshotMarker, SourceInfo, TransactionInfo, WalCoordinates,
};
pub use error::CodecError;
pub use value::{Geometry, Value};
