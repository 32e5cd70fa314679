//! Stored capture positions: the compacted `<server_name>.offsets` topic.
//!
//! Each record is keyed by the server name and holds a [`CapturePosition`]
//! as JSON (for MySQL, the binlog file, offset and GTID state, with capture's
//! snapshot state beside them). The stored position is the record just before the offset of the
//! consumer group `tributary-capture.<server_name>` on that topic:
//!
//! - with `delivery: at_least_once` a position is written once every event before
//!   it was acknowledged (see [`crate::kafka_writer`]), then the group offset is
//!   committed after it;
//! - with `delivery: exactly_once` the position record and the group offset are
//!   written inside the Kafka transaction of its events. A group offset moves
//!   only when its transaction commits, on every broker, so a position in an
//!   aborted transaction is never used, even on a broker that shows aborted
//!   records to readers (Tansu does).
//!
//! Exactly-once resumes from the marked record, so from at-least-once's last
//! positions too; at-least-once resumes from the newest record, which it stores
//! only once safe. Where no group offset was ever committed (positions stored by
//! older versions), or its record was compacted away, the newest record is read.

use std::time::{Duration, Instant};

use std::sync::Arc;

use rdkafka::consumer::{CommitMode, Consumer, ConsumerGroupMetadata};
use rdkafka::producer::BaseRecord;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{debug, info, warn};
use tributary_kafka::KafkaConfig;
use tributary_kafka::{BaseConsumer, TrackedProducer};

use crate::error::CaptureError;
use crate::source_position::{CapturePosition, SourcePosition};
use crate::topic_reader::read_to_end;

/// Reads and writes the stored position of one server.
#[derive(Clone)]
pub struct PositionStore {
    producer: TrackedProducer,
    /// The cluster, for the readers [`PositionStore::load`] makes.
    kafka: KafkaConfig,
    topic: String,
    key: Vec<u8>,
    /// The consumer group whose offset on the topic marks the committed position.
    group: String,
    /// A client of that group (never subscribed): commits its offset, gives its identity.
    member: Arc<BaseConsumer>,
    /// Longest wait for the broker to acknowledge a position.
    timeout: Duration,
}

impl PositionStore {
    /// A store in `<server_name>.offsets` (the topic must exist); a save waits
    /// at most `timeout` for the broker.
    pub fn new(
        producer: TrackedProducer,
        kafka: &KafkaConfig,
        server_name: &str,
        timeout: Duration,
    ) -> Result<Self, CaptureError> {
        let group = format!("tributary-capture.{server_name}");
        let member = Arc::new(consumer(kafka, &group, "read_committed")?);
        Ok(PositionStore {
            producer,
            kafka: kafka.clone(),
            topic: offsets_topic(server_name),
            key: serde_json::to_vec(&serde_json::json!({ "server": server_name })).expect("json"),
            group,
            member,
            timeout,
        })
    }

    /// Stores a position, waits until the broker has it and returns its offset.
    pub async fn save<P: SourcePosition>(
        &self,
        position: &CapturePosition<P>,
    ) -> Result<i64, CaptureError> {
        let value = serde_json::to_vec(position).expect("a position serializes");
        let record = BaseRecord::to(&self.topic)
            .key(self.key.as_slice())
            .payload(value.as_slice())
            .partition(0);
        let offset = self
            .producer
            .send_awaited(record, self.timeout, self.timeout)
            .await
            .map_err(|e| CaptureError::delivery(e, "acknowledgement of a stored position"))?
            .offset;
        debug!(%position, offset, "position stored");
        Ok(offset)
    }

