//! The stack a benchmark runs against (`deploy/local/up.sh`) and what it
//! loads into it: MariaDB tables, Kafka topics and their records.

use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::producer::FutureRecord;
use tributary_kafka::KafkaConfig;
use tributary_kafka::{AdminClient, FutureProducer};

/// Creates `tributary_bench.products_<n>` in MariaDB; returns `db.table`.
pub(crate) async fn load_products(url: &str, n: u64) -> anyhow::Result<String> {
    use mysql_async::prelude::Queryable;
    let table = format!("tributary_bench.products_{n}");
    let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(url)?).await?;
    conn.query_drop(format!(
        "CREATE DATABASE IF NOT EXISTS tributary_bench; DROP TABLE IF EXISTS {table}; \
         CREATE TABLE {table} (sku VARCHAR(20) PRIMARY KEY, title VARCHAR(60), price DECIMAL(10,2))"
    ))
    .await?;
    let rows: Vec<String> = (0..n)
        .map(|i| format!("('SKU-{i}', 'product {i}', {}.99)", i % 100))
        .collect();
    for chunk in rows.chunks(5000) {
        conn.query_drop(format!("INSERT INTO {table} VALUES {}", chunk.join(",")))
            .await?;
    }
    conn.disconnect().await?;
    Ok(table)
}

/// The stack a benchmark runs against (`deploy/local/up.sh`).
#[derive(clap::Args)]
pub(crate) struct Stack {
    /// Kafka bootstrap servers.
    #[arg(
        long,
        env = "TRIBUTARY_KAFKA_BROKERS",
        default_value = "127.0.0.1:19092"
    )]
    pub(crate) brokers: String,
    /// MariaDB (root), with binlog.
    #[arg(
        long,
        env = "TRIBUTARY_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3307"
    )]
    pub(crate) mysql_url: String,
    /// PostgreSQL (a superuser), with `wal_level=logical`.
    #[arg(
        long,
        env = "TRIBUTARY_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5433/postgres"
    )]
    pub(crate) pg_url: String,
}

/// Creates a topic with `partitions` partitions.
pub(crate) async fn create_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    let admin: AdminClient = KafkaConfig::plaintext(brokers).admin("bench").create()?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for result in admin
        .create_topics([&new_topic], &AdminOptions::new())
        .await?
    {
        result.map_err(|(t, e)| anyhow::anyhow!("creating {t}: {e}"))?;
    }
    Ok(())
}

/// Produces records `0..n`, each `(partition, key, value)` made by `record`, and
/// waits until all are acknowledged.
pub(crate) async fn produce(
    brokers: &str,
    topic: &str,
    n: u64,
    record: impl Fn(u64) -> (i32, String, String),
) -> anyhow::Result<()> {
    let producer: FutureProducer = KafkaConfig::plaintext(brokers)
        .producer("bench")
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("compression.type", "lz4")
        .create()?;
    let mut pending = std::collections::VecDeque::new();
    for i in 0..n {
        let (partition, key, value) = record(i);
        let mut record = FutureRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition(partition);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => break pending.push_back(delivery),
                Err((_, back)) => {
                    record = back;
                    if let Some(oldest) = pending.pop_front() {
                        oldest.await?.map_err(|(e, _)| e)?;
                    }
                }
            }
        }
    }
    for delivery in pending {
        delivery.await?.map_err(|(e, _)| e)?;
    }
    Ok(())
}
