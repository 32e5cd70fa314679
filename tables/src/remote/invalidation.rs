//! Cache invalidation from CDC: a remote table follows the change topic of its
//! source table and evicts every key that changes, so its cache serves fresh
//! rows with a TTL of hours.
//!
//! Reading starts a minute back (not at the end), so a change published while
//! the follower starts is not missed; evicting a key twice is harmless.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::Consumer;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use tributary_kafka::StreamConsumer;

use crate::config::KafkaConfig;
use crate::error::TableError;
use crate::remote::RemoteTable;

/// How far back the follower starts.
const LOOK_BACK: Duration = Duration::from_secs(60);

/// Assigns `topic` to a consumer; the future returned follows it and evicts
/// the keys of its records from `table`'s cache until `shutdown`.
pub async fn follow(
    table: Arc<RemoteTable>,
    kafka: &KafkaConfig,
    topic: &str,
    shutdown: CancellationToken,
) -> Result<impl Future<Output = ()> + Send + 'static, TableError> {
    let consumer: StreamConsumer = kafka
        .consumer("tables.invalidation", "tributary-invalidation")
        .set("enable.auto.commit", "false")
        // Changes should evict within a fraction of a second.
        .set("fetch.wait.max.ms", "50")
        .create()?;
    let consumer = Arc::new(consumer);
    let (probe, name) = (consumer.clone(), topic.to_owned());
    let assignment =
        tokio::task::spawn_blocking(move || -> Result<TopicPartitionList, TableError> {
            let timeout = Duration::from_secs(10);
            let metadata = probe.fetch_metadata(Some(&name), timeout)?;
            let partitions = metadata
                .topics()
                .first()
                .map_or(0, |t| t.partitions().len());
            let since = SystemTime::now()
                .checked_sub(LOOK_BACK)
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as i64);
            let mut wanted = TopicPartitionList::new();
            for p in 0..partitions as i32 {
                wanted.add_partition_offset(&name, p, Offset::Offset(since))?;
            }
            let found = probe.offsets_for_times(wanted, timeout)?;
            // A partition with nothing that recent starts at its end.
            let mut start = TopicPartitionList::new();
            for e in found.elements_for_topic(&name) {
                let offset = match e.offset().to_raw() {
                    Some(o) if o >= 0 => Offset::Offset(o),
                    _ => Offset::End,
                };
                start.add_partition_offset(&name, e.partition(), offset)?;
            }
            Ok(start)
        })
        .await
        .expect("metadata fetch does not panic")?;
    consumer.assign(&assignment)?;
    info!(table = table.name_str(), %topic, "evicting cached keys on changes");
    Ok(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                received = consumer.recv() => match received {
                    Ok(msg) => {
                        let key = msg.key().and_then(|k| serde_json::from_slice(k).ok());
                        if let Some(key) = key {
                            table.invalidate(&key).await;
                        }
                    }
                    Err(e) => warn!(error = %e, "change topic read failed"),
                },
            }
        }
    })
}
