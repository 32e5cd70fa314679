//! What capture streams from: the [`ChangeStream`] seam. A source database's
//! replication stream, turned into ordered [`ReaderItem`]s (changes, then the
//! commit position of their transaction): the binlog in production
//! ([`crate::binlog_reader::BinlogReader`]); [`crate::memory::MemoryStream`]
//! in tests.

use std::future::Future;

use crate::error::CaptureError;
use crate::event_decoder::ReaderItem;

/// An ordered stream of change items from a source database.
pub trait ChangeStream: Send {
    /// The next item; `None` when the source ended the stream.
    fn next(&mut self) -> impl Future<Output = Result<Option<ReaderItem>, CaptureError>> + Send;

    /// Ends the stream and what it holds open.
    fn close(self) -> impl Future<Output = ()> + Send;
}
