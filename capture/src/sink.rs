//! Where capture's changes go: the [`ChangeSink`] seam. Kafka in production
//! ([`crate::kafka_writer::KafkaWriter`]); [`crate::memory::MemorySink`] in
//! tests, which records what was sent and which positions were committed, in
//! order, so the streaming, snapshot and restart rules can be checked in-process.
//!
//! A sink takes the positions of one kind of source, `P` (stored with
//! capture's state as [`CapturePosition`]s). The contract every sink keeps: a
//! position passed to [`ChangeSink::commit`]
//! is stored only once every change sent before it is safe, and a restart
//! resumes from the last stored position (so changes after it may be sent
//! again, never skipped).

use std::future::Future;
use std::time::Duration;

use tributary_proto::ChangeEvent;

use crate::change_stream::SchemaChange;
use crate::error::CaptureError;
use crate::record_encoder::EncodedRecord;
use crate::source_position::{CapturePosition, SourcePosition};

/// Where change events, schema changes and positions of a source with
/// positions `P` go.
pub trait ChangeSink<P: SourcePosition>: Send {
    /// The position stored by an earlier run, if any.
    fn stored_position(
        &self,
    ) -> impl Future<Output = Result<Option<CapturePosition<P>>, CaptureError>> + Send;

    /// Queues one change event.
    fn send(
        &mut self,
        event: &ChangeEvent,
    ) -> impl Future<Output = Result<(), CaptureError>> + Send;

    /// Queues one change event whose record was encoded ahead, by the task
    /// that reads the stream ahead of the sink; a sink that writes its own
    /// records sends the event as [`Self::send`] does.
    fn send_encoded(
        &mut self,
        event: &ChangeEvent,
        encoded: EncodedRecord,
    ) -> impl Future<Output = Result<(), CaptureError>> + Send {
        drop(encoded);
        self.send(event)
    }

    /// Records a DDL statement (the schema history).
    fn send_schema_change(
        &mut self,
        change: &SchemaChange<P>,
    ) -> impl Future<Output = Result<(), CaptureError>> + Send;

    /// Records that the source is alive at `position`, and commits it.
    fn send_heartbeat(
        &mut self,
        position: CapturePosition<P>,
    ) -> impl Future<Output = Result<(), CaptureError>> + Send;

    /// A source transaction ended at `position`: stored once everything sent
    /// before it is safe.
    fn commit(
        &mut self,
        position: CapturePosition<P>,
    ) -> impl Future<Output = Result<(), CaptureError>> + Send;

    /// How often [`ChangeSink::commit_if_due`] should be called between source
    /// transactions; `None` when commits are never held back.
    fn commit_interval(&self) -> Option<Duration>;

    /// Completes commits held back until an interval passed (Kafka transactions).
    fn commit_if_due(&mut self) -> impl Future<Output = Result<(), CaptureError>> + Send;

    /// Stores `position` at once, before anything else is sent (the start of a snapshot).
    fn store_now(
        &mut self,
        position: &CapturePosition<P>,
    ) -> impl Future<Output = Result<(), CaptureError>> + Send;

    /// Waits up to `timeout` for what is in flight and stores the last safe
    /// position; after a failure, nothing unfinished is committed.
    fn close(
        self,
        timeout: Duration,
        failed: bool,
    ) -> impl Future<Output = Result<(), CaptureError>> + Send;
}
