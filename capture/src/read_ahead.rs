//! Reading the change stream ahead of the writer, on a task of its own: the
//! next events are decoded while the previous ones are encoded and produced,
//! so the two use two cores.
//!
//! Items keep their order and come in batches of the items the source had
//! ready (one channel message per batch, not per event; a quiet stream sends
//! each item at once). At most [`BATCHES`] batches of [`BATCH`] items wait, so
//! a slow writer slows the reader. Items read ahead but not taken when
//! capture stops are dropped: no position past them was stored, so the next
//! start reads them again.

use std::pin::pin;
use std::task::Poll;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::change_stream::{ChangeStream, ReaderItem};
use crate::error::CaptureError;

/// Items per batch, at most.
const BATCH: usize = 64;
/// Batches waiting for the writer, at most.
const BATCHES: usize = 2;

/// What the reading task hands over.
enum Read<P> {
    Items(Vec<ReaderItem<P>>),
    /// The source ended the stream.
    End,
    Failed(CaptureError),
}

/// A [`ChangeStream`] read ahead by a task of its own.
pub(crate) struct ReadAhead<R: ChangeStream> {
    reads: mpsc::Receiver<Read<R::Position>>,
    batch: std::vec::IntoIter<ReaderItem<R::Position>>,
    stop: CancellationToken,
    task: JoinHandle<R>,
}

impl<R> ReadAhead<R>
where
    R: ChangeStream + 'static,
{
    /// Starts reading `reader` ahead.
    pub(crate) fn start(reader: R) -> Self {
        let (tx, reads) = mpsc::channel(BATCHES);
        let stop = CancellationToken::new();
        ReadAhead {
            reads,
            batch: Vec::new().into_iter(),
            task: tokio::spawn(read(reader, tx, stop.clone())),
            stop,
        }
    }
}

impl<R> ChangeStream for ReadAhead<R>
where
    R: ChangeStream + 'static,
{
    type Position = R::Position;

    async fn next(&mut self) -> Result<Option<ReaderItem<Self::Position>>, CaptureError> {
        loop {
            if let Some(item) = self.batch.next() {
                return Ok(Some(item));
            }
            match self.reads.recv().await {
                Some(Read::Items(items)) => self.batch = items.into_iter(),
                Some(Read::End) => return Ok(None),
                Some(Read::Failed(e)) => return Err(e),
                None => unreachable!("the reading task runs until `close` or after its last word"),
            }
        }
    }

    async fn close(self) {
        self.stop.cancel();
        drop(self.reads);
        let reader = self.task.await.expect("the read-ahead task does not panic");
        reader.close().await;
    }
}

/// The reading task: sends what `reader` has ready, batch by batch, until the
/// stream ends or fails (then it waits for `stop`), or until `stop`; returns
/// the reader for closing.
async fn read<R: ChangeStream>(
    mut reader: R,
    tx: mpsc::Sender<Read<R::Position>>,
    stop: CancellationToken,
) -> R {
    let mut batch = Vec::with_capacity(BATCH);
    let last = loop {
        let item = {
            // A read in progress is never dropped half way: it is awaited to its end.
            let mut next = pin!(reader.next());
            let mut ready = None;
            if !batch.is_empty() {
                if batch.len() < BATCH
                    && let Poll::Ready(item) = futures::poll!(next.as_mut())
                {
                    ready = Some(item);
                }
                if ready.is_none() {
                    let items = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    if !send(&tx, &stop, Read::Items(items)).await {
                        break None;
                    }
                }
            }
            match ready {
                Some(item) => item,
                None => tokio::select! {
                    biased;
                    _ = stop.cancelled() => break None,
                    item = next => item,
                },
            }
        };
        match item {
            Ok(Some(item)) => batch.push(item),
            Ok(None) => break Some(Read::End),
            Err(e) => break Some(Read::Failed(e)),
        }
    };
    if let Some(last) = last {
        if !batch.is_empty() && !send(&tx, &stop, Read::Items(batch)).await {
            return reader;
        }
        if send(&tx, &stop, last).await {
            stop.cancelled().await;
        }
    }
    reader
}

/// Sends `read`, waiting for room; false if `stop` came first or the
/// receiver is gone.
async fn send<P>(tx: &mpsc::Sender<Read<P>>, stop: &CancellationToken, read: Read<P>) -> bool {
    tokio::select! {
        biased;
        _ = stop.cancelled() => false,
        sent = tx.send(read) => sent.is_ok(),
    }
}
