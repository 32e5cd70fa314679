//! `tributary-bench grpc`: the lookup API measured as a server, against the
//! servers a user would otherwise call, on the same core budget.
//!
//! `tributary serve` runs as its own process on [`SERVER_CORE`]; the load
//! generator (`tributary-bench lookup-load`, see `load_gen`) on [`CLIENT_CORE`].
//! `Get` is offered at fixed rates (open loop, 50 connections) up to
//! saturation, then sent closed loop from 50 connections. The same core holds
//! MariaDB for sysbench's point selects and a Redis for `redis-benchmark`,
//! each tool on the client core. `BatchGet` of 100 keys is set against one
//! `SELECT … IN (100 ids)` and 100 point selects, one request at a time.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use mysql_async::prelude::Queryable;
use tonic::transport::Endpoint;
use tributary_allocator::PURGE_DELAY_VAR;
use tributary_proto::grpc::from_json;
use tributary_proto::grpc::v1::lookup_client::LookupClient;
use tributary_proto::grpc::v1::{DescribeTableRequest, GetRequest};

use crate::hiccups::Hiccups;
use crate::load_gen::LoadResult;
use crate::measure::{Series, cpu_split_of, print_latency_table, thread_cpu_of};
use crate::pinning::{CLIENT_CORE, Pinned, SERVER_CORE, on_core};
use crate::point_peers::{MariaDb, PeerRun, RedisPeer};
use crate::tables::{Keys, load_mariadb, row};

