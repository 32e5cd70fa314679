//! Capture errors. Each variant says what is wrong and, where there is one, how to fix it.

/// Everything that can stop capture.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The configuration file is invalid.
    #[error("config: {field}: {problem}")]
    Config {
        /// Path of the offending field (`source.port`, `include.tables[2]`).
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The server cannot be captured as configured (binlog off, wrong format, ...).
    #[error("source database is not set up for capture: {0}")]
    ServerSetup(String),
    /// The capture user lacks a privilege.
    #[error(
        "the capture user lacks the {grant} privilege ({detail}); run: GRANT {grant} ON *.* TO '<user>'@'<host>'"
    )]
    MissingGrant {
        /// The privilege to grant.
        grant: &'static str,
        /// The server's error message.
        detail: String,
    },
    /// The stored position is no longer in the server's binlog.
    #[error(
        "binlog position {position} is no longer available on the server ({detail}); the changes after it are lost to this capture. Recover with a new snapshot: set snapshot.mode: when_needed and restart (it re-reads the tables and continues from there), or delete the stored position (topic `{offsets_topic}`) and restart with snapshot.mode: initial"
    )]
    PositionLost {
        /// The position capture tried to resume from.
        position: String,
        /// The compacted topic holding the stored position.
        offsets_topic: String,
        /// The server's error message.
        detail: String,
    },
    /// A binlog event could not be decoded.
    #[error("cannot decode binlog event at {file}:{pos}: {detail}")]
    Decode {
        /// Binlog file.
        file: String,
        /// Position of the event.
        pos: u64,
        /// What went wrong.
        detail: String,
    },
    /// A change read from PostgreSQL's WAL could not be decoded.
    #[error("cannot decode the change at LSN {lsn}: {detail}")]
    WalDecode {
        /// Where the change is.
        lsn: String,
        /// What went wrong (naming table and column where it is one value).
        detail: String,
    },
    /// Another capture of the same datastream took over (`delivery: exactly_once`).
    #[error(
        "another capture instance of this datastream (same server_name) took over its Kafka transactions (fenced); only one may run at a time"
    )]
    Fenced,
    /// A database or broker cannot be reached (retried with backoff).
    #[error("{endpoint} is unreachable: {detail}")]
    Unreachable {
        /// What could not be reached, e.g. `database 10.0.0.5:3306`.
        endpoint: String,
        /// The connection error.
        detail: String,
    },
    /// A wait on the broker outlived `kafka.stall_timeout_s` (retried from the stored position).
    #[error(
        "kafka: no {waiting_for} after {after:?} (kafka.stall_timeout_s); restarting the Kafka side from the last stored position"
    )]
    Stalled {
        /// What did not come.
        waiting_for: &'static str,
        /// How long capture waited.
        after: std::time::Duration,
    },
    /// TLS to the source database failed: the server offers no TLS, or its
    /// certificate (or capture's) was refused. Not retried.
    #[error("TLS to the source database failed: {detail}")]
    SourceTls {
        /// The refusal (rustls's reason) or what could not be read.
        detail: String,
    },
    /// A database connection or query failed (retried when transient).
    #[error("database: {0}")]
    Database(#[from] mysql_async::Error),
    /// A PostgreSQL session or query failed (retried when transient).
    #[error("database: {detail}")]
    Postgres {
        /// The server's message (with its SQLSTATE), or the connection error.
        detail: String,
        /// A lost connection, a server shutting down or too busy, a conflict.
        transient: bool,
    },
    /// A Kafka operation failed (retried when transient).
    #[error("kafka: {0}")]
    Kafka(rdkafka::error::KafkaError),
    /// `tributary snapshot` cannot ask for the snapshot it was given.
    #[error("cannot request a snapshot: {0}")]
    SnapshotRequest(String),
    /// A stored position could not be read back.
    #[error("stored position in topic {topic} is unreadable: {detail}")]
    BadStoredPosition {
        /// Offsets topic.
        topic: String,
        /// Why.
        detail: String,
    },
}

