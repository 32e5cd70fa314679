//! Progress of one table's snapshot: a bar redrawn in place when stderr is a
//! terminal, a log line every few seconds otherwise; both with the server's row
//! estimate, the share done and the rate.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use tracing::info;

/// Width of the bar, in characters.
const BAR: u64 = 30;

/// Reports how far a table's snapshot has got.
pub(crate) struct SnapshotProgress {
    table: String,
    estimate: u64,
    started: Instant,
    last: Instant,
    terminal: bool,
}

impl SnapshotProgress {
    /// Progress of `table`, whose server estimate is `estimate` rows.
    pub(crate) fn new(table: &str, estimate: u64) -> Self {
        SnapshotProgress {
            table: table.to_owned(),
            estimate,
            started: Instant::now(),
            last: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// `done` rows have been read.
    pub(crate) fn update(&mut self, done: u64) {
        let every = if self.terminal {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(5)
        };
        if self.last.elapsed() < every {
            return;
        }
        self.last = Instant::now();
        if self.terminal {
            eprint!("\r{}", self.line(done));
        } else {
            info!(table = %self.table, rows = done, estimate = self.estimate, percent = self.percent(done), rows_per_s = self.rate(done) as u64, "snapshot progress");
        }
    }

    /// The table is done.
    pub(crate) fn finish(&self, done: u64) {
        if self.terminal {
            eprintln!("\r{}", self.line(done));
        }
        info!(table = %self.table, rows = done, seconds = self.started.elapsed().as_secs_f64(), "table snapshot done");
    }

    fn percent(&self, done: u64) -> u64 {
        // The estimate is InnoDB's guess: never show more than 100%.
        (done * 100 / self.estimate.max(1)).min(100)
    }

    fn rate(&self, done: u64) -> f64 {
        done as f64 / self.started.elapsed().as_secs_f64().max(1e-3)
    }

    fn line(&self, done: u64) -> String {
        let filled = (done * BAR / self.estimate.max(1)).min(BAR) as usize;
        format!(
            "snapshot {} [{}{}] {:>3}% {done}/~{} rows, {:.0} rows/s",
            self.table,
            "#".repeat(filled),
            ".".repeat(BAR as usize - filled),
            self.percent(done),
            self.estimate,
            self.rate(done)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_shows_the_share_done_and_never_overflows() {
        let p = SnapshotProgress::new("shop.users", 200);
        let half = p.line(100);
        assert!(
            half.starts_with(
                "snapshot shop.users [###############...............]  50% 100/~200 rows, "
            ),
            "{half}"
        );
        let over = p.line(260); // the estimate was low
        assert!(
            over.contains(&format!("[{}] 100% 260/~200", "#".repeat(30))),
            "{over}"
        );
        assert!(SnapshotProgress::new("t", 0).line(0).contains("  0% 0/~0"));
    }
}
