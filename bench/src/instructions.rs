//! `tributary-bench instructions`: instructions per item in the hot loops,
//! counted by valgrind's callgrind, so that a regression shows whatever the
//! machine's speed or load (issue 31, item 4).
//!
//! Each in-process loop runs in a child process (`tributary-bench
//! instruction-loop`, hidden) under callgrind, which counts only while
//! [`measured`] is on the stack of the loop's thread (`--toggle-collect`): the
//! loop and everything its single-threaded runtime runs meanwhile, not the
//! work of other threads (RocksDB's background jobs) nor the set-up before it.
//! Each runs at two sizes, and the figure is the difference in instructions
//! over the difference in items, so what a loop does once (first use of a
//! cache, a connection's start) cancels out.
//!
//! The lookup API is counted as a server: `tributary serve` runs under
//! callgrind, counting every thread of it only while the load generator runs
//! (`callgrind_control -i on`, then `off`), and the figure is over the
//! requests answered.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use prometheus_client::registry::Registry;
use serde_json::json;
use tributary_allocator::PURGE_DELAY_VAR;
use tributary_capture::change_stream::ChangeStream as _;
use tributary_enricher::config::EnrichConfig;
use tributary_enricher::metrics::EnrichMetrics;
use tributary_enricher::pipeline::{Outcome, Pipeline};
use tributary_proto::grpc::served;
use tributary_table_api::Table;
use tributary_table_api::memory::MemoryTable;
use tributary_tables::local_table::{LocalTable, SharedShape};
use tributary_tables::progress::Progress;
use tributary_tables::store::Store;
use tributary_tables::{TablesConfig, TablesMetrics};

use crate::grpc::{Launch, Server};
use crate::load_gen::LoadResult;
use crate::tables::{Keys, row};

/// Arguments of `tributary-bench instructions`.
#[derive(Args)]
pub(crate) struct InstructionsArgs {
    /// Items in the smaller run of each loop; the larger run has twice as many.
    #[arg(long, default_value_t = 20_000)]
    items: u64,
    /// The loops to count, comma-separated (all when not given).
    #[arg(long, value_delimiter = ',', value_enum)]
    loops: Vec<Loop>,
    /// Where callgrind's output files are kept, to read with
    /// `callgrind_annotate` (not kept when not given).
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// Seconds of load on the lookup API under callgrind, per lookup loop.
    #[arg(long, default_value_t = 10)]
    lookup_seconds: u64,
    /// The lookup API's cache of encoded rows (`grpc.row_cache_mb`) in the
    /// lookup loops; 0 counts every row read from RocksDB and transcoded.
    #[arg(long, default_value_t = 64)]
    row_cache_mb: usize,
    /// The rows kept for joins (`join_row_cache_mb`) in the
    /// enrich-local loop; 0 counts every row read from RocksDB and parsed.
    #[arg(long, default_value_t = 64)]
    join_row_cache_mb: usize,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

/// A hot loop whose instructions are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Loop {
    /// Capture's binlog reader: row events read and decoded into change events.
    Decode,
    /// The same, and each change event encoded as capture writes it (Debezium
    /// JSON key and value, partition by key): the difference from `decode` is
    /// capture's own work per record before the producer.
    Encode,
    /// A local table's get of a random key (RocksDB through its block cache).
    LocalGet,
    /// The lookup API's answer for a found key: the stored row transcoded to
    /// an API value's encoding, the response encoded.
    ApiRow,
    /// An enrichment job's own work per event: parse, two joins on in-memory
    /// tables, projection, output.
    Enrich,
    /// The same with its `users` join on a local table (a global table of
    /// the users, its rows kept in memory as the join selects them unless
    /// `--join-row-cache-mb 0`, else read through RocksDB's block cache),
    /// `products` in memory.
    EnrichLocal,
    /// `tributary serve` answering `Get` of a hot set of keys (every thread of it).
    LookupGet,
    /// `tributary serve` answering `BatchGet` of 100 hot keys, per key.
    LookupBatch,
}

