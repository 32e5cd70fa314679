//! What capture streams from: the [`ChangeStream`] seam. A source database's
//! replication stream, turned into ordered [`ReaderItem`]s (changes, then the
//! commit position of their transaction): the binlog in production
//! ([`crate::binlog_reader::BinlogReader`]); [`crate::memory::MemoryStream`]
//! in tests. Positions are the source's own ([`SourcePosition`]).

use std::future::Future;

use crate::schema_change_record::DescribedChange;

use tributary_proto::ChangeEvent;

use crate::error::CaptureError;
use crate::record_encoder::EncodedRecord;
use crate::source_position::SourcePosition;

/// What a change stream yields, `P` being the source's positions.
#[derive(Debug, Clone)]
pub enum ReaderItem<P> {
    /// One row change.
    Change(Box<ChangeEvent>),
    /// A transaction committed: everything before this is complete, resume from here.
    Commit(P),
    /// A DDL statement: the schema-history topic records it when `recorded`.
    SchemaChange(Box<SchemaChange<P>>),
    /// The server is idle; the position between transactions, for the heartbeat topic.
    Heartbeat(P),
}

/// A DDL statement and where it is in the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaChange<P> {
    /// The statement's default database (may be empty).
    pub db: String,
    /// The statement as the server logged it.
    pub ddl: String,
    /// The position after the statement.
    pub position: P,
    /// Whether the schema history keeps it: its default database may hold
    /// captured tables, or it has none (the statement names its tables).
    pub recorded: bool,
    /// What Debezium's schema change topic records of it
    /// (`events.schema.changes.format: debezium`), else `None`.
    pub described: Option<DescribedChange>,
}

/// An ordered stream of change items from a source database.
pub trait ChangeStream: Send {
    /// The source's positions.
    type Position: SourcePosition;

    /// The next item; `None` when the source ended the stream.
    fn next(
        &mut self,
    ) -> impl Future<Output = Result<Option<ReaderItem<Self::Position>>, CaptureError>> + Send;

    /// The next item if the stream holds it already, without waiting (a row
    /// of an event decoded earlier, an item read ahead); `None` says only
    /// that [`Self::next`] is needed. For the many rows of one event it saves
    /// making `next`'s future, which has room for reading and decoding.
    fn ready(&mut self) -> Option<ReaderItem<Self::Position>> {
        None
    }

    /// Ends the stream and what it holds open.
    fn close(self) -> impl Future<Output = ()> + Send;

    /// The record of the change [`Self::next`] or [`Self::ready`] returned
    /// last, if the stream encoded it ahead (capture's read-ahead, given an
    /// encoder); taken once.
    fn take_encoded(&mut self) -> Option<EncodedRecord> {
        None
    }
}
