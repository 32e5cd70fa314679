//! `tributary bench …`: benchmarks that print a table, comparing alternatives
//! side by side in one run (ratios, since shared machines are noisy).

mod delay_proxy;
mod redis;
pub(crate) mod tables;

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

    fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies[index]
    }

    pub(crate) fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    fn ops_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

/// Prints a Markdown table of `series`, with each one's p50 relative to `baseline`'s.
pub(crate) fn print_latency_table(baseline: &Series, series: &[&Series]) {
    println!(
        "| lookup | ops/s | p50 µs | p99 µs | p50 vs {} |",
        baseline.name
    );
    println!("|---|---:|---:|---:|---:|");
    for s in series {
        let ratio = s.p50().as_secs_f64() / baseline.p50().as_secs_f64().max(1e-9);
        println!(
            "| {} | {:.0} | {:.1} | {:.1} | {:.1}× |",
            s.name,
            s.ops_per_second(),
            s.p50().as_secs_f64() * 1e6,
            s.quantile(0.99).as_secs_f64() * 1e6,
            ratio
        );
    }
}
