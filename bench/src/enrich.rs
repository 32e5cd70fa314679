//! `tributary-bench enrich`: events/s of an enrichment job with two joins (a
//! local partitioned table and a cached remote MariaDB table) against the raw
//! consume → produce throughput of the same broker, in one run; and the same
//! job written in SQL (what compiled expressions cost against the YAML job),
//! with a filter and a computed field.

use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use prometheus_client::registry::Registry;
use rdkafka::consumer::Consumer;
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tributary_enricher::bounds::{StartAt, StopAt};
use tributary_enricher::sql::{DeclaredTable, JobFile};
use tributary_enricher::{Bounds, EnrichMetrics};
use tributary_kafka::KafkaConfig;
use tributary_kafka::{FutureProducer, StreamConsumer};
use tributary_proto::partition::partition_for_key;
use tributary_tables::metrics::ResultLabel;
use tributary_tables::{JobTables, TablesConfig, TablesMetrics};

use crate::cores::{CoreMeter, Cores};
use crate::measure::process_cpu_seconds;
use crate::series::print_cores_table;
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
    /// Runs of each measured job (YAML, SQL, SQL with a filter and a computed
    /// field, YAML without rows kept for joins), in turns; the median of each
    /// is printed.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

/// Partitions of the users and orders topics.
const PARTITIONS: u32 = 3;

