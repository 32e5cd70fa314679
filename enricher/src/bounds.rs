//! Bounded runs (`--from` / `--until`): backfills and experiments that read a
//! fixed range of every input partition and stop by themselves.
//!
//! A bounded run assigns every input partition itself (no consumer-group
//! membership) and commits nothing, so it never moves a live job's offsets.
//! Both bounds are resolved to offsets per partition before the first record is
//! read: `until` is exclusive (an offset, the first record at or after a time,
//! or the partition's end when the run starts).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, UNIX_EPOCH};

use rdkafka::Message;
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use tributary_kafka::BaseConsumer;

use crate::error::EnrichError;

/// Where a bounded run starts in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The job's committed offsets (the beginning where there are none).
    Committed,
    /// The first retained record.
    Beginning,
    /// This offset.
    Offset(i64),
    /// The first record at or after this time (ms since the epoch).
    Time(i64),
}

/// Where a bounded run stops in each partition (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAt {
    /// The partition's end when the run starts.
    End,
    /// This offset.
    Offset(i64),
    /// The first record at or after this time (ms since the epoch).
    Time(i64),
}

/// The range of a bounded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Start in each partition.
    pub from: StartAt,
    /// Stop in each partition.
    pub until: StopAt,
}

/// `2026-11-30T12:00:00Z` (RFC 3339) → ms since the epoch.
fn parse_time(text: &str) -> Option<i64> {
    let time = humantime::parse_rfc3339_weak(text).ok()?;
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    i64::try_from(since.as_millis()).ok()
}

impl FromStr for StartAt {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "committed" => Ok(StartAt::Committed),
            "beginning" => Ok(StartAt::Beginning),
            _ => text
                .parse()
                .ok()
                .filter(|o: &i64| *o >= 0)
                .map(StartAt::Offset)
                .or_else(|| parse_time(text).map(StartAt::Time))
                .ok_or_else(|| {
                    format!(
                        "{text:?}: expected committed, beginning, an offset or an RFC 3339 time"
                    )
                }),
        }
    }
}

impl FromStr for StopAt {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "end" => Ok(StopAt::End),
            _ => text
                .parse()
                .ok()
                .filter(|o: &i64| *o >= 0)
                .map(StopAt::Offset)
                .or_else(|| parse_time(text).map(StopAt::Time))
                .ok_or_else(|| format!("{text:?}: expected end, an offset or an RFC 3339 time")),
        }
    }
}

/// One partition's resolved range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    /// Next offset still to acknowledge.
    next: i64,
    /// Exclusive end.
    end: i64,
}

/// Resolved ranges and how far each partition has got.
#[derive(Debug, Default)]
pub struct Tracker {
    /// Per topic (looked up by `&str`, once per record), per partition.
    ranges: BTreeMap<String, BTreeMap<i32, Range>>,
}

impl Tracker {
    /// Whether the record at `offset` lies past its partition's end.
    pub fn is_beyond(&self, topic: &str, partition: i32, offset: i64) -> bool {
        self.ranges
            .get(topic)
            .and_then(|partitions| partitions.get(&partition))
            .is_none_or(|r| offset >= r.end)
    }

    /// Records that everything up to `offset` is acknowledged.
    pub fn acked(&mut self, topic: &str, partition: i32, offset: i64) {
        let range = self
            .ranges
            .get_mut(topic)
            .and_then(|p| p.get_mut(&partition));
        if let Some(r) = range {
            r.next = r.next.max(offset + 1);
        }
    }

    /// Every partition has reached its end.
    pub fn all_done(&self) -> bool {
        self.ranges
            .values()
            .flat_map(BTreeMap::values)
            .all(|r| r.next >= r.end)
    }

    fn insert(&mut self, topic: &str, partition: i32, range: Range) {
        let partitions = self.ranges.entry(topic.to_owned()).or_default();
        partitions.insert(partition, range);
    }
}

