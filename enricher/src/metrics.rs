//! Enricher metrics: names and labels in one place.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tributary_metrics::StripedCounter;

use crate::skip::Skip;

/// Label: a job.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabel {
    /// Job name.
    pub job: String,
}

/// Labels: why a job wrote nothing for an event.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkipLabel {
    /// Job name.
    pub job: String,
    /// `deleted` (a delete in a change stream) or `missed` (an inner join's `drop`).
    pub reason: String,
}

/// Labels: one join step's lookups.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JoinLabel {
    /// Job name.
    pub job: String,
    /// Table looked up.
    pub table: String,
    /// `hit` or `miss`.
    pub result: String,
}

/// Labels: one input partition of a job.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InputLabel {
    /// Job name.
    pub job: String,
    /// Input topic.
    pub topic: String,
    /// Kafka partition.
    pub partition: String,
}

fn latency_histogram() -> Histogram {
    // 100 µs .. ~100 s
    Histogram::new(exponential_buckets(1e-4, 2.0, 21))
}

/// Every enricher metric.
#[derive(Clone)]
pub struct EnrichMetrics {
    /// Input events consumed.
    pub events_in: Family<JobLabel, Counter>,
    /// Enriched events acknowledged by the broker.
    pub events_out: Family<JobLabel, Counter>,
    /// Events written to the dead-letter topic.
    pub dead_lettered: Family<JobLabel, Counter>,
    /// Events written to the retry topic for another attempt.
    pub retried: Family<JobLabel, Counter>,
    /// Events that produce no output, by reason.
    pub skipped: Family<SkipLabel, Counter>,
    /// Lookups per join step, hits and misses.
    pub joins: Family<JoinLabel, StripedCounter>,
    /// Event timestamp to acknowledged output, in seconds.
    pub latency_seconds: Family<JobLabel, Histogram, fn() -> Histogram>,
    /// Records between the committed offset and the partition's end.
    pub lag_records: Family<InputLabel, Gauge>,
    /// `lag_records` summed over the job's assigned partitions.
    pub job_lag_records: Family<JobLabel, Gauge>,
    /// Bytes of input events read and not yet acknowledged.
    pub in_flight_bytes: Family<JobLabel, Gauge>,
}

/// One job's series of [`EnrichMetrics`].
#[derive(Clone)]
pub struct JobMetrics {
    /// Input events consumed.
    pub events_in: Counter,
    /// Enriched events acknowledged.
    pub events_out: Counter,
    /// Events dead-lettered.
    pub dead_lettered: Counter,
    /// Events sent to the retry topic.
    pub retried: Counter,
    /// Event timestamp to acknowledged output, in seconds.
    pub latency_seconds: Histogram,
    /// Bytes of input events read and not yet acknowledged.
    pub in_flight_bytes: Gauge,
    /// Deletes in a change stream, skipped.
    deleted: Counter,
    /// Events an inner join dropped.
    missed: Counter,
    /// Events the job's filter skipped.
    filtered: Counter,
}

impl JobMetrics {
    /// Events whose outcome (output, dead letter, retry, skip) was acknowledged.
    pub fn acknowledged(&self) -> u64 {
        [
            &self.events_out,
            &self.dead_lettered,
            &self.retried,
            &self.deleted,
            &self.missed,
            &self.filtered,
        ]
        .iter()
        .map(|c| c.get())
        .sum()
    }

    /// The counter of events skipped for `skip`.
    pub fn skipped(&self, skip: Skip) -> &Counter {
        match skip {
            Skip::Deleted => &self.deleted,
            Skip::Missed => &self.missed,
            Skip::Filtered => &self.filtered,
        }
    }
}

impl Default for EnrichMetrics {
    fn default() -> Self {
        EnrichMetrics {
            events_in: Family::default(),
            events_out: Family::default(),
            dead_lettered: Family::default(),
            retried: Family::default(),
            skipped: Family::default(),
            joins: Family::default(),
            latency_seconds: Family::new_with_constructor(latency_histogram),
            lag_records: Family::default(),
            job_lag_records: Family::default(),
            in_flight_bytes: Family::default(),
        }
    }
}

