//! `tributary-bench hiccups`: how long a core stops answering, whatever the
//! server on it does (in the manner of jHiccup). A thread sleeps 1 ms at a
//! time and records by how much each sleep overran: on a core the server
//! leaves mostly idle, an overrun of milliseconds means the core itself was
//! taken (the hypervisor's steal, another process), which every server on it
//! would show in its tail latency. It prints one JSON line.

use std::time::{Duration, Instant};

use clap::Args;

/// Arguments of `tributary-bench hiccups`.
#[derive(Args)]
pub(crate) struct HiccupArgs {
    /// Seconds before recording (as the load generator's warm-up).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds recorded.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

/// Overruns of 1 ms sleeps, µs.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Hiccups {
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) max_us: f64,
}

pub(crate) fn run(args: HiccupArgs) -> anyhow::Result<()> {
    let tick = Duration::from_millis(1);
    let from = Instant::now() + Duration::from_secs_f64(args.warmup);
    let to = from + Duration::from_secs_f64(args.seconds);
    let mut overruns = Vec::new();
    loop {
        let before = Instant::now();
        if before >= to {
            break;
        }
        std::thread::sleep(tick);
        if before >= from {
            overruns.push(before.elapsed().saturating_sub(tick));
        }
    }
    overruns.sort_unstable();
    let q = |q: f64| {
        overruns
            .get(((overruns.len().max(1) - 1) as f64 * q).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    let hiccups = Hiccups {
        p99_us: q(0.99),
        p999_us: q(0.999),
        max_us: q(1.0),
    };
    println!("{}", serde_json::to_string(&hiccups)?);
    Ok(())
}
