//! Acknowledgements: the written events awaiting their records' delivery, in
//! input order ([`Unacked`]), and what became of each once its write (if any)
//! is done, counted in the job's summary and metrics ([`Tally`]).

use std::collections::{BTreeMap, VecDeque};

use tokio::time::Instant;

use rdkafka::Message;
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;

use super::JobSummary;
use super::routing::AckKind;
use crate::metrics::JobMetrics;

/// What became of one input event, once its write (if any) is done.
pub(super) struct Ack {
    pub(super) msg: OwnedMessage,
    pub(super) kind: AckKind,
    /// The assignment generation the event was read in.
    pub(super) generation: u64,
    pub(super) result: Result<(), KafkaError>,
}

/// What was sent for an event.
pub(super) enum Sent {
    /// Nothing (a skip, or abandoned work).
    Nothing,
    /// A record with this sequence number of the job's producer.
    Counted(u64),
    /// A record the client refused at once.
    Refused(KafkaError),
}

/// An event whose outcome is written, before it is acknowledged.
pub(super) struct Written {
    pub(super) msg: OwnedMessage,
    pub(super) kind: AckKind,
    /// The assignment generation the event was read in.
    pub(super) generation: u64,
    pub(super) sent: Sent,
}

/// What the oldest unacknowledged event waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Nothing: it is done below this watermark (the last one seen).
    Ready(u64),
    /// The producer's watermark to pass record `seq`, written for an event
    /// of `kind`; the watermark last moved (or the wait began) at `since`.
    Record {
        seq: u64,
        kind: AckKind,
        since: Instant,
    },
}

/// Written events not yet acknowledged, in input order: an event is
/// acknowledged once every record sent before its own is done too, so the
/// offsets it lets the job commit never pass an event still in flight.
pub(super) struct Unacked {
    queue: VecDeque<Written>,
    /// The producer's watermark, as last seen: every record below it is done.
    low: u64,
    /// When the watermark last moved, or the queue last stopped being empty.
    since: Instant,
}

impl Default for Unacked {
    fn default() -> Self {
        Unacked {
            queue: VecDeque::new(),
            low: 0,
            since: Instant::now(),
        }
    }
}

impl Unacked {
    /// `written` waits behind every event written before it.
    pub(super) fn push(&mut self, written: Written) {
        if self.queue.is_empty() {
            self.since = Instant::now();
        }
        self.queue.push_back(written);
    }

    /// Events awaiting acknowledgement.
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether every written event was acknowledged.
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// What the oldest event waits for; `None` when there is none.
    pub(super) fn waits_for(&self) -> Option<Wait> {
        let oldest = self.queue.front()?;
        Some(match oldest.sent {
            Sent::Counted(seq) if seq >= self.low => Wait::Record {
                seq,
                kind: oldest.kind,
                since: self.since,
            },
            _ => Wait::Ready(self.low),
        })
    }

    /// The oldest event, if it is done now that the watermark is `low`; its
    /// result is its refusal's error, taken from `refused`, if it has one.
    pub(super) fn next_done(
        &mut self,
        low: u64,
        refused: &mut BTreeMap<u64, KafkaError>,
    ) -> Option<Ack> {
        if low > self.low {
            self.low = low;
            self.since = Instant::now();
        }
        if let Sent::Counted(seq) = self.queue.front()?.sent
            && seq >= self.low
        {
            return None;
        }
        let Written {
            msg,
            kind,
            generation,
            sent,
        } = self.queue.pop_front()?;
        let result = match sent {
            Sent::Nothing => Ok(()),
            Sent::Counted(seq) => refused.remove(&seq).map_or(Ok(()), Err),
            Sent::Refused(e) => Err(e),
        };
        Some(Ack {
            msg,
            kind,
            generation,
            result,
        })
    }
}

/// The job's counts: its summary and its metrics, kept in step.
pub(super) struct Tally {
    pub(super) summary: JobSummary,
    metrics: JobMetrics,
}

