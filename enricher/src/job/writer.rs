//! Sending a job's records: a full producer queue is waited on, and a delivery
//! report is awaited, each at most `kafka.stall_timeout_s`; then the job fails
//! rather than hang.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{DeliveryFuture, FutureRecord};
use tributary_kafka::FutureProducer;

use super::routing::Record;

/// How often a full queue is tried again.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(2);

/// The job's producer, with its stall timeout.
pub(super) struct Writer {
    producer: FutureProducer,
    stall_timeout: Duration,
}

impl Writer {
    /// Writes with `producer`, waiting on the broker at most `stall_timeout`.
    pub(super) fn new(producer: FutureProducer, stall_timeout: Duration) -> Self {
        Writer {
            producer,
            stall_timeout,
        }
    }

    /// The producer (transactions are begun and committed on it).
    pub(super) fn producer(&self) -> &FutureProducer {
        &self.producer
    }

    /// Enqueues `record` to `topic` with `headers`, in `partition` when given
    /// (else by key); the future resolves with its delivery report.
    pub(super) async fn send(
        &self,
        topic: &str,
        record: &Record,
        headers: OwnedHeaders,
        partition: Option<i32>,
    ) -> Result<DeliveryFuture, KafkaError> {
        let mut out = FutureRecord::to(topic)
            .payload(&record.value)
            .headers(headers);
        if let Some(partition) = partition {
            out = out.partition(partition);
        }
        if let Some(key) = &record.key {
            out = out.key(key);
        }
        let deadline = tokio::time::Instant::now() + self.stall_timeout;
        loop {
            match self.producer.send_result(out) {
                Ok(delivery) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if tokio::time::Instant::now() < deadline =>
                {
                    out = back;
                    tokio::time::sleep(QUEUE_FULL_PAUSE).await;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// What awaits the delivery of a sent record: `Ok` once the broker
    /// acknowledged it; a report that does not come within the stall timeout
    /// is an error.
    pub(super) fn delivered(
        &self,
        sent: Result<DeliveryFuture, KafkaError>,
    ) -> impl Future<Output = Result<(), KafkaError>> + Send + 'static {
        let stall_timeout = self.stall_timeout;
        async move {
            match tokio::time::timeout(stall_timeout, sent?).await {
                Ok(Ok(Ok(_))) => Ok(()),
                Ok(Ok(Err((e, _)))) => Err(e),
                Ok(Err(_)) => Err(KafkaError::Canceled),
                Err(_) => Err(KafkaError::MessageProduction(
                    RDKafkaErrorCode::MessageTimedOut,
                )),
            }
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
