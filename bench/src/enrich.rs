//! `tributary-bench enrich`: events/s of an enrichment job with two joins (a
//! local partitioned table and a cached remote MariaDB table) against the raw
//! consume → produce throughput of the same broker, in one run.

use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use prometheus_client::registry::Registry;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tributary_enricher::bounds::{StartAt, StopAt};
use tributary_enricher::{Bounds, EnrichConfig, EnrichMetrics};
use tributary_kafka::KafkaConfig;
use tributary_proto::partition::partition_for_key;
use tributary_tables::{JobTables, TablesConfig, TablesMetrics};

use crate::measure::process_cpu_seconds;
use crate::stack::{create_topic, load_products, produce};

/// Arguments of `tributary-bench enrich`.
#[derive(Args)]
pub(crate) struct EnrichBenchArgs {
    /// Input events.
    #[arg(long, default_value_t = 300_000)]
    events: u64,
    /// Rows of the partitioned `users` table.
    #[arg(long, default_value_t = 100_000)]
    users: u64,
    /// Rows of the remote `products` table (in MariaDB).
    #[arg(long, default_value_t = 10_000)]
    products: u64,
    /// Events the job enriches at once (the job file's `concurrency`).
    #[arg(long, default_value_t = 4096)]
    concurrency: usize,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

const PARTITIONS: u32 = 3;

pub(crate) async fn run(args: EnrichBenchArgs) -> anyhow::Result<()> {
    let run = format!("bench-enrich-{}", std::process::id());
    let (users, orders) = (format!("{run}.users"), format!("{run}.orders"));
    for topic in [&users, &orders] {
        create_topic(&args.stack.brokers, topic, PARTITIONS as i32).await?;
    }
    eprintln!(
        "[bench] producing {} users, {} products, {} orders",
        args.users, args.products, args.events
    );
    let keyed = |key: String, value: String| {
        let partition = partition_for_key(key.as_bytes(), PARTITIONS);
        (partition, key, value)
    };
    produce(&args.stack.brokers, &users, args.users, |id| {
        keyed(
            format!(r#"{{"id":{id}}}"#),
            format!(r#"{{"id":{id},"name":"user {id}","tier":"pro","email":"u{id}@example.com"}}"#),
        )
    })
    .await?;
    let products = load_products(&args.stack.mysql_url, args.products).await?;
    let (n_users, n_products) = (args.users, args.products);
    produce(&args.stack.brokers, &orders, args.events, |o| {
        let user = o * 7919 % n_users;
        // Co-partitioned with `users`: the partition of the user's key.
        let (partition, _, _) = keyed(format!(r#"{{"id":{user}}}"#), String::new());
        (
            partition,
            format!(r#"{{"order_id":{o}}}"#),
            format!(
                r#"{{"order_id":{o},"user_id":{user},"sku":"SKU-{}","quantity":{}}}"#,
                o % n_products,
                1 + o % 5
            ),
        )
    })
    .await?;

    eprintln!("[bench] raw consume → produce");
    let cpu_before = process_cpu_seconds()?;
    let raw_seconds = raw_copy(
        &args.stack.brokers,
        &orders,
        &format!("{run}.raw"),
        args.events,
    )
    .await?;
    let raw_cpu = process_cpu_seconds()? - cpu_before;

    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("tables.yaml"),
        format!(
            "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\nrocksdb: {{ row_cache_mb: 64 }}\nbatch_max_records: 5000\ntables:\n  - {{ name: users, topic: '{users}' }}\nremote:\n  - {{ name: products, mysql: {{ url: '{}', table: '{products}', key: [sku] }}, cache: {{ ttl_s: 3600 }} }}\n",
            dir.path().join("data").display(),
            args.stack.brokers,
            args.stack.mysql_url
        ),
    )?;
    let job_file = dir.path().join("jobs.yaml");
    std::fs::write(
        &job_file,
        format!(
            "kafka: {{ brokers: '{}' }}\ntables: tables.yaml\nconcurrency: {}\njobs:\n  - name: bench\n    input: {{ topics: ['{orders}'] }}\n    joins:\n      - {{ table: users, key: user_id, select: [name, tier], into: user }}\n      - {{ table: products, key: sku, select: [title, price], into: product }}\n    output: {{ topic: '{run}.enriched', key: order_id }}\n    dead_letter: {{ topic: '{run}.dlq' }}\n",
            args.stack.brokers, args.concurrency
        ),
    )?;
    let bounds = Bounds {
        from: StartAt::Beginning,
        until: StopAt::End,
    };
    eprintln!("[bench] enrichment, first run (materializes the tables)");
    let cpu_before = process_cpu_seconds()?;
    let warm = enrich(&job_file, bounds).await?;
    let warm_cpu = process_cpu_seconds()? - cpu_before;
    eprintln!("[bench] enrichment, measured run (tables on disk, ready at once)");
    let cpu_before = process_cpu_seconds()?;
    let measured = enrich(&job_file, bounds).await?;
    let measured_cpu = process_cpu_seconds()? - cpu_before;
    anyhow::ensure!(
        measured.events_out == args.events,
        "expected {} enriched events, got {measured:?}",
        args.events
    );

    let n = args.events as f64;
    println!(
        "\n## Enrichment throughput ({} events, {PARTITIONS} partitions)\n",
        args.events
    );
    // CPU per event: this process's, start-up and shutdown of each step included.
    println!(
        "| pipeline | seconds | events/s | vs raw | CPU µs/event |\n|---|---:|---:|---:|---:|"
    );
    println!(
        "| raw consume → produce (no parsing) | {raw_seconds:.2} | {:.0} | 1.00× | {:.1} |",
        n / raw_seconds,
        raw_cpu / n * 1e6
    );
    for (name, s, cpu) in [
        (
            "enrich, 2 joins, first run (tables materializing, cache cold)",
            &warm,
            warm_cpu,
        ),
        (
            "enrich, 2 joins (local partitioned + cached remote MariaDB)",
            &measured,
            measured_cpu,
        ),
    ] {
        println!(
            "| {name} | {:.2} | {:.0} | {:.2}× | {:.1} |",
            s.seconds,
            n / s.seconds,
            raw_seconds / s.seconds,
            cpu / n * 1e6
        );
    }
    Ok(())
}

/// Runs the job file once, bounded; returns its summary.
async fn enrich(
    job_file: &std::path::Path,
    bounds: Bounds,
) -> anyhow::Result<tributary_enricher::JobSummary> {
    let config = EnrichConfig::load(job_file)?;
    let tables_file = config
        .tables
        .as_ref()
        .context("the job file names no tables")?;
    let tables = TablesConfig::load_referenced(job_file, tables_file)?;
    config.check_tables(&tables.names())?;
    let mut registry = Registry::default();
    let metrics = EnrichMetrics::register(&mut registry);
    let running = JobTables::start(Some(&tables), &TablesMetrics::register(&mut registry)).await?;
    let ran = tributary_enricher::run(
        &config,
        &running.for_jobs(),
        Some(bounds),
        &metrics,
        CancellationToken::new(),
    )
    .await;
    running.close().await?;
    ran?.into_iter().next().context("no job ran")
}

/// Copies `n` records of `from` (every partition, from the beginning) to `to`,
/// as they are; returns the seconds until the last copy is acknowledged.
async fn raw_copy(brokers: &str, from: &str, to: &str, n: u64) -> anyhow::Result<f64> {
    let kafka = KafkaConfig::plaintext(brokers);
    let consumer: StreamConsumer = kafka
        .consumer("bench", &format!("{to}.group"))
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for partition in 0..PARTITIONS as i32 {
        tpl.add_partition_offset(from, partition, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let producer: FutureProducer = kafka
        .producer("bench")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        .create()?;
    let started = Instant::now();
    let mut deliveries = Vec::with_capacity(n as usize);
    while (deliveries.len() as u64) < n {
        let msg = consumer.recv().await?;
        let mut record = FutureRecord::to(to)
            .key(msg.key().unwrap_or_default())
            .payload(msg.payload().unwrap_or_default());
        loop {
            match producer.send_result(record) {
                Ok(delivery) => break deliveries.push(delivery),
                Err((_, back)) => {
                    record = back;
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        }
    }
    for delivery in deliveries {
        delivery.await?.map_err(|(e, _)| e)?;
    }
    Ok(started.elapsed().as_secs_f64())
}
