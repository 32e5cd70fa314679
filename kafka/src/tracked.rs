//! A producer whose deliveries are counted, not awaited one by one.
//!
//! A record sent with [`TrackedProducer::send_counted`] gets the next
//! sequence number, carried through librdkafka as the record's opaque. The
//! delivery callback marks it done and moves a low watermark: every record
//! below it was acknowledged. [`TrackedProducer::delivered_below`] waits for
//! the watermark to reach a sequence number. Nothing is allocated, queued or
//! timed per record (a `FutureProducer` makes a channel, a box and, with a
//! timeout, a timer for each). A record whose own report matters (the offset
//! of a stored position) is sent with [`TrackedProducer::send_awaited`] and
//! answered on a channel of its own.
//!
//! What a refused counted record does depends on the [`Tracker`]'s
//! [`Refusals`]: by default the first one fails every later send and wait (a
//! record that never reached the broker can never be counted as delivered);
//! a tracker that keeps refusals counts the record as done and keeps its
//! error for [`TrackedProducer::take_refused`], for a caller that answers a
//! refusal record by record (the enricher dead-letters the event instead).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::{FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use tokio::sync::{Notify, oneshot};

/// How often a full producer queue is tried again.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(2);

/// What a send or a wait on deliveries ran into.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeliveryError {
    /// The broker refused a record (the first refused one is kept).
    #[error("{0}")]
    Kafka(#[from] KafkaError),
    /// The producer's queue stayed full for this long.
    #[error("the producer queue stayed full for {0:?}")]
    QueueFull(Duration),
    /// No delivery report came for this long while some were awaited.
    #[error("no delivery report for {0:?}")]
    Stalled(Duration),
}

/// Where an acknowledged record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// The partition it was written to.
    pub partition: i32,
    /// Its offset there.
    pub offset: i64,
}

/// The producer: cheap to clone, every clone sharing one librdkafka client.
#[derive(Clone)]
pub struct TrackedProducer {
    inner: ThreadedProducer<Tracker>,
}

impl FromClientConfigAndContext<Tracker> for TrackedProducer {
    fn from_config_and_context(
        config: &rdkafka::ClientConfig,
        context: Tracker,
    ) -> rdkafka::error::KafkaResult<Self> {
        Ok(TrackedProducer {
            inner: ThreadedProducer::from_config_and_context(config, context)?,
        })
    }
}

impl TrackedProducer {
    /// The librdkafka producer, for transactions and metadata.
    pub fn producer(&self) -> &ThreadedProducer<Tracker> {
        &self.inner
    }

    /// Queues `record` and returns its sequence number, waiting (at most
    /// `queue_timeout`) while the producer's queue is full.
    pub async fn send_counted(
        &self,
        record: BaseRecord<'_, [u8], [u8], ()>,
        queue_timeout: Duration,
    ) -> Result<u64, DeliveryError> {
        let tracker = self.inner.context();
        if tracker.failed.load(Ordering::Acquire) {
            return Err(tracker.window.lock().expect("not poisoned").first_failure());
        }
        // One sender at a time, so sequence numbers are handed out in order.
        let mut next = tracker.next.lock().await;
        let seq = *next;
        self.send_with_room(record, Opaque::counted(seq), queue_timeout)
            .await?;
        *next += 1;
        Ok(seq)
    }