pub(crate) async fn run(args: EnrichBenchArgs) -> anyhow::Result<()> {
    let run = format!("bench-enrich-{}", std::process::id());
    let (users, orders) = (format!("{run}.users"), format!("{run}.orders"));
    eprintln!(
        "[bench] producing {} users, {} products, {} orders",
        args.users, args.products, args.events
    );
    produce_users(&args.stack.brokers, &users, args.users).await?;
    let products = load_products(&args.stack.mysql_url, args.products).await?;
    produce_orders(
        &args.stack.brokers,
        &orders,
        args.events,
        args.users,
        args.products,
    )
    .await?;

    eprintln!("[bench] raw consume → produce");
    let cpu_before = process_cpu_seconds()?;
    let meter = CoreMeter::start()?;
    let raw_seconds = raw_copy(
        &args.stack.brokers,
        &orders,
        &format!("{run}.raw"),
        args.events,
    )
    .await?;
    let raw_cpu = process_cpu_seconds()? - cpu_before;
    let raw_cores = meter.stop(raw_cpu)?;

    let dir = tempfile::tempdir()?;
    // The tables (one store on disk), with the users' rows kept in memory for
    // the join (`join_row_cache_mb`, 64 MiB by default) or not.
    let tables_file = |name: &str, join_row_cache_mb: u32| {
        let text = format!(
            "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\nrocksdb: {{ row_cache_mb: 64 }}\njoin_row_cache_mb: {join_row_cache_mb}\nbatch_max_records: 5000\ntables:\n  - {{ name: users, topic: '{users}' }}\nremote:\n  - {{ name: products, mysql: {{ url: '{}', table: '{products}', key: [sku] }}, cache: {{ ttl_s: 3600 }} }}\n",
            dir.path().join("data").display(),
            args.stack.brokers,
            args.stack.mysql_url
        );
        std::fs::write(dir.path().join(name), text)
    };
    tables_file("tables.yaml", 64)?;
    tables_file("tables-uncached.yaml", 0)?;
    let yaml_job = |name: &str, tables: &str| {
        let file = dir.path().join(name);
        let text = format!(
            "kafka: {{ brokers: '{}' }}\ntables: {tables}\nconcurrency: {}\njobs:\n  - name: bench\n    input: {{ topics: ['{orders}'] }}\n{JOINS}    output: {{ topic: '{run}.enriched', key: order_id }}\n    dead_letter: {{ topic: '{run}.dlq' }}\n",
            args.stack.brokers, args.concurrency
        );
        std::fs::write(&file, text).map(|()| file)
    };
    let job_file = yaml_job("jobs.yaml", "tables.yaml")?;
    let uncached_job = yaml_job("jobs-uncached.yaml", "tables-uncached.yaml")?;
    // The same job in SQL (the same output, byte for byte), and with a filter
    // that keeps every event and a computed field.
    let sql_job = |name: &str, extra_field: &str, filter: &str| {
        let file = dir.path().join(format!("{name}.sql"));
        let text = format!(
            "SET kafka.brokers = '{brokers}';\nSET tables = 'tables.yaml';\nSET concurrency = {concurrency};\n\
             CREATE STREAM orders (proc_time AS PROCTIME()) WITH (topic = '{orders}');\n\
             CREATE STREAM enriched (PRIMARY KEY (order_id) NOT ENFORCED) WITH (topic = '{run}.{name}');\n\
             CREATE TABLE users (PRIMARY KEY (id) NOT ENFORCED);\n\
             CREATE JOB bench WITH (dead_letter_topic = '{run}.dlq') AS INSERT INTO enriched\n\
             SELECT o.*,\n  CASE WHEN u IS NOT NULL THEN STRUCT(u.name, u.tier) END AS user,\n  \
             CASE WHEN p IS NOT NULL THEN STRUCT(p.title, p.price) END AS product{extra_field}\n\
             FROM orders AS o\n\
             LEFT JOIN users FOR SYSTEM_TIME AS OF o.proc_time AS u ON u.id = o.user_id\n\
             LEFT JOIN products FOR SYSTEM_TIME AS OF o.proc_time AS p ON p.sku = o.sku{filter};\n",
            brokers = args.stack.brokers,
            concurrency = args.concurrency,
        );
        std::fs::write(&file, text).map(|()| file)
    };
    let sql_same = sql_job("sql", "", "")?;
    let sql_computed = sql_job(
        "sql-computed",
        ",\n  CAST(p.price AS DOUBLE) * o.quantity AS total",
        "\nWHERE o.quantity > 0",
    )?;
    let bounds = Bounds {
        from: StartAt::Beginning,
        until: StopAt::End,
    };
    eprintln!("[bench] enrichment, first run (materializes the tables)");
    let cpu_before = process_cpu_seconds()?;
    let tables_metrics = TablesMetrics::register(&mut Registry::default());
    let warm = enrich(&job_file, bounds, &tables_metrics).await?;
    let warm_cpu = process_cpu_seconds()? - cpu_before;
    let mut warm_cache = JoinCache::default();
    warm_cache.add(JoinCache::of(&tables_metrics), JoinCache::default());
    // The YAML job, its SQL forms and the job without rows kept for joins, in
    // turns (`--rounds` each, tables on disk and ready at once): each one's
    // median, so that a slow moment of the machine does not land on one of
    // them only.
    let variants = [
        (
            "enrich, 2 joins (local partitioned + cached remote MariaDB)",
            &job_file,
        ),
        ("the same job in SQL (STRUCT nesting)", &sql_same),
        ("SQL, + WHERE and a computed field", &sql_computed),
        (
            "the YAML job, users' rows not kept for joins (`join_row_cache_mb: 0`)",
            &uncached_job,
        ),
    ];
    let mut measured: Vec<Vec<(f64, f64, Cores)>> = vec![Vec::new(); variants.len()];
    let mut join_cache = vec![JoinCache::default(); variants.len()];
    for round in 1..=args.rounds {
        for (i, (name, file)) in variants.iter().enumerate() {
            eprintln!("[bench] round {round}: {name}");
            let cpu_before = process_cpu_seconds()?;
            let meter = CoreMeter::start()?;
            let cache_before = JoinCache::of(&tables_metrics);
            let summary = enrich(file, bounds, &tables_metrics).await?;
            let cpu = process_cpu_seconds()? - cpu_before;
            let cores = meter.stop(cpu)?;
            join_cache[i].add(JoinCache::of(&tables_metrics), cache_before);
            anyhow::ensure!(
                summary.events_out == args.events,
                "{name}: expected {} enriched events, got {summary:?}",
                args.events
            );
            measured[i].push((summary.seconds, cpu, cores));
        }
    }
    let median = |runs: &mut Vec<(f64, f64, Cores)>| {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        runs[runs.len() / 2]
    };
    let medians: Vec<(f64, f64, Cores)> = measured.iter_mut().map(median).collect();

    let n = args.events as f64;
    println!(
        "\n## Enrichment throughput ({} events, {PARTITIONS} partitions; median of {} rounds)\n",
        args.events, args.rounds
    );
    // CPU per event: this process's, start-up and shutdown of each step included.
    println!(
        "| pipeline | seconds | events/s | vs raw | vs YAML job | CPU µs/event | users from the join cache |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    println!(
        "| raw consume → produce (no parsing) | {raw_seconds:.2} | {:.0} | 1.00× | | {:.1} | |",
        n / raw_seconds,
        raw_cpu / n * 1e6
    );
    let yaml_seconds = medians[0].0;
    let first = (
        "enrich, 2 joins, first run (tables materializing, cache cold)",
        (warm.seconds, warm_cpu),
        warm_cache,
    );
    let rows = variants
        .iter()
        .map(|(name, _)| *name)
        .zip(medians.iter().map(|&(seconds, cpu, _)| (seconds, cpu)))
        .zip(join_cache)
        .map(|((name, measured), cache)| (name, measured, cache));
    for (name, (seconds, cpu), cache) in std::iter::once(first).chain(rows) {
        println!(
            "| {name} | {seconds:.2} | {:.0} | {:.2}× | {:.2}× | {:.1} | {} |",
            n / seconds,
            raw_seconds / seconds,
            yaml_seconds / seconds,
            cpu / n * 1e6,
            cache.hit_ratio()
        );
    }
    // The jobs' windows include their start-up (opening the tables), as their CPU does.
    print_cores_table(
        args.events,
        std::iter::once(("raw consume → produce", raw_seconds, raw_cores)).chain(
            variants
                .iter()
                .zip(&medians)
                .map(|((name, _), &(seconds, _, cores))| (*name, seconds, cores)),
        ),
    );
    Ok(())
}

