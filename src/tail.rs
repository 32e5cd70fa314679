//! `tributary tail`: print a topic's records as JSON lines, for demos and debugging.

use std::time::{Duration, Instant};

use clap::Args;
use rdkafka::consumer::Consumer;
use rdkafka::{Message, Offset, TopicPartitionList};
use tributary_kafka::BaseConsumer;
use tributary_kafka::KafkaConfig;

use crate::kafka_check;

/// Arguments of `tributary tail`.
#[derive(Args)]
pub(crate) struct TailArgs {
    /// Kafka bootstrap servers of a plaintext cluster.
    #[arg(
        long,
        env = "TRIBUTARY_KAFKA_BROKERS",
        default_value = "127.0.0.1:19092"
    )]
    brokers: String,
    /// A capture, tables or job config whose `kafka:` section (brokers, TLS,
    /// SASL) to connect with; `--brokers` is then not used.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Topic to read.
    #[arg(long)]
    topic: String,
    /// Stop after this many records.
    #[arg(long)]
    max: Option<usize>,
    /// Stop after this many seconds without a new record.
    #[arg(long, default_value_t = 5.0)]
    idle_timeout: f64,
}

pub(crate) async fn run(args: TailArgs) -> anyhow::Result<()> {
    let kafka = match &args.config {
        Some(path) => kafka_check::section_of(path)?,
        None => KafkaConfig::plaintext(&args.brokers),
    };
    kafka_check::reach(&kafka, "tail").await?;
    tokio::task::spawn_blocking(move || tail(&kafka, &args)).await?
}

fn tail(kafka: &KafkaConfig, args: &TailArgs) -> anyhow::Result<()> {
    let consumer: BaseConsumer = kafka
        .consumer("tail", "tributary-tail")
        .set("enable.auto.commit", "false")
        .create()?;
    let idle = Duration::from_secs_f64(args.idle_timeout);
    let mut last = Instant::now();
    // A topic that does not exist yet (its writer is starting) is waited for, up to the idle timeout.
    let partitions = loop {
        let metadata = consumer.fetch_metadata(Some(&args.topic), Duration::from_secs(10))?;
        match metadata.topics().first().map(|t| t.partitions().len()) {
            Some(n) if n > 0 => break n,
            _ if last.elapsed() >= idle => anyhow::bail!("topic {} does not exist", args.topic),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(&args.topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut count = 0;
    while last.elapsed() < idle && args.max.is_none_or(|m| count < m) {
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let msg = msg?;
        last = Instant::now();
        count += 1;
        let text = |b: Option<&[u8]>| {
            b.map(|b| {
                serde_json::from_slice(b).unwrap_or_else(|_| {
                    serde_json::Value::String(String::from_utf8_lossy(b).into_owned())
                })
            })
        };
        let line = serde_json::json!({
            "partition": msg.partition(),
            "offset": msg.offset(),
            "key": text(msg.key()),
            "value": text(msg.payload()),
        });
        println!("{line}");
    }
    Ok(())
}
