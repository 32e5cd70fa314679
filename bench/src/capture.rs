//! `tributary-bench capture`: binlog → broker rows/s on a binlog of `--rows` row
//! events, side by side in one run with the broker's own produce ceiling for
//! the same records (capture's output, re-sent by a plain producer; and, as in
//! earlier sessions, payloads of `x` of the same size), `mariadb-binlog` and python-mysql-replication
//! decoding the same events, and the snapshot rows/s of the same table; each series
//! also in rows per CPU-second of the process doing the work.

use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use mysql_async::prelude::Queryable;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tributary_capture::binlog_reader::{BinlogReader, ReaderSetup};
use tributary_capture::change_stream::{ChangeStream, ReaderItem};
use tributary_capture::position::BinlogPosition;
use tributary_capture::source;
use tributary_capture::{CaptureConfig, CaptureMetrics};

use crate::series::{Measured, Stopwatch, ceiling_run, print_rows_table, sample_records};

/// Arguments of `tributary-bench capture`.
#[derive(Args)]
pub(crate) struct CaptureBenchArgs {
    /// Row events in the binlog (one table).
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Rows inserted per source transaction (1: every row its own transaction).
    #[arg(long, default_value_t = 10_000)]
    rows_per_transaction: u64,
    /// Capture's delivery mode for the binlog → broker run: `at_least_once` or `exactly_once`.
    #[arg(long, default_value = "at_least_once")]
    delivery: String,
    /// A librdkafka producer property for capture, `key=value` (its config's
    /// `kafka.producer`); repeatable.
    #[arg(long = "producer", value_parser = key_value)]
    producer: Vec<(String, String)>,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

pub(crate) async fn run(args: CaptureBenchArgs) -> anyhow::Result<()> {
    let n = args.rows;
    let opts = mysql_async::Opts::from_url(&args.stack.mysql_url)?;
    let (host, port) = (opts.ip_or_hostname().to_owned(), opts.tcp_port());
    let mut conn = mysql_async::Conn::new(opts).await?;
    let db = format!("bench_capture_{}", std::process::id());
    anyhow::ensure!(
        args.rows_per_transaction > 0,
        "--rows-per-transaction must be at least 1"
    );
    let (start_file, start_pos) = binlog_position(&mut conn).await?;
    let rows = Rows {
        n,
        per_transaction: args.rows_per_transaction,
        payload_bytes: 0,
    };
    let start = write_events(&mut conn, &db, &rows).await?;
    // `--stop-position` applies to the last binlog file, where the inserts end.
    let (_, end_pos) = binlog_position(&mut conn).await?;

    let server = format!("bench{}", std::process::id());
    let source = Source {
        host: host.clone(),
        port,
        db: db.clone(),
        brokers: args.stack.brokers.clone(),
        producer: args.producer.clone(),
    };
    let streamed = source.stream(&server, &start, n, &args.delivery).await?;

    eprintln!("[bench] Tributary decode only: the same events read and decoded, not produced");
    let decode_only = decode_only(&source.yaml(&server, "never", ""), &start, n).await?;

    let (ceiling, size) = source.ceiling(&server, n).await?;
    eprintln!("[bench] broker ceiling, payloads of 'x' (the earlier sessions' series)");
    let payload = "x".repeat(size);
    let ceiling_x = ceiling_run(&args.stack.brokers, &format!("{server}.ceilingx"), n, |i| {
        ((i % 3) as i32, format!(r#"{{"id":{i}}}"#), payload.clone())
    })
    .await?;

    eprintln!("[bench] mariadb-binlog decoding the same events");
    let started = Stopwatch::start()?;
    let status = tokio::process::Command::new("mariadb-binlog")
        .args([
            "--read-from-remote-server".to_owned(),
            format!("--host={host}"),
            format!("--port={port}"),
            "--user=root".to_owned(),
            "--verbose".to_owned(),
            "--base64-output=DECODE-ROWS".to_owned(),
            format!("--start-position={start_pos}"),
            format!("--stop-position={end_pos}"),
            "--to-last-log".to_owned(),
            start_file.clone(),
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .await?;
    let decoded = started.children()?;
    anyhow::ensure!(status.success(), "mariadb-binlog failed: {status}");

    eprintln!("[bench] python-mysql-replication decoding the same events");
    // A peer that fails is reported as failed; the other series are still measured.
    let python = python_mysql_replication(&host, port, &start_file, start_pos, n).await;

    eprintln!("[bench] snapshot of the same table");
    let snapshotted = source.snapshot(&format!("{server}snap")).await?;

    println!(
        "\n## Capture ({n} row events in transactions of {}, ~{size}-byte Debezium JSON values, capture {})\n",
        args.rows_per_transaction, args.delivery
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
                "broker ceiling, payloads of 'x' of the same size (compress ~100×)",
                Ok(ceiling_x),
            ),
            (
                "Tributary: binlog → broker (Debezium JSON, acks=all)",
                Ok(streamed.whole),
            ),
            (
                "Tributary: decode only (binlog → typed change events, nothing produced)",
                Ok(decode_only),
            ),
            (
                "mariadb-binlog --verbose --base64-output=DECODE-ROWS > /dev/null",
                Ok(decoded),
            ),
            (
                "python-mysql-replication 1.0 (PyPI `mysql-replication`), rows decoded",
                python,
            ),
            (
                "Tributary: snapshot of the same table → broker",
                Ok(snapshotted),
            ),
        ],
    );
    println!(
        "\nTributary binlog → broker once running (from its first event, start-up excluded): \
         {:.0} rows/s ({:.2}× the ceiling), {:.2} CPU µs per row over {} rows.",
        streamed.running_rate(),
        streamed.running_rate() / (n as f64 / ceiling.wall.as_secs_f64()),
        streamed.running_cpu_us(),
        streamed.running_rows,
    );
    println!(
        "\nCPU seconds: user + system time of this process (Tributary, the plain producer) or of the \
         child (mariadb-binlog; python-mysql-replication counts its own after its imports), \
         not the server's or the broker's (those are in the cores table)."
    );
    Ok(())
}

/// The rows a bench writes to its source table.
pub(crate) struct Rows {
    /// How many.
    pub(crate) n: u64,
    /// Rows inserted per source transaction (1: every row its own).
    pub(crate) per_transaction: u64,
    /// Bytes of random text in a `payload` column (none if 0), to make rows wider.
    pub(crate) payload_bytes: usize,
}

/// Rows of one `INSERT`, at most: one statement stays well under MariaDB's
/// `max_allowed_packet` (16 MiB) whatever the payload.
const STATEMENT_BYTES: usize = 4 << 20;

/// Creates `db.events` and inserts `rows` into it; returns the GTID position
/// before the first.
pub(crate) async fn write_events(
    conn: &mut mysql_async::Conn,
    db: &str,
    rows: &Rows,
) -> anyhow::Result<String> {
    let payload_column = if rows.payload_bytes > 0 {
        ", payload MEDIUMTEXT"
    } else {
        ""
    };
    conn.query_drop(format!(
        "CREATE DATABASE {db}; CREATE TABLE {db}.events (id BIGINT PRIMARY KEY, user_id INT, \
         name VARCHAR(40), amount DECIMAL(10,2), created DATETIME{payload_column})"
    ))
    .await?;
    let start: String = conn
        .query_first("SELECT @@gtid_binlog_pos")
        .await?
        .context("no GTID position")?;
    let n = rows.n;
    eprintln!("[bench] inserting {n} rows into {db}.events (binlog from GTID {start})");
    let mut text = PayloadText::new();
    let per_statement = (STATEMENT_BYTES / (rows.payload_bytes + 64)).max(1) as u64;
    for first in (0..n).step_by(rows.per_transaction as usize) {
        let end = (first + rows.per_transaction).min(n);
        let transaction = end - first > per_statement;
        if transaction {
            conn.query_drop("BEGIN").await?;
        }
        for from in (first..end).step_by(per_statement as usize) {
            let values: Vec<String> = (from..(from + per_statement).min(end))
                .map(|i| {
                    let payload = match rows.payload_bytes {
                        0 => String::new(),
                        bytes => format!(",'{}'", text.next(bytes)),
                    };
                    format!(
                        "({i},{},'user {i}',{}.{:02},'2026-11-30 12:{:02}:{:02}'{payload})",
                        i % 5000,
                        i % 1000,
                        i % 100,
                        i / 60 % 60,
                        i % 60
                    )
                })
                .collect();
            conn.query_drop(format!(
                "INSERT INTO {db}.events VALUES {}",
                values.join(",")
            ))
            .await?;
        }
        if transaction {
            conn.query_drop("COMMIT").await?;
        }
    }
    Ok(start)
}

/// Random letters and digits (xorshift): text that compresses about as well
/// as real text does not, so wide rows cost the broker their real size.
struct PayloadText(u64);

impl PayloadText {
    fn new() -> Self {
        PayloadText(0x9E37_79B9_7F4A_7C15)
    }

    fn next(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ";
        (0..len)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                ALPHABET[(self.0 % ALPHABET.len() as u64) as usize] as char
            })
            .collect()
    }
}

/// A capture run's times.
pub(crate) struct Streamed {
    /// From start-up to the last event acknowledged.
    pub(crate) whole: Measured,
    /// From the first event seen written (start-up done) to the last acknowledged.
    pub(crate) running: Measured,
    /// The events `running` covers.
    pub(crate) running_rows: u64,
}

impl Streamed {
    /// Rows per second once running.
    pub(crate) fn running_rate(&self) -> f64 {
        self.running_rows as f64 / self.running.wall.as_secs_f64()
    }

