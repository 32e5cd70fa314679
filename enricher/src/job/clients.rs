//! The Kafka client settings of a job: its input consumer, its producer, and
//! the transactional id of an exactly-once job.

use crate::config::KafkaConfig;
use tributary_kafka::ClientBuilder;

/// The job's input consumer.
pub(super) fn consumer_config<'a>(
    kafka: &'a KafkaConfig,
    job: &str,
    group: &str,
    bounded: bool,
) -> ClientBuilder<'a> {
    let mut c = kafka.consumer(&format!("enrich.{job}"), group);
    // Offsets are stored once outputs are acknowledged, and committed in the background.
    c.set("enable.auto.commit", if bounded { "false" } else { "true" })
        .set("enable.auto.offset.store", "false")
        .set("auto.commit.interval.ms", "1000")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("statistics.interval.ms", "5000");
    c
}

/// `<group>.<instance>`: stable across restarts of one instance, so a restarted
/// instance aborts what its previous run left open. The instance is
/// `TRIBUTARY_INSTANCE`, else `HOSTNAME` (a StatefulSet pod's name).
pub(super) fn transactional_id(group: &str) -> String {
    let instance = std::env::var("TRIBUTARY_INSTANCE")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "0".to_owned());
    format!("{group}.{instance}")
}

/// The job's producer of outputs, dead letters and retries.
pub(super) fn producer_config<'a>(
    kafka: &'a KafkaConfig,
    job: &str,
    transactional_id: Option<&str>,
) -> ClientBuilder<'a> {
    let mut c = kafka.producer(&format!("enrich.{job}"));
    if let Some(id) = transactional_id {
        c.set("transactional.id", id);
    }
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        // The Java client's partitioner, so keys land where Kafka Streams/Connect expect them.
        .set("partitioner", "murmur2_random");
    c
}
