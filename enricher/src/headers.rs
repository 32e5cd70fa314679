//! Header names of the records a job writes: outputs, dead letters and retries.

/// Input topic of the event.
pub const SOURCE_TOPIC: &str = "tributary.source.topic";
/// Input partition of the event.
pub const SOURCE_PARTITION: &str = "tributary.source.partition";
/// Input offset of the event.
pub const SOURCE_OFFSET: &str = "tributary.source.offset";
/// Job that wrote the record.
pub const JOB: &str = "tributary.job";
/// Why a dead letter could not be enriched.
pub const ERROR: &str = "tributary.error";
