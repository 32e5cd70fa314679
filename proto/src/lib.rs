//! Tributary's wire formats, free of I/O.
//!
//! - [`config_text`]: YAML configuration with `${ENV}` interpolation and field-naming errors.
//! - [`value`]: typed column values as capture decodes them from the binlog.
//! - [`envelope`]: the change event ([`ChangeEvent`], [`Op`], [`SourceInfo`]).
//! - [`debezium_json`]: the Debezium-compatible JSON codec for keys and envelopes.
//! - [`partition`]: Kafka's murmur2 partitioner, so Java clients and Tributary agree.
//! - [`lag_eval`]: Burrow-style OK/WARN/STALLED/STOPPED over a window of observations.
//! - [`gtid`]: MariaDB GTIDs and the newest applied per domain (read-your-position).
//! - [`grpc`]: the gRPC lookup API `tributary.v1` (generated) and its JSON mapping.
//! - [`watchdog`]: a pipeline with work to do and no progress past a threshold is stuck.

pub mod config_text;
pub mod debezium_json;
pub mod envelope;
pub mod error;
pub mod grpc;
pub mod gtid;
pub mod lag_eval;
pub mod partition;
pub mod value;
pub mod watchdog;

pub use envelope::{ChangeEvent, Op, Row, SnapshotMarker, SourceInfo, TransactionInfo};
pub use error::CodecError;
pub use value::Value;