    /// The offsets a transaction commits with the position record at `offset`.
    pub fn group_offsets(&self, offset: i64) -> Result<TopicPartitionList, CaptureError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(offset + 1))?;
        Ok(tpl)
    }

    /// The consumer-group identity transactions commit the group offset as.
    pub fn group_metadata(&self) -> Result<ConsumerGroupMetadata, CaptureError> {
        self.member.group_metadata().ok_or_else(|| {
            CaptureError::Kafka(rdkafka::error::KafkaError::Global(
                rdkafka::types::RDKafkaErrorCode::State,
            ))
        })
    }

    /// Marks the position record at `offset` as the stored one, outside a
    /// transaction (at-least-once), without waiting for the broker: a crash before
    /// the mark lands resumes from the one before, which repeats events, never
    /// skips one.
    pub fn mark(&self, offset: i64) -> Result<(), CaptureError> {
        // Serves (and drops) the results of earlier marks, so none pile up.
        if let Some(Err(e)) = self.member.poll(Duration::ZERO) {
            debug!(error = %e, "an earlier position mark failed; the next one replaces it");
        }
        self.member
            .commit(&self.group_offsets(offset)?, CommitMode::Async)?;
        Ok(())
    }

    /// [`PositionStore::mark`], waiting until the broker has it.
    pub async fn mark_and_wait(&self, offset: i64) -> Result<(), CaptureError> {
        let offsets = self.group_offsets(offset)?;
        let member = self.member.clone();
        let committed =
            tokio::task::spawn_blocking(move || member.commit(&offsets, CommitMode::Sync));
        tokio::time::timeout(self.timeout, committed)
            .await
            .map_err(|_| CaptureError::Stalled {
                waiting_for: "commit of the stored position's group offset",
                after: self.timeout,
            })?
            .expect("an offset commit does not panic")?;
        Ok(())
    }

    /// The stored position, if any. With `exactly_once`, the record the group
    /// offset marks (the newest record where there is no such mark); otherwise the
    /// newest record, which at-least-once stores only once it is safe (and which
    /// the mark, written without waiting, may trail).
    pub async fn load<P: SourcePosition>(
        &self,
        exactly_once: bool,
    ) -> Result<Option<CapturePosition<P>>, CaptureError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            if exactly_once {
                // The marked record is known to be committed: read it as it is, not
                // held back behind another transaction still open on the topic.
                let marked = consumer(&store.kafka, &store.group, "read_uncommitted")?;
                match store.committed_offset(&marked)? {
                    Some(offset) => match store.read_at(&marked, offset)? {
                        Some(position) => return Ok(Some(position)),
                        None => warn!(group = %store.group, offset, "the marked position record is gone (compacted): reading the newest stored position"),
                    },
                    None => info!(group = %store.group, "no marked position: reading the newest stored position"),
                }
            }
            store.newest(&consumer(&store.kafka, &store.group, "read_committed")?)
        })
        .await
        .expect("position loader does not panic")
    }

    /// The offset of the position record the group's committed offset follows.
    fn committed_offset(&self, consumer: &BaseConsumer) -> Result<Option<i64>, CaptureError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, 0);
        let committed = consumer.committed_offsets(tpl, self.timeout)?;
        Ok(
            match committed.find_partition(&self.topic, 0).map(|e| e.offset()) {
                Some(Offset::Offset(next)) if next > 0 => Some(next - 1),
                _ => None,
            },
        )
    }

    /// The position record at exactly `offset`, or `None` if the topic has none there.
    fn read_at<P: SourcePosition>(
        &self,
        consumer: &BaseConsumer,
        offset: i64,
    ) -> Result<Option<CapturePosition<P>>, CaptureError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(offset))?;
        consumer.assign(&tpl)?;
        let deadline = Instant::now() + self.timeout;
        while Instant::now() < deadline {
            let Some(msg) = consumer.poll(Duration::from_millis(500)) else {
                continue;
            };
            let msg = msg?;
            if msg.offset() != offset {
                return Ok(None);
            }
            let position = self.parse(&msg)?;
            debug!(%position, offset, "stored position read");
            return Ok(Some(position));
        }
        Err(CaptureError::Stalled {
            waiting_for: "stored position record",
            after: self.timeout,
        })
    }

    fn parse<P: SourcePosition>(
        &self,
        msg: &rdkafka::message::BorrowedMessage<'_>,
    ) -> Result<CapturePosition<P>, CaptureError> {
        let payload = msg.payload().unwrap_or_default();
        serde_json::from_slice(payload).map_err(|e| CaptureError::BadStoredPosition {
            topic: self.topic.clone(),
            detail: format!("offset {}: {e}", msg.offset()),
        })
    }

    /// The newest record of this server.
    fn newest<P: SourcePosition>(
        &self,
        consumer: &BaseConsumer,
    ) -> Result<Option<CapturePosition<P>>, CaptureError> {
        let mut newest = None;
        read_to_end(
            consumer,
            &self.topic,
            0,
            "the end of the stored positions",
            |msg| {
                // Skips another server's position, and tombstones.
                if msg.key() == Some(self.key.as_slice()) && msg.payload().is_some() {
                    newest = Some(self.parse(msg)?);
                }
                Ok(())
            },
        )?;
        Ok(newest)
    }
}

/// A client of `group` that is never subscribed: it reads, and commits offsets.
fn consumer(
    kafka: &KafkaConfig,
    group: &str,
    isolation: &str,
) -> Result<BaseConsumer, CaptureError> {
    Ok(kafka
        .consumer("capture.positions", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", isolation)
        .create()?)
}

/// Name of the positions topic of a server.
pub fn offsets_topic(server_name: &str) -> String {
    format!("{server_name}.offsets")
}
