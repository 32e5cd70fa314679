//! `tributary-bench hiccups`: how long a core stops answering, whatever the
//! server on it does (in the manner of jHiccup). A thread sleeps 1 ms at a
//! time and records by how much each sleep overran: on a core the server
//! leaves mostly idle, an overrun of milliseconds means the core itself was
//! taken (the hypervisor's steal, another process), which every server on it
//! would show in its tail latency.
//!
//! Every tenth tick it also times a fixed piece of work (the speed probe): a
//! core that runs the same instructions slower (the host's other tenants on
//! its sibling thread, a lower clock) shows as a longer probe, so a server's
//! CPU per request can be told apart from the speed of the core it ran on.
//! It prints one JSON line.

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

/// Overruns of 1 ms sleeps, µs, and the speed probe's median time.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Hiccups {
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) max_us: f64,
    /// The median time of [`probe`], µs.
    pub(crate) probe_p50_us: f64,
}

/// Ticks between two runs of the speed probe.
const PROBE_EVERY: usize = 10;

/// Steps of the speed probe (70–80 µs on session 44's machine).
const PROBE_STEPS: u64 = 20_000;

/// A fixed piece of work, timed: [`PROBE_STEPS`] dependent steps of a
/// multiply-xorshift walk over a 16 KiB table (in the core's L1 cache).
fn probe(table: &[u64; 2048]) -> Duration {
    let start = Instant::now();
    let mut x = std::hint::black_box(0x9E37_79B9_7F4A_7C15_u64);
    for _ in 0..PROBE_STEPS {
        x ^= table[(x % 2048) as usize];
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 31;
    }
    std::hint::black_box(x);
    start.elapsed()
}

/// The `q` quantile of sorted `durations`, µs (0 if there are none).
fn quantile_us(durations: &[Duration], q: f64) -> f64 {
    durations
        .get(((durations.len().max(1) - 1) as f64 * q).round() as usize)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

pub(crate) fn run(args: HiccupArgs) -> anyhow::Result<()> {
    let tick = Duration::from_millis(1);
    let from = Instant::now() + Duration::from_secs_f64(args.warmup);
    let to = from + Duration::from_secs_f64(args.seconds);
    let table: [u64; 2048] =
        std::array::from_fn(|i| (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let (mut overruns, mut probes) = (Vec::new(), Vec::new());
    for ticks in 0.. {
        let before = Instant::now();
        if before >= to {
            break;
        }
        std::thread::sleep(tick);
        if before >= from {
            overruns.push(before.elapsed().saturating_sub(tick));
            if ticks % PROBE_EVERY == 0 {
                probes.push(probe(&table));
            }
        }
    }
    overruns.sort_unstable();
    probes.sort_unstable();
    let hiccups = Hiccups {
        p99_us: quantile_us(&overruns, 0.99),
        p999_us: quantile_us(&overruns, 0.999),
        max_us: quantile_us(&overruns, 1.0),
        probe_p50_us: quantile_us(&probes, 0.5),
    };
    println!("{}", serde_json::to_string(&hiccups)?);
    Ok(())
}
