//! `tributary-bench tables`: local-table apply rate, restart-to-ready, and point
//! lookups against the same rows in MariaDB (prepared SELECT) and Redis (GET),
//! on loopback and across an added pod-to-pod round trip.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use mysql_async::prelude::Queryable;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tributary_proto::partition::partition_for_key;
use tributary_table_api::Table;
use tributary_tables::materializer::Materializer;
use tributary_tables::{LocalTable, TablesConfig, TablesMetrics};

use crate::delay_proxy;
use crate::measure::{Series, print_latency_table};
use crate::redis::Redis;
use crate::stack::{create_topic, produce};

/// Arguments of `tributary-bench tables`.
#[derive(Args)]
pub(crate) struct TablesBenchArgs {
    /// Rows in the table.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Lookups per local series.
    #[arg(long, default_value_t = 200_000)]
    local_lookups: usize,
    /// Lookups per loopback MariaDB/Redis series (a tenth of them across the round trip).
    #[arg(long, default_value_t = 20_000)]
    remote_lookups: usize,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
    /// Redis to compare with.
    #[arg(long, default_value = "127.0.0.1:6379")]
    redis: String,
    /// Row cache of the second run of local series, in MiB (enough for every row).
    #[arg(long, default_value_t = 512)]
    row_cache_mb: usize,
    /// Added round trip for the "pod-to-pod" series, in microseconds.
    #[arg(long, default_value_t = 500)]
    rtt_us: u64,
}

pub(crate) fn row(id: u64) -> String {
    format!(
        r#"{{"id":{id},"name":"user {id}","email":"user{id}@example.com","tier":"pro","score":{}}}"#,
        id % 1000
    )
}

/// Creates `topic` (3 partitions) and produces rows `0..n` (see [`row`])
/// to it, keyed by `{"id": …}` in the partition Kafka's partitioner picks.
pub(crate) async fn produce_rows(brokers: &str, topic: &str, n: u64) -> anyhow::Result<()> {
    eprintln!("[bench] producing {n} records to {topic}");
    create_topic(brokers, topic, 3).await?;
    produce(brokers, topic, n, |id| {
        let key = format!(r#"{{"id":{id}}}"#);
        (partition_for_key(key.as_bytes(), 3), key, row(id))
    })
    .await
}

/// xorshift64*: cheap, reproducible key choice.
pub(crate) struct Keys(pub(crate) u64);

impl Keys {
    pub(crate) fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % below
    }
}