impl EnrichMetrics {
    /// Creates the metrics and registers them under `tributary_enrich_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = EnrichMetrics::default();
        let r = registry.sub_registry_with_prefix("tributary_enrich");
        r.register("events_in", "Input events consumed", m.events_in.clone());
        r.register(
            "events_out",
            "Enriched events acknowledged by the broker",
            m.events_out.clone(),
        );
        r.register(
            "dead_lettered",
            "Events written to the dead-letter topic",
            m.dead_lettered.clone(),
        );
        r.register(
            "retried",
            "Events written to the retry topic for another attempt",
            m.retried.clone(),
        );
        r.register(
            "skipped",
            "Events that produce no output, by reason",
            m.skipped.clone(),
        );
        r.register(
            "join_lookups",
            "Lookups per join step, by result",
            m.joins.clone(),
        );
        r.register(
            "latency_seconds",
            "Event timestamp to acknowledged output",
            m.latency_seconds.clone(),
        );
        r.register(
            "lag_records",
            "Records not yet committed, per input partition",
            m.lag_records.clone(),
        );
        r.register(
            "job_lag_records",
            "Records not yet committed, summed over the job's assigned input partitions",
            m.job_lag_records.clone(),
        );
        r.register(
            "in_flight_bytes",
            "Bytes of input events read and not yet acknowledged (bounded by max_in_flight_mb)",
            m.in_flight_bytes.clone(),
        );
        m
    }

    /// `job`'s own metrics, looked up once: a family lookup per event hashes the
    /// label and takes a lock.
    pub fn of_job(&self, job: &str) -> JobMetrics {
        let label = JobLabel {
            job: job.to_owned(),
        };
        let events_in = self.events_in.get_or_create(&label).clone();
        let events_out = self.events_out.get_or_create(&label).clone();
        let dead_lettered = self.dead_lettered.get_or_create(&label).clone();
        let retried = self.retried.get_or_create(&label).clone();
        let latency_seconds = self.latency_seconds.get_or_create(&label).clone();
        let in_flight_bytes = self.in_flight_bytes.get_or_create(&label).clone();
        let skipped = |skip: Skip| {
            self.skipped
                .get_or_create(&SkipLabel {
                    job: job.to_owned(),
                    reason: skip.label().to_owned(),
                })
                .clone()
        };
        JobMetrics {
            deleted: skipped(Skip::Deleted),
            missed: skipped(Skip::Missed),
            filtered: skipped(Skip::Filtered),
            events_in,
            events_out,
            dead_lettered,
            retried,
            latency_seconds,
            in_flight_bytes,
        }
    }

    /// The counter of `job`'s lookups in `table` with `result`.
    pub fn join(&self, job: &str, table: &str, result: &str) -> StripedCounter {
        self.joins
            .get_or_create(&JoinLabel {
                job: job.to_owned(),
                table: table.to_owned(),
                result: result.to_owned(),
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_series_count_into_its_own_labels() {
        let mut registry = Registry::default();
        let metrics = EnrichMetrics::register(&mut registry);
        let (a, b) = (metrics.of_job("a"), metrics.of_job("b"));
        a.skipped(Skip::Missed).inc();
        a.skipped(Skip::Missed).inc();
        b.skipped(Skip::Deleted).inc();
        a.events_in.inc_by(3);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for sample in [
            r#"tributary_enrich_skipped_total{job="a",reason="missed"} 2"#,
            r#"tributary_enrich_skipped_total{job="a",reason="deleted"} 0"#,
            r#"tributary_enrich_skipped_total{job="b",reason="deleted"} 1"#,
            r#"tributary_enrich_events_in_total{job="a"} 3"#,
            r#"tributary_enrich_events_in_total{job="b"} 0"#,
        ] {
            assert!(text.contains(sample), "{sample} not in\n{text}");
        }
    }
}
