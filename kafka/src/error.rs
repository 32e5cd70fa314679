//! What can go wrong building a Kafka client or reaching the cluster.

use tributary_config::ConfigError;

/// A Kafka client could not be built, or the cluster could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A secret could not be read (the message names the file or variable, never the value).
    #[error("config: {field}: {problem}")]
    Secret {
        /// Path of the field naming the secret's source.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// librdkafka refused the client's settings.
    #[error("Kafka client {client}: {source}")]
    Create {
        /// The client's `client.id`.
        client: String,
        /// librdkafka's error (property values it quotes are never secrets).
        source: rdkafka::error::KafkaError,
    },
    /// The cluster did not answer within the connect timeout, or refused us.
    #[error("cannot reach Kafka at {brokers}: {cause}")]
    Unreachable {
        /// `bootstrap.servers`.
        brokers: String,
        /// What the client saw last, naming the broker (librdkafka's words).
        cause: String,
    },
}

impl ClientError {
    /// The same problem as a configuration error (for `validate`).
    pub(crate) fn into_config(self) -> ConfigError {
        match self {
            ClientError::Secret { field, problem } => ConfigError::new(field, problem),
            other => ConfigError::new("", other.to_string()),
        }
    }
}
