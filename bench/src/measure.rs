//! What a benchmark measures and prints: latency series, CPU seconds, tables.

use std::collections::BTreeMap;
use std::time::Duration;

/// Latencies of one measured series.
pub(crate) struct Series {
    name: String,
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Series {
    pub(crate) fn new(
        name: impl Into<String>,
        mut latencies: Vec<Duration>,
        wall: Duration,
    ) -> Self {
        latencies.sort_unstable();
        Series {
            name: name.into(),
            latencies,
            wall,
        }
    }

    pub(crate) fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies[index]
    }

    pub(crate) fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    pub(crate) fn ops_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

/// CPU seconds this process has used so far, all threads (user + system), from
/// `/proc/self/stat`, whose clock ticks are USER_HZ = 100 on Linux.
pub(crate) fn process_cpu_seconds() -> anyhow::Result<f64> {
    cpu_seconds_of("self")
}

/// CPU seconds process `pid` (or `self`) has used so far, as [`process_cpu_seconds`].
pub(crate) fn cpu_seconds_of(pid: &str) -> anyhow::Result<f64> {
    let (user, kernel) = cpu_split_of(pid)?;
    Ok(user + kernel)
}

/// CPU seconds process `pid` (or `self`) has used so far, all threads: in
/// user space, and in the kernel on its behalf (system calls, the network
/// stack).
pub(crate) fn cpu_split_of(pid: &str) -> anyhow::Result<(f64, f64)> {
    let (_, user, kernel) = read_stat(&format!("/proc/{pid}/stat"))?;
    Ok((user, kernel))
}

/// CPU seconds (user + system) the threads of process `pid` have used so
/// far, summed by the thread's name with any number in it and what follows
/// dropped (`tokio-rt-worker`, `rocksdb:low`, `rdk:broker`); a thread that
/// ended is no longer counted.
pub(crate) fn thread_cpu_of(pid: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut by_name = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok((name, user, kernel)) = read_stat(&format!("{}/stat", task?.path().display()))
        else {
            continue; // it ended meanwhile
        };
        let name = name
            .split(|c: char| c.is_ascii_digit())
            .next()
            .unwrap_or_default()
            .trim_end_matches(['-', '_', '#', ' ']);
        *by_name.entry(name.to_owned()).or_default() += user + kernel;
    }
    Ok(by_name)
}

/// The command name and the CPU seconds in user space and in the kernel of a
/// `stat` file of `/proc` (a process's or a thread's), whose clock ticks are
/// USER_HZ = 100 on Linux.
fn read_stat(path: &str) -> anyhow::Result<(String, f64, f64)> {
    let stat = std::fs::read_to_string(path)?;
    // The command name is in parentheses and may hold spaces.
    let (head, rest) = stat
        .rsplit_once(')')
        .ok_or_else(|| anyhow::anyhow!("{path} has no command name"))?;
    let name = head.split_once('(').map_or("", |(_, name)| name);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow::anyhow!("{path} is too short"))?
            .parse::<f64>()?)
    };
    // utime and stime: fields 14 and 15 of stat(5), 12 and 13 after the name.
    Ok((name.to_owned(), ticks(11)? / 100.0, ticks(12)? / 100.0))
}

/// Prints a Markdown table of `series`, with each one's p50 relative to each
/// of `baselines`' p50s (a column per baseline).
pub(crate) fn print_latency_table(baselines: &[&Series], series: &[&Series]) {
    let mut header = "| lookup | ops/s | p50 µs | p99 µs |".to_owned();
    let mut rule = "|---|---:|---:|---:|".to_owned();
    for baseline in baselines {
        header.push_str(&format!(" p50 vs {} |", baseline.name));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
    for s in series {
        let mut line = format!(
            "| {} | {:.0} | {:.1} | {:.1} |",
            s.name,
            s.ops_per_second(),
            s.p50().as_secs_f64() * 1e6,
            s.quantile(0.99).as_secs_f64() * 1e6,
        );
        for baseline in baselines {
            let ratio = s.p50().as_secs_f64() / baseline.p50().as_secs_f64().max(1e-9);
            line.push_str(&format!(" {ratio:.1}× |"));
        }
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_seconds_count_work_done() {
        let before = process_cpu_seconds().unwrap();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let used = process_cpu_seconds().unwrap() - before;
        // At least some of 200 ms of spinning was on a CPU (ticks are 10 ms).
        assert!((0.01..10.0).contains(&used), "{used} s of CPU");
    }
}
