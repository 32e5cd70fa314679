//! A [`ChunkSource`] for sources whose tables cannot be snapshotted on
//! demand yet (PostgreSQL: its chunks need watermarks in the WAL). The
//! configuration refuses a signal table for them, so no request is read;
//! one resumed from a stored position is dropped with a warning.

use std::marker::PhantomData;

use tracing::warn;
use tributary_proto::SourceInfo;

use crate::chunk_source::{Begun, ChunkRead, ChunkSource, OpenedTable};
use crate::error::CaptureError;
use crate::incremental_state::KeyCursor;
use crate::source_position::SourcePosition;

/// Opens no table.
pub(crate) struct Unavailable<P>(PhantomData<P>);

impl<P> Default for Unavailable<P> {
    fn default() -> Self {
        Unavailable(PhantomData)
    }
}

impl<P: SourcePosition> ChunkSource for Unavailable<P> {
    type Position = P;

    async fn open(&mut self, name: &str) -> Result<Option<OpenedTable>, CaptureError> {
        warn!(
            table = name,
            "on-demand snapshots are not available for this source: request dropped"
        );
        Ok(None)
    }

    async fn begin(&mut self) -> Result<Begun<P>, CaptureError> {
        Ok(Begun::Skip)
    }

    async fn read(
        &mut self,
        _after: Option<&KeyCursor>,
        _point: &P,
        _source: &SourceInfo,
    ) -> Result<ChunkRead, CaptureError> {
        Ok(ChunkRead::Dropped)
    }

    async fn abort(&mut self) -> Result<(), CaptureError> {
        Ok(())
    }

    fn close_table(&mut self) {}
}