    /// Queues `record` (waiting at most `queue_timeout` for room) and waits
    /// (at most `timeout`) for its own delivery report.
    pub async fn send_awaited(
        &self,
        record: BaseRecord<'_, [u8], [u8], ()>,
        queue_timeout: Duration,
        timeout: Duration,
    ) -> Result<Delivered, DeliveryError> {
        let tracker = self.inner.context();
        let id = tracker.awaited_ids.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        tracker.awaited.lock().expect("not poisoned").insert(id, tx);
        let forget = || tracker.awaited.lock().expect("not poisoned").remove(&id);
        if let Err(e) = self
            .send_with_room(record, Opaque::awaited(id), queue_timeout)
            .await
        {
            forget();
            return Err(e);
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(report)) => Ok(report?),
            Ok(Err(_)) => Err(KafkaError::Canceled.into()),
            Err(_) => {
                // A report that comes later finds no one waiting.
                forget();
                Err(DeliveryError::Stalled(timeout))
            }
        }
    }

    /// Waits until every counted record with a sequence number below `end`
    /// was acknowledged. Fails if one was refused, or if no report comes for
    /// `stall_timeout` while some are outstanding. One waiter at a time.
    pub async fn delivered_below(
        &self,
        end: u64,
        stall_timeout: Duration,
    ) -> Result<(), DeliveryError> {
        let tracker = self.inner.context();
        loop {
            let low = match tracker.watermark_toward(end)? {
                Reached::Yes(_) => return Ok(()),
                Reached::Not(low) => low,
            };
            if tokio::time::timeout(stall_timeout, tracker.reached.notified())
                .await
                .is_err()
                && tracker.window.lock().expect("not poisoned").low == low
            {
                return Err(DeliveryError::Stalled(stall_timeout));
            }
        }
    }

    /// Waits, without a time limit, until every counted record up to `seq`
    /// was acknowledged (or refused, when refusals are kept); returns the
    /// watermark then: every record below it is done. Fails as
    /// [`Self::delivered_below`] does on a refusal by default. Cancel safe;
    /// one waiter at a time.
    pub async fn done_past(&self, seq: u64) -> Result<u64, DeliveryError> {
        let tracker = self.inner.context();
        loop {
            if let Reached::Yes(low) = tracker.watermark_toward(seq + 1)? {
                return Ok(low);
            }
            tracker.reached.notified().await;
        }
    }

    /// The refused records below `end` (with a tracker that keeps refusals),
    /// each with its error, forgotten here once taken.
    pub fn take_refused(&self, end: u64) -> BTreeMap<u64, KafkaError> {
        let mut window = self.inner.context().window.lock().expect("not poisoned");
        let later = window.refused.split_off(&end);
        std::mem::replace(&mut window.refused, later)
    }

    /// Hands `record` to librdkafka with `opaque`, retrying every
    /// [`QUEUE_FULL_PAUSE`] while its queue is full, for at most `queue_timeout`.
    async fn send_with_room(
        &self,
        record: BaseRecord<'_, [u8], [u8], ()>,
        opaque: Opaque,
        queue_timeout: Duration,
    ) -> Result<(), DeliveryError> {
        let mut record = with_opaque(record, opaque.0);
        let mut deadline = None;
        loop {
            match self.inner.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    // The clock is read only when the queue is full.
                    let deadline = *deadline
                        .get_or_insert_with(|| tokio::time::Instant::now() + queue_timeout);
                    if tokio::time::Instant::now() >= deadline {
                        return Err(DeliveryError::QueueFull(queue_timeout));
                    }
                    record = back;
                    tokio::time::sleep(QUEUE_FULL_PAUSE).await;
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
    }
}

/// `record` carrying `opaque` through librdkafka.
fn with_opaque<'a>(
    record: BaseRecord<'a, [u8], [u8], ()>,
    opaque: usize,
) -> BaseRecord<'a, [u8], [u8], usize> {
    BaseRecord {
        topic: record.topic,
        partition: record.partition,
        payload: record.payload,
        key: record.key,
        timestamp: record.timestamp,
        headers: record.headers,
        delivery_opaque: opaque,
    }
}

/// A record's opaque: a counted record's sequence number shifted left, with
/// the low bit clear; an awaited record's id, with the low bit set.
#[derive(Clone, Copy)]
struct Opaque(usize);

impl Opaque {
    fn counted(seq: u64) -> Self {
        Opaque((seq as usize) << 1)
    }

    fn awaited(id: u64) -> Self {
        Opaque(((id as usize) << 1) | 1)
    }
}

/// What a refused counted record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusals {
    /// It fails every later send and wait: nothing after it is counted.
    Fatal,
    /// It is done, like an acknowledged record, and its error is kept until
    /// [`TrackedProducer::take_refused`] takes it.
    Kept,
}

/// Whether the watermark reached what a waiter wants; the watermark.
enum Reached {
    Yes(u64),
    Not(u64),
}

