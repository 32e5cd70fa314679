//! Retries of events whose inner join missed with `on_miss: retry` (the row may
//! not have arrived yet): the event is written to the job's retry topic, in the
//! partition it came from, with the attempt number and the time it is due. The
//! job consumes the retry topic too; a record that is not due yet pauses its
//! partition (and seeks back to it) until it is, so waiting blocks nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers as _, OwnedMessage};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::headers;

/// Header: attempts made so far, counting the one that wrote the record.
pub const ATTEMPT: &str = "tributary.attempt";
/// Header: when the record is due, in ms since the epoch.
pub const NOT_BEFORE: &str = "tributary.not_before_ms";

fn header<'m>(msg: &'m OwnedMessage, name: &str) -> Option<&'m str> {
    msg.headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| std::str::from_utf8(h.value?).ok())
}

/// Coordinates of the input record an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin<'m> {
    /// The record itself, read from the input.
    Input {
        /// Input topic.
        topic: &'m str,
        /// Input partition.
        partition: i32,
        /// Input offset.
        offset: i64,
    },
    /// A retry record: the coordinates its headers carry, as their text.
    Carried {
        /// Input topic.
        topic: &'m str,
        /// Input partition.
        partition: &'m str,
        /// Input offset.
        offset: &'m str,
    },
}

/// The input record behind `msg`: its own coordinates, or those a retry record carries.
pub fn origin(msg: &OwnedMessage) -> Origin<'_> {
    match (
        header(msg, headers::SOURCE_TOPIC),
        header(msg, headers::SOURCE_PARTITION),
        header(msg, headers::SOURCE_OFFSET),
        header(msg, ATTEMPT),
    ) {
        (Some(topic), Some(partition), Some(offset), Some(_)) => Origin::Carried {
            topic,
            partition,
            offset,
        },
        _ => Origin::Input {
            topic: msg.topic(),
            partition: msg.partition(),
            offset: msg.offset(),
        },
    }
}

/// Attempts made on this event so far (1 for a record read from the input).
pub fn attempts_made(msg: &OwnedMessage) -> u32 {
    header(msg, ATTEMPT)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1)
}

/// When a retry record is due (ms since the epoch), if it says.
pub fn due_ms(msg: &OwnedMessage) -> Option<i64> {
    header(msg, NOT_BEFORE).and_then(|t| t.parse().ok())
}

/// Retry partitions paused until their next record is due.
#[derive(Debug, Default)]
pub struct Delays {
    /// The assignment generation the pauses belong to.
    generation: u64,
    waiting: BTreeMap<(String, i32), i64>,
}

impl Delays {
    /// Forgets the pauses of an earlier assignment: a new one starts unpaused.
    pub fn follow(&mut self, generation: u64) {
        if generation != self.generation {
            self.waiting.clear();
            self.generation = generation;
        }
    }

    /// Whether the partition of `msg` is paused (a record fetched before the
    /// pause took effect is dropped: it is read again after the seek).
    pub fn holds(&self, msg: &OwnedMessage) -> bool {
        self.waiting
            .contains_key(&(msg.topic().to_owned(), msg.partition()))
    }

    /// Pauses `msg`'s partition and rewinds it to `msg`, until `due_ms`.
    pub fn hold<X: ConsumerContext, C: Consumer<X>>(
        &mut self,
        consumer: &C,
        msg: &OwnedMessage,
        due_ms: i64,
    ) -> Result<(), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(msg.topic(), msg.partition());
        consumer.pause(&tpl)?;
        consumer.seek(
            msg.topic(),
            msg.partition(),
            Offset::Offset(msg.offset()),
            Duration::from_secs(5),
        )?;
        self.waiting
            .insert((msg.topic().to_owned(), msg.partition()), due_ms);
        Ok(())
    }

    /// The earliest time a paused partition is due.
    pub fn next_due_ms(&self) -> Option<i64> {
        self.waiting.values().min().copied()
    }

    /// Resumes the partitions due at `now_ms`.
    pub fn release<X: ConsumerContext, C: Consumer<X>>(
        &mut self,
        consumer: &C,
        now_ms: i64,
    ) -> Result<(), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        self.waiting.retain(|(topic, partition), due| {
            let ready = *due <= now_ms;
            if ready {
                tpl.add_partition(topic, *partition);
            }
            !ready
        });
        if tpl.count() > 0 {
            consumer.resume(&tpl)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_assignment_forgets_the_pauses_of_the_last() {
        let mut delays = Delays::default();
        delays.follow(1);
        delays.waiting.insert(("orders.retry".into(), 0), 5);
        delays.follow(1);
        assert_eq!(
            delays.next_due_ms(),
            Some(5),
            "same assignment: still paused"
        );
        delays.follow(2);
        assert_eq!(delays.next_due_ms(), None, "new assignment: nothing paused");
    }
}