/// Arguments of `tributary-bench grpc`.
#[derive(Args)]
pub(crate) struct GrpcBenchArgs {
    /// Rows in the table (and in the peers' tables).
    #[arg(long, default_value_t = 100_000)]
    rows: u64,
    /// Offered `Get` rates (requests/s), open loop; the series goes on at 1.5×
    /// the last until the server falls behind.
    #[arg(long, value_delimiter = ',', default_values_t = [2_000.0, 5_000.0, 10_000.0, 20_000.0, 40_000.0])]
    rates: Vec<f64>,
    /// Concurrent connections (streams) of every generator.
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Seconds measured per rate (after 2 s of warm-up).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Batches of 100 keys (and as many rounds of MariaDB selects).
    #[arg(long, default_value_t = 500)]
    batches: usize,
    /// The server's cache of encoded rows (`grpc.row_cache_mb`); `BatchGet`
    /// is also measured on the same data without it, every row read from
    /// RocksDB and transcoded.
    #[arg(long, default_value_t = 64)]
    row_cache_mb: usize,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

/// One measured level of the lookup API, with its server's CPU.
struct Level {
    load: LoadResult,
    /// Server CPU seconds per wall second during the run.
    server_cpu: f64,
    /// The part of it in the kernel (system calls, the network stack).
    server_kernel_cpu: f64,
    /// The same by thread name (`thread_cpu_of`).
    server_threads: BTreeMap<String, f64>,
    /// How long the server's core stopped answering meanwhile.
    hiccups: Hiccups,
}

pub(crate) async fn run(args: GrpcBenchArgs) -> anyhow::Result<()> {
    crate::pinning::check()?;
    crate::point_peers::check_tools()?;
    anyhow::ensure!(args.rows > 0, "--rows must be at least 1");
    let n = args.rows;
    let topic = format!("bench-grpc-{}", std::process::id());
    crate::tables::produce_rows(&args.stack.brokers, &topic, n).await?;
    let _client_core = Pinned::pin(std::process::id(), CLIENT_CORE)?;
    let dir = tempfile::tempdir()?;
    let start = |row_cache_mb| {
        Server::start(
            dir.path(),
            &args.stack.brokers,
            &topic,
            Launch::Pinned,
            row_cache_mb,
        )
    };
    let server = start(args.row_cache_mb).await?;
    server.wait_ready(n).await?;
    eprintln!("[bench] lookup API on {} (core {SERVER_CORE})", server.addr);

    let mut open = Vec::new();
    let mut rates: std::collections::VecDeque<f64> = args.rates.iter().copied().collect();
    while let Some(rate) = rates.pop_front() {
        anyhow::ensure!(rate > 0.0, "--rates must be positive, not {rate}");
        let level = server
            .measure(&args, args.connections, &["--rate", &rate.to_string()])
            .await?;
        let behind = level.load.achieved < 0.95 * rate || level.load.unanswered > 0;
        open.push(level);
        if behind {
            break;
        }
        if rates.is_empty() && open.len() < 20 {
            rates.push_back((rate * 1.5 / 1000.0).round() * 1000.0);
        }
    }
    let closed = server.measure(&args, args.connections, &[]).await?;
    let batch = server.measure(&args, 1, &["--keys", "100"]).await?;
    let (hits, misses) = server.row_cache().await?;
    server.stop().await?;
    // The same data, restarted without the cache: every row read and transcoded.
    let server = start(0).await?;
    server.wait_ready(n).await?;
    let uncached_batch = server.measure(&args, 1, &["--keys", "100"]).await?;
    server.stop().await?;

    eprintln!("[bench] loading MariaDB");
    let pool = mysql_async::Pool::new(mysql_async::Opts::from_url(&args.stack.mysql_url)?);
    load_mariadb(&pool, n).await?;
    let mariadb = MariaDb::new(&args.stack.mysql_url, mariadb_pid(&pool).await?)?;
    pool.disconnect().await?;
    let (selects, select_in) = {
        let _server_core = Pinned::pin(mariadb.pid(), SERVER_CORE)?;
        mariadb_rounds(&args.stack.mysql_url, n, args.batches).await?
    };
    eprintln!("[bench] sysbench oltp_point_select");
    mariadb.prepare(&args.stack.mysql_url, n).await?;
    let mut sysbench_open = Vec::new();
    for level in &open {
        let rate = level.load.offered.expect("open loop");
        // sysbench gives up when its queue of due events overflows, past its
        // server's capacity: that rate has no figure.
        let run = mariadb
            .point_selects(n, args.connections, args.seconds, Some(rate))
            .await;
        if let Err(e) = &run {
            eprintln!("[bench] sysbench at {rate}/s: {e:#}");
        }
        sysbench_open.push(run.ok());
    }
    let sysbench = mariadb
        .point_selects(n, args.connections, args.seconds, None)
        .await?;
    eprintln!("[bench] redis-benchmark GET");
    let redis = RedisPeer::start(n, row(n / 2).len()).await?;
    let redis_gets = redis
        .gets(
            args.connections,
            (sysbench.rate.max(50_000.0) * args.seconds as f64) as u64,
        )
        .await?;
    redis.stop().await?;

    print_report(
        &args,
        &open,
        &closed,
        &batch,
        &sysbench_open,
        &sysbench,
        &redis_gets,
    );
    print_latency_table(&[&select_in], &[&selects, &select_in]);
    let select_in_p50 = micros(select_in.p50());
    println!(
        "\nThe server's cache of encoded rows ({} MiB) answered {:.1}% of the rows asked for ({hits} of {}).",
        args.row_cache_mb,
        hits as f64 / (hits + misses).max(1) as f64 * 100.0,
        hits + misses
    );
    for (name, level) in [("cached", &batch), ("without the cache", &uncached_batch)] {
        println!(
            "\n`BatchGet(100)`, {name}: p50 {:.0} µs = **{:.2}×** one `SELECT … IN (100 ids)` (p50 {select_in_p50:.0} µs); server CPU {:.1} µs per key, of which {:.1} in the kernel",
            level.load.p50_us,
            level.load.p50_us / select_in_p50,
            level.server_cpu / (level.load.achieved * 100.0).max(1.0) * 1e6,
            level.server_kernel_cpu / (level.load.achieved * 100.0).max(1.0) * 1e6
        );
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn print_report(
    args: &GrpcBenchArgs,
    open: &[Level],
    closed: &Level,
    batch: &Level,
    sysbench_open: &[Option<PeerRun>],
    sysbench: &PeerRun,
    redis: &PeerRun,
) {
    let n = args.rows;
    let c = args.connections;
    println!(
        "\n## Lookup API ({n} rows; server on core {SERVER_CORE}, load on core {CLIENT_CORE}; {c} connections)\n"
    );
    println!("Open loop, latency from each request's scheduled time:\n");
    println!(
        "| offered/s | `Get` achieved/s | p50 µs | p99 µs | p99.9 µs | sent late, p99 µs | server CPU | CPU µs/request | server core stalls: p99 / p99.9 / max µs | speed probe p50 µs | sysbench point select at that rate: achieved/s | mean µs | p99 µs |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (level, peer) in open.iter().zip(sysbench_open.iter().map(Option::as_ref)) {
        let l = &level.load;
        println!(
            "| {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0}% | {:.1} | {:.0} / {:.0} / {:.0} | {:.1} | {} | {} | {} |",
            l.offered.unwrap_or_default(),
            l.achieved,
            l.p50_us,
            l.p99_us,
            l.p999_us,
            l.dispatch_late_p99_us,
            level.server_cpu * 100.0,
            level.server_cpu / l.achieved.max(1.0) * 1e6,
            level.hiccups.p99_us,
            level.hiccups.p999_us,
            level.hiccups.max_us,
            level.hiccups.probe_p50_us,
            peer.map_or("gave up".to_owned(), |p| format!("{:.0}", p.rate)),
            peer.map_or("—".to_owned(), |p| format!("{:.0}", p.mean_us)),
            peer.map_or("—".to_owned(), |p| format!("{:.0}", p.p99_us)),
        );
    }
    println!(
        "\nClosed loop ({c} connections/threads/clients, each waiting for its answer), saturation:\n"
    );
    println!("| server | requests/s | mean or p50 µs | p99 µs | lookup API ÷ it |");
    println!("|---|---:|---:|---:|---:|");
    let l = &closed.load;
    println!(
        "| lookup API `Get` | {:.0} | {:.0} (p50) | {:.0} | 1.00× |",
        l.achieved, l.p50_us, l.p99_us
    );
    for (name, peer) in [
        ("MariaDB point select (sysbench)", sysbench),
        ("Redis GET (redis-benchmark)", redis),
    ] {
        println!(
            "| {name} | {:.0} | {:.0} (mean) | {:.0} | **{:.2}×** |",
            peer.rate,
            peer.mean_us,
            peer.p99_us,
            l.achieved / peer.rate
        );
    }
    println!(
        "\nServer CPU at saturation: {:.0}% of a core, {:.1} µs per `Get` ({:.1} in the kernel); `BatchGet(100)`: {:.1} µs per key.\n",
        closed.server_cpu * 100.0,
        closed.server_cpu / l.achieved.max(1.0) * 1e6,
        closed.server_kernel_cpu / l.achieved.max(1.0) * 1e6,
        batch.server_cpu / (batch.load.achieved * 100.0).max(1.0) * 1e6
    );
    let by_thread: Vec<String> = closed
        .server_threads
        .iter()
        .filter(|(_, cpu)| **cpu > 0.0)
        .map(|(name, cpu)| format!("{name} {:.1}", cpu / l.achieved.max(1.0) * 1e6))
        .collect();
    println!(
        "By thread, µs per `Get`: {}. The speed probe on the server's core: p50 {:.1} µs.\n",
        by_thread.join(", "),
        closed.hiccups.probe_p50_us
    );
}

/// How `tributary serve` is started.
pub(crate) enum Launch<'a> {
    /// On the server core.
    Pinned,
    /// Under valgrind's callgrind, writing to this file and counting nothing
    /// until told to (`callgrind_control -i on`).
    Callgrind(&'a Path),
}

/// `tributary serve` on the server core.
pub(crate) struct Server {
    process: tokio::process::Child,
    addr: std::net::SocketAddr,
    metrics: std::net::SocketAddr,
    log: std::path::PathBuf,
}

impl Server {
    pub(crate) async fn start(
        dir: &Path,
        brokers: &str,
        topic: &str,
        launch: Launch<'_>,
        row_cache_mb: usize,
    ) -> anyhow::Result<Self> {
        let free = || -> anyhow::Result<u16> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port())
        };
        let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free()?).parse()?;
        let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", free()?).parse()?;
        let config = dir.join("serve.yaml");
        std::fs::write(
            &config,
            format!(
                "data_dir: '{}'\nkafka: {{ brokers: '{brokers}' }}\nbatch_max_records: 5000\n\
                 rocksdb: {{ row_cache_mb: 64 }}\n\
                 metrics: {{ listen: '{metrics}' }}\n\
                 tables: [{{ name: kv, topic: '{topic}', mode: global }}]\n\
                 grpc: {{ listen: '{addr}', routing: {{ enabled: false }}, row_cache_mb: {row_cache_mb} }}\n",
                dir.join("data").display(),
            ),
        )?;
        let binary = std::env::current_exe()?.with_file_name("tributary");
        anyhow::ensure!(
            binary.exists(),
            "{} is missing: build the workspace (cargo build --workspace)",
            binary.display()
        );
        let log = dir.join("serve.log");
        let mut command = match launch {
            Launch::Pinned => on_core(SERVER_CORE, &binary),
            Launch::Callgrind(out) => {
                let mut valgrind = tokio::process::Command::new("valgrind");
                valgrind
                    // Tuned already: the server does not start itself again outside callgrind.
                    .env(PURGE_DELAY_VAR, tributary_allocator::purge_delay())
                    .args(["--tool=callgrind", "--instr-atstart=no"])
                    .arg(format!("--callgrind-out-file={}", out.display()))
                    .arg(&binary);
                valgrind
            }
        };
        let process = command
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("TRIBUTARY_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()?;
        Ok(Server {
            process,
            addr,
            metrics,
            log,
        })
    }

    /// Rows answered from the cache of encoded rows, and read from the store,
    /// so far (the server's metrics).
    async fn row_cache(&self) -> anyhow::Result<(u64, u64)> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(self.metrics).await?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await?;
        let count = |result: &str| -> u64 {
            let name = format!(
                "tributary_table_grpc_row_cache_total{{table=\"kv\",result=\"{result}\"}} "
            );
            text.lines()
                .find_map(|l| l.strip_prefix(&name)?.trim().parse().ok())
                .unwrap_or(0)
        };
        Ok((count("hit"), count("miss")))
    }

