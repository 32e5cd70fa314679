//! Exactly-once delivery (`delivery: exactly_once`): a job's outputs, dead
//! letters and the input offsets they consume are written in one Kafka
//! transaction (consume–transform–produce), committed every `commit_interval_ms`.
//!
//! The consumed offsets go to the group through the transaction with the
//! consumer's group metadata, so a broker with full transaction support fences
//! a zombie instance by its group generation. A rebalance aborts the open
//! transaction: what it held is read again from the committed offsets by
//! whoever owns the partitions next. Consumers of the output must read with
//! `isolation.level=read_committed`.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use tributary_kafka::tracked::Tracker;

use crate::error::EnrichError;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The open transaction of a job.
pub struct Transactions {
    job: String,
    /// Next offset to consume per input partition, for what the transaction holds.
    written: BTreeMap<(String, i32), i64>,
    /// The consumer-group generation the transaction belongs to.
    generation: u64,
}

impl Transactions {
    /// Registers the producer's transactional id (fencing older producers of it)
    /// and opens the first transaction. Blocking.
    pub fn start(job: &str, producer: &ThreadedProducer<Tracker>) -> Result<Self, EnrichError> {
        let txn = Transactions {
            job: job.to_owned(),
            written: BTreeMap::new(),
            generation: 0,
        };
        producer
            .init_transactions(TIMEOUT)
            .map_err(|e| txn.error(e))?;
        producer.begin_transaction().map_err(|e| txn.error(e))?;
        Ok(txn)
    }

    /// The generation the open transaction belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The transaction now holds what the record at `offset` produced.
    pub fn written(&mut self, topic: &str, partition: i32, offset: i64) {
        let next = self
            .written
            .entry((topic.to_owned(), partition))
            .or_insert(offset + 1);
        *next = (*next).max(offset + 1);
    }

    /// Commits the outputs with their input offsets and opens the next
    /// transaction. Blocking; an error stops the job (its outputs are aborted).
    pub fn commit<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
        &mut self,
        producer: &ThreadedProducer<Tracker>,
        consumer: &C,
    ) -> Result<(), EnrichError> {
        if self.written.is_empty() {
            return Ok(());
        }
        let mut offsets = TopicPartitionList::new();
        for ((topic, partition), next) in &self.written {
            offsets
                .add_partition_offset(topic, *partition, Offset::Offset(*next))
                .map_err(|e| self.error(e))?;
        }
        let group = consumer
            .group_metadata()
            .ok_or_else(|| self.error(KafkaError::Global(RDKafkaErrorCode::State)))?;
        producer
            .send_offsets_to_transaction(&offsets, &group, TIMEOUT)
            .and_then(|()| producer.commit_transaction(TIMEOUT))
            .map_err(|e| self.error(e))?;
        self.written.clear();
        producer.begin_transaction().map_err(|e| self.error(e))
    }

    /// Drops the open transaction (after a rebalance) and opens one for `generation`.
    pub fn abort(
        &mut self,
        producer: &ThreadedProducer<Tracker>,
        generation: u64,
    ) -> Result<(), EnrichError> {
        producer
            .abort_transaction(TIMEOUT)
            .map_err(|e| self.error(e))?;
        self.written.clear();
        self.generation = generation;
        producer.begin_transaction().map_err(|e| self.error(e))
    }

    fn error(&self, e: KafkaError) -> EnrichError {
        let fenced = matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::Fenced
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
            )
        );
        if fenced {
            EnrichError::Fenced {
                job: self.job.clone(),
            }
        } else {
            EnrichError::Transaction {
                job: self.job.clone(),
                source: Box::new(e),
            }
        }
    }
}
