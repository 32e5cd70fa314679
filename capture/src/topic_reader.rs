//! Reads one partition of a topic from its start to its end ([`read_to_end`]),
//! for what capture keeps in Kafka and reads back when it starts: its stored
//! positions, and the schema change topic's table definitions.
//!
//! The end is where the consumer's position reaches the high watermark (the
//! position, unlike the last record's offset, moves past transaction
//! markers), then where the partition is idle: some brokers (Tansu)
//! under-report the high watermark.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Offset, TopicPartitionList};
use tributary_kafka::BaseConsumer;

use crate::error::CaptureError;

/// Longest a read to the end may wait for its next record.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Calls `each` with every record of `topic`'s `partition`, in order; an
/// empty or missing partition (or topic) has none. `what` names the read in the error
/// of a read that does not reach the end.
pub(crate) fn read_to_end(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    what: &'static str,
    mut each: impl FnMut(&BorrowedMessage<'_>) -> Result<(), CaptureError>,
) -> Result<(), CaptureError> {
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let partitions = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map_or(0, |t| t.partitions().len());
    if usize::try_from(partition).map_or(true, |p| p >= partitions) {
        return Ok(()); // no such topic (yet)
    }
    let (low, high) = consumer.fetch_watermarks(topic, partition, Duration::from_secs(10))?;
    if high <= low {
        return Ok(()); // empty, or every record deleted
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    let mut deadline = Instant::now() + READ_TIMEOUT;
    let next_offset = || -> Result<i64, CaptureError> {
        let position = consumer.position()?;
        Ok(
            match position
                .find_partition(topic, partition)
                .map(|e| e.offset())
            {
                Some(Offset::Offset(n)) => n,
                _ => low,
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
                each(&msg)?;
                deadline = Instant::now() + READ_TIMEOUT;
            }
            Some(Err(e)) => return Err(e.into()),
            None if caught_up || next_offset()? >= high => return Ok(()),
            None if Instant::now() > deadline => {
                return Err(CaptureError::Stalled {
                    waiting_for: what,
                    after: READ_TIMEOUT,
                });
            }
            None => {}
        }
    }
}
