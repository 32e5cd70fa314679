//! `tributary-bench postgres`: PostgreSQL → broker rows/s over `--rows` row
//! changes in the WAL, side by side in one run with PostgreSQL's own client,
//! `pg_recvlogical`, reading the same LSN range with the same plugin and
//! options to /dev/null, with Tributary's decoding alone (replication stream →
//! change events, nothing produced), and with the broker's ceiling for the
//! same records. Each reader has a slot of its own, created before the rows
//! are written, so all read the same changes. The server's WAL sender for each
//! reader is measured too (its CPU time from `/proc`, the stack's server being
//! on this machine): at 100% of the wall time, the server is what limits.

use std::time::Duration;

use clap::Args;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;
use tributary_capture::change_stream::{ChangeStream, ReaderItem};
use tributary_capture::event_shape::EventShape;
use tributary_capture::postgres::wal_position::WalPosition;
use tributary_capture::postgres::wal_stream::WalStream;
use tributary_capture::{CaptureConfig, CaptureMetrics};

use crate::measure::cpu_seconds_of;
use crate::series::{Measured, Stopwatch, ceiling_run, print_rows_table, sample_records};

/// Arguments of `tributary-bench postgres`.
#[derive(Args)]
pub(crate) struct PostgresBenchArgs {
    /// Rows inserted (one table), each one change in the WAL.
    #[arg(long, default_value_t = 500_000)]
    rows: u64,
    /// Rows inserted per source transaction.
    #[arg(long, default_value_t = 10_000)]
    rows_per_transaction: u64,
    /// Capture's delivery mode for the end-to-end run: `at_least_once` or `exactly_once`.
    #[arg(long, default_value = "at_least_once")]
    delivery: String,
    /// The PostgreSQL port capture connects to as `tributary`.
    #[arg(long, env = "TRIBUTARY_PG_PORT", default_value_t = 5433)]
    pg_port: u16,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

pub(crate) async fn run(args: PostgresBenchArgs) -> anyhow::Result<()> {
    let n = args.rows;
    anyhow::ensure!(
        args.rows_per_transaction > 0,
        "--rows-per-transaction must be at least 1"
    );
    let (client, connection) = tokio_postgres::connect(&args.stack.pg_url, NoTls).await?;
    let connection = tokio::spawn(connection);
    let name = format!("bench_pg_{}", std::process::id());
    let slot = |reader: &str| format!("{name}_{reader}");
    client
        .batch_execute(&format!(
            "CREATE TABLE {name} (id bigint PRIMARY KEY, user_id int, name text, amount numeric(10,2), \
             created timestamp); GRANT SELECT ON {name} TO tributary; \
             CREATE PUBLICATION {name} FOR TABLE {name};"
        ))
        .await?;
    for reader in ["recv", "decode", "e2e"] {
        client
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot(reader)],
            )
            .await?;
    }
    eprintln!("[bench] inserting {n} rows into {name}");
    let per_txn = args.rows_per_transaction;
    for first in (1..=n).step_by(per_txn as usize) {
        let last = (first + per_txn - 1).min(n);
        client
            .batch_execute(&format!(
                "INSERT INTO {name} SELECT g, g % 5000, 'user ' || g, (g % 1000) + (g % 100) / 100.0, \
                 timestamp '2026-11-30 12:00:00' + g * interval '1 second' \
                 FROM generate_series({first}, {last}) g"
            ))
            .await?;
    }
    let end: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);

    let server = format!("benchpg{}", std::process::id());
    let yaml = |reader: &str| {
        format!(
            "server_name: {server}\nsource: {{ kind: postgres, host: 127.0.0.1, port: {}, user: tributary, \
             password: tributary, database: postgres, slot.name: {}, publication.name: {name}, \
             publication.autocreate.mode: disabled }}\nsnapshot: {{ mode: never }}\n\
             include: {{ tables: ['public\\.{name}'] }}\nkafka: {{ brokers: '{}' }}\ndelivery: {}\n",
            args.pg_port,
            slot(reader),
            args.stack.brokers,
            args.delivery
        )
    };

    eprintln!("[bench] capture: WAL → broker");
    let sender = WalSender::watch(&args.stack.pg_url, slot("e2e")).await?;
    let metrics = CaptureMetrics::register(&mut Registry::default());
    let stop = CancellationToken::new();
    let started = Stopwatch::start()?;
    let capture = tokio::spawn(tributary_capture::run(
        CaptureConfig::parse(&yaml("e2e"))?,
        metrics.clone(),
        stop.clone(),
    ));
    let label = tributary_capture::metrics::TableLabel {
        table: format!("public.{name}"),
    };
    while metrics.events.get_or_create(&label).get() < n {
        anyhow::ensure!(!capture.is_finished(), "capture stopped early");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel(); // drains: every event acknowledged
    capture.await??;
    let streamed = started.own()?;
    let e2e_sender = sender.stop().await?;

    eprintln!("[bench] Tributary decode only: the same changes read and decoded, not produced");
    let sender = WalSender::watch(&args.stack.pg_url, slot("decode")).await?;
    let decoded = decode_only(&yaml("decode"), n).await?;
    let decode_sender = sender.stop().await?;

    eprintln!("[bench] pg_recvlogical reading the same changes to /dev/null");
    let sender = WalSender::watch(&args.stack.pg_url, slot("recv")).await?;
    let started = Stopwatch::start()?;
    let status = tokio::process::Command::new("pg_recvlogical")
        .args([
            "-d",
            &args.stack.pg_url,
            "--slot",
            &slot("recv"),
            "--start",
            "--endpos",
            &end,
            "--no-loop",
            "-o",
            "proto_version=1",
            "-o",
            &format!("publication_names={name}"),
            "-f",
            "/dev/null",
        ])
        .status()
        .await?;
    let recvlogical = started.children()?;
    anyhow::ensure!(status.success(), "pg_recvlogical failed: {status}");
    let recv_sender = sender.stop().await?;

    eprintln!("[bench] broker ceiling: the captured records again, from a plain producer");
    let samples = sample_records(&args.stack.brokers, &format!("{server}.public.{name}")).await?;
    let size = samples.iter().map(|(_, v)| v.len()).sum::<usize>() / samples.len();
    let ceiling = ceiling_run(&args.stack.brokers, &format!("{server}.ceiling"), n, |i| {
        let (key, value) = &samples[i as usize % samples.len()];
        ((i % 3) as i32, key.clone(), value.clone())
    })
    .await?;

    for reader in ["recv", "decode", "e2e"] {
        client
            .execute("SELECT pg_drop_replication_slot($1)", &[&slot(reader)])
            .await?;
    }
    client
        .batch_execute(&format!("DROP PUBLICATION {name}; DROP TABLE {name};"))
        .await?;
    connection.abort();

    println!(
        "\n## PostgreSQL capture ({n} inserted rows in transactions of {per_txn}, ~{size}-byte Debezium JSON values, capture {})\n",
        args.delivery
    );
    print_rows_table(
        n,
        &ceiling,
        vec![
            (
                "broker ceiling: plain producer (lz4, linger 20 ms), the captured records",
                Ok(ceiling),
            ),
            (
                "Tributary: WAL → broker (Debezium JSON, acks=all)",
                Ok(streamed),
            ),
            (
                "Tributary: decode only (pgoutput → typed change events, nothing produced)",
                Ok(decoded),
            ),
            (
                "pg_recvlogical -o proto_version=1 -o publication_names=… -f /dev/null (pgoutput)",
                Ok(recvlogical),
            ),
        ],
    );
    println!(
        "\nCPU seconds: user + system time of this process (Tributary, the plain producer) or of the \
         child (pg_recvlogical), not the server's or the broker's.\n\n\
         The server's WAL sender for each reader (CPU seconds, and as a share of the reader's wall time):\n\n\
         | reader | WAL sender CPU seconds | busy |\n|---|---:|---:|"
    );
    for (reader, measured, cpu) in [
        ("Tributary: WAL → broker", &streamed, e2e_sender),
        ("Tributary: decode only", &decoded, decode_sender),
        ("pg_recvlogical", &recvlogical, recv_sender),
    ] {
        let busy = cpu / measured.wall.as_secs_f64();
        println!("| {reader} | {cpu:.2} | {:.0}% |", busy * 100.0);
    }
    Ok(())
}