impl Loop {
    fn item(self) -> &'static str {
        match self {
            Loop::Decode => "row decoded (binlog → change event)",
            Loop::Encode => "row decoded and encoded (binlog → Debezium JSON key and value)",
            Loop::LocalGet => "local get (stored JSON bytes, 100k-row table, block cache)",
            Loop::ApiRow => "lookup API row (stored JSON → encoded response)",
            Loop::Enrich => "enriched event (2 joins on in-memory tables)",
            Loop::EnrichLocal => "enriched event (a local RocksDB join, an in-memory join)",
            Loop::LookupGet => "lookup API `Get` (server, all threads)",
            Loop::LookupBatch => "lookup API key of a `BatchGet(100)` (server, all threads)",
        }
    }

    /// Keys per request of a lookup loop; `None` for in-process loops.
    fn keys(self) -> Option<usize> {
        match self {
            Loop::LookupGet => Some(1),
            Loop::LookupBatch => Some(100),
            Loop::Decode
            | Loop::Encode
            | Loop::LocalGet
            | Loop::ApiRow
            | Loop::Enrich
            | Loop::EnrichLocal => None,
        }
    }
}

/// Arguments of the hidden `tributary-bench instruction-loop`.
#[derive(Args)]
pub(crate) struct LoopArgs {
    /// The loop to run.
    #[arg(value_enum)]
    which: Loop,
    /// Items to run it for.
    #[arg(long)]
    items: u64,
    /// What the loop reads: a capture config (decode) or a tables config
    /// whose data directory holds the table (local-get, enrich-local).
    #[arg(long)]
    config: Option<PathBuf>,
    /// decode: the GTID position the binlog is read from.
    #[arg(long)]
    gtid: Option<String>,
}

/// Rows of the table the local-get and lookup loops read.
const TABLE_ROWS: u64 = 100_000;

/// What the loops read, made once.
struct Inputs {
    dir: tempfile::TempDir,
    /// Where callgrind writes.
    out_dir: PathBuf,
    /// The decode loop's capture config and GTID position.
    decode: Option<(PathBuf, String)>,
    /// The local-get loop's tables config.
    local_get: Option<PathBuf>,
    /// The enrich-local loop's tables config (its `users` table).
    local_users: Option<PathBuf>,
    /// The lookup loops' server directory (its table materialized) and topic.
    lookup: Option<(PathBuf, String)>,
}

/// A loop's count.
struct Counted {
    which: Loop,
    per_item: f64,
    how: String,
}

pub(crate) async fn run(args: InstructionsArgs) -> anyhow::Result<()> {
    check_valgrind()?;
    anyhow::ensure!(args.items > 0, "--items must be at least 1");
    let loops = if args.loops.is_empty() {
        Loop::value_variants().to_vec()
    } else {
        args.loops.clone()
    };
    let inputs = prepare(&args, &loops).await?;
    let mut counted = Vec::new();
    for &which in &loops {
        counted.push(match which.keys() {
            Some(keys) => count_lookups(which, keys, &args, &inputs).await?,
            None => count_loop(which, args.items, &inputs)?,
        });
    }
    println!("\n| loop | instructions per item | counted |");
    println!("|---|---:|---|");
    for Counted {
        which,
        per_item,
        how,
    } in counted
    {
        println!("| {} | {per_item:.0} | {how} |", which.item());
    }
    Ok(())
}

/// An in-process loop at `items` and twice as many items.
fn count_loop(which: Loop, items: u64, inputs: &Inputs) -> anyhow::Result<Counted> {
    let mut runs = Vec::new();
    for n in [items, 2 * items] {
        eprintln!("[bench] {which:?}: {n} items under callgrind");
        runs.push(count(which, n, inputs)?);
    }
    Ok(Counted {
        which,
        per_item: (runs[1] as f64 - runs[0] as f64) / items as f64,
        how: format!(
            "the loop's thread: ({} − {}) instructions / {items} items",
            runs[1], runs[0]
        ),
    })
}

/// `tributary serve` under callgrind, counting while a closed loop of 50
/// connections sends requests of `keys` keys for `--lookup-seconds` (after
/// as long a warm-up, not counted).
async fn count_lookups(
    which: Loop,
    keys: usize,
    args: &InstructionsArgs,
    inputs: &Inputs,
) -> anyhow::Result<Counted> {
    let (dir, topic) = inputs.lookup.as_ref().expect("prepared");
    let out_file = inputs.out_dir.join(format!("callgrind.{which:?}"));
    eprintln!("[bench] {which:?}: tributary serve under callgrind");
    let server = Server::start(
        dir,
        &args.stack.brokers,
        topic,
        Launch::Callgrind(&out_file),
        args.row_cache_mb,
    )
    .await?;
    server.wait_ready(TABLE_ROWS).await?;
    let pid = server.pid()?.to_string();
    let lookups = |seconds: u64| lookup_load(server.addr(), keys, seconds);
    // Not counted: the hot keys' blocks into the caches.
    lookups(args.lookup_seconds).await?;
    callgrind_control(&["-i", "on", &pid]).await?;
    let load = lookups(args.lookup_seconds).await;
    callgrind_control(&["-i", "off", &pid]).await?;
    server.terminate().await?;
    let load = load?;
    let instructions = instructions_in(&std::fs::read_to_string(&out_file)?)
        .with_context(|| format!("no instruction total in {}", out_file.display()))?;
    let items = load.answered_total * keys as u64;
    anyhow::ensure!(items > 0, "no request was answered under callgrind");
    Ok(Counted {
        which,
        per_item: instructions as f64 / items as f64,
        how: format!(
            "every thread of the server: {instructions} instructions / {} requests{}",
            load.answered_total,
            if keys > 1 {
                format!(" × {keys} keys")
            } else {
                String::new()
            }
        ),
    })
}

