//! Timing a benchmark series (wall clock, CPU seconds and where the machine's
//! cores went, [`Stopwatch`]),
//! the broker's produce ceiling for a load ([`ceiling_run`], [`sample_records`]),
//! and the rows/s table the capture benchmarks print side by side.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use tributary_kafka::KafkaConfig;

use crate::cores::{self, CoreMeter, Cores};
use crate::stack::{create_topic, produce};

/// Produces `n` records to a new 3-partition topic with a plain producer; its time.
pub(crate) async fn ceiling_run(
    brokers: &str,
    topic: &str,
    n: u64,
    record: impl Fn(u64) -> (i32, String, String),
) -> anyhow::Result<Measured> {
    create_topic(brokers, topic, 3).await?;
    let started = Stopwatch::start()?;
    produce(brokers, topic, n, record).await?;
    started.own()
}

/// How long a series took, on the clock and in CPU time, and where the
/// machine's cores went meanwhile (when it was measured here).
#[derive(Clone, Copy)]
pub(crate) struct Measured {
    pub(crate) wall: Duration,
    pub(crate) cpu_seconds: f64,
    pub(crate) cores: Option<Cores>,
}

/// Starts timing a series: the clock and the CPU time used so far.
pub(crate) struct Stopwatch {
    started: Instant,
    cpu: CpuTimes,
    cores: CoreMeter,
}

impl Stopwatch {
    pub(crate) fn start() -> anyhow::Result<Self> {
        Ok(Stopwatch {
            started: Instant::now(),
            cpu: CpuTimes::now()?,
            cores: CoreMeter::start()?,
        })
    }

    /// The series ran in this process.
    pub(crate) fn own(&self) -> anyhow::Result<Measured> {
        self.measured(CpuTimes::now()?.own - self.cpu.own)
    }

    /// The series ran in a child process, waited for since the start.
    pub(crate) fn children(&self) -> anyhow::Result<Measured> {
        self.measured(CpuTimes::now()?.children - self.cpu.children)
    }

    /// The series, its process having used `cpu_seconds`.
    fn measured(&self, cpu_seconds: f64) -> anyhow::Result<Measured> {
        Ok(Measured {
            wall: self.started.elapsed(),
            cpu_seconds,
            cores: Some(self.cores.stop(cpu_seconds)?),
        })
    }
}

/// User + system CPU seconds of this process and of its waited-for children.
#[derive(Clone, Copy)]
struct CpuTimes {
    own: f64,
    children: f64,
}

impl CpuTimes {
    /// Reads `/proc/self/stat` (fields 14–17: utime, stime, cutime, cstime, in
    /// clock ticks of 1/100 s, Linux's USER_HZ).
    fn now() -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat")?;
        let after_name = stat
            .rsplit_once(')')
            .context("malformed /proc/self/stat")?
            .1;
        let ticks = after_name
            .split_whitespace()
            .skip(11)
            .take(4)
            .map(str::parse::<u64>)
            .collect::<Result<Vec<_>, _>>()?;
        anyhow::ensure!(ticks.len() == 4, "/proc/self/stat has too few fields");
        let seconds = |a: u64, b: u64| (a + b) as f64 / 100.0;
        Ok(CpuTimes {
            own: seconds(ticks[0], ticks[1]),
            children: seconds(ticks[2], ticks[3]),
        })
    }
}

/// Up to 10,000 records of `topic` (keys and values as text), to re-send as the
/// broker ceiling's load.
pub(crate) async fn sample_records(
    brokers: &str,
    topic: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    use rdkafka::consumer::Consumer;
    use rdkafka::{Message, Offset, TopicPartitionList};
    use tributary_kafka::BaseConsumer;
    const SAMPLES: usize = 10_000;
    let consumer: BaseConsumer = KafkaConfig::plaintext(brokers)
        .consumer("bench", &format!("{topic}.sample"))
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let text =
            |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned();
        let mut samples = Vec::with_capacity(SAMPLES);
        let deadline = Instant::now() + Duration::from_secs(30);
        while samples.len() < SAMPLES && Instant::now() < deadline {
            if let Some(Ok(msg)) = consumer.poll(Duration::from_millis(200)) {
                samples.push((text(msg.key()), text(msg.payload())));
            }
        }
        anyhow::ensure!(!samples.is_empty(), "no record in {topic}");
        Ok(samples)
    })
    .await?
}

/// Prints the rows/s of each series for `n` rows, and each against the
/// broker's `ceiling`; a series that failed is shown with its error.
pub(crate) fn print_rows_table(
    n: u64,
    ceiling: &Measured,
    series: Vec<(&str, anyhow::Result<Measured>)>,
) {
    let rate = |seconds: f64| n as f64 / seconds;
    println!(
        "| pipeline | seconds | rows/s | vs broker ceiling | CPU seconds | rows per CPU-second |\n|---|---:|---:|---:|---:|---:|"
    );
    for (name, d) in &series {
        let d = match d {
            Ok(d) => d,
            Err(e) => {
                let reason = format!("{e:#}");
                let last = reason.lines().last().unwrap_or_default();
                println!("| {name} | failed: {last} | | | | |");
                continue;
            }
        };
        let wall = d.wall.as_secs_f64();
        println!(
            "| {name} | {wall:.2} | {:.0} | {:.2}× | {:.2} | {:.0} |",
            rate(wall),
            rate(wall) / rate(ceiling.wall.as_secs_f64()),
            d.cpu_seconds,
            rate(d.cpu_seconds)
        );
    }
    print_cores_table(
        n,
        series.iter().filter_map(|(name, d)| {
            let d = d.as_ref().ok()?;
            Some((*name, d.wall.as_secs_f64(), d.cores?))
        }),
    );
}

/// Prints where the machine's cores went during each series (in cores: CPU
/// seconds per second of the series), each having taken its seconds for
/// `items` items, and what its stack spent per item, against the first
/// series (the ceiling or the raw copy it is compared with).
pub(crate) fn print_cores_table<'a>(
    items: u64,
    series: impl IntoIterator<Item = (&'a str, f64, Cores)>,
) {
    println!(
        "\nWhere the cores went during each series (CPU seconds per second; `other`: every \
         other process and the kernel's own work); `stack µs/item`: CPU the measured process, \
         the broker and MariaDB spent per item; `× the first, CPU-bound`: the first row's \
         stack µs/item ÷ this row's, the ratio of the two rates on a machine where neither \
         left a core idle:\n\n| pipeline | {} | stack µs/item | × the first, CPU-bound |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|",
        cores::HEADER
    );
    let mut first = None;
    for (name, seconds, cores) in series {
        let per_item = cores.stack_us_per_item(seconds, items);
        let first = *first.get_or_insert(per_item);
        println!(
            "| {name} | {} | {per_item:.2} | {:.2}× |",
            cores.cells(),
            first / per_item
        );
    }
}
