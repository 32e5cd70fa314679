//! librdkafka's log lines and error callbacks, through `tracing` (target
//! `librdkafka`) at levels an operator can act on: ERROR only for what no wait
//! mends (a refused certificate or password, a fatal producer error), WARN for
//! what librdkafka retries on its own (a broker down, a timed-out request),
//! and DEBUG for the end of a partition, which is news, not a failure.
//!
//! Every client the factory builds carries [`Logged`]; a component with
//! callbacks of its own calls [`log`] and [`error`] from them.

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Errors that no wait mends: the broker refused our certificate or
/// credentials, we refused its certificate, or the client cannot go on.
pub(crate) const PERMANENT: &[RDKafkaErrorCode] = &[
    RDKafkaErrorCode::Authentication,
    RDKafkaErrorCode::SSL,
    RDKafkaErrorCode::SaslAuthenticationFailed,
    RDKafkaErrorCode::UnsupportedSASLMechanism,
    RDKafkaErrorCode::IllegalSASLState,
];

/// The callbacks of every client the factory builds: librdkafka's logs and
/// errors go to `tracing` at the levels of [`log`] and [`error`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Logged;

impl ClientContext for Logged {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self::error(&error, reason);
    }
}

impl ConsumerContext for Logged {}

/// A producer built by the factory (with [`Logged`] unless it has callbacks of its own).
pub type FutureProducer<C = Logged> = rdkafka::producer::FutureProducer<C>;
/// A consumer built by the factory.
pub type StreamConsumer<C = Logged> = rdkafka::consumer::StreamConsumer<C>;
/// A polling consumer built by the factory.
pub type BaseConsumer<C = Logged> = rdkafka::consumer::BaseConsumer<C>;
/// An admin client built by the factory.
pub type AdminClient<C = Logged> = rdkafka::admin::AdminClient<C>;

/// How loud a librdkafka error callback is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loudness {
    /// The end of a partition: expected whenever a reader catches up.
    Debug,
    /// librdkafka retries it on its own; it matters only if it lasts, which
    /// the components' stall checks report.
    Warn,
    /// No retry mends it: an operator must act.
    Error,
}

/// How loud `error` is (see [`Loudness`]).
pub fn loudness(error: &KafkaError) -> Loudness {
    if matches!(error, KafkaError::PartitionEOF(_)) {
        return Loudness::Debug;
    }
    match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::PartitionEOF) => Loudness::Debug,
        Some(RDKafkaErrorCode::Fatal) => Loudness::Error,
        Some(code) if PERMANENT.contains(&code) => Loudness::Error,
        _ => Loudness::Warn,
    }
}

/// Logs a librdkafka error callback at its [`loudness`].
pub fn error(error: &KafkaError, reason: &str) {
    match loudness(error) {
        Loudness::Debug => tracing::debug!(target: "librdkafka", %error, reason),
        Loudness::Warn => tracing::warn!(target: "librdkafka", %error, reason),
        Loudness::Error => tracing::error!(target: "librdkafka", %error, reason),
    }
}

/// Logs a librdkafka log line. Its own ERROR lines (a connection refused, a
/// request timed out) are retried by librdkafka and reported again through
/// the error callback when they matter, so they are warnings here; only its
/// critical lines are errors.
pub fn log(level: RDKafkaLogLevel, facility: &str, message: &str) {
    use RDKafkaLogLevel::*;
    match level {
        Emerg | Alert | Critical => tracing::error!(target: "librdkafka", facility, "{message}"),
        Error | Warning => tracing::warn!(target: "librdkafka", facility, "{message}"),
        Notice => tracing::info!(target: "librdkafka", facility, "{message}"),
        Info => tracing::debug!(target: "librdkafka", facility, "{message}"),
        Debug => tracing::trace!(target: "librdkafka", facility, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_partition_is_not_an_error() {
        assert_eq!(loudness(&KafkaError::PartitionEOF(3)), Loudness::Debug);
        assert_eq!(
            loudness(&KafkaError::Global(RDKafkaErrorCode::PartitionEOF)),
            Loudness::Debug
        );
    }

    #[test]
    fn what_librdkafka_retries_is_a_warning() {
        for code in [
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::Resolve,
            RDKafkaErrorCode::RequestTimedOut,
        ] {
            assert_eq!(
                loudness(&KafkaError::Global(code)),
                Loudness::Warn,
                "{code:?}"
            );
        }
    }

    #[test]
    fn what_no_wait_mends_is_an_error() {
        for code in [
            RDKafkaErrorCode::Authentication,
            RDKafkaErrorCode::SSL,
            RDKafkaErrorCode::SaslAuthenticationFailed,
            RDKafkaErrorCode::Fatal,
        ] {
            assert_eq!(
                loudness(&KafkaError::Global(code)),
                Loudness::Error,
                "{code:?}"
            );
        }
    }
}