    /// CPU microseconds per row once running.
    pub(crate) fn running_cpu_us(&self) -> f64 {
        self.running.cpu_seconds * 1e6 / self.running_rows as f64
    }
}

/// The source database and broker a capture bench runs against.
pub(crate) struct Source {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The database holding `events`.
    pub(crate) db: String,
    pub(crate) brokers: String,
    /// librdkafka producer properties of capture (`kafka.producer`).
    pub(crate) producer: Vec<(String, String)>,
}

impl Source {
    /// A capture named `name` of the database (`start`: the source's `start`
    /// option, with its leading comma, or nothing).
    pub(crate) fn yaml(&self, name: &str, snapshot: &str, start: &str) -> String {
        let mut yaml = capture_yaml(
            &self.host,
            self.port,
            &self.db,
            &self.brokers,
            name,
            snapshot,
            start,
        );
        if !self.producer.is_empty() {
            let properties: Vec<String> = self
                .producer
                .iter()
                .map(|(k, v)| format!("'{k}': '{v}'"))
                .collect();
            yaml = yaml.replace(
                "kafka: { brokers:",
                &format!(
                    "kafka: {{ producer: {{ {} }}, brokers:",
                    properties.join(", ")
                ),
            );
        }
        yaml
    }

    /// Runs capture `server` from GTID `start` until the `n` events of
    /// `events` are acknowledged by the broker.
    pub(crate) async fn stream(
        &self,
        server: &str,
        start: &str,
        n: u64,
        delivery: &str,
    ) -> anyhow::Result<Streamed> {
        eprintln!("[bench] capture: binlog → broker");
        let streaming = CaptureConfig::parse(&format!(
            "{}delivery: {delivery}\n",
            self.yaml(server, "never", &format!(", start: {{ gtid: '{start}' }}")),
        ))?;
        let metrics = CaptureMetrics::register(&mut Registry::default());
        let stop = CancellationToken::new();
        let started = Stopwatch::start()?;
        let capture = tokio::spawn(tributary_capture::run(
            streaming,
            metrics.clone(),
            stop.clone(),
        ));
        let label = tributary_capture::metrics::TableLabel {
            table: format!("{}.events", self.db),
        };
        let events = metrics.events.get_or_create(&label).clone();
        let mut running = None;
        while events.get() < n {
            anyhow::ensure!(!capture.is_finished(), "capture stopped early");
            if running.is_none() && events.get() > 0 {
                running = Some((Stopwatch::start()?, events.get()));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.cancel(); // drains: every event acknowledged
        capture.await??;
        let whole = started.own()?;
        let (running, seen) = match running {
            Some((running, seen)) => (running.own()?, seen),
            None => (whole, 0),
        };
        Ok(Streamed {
            whole,
            running,
            running_rows: n - seen,
        })
    }

    /// Snapshots `events` with a capture named `server` (`initial_only`);
    /// returns its time and CPU time.
    pub(crate) async fn snapshot(&self, server: &str) -> anyhow::Result<Measured> {
        let snapshot = CaptureConfig::parse(&self.yaml(server, "initial_only", ""))?;
        let started = Stopwatch::start()?;
        tributary_capture::run(
            snapshot,
            CaptureMetrics::register(&mut Registry::default()),
            CancellationToken::new(),
        )
        .await?;
        started.own()
    }

    /// The broker's ceiling for the records capture `server` wrote: the first
    /// of them re-sent `n` times over by a plain producer; returns its time and
    /// the records' mean value size.
    pub(crate) async fn ceiling(&self, server: &str, n: u64) -> anyhow::Result<(Measured, usize)> {
        eprintln!("[bench] broker ceiling: the captured records again, from a plain producer");
        let samples =
            sample_records(&self.brokers, &format!("{server}.{}.events", self.db)).await?;
        let size = samples.iter().map(|(_, v)| v.len()).sum::<usize>() / samples.len();
        let ceiling = ceiling_run(&self.brokers, &format!("{server}.ceiling"), n, |i| {
            let (key, value) = &samples[i as usize % samples.len()];
            ((i % 3) as i32, key.clone(), value.clone())
        })
        .await?;
        Ok((ceiling, size))
    }
}

/// A capture of database `db` (`start`: the source's `start` option, with
/// its leading comma, or nothing).
pub(crate) fn capture_yaml(
    host: &str,
    port: u16,
    db: &str,
    brokers: &str,
    name: &str,
    snapshot: &str,
    start: &str,
) -> String {
    format!(
        "server_name: {name}\nsource: {{ host: '{host}', port: {port}, user: tributary, password: tributary, server_id: {}{start} }}\nsnapshot: {{ mode: {snapshot} }}\ninclude: {{ databases: ['{db}'] }}\nkafka: {{ brokers: '{brokers}' }}\n",
        9000 + std::process::id() % 1000,
    )
}

/// Reads the binlog from `gtid` with capture's reader until `rows` row changes
/// are decoded into change events (what capture does before encoding and producing).
async fn decode_only(yaml: &str, gtid: &str, rows: u64) -> anyhow::Result<Measured> {
    let mut reader = open_reader(yaml, gtid).await?;
    let started = Stopwatch::start()?;
    decode_rows(&mut reader, rows).await?;
    let took = started.own()?;
    reader.close().await;
    Ok(took)
}

/// Capture's binlog reader of the capture `yaml` describes, from `gtid`.
pub(crate) async fn open_reader(yaml: &str, gtid: &str) -> anyhow::Result<BinlogReader> {
    let config = CaptureConfig::parse(yaml)?;
    let mut conn = source::connect(&config.source).await?;
    let info = source::preflight(&mut conn).await?;
    drop(conn);
    let from = BinlogPosition {
        file: String::new(),
        pos: 4,
        gtid: Some(gtid.to_owned()),
        ts_ms: 0,
    };
    Ok(BinlogReader::open(ReaderSetup::of(&config, info, Default::default())?, &from).await?)
}

/// `key=value` as a pair.
fn key_value(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not key=value"))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// The reader's next item as capture's read-ahead takes it: what the last
/// event decoded to first, without a read.
async fn next_item(
    reader: &mut BinlogReader,
) -> anyhow::Result<Option<ReaderItem<BinlogPosition>>> {
    match reader.ready() {
        Some(item) => Ok(Some(item)),
        None => Ok(reader.next().await?),
    }
}

/// Reads until `rows` row changes are decoded into change events.
pub(crate) async fn decode_rows(reader: &mut BinlogReader, rows: u64) -> anyhow::Result<()> {
    let mut decoded = 0;
    while decoded < rows {
        match next_item(reader).await? {
            Some(ReaderItem::Change(_)) => decoded += 1,
            Some(_) => {}
            None => anyhow::bail!("the binlog ended after {decoded} of {rows} rows"),
        }
    }
    Ok(())
}

/// Reads until `rows` row changes are decoded, and encodes each as capture
/// writes it with its default options (Debezium JSON key and value, the
/// partition of its key among 3).
pub(crate) async fn encode_rows(reader: &mut BinlogReader, rows: u64) -> anyhow::Result<()> {
    use tributary_proto::debezium_json::{EnvelopeOptions, encode_key, encode_value};
    let options = EnvelopeOptions::default();
    let mut encoded = 0;
    while encoded < rows {
        match next_item(reader).await? {
            Some(ReaderItem::Change(event)) => {
                let key = encode_key(&event, options.doubles);
                let partition = tributary_proto::partition::partition_for_key(&key, 3);
                let value = encode_value(&event, options);
                std::hint::black_box((key, partition, value));
                encoded += 1;
            }
            Some(_) => {}
            None => anyhow::bail!("the binlog ended after {encoded} of {rows} rows"),
        }
    }
    Ok(())
}

/// Decodes the same row events with python-mysql-replication (installed on
/// first use, [`crate::python`]); returns its time and CPU time.
async fn python_mysql_replication(
    host: &str,
    port: u16,
    file: &str,
    pos: u64,
    rows: u64,
) -> anyhow::Result<Measured> {
    let python = crate::python::venv_python("pyrepl", &["mysql-replication==1.0.17"]).await?;
    let script = tempfile::Builder::new().suffix(".py").tempfile()?;
    std::fs::write(script.path(), include_str!("pyrepl_read.py"))?;
    let out = tokio::process::Command::new(&python)
        .arg(script.path())
        .args([
            host,
            &port.to_string(),
            file,
            &pos.to_string(),
            &rows.to_string(),
        ])
        .arg((7000 + std::process::id() % 1000).to_string())
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "python-mysql-replication failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace();
    let decoded: u64 = fields.next().context("no row count")?.parse()?;
    let seconds: f64 = fields.next().context("no time")?.parse()?;
    let cpu_seconds: f64 = fields.next().context("no CPU time")?.parse()?;
    anyhow::ensure!(
        decoded >= rows,
        "python-mysql-replication decoded {decoded} of {rows} rows"
    );
    Ok(Measured {
        wall: Duration::from_secs_f64(seconds),
        cpu_seconds,
        cores: None, // its own times, after its imports
    })
}

/// The current binlog file and position.
async fn binlog_position(conn: &mut mysql_async::Conn) -> anyhow::Result<(String, u64)> {
    let row: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await?
        .context("binary logging is off")?;
    Ok((
        row.get::<String, _>(0).context("no binlog file")?,
        row.get::<u64, _>(1).context("no binlog position")?,
    ))
}