impl From<tokio_postgres::Error> for CaptureError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => CaptureError::Postgres {
                detail: format!("{} (SQLSTATE {})", db.message(), db.code().code()),
                // Admin shutdown, cannot connect now, too many connections,
                // serialization failure, deadlock.
                transient: matches!(
                    db.code().code(),
                    "57P01" | "57P02" | "57P03" | "53300" | "40001" | "40P01"
                ),
            },
            None => CaptureError::Postgres {
                detail: e.to_string(),
                transient: e.is_closed() || std::error::Error::source(&e).is_some(),
            },
        }
    }
}

impl From<pgwire_replication::PgWireError> for CaptureError {
    fn from(e: pgwire_replication::PgWireError) -> Self {
        match e {
            pgwire_replication::PgWireError::Tls(detail) => CaptureError::SourceTls { detail },
            e => CaptureError::Postgres {
                transient: e.is_transient(),
                detail: format!("replication: {e}"),
            },
        }
    }
}

impl From<tributary_config::ConfigError> for CaptureError {
    fn from(e: tributary_config::ConfigError) -> Self {
        CaptureError::Config {
            field: e.field,
            problem: e.problem,
        }
    }
}

impl From<tributary_kafka::ClientError> for CaptureError {
    fn from(e: tributary_kafka::ClientError) -> Self {
        use tributary_kafka::ClientError;
        match e {
            ClientError::Secret { field, problem } => CaptureError::Config { field, problem },
            ClientError::Create { .. } => CaptureError::Config {
                field: "kafka".to_owned(),
                problem: e.to_string(),
            },
            ClientError::Unreachable { brokers, cause } => CaptureError::Unreachable {
                endpoint: format!("Kafka at {brokers}"),
                detail: cause,
            },
        }
    }
}

impl From<rdkafka::error::KafkaError> for CaptureError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        use rdkafka::types::RDKafkaErrorCode::{Fenced, InvalidProducerEpoch, ProducerFenced};
        match e.rdkafka_error_code() {
            Some(Fenced | ProducerFenced | InvalidProducerEpoch) => CaptureError::Fenced,
            _ => CaptureError::Kafka(e),
        }
    }
}

impl CaptureError {
    /// A failed send or wait of the tracked producer; a missing report is
    /// reported as no `waiting_for`.
    pub(crate) fn delivery(
        e: tributary_kafka::tracked::DeliveryError,
        waiting_for: &'static str,
    ) -> Self {
        use tributary_kafka::tracked::DeliveryError;
        match e {
            DeliveryError::Kafka(e) => e.into(),
            DeliveryError::QueueFull(after) => CaptureError::Stalled {
                waiting_for: "room in the producer queue",
                after,
            },
            DeliveryError::Stalled(after) => CaptureError::Stalled { waiting_for, after },
        }
    }

    /// Whether retrying (reconnecting) can fix this error.
    pub fn is_transient(&self) -> bool {
        match self {
            CaptureError::Unreachable { .. } | CaptureError::Stalled { .. } => true,
            CaptureError::Postgres { transient, .. } => *transient,
            CaptureError::Database(e) => match e {
                mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => true,
                // 1040 too many connections, 1053 shutdown in progress, 1205/1213 lock timeouts,
                // 2013 lost connection, 1927 connection killed.
                mysql_async::Error::Server(s) => {
                    matches!(s.code, 1040 | 1053 | 1205 | 1213 | 1927 | 2006 | 2013)
                }
                _ => false,
            },
            // A fatal or abortable producer error is cured by a new producer
            // (fencing is told apart as `Fenced`); authorization is not.
            CaptureError::Kafka(e) => !matches!(
                e.rdkafka_error_code(),
                Some(rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed)
                    | Some(rdkafka::types::RDKafkaErrorCode::ClusterAuthorizationFailed)
                    | Some(rdkafka::types::RDKafkaErrorCode::TransactionalIdAuthorizationFailed)
            ),
            _ => false,
        }
    }
}
