//! Stored capture positions: the compacted `<server_name>.offsets` topic.
//!
//! Each record is keyed by the server name and holds a [`BinlogPosition`] as
//! JSON; the newest record wins. A position is stored only after every event
//! before it was acknowledged by the broker (see [`crate::kafka_writer`]).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use tracing::debug;

use crate::error::CaptureError;
use crate::position::BinlogPosition;

/// Reads and writes the stored position of one server.
#[derive(Clone)]
pub struct PositionStore {
    producer: FutureProducer,
    brokers: String,
    topic: String,
    key: Vec<u8>,
}

impl PositionStore {
    /// A store in `<server_name>.offsets` (the topic must exist).
    pub fn new(producer: FutureProducer, brokers: &str, server_name: &str) -> Self {
        PositionStore {
            producer,
            brokers: brokers.to_owned(),
            topic: offsets_topic(server_name),
            key: serde_json::to_vec(&serde_json::json!({ "server": server_name })).expect("json"),
        }
    }

    /// Stores a position and waits until the broker has it.
    pub async fn save(&self, position: &BinlogPosition) -> Result<(), CaptureError> {
        let value = serde_json::to_vec(position).expect("a position serializes");
        let record = FutureRecord::to(&self.topic)
            .key(&self.key)
            .payload(&value)
            .partition(0);
        self.producer
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| CaptureError::from(e))?;
        debug!(%position, "position stored");
        Ok(())
    }

    /// The newest stored position, if any.
    pub async fn load(&self) -> Result<Option<BinlogPosition>, CaptureError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.load_blocking())
            .await
            .expect("position loader does not panic")
    }

    fn load_blocking(&self) -> Result<Option<BinlogPosition>, CaptureError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", "tributary-position-reader")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .create()?;
        let (_, high) = consumer.fetch_watermarks(&self.topic, 0, Duration::from_secs(10))?;
        if high <= 0 {
            return Ok(None);
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Beginning)?;
        consumer.assign(&tpl)?;
        let mut newest = None;
        let deadline = Instant::now() + Duration::from_secs(30);
        // Read until the consumer's position reaches the high watermark (the position, unlike
        // the last record's offset, moves past transaction markers), then until the topic
        // is idle: some brokers (Tansu) under-report the high watermark.
        let next_offset = || -> Result<i64, CaptureError> {
            let position = consumer.position()?;
            Ok(
                match position.find_partition(&self.topic, 0).map(|e| e.offset()) {
                    Some(Offset::Offset(n)) => n,
                    _ => 0,
                },
            )
        };
        loop {
            let caught_up = next_offset()? >= high;
            let idle_wait = if caught_up {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(1)
            };
            match consumer.poll(idle_wait) {
                Some(Ok(msg)) => {
                    if msg.key() == Some(self.key.as_slice())
                        && let Some(payload) = msg.payload()
                    {
                        let position = serde_json::from_slice(payload).map_err(|e| {
                            CaptureError::BadStoredPosition {
                                topic: self.topic.clone(),
                                detail: format!("offset {}: {e}", msg.offset()),
                            }
                        })?;
                        newest = Some(position);
                    }
                }
                Some(Err(e)) => return Err(e.into()),
                None if caught_up || next_offset()? >= high => break,
                None if Instant::now() > deadline => {
                    return Err(CaptureError::BadStoredPosition {
                        topic: self.topic.clone(),
                        detail: format!(
                            "read stopped at offset {} before the end ({high})",
                            next_offset()?
                        ),
                    });
                }
                None => {}
            }
        }
        Ok(newest)
    }
}

/// Name of the positions topic of a server.
pub fn offsets_topic(server_name: &str) -> String {
    format!("{server_name}.offsets")
}
