//! `tributary-bench curves`: how cost grows with the work. Each curve is a
//! series of points measured side by side with its peer, printed as a table,
//! written as CSV and drawn as a PNG (`plot.py`, matplotlib installed on
//! first use, [`crate::python`]) into `--out-dir`. Capture's points are
//! taken once it runs (from its first event: its start-up, a few hundred
//! milliseconds, would weigh on small points); the snapshot's include its
//! start, which is part of what a snapshot of a small table costs.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use crate::capture::{Rows, Source, write_events};
use crate::series::{Measured, Stopwatch};

/// Arguments of `tributary-bench curves`.
#[derive(Args)]
pub(crate) struct CurvesArgs {
    /// Which curves to measure.
    #[arg(long, value_delimiter = ',', default_values = ["capture-width", "capture-transactions", "snapshot-size"])]
    only: Vec<Curve>,
    /// Bytes of row data per point of `capture-width` (rows = this ÷ width, at most 200,000).
    #[arg(long, default_value_t = 200 << 20)]
    width_bytes: u64,
    /// Rows per point of `capture-transactions`.
    #[arg(long, default_value_t = 200_000)]
    transaction_rows: u64,
    /// Table sizes (rows) of `snapshot-size`.
    #[arg(long, value_delimiter = ',', default_values_t = [100_000u64, 300_000, 1_000_000, 3_000_000])]
    snapshot_rows: Vec<u64>,
    /// Where the CSV and PNG files go.
    #[arg(long, default_value = "docs/bench")]
    out_dir: PathBuf,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

/// The curves `curves` can draw.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Curve {
    /// Capture rows/s and CPU per row against row width (100 B, 1 KB, 10 KB).
    CaptureWidth,
    /// Capture rows/s and CPU per row against rows per source transaction, in both delivery modes.
    CaptureTransactions,
    /// Snapshot rows/s against table size, beside `mariadb-dump`.
    SnapshotSize,
}

/// One curve's points: x, then one value per column (`None`: not measured).
struct Points {
    /// File name, without extension.
    name: &'static str,
    title: &'static str,
    x_label: &'static str,
    log_x: bool,
    /// `panel|series`: columns of one panel share its axes.
    columns: Vec<String>,
    rows: Vec<(f64, Vec<Option<f64>>)>,
}