/// Keys the lookup loops read: a hot set of the table, in its caches after
/// the warm-up, as a long-running server's working set would be.
const HOT_KEYS: u64 = 10_000;

/// A closed loop of 50 connections reading the hot keys for `seconds`.
async fn lookup_load(
    addr: std::net::SocketAddr,
    keys: usize,
    seconds: u64,
) -> anyhow::Result<LoadResult> {
    let load = tokio::process::Command::new(std::env::current_exe()?)
        .arg("lookup-load")
        .arg(format!("--addr={addr}"))
        .arg(format!("--rows={HOT_KEYS}"))
        .arg(format!("--keys={keys}"))
        .args(["--warmup=0", &format!("--seconds={seconds}")])
        .output()
        .await?;
    anyhow::ensure!(
        load.status.success(),
        "lookup-load failed: {}",
        String::from_utf8_lossy(&load.stderr)
    );
    Ok(serde_json::from_slice(&load.stdout)?)
}

async fn callgrind_control(args: &[&str]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new("callgrind_control")
        .args(args)
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "callgrind_control {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn check_valgrind() -> anyhow::Result<()> {
    let found = Command::new("valgrind").arg("--version").output();
    anyhow::ensure!(
        found.is_ok_and(|out| out.status.success()),
        "valgrind is not installed (Debian: apt-get install valgrind)"
    );
    Ok(())
}

/// Loads what the chosen loops read: rows into MariaDB's binlog, a table
/// materialized into a data directory.
async fn prepare(args: &InstructionsArgs, loops: &[Loop]) -> anyhow::Result<Inputs> {
    let dir = tempfile::tempdir()?;
    let out_dir = match &args.out_dir {
        Some(out_dir) => {
            std::fs::create_dir_all(out_dir)?;
            out_dir.clone()
        }
        None => dir.path().to_owned(),
    };
    let mut inputs = Inputs {
        out_dir,
        decode: None,
        local_get: None,
        local_users: None,
        lookup: None,
        dir,
    };
    let run = format!("instr{}", std::process::id());
    if loops.contains(&Loop::Decode) || loops.contains(&Loop::Encode) {
        let opts = mysql_async::Opts::from_url(&args.stack.mysql_url)?;
        let (host, port) = (opts.ip_or_hostname().to_owned(), opts.tcp_port());
        let mut conn = mysql_async::Conn::new(opts).await?;
        let db = format!("bench_{run}");
        let rows = crate::capture::Rows {
            n: 2 * args.items,
            per_transaction: 1000,
            payload_bytes: 0,
        };
        let gtid = crate::capture::write_events(&mut conn, &db, &rows).await?;
        conn.disconnect().await?;
        let yaml =
            crate::capture::capture_yaml(&host, port, &db, &args.stack.brokers, &run, "never", "");
        let path = inputs.dir.path().join("capture.yaml");
        std::fs::write(&path, yaml)?;
        inputs.decode = Some((path, gtid));
    }
    let lookups = loops.iter().any(|l| l.keys().is_some());
    if loops.contains(&Loop::LocalGet) || lookups {
        let topic = format!("bench-{run}");
        crate::tables::produce_rows(&args.stack.brokers, &topic, TABLE_ROWS).await?;
        if loops.contains(&Loop::LocalGet) {
            let dir = inputs.dir.path().join("kv");
            let table = global_table(&dir, &args.stack.brokers, ("kv", &topic), TABLE_ROWS, 0);
            inputs.local_get = Some(table.await?);
        }
        if lookups {
            // Materialized at full speed: under callgrind it restarts ready.
            let dir = inputs.dir.path().join("serve");
            std::fs::create_dir(&dir)?;
            let server = Server::start(
                &dir,
                &args.stack.brokers,
                &topic,
                Launch::Pinned,
                args.row_cache_mb,
            )
            .await?;
            server.wait_ready(TABLE_ROWS).await?;
            server.terminate().await?;
            inputs.lookup = Some((dir, topic));
        }
    }
    if loops.contains(&Loop::EnrichLocal) {
        let topic = format!("bench-{run}.users");
        crate::enrich::produce_users(&args.stack.brokers, &topic, USERS).await?;
        let dir = inputs.dir.path().join("users");
        let (brokers, cache_mb) = (&args.stack.brokers, args.join_row_cache_mb);
        let table = global_table(&dir, brokers, ("users", &topic), USERS, cache_mb);
        inputs.local_users = Some(table.await?);
    }
    Ok(inputs)
}

