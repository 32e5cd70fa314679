//! Sending a job's records, counted rather than awaited one by one: each
//! record gets the next sequence number of a [`TrackedProducer`] that keeps
//! refusals, and the job waits for the watermark below which every record is
//! done (acknowledged or refused), then takes the refusals it must answer.
//! A full producer queue is waited on at most `kafka.stall_timeout_s`; so is a
//! delivery report; then the job fails rather than hang.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseRecord, ThreadedProducer};
use tributary_kafka::TrackedProducer;
use tributary_kafka::tracked::{DeliveryError, Tracker};

use super::routing::Record;

/// The job's producer, with its stall timeout.
pub(super) struct Writer {
    producer: TrackedProducer,
    stall_timeout: Duration,
}

impl Writer {
    /// Writes with `producer` (built with `Tracker::new(Refusals::Kept)`),
    /// waiting on the broker at most `stall_timeout`.
    pub(super) fn new(producer: TrackedProducer, stall_timeout: Duration) -> Self {
        Writer {
            producer,
            stall_timeout,
        }
    }

    /// The producer (transactions are begun and committed on it).
    pub(super) fn producer(&self) -> &ThreadedProducer<Tracker> {
        self.producer.producer()
    }

    /// How long a full queue or a missing delivery report is waited for.
    pub(super) fn stall_timeout(&self) -> Duration {
        self.stall_timeout
    }

    /// Queues `record` to `topic` with `headers`, in `partition` when given
    /// (else by key); its sequence number, done once [`Self::done_past`] passes it.
    pub(super) async fn send(
        &self,
        topic: &str,
        record: &Record,
        headers: OwnedHeaders,
        partition: Option<i32>,
    ) -> Result<u64, KafkaError> {
        self.producer
            .send_counted(
                base_record(topic, record, headers, partition),
                self.stall_timeout,
            )
            .await
            .map_err(kafka_error)
    }

    /// Queues `record` as [`Self::send`] does and waits for its own delivery
    /// report (a record sent outside the counted flow, answering a refusal).
    pub(super) async fn send_awaited(
        &self,
        topic: &str,
        record: &Record,
        headers: OwnedHeaders,
    ) -> Result<(), KafkaError> {
        let record = base_record(topic, record, headers, None);
        self.producer
            .send_awaited(record, self.stall_timeout, self.stall_timeout)
            .await
            .map(drop)
            .map_err(kafka_error)
    }

    /// Waits until every record up to `seq` is done; the watermark then (every
    /// record below it is done). Cancel safe; no time limit of its own.
    pub(super) async fn done_past(&self, seq: u64) -> Result<u64, KafkaError> {
        self.producer.done_past(seq).await.map_err(kafka_error)
    }

    /// The refused records below `end`, each with the broker's or the client's error.
    pub(super) fn take_refused(&self, end: u64) -> BTreeMap<u64, KafkaError> {
        self.producer.take_refused(end)
    }
}

/// `record` as librdkafka takes it.
fn base_record<'a>(
    topic: &'a str,
    record: &'a Record,
    headers: OwnedHeaders,
    partition: Option<i32>,
) -> BaseRecord<'a, [u8], [u8], ()> {
    let mut out = BaseRecord::to(topic)
        .payload(record.value.as_slice())
        .headers(headers);
    if let Some(partition) = partition {
        out = out.partition(partition);
    }
    if let Some(key) = &record.key {
        out = out.key(key.as_slice());
    }
    out
}

/// A send's or a wait's error as the client's: a queue that stayed full, or a
/// report that never came, as librdkafka itself would name them.
fn kafka_error(e: DeliveryError) -> KafkaError {
    match e {
        DeliveryError::Kafka(e) => e,
        DeliveryError::QueueFull(_) => KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
        DeliveryError::Stalled(_) => {
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut)
        }
    }
}

/// The broker refused the record for its size: retrying cannot help.
pub(super) fn rejected_for_size(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidRecord
        )
    )
}