impl Points {
    fn new(
        name: &'static str,
        title: &'static str,
        x_label: &'static str,
        columns: &[&str],
    ) -> Self {
        Points {
            name,
            title,
            x_label,
            log_x: true,
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    fn push(&mut self, x: f64, values: Vec<Option<f64>>) {
        debug_assert_eq!(values.len(), self.columns.len());
        self.rows.push((x, values));
    }

    /// Prints the points as a Markdown table.
    fn print(&self) {
        println!("\n## {}\n", self.title);
        print!("| {} |", self.x_label);
        for column in &self.columns {
            // `rows/s|capture` is headed "capture (rows/s)".
            let (unit, series) = column.split_once('|').unwrap_or(("", column));
            print!(" {series} ({unit}) |");
        }
        println!("\n|---:|{}", "---:|".repeat(self.columns.len()));
        for (x, values) in &self.rows {
            print!("| {x} |");
            for value in values {
                match value {
                    Some(v) if v.abs() >= 100.0 => print!(" {v:.0} |"),
                    Some(v) => print!(" {v:.2} |"),
                    None => print!(" — |"),
                }
            }
            println!();
        }
    }

    /// Writes `<name>.csv` and draws `<name>.png` in `dir`.
    async fn draw(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let csv = dir.join(format!("{}.csv", self.name));
        // Names hold commas: every header cell is quoted.
        let quoted = |cell: &str| format!("\"{}\"", cell.replace('"', "\"\""));
        let header: Vec<String> = std::iter::once(self.x_label)
            .chain(self.columns.iter().map(String::as_str))
            .map(quoted)
            .collect();
        let mut text = format!("{}\n", header.join(","));
        for (x, values) in &self.rows {
            text.push_str(&x.to_string());
            for value in values {
                text.push(',');
                if let Some(v) = value {
                    text.push_str(&v.to_string());
                }
            }
            text.push('\n');
        }
        std::fs::write(&csv, text)?;
        let png = dir.join(format!("{}.png", self.name));
        let python = crate::python::venv_python("plot", &["matplotlib==3.9.2"]).await?;
        let script = tempfile::Builder::new().suffix(".py").tempfile()?;
        std::fs::write(script.path(), include_str!("plot.py"))?;
        let mut command = tokio::process::Command::new(python);
        command
            .arg(script.path())
            .arg(&csv)
            .arg(&png)
            .args([self.title, self.x_label]);
        if self.log_x {
            command.arg("--log-x");
        }
        let status = command.status().await?;
        anyhow::ensure!(status.success(), "plot.py failed for {}", csv.display());
        eprintln!("[bench] drew {}", png.display());
        Ok(())
    }
}

pub(crate) async fn run(args: CurvesArgs) -> anyhow::Result<()> {
    let opts = mysql_async::Opts::from_url(&args.stack.mysql_url)?;
    let bench = Bench {
        host: opts.ip_or_hostname().to_owned(),
        port: opts.tcp_port(),
        opts,
        brokers: args.stack.brokers.clone(),
        run: std::process::id(),
    };
    for curve in &args.only {
        let points = match curve {
            Curve::CaptureWidth => bench.capture_width(args.width_bytes).await?,
            Curve::CaptureTransactions => bench.capture_transactions(args.transaction_rows).await?,
            Curve::SnapshotSize => bench.snapshot_size(&args.snapshot_rows).await?,
        };
        points.print();
        points.draw(&args.out_dir).await?;
    }
    Ok(())
}

/// Where the curves are measured; `run` keeps this run's names apart.
struct Bench {
    host: String,
    port: u16,
    opts: mysql_async::Opts,
    brokers: String,
    run: u32,
}

/// Row widths of `capture-width`, in bytes of row data.
const WIDTHS: [usize; 3] = [100, 1_000, 10_000];
/// Bytes of a row besides its payload (id, user_id, name, amount, created).
const NARROW_ROW_BYTES: usize = 32;
/// Rows per source transaction of `capture-transactions`.
const TRANSACTION_SIZES: [u64; 5] = [1, 10, 100, 1_000, 10_000];

impl Bench {
    /// A fresh database `bench_curve_<run>_<point>` holding `rows`.
    async fn source(&self, point: &str, rows: &Rows) -> anyhow::Result<(Source, String)> {
        let db = format!("bench_curve_{}_{point}", self.run);
        let mut conn = mysql_async::Conn::new(self.opts.clone()).await?;
        let start = write_events(&mut conn, &db, rows).await?;
        conn.disconnect().await?;
        let source = Source {
            host: self.host.clone(),
            port: self.port,
            db,
            brokers: self.brokers.clone(),
            producer: Vec::new(),
        };
        Ok((source, start))
    }

    fn server(&self, point: &str) -> String {
        format!("curve{}{point}", self.run)
    }

    async fn capture_width(&self, budget: u64) -> anyhow::Result<Points> {
        let mut points = Points::new(
            "capture-width",
            "Capture, binlog → broker, against row width",
            "row width (bytes)",
            &[
                "rows/s|Tributary capture, once running",
                "rows/s|plain producer, the same records",
                "CPU µs per row|Tributary capture, once running",
                "CPU µs per row|plain producer, the same records",
                "MB/s of values|Tributary capture, once running",
            ],
        );
        for width in WIDTHS {
            let n = (budget / width as u64).min(200_000);
            let point = format!("w{width}");
            let rows = Rows {
                n,
                per_transaction: 1_000,
                payload_bytes: width - NARROW_ROW_BYTES,
            };
            let (source, start) = self.source(&point, &rows).await?;
            let server = self.server(&point);
            let captured = source.stream(&server, &start, n, "at_least_once").await?;
            let (ceiling, value_bytes) = source.ceiling(&server, n).await?;
            eprintln!("[bench] width {width}: {n} rows, values of ~{value_bytes} bytes");
            let mb_per_s = captured.running_rate() * value_bytes as f64 / 1e6;
            points.push(
                width as f64,
                vec![
                    Some(captured.running_rate()),
                    Some(rate(n, ceiling.wall)),
                    Some(captured.running_cpu_us()),
                    Some(cpu_us(n, &ceiling)),
                    Some(mb_per_s),
                ],
            );
        }
        Ok(points)
    }

    async fn capture_transactions(&self, n: u64) -> anyhow::Result<Points> {
        let mut points = Points::new(
            "capture-transactions",
            "Capture, binlog → broker, against rows per source transaction",
            "rows per transaction",
            &[
                "rows/s|at_least_once",
                "rows/s|exactly_once",
                "rows/s|plain producer, the same records",
                "CPU µs per row|at_least_once",
                "CPU µs per row|exactly_once",
            ],
        );
        for per_transaction in TRANSACTION_SIZES {
            let point = format!("t{per_transaction}");
            let rows = Rows {
                n,
                per_transaction,
                payload_bytes: 0,
            };
            let (source, start) = self.source(&point, &rows).await?;
            let mut runs = Vec::new();
            for delivery in ["at_least_once", "exactly_once"] {
                let server = self.server(&format!("{point}{}", &delivery[..1]));
                runs.push(source.stream(&server, &start, n, delivery).await?);
            }
            let [least, exactly] = <[_; 2]>::try_from(runs).ok().expect("two runs");
            let (ceiling, _) = source
                .ceiling(&self.server(&format!("{point}a")), n)
                .await?;
            points.push(
                per_transaction as f64,
                vec![
                    Some(least.running_rate()),
                    Some(exactly.running_rate()),
                    Some(rate(n, ceiling.wall)),
                    Some(least.running_cpu_us()),
                    Some(exactly.running_cpu_us()),
                ],
            );
        }
        Ok(points)
    }

    async fn snapshot_size(&self, sizes: &[u64]) -> anyhow::Result<Points> {
        let mut points = Points::new(
            "snapshot-size",
            "Snapshot → broker against table size, beside mariadb-dump",
            "rows in the table",
            &[
                "rows/s|Tributary snapshot → broker",
                "rows/s|mariadb-dump --single-transaction > /dev/null",
                "CPU µs per row|Tributary snapshot → broker",
                "CPU µs per row|mariadb-dump --single-transaction > /dev/null",
            ],
        );
        for &n in sizes {
            let point = format!("s{n}");
            let rows = Rows {
                n,
                per_transaction: 10_000,
                payload_bytes: 0,
            };
            let (source, _) = self.source(&point, &rows).await?;
            let snapshot = source.snapshot(&self.server(&point)).await?;
            let dump = self.dump(&source.db).await?;
            points.push(
                n as f64,
                vec![
                    Some(rate(n, snapshot.wall)),
                    Some(rate(n, dump.wall)),
                    Some(cpu_us(n, &snapshot)),
                    Some(cpu_us(n, &dump)),
                ],
            );
        }
        Ok(points)
    }

    /// `mariadb-dump` of `db.events` to /dev/null: the peer of a snapshot.
    async fn dump(&self, db: &str) -> anyhow::Result<Measured> {
        eprintln!("[bench] mariadb-dump of {db}.events");
        let started = Stopwatch::start()?;
        let status = tokio::process::Command::new("mariadb-dump")
            .args([
                format!("--host={}", self.host),
                format!("--port={}", self.port),
                "--user=root".to_owned(),
                "--single-transaction".to_owned(),
                "--quick".to_owned(),
                db.to_owned(),
                "events".to_owned(),
            ])
            .stdout(std::process::Stdio::null())
            .status()
            .await?;
        let took = started.children()?;
        anyhow::ensure!(status.success(), "mariadb-dump failed: {status}");
        Ok(took)
    }
}

fn rate(n: u64, wall: std::time::Duration) -> f64 {
    n as f64 / wall.as_secs_f64()
}

fn cpu_us(n: u64, measured: &Measured) -> f64 {
    measured.cpu_seconds * 1e6 / n as f64
}