    /// The server's address.
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> anyhow::Result<u32> {
        self.process.id().context("the server exited")
    }

    /// Waits until the table is ready (every row applied).
    pub(crate) async fn wait_ready(&self, rows: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(300);
        let url = format!("http://{}", self.addr);
        loop {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the lookup API was not ready in 5 minutes; its log: {}",
                self.log.display()
            );
            if let Ok(channel) = Endpoint::from_shared(url.clone())?.connect().await {
                let mut client = LookupClient::new(channel);
                let info = client
                    .describe_table(DescribeTableRequest { table: "kv".into() })
                    .await;
                let last = GetRequest {
                    table: "kv".into(),
                    key: Some(from_json(&serde_json::json!(rows - 1))),
                    min_position: None,
                    as_of_us: None,
                };
                if let Ok(info) = info.map(|r| r.into_inner())
                    && info.ready
                    && let Ok(found) = client.get(last).await
                    && found.into_inner().found
                {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Runs the load generator over `connections` with `extra` arguments on the client core.
    async fn measure(
        &self,
        args: &GrpcBenchArgs,
        connections: usize,
        extra: &[&str],
    ) -> anyhow::Result<Level> {
        let pid = self.pid()?.to_string();
        let (cpu0, threads0, wall0) = (cpu_split_of(&pid)?, thread_cpu_of(&pid)?, Instant::now());
        let bench = std::env::current_exe()?;
        let load = on_core(CLIENT_CORE, &bench)
            .arg("lookup-load")
            .args([
                "--addr",
                &self.addr.to_string(),
                "--rows",
                &args.rows.to_string(),
            ])
            .args(["--connections", &connections.to_string()])
            .args(["--seconds", &args.seconds.to_string()])
            .args(extra)
            .output();
        let hiccups = on_core(SERVER_CORE, &bench)
            .arg("hiccups")
            .args(["--seconds", &args.seconds.to_string()])
            .output();
        let (out, hiccups) = tokio::join!(load, hiccups);
        let (out, hiccups) = (out?, hiccups?);
        let (cpu1, threads1) = (cpu_split_of(&pid)?, thread_cpu_of(&pid)?);
        let seconds = wall0.elapsed().as_secs_f64();
        let server_cpu = (cpu1.0 + cpu1.1 - cpu0.0 - cpu0.1) / seconds;
        let server_kernel_cpu = (cpu1.1 - cpu0.1) / seconds;
        let server_threads = threads1
            .into_iter()
            .map(|(name, cpu)| {
                let before = threads0.get(&name).copied().unwrap_or_default();
                (name, (cpu - before) / seconds)
            })
            .collect();
        anyhow::ensure!(
            out.status.success(),
            "lookup-load {extra:?} failed: {}; the server's log: {}",
            String::from_utf8_lossy(&out.stderr).trim(),
            self.log.display()
        );
        anyhow::ensure!(hiccups.status.success(), "the stall meter failed");
        let load: LoadResult = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "lookup-load printed {:?}",
                String::from_utf8_lossy(&out.stdout)
            )
        })?;
        let hiccups: Hiccups = serde_json::from_slice(&hiccups.stdout)?;
        eprintln!("[bench] {extra:?}: {load:?}, core {SERVER_CORE}: {hiccups:?}");
        Ok(Level {
            load,
            server_cpu,
            server_kernel_cpu,
            server_threads,
            hiccups,
        })
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        self.process.kill().await?;
        Ok(())
    }

    /// Stops the server as an operator would (SIGTERM), waiting for it to exit.
    pub(crate) async fn terminate(mut self) -> anyhow::Result<()> {
        let pid = self.pid()?;
        let sent = tokio::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await?;
        anyhow::ensure!(sent.success(), "kill -TERM {pid} failed");
        let exited = self.process.wait().await?;
        anyhow::ensure!(
            exited.success(),
            "the server exited with {exited}; its log: {}",
            self.log.display()
        );
        Ok(())
    }
}

/// The process id of the MariaDB server behind `pool` (it must run on this machine).
async fn mariadb_pid(pool: &mysql_async::Pool) -> anyhow::Result<u32> {
    let mut conn = pool.get_conn().await?;
    let file: String = conn
        .query_first("SELECT @@pid_file")
        .await?
        .context("MariaDB has no pid_file")?;
    let pid = std::fs::read_to_string(&file)
        .with_context(|| format!("reading MariaDB's pid file {file} (is MariaDB local?)"))?;
    Ok(pid.trim().parse()?)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
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