/// The job's joins: `users` (a local table) and `products` (a remote one).
pub(crate) const JOINS: &str = "    joins:\n      - { table: users, key: user_id, select: [name, tier], into: user }\n      - { table: products, key: sku, select: [title, price], into: product }\n";

/// The users table's row `id`.
pub(crate) fn user(id: u64) -> String {
    format!(r#"{{"id":{id},"name":"user {id}","tier":"pro","email":"u{id}@example.com"}}"#)
}

/// Creates `topic` and produces users `0..n` ([`user`]) to it, keyed by `{"id": …}` on
/// the partition a producer hashing the key picks.
pub(crate) async fn produce_users(brokers: &str, topic: &str, n: u64) -> anyhow::Result<()> {
    create_topic(brokers, topic, PARTITIONS as i32).await?;
    produce(brokers, topic, n, |id| {
        let key = format!(r#"{{"id":{id}}}"#);
        (partition_for_key(key.as_bytes(), PARTITIONS), key, user(id))
    })
    .await
}

/// Creates `topic` and produces orders `0..n` ([`order`]) to it, keyed by `{"order_id": …}`,
/// each on the partition of its user's key (co-partitioned with the users).
pub(crate) async fn produce_orders(
    brokers: &str,
    topic: &str,
    n: u64,
    users: u64,
    products: u64,
) -> anyhow::Result<()> {
    create_topic(brokers, topic, PARTITIONS as i32).await?;
    produce(brokers, topic, n, |o| {
        let user_key = format!(r#"{{"id":{}}}"#, user_of(o, users));
        (
            partition_for_key(user_key.as_bytes(), PARTITIONS),
            format!(r#"{{"order_id":{o}}}"#),
            order(o, users, products),
        )
    })
    .await
}

/// The user of order `o`.
fn user_of(o: u64, users: u64) -> u64 {
    o * 7919 % users
}

/// Order `o`, of a user and a product.
pub(crate) fn order(o: u64, users: u64, products: u64) -> String {
    format!(
        r#"{{"order_id":{o},"user_id":{},"sku":"SKU-{}","quantity":{}}}"#,
        user_of(o, users),
        o % products,
        1 + o % 5
    )
}

/// Lookups of the `users` join answered from the rows kept for joins (`hits`)
/// or read from the store (`misses`).
#[derive(Clone, Copy, Default)]
struct JoinCache {
    hits: u64,
    misses: u64,
}

impl JoinCache {
    /// The counts so far.
    fn of(metrics: &TablesMetrics) -> Self {
        let count = |result: &str| {
            let label = ResultLabel {
                table: "users".to_owned(),
                result: result.to_owned(),
            };
            metrics.join_row_cache.get_or_create(&label).get()
        };
        JoinCache {
            hits: count("hit"),
            misses: count("miss"),
        }
    }

    /// Adds the counts from `before` to `after`.
    fn add(&mut self, after: Self, before: Self) {
        self.hits += after.hits - before.hits;
        self.misses += after.misses - before.misses;
    }

    /// The share of hits, or nothing when no lookup went through the cache.
    fn hit_ratio(self) -> String {
        match self.hits + self.misses {
            0 => String::new(),
            all => format!("{:.0}%", 100.0 * self.hits as f64 / all as f64),
        }
    }
}

/// Runs the job file once, bounded, its tables' metrics in `tables_metrics`;
/// returns its summary.
pub(crate) async fn enrich(
    job_file: &std::path::Path,
    bounds: Bounds,
    tables_metrics: &TablesMetrics,
) -> anyhow::Result<tributary_enricher::JobSummary> {
    let (config, tables) = JobFile::load(
        job_file,
        |file| TablesConfig::load_referenced(job_file, file),
        |tables, declared| tables.declare_tables(declared.iter().map(DeclaredTable::parts)),
    )?;
    let tables = tables.context("the job file names no tables")?;
    config.check_tables(&tables.names())?;
    let mut registry = Registry::default();
    let metrics = EnrichMetrics::register(&mut registry);
    let running = JobTables::start(Some(&tables), tables_metrics).await?;
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
pub(crate) async fn raw_copy(brokers: &str, from: &str, to: &str, n: u64) -> anyhow::Result<f64> {
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
