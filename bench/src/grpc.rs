//! `tributary-bench grpc`: the lookup API's `Get` throughput and latency with 1,
//! 10 and 50 concurrent clients on loopback (each on its own connection, and 50
//! sharing one), and `BatchGet` of 100 keys against
//! 100 MariaDB point selects (and one `SELECT … IN`) for the same keys.

use std::time::{Duration, Instant};

use clap::Args;
use mysql_async::prelude::Queryable;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tributary_proto::grpc::from_json;
use tributary_proto::grpc::v1::lookup_client::LookupClient;
use tributary_proto::grpc::v1::{BatchGetRequest, GetRequest};
use tributary_proto::partition::partition_for_key;
use tributary_tables::grpc::ServedTables;
use tributary_tables::materializer::Materializer;
use tributary_tables::{TablesConfig, TablesMetrics};

use crate::measure::{Series, print_latency_table};
use crate::stack::{create_topic, produce};
use crate::tables::{Keys, load_mariadb, row, wait_applied};

/// Arguments of `tributary-bench grpc`.
#[derive(Args)]
pub(crate) struct GrpcBenchArgs {
    /// Rows in the table.
    #[arg(long, default_value_t = 100_000)]
    rows: u64,
    /// `Get` requests per concurrency level.
    #[arg(long, default_value_t = 50_000)]
    requests: usize,
    /// Batches of 100 keys (and as many rounds of 100 MariaDB selects).
    #[arg(long, default_value_t = 500)]
    batches: usize,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

pub(crate) async fn run(args: GrpcBenchArgs) -> anyhow::Result<()> {
    let n = args.rows;
    let topic = format!("bench-grpc-{}", std::process::id());
    eprintln!("[bench] producing {n} records to {topic}");
    create_topic(&args.stack.brokers, &topic, 3).await?;
    produce(&args.stack.brokers, &topic, n, |id| {
        let key = format!(r#"{{"id":{id}}}"#);
        (partition_for_key(key.as_bytes(), 3), key, row(id))
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let config = TablesConfig::parse(&format!(
        "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\nbatch_max_records: 5000\n\
         tables: [{{ name: kv, topic: '{topic}', mode: global }}]\n\
         grpc: {{ listen: '127.0.0.1:0', routing: {{ enabled: false }} }}\n",
        dir.path().display(),
        args.stack.brokers
    ))?;
    let metrics = TablesMetrics::register(&mut Registry::default());
    let shutdown = CancellationToken::new();
    let materializer = Materializer::start(&config, metrics.clone(), shutdown.clone()).await?;
    wait_applied(&materializer, n).await;
    let served = ServedTables {
        local: materializer.tables().to_vec(),
        progress: Some(materializer.progress()),
        remote: Vec::new(),
    };
    let grpc = config.grpc.as_ref().expect("configured above");
    let api =
        tributary_tables::grpc::start(&config, grpc, served, metrics, shutdown.clone()).await?;
    let url = format!("http://{}", api.local_addr);
    eprintln!("[bench] lookup API on {url}");

    gets(&url, n, 1, Connections::Own, args.requests / 10).await?; // warm up
    let mut levels = Vec::new();
    for clients in [1, 10, 50] {
        levels.push(gets(&url, n, clients, Connections::Own, args.requests).await?);
    }
    levels.push(gets(&url, n, 50, Connections::Shared, args.requests).await?);

    eprintln!("[bench] loading MariaDB");
    let pool = mysql_async::Pool::new(mysql_async::Opts::from_url(&args.stack.mysql_url)?);
    load_mariadb(&pool, n).await?;
    let batched = batch_gets(&url, n, args.batches).await?;
    let (selects, select_in) = mariadb_rounds(&args.stack.mysql_url, n, args.batches).await?;

    shutdown.cancel();
    materializer.join().await?;
    api.join().await?;

    println!("\n## Lookup API ({n} rows, loopback, server and clients on one machine)\n");
    println!("| Get | requests/s | p50 µs | p99 µs | p99.9 µs |");
    println!("|---|---:|---:|---:|---:|");
    for s in &levels {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            s.name(),
            s.ops_per_second(),
            micros(s.p50()),
            micros(s.quantile(0.99)),
            micros(s.quantile(0.999))
        );
    }
    println!();
    print_latency_table(&[&batched], &[&batched, &selects, &select_in]);
    Ok(())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn connect(url: &str) -> anyhow::Result<LookupClient<Channel>> {
    let channel = Endpoint::from_shared(url.to_owned())?.connect().await?;
    Ok(LookupClient::new(channel))
}

/// How clients reach the server.
#[derive(Clone, Copy, PartialEq)]
enum Connections {
    /// Each client has its own HTTP/2 connection (separate services).
    Own,
    /// All clients share one multiplexed connection (one service's channel).
    Shared,
}

/// `clients` clients sending `Get`s back to back.
async fn gets(
    url: &str,
    rows: u64,
    clients: u64,
    connections: Connections,
    requests: usize,
) -> anyhow::Result<Series> {
    let per_client = requests / clients as usize;
    let shared = connect(url).await?;
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(match connections {
            Connections::Own => connect(url).await?,
            Connections::Shared => shared.clone(),
        });
    }
    let started = Instant::now();
    let workers: Vec<_> = connected
        .into_iter()
        .enumerate()
        .map(|(c, mut client)| {
            tokio::spawn(async move {
                let mut keys = Keys(0x9e37_79b9_7f4a_7c15 + c as u64);
                let mut latencies = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let request = GetRequest {
                        table: "kv".into(),
                        key: Some(from_json(&json!(keys.next(rows)))),
                        min_position: None,
                        as_of_us: None,
                    };
                    let t0 = Instant::now();
                    let found = client.get(request).await?.into_inner().found;
                    latencies.push(t0.elapsed());
                    anyhow::ensure!(found, "a key is missing");
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await??);
    }
    let how = match connections {
        Connections::Own => "own connections",
        Connections::Shared => "one shared connection",
    };
    Ok(Series::new(
        format!("{clients} client(s), {how}"),
        latencies,
        started.elapsed(),
    ))
}

/// `BatchGet`s of 100 random keys, one at a time.
async fn batch_gets(url: &str, rows: u64, batches: usize) -> anyhow::Result<Series> {
    let mut client = connect(url).await?;
    let mut keys = Keys(0x51_7cc1_b727_220a);
    let mut latencies = Vec::with_capacity(batches);
    let started = Instant::now();
    for _ in 0..batches {
        let request = BatchGetRequest {
            table: "kv".into(),
            keys: (0..100)
                .map(|_| from_json(&json!(keys.next(rows))))
                .collect(),
            min_position: None,
            as_of_us: None,
        };
        let t0 = Instant::now();
        let results = client.batch_get(request).await?.into_inner().results;
        latencies.push(t0.elapsed());
        anyhow::ensure!(results.iter().all(|r| r.found), "a key is missing");
    }
    Ok(Series::new(
        "gRPC BatchGet(100)",
        latencies,
        started.elapsed(),
    ))
}

/// Rounds of 100 prepared point selects on one TCP connection, and of one
/// `SELECT … WHERE id IN (100 ids)`.
async fn mariadb_rounds(url: &str, rows: u64, rounds: usize) -> anyhow::Result<(Series, Series)> {
    let opts: mysql_async::Opts =
        mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(url)?)
            .prefer_socket(false)
            .into();
    let mut conn = mysql_async::Conn::new(opts).await?;
    let table = format!("tributary_bench.kv_{rows}");
    let point = conn
        .prep(format!(
            "SELECT id, name, email, tier, score FROM {table} WHERE id = ?"
        ))
        .await?;
    let mut keys = Keys(0x51_7cc1_b727_220a);
    let (mut singles, mut ins) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for _ in 0..rounds {
        let ids: Vec<u64> = (0..100).map(|_| keys.next(rows)).collect();
        let t0 = Instant::now();
        for id in &ids {
            let found: Option<(u64, String, String, String, i64)> =
                conn.exec_first(&point, (id,)).await?;
            anyhow::ensure!(found.is_some(), "id {id} missing in MariaDB");
        }
        singles.push(t0.elapsed());
    }
    let singles = Series::new("100 MariaDB point SELECTs", singles, started.elapsed());
    let started = Instant::now();
    for _ in 0..rounds {
        let ids: Vec<String> = (0..100).map(|_| keys.next(rows).to_string()).collect();
        let t0 = Instant::now();
        let found: Vec<(u64, String, String, String, i64)> = conn
            .query(format!(
                "SELECT id, name, email, tier, score FROM {table} WHERE id IN ({})",
                ids.join(",")
            ))
            .await?;
        ins.push(t0.elapsed());
        anyhow::ensure!(!found.is_empty(), "no rows in MariaDB");
    }
    let ins = Series::new("1 MariaDB SELECT … IN (100 ids)", ins, started.elapsed());
    Ok((singles, ins))
}