pub(crate) async fn run(args: TablesBenchArgs) -> anyhow::Result<()> {
    let n = args.rows;
    let topic = format!("bench-tables-{}", std::process::id());
    produce_rows(&args.stack.brokers, &topic, n).await?;

    let dir = tempfile::tempdir()?;
    let config = |row_cache_mb: usize| {
        TablesConfig::parse(&format!(
            "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\nrocksdb: {{ row_cache_mb: {row_cache_mb} }}\nbatch_max_records: 5000\ntables: [{{ name: kv, topic: '{topic}', mode: global }}]\n",
            dir.path().display(),
            args.stack.brokers
        ))
    };
    let block_cache_only = config(0)?;
    eprintln!("[bench] materializing from scratch");
    let started = Instant::now();
    let (materializer, shutdown) = start(&block_cache_only).await?;
    wait_applied(&materializer, n).await;
    let replay = started.elapsed();
    stop(materializer, shutdown).await?;
    eprintln!("[bench] restarting on the same disk");
    let started = Instant::now();
    let (materializer, shutdown) = start(&block_cache_only).await?;
    while !materializer.progress().serving() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let restart = started.elapsed();

    let table = materializer.tables()[0].clone();
    local_lookups(&table, n, args.local_lookups, 2, BLOCK_CACHE).await?; // warm the block cache
    let local_bytes = local_lookups(&table, n, args.local_lookups, 0, BLOCK_CACHE).await?;
    let local_1 = local_lookups(&table, n, args.local_lookups, 1, BLOCK_CACHE).await?;
    let local_2 = local_lookups(&table, n, args.local_lookups, 2, BLOCK_CACHE).await?;
    drop(table); // the store closes with its last user
    stop(materializer, shutdown).await?;

    eprintln!(
        "[bench] restarting with a {} MiB row cache",
        args.row_cache_mb
    );
    let (materializer, shutdown) = start(&config(args.row_cache_mb)?).await?;
    while !materializer.progress().serving() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let table = materializer.tables()[0].clone();
    read_every_row(&table, n).await?;
    let row_cache_1 = local_lookups(&table, n, args.local_lookups, 1, ROW_CACHE).await?;
    let row_cache_2 = local_lookups(&table, n, args.local_lookups, 2, ROW_CACHE).await?;

    eprintln!("[bench] loading MariaDB and Redis");
    let pool = mysql_async::Pool::new(mysql_async::Opts::from_url(&args.stack.mysql_url)?);
    load_mariadb(&pool, n).await?;
    let redis_addr = resolve(&args.redis)?;
    let redis_loaded = tokio::task::spawn_blocking(move || load_redis(redis_addr, n)).await?;
    redis_loaded.context("loading Redis")?;

    let mysql_opts = mysql_async::Opts::from_url(&args.stack.mysql_url)?;
    let mysql_addr = resolve(&format!(
        "{}:{}",
        mysql_opts.ip_or_hostname(),
        mysql_opts.tcp_port()
    ))?;
    let maria_1 = mariadb_lookups(
        "MariaDB SELECT, 1 conn",
        mysql_addr,
        &mysql_opts,
        n,
        args.remote_lookups,
        1,
    )
    .await?;
    let maria_16 = mariadb_lookups(
        "MariaDB SELECT, 16 conns",
        mysql_addr,
        &mysql_opts,
        n,
        args.remote_lookups,
        16,
    )
    .await?;
    let redis_1 = redis_lookups("Redis GET, 1 conn", redis_addr, n, args.remote_lookups).await?;

    let one_way = Duration::from_micros(args.rtt_us / 2);
    let rtt_lookups = (args.remote_lookups / 10).max(100);
    let maria_proxy = delay_proxy::start(mysql_addr, one_way)?;
    let redis_proxy = delay_proxy::start(redis_addr, one_way)?;
    let label = |what: &str| format!("{what} + {} µs RTT", args.rtt_us);
    let maria_rtt = mariadb_lookups(
        &label("MariaDB SELECT, 1 conn"),
        maria_proxy,
        &mysql_opts,
        n,
        rtt_lookups,
        1,
    )
    .await?;
    let redis_rtt = redis_lookups(&label("Redis GET, 1 conn"), redis_proxy, n, rtt_lookups).await?;
    stop(materializer, shutdown).await?;

    println!("\n## Local tables ({n} rows)\n");
    println!("| step | result |\n|---|---|");
    println!(
        "| apply: full replay of {n} records from Kafka | {:.0} records/s ({:.2} s) |",
        n as f64 / replay.as_secs_f64(),
        replay.as_secs_f64()
    );
    println!(
        "| restart to ready on the same disk | {:.3} s ({:.0}× faster than the full replay) |",
        restart.as_secs_f64(),
        replay.as_secs_f64() / restart.as_secs_f64()
    );
    println!();
    print_latency_table(
        &[&local_1, &row_cache_1],
        &[
            &local_bytes,
            &local_1,
            &local_2,
            &row_cache_1,
            &row_cache_2,
            &maria_1,
            &maria_16,
            &redis_1,
            &maria_rtt,
            &redis_rtt,
        ],
    );
    println!(
        "\nRound trip: a user-space proxy delays each chunk by {} µs per direction (this kernel has no `netem`).",
        one_way.as_micros()
    );
    Ok(())
}

pub(crate) fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()?
        .next()
        .with_context(|| format!("cannot resolve {addr}"))
}

pub(crate) async fn start(
    config: &TablesConfig,
) -> anyhow::Result<(Materializer, CancellationToken)> {
    let metrics = TablesMetrics::register(&mut Registry::default());
    let shutdown = CancellationToken::new();
    Ok((
        Materializer::start(config, metrics, shutdown.clone()).await?,
        shutdown,
    ))
}

pub(crate) async fn stop(
    materializer: Materializer,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    shutdown.cancel();
    Ok(materializer.join().await?)
}

pub(crate) async fn wait_applied(materializer: &Materializer, n: u64) {
    wait_applied_to(materializer, "kv", n).await;
}

/// Waits until `table`'s partitions have applied `n` records in all.
pub(crate) async fn wait_applied_to(materializer: &Materializer, table: &str, n: u64) {
    let progress = materializer.progress();
    while progress
        .of_table(table)
        .iter()
        .map(|(_, p)| p.next_offset.max(0) as u64)
        .sum::<u64>()
        < n
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Gets every row once, from two threads (fills a row cache).
async fn read_every_row(table: &Arc<LocalTable>, rows: u64) -> anyhow::Result<()> {
    let halves = [(0, rows / 2), (rows / 2, rows)].map(|(from, to)| {
        let table = table.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            for id in from..to {
                table.get_json_bytes(&json!({ "id": id }))?;
            }
            Ok(())
        })
    });
    for half in halves {
        half.await??;
    }
    Ok(())
}

/// Name of the local series read through the block cache alone.
const BLOCK_CACHE: &str = "local get";
/// Name of the local series read with every row in the row cache.
const ROW_CACHE: &str = "local get, row cache";