/// The end of a partition: its high watermark, or past it when records exist
/// there. Some brokers under-report the high watermark (STACK.md: Tansu reports
/// the last batch's base offset + 1), so `probe` reads from the watermark on
/// until its end, or until a record written after `now_ms`.
fn true_end(
    probe: &BaseConsumer,
    topic: &str,
    partition: i32,
    high: i64,
    now_ms: i64,
) -> Result<i64, EnrichError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(high))?;
    probe.assign(&tpl)?;
    let mut end = high;
    // The probe reports the partition's end (`enable.partition.eof`).
    while let Some(item) = probe.poll(Duration::from_secs(5)) {
        match item {
            Ok(msg) if msg.timestamp().to_millis().is_some_and(|t| t > now_ms) => break,
            Ok(msg) => end = end.max(msg.offset() + 1),
            Err(KafkaError::PartitionEOF(_)) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(end)
}

/// Resolves `bounds` for every partition of `topics` (blocking calls): the
/// assignment to start from and the tracker of where to stop. `probe` is a
/// client of its own used to find true partition ends.
pub fn plan<X: ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    probe: &BaseConsumer,
    topics: &[(String, u32)],
    bounds: Bounds,
) -> Result<(TopicPartitionList, Tracker), EnrichError> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let timeout = Duration::from_secs(10);
    let mut all = TopicPartitionList::new();
    for (topic, count) in topics {
        for partition in 0..*count as i32 {
            all.add_partition(topic, partition);
        }
    }
    let at_time = |time: i64| -> Result<TopicPartitionList, EnrichError> {
        let mut wanted = TopicPartitionList::new();
        for e in all.elements() {
            wanted.add_partition_offset(e.topic(), e.partition(), Offset::Offset(time))?;
        }
        Ok(consumer.offsets_for_times(wanted, timeout)?)
    };
    let offset_in = |tpl: &TopicPartitionList, topic: &str, partition: i32| {
        tpl.find_partition(topic, partition)
            .and_then(|e| e.offset().to_raw())
            .filter(|o| *o >= 0)
    };
    let committed = match bounds.from {
        StartAt::Committed => Some(consumer.committed_offsets(all.clone(), timeout)?),
        _ => None,
    };
    let from_times = match bounds.from {
        StartAt::Time(t) => Some(at_time(t)?),
        _ => None,
    };
    let until_times = match bounds.until {
        StopAt::Time(t) => Some(at_time(t)?),
        _ => None,
    };
    let (mut assignment, mut tracker) = (TopicPartitionList::new(), Tracker::default());
    for e in all.elements() {
        let (topic, partition) = (e.topic(), e.partition());
        let (low, reported) = consumer.fetch_watermarks(topic, partition, timeout)?;
        let high = true_end(probe, topic, partition, reported, now_ms)?;
        let start = match bounds.from {
            StartAt::Beginning => low,
            StartAt::Offset(o) => o.clamp(low, high),
            StartAt::Committed => committed
                .as_ref()
                .and_then(|c| offset_in(c, topic, partition))
                .unwrap_or(low),
            StartAt::Time(_) => from_times
                .as_ref()
                .and_then(|t| offset_in(t, topic, partition))
                .unwrap_or(high),
        };
        let end = match bounds.until {
            StopAt::End => high,
            StopAt::Offset(o) => o.min(high),
            StopAt::Time(_) => until_times
                .as_ref()
                .and_then(|t| offset_in(t, topic, partition))
                .unwrap_or(high),
        };
        tracing::info!(%topic, partition, start, end, "bounded range");
        assignment.add_partition_offset(topic, partition, Offset::Offset(start))?;
        tracker.insert(topic, partition, Range { next: start, end });
    }
    Ok((assignment, tracker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bounds() {
        assert_eq!("committed".parse(), Ok(StartAt::Committed));
        assert_eq!("beginning".parse(), Ok(StartAt::Beginning));
        assert_eq!("42".parse(), Ok(StartAt::Offset(42)));
        assert_eq!(
            "2026-11-30T12:00:00Z".parse(),
            Ok(StartAt::Time(1_796_040_000_000))
        );
        assert!("-3".parse::<StartAt>().is_err());
        assert!(
            "yesterday"
                .parse::<StartAt>()
                .unwrap_err()
                .contains("RFC 3339")
        );
        assert_eq!("end".parse(), Ok(StopAt::End));
        assert_eq!("7".parse(), Ok(StopAt::Offset(7)));
        assert!("soon".parse::<StopAt>().is_err());
    }

    #[test]
    fn tracks_partitions_to_their_ends() {
        let mut t = Tracker::default();
        t.insert("a", 0, Range { next: 5, end: 7 });
        t.insert("a", 1, Range { next: 3, end: 3 });
        assert!(!t.all_done());
        assert!(!t.is_beyond("a", 0, 6));
        assert!(t.is_beyond("a", 0, 7));
        assert!(t.is_beyond("a", 1, 3));
        assert!(t.is_beyond("b", 0, 0), "unknown partitions are not read");
        t.acked("a", 0, 5);
        assert!(!t.all_done());
        t.acked("a", 0, 6);
        assert!(t.all_done());
    }
}
