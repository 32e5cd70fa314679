//! Errors that stop a job. Bad events never do: they go to the dead-letter topic.

use rdkafka::error::KafkaError;

/// Why an enricher job stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum EnrichError {
    /// The Kafka client failed.
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// A Kafka client could not be built, or the cluster could not be reached.
    #[error(transparent)]
    KafkaClient(#[from] tributary_kafka::ClientError),
    /// An input topic does not exist.
    #[error("job `{job}`: input topic `{topic}` does not exist")]
    NoSuchTopic {
        /// Job name.
        job: String,
        /// Missing topic.
        topic: String,
    },
    /// A partitioned table cannot follow the input's partitions.
    #[error(
        "job `{job}`: input topic `{topic}` has {topic_partitions} partitions but partitioned table `{table}` has {table_partitions}; a partitioned table must be co-partitioned with the input (same partition count, input keyed by the join key): declare the table `mode: global`, or repartition one of the topics"
    )]
    NotCoPartitioned {
        /// Job name.
        job: String,
        /// Input topic.
        topic: String,
        /// Its partition count.
        topic_partitions: u32,
        /// Table name.
        table: String,
        /// Partition count of the table's topic.
        table_partitions: u32,
    },
    /// Another producer took over this job's transactional id.
    #[error(
        "job `{job}`: another instance took over this job's Kafka transactions (fenced); stopping without committing"
    )]
    Fenced {
        /// Job name.
        job: String,
    },
    /// A Kafka transaction could not be committed; its outputs are aborted and
    /// its events will be read again.
    #[error("job `{job}`: transaction failed: {source}")]
    Transaction {
        /// Job name.
        job: String,
        /// The client's error.
        source: Box<KafkaError>,
    },
    /// An output could not be written (after the client's own retries).
    #[error("job `{job}`: writing to `{topic}` failed: {source}")]
    Produce {
        /// Job name.
        job: String,
        /// Output or dead-letter topic.
        topic: String,
        /// The client's error.
        source: Box<KafkaError>,
    },
}

impl EnrichError {
    /// Whether starting the job again (new clients, from the committed offsets)
    /// can cure this error: broker and transaction failures, not configuration,
    /// authorization or another instance having taken over.
    pub fn is_transient(&self) -> bool {
        let code = match self {
            EnrichError::Kafka(e) => e.rdkafka_error_code(),
            EnrichError::Transaction { source, .. } | EnrichError::Produce { source, .. } => {
                source.rdkafka_error_code()
            }
            _ => return false,
        };
        !matches!(
            code,
            Some(
                rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed
                    | rdkafka::types::RDKafkaErrorCode::GroupAuthorizationFailed
                    | rdkafka::types::RDKafkaErrorCode::ClusterAuthorizationFailed
                    | rdkafka::types::RDKafkaErrorCode::TransactionalIdAuthorizationFailed
            )
        )
    }
}