/// Follows the CPU time of the server process sending a slot's changes (its
/// WAL sender, `pg_replication_slots.active_pid`) while a reader reads it.
struct WalSender {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<f64>>,
}

impl WalSender {
    async fn watch(pg_url: &str, slot: String) -> anyhow::Result<Self> {
        let (client, connection) = tokio_postgres::connect(pg_url, NoTls).await?;
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let connection = tokio::spawn(connection);
                // The newest reading of each WAL sender the slot had (a reader may reconnect).
                let mut seen: std::collections::BTreeMap<i32, f64> = Default::default();
                while !stop.is_cancelled() {
                    let pid: Option<i32> = client
                        .query_one(
                            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                            &[&slot],
                        )
                        .await?
                        .get(0);
                    if let Some(pid) = pid
                        && let Ok(cpu) = cpu_seconds_of(&pid.to_string())
                    {
                        seen.insert(pid, cpu);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                connection.abort();
                anyhow::ensure!(
                    !seen.is_empty(),
                    "no WAL sender of slot {slot} was seen in /proc (is the server on this machine?)"
                );
                Ok(seen.values().sum())
            }
        });
        Ok(WalSender { stop, task })
    }

    /// The WAL sender's CPU seconds while the slot was read.
    async fn stop(self) -> anyhow::Result<f64> {
        self.stop.cancel();
        self.task.await?
    }
}

/// Streams from the slot `yaml` names with capture's reader until `rows`
/// changes are decoded into change events.
async fn decode_only(yaml: &str, rows: u64) -> anyhow::Result<Measured> {
    let config = CaptureConfig::parse(yaml)?;
    let shape = EventShape::of(&config)?;
    let (_stored, positions) = watch::channel(None);
    let started = Stopwatch::start()?;
    let mut stream = WalStream::open(&config, shape, &WalPosition::default(), positions).await?;
    let mut decoded = 0;
    while decoded < rows {
        match stream.next().await? {
            Some(ReaderItem::Change(_)) => decoded += 1,
            Some(_) => {}
            None => anyhow::bail!("the stream ended after {decoded} of {rows} rows"),
        }
    }
    let took = started.own()?;
    stream.close().await;
    Ok(took)
}
