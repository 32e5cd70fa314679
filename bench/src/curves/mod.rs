//! `tributary-bench curves`: how cost grows with the work. Each curve is a
//! series of points measured side by side with its peer, printed as a table,
//! written as CSV and drawn as a PNG (`plot.py`, matplotlib installed on
//! first use, [`crate::python`]) into `--out-dir`. Each point is measured
//! `--runs` times and its median drawn ([`Samples`]). The curves of capture
//! and the snapshot are in [`capture`], of local tables against their size in
//! [`table_size`], of enrichment in [`enrichment`]; the resident memory of the
//! long-running command each measures is read with [`PeakRss`].

mod capture;
mod enrichment;
mod table_size;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use crate::series::Measured;

/// Arguments of `tributary-bench curves`.
#[derive(Args)]
pub(crate) struct CurvesArgs {
    /// Which curves to measure.
    #[arg(long, value_delimiter = ',', default_values = [
        "capture-width", "capture-transactions", "snapshot-size",
        "table-size", "enrich-joins", "enrich-hit-ratio",
    ])]
    only: Vec<Curve>,
    /// Runs of each point; the median is drawn.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    runs: u16,
    /// Bytes of row data per point of `capture-width` (rows = this ÷ width, at most 200,000).
    #[arg(long, default_value_t = 200 << 20)]
    width_bytes: u64,
    /// Rows per point of `capture-transactions`.
    #[arg(long, default_value_t = 200_000)]
    transaction_rows: u64,
    /// Table sizes (rows) of `snapshot-size`.
    #[arg(long, value_delimiter = ',', default_values_t = [100_000u64, 300_000, 1_000_000, 3_000_000])]
    snapshot_rows: Vec<u64>,
    /// Table sizes (rows) of `table-size` (add 1000000000 for a table larger
    /// than this machine's memory: ~30 GiB of files, ~15 min to load).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000_000u64, 10_000_000, 100_000_000])]
    table_rows: Vec<u64>,
    /// Largest table of `table-size` also loaded into MariaDB, its peer
    /// (loading is a few minutes per 10M rows).
    #[arg(long, default_value_t = 10_000_000)]
    table_peer_rows: u64,
    /// Events per run of `enrich-joins` and `enrich-hit-ratio`.
    #[arg(long, default_value_t = 300_000)]
    enrich_events: u64,
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
    /// Local get p50/p99 and RocksDB memory against table size, beside MariaDB.
    TableSize,
    /// Enrichment events/s against the number of joins, beside the raw copy.
    EnrichJoins,
    /// Enrichment events/s against the remote table's cache hit ratio.
    EnrichHitRatio,
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

    /// Draws x on a linear axis (the default is logarithmic).
    fn linear_x(mut self) -> Self {
        self.log_x = false;
        self
    }

    /// Adds the point at `x`: the median of its runs, each of which is
    /// shown on stderr (how far the runs were apart).
    fn push_median(&mut self, x: f64, samples: &Samples) {
        for (run, values) in samples.0.iter().enumerate() {
            let shown: Vec<String> = values
                .iter()
                .map(|v| v.map_or("—".to_owned(), |v| format!("{v:.2}")))
                .collect();
            eprintln!(
                "[bench] {} at {x}, run {}: {}",
                self.name,
                run + 1,
                shown.join(" | ")
            );
        }
        let values = samples.median();
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
            // A measured x (a hit ratio) is shown as a value is.
            match x.fract() {
                0.0 => print!("| {x} |"),
                _ => print!("| {x:.2} |"),
            }
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
        mysql_url: args.stack.mysql_url.clone(),
        brokers: args.stack.brokers.clone(),
        run: std::process::id(),
        runs: args.runs,
    };
    for curve in &args.only {
        let points = match curve {
            Curve::CaptureWidth => bench.capture_width(args.width_bytes).await?,
            Curve::CaptureTransactions => bench.capture_transactions(args.transaction_rows).await?,
            Curve::SnapshotSize => bench.snapshot_size(&args.snapshot_rows).await?,
            Curve::TableSize => {
                bench
                    .table_size(&args.table_rows, args.table_peer_rows)
                    .await?
            }
            Curve::EnrichJoins => bench.enrich_joins(args.enrich_events).await?,
            Curve::EnrichHitRatio => bench.enrich_hit_ratio(args.enrich_events).await?,
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
    mysql_url: String,
    brokers: String,
    run: u32,
    /// Runs of each point.
    runs: u16,
}

impl Bench {
    /// A name of this run's point (a database, a server, a topic).
    fn name(&self, prefix: &str, point: &str) -> String {
        format!("{prefix}{}{point}", self.run)
    }
}

/// The runs of one point: a value per column per run, drawn as each
/// column's median (of the runs that measured it).
struct Samples(Vec<Vec<Option<f64>>>);

impl Samples {
    fn new() -> Self {
        Samples(Vec::new())
    }

    fn push(&mut self, values: Vec<Option<f64>>) {
        self.0.push(values);
    }

    fn median(&self) -> Vec<Option<f64>> {
        let columns = self.0.first().map_or(0, Vec::len);
        (0..columns)
            .map(|c| {
                let mut values: Vec<f64> = self.0.iter().filter_map(|run| run[c]).collect();
                values.sort_by(f64::total_cmp);
                match values.len() {
                    0 => None,
                    n if n % 2 == 1 => Some(values[n / 2]),
                    n => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
                }
            })
            .collect()
    }
}

/// The peak resident memory of this process since the last [`PeakRss::reset`]
/// (Linux's `VmHWM`, reset through `/proc/self/clear_refs`): what a
/// long-running command measured in this process holds at its most.
struct PeakRss;

impl PeakRss {
    /// Resets the peak to the memory resident now, which it shows on stderr
    /// (the part of the next peak that was there before).
    fn reset() -> anyhow::Result<()> {
        std::fs::write("/proc/self/clear_refs", "5").context("resetting the peak RSS")?;
        eprintln!(
            "[bench] resident before the next run: {:.0} MiB",
            Self::mib()?
        );
        Ok(())
    }

    /// The peak since the last reset, in MiB.
    fn mib() -> anyhow::Result<f64> {
        let status = std::fs::read_to_string("/proc/self/status")?;
        let kib: f64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .context("no VmHWM in /proc/self/status")?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()?;
        Ok(kib / 1024.0)
    }
}

fn rate(n: u64, wall: std::time::Duration) -> f64 {
    n as f64 / wall.as_secs_f64()
}

fn cpu_us(n: u64, measured: &Measured) -> f64 {
    measured.cpu_seconds * 1e6 / n as f64
}

#[cfg(test)]
mod tests {
    use super::Samples;

    #[test]
    fn a_point_is_the_median_of_the_runs_that_measured_it() {
        let mut samples = Samples::new();
        samples.push(vec![Some(3.0), Some(1.0), None, None]);
        samples.push(vec![Some(1.0), Some(4.0), Some(5.0), None]);
        samples.push(vec![Some(2.0), Some(2.0), Some(7.0), None]);
        assert_eq!(samples.median(), [Some(2.0), Some(2.0), Some(6.0), None]);
    }
}