/// The callbacks of a [`TrackedProducer`]: delivery reports counted or
/// answered, librdkafka's logs through [`crate::logging`]. A producer is
/// built with a fresh one: `create_with_context(Tracker::default())` (refusals
/// fatal) or `Tracker::new(Refusals::Kept)`.
pub struct Tracker {
    refusals: Refusals,
    /// The next sequence number to hand out (an async lock: held across the
    /// wait for room in a full queue).
    next: tokio::sync::Mutex<u64>,
    window: Mutex<Window>,
    /// A counted record was refused (a lock-free look before each send).
    failed: AtomicBool,
    /// The watermark the waiter waits for.
    wanted: AtomicU64,
    /// Wakes the waiter once the watermark reaches `wanted` (or on a failure).
    reached: Notify,
    awaited_ids: AtomicU64,
    awaited: Mutex<HashMap<u64, oneshot::Sender<Result<Delivered, KafkaError>>>>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker::new(Refusals::Fatal)
    }
}

impl Tracker {
    /// A tracker for a new producer, treating refusals as `refusals` says.
    pub fn new(refusals: Refusals) -> Self {
        Tracker {
            refusals,
            next: tokio::sync::Mutex::new(0),
            window: Mutex::new(Window::default()),
            failed: AtomicBool::new(false),
            wanted: AtomicU64::new(u64::MAX),
            reached: Notify::new(),
            awaited_ids: AtomicU64::new(0),
            awaited: Mutex::new(HashMap::new()),
        }
    }

    /// Asks to be woken once the watermark reaches `end`, then looks at it.
    fn watermark_toward(&self, end: u64) -> Result<Reached, DeliveryError> {
        // Asked for first, so a report landing after the look still wakes the waiter.
        self.wanted.store(end, Ordering::Release);
        let window = self.window.lock().expect("not poisoned");
        if window.failure.is_some() {
            return Err(window.first_failure());
        }
        Ok(if window.low >= end {
            Reached::Yes(window.low)
        } else {
            Reached::Not(window.low)
        })
    }
}

impl ClientContext for Tracker {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        crate::logging::log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        crate::logging::error(&error, reason);
    }
}

impl ProducerContext for Tracker {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let report = match result {
            Ok(message) => Ok(Delivered {
                partition: message.partition(),
                offset: message.offset(),
            }),
            Err((error, _)) => Err(error.clone()),
        };
        let id = (opaque >> 1) as u64;
        if opaque & 1 == 1 {
            if let Some(tx) = self.awaited.lock().expect("not poisoned").remove(&id) {
                let _ = tx.send(report);
            }
            return;
        }
        let low = {
            let mut window = self.window.lock().expect("not poisoned");
            match (report, self.refusals) {
                (Err(error), Refusals::Fatal) => {
                    window.failure.get_or_insert(error);
                    self.failed.store(true, Ordering::Release);
                    None
                }
                (Err(error), Refusals::Kept) => {
                    window.refused.insert(id, error);
                    window.done(id);
                    Some(window.low)
                }
                (Ok(_), _) => {
                    window.done(id);
                    Some(window.low)
                }
            }
        };
        if low.is_none_or(|low| low >= self.wanted.load(Ordering::Acquire)) {
            self.reached.notify_one();
        }
    }
}

/// Which counted records were done: all below `low`, and those marked in
/// `ahead` (index 0 is `low` itself).
#[derive(Default)]
struct Window {
    low: u64,
    ahead: VecDeque<bool>,
    /// The first refusal, when refusals are fatal.
    failure: Option<KafkaError>,
    /// Refused records not yet taken, when refusals are kept.
    refused: BTreeMap<u64, KafkaError>,
}

impl Window {
    /// Marks `seq` acknowledged and moves `low` past every acknowledged record.
    fn done(&mut self, seq: u64) {
        let Some(index) = seq.checked_sub(self.low) else {
            return; // reported twice
        };
        let index = index as usize;
        if index >= self.ahead.len() {
            self.ahead.resize(index + 1, false);
        }
        self.ahead[index] = true;
        while self.ahead.front() == Some(&true) {
            self.ahead.pop_front();
            self.low += 1;
        }
    }

