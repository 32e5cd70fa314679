//! Reading the change stream ahead of the writer, on a task of its own: the
//! next events are decoded, and given an encoder their records encoded
//! ([`RecordEncoder`]), while the previous ones are produced, so the two use
//! two cores. (The writer is the stage the rest waits for.)
//!
//! Items keep their order and come in batches of the items the source had
//! ready (one channel message per batch, not per event; a quiet stream sends
//! each item at once). What waits for the writer is bounded by bytes: at most
//! [`BUDGET_KIB`] of decoded values and encoded records (and the one item
//! being weighed), so wide rows read ahead no more memory than narrow ones.
//! Items read ahead but not taken when capture stops are dropped: no position
//! past them was stored, so the next start reads them again.

use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tributary_proto::{ChangeEvent, Row, Value};

use crate::change_stream::{ChangeStream, ReaderItem};
use crate::error::CaptureError;
use crate::record_encoder::{EncodedRecord, RecordEncoder};

/// Items per batch, at most.
const BATCH: usize = 64;
/// Batches in the channel, at most (the byte budget is the real bound).
const BATCHES: usize = 4;
/// KiB of items read ahead and not yet taken, at most.
const BUDGET_KIB: u32 = 4 * 1024;

/// An item read ahead: its record if encoded, and its weight in KiB of the budget.
struct Ahead<P> {
    item: ReaderItem<P>,
    encoded: Option<EncodedRecord>,
    weight: u32,
}

/// What the reading task hands over.
enum Read<P> {
    Items(Vec<Ahead<P>>),
    /// The source ended the stream.
    End,
    Failed(CaptureError),
}

/// A [`ChangeStream`] read ahead by a task of its own.
pub(crate) struct ReadAhead<R: ChangeStream> {
    reads: mpsc::Receiver<Read<R::Position>>,
    batch: std::vec::IntoIter<Ahead<R::Position>>,
    /// The record of the change handed out last, if encoded ahead.
    encoded: Option<EncodedRecord>,
    /// KiB of the budget not held by items read ahead.
    room: Arc<Semaphore>,
    stop: CancellationToken,
    task: JoinHandle<R>,
}

