//! Positions in a source's change stream, opaque to capture's rules: the
//! [`SourcePosition`] trait every source's position implements (MySQL's binlog
//! file, offset and GTID state, [`crate::position::BinlogPosition`]; the
//! memory database's commit counter in tests), and [`CapturePosition`], a
//! source position with capture's own state, which is what is stored.
//!
//! Capture's rules only compare positions (has the stream reached a chunk's
//! read point? did a transaction commit after it?), so a new source brings
//! its own position type and the snapshot, streaming and merge rules stay as
//! they are.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tributary_proto::SourceInfo;

use crate::incremental_state::IncrementalState;

/// A position in a source's change stream, after a committed transaction or
/// between two (a consistent read's point).
pub trait SourcePosition:
    Clone + fmt::Debug + fmt::Display + PartialEq + Send + Sync + Serialize + DeserializeOwned + 'static
{
    /// Whether this position is at or after `other`. When the two cannot be
    /// ordered, the answer lets data go (callers release with it data that is
    /// safe to send early and wrong to send late).
    fn reached(&self, other: &Self) -> bool;

    /// Whether this position is after `other`; true when the two cannot be
    /// ordered (the cautious answer for callers that discard data older than
    /// `other`).
    fn is_after(&self, other: &Self) -> bool;

    /// Whether the same transactions are behind both positions, whatever else
    /// lies between them; false when that cannot be known.
    fn same_transactions(&self, other: &Self) -> bool;

    /// The commit time on the source of the transaction that ends here, in
    /// milliseconds since the epoch; 0 when unknown.
    fn ts_ms(&self) -> i64;

    /// Writes this position into an event's `source` block (for MySQL,
    /// Debezium's `file`, `pos` and `gtid`).
    fn mark_source(&self, source: &mut SourceInfo);

    /// This position as the schema-history and heartbeat records show it.
    fn to_json(&self) -> serde_json::Value;
}

/// Where capture is: a source position, and what capture was doing there
/// (a snapshot not yet complete, on-demand snapshots in progress). Stored as
/// one JSON object: the source position's fields and capture's beside them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturePosition<P> {
    /// The source's position.
    #[serde(flatten)]
    pub source: P,
    /// Stored when a snapshot starts, at the snapshot's position: until the snapshot
    /// completes, a restart snapshots again and then streams from here, so that rows
    /// the interrupted snapshot already sent but that were deleted since are deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub snapshot_incomplete: bool,
    /// The on-demand snapshots still to finish, stored with the position so a
    /// restart goes on with the next chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<IncrementalState>,
}

impl<P> CapturePosition<P> {
    /// `source`, with nothing in progress.
    pub fn at(source: P) -> Self {
        CapturePosition {
            source,
            snapshot_incomplete: false,
            incremental: None,
        }
    }
}

impl<P: fmt::Display> fmt::Display for CapturePosition<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.source.fmt(f)
    }
}
