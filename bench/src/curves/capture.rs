//! The curves of capture (binlog → broker, against row width and against
//! rows per source transaction, beside a plain producer of the same records)
//! and of the snapshot (against table size, beside `mariadb-dump`). Capture's
//! points are taken once it runs (from its first event: its start-up, a few
//! hundred milliseconds, would weigh on small points); the snapshot's include
//! its start, which is part of what a snapshot of a small table costs.

use crate::capture::{Rows, Source, write_events};
use crate::series::{Measured, Stopwatch};

use super::{Bench, PeakRss, Points, Samples, cpu_us, rate};

/// Row widths of `capture-width`, in bytes of row data.
const WIDTHS: [usize; 3] = [100, 1_000, 10_000];
/// Bytes of a row besides its payload (id, user_id, name, amount, created).
const NARROW_ROW_BYTES: usize = 32;
/// Rows per source transaction of `capture-transactions`.
const TRANSACTION_SIZES: [u64; 5] = [1, 10, 100, 1_000, 10_000];

impl Bench {
    /// A fresh database `bench_curve_<run>_<point>` holding `rows`.
    async fn source(&self, point: &str, rows: &Rows) -> anyhow::Result<(Source, String)> {
        let db = self.name("bench_curve_", &format!("_{point}"));
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

    /// The capture server name of a point's run (its topics are new).
    fn server(&self, point: &str, run: u16) -> String {
        self.name("curve", &format!("{point}r{run}"))
    }

    pub(super) async fn capture_width(&self, budget: u64) -> anyhow::Result<Points> {
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
                "peak RSS MiB|Tributary capture",
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
            let mut samples = Samples::new();
            for run in 0..self.runs {
                let server = self.server(&point, run);
                PeakRss::reset()?;
                let captured = source.stream(&server, &start, n, "at_least_once").await?;
                let peak_rss = PeakRss::mib()?;
                let (ceiling, value_bytes) = source.ceiling(&server, n).await?;
                eprintln!("[bench] width {width}: {n} rows, values of ~{value_bytes} bytes");
                let mb_per_s = captured.running_rate() * value_bytes as f64 / 1e6;
                samples.push(vec![
                    Some(captured.running_rate()),
                    Some(rate(n, ceiling.wall)),
                    Some(captured.running_cpu_us()),
                    Some(cpu_us(n, &ceiling)),
                    Some(mb_per_s),
                    Some(peak_rss),
                ]);
            }
            points.push_median(width as f64, &samples);
        }
        Ok(points)
    }

    pub(super) async fn capture_transactions(&self, n: u64) -> anyhow::Result<Points> {
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
                "peak RSS MiB|at_least_once",
                "peak RSS MiB|exactly_once",
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
            let mut samples = Samples::new();
            for run in 0..self.runs {
                let mut streamed = Vec::new();
                for delivery in ["at_least_once", "exactly_once"] {
                    let server = self.server(&format!("{point}{}", &delivery[..1]), run);
                    PeakRss::reset()?;
                    let captured = source.stream(&server, &start, n, delivery).await?;
                    streamed.push((captured, PeakRss::mib()?));
                }
                let [(least, least_rss), (exactly, exactly_rss)] =
                    <[_; 2]>::try_from(streamed).ok().expect("two runs");
                let (ceiling, _) = source
                    .ceiling(&self.server(&format!("{point}a"), run), n)
                    .await?;
                samples.push(vec![
                    Some(least.running_rate()),
                    Some(exactly.running_rate()),
                    Some(rate(n, ceiling.wall)),
                    Some(least.running_cpu_us()),
                    Some(exactly.running_cpu_us()),
                    Some(least_rss),
                    Some(exactly_rss),
                ]);
            }
            points.push_median(per_transaction as f64, &samples);
        }
        Ok(points)
    }

    pub(super) async fn snapshot_size(&self, sizes: &[u64]) -> anyhow::Result<Points> {
        let mut points = Points::new(
            "snapshot-size",
            "Snapshot → broker against table size, beside mariadb-dump",
            "rows in the table",
            &[
                "rows/s|Tributary snapshot → broker",
                "rows/s|mariadb-dump --single-transaction > /dev/null",
                "CPU µs per row|Tributary snapshot → broker",
                "CPU µs per row|mariadb-dump --single-transaction > /dev/null",
                "peak RSS MiB|Tributary snapshot → broker",
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
            let mut samples = Samples::new();
            for run in 0..self.runs {
                PeakRss::reset()?;
                let snapshot = source.snapshot(&self.server(&point, run)).await?;
                let peak_rss = PeakRss::mib()?;
                let dump = self.dump(&source.db).await?;
                samples.push(vec![
                    Some(rate(n, snapshot.wall)),
                    Some(rate(n, dump.wall)),
                    Some(cpu_us(n, &snapshot)),
                    Some(cpu_us(n, &dump)),
                    Some(peak_rss),
                ]);
            }
            points.push_median(n as f64, &samples);
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
