//! Acknowledgements: what became of each event once its write (if any) is
//! acknowledged by the broker, counted in the job's summary and metrics.

use std::future::Future;
use std::pin::Pin;

use rdkafka::Message;
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;

use super::JobSummary;
use super::routing::AckKind;
use crate::metrics::JobMetrics;

/// What became of one input event, once its write (if any) is acknowledged.
pub(super) struct Ack {
    pub(super) msg: OwnedMessage,
    pub(super) kind: AckKind,
    /// The assignment generation the event was read in.
    pub(super) generation: u64,
    pub(super) result: Result<(), KafkaError>,
}

/// An acknowledgement to come.
pub(super) type AckFuture = Pin<Box<dyn Future<Output = Ack> + Send>>;

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
