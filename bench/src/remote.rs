//! `tributary-bench remote`: lookups through a remote table (cache + batching)
//! against naive per-key SELECTs on the same MariaDB, with the number of
//! statements the database executed for each, in one run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use mysql_async::prelude::Queryable;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tributary_table_api::Table;
use tributary_tables::{TablesConfig, TablesMetrics};

use crate::measure::{Series, print_latency_table};

/// Arguments of `tributary-bench remote`.
#[derive(Args)]
pub(crate) struct RemoteBenchArgs {
    /// Rows in the MariaDB table.
    #[arg(long, default_value_t = 10_000)]
    rows: u64,
    /// Lookups per series (keys Zipf-distributed, s = 1).
    #[arg(long, default_value_t = 50_000)]
    lookups: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

const READER: &str = "tributary_bench_reader";

pub(crate) async fn run(args: RemoteBenchArgs) -> anyhow::Result<()> {
    let table = crate::stack::load_products(&args.stack.mysql_url, args.rows).await?;
    let root = mysql_async::Opts::from_url(&args.stack.mysql_url)?;
    let (host, port) = (root.ip_or_hostname().to_owned(), root.tcp_port());
    let mut admin = mysql_async::Conn::new(root).await?;
    admin
        .query_drop(format!(
            "CREATE USER IF NOT EXISTS '{READER}'@'%' IDENTIFIED BY 'bench'; \
             GRANT SELECT ON tributary_bench.* TO '{READER}'@'%'; SET GLOBAL userstat = ON"
        ))
        .await?;
    let reader_url = format!("mysql://{READER}:bench@{host}:{port}");
    let keys = Arc::new(zipf_keys(args.rows, args.lookups));

    eprintln!("[bench] naive: one SELECT per lookup");
    let pool = mysql_async::Pool::new(
        mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&reader_url)?)
            .prefer_socket(false),
    );
    let before = selects(&mut admin).await?;
    let naive = run_clients("naive SELECT per lookup", &args, &keys, {
        let sql = format!("SELECT sku, title, price FROM {table} WHERE sku = ?");
        move |key| {
            let (pool, sql) = (pool.clone(), sql.clone());
            async move {
                let mut conn = pool.get_conn().await?;
                let row: Option<(String, String, String)> = conn.exec_first(sql, (key,)).await?;
                anyhow::ensure!(row.is_some(), "a row is missing");
                Ok(())
            }
        }
    })
    .await?;
    let naive_selects = selects(&mut admin).await? - before;

    eprintln!("[bench] remote table: cache + batching");
    let config = TablesConfig::parse(&format!(
        "data_dir: /unused\nkafka: {{ brokers: unused }}\nremote:\n  - {{ name: products, mysql: {{ url: '{reader_url}', table: '{table}', key: [sku] }}, cache: {{ ttl_s: 3600 }} }}\n"
    ))?;
    let stop = CancellationToken::new();
    let metrics = TablesMetrics::register(&mut Registry::default());
    let remote = tributary_tables::remote::start_all(&config, false, &metrics, &stop)
        .await?
        .tables
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no remote table"))?;
    let before = selects(&mut admin).await?;
    let cached = run_clients(
        "remote table (cache + batching)",
        &args,
        &keys,
        move |key| {
            let remote = remote.clone();
            async move {
                anyhow::ensure!(remote.get(&json!(key)).await?.is_some(), "a row is missing");
                Ok(())
            }
        },
    )
    .await?;
    let cached_selects = selects(&mut admin).await? - before;
    stop.cancel();

    let distinct = keys.iter().collect::<std::collections::BTreeSet<_>>().len();
    println!(
        "\n## Remote table vs naive lookups ({} lookups of {distinct} distinct keys, Zipf s=1 over {} rows, {} clients)\n",
        args.lookups, args.rows, args.clients
    );
    print_latency_table(&[&naive], &[&naive, &cached]);
    println!("\n| series | SELECTs the database executed | per lookup |\n|---|---:|---:|");
    for (name, n) in [("naive", naive_selects), ("remote table", cached_selects)] {
        println!("| {name} | {n} | {:.3} |", n as f64 / args.lookups as f64);
    }
    Ok(())
}

/// SELECTs MariaDB counted for the reader user.
async fn selects(admin: &mut mysql_async::Conn) -> anyhow::Result<u64> {
    Ok(admin
        .exec_first(
            "SELECT SELECT_COMMANDS FROM information_schema.USER_STATISTICS WHERE USER = ?",
            (READER,),
        )
        .await?
        .unwrap_or(0))
}

/// `n` keys `SKU-<rank>`, Zipf-distributed (s = 1) over `rows` ranks, reproducible.
fn zipf_keys(rows: u64, n: usize) -> Vec<String> {
    let cumulative: Vec<f64> = (1..=rows)
        .scan(0.0, |sum, k| {
            *sum += 1.0 / k as f64;
            Some(*sum)
        })
        .collect();
    let total = cumulative.last().copied().unwrap_or(1.0);
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    (0..n)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let target = (rng >> 11) as f64 / (1u64 << 53) as f64 * total;
            let rank = cumulative.partition_point(|c| *c < target);
            format!("SKU-{}", rank.min(rows as usize - 1))
        })
        .collect()
}

/// `args.clients` tasks share the lookups of `keys`; each lookup is timed.
async fn run_clients<F, Fut>(
    name: &str,
    args: &RemoteBenchArgs,
    keys: &Arc<Vec<String>>,
    lookup: F,
) -> anyhow::Result<Series>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            let (keys, lookup, clients) = (keys.clone(), lookup.clone(), args.clients);
            tokio::spawn(async move {
                let mut latencies: Vec<Duration> = Vec::new();
                for key in keys.iter().skip(c).step_by(clients) {
                    let t0 = Instant::now();
                    lookup(key.clone()).await?;
                    latencies.push(t0.elapsed());
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await??);
    }
    Ok(Series::new(name, latencies, started.elapsed()))
}
