//! Where the machine's cores went while a series ran: the process measured,
//! the stack's broker (Tansu) and database (MariaDB), everything else, the
//! hypervisor's steal, and idle; from `/proc/stat` and each server's
//! `/proc/<pid>/stat`.
//!
//! On two cores a broker-bound series shares them with the broker and the
//! database it reads, so how close it comes to the broker's ceiling depends
//! on what those took and on whether any core stayed idle: this says which.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::measure::cpu_seconds_of;

/// CPU seconds used so far: by the whole machine and by the stack's servers.
#[derive(Clone, Copy, Debug)]
struct Reading {
    busy: f64,
    steal: f64,
    idle: f64,
    broker: Option<f64>,
    database: Option<f64>,
}

/// A reading at the start of a series.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoreMeter {
    started: Instant,
    at_start: Reading,
}

/// What each part used over a series, in cores (CPU seconds per second).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Cores {
    /// The process the series measured (this one, or a child).
    pub(crate) measured: f64,
    /// The broker, if its process was found.
    pub(crate) broker: Option<f64>,
    /// The database server, if its process was found.
    pub(crate) database: Option<f64>,
    /// Every other process, and the kernel's work for none.
    pub(crate) other: f64,
    /// Taken by the hypervisor from this machine.
    pub(crate) steal: f64,
    /// Left unused.
    pub(crate) idle: f64,
}

impl CoreMeter {
    /// Reads the counters now.
    pub(crate) fn start() -> anyhow::Result<Self> {
        Ok(CoreMeter {
            started: Instant::now(),
            at_start: read()?,
        })
    }

    /// What each part used since the start, the measured process having used
    /// `measured_cpu` seconds of it.
    pub(crate) fn stop(&self, measured_cpu: f64) -> anyhow::Result<Cores> {
        let now = read()?;
        Ok(shares(
            &self.at_start,
            &now,
            measured_cpu,
            self.started.elapsed().as_secs_f64(),
        ))
    }
}

impl Cores {
    /// The columns of [`HEADER`].
    pub(crate) fn cells(&self) -> String {
        let cell = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{v:.2}"));
        format!(
            "{} | {} | {} | {:.2} | {:.2} | {:.2}",
            cell(Some(self.measured)),
            cell(self.broker),
            cell(self.database),
            self.other,
            self.steal,
            self.idle
        )
    }

    /// CPU µs per item that the series' own stack (the measured process, the
    /// broker and the database) spent, over `seconds` for `items` items: what
    /// the series would cost per item where it used every core.
    pub(crate) fn stack_us_per_item(&self, seconds: f64, items: u64) -> f64 {
        let stack = self.measured + self.broker.unwrap_or(0.0) + self.database.unwrap_or(0.0);
        stack * seconds / items.max(1) as f64 * 1e6
    }
}

/// The column names [`Cores::cells`] fills.
pub(crate) const HEADER: &str =
    "measured process | broker (Tansu) | MariaDB | other | steal | idle";

/// The shares between two readings `wall` seconds apart.
fn shares(before: &Reading, after: &Reading, measured: f64, wall: f64) -> Cores {
    let per_second = |seconds: f64| (seconds / wall.max(1e-9)).max(0.0);
    let delta = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
    let broker = delta(before.broker, after.broker);
    let database = delta(before.database, after.database);
    let busy = after.busy - before.busy;
    let other = busy - measured - broker.unwrap_or(0.0) - database.unwrap_or(0.0);
    Cores {
        measured: per_second(measured),
        broker: broker.map(per_second),
        database: database.map(per_second),
        other: per_second(other),
        steal: per_second(after.steal - before.steal),
        idle: per_second(after.idle - before.idle),
    }
}

/// The machine's counters and the stack's servers' CPU time now.
fn read() -> anyhow::Result<Reading> {
    let (busy, steal, idle) = machine(&std::fs::read_to_string("/proc/stat")?)?;
    let stack = stack_dir();
    let server = |pid_file: &str| {
        let pid = std::fs::read_to_string(stack.join(pid_file)).ok()?;
        cpu_seconds_of(pid.trim()).ok()
    };
    Ok(Reading {
        busy,
        steal,
        idle,
        broker: server("tansu/tansu.pid"),
        database: server("mariadb/mysqld.pid"),
    })
}

/// Where `deploy/local/up.sh` keeps the stack's files (and pid files).
fn stack_dir() -> PathBuf {
    std::env::var_os("TRIBUTARY_STACK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.stack"))
}

/// Seconds all cores spent busy (user, nice, system, irq, softirq), stolen
/// and idle (idle, iowait), from the `cpu` line of `/proc/stat` (in ticks of
/// 1/100 s, Linux's USER_HZ).
fn machine(stat: &str) -> anyhow::Result<(f64, f64, f64)> {
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| anyhow::anyhow!("/proc/stat has no cpu line"))?;
    let ticks = line
        .split_whitespace()
        .skip(1)
        .map(str::parse::<u64>)
        .collect::<Result<Vec<_>, _>>()?;
    anyhow::ensure!(ticks.len() >= 8, "/proc/stat's cpu line is too short");
    let seconds = |indexes: &[usize]| indexes.iter().map(|&i| ticks[i]).sum::<u64>() as f64 / 100.0;
    // user nice system idle iowait irq softirq steal (guest time is in user)
    Ok((seconds(&[0, 1, 2, 5, 6]), seconds(&[7]), seconds(&[3, 4])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_line_splits_into_busy_steal_and_idle() {
        let stat = "cpu  100 20 30 400 50 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(machine(stat).unwrap(), (1.63, 0.08, 4.5));
        assert!(machine("intr 1 2 3\n").is_err());
    }

    #[test]
    fn what_the_named_processes_did_not_use_is_other() {
        let before = Reading {
            busy: 10.0,
            steal: 1.0,
            idle: 5.0,
            broker: Some(2.0),
            database: None,
        };
        let after = Reading {
            busy: 13.0,
            steal: 1.2,
            idle: 5.8,
            broker: Some(3.0),
            database: None,
        };
        let cores = shares(&before, &after, 1.5, 2.0);
        assert_eq!(cores.measured, 0.75);
        assert_eq!(cores.broker, Some(0.5));
        assert_eq!(cores.database, None);
        assert!((cores.other - 0.25).abs() < 1e-9, "{cores:?}");
        assert!((cores.steal - 0.1).abs() < 1e-9 && (cores.idle - 0.4).abs() < 1e-9);
        assert_eq!(cores.cells(), "0.75 | 0.50 | — | 0.25 | 0.10 | 0.40");
        // 1.25 cores of the stack for 2 s over 1,000 items: 2,500 µs each.
        assert!((cores.stack_us_per_item(2.0, 1000) - 2500.0).abs() < 1e-6);
    }

    #[test]
    fn this_machine_is_read() {
        let meter = CoreMeter::start().unwrap();
        let cores = meter.stop(0.0).unwrap();
        assert!(cores.idle >= 0.0 && cores.other >= 0.0);
    }
}