    fn first_failure(&self) -> DeliveryError {
        self.failure.clone().unwrap_or(KafkaError::Canceled).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_moves_only_past_records_all_acknowledged() {
        let mut window = Window::default();
        // Three partitions' batches land out of send order.
        for seq in [1, 4, 7] {
            window.done(seq);
        }
        assert_eq!(window.low, 0, "record 0 is still outstanding");
        window.done(0);
        assert_eq!(window.low, 2, "0 and 1 are in, 2 is not");
        for seq in [2, 5, 8, 3] {
            window.done(seq);
        }
        assert_eq!(window.low, 6);
        window.done(6);
        assert_eq!(window.low, 9);
        assert!(window.ahead.is_empty());
    }

    #[test]
    fn a_repeated_report_changes_nothing() {
        let mut window = Window::default();
        window.done(0);
        window.done(0);
        window.done(2);
        window.done(2);
        assert_eq!(window.low, 1);
        window.done(1);
        assert_eq!(window.low, 3);
    }

    #[test]
    fn the_watermark_matches_a_reference_for_any_order() {
        // Every permutation-like order from a simple generator, against a set.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let n = 64;
            let mut order: Vec<u64> = (0..n).collect();
            for i in (1..order.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                order.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let mut window = Window::default();
            let mut seen = std::collections::BTreeSet::new();
            for seq in order {
                window.done(seq);
                seen.insert(seq);
                let expected = (0..).find(|s| !seen.contains(s)).expect("a gap or the end");
                assert_eq!(window.low, expected);
            }
        }
    }

    /// A producer whose every record is refused, asynchronously: its broker
    /// does not listen, so each record times out in librdkafka's queue.
    fn refusing(refusals: Refusals) -> TrackedProducer {
        crate::KafkaConfig::plaintext("127.0.0.1:1")
            .producer("tracked-test")
            .set("message.timeout.ms", "200")
            .create_with_context(Tracker::new(refusals))
            .expect("a producer")
    }

    fn record(payload: &[u8]) -> BaseRecord<'_, [u8], [u8], ()> {
        BaseRecord::to("t").payload(payload).partition(0)
    }

    #[tokio::test]
    async fn kept_refusals_are_done_and_taken_record_by_record() {
        let producer = refusing(Refusals::Kept);
        let second = Duration::from_secs(1);
        let mut seqs = Vec::new();
        for payload in [b"a", b"b", b"c"] {
            seqs.push(
                producer
                    .send_counted(record(payload), second)
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(seqs, [0, 1, 2]);
        let low = tokio::time::timeout(Duration::from_secs(10), producer.done_past(2))
            .await
            .expect("the refusals came")
            .unwrap();
        assert_eq!(low, 3);
        let first = producer.take_refused(2);
        assert_eq!(first.keys().copied().collect::<Vec<_>>(), [0, 1]);
        for error in first.values() {
            assert_eq!(
                error.rdkafka_error_code(),
                Some(RDKafkaErrorCode::MessageTimedOut)
            );
        }
        assert_eq!(producer.take_refused(2).len(), 0, "taken once");
        assert_eq!(
            producer.take_refused(3).keys().copied().collect::<Vec<_>>(),
            [2]
        );
        // Later records are still sent and counted.
        assert_eq!(
            producer.send_counted(record(b"d"), second).await.unwrap(),
            3
        );
    }

    #[tokio::test]
    async fn a_fatal_refusal_fails_the_wait_and_every_later_send() {
        let producer = refusing(Refusals::Fatal);
        let second = Duration::from_secs(1);
        producer.send_counted(record(b"a"), second).await.unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(10), producer.done_past(0))
            .await
            .expect("the refusal came");
        assert!(matches!(waited, Err(DeliveryError::Kafka(_))), "{waited:?}");
        assert!(producer.send_counted(record(b"b"), second).await.is_err());
        assert!(producer.take_refused(u64::MAX).is_empty());
    }

    #[test]
    fn opaques_keep_counted_and_awaited_apart() {
        for n in [0u64, 1, 2, 1 << 40] {
            assert_eq!(Opaque::counted(n).0 & 1, 0);
            assert_eq!((Opaque::counted(n).0 >> 1) as u64, n);
            assert_eq!(Opaque::awaited(n).0 & 1, 1);
            assert_eq!((Opaque::awaited(n).0 >> 1) as u64, n);
        }
    }
}