/// Local point gets from `threads` threads; `threads == 0` means one thread that
/// takes the stored JSON bytes without decoding them.
pub(crate) async fn local_lookups(
    table: &Arc<LocalTable>,
    rows: u64,
    lookups: usize,
    threads: u64,
    label: &str,
) -> anyhow::Result<Series> {
    let decode = threads > 0;
    let threads = threads.max(1);
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let table = table.clone();
            tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<Duration>> {
                let mut keys = Keys(0x9e37_79b9_7f4a_7c15 + t);
                let mut latencies = Vec::with_capacity(lookups / threads as usize);
                for _ in 0..lookups / threads as usize {
                    let key = json!({ "id": keys.next(rows) });
                    let t0 = Instant::now();
                    let found = if decode {
                        futures::executor::block_on(table.get(&key))?.is_some()
                    } else {
                        table.get_json_bytes(&key)?.is_some()
                    };
                    latencies.push(t0.elapsed());
                    anyhow::ensure!(found, "key {key} missing");
                }
                Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await??);
    }
    let name = if decode {
        format!("{label}, {threads} thread(s)")
    } else {
        format!("{label}, JSON bytes, 1 thread")
    };
    Ok(Series::new(name, latencies, started.elapsed()))
}

pub(crate) async fn load_mariadb(pool: &mysql_async::Pool, n: u64) -> anyhow::Result<()> {
    let mut conn = pool.get_conn().await?;
    conn.query_drop(format!(
        "CREATE DATABASE IF NOT EXISTS tributary_bench; \
         CREATE TABLE IF NOT EXISTS tributary_bench.kv_{n} (id BIGINT PRIMARY KEY, name VARCHAR(40), \
         email VARCHAR(60), tier VARCHAR(10), score INT)"
    ))
    .await?;
    let count: u64 = conn
        .query_first(format!("SELECT COUNT(*) FROM tributary_bench.kv_{n}"))
        .await?
        .unwrap_or(0);
    if count == n {
        return Ok(());
    }
    conn.query_drop(format!("TRUNCATE tributary_bench.kv_{n}"))
        .await?;
    for start in (0..n).step_by(5000) {
        let values: Vec<String> = (start..(start + 5000).min(n))
            .map(|id| {
                format!(
                    "({id},'user {id}','user{id}@example.com','pro',{})",
                    id % 1000
                )
            })
            .collect();
        conn.query_drop(format!(
            "INSERT INTO tributary_bench.kv_{n} VALUES {}",
            values.join(",")
        ))
        .await?;
    }
    Ok(())
}

pub(crate) async fn mariadb_lookups(
    name: &str,
    addr: SocketAddr,
    opts: &mysql_async::Opts,
    rows: u64,
    lookups: usize,
    connections: u64,
) -> anyhow::Result<Series> {
    let opts: mysql_async::Opts = mysql_async::OptsBuilder::from_opts(opts.clone())
        .ip_or_hostname(addr.ip().to_string())
        .tcp_port(addr.port())
        // TCP like a remote client, not the server's Unix socket (and through the proxy when there is one).
        .prefer_socket(false)
        .into();
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|c| {
            let opts = opts.clone();
            tokio::spawn(async move {
                let mut conn = mysql_async::Conn::new(opts).await?;
                let statement = conn
                    .prep(format!("SELECT id, name, email, tier, score FROM tributary_bench.kv_{rows} WHERE id = ?"))
                    .await?;
                let mut keys = Keys(0x51_7cc1_b727_220a + c);
                let mut latencies = Vec::new();
                for _ in 0..lookups / connections as usize {
                    let id = keys.next(rows);
                    let t0 = Instant::now();
                    let found: Option<(u64, String, String, String, i64)> = conn.exec_first(&statement, (id,)).await?;
                    latencies.push(t0.elapsed());
                    anyhow::ensure!(found.is_some(), "id {id} missing in MariaDB");
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await??);
    }
    Ok(Series::new(name, latencies, started.elapsed()))
}

fn load_redis(addr: SocketAddr, n: u64) -> anyhow::Result<()> {
    let mut redis = Redis::connect(addr)?;
    if redis.get(&format!("tributary_bench:{}", n - 1))?.is_some() {
        return Ok(());
    }
    let rows: Vec<String> = (0..n).map(row).collect();
    redis.set_all(
        rows.iter()
            .enumerate()
            .map(|(id, r)| (format!("tributary_bench:{id}"), r.as_bytes())),
    )?;
    Ok(())
}

async fn redis_lookups(
    name: &str,
    addr: SocketAddr,
    rows: u64,
    lookups: usize,
) -> anyhow::Result<Series> {
    let name = name.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut redis = Redis::connect(addr)?;
        let mut keys = Keys(0x2545_f491);
        let mut latencies = Vec::with_capacity(lookups);
        let started = Instant::now();
        for _ in 0..lookups {
            let key = format!("tributary_bench:{}", keys.next(rows));
            let t0 = Instant::now();
            // Decoded like the other series' rows: a JSON document the caller can use.
            let found: Option<serde_json::Value> = redis
                .get(&key)?
                .map(|v| serde_json::from_slice(&v))
                .transpose()?;
            latencies.push(t0.elapsed());
            anyhow::ensure!(found.is_some(), "{key} missing in Redis");
        }
        Ok(Series::new(name, latencies, started.elapsed()))
    })
    .await?
}
