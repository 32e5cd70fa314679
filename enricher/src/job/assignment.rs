//! The input partitions a job holds, as the consumer group's rebalances change
//! them: every assignment is passed on to the tables ([`HeldPartitions`]), and
//! every revocation starts a new generation, so work read before it can be
//! told apart (an exactly-once job aborts it; a partition's new owner reads it
//! again). [`JobContext`] is the consumer's context that feeds it, and exports
//! the consumer lag from the client's statistics.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, TopicPartitionList};
use tracing::{error, info};
use tributary_kafka::BaseConsumer;
use tributary_table_api::HeldPartitions;

use crate::metrics::InputLabel;

/// The input partitions a job holds, and the generation of that assignment.
#[derive(Clone)]
pub(super) struct Assignment {
    job: String,
    /// Partitions of the input (its topics are co-partitioned: the most of any).
    input_partitions: u32,
    follower: Option<Arc<dyn HeldPartitions>>,
    held: Arc<Mutex<BTreeSet<(String, i32)>>>,
    /// Incremented on every revocation.
    generation: Arc<AtomicU64>,
}

impl Assignment {
    /// No partitions yet of an input of `input_partitions`; `follower` hears
    /// of every assignment.
    pub(super) fn new(
        job: &str,
        input_partitions: u32,
        follower: Option<Arc<dyn HeldPartitions>>,
    ) -> Self {
        Assignment {
            job: job.to_owned(),
            input_partitions,
            follower,
            held: Arc::default(),
            generation: Arc::default(),
        }
    }

    /// The consumer now holds exactly `partitions` (topic, partition).
    pub(super) fn assign(&self, partitions: BTreeSet<(String, i32)>) {
        if let Some(follower) = &self.follower {
            let held = partitions.iter().map(|(_, p)| *p).collect();
            follower.follow(&self.job, held, self.input_partitions);
        }
        info!(job = %self.job, partitions = ?partitions, "input partitions assigned");
        *self.held.lock().expect("assignment lock") = partitions;
    }

    /// The consumer gave its partitions up: what was read so far belongs to an
    /// older generation.
    pub(super) fn revoke(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.held.lock().expect("assignment lock").clear();
    }

    /// The current generation.
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Whether `topic`'s `partition` is held now.
    pub(super) fn holds(&self, topic: &str, partition: i32) -> bool {
        self.held
            .lock()
            .expect("assignment lock")
            .contains(&(topic.to_owned(), partition))
    }
}

/// The partitions of a partition list.
pub(super) fn partitions_of(tpl: &TopicPartitionList) -> BTreeSet<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

/// Consumer context: follows rebalances into the [`Assignment`], exports lag
/// from client statistics.
pub(super) struct JobContext {
    pub(super) assignment: Assignment,
    /// Per input partition.
    pub(super) lag: Family<InputLabel, Gauge>,
    /// The job's total.
    pub(super) job_lag: Gauge,
}

impl ClientContext for JobContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        tributary_kafka::logging::log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tributary_kafka::logging::error(&error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        let mut total = 0;
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                if partition >= 0 && p.consumer_lag >= 0 {
                    let label = InputLabel {
                        job: self.assignment.job.clone(),
                        topic: topic.clone(),
                        partition: partition.to_string(),
                    };
                    self.lag.get_or_create(&label).set(p.consumer_lag);
                    total += p.consumer_lag;
                }
            }
        }
        self.job_lag.set(total);
    }
}

impl ConsumerContext for JobContext {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => self.assignment.assign(partitions_of(tpl)),
            Rebalance::Revoke(_) => self.assignment.revoke(),
            Rebalance::Error(e) => {
                error!(job = %self.assignment.job, error = %e, "rebalance failed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::Offset;
    use tributary_table_api::MemoryPartitions;

    use super::*;

    fn parts(list: &[(&str, i32)]) -> BTreeSet<(String, i32)> {
        list.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect()
    }

    #[test]
    fn an_assignment_is_passed_on_to_the_tables() {
        let tables = Arc::new(MemoryPartitions::default());
        let assignment = Assignment::new("orders", 8, Some(tables.clone()));
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("orders", 2, Offset::Beginning)
            .unwrap();
        tpl.add_partition("orders.retry", 5);
        assignment.assign(partitions_of(&tpl));
        assert_eq!(tables.followed("orders"), BTreeSet::from([2, 5]));
        assert_eq!(tables.input_partitions("orders"), Some(8));
        assert!(assignment.holds("orders", 2));
        assert!(assignment.holds("orders.retry", 5));
        assert!(!assignment.holds("orders", 5));
    }

    #[test]
    fn a_revocation_starts_a_new_generation_holding_nothing() {
        let assignment = Assignment::new("orders", 2, None);
        assignment.assign(parts(&[("orders", 0), ("orders", 1)]));
        let before = assignment.generation();
        assignment.revoke();
        assert_eq!(assignment.generation(), before + 1);
        assert!(!assignment.holds("orders", 0));
        assignment.assign(parts(&[("orders", 1)]));
        assert_eq!(assignment.generation(), before + 1, "assigning does not");
        assert!(assignment.holds("orders", 1));
        assert!(!assignment.holds("orders", 0));
    }
}
