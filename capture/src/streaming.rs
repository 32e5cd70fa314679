//! The streaming phase of capture: the items of a [`ChangeStream`] go to a
//! [`ChangeSink`] in order, each transaction's commit position after its
//! changes; on-demand snapshot chunks ([`Incremental`]) are read and sent
//! between transactions only; while the stream is idle between transactions,
//! a commit held back by the sink is completed when due.

use tokio_util::sync::CancellationToken;

use crate::change_stream::{ChangeStream, ReaderItem};
use crate::chunk_source::ChunkSource;
use crate::error::CaptureError;
use crate::incremental::Incremental;
use crate::metrics::{CaptureMetrics, Snapshotting};
use crate::sink::ChangeSink;

#[cfg(test)]
mod tests;

/// The streaming phase: items of a change stream to a sink, with on-demand
/// snapshots merged in.
pub(crate) struct Stream<'a, R: ChangeStream, W, C: ChunkSource> {
    pub(crate) reader: &'a mut R,
    pub(crate) writer: &'a mut W,
    pub(crate) incremental: &'a mut Incremental<C>,
    pub(crate) metrics: &'a CaptureMetrics,
    /// The position the stream has reached (the last commit or heartbeat).
    pub(crate) at: R::Position,
    /// A transaction's changes have been read but not its commit.
    pub(crate) in_transaction: bool,
}

impl<R, W, C> Stream<'_, R, W, C>
where
    R: ChangeStream,
    W: ChangeSink<R::Position>,
    C: ChunkSource<Position = R::Position>,
{
    /// Runs until `shutdown` or an error; `progressed` is set once a position was committed.
    pub(crate) async fn run(
        &mut self,
        shutdown: &CancellationToken,
        progressed: &mut bool,
    ) -> Result<(), CaptureError> {
        // Exactly once: an open transaction is committed when due even if the source is quiet.
        let mut commit_ticks = self.writer.commit_interval().map(tokio::time::interval);
        loop {
            // On-demand snapshot chunks are read and sent only between transactions.
            while !self.in_transaction {
                let snapshotting = Snapshotting::start(self.metrics);
                if !self.incremental.step(&self.at, self.writer).await? {
                    break;
                }
                drop(snapshotting);
                if shutdown.is_cancelled() {
                    return Ok(());
                }
            }
            let Some(item) = self.next_item(shutdown, &mut commit_ticks).await? else {
                return Ok(());
            };
            match item {
                Some(ReaderItem::Change(event)) if self.incremental.is_signal(&event) => {
                    self.in_transaction = true;
                    self.incremental.on_signal(&event);
                }
                Some(ReaderItem::Change(event)) => {
                    self.in_transaction = true;
                    self.incremental.observe(&event);
                    match self.reader.take_encoded() {
                        Some(encoded) => self.writer.send_encoded(&event, encoded).await?,
                        None => self.writer.send(&event).await?,
                    }
                    let lag = (event.ts_ms - event.source.ts_ms).max(0) as f64 / 1000.0;
                    self.metrics.last_event_lag_seconds.set(lag);
                }
                Some(ReaderItem::SchemaChange(change)) => {
                    // Any DDL, whichever default database it ran in, may change a table being snapshotted.
                    self.incremental.on_schema_change();
                    if change.recorded {
                        self.writer.send_schema_change(&change).await?;
                    }
                }
                Some(ReaderItem::Heartbeat(position)) => {
                    self.metrics.read_up_to(&position);
                    self.at = position.clone();
                    let position = self.incremental.stamp(position);
                    self.writer.send_heartbeat(position).await?;
                }
                Some(ReaderItem::Commit(position)) => {
                    self.metrics.read_up_to(&position);
                    self.in_transaction = false;
                    self.incremental.on_commit(&position, self.writer).await?;
                    self.at = position.clone();
                    let position = self.incremental.stamp(position);
                    self.writer.commit(position).await?;
                    *progressed = true;
                }
                None => {
                    return Err(CaptureError::Database(mysql_async::Error::Io(
                        mysql_async::IoError::Io(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the server ended the change stream",
                        )),
                    )));
                }
            }
        }
    }

    /// The next binlog item, or `None` on shutdown. While it is awaited, a due
    /// transaction is committed if the stream is between binlog transactions; the
    /// read itself is never cancelled half way (an event would be lost). An item
    /// the reader holds already ([`ChangeStream::ready`]) is taken without a wait.
    async fn next_item(
        &mut self,
        shutdown: &CancellationToken,
        commit_ticks: &mut Option<tokio::time::Interval>,
    ) -> Result<Option<Option<ReaderItem<R::Position>>>, CaptureError> {
        let Stream {
            reader,
            writer,
            in_transaction,
            ..
        } = self;
        // An item at hand is taken at once; a due commit waits for the next read.
        if !shutdown.is_cancelled()
            && let Some(item) = reader.ready()
        {
            return Ok(Some(Some(item)));
        }
        let mut next = std::pin::pin!(reader.next());
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(None),
                _ = tick(commit_ticks), if !*in_transaction => writer.commit_if_due().await?,
                item = &mut next => return Ok(Some(item?)),
            }
        }
    }
}

/// The next tick of `ticks`, or never without them.
async fn tick(ticks: &mut Option<tokio::time::Interval>) {
    match ticks {
        Some(ticks) => {
            ticks.tick().await;
        }
        None => std::future::pending().await,
    }
}