impl Tally {
    /// Nothing counted yet.
    pub(super) fn new(job: &str, metrics: JobMetrics) -> Self {
        Tally {
            summary: JobSummary {
                job: job.to_owned(),
                events_in: 0,
                events_out: 0,
                dead_lettered: 0,
                skipped: 0,
                retried: 0,
                seconds: 0.0,
            },
            metrics,
        }
    }

    /// `events` more events were read.
    pub(super) fn read(&mut self, events: usize) {
        self.summary.events_in += events as u64;
        self.metrics.events_in.inc_by(events as u64);
    }

    /// Counts an acknowledged event of `kind` at `now_ms`; false when there is
    /// nothing to count (abandoned work: its offset must not move either).
    pub(super) fn acknowledged(&mut self, kind: AckKind, msg: &OwnedMessage, now_ms: i64) -> bool {
        let (summary, metrics) = (&mut self.summary, &self.metrics);
        match kind {
            AckKind::Out => {
                summary.events_out += 1;
                metrics.events_out.inc();
                if let Some(ts) = msg.timestamp().to_millis() {
                    let seconds = (now_ms - ts).max(0) as f64 / 1000.0;
                    metrics.latency_seconds.observe(seconds);
                }
            }
            AckKind::Dead => {
                summary.dead_lettered += 1;
                metrics.dead_lettered.inc();
            }
            AckKind::Skipped(skip) => {
                summary.skipped += 1;
                metrics.skipped(skip).inc();
            }
            AckKind::Retried => {
                summary.retried += 1;
                metrics.retried.inc();
            }
            AckKind::Abandoned => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;
    use rdkafka::Timestamp;

    use std::time::Duration;

    use super::*;
    use crate::metrics::EnrichMetrics;
    use crate::skip::Skip;

    fn msg(timestamp_ms: i64) -> OwnedMessage {
        OwnedMessage::new(
            Some(b"{}".to_vec()),
            None,
            "orders".into(),
            Timestamp::CreateTime(timestamp_ms),
            0,
            1,
            None,
        )
    }

    #[test]
    fn every_kind_is_counted_once_in_the_summary_and_the_metrics() {
        let metrics = EnrichMetrics::register(&mut Registry::default());
        let mut tally = Tally::new("orders", metrics.of_job("orders"));
        tally.read(7);
        let kinds = [
            AckKind::Out,
            AckKind::Out,
            AckKind::Dead,
            AckKind::Skipped(Skip::Deleted),
            AckKind::Skipped(Skip::Missed),
            AckKind::Retried,
        ];
        for kind in kinds {
            assert!(tally.acknowledged(kind, &msg(1_000), 3_000), "{kind:?}");
        }
        let s = &tally.summary;
        assert_eq!(
            (
                s.events_in,
                s.events_out,
                s.dead_lettered,
                s.skipped,
                s.retried
            ),
            (7, 2, 1, 2, 1)
        );
        let job = metrics.of_job("orders");
        assert_eq!(job.events_in.get(), 7);
        assert_eq!(job.acknowledged(), 6);
        assert_eq!(job.skipped(Skip::Missed).get(), 1);
    }

    fn written(offset: i64, kind: AckKind, sent: Sent) -> Written {
        Written {
            msg: msg(0).set_offset(offset),
            kind,
            generation: 1,
            sent,
        }
    }

    fn refusal() -> KafkaError {
        KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge)
    }

    /// Offsets of the events acknowledged at watermark `low`, each with whether it failed.
    fn done(
        unacked: &mut Unacked,
        low: u64,
        refused: &mut BTreeMap<u64, KafkaError>,
    ) -> Vec<(i64, bool)> {
        std::iter::from_fn(|| unacked.next_done(low, refused))
            .map(|ack| (ack.msg.offset(), ack.result.is_err()))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn events_are_acknowledged_in_input_order_once_their_records_are_done() {
        let mut unacked = Unacked::default();
        unacked.push(written(10, AckKind::Out, Sent::Counted(0)));
        unacked.push(written(11, AckKind::Skipped(Skip::Deleted), Sent::Nothing));
        unacked.push(written(12, AckKind::Out, Sent::Counted(1)));
        unacked.push(written(13, AckKind::Out, Sent::Refused(refusal())));
        unacked.push(written(14, AckKind::Dead, Sent::Counted(2)));
        let since = Instant::now();
        assert_eq!(
            unacked.waits_for(),
            Some(Wait::Record {
                seq: 0,
                kind: AckKind::Out,
                since
            })
        );
        // Record 1 is done but 0 is not: nothing is acknowledged, not even the skip.
        let mut refused = BTreeMap::new();
        assert_eq!(done(&mut unacked, 0, &mut refused), []);
        // 0 and 1 are done, 1 refused by the broker; 2 is not.
        refused.insert(1, refusal());
        assert_eq!(
            done(&mut unacked, 2, &mut refused),
            [(10, false), (11, false), (12, true), (13, true)]
        );
        assert!(refused.is_empty(), "the refusal was taken by its event");
        assert_eq!(unacked.len(), 1);
        assert_eq!(done(&mut unacked, 3, &mut refused), [(14, false)]);
        assert!(unacked.is_empty());
        assert_eq!(unacked.waits_for(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_that_sent_nothing_is_ready_at_the_last_watermark_seen() {
        let mut unacked = Unacked::default();
        unacked.push(written(1, AckKind::Out, Sent::Counted(0)));
        unacked.push(written(2, AckKind::Out, Sent::Counted(1)));
        unacked.push(written(3, AckKind::Retried, Sent::Counted(2)));
        let none = &mut BTreeMap::new();
        assert_eq!(done(&mut unacked, 2, none), [(1, false), (2, false)]);
        assert!(matches!(
            unacked.waits_for(),
            Some(Wait::Record {
                seq: 2,
                kind: AckKind::Retried,
                ..
            })
        ));
        unacked.push(written(4, AckKind::Skipped(Skip::Missed), Sent::Nothing));
        assert_eq!(done(&mut unacked, 3, none), [(3, false), (4, false)]);
        unacked.push(written(5, AckKind::Skipped(Skip::Missed), Sent::Nothing));
        unacked.push(written(6, AckKind::Out, Sent::Counted(3)));
        assert_eq!(unacked.waits_for(), Some(Wait::Ready(3)));
        assert_eq!(done(&mut unacked, 3, none), [(5, false)]);
        assert!(matches!(
            unacked.waits_for(),
            Some(Wait::Record { seq: 3, .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn the_stall_clock_restarts_when_the_watermark_moves_or_the_wait_begins() {
        let mut unacked = Unacked::default();
        tokio::time::advance(Duration::from_secs(100)).await;
        let began = Instant::now();
        unacked.push(written(1, AckKind::Out, Sent::Counted(0)));
        unacked.push(written(2, AckKind::Out, Sent::Counted(1)));
        let since = |unacked: &Unacked| match unacked.waits_for() {
            Some(Wait::Record { since, .. }) => since,
            other => panic!("{other:?}"),
        };
        assert_eq!(since(&unacked), began, "the wait began with the first push");
        tokio::time::advance(Duration::from_secs(5)).await;
        unacked.push(written(3, AckKind::Out, Sent::Counted(2)));
        assert_eq!(done(&mut unacked, 0, &mut BTreeMap::new()), []);
        assert_eq!(since(&unacked), began, "no move, no restart");
        assert_eq!(done(&mut unacked, 1, &mut BTreeMap::new()), [(1, false)]);
        assert_eq!(since(&unacked), began + Duration::from_secs(5));
    }

    #[test]
    fn abandoned_work_counts_nothing_and_moves_no_offset() {
        let metrics = EnrichMetrics::register(&mut Registry::default());
        let mut tally = Tally::new("orders", metrics.of_job("orders"));
        tally.read(1);
        assert!(!tally.acknowledged(AckKind::Abandoned, &msg(0), 0));
        assert_eq!(metrics.of_job("orders").acknowledged(), 0);
        let s = &tally.summary;
        assert_eq!(
            (s.events_out, s.dead_lettered, s.skipped, s.retried),
            (0, 0, 0, 0)
        );
    }
}