/// Materializes `topic` (`rows` records) as the global table `name` in
/// `dir`; the path of its tables config (with `join_row_cache_mb`), which
/// [`open_table`] reads.
async fn global_table(
    dir: &Path,
    brokers: &str,
    (name, topic): (&str, &str),
    rows: u64,
    join_row_cache_mb: usize,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let yaml = format!(
        "data_dir: '{}'\nkafka: {{ brokers: '{brokers}' }}\njoin_row_cache_mb: {join_row_cache_mb}\ntables: [{{ name: {name}, topic: '{topic}', mode: global }}]\n",
        dir.join("data").display(),
    );
    let config = TablesConfig::parse(&yaml)?;
    let (materializer, shutdown) = crate::tables::start(&config).await?;
    crate::tables::wait_applied_to(&materializer, name, rows).await;
    crate::tables::stop(materializer, shutdown).await?;
    let path = dir.join("tables.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

/// Runs a loop for `items` under callgrind; returns the instructions counted.
fn count(which: Loop, items: u64, inputs: &Inputs) -> anyhow::Result<u64> {
    let out_file = inputs.out_dir.join(format!("callgrind.{which:?}.{items}"));
    let mut command = Command::new("valgrind");
    command
        // Tuned already: the loop does not start itself again outside callgrind.
        .env(PURGE_DELAY_VAR, tributary_allocator::purge_delay())
        .arg("--tool=callgrind")
        .arg("--toggle-collect=tributary_bench::instructions::measured*")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(std::env::current_exe()?)
        .arg("instruction-loop")
        .arg(
            which
                .to_possible_value()
                .expect("no skipped loops")
                .get_name(),
        )
        .arg(format!("--items={items}"));
    match which {
        Loop::Decode | Loop::Encode => {
            let (config, gtid) = inputs.decode.as_ref().expect("prepared");
            command
                .arg("--config")
                .arg(config)
                .arg(format!("--gtid={gtid}"));
        }
        Loop::LocalGet => {
            command
                .arg("--config")
                .arg(inputs.local_get.as_ref().expect("prepared"));
        }
        Loop::EnrichLocal => {
            command
                .arg("--config")
                .arg(inputs.local_users.as_ref().expect("prepared"));
        }
        Loop::ApiRow | Loop::Enrich | Loop::LookupGet | Loop::LookupBatch => {}
    }
    let out = command.output()?;
    anyhow::ensure!(
        out.status.success(),
        "the {which:?} loop failed under valgrind: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    instructions_in(&std::fs::read_to_string(&out_file)?)
        .with_context(|| format!("no instruction total in {}", out_file.display()))
}

/// The instructions a callgrind output file counts: its `totals:` line (its
/// `summary:` line says 0 when instrumentation was switched on and off).
fn instructions_in(callgrind_out: &str) -> Option<u64> {
    callgrind_out
        .lines()
        .find_map(|line| line.strip_prefix("totals:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Runs one loop (the hidden `instruction-loop` command), on one thread.
pub(crate) fn run_loop(args: LoopArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let config = || args.config.as_deref().context("--config is required");
    match args.which {
        Loop::Decode | Loop::Encode => {
            let yaml = std::fs::read_to_string(config()?)?;
            let gtid = args.gtid.as_deref().context("--gtid is required")?;
            let mut reader = runtime.block_on(crate::capture::open_reader(&yaml, gtid))?;
            match args.which {
                Loop::Decode => measured(
                    &runtime,
                    crate::capture::decode_rows(&mut reader, args.items),
                )?,
                _ => measured(
                    &runtime,
                    crate::capture::encode_rows(&mut reader, args.items),
                )?,
            }
            runtime.block_on(reader.close());
        }
        Loop::LocalGet => {
            let table = open_table(config()?)?;
            measured(&runtime, async {
                let mut keys = Keys(0x9e37_79b9_7f4a_7c15);
                for _ in 0..args.items {
                    let key = json!({ "id": keys.next(TABLE_ROWS) });
                    anyhow::ensure!(table.get_json_bytes(&key)?.is_some(), "{key} missing");
                }
                Ok(())
            })?;
        }
        Loop::ApiRow => {
            let rows: Vec<String> = (0..1000).map(row).collect();
            measured(&runtime, async {
                for i in 0..args.items {
                    let raw = rows[i as usize % rows.len()].as_bytes();
                    let response = served::v1_served::GetResponse {
                        found: true,
                        row: Some(served::ServedValue::from_json_slice(raw)?),
                        ..Default::default()
                    };
                    std::hint::black_box(prost::Message::encode_to_vec(&response));
                }
                anyhow::Ok(())
            })?;
        }
        Loop::Enrich | Loop::EnrichLocal => {
            let users: Arc<dyn Table> = match args.which {
                Loop::EnrichLocal => Arc::new(open_table(config()?)?),
                _ => Arc::new(memory_users()?),
            };
            let pipeline = enrich_pipeline(users)?;
            let events: Vec<String> = (0..1000)
                .map(|o| crate::enrich::order(o, USERS, PRODUCTS))
                .collect();
            measured(&runtime, async {
                for i in 0..args.items {
                    let event = events[i as usize % events.len()].as_bytes();
                    let outcome = pipeline.process(None, Some(event), Some(0)).await;
                    anyhow::ensure!(
                        matches!(outcome, Outcome::Emit { .. }),
                        "event {i} not enriched"
                    );
                }
                Ok(())
            })?;
        }
        Loop::LookupGet | Loop::LookupBatch => {
            anyhow::bail!("{:?} is counted in the server, not in process", args.which)
        }
    }
    Ok(())
}

/// What callgrind counts: `work`, with the runtime that drives it (kept out
/// of line so that `--toggle-collect` finds it).
#[inline(never)]
fn measured<T>(runtime: &tokio::runtime::Runtime, work: impl Future<Output = T>) -> T {
    runtime.block_on(work)
}

/// The table of a local-get or enrich-local loop, opened from its data
/// directory (no broker), keeping the derived rows its config asks for.
fn open_table(config: &Path) -> anyhow::Result<LocalTable> {
    let config = TablesConfig::parse(&std::fs::read_to_string(config)?)?;
    let (encoded, joined) = config.derived_rows_bytes();
    let store = Store::open(&config.data_dir, &config.rocksdb)?.with_derived_rows(encoded, joined);
    let store = Arc::new(store);
    Ok(LocalTable::new(
        &config.tables[0],
        3,
        store,
        Arc::new(Progress::default()),
        TablesMetrics::register(&mut Registry::default()),
        SharedShape::default(),
    ))
}

/// Users and products of the enrich loop's in-memory tables.
const USERS: u64 = 10_000;
const PRODUCTS: u64 = 1_000;

/// The enrichment bench's users, in memory.
fn memory_users() -> anyhow::Result<MemoryTable> {
    let users = MemoryTable::new("users", &["id"]);
    for id in 0..USERS {
        users.upsert(serde_json::from_str(&crate::enrich::user(id))?)?;
    }
    Ok(users)
}

/// The enrichment bench's job, over `users` and in-memory `products`.
fn enrich_pipeline(users: Arc<dyn Table>) -> anyhow::Result<Pipeline> {
    let products = MemoryTable::new("products", &["sku"]);
    for i in 0..PRODUCTS {
        products.upsert(json!({"sku": format!("SKU-{i}"), "title": format!("product {i}"), "price": format!("{}.99", i % 100)}))?;
    }
    let text = format!(
        "kafka: {{ brokers: b }}\njobs:\n  - name: bench\n    input: {{ topics: [orders] }}\n{}    output: {{ topic: out, key: order_id }}\n    dead_letter: {{ topic: dlq }}\n",
        crate::enrich::JOINS
    );
    let config = EnrichConfig::parse(&text, &["users", "products"])?;
    let tables: [Arc<dyn Table>; 2] = [users, Arc::new(products)];
    Ok(Pipeline::new(
        &config.jobs[0],
        &tables,
        1 << 20,
        &EnrichMetrics::default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_is_read_from_the_totals_line() {
        let out = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=(1) main\n3 9\nsummary: 0\ntotals: 123456\n";
        assert_eq!(instructions_in(out), Some(123_456));
        assert_eq!(instructions_in("events: Ir\n"), None);
    }
}