impl<R> ReadAhead<R>
where
    R: ChangeStream + 'static,
{
    /// Starts reading `reader` ahead, encoding the records of its changes
    /// with `encoder` if given ([`ChangeStream::take_encoded`]).
    pub(crate) fn start(reader: R, encoder: Option<RecordEncoder>) -> Self {
        let (tx, reads) = mpsc::channel(BATCHES);
        let stop = CancellationToken::new();
        let room = Arc::new(Semaphore::new(BUDGET_KIB as usize));
        let reading = Reading {
            tx,
            room: room.clone(),
            stop: stop.clone(),
            encoder,
        };
        ReadAhead {
            reads,
            batch: Vec::new().into_iter(),
            encoded: None,
            room,
            task: tokio::spawn(reading.run(reader)),
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
            if let Some(item) = self.ready() {
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

    /// The next item of the batch handed over last.
    fn ready(&mut self) -> Option<ReaderItem<Self::Position>> {
        let ahead = self.batch.next()?;
        // The writer holds it now: its bytes leave the budget.
        self.room.add_permits(ahead.weight as usize);
        self.encoded = ahead.encoded;
        Some(ahead.item)
    }

    fn take_encoded(&mut self) -> Option<EncodedRecord> {
        self.encoded.take()
    }

    async fn close(self) {
        self.stop.cancel();
        drop(self.reads);
        let reader = self.task.await.expect("the read-ahead task does not panic");
        reader.close().await;
    }
}

/// The reading task's ends of the channel, the budget and the stop, and
/// the encoder of the changes' records, if they are encoded ahead.
struct Reading<P> {
    tx: mpsc::Sender<Read<P>>,
    room: Arc<Semaphore>,
    stop: CancellationToken,
    encoder: Option<RecordEncoder>,
}

impl<P: Send> Reading<P> {
    /// Sends what `reader` has ready, batch by batch, until the stream ends
    /// or fails (then it waits for `stop`), or until `stop`; returns the
    /// reader for closing.
    async fn run<R: ChangeStream<Position = P>>(self, mut reader: R) -> R {
        let mut batch = Vec::with_capacity(BATCH);
        let last = loop {
            let item = match (batch.len() < BATCH).then(|| reader.ready()).flatten() {
                // Decoded already: no read to make.
                Some(item) => Ok(Some(item)),
                None => {
                    // A read in progress is awaited to its end across batches; only a stop drops it.
                    let mut next = pin!(reader.next());
                    let mut ready = None;
                    if !batch.is_empty() {
                        if batch.len() < BATCH
                            && let Poll::Ready(item) = futures::poll!(next.as_mut())
                        {
                            ready = Some(item);
                        }
                        if ready.is_none() && !self.hand_over(&mut batch).await {
                            break None;
                        }
                    }
                    match ready {
                        Some(item) => item,
                        None => tokio::select! {
                            biased;
                            _ = self.stop.cancelled() => break None,
                            item = next => item,
                        },
                    }
                }
            };
            let item = match item {
                Ok(Some(item)) => item,
                Ok(None) => break Some(Read::End),
                Err(e) => break Some(Read::Failed(e)),
            };
            let encoded = match (&item, &self.encoder) {
                (ReaderItem::Change(event), Some(encoder)) => Some(encoder.encode(event)),
                _ => None,
            };
            let encoded_kib = encoded.as_ref().map_or(0, |r| kib(r.bytes()));
            let weight = weight_kib(&item)
                .saturating_add(encoded_kib)
                .min(BUDGET_KIB);
            // The permits travel with the item; the writer adds them back.
            match self.room.try_acquire_many(weight) {
                Ok(permits) => permits.forget(),
                Err(_) => {
                    // The writer frees room only for items it was handed.
                    if !self.hand_over(&mut batch).await {
                        break None;
                    }
                    tokio::select! {
                        biased;
                        _ = self.stop.cancelled() => break None,
                        permits = self.room.acquire_many(weight) => {
                            permits.expect("the budget is never closed").forget();
                        }
                    }
                }
            }
            batch.push(Ahead {
                item,
                encoded,
                weight,
            });
        };
        if let Some(last) = last
            && self.hand_over(&mut batch).await
            && self.send(last).await
        {
            self.stop.cancelled().await;
        }
        reader
    }

    /// Sends the batch, if any, leaving it empty; false on a stop.
    async fn hand_over(&self, batch: &mut Vec<Ahead<P>>) -> bool {
        if batch.is_empty() {
            return true;
        }
        let items = std::mem::replace(batch, Vec::with_capacity(BATCH));
        self.send(Read::Items(items)).await
    }

    /// Sends `read`, waiting for room; false if `stop` came first or the
    /// receiver is gone.
    async fn send(&self, read: Read<P>) -> bool {
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => false,
            sent = self.tx.send(read) => sent.is_ok(),
        }
    }
}

/// About how many KiB an item holds (at least 1): its values' bytes and a
/// little per value.
fn weight_kib<P>(item: &ReaderItem<P>) -> u32 {
    let bytes = match item {
        ReaderItem::Change(event) => event_bytes(event),
        ReaderItem::SchemaChange(change) => 1024 + change.ddl.len(),
        ReaderItem::Commit(_) | ReaderItem::Heartbeat(_) => 64,
    };
    kib(bytes)
}

/// `bytes` in KiB, rounded up.
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

fn event_bytes(event: &ChangeEvent) -> usize {
    let row = |row: Option<&Row>| row.map_or(0, |r| r.values.iter().map(value_bytes).sum());
    256 + row(Some(&event.key)) + row(event.before.as_ref()) + row(event.after.as_ref())
}

fn value_bytes(value: &Value) -> usize {
    32 + match value {
        Value::String(text) => text.len(),
        Value::Bytes(bytes) => bytes.len(),
        Value::Geometry(geometry) => geometry.wkb.len(),
        Value::Array(items) => items.iter().map(value_bytes).sum(),
        Value::Struct(fields) => fields.iter().map(|(_, v)| value_bytes(v)).sum(),
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::UInt(_) | Value::Float(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_weighs_its_values_bytes() {
        let wide = Value::String("x".repeat(2 << 20));
        assert_eq!(value_bytes(&wide), 32 + (2 << 20));
        let nested = Value::Array(vec![Value::Bytes(vec![0; 1000]), Value::Int(1)]);
        assert_eq!(value_bytes(&nested), 32 + (32 + 1000) + 32);
        assert_eq!(weight_kib::<u64>(&ReaderItem::Commit(1)), 1);
    }

    #[tokio::test]
    async fn each_change_comes_with_its_own_record_encoded_ahead() {
        use tributary_proto::debezium_json::{EnvelopeOptions, encode_key, encode_value};

        use crate::memory::{MemoryDatabase, Write};

        let db = MemoryDatabase::new("shop", &[("items", &["id", "v"])]);
        let from = db.head();
        db.commit(
            "items",
            &[
                Write::Upsert(1, vec![Value::Int(10)]),
                Write::Upsert(2, vec![Value::String("two".into())]),
            ],
        );
        db.commit("items", &[Write::Delete(1)]);
        let options = EnvelopeOptions::default();
        let mut ahead = ReadAhead::start(db.stream_from(&from), Some(RecordEncoder::new(options)));
        let mut plain = ReadAhead::start(db.stream_from(&from), None);
        let mut reference = db.stream_from(&from);
        let mut changes = 0;
        // Two changes and a commit, then a change and a commit.
        for _ in 0..5 {
            let expected = reference.next().await.unwrap().unwrap();
            let item = ahead.next().await.unwrap().unwrap();
            let encoded = ahead.take_encoded();
            assert_eq!(ahead.take_encoded(), None, "taken once");
            plain.next().await.unwrap().unwrap();
            assert_eq!(
                plain.take_encoded(),
                None,
                "nothing encoded without an encoder"
            );
            match (&expected, &item) {
                (ReaderItem::Change(want), ReaderItem::Change(got)) => {
                    assert_eq!(got, want);
                    let want = EncodedRecord {
                        key: Some(encode_key(want, options.doubles)),
                        value: encode_value(want, options),
                    };
                    assert_eq!(encoded, Some(want));
                    changes += 1;
                }
                (ReaderItem::Commit(want), ReaderItem::Commit(got)) => {
                    assert_eq!(got, want);
                    assert_eq!(encoded, None, "a commit has no record");
                }
                other => panic!("out of order: {other:?}"),
            }
        }
        assert_eq!(changes, 3);
        ahead.close().await;
        plain.close().await;
    }

    #[tokio::test]
    async fn the_rest_of_a_batch_is_ready_without_a_wait() {
        use tributary_proto::debezium_json::{EnvelopeOptions, encode_value};

        use crate::memory::{MemoryDatabase, Write};

        let db = MemoryDatabase::new("shop", &[("items", &["id", "v"])]);
        let from = db.head();
        let rows: Vec<Write> = (1..=3)
            .map(|id| Write::Upsert(id, vec![Value::Int(id * 10)]))
            .collect();
        db.commit("items", &rows);
        let options = EnvelopeOptions::default();
        let mut ahead = ReadAhead::start(db.stream_from(&from), Some(RecordEncoder::new(options)));
        let mut reference = db.stream_from(&from);
        // The reading task hands over what the stream had: three changes and their commit.
        let first = ahead.next().await.unwrap().unwrap();
        assert_eq!(
            format!("{first:?}"),
            format!("{:?}", reference.next().await.unwrap().unwrap())
        );
        for _ in 0..3 {
            let expected = reference.next().await.unwrap().unwrap();
            let item = ahead.ready().expect("in the batch handed over");
            assert_eq!(format!("{item:?}"), format!("{expected:?}"));
            if let ReaderItem::Change(event) = &expected {
                let encoded = ahead.take_encoded().expect("encoded ahead");
                assert_eq!(encoded.value, encode_value(event, options));
            }
        }
        assert!(ahead.ready().is_none(), "nothing more was read");
        assert_eq!(
            ahead.room.available_permits(),
            BUDGET_KIB as usize,
            "each item taken gave its bytes back to the budget"
        );
        ahead.close().await;
    }
}
