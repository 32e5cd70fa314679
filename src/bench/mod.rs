//! `tributary bench …`: benchmarks that print a table, comparing alternatives
//! side by side in one run (ratios, since shared machines are noisy).

pub(crate) mod capture;
mod delay_proxy;
pub(crate) mod enrich;
pub(crate) mod grpc;
mod redis;
pub(crate) mod remote;
pub(crate) mod tables;

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tributary_kafka::KafkaConfig;

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
}

/// Creates a topic with `partitions` partitions.
pub(crate) async fn create_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        KafkaConfig::plaintext(brokers).admin("bench").create()?;
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

/// Latencies of one measured series.
pub(crate) struct Series {
    name: String,
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Series {
    pub(crate) fn new(
        name: impl Into<String>,
        mut latencies: Vec<Duration>,
        wall: Duration,
    ) -> Self {
        latencies.sort_unstable();
        Series {
            name: name.into(),
            latencies,
            wall,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies[index]
    }

    pub(crate) fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    pub(crate) fn ops_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

/// CPU seconds this process has used so far, all threads (user + system), from
/// `/proc/self/stat`, whose clock ticks are USER_HZ = 100 on Linux.
pub(crate) fn process_cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow::anyhow!("/proc/self/stat is too short"))?
            .parse::<f64>()?)
    };
    // utime and stime: fields 14 and 15 of stat(5), 12 and 13 after the name.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// Prints a Markdown table of `series`, with each one's p50 relative to each
/// of `baselines`' p50s (a column per baseline).
pub(crate) fn print_latency_table(baselines: &[&Series], series: &[&Series]) {
    let mut header = "| lookup | ops/s | p50 µs | p99 µs |".to_owned();
    let mut rule = "|---|---:|---:|---:|".to_owned();
    for baseline in baselines {
        header.push_str(&format!(" p50 vs {} |", baseline.name));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
    for s in series {
        let mut line = format!(
            "| {} | {:.0} | {:.1} | {:.1} |",
            s.name,
            s.ops_per_second(),
            s.p50().as_secs_f64() * 1e6,
            s.quantile(0.99).as_secs_f64() * 1e6,
        );
        for baseline in baselines {
            let ratio = s.p50().as_secs_f64() / baseline.p50().as_secs_f64().max(1e-9);
            line.push_str(&format!(" {ratio:.1}× |"));
        }
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_seconds_count_work_done() {
        let before = process_cpu_seconds().unwrap();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let used = process_cpu_seconds().unwrap() - before;
        // At least some of 200 ms of spinning was on a CPU (ticks are 10 ms).
        assert!((0.01..10.0).contains(&used), "{used} s of CPU");
    }
}
