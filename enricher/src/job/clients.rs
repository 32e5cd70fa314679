//! The Kafka client settings of a job: its input consumer, its producer, and
//! the transactional id of an exactly-once job. Both clients' queues are
//! bounded by the job's `max_in_flight_mb`.

use crate::config::KafkaConfig;
use tributary_kafka::ClientBuilder;

/// librdkafka's default `queued.max.messages.kbytes`: a smaller bound lowers it.
const DEFAULT_PREFETCH_KB: u64 = 65_536;
/// The largest `queue.buffering.max.kbytes` librdkafka accepts.
const MAX_PRODUCER_QUEUE_KB: u64 = i32::MAX as u64;

/// The job's input consumer; it prefetches at most `max_bytes` (which also
/// bounds each fetch, librdkafka deriving `fetch.max.bytes` from it).
pub(super) fn consumer_config<'a>(
    kafka: &'a KafkaConfig,
    job: &str,
    group: &str,
    bounded: bool,
    max_bytes: u64,
) -> ClientBuilder<'a> {
    let prefetch_kb = (max_bytes / 1024).clamp(1, DEFAULT_PREFETCH_KB);
    let mut c = kafka.consumer(&format!("enrich.{job}"), group);
    c.set("queued.max.messages.kbytes", prefetch_kb.to_string());
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

/// The job's producer of outputs, dead letters and retries; it queues at
/// most `max_bytes` (then sending waits, at most the stall timeout).
pub(super) fn producer_config<'a>(
    kafka: &'a KafkaConfig,
    job: &str,
    transactional_id: Option<&str>,
    max_bytes: u64,
) -> ClientBuilder<'a> {
    let queue_kb = (max_bytes / 1024).clamp(1, MAX_PRODUCER_QUEUE_KB);
    let mut c = kafka.producer(&format!("enrich.{job}"));
    c.set("queue.buffering.max.kbytes", queue_kb.to_string());
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
