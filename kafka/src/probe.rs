//! The startup check: reach the cluster once before doing anything, so a wrong
//! certificate, password or protocol ends the command within the connect
//! timeout with one line naming the broker and the cause, instead of clients
//! retrying forever in the background while nothing moves.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use tracing::info;

use crate::config::KafkaConfig;
use crate::error::ClientError;
use crate::logging::PERMANENT;
use crate::tls_check::certificate_problem;

/// Remembers what librdkafka said went wrong, instead of logging it.
#[derive(Default)]
struct Witness {
    last_failure: Mutex<Option<String>>,
}

impl ClientContext for Witness {
    fn log(&self, level: RDKafkaLogLevel, _facility: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            *self.last_failure.lock().expect("not poisoned") = Some(message.to_owned());
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        *self.last_failure.lock().expect("not poisoned") = Some(format!("{error}: {reason}"));
    }
}

impl ConsumerContext for Witness {}

/// `cause`, followed by what is wrong with the broker's certificate when that
/// is why the handshake failed (librdkafka does not say).
fn with_certificate_problem(kafka: &KafkaConfig, cause: String) -> String {
    let first = kafka.brokers.split(',').next().unwrap_or_default().trim();
    let problem = kafka
        .security
        .tls
        .as_ref()
        .filter(|_| cause.contains("certificate verify failed"))
        .and_then(|tls| certificate_problem(first, tls));
    match problem {
        Some(problem) => format!("{cause}; {problem}"),
        None => cause,
    }
}

/// Reaches the cluster (TLS handshake, SASL authentication, metadata) within
/// `kafka.connect_timeout_s`; blocking. `component` names the client.
pub fn check_connection(kafka: &KafkaConfig, component: &str) -> Result<(), ClientError> {
    let client: BaseConsumer<Witness> = kafka
        .consumer(&format!("{component}.probe"), "tributary-probe")
        .create_with_context(Witness::default())?;
    let deadline = Instant::now() + kafka.connect_timeout();
    let unreachable = |cause: String| ClientError::Unreachable {
        brokers: kafka.brokers.clone(),
        cause,
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match client.fetch_metadata(None, left.min(Duration::from_secs(1))) {
            Ok(metadata) => {
                info!(brokers = %kafka.brokers, protocol = ?kafka.security.protocol, count = metadata.brokers().len(), "reached Kafka");
                return Ok(());
            }
            Err(e) => {
                let mut permanent = false;
                // Deliver queued logs and error events to the witness.
                while let Some(event) = client.poll(Duration::from_millis(50)) {
                    if let Err(e) = event {
                        permanent |= e
                            .rdkafka_error_code()
                            .is_some_and(|c| PERMANENT.contains(&c));
                    }
                }
                let cause = client
                    .context()
                    .last_failure
                    .lock()
                    .expect("not poisoned")
                    .clone()
                    .unwrap_or_else(|| e.to_string());
                if permanent {
                    return Err(unreachable(with_certificate_problem(kafka, cause)));
                }
                if Instant::now() >= deadline {
                    return Err(unreachable(format!(
                        "no answer within {} s (kafka.connect_timeout_s); last error: {cause}",
                        kafka.connect_timeout_s
                    )));
                }
            }
        }
    }
}
