//! Starting inside a transaction, as a Debezium offset can ask
//! (`source.start_skip`): its `event` and `row` say how many of the first
//! transaction's binlog events the connector had completed (counted from the
//! event that starts it, included: MariaDB's GTID event, MySQL's `BEGIN`), and
//! how many rows of the next rows event it had sent. Capture skips exactly
//! those, once, as Debezium's `BinlogStreamingChangeEventSource` does on
//! restart, so that switching from Debezium mid-transaction repeats nothing.

use serde::Deserialize;

/// `source.start_skip`: Debezium's offset `event` and `row`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartSkip {
    /// The first transaction's events already sent (Debezium's `event`).
    pub events: u64,
    /// Rows of the next rows event already sent (Debezium's `row`).
    #[serde(default)]
    pub rows: u32,
}

/// What happens to a rows event while skipping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsSkip {
    /// Sent before: skipped whole.
    Whole,
    /// Its first rows were sent before (none: all of it is new).
    First(u32),
}

/// Where skipping is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartSkip {
    left: StartSkip,
    started: bool,
}

impl RestartSkip {
    /// Skips `skip` once the first transaction starts.
    pub fn new(skip: StartSkip) -> Self {
        RestartSkip {
            left: skip,
            started: false,
        }
    }

    /// An event that starts a transaction is about to be handled.
    pub fn on_begin(&mut self) {
        self.started = true;
    }

    /// Whether counting has begun.
    pub fn started(&self) -> bool {
        self.started
    }

    /// A rows event is about to be handled: how much of it was sent before.
    /// Once its rows are counted, nothing more is skipped ([`Self::done`]).
    pub fn rows_event(&mut self) -> RowsSkip {
        if self.left.events > 0 {
            RowsSkip::Whole
        } else {
            RowsSkip::First(std::mem::take(&mut self.left.rows))
        }
    }

    /// An event was handled: one fewer to skip.
    pub fn after_event(&mut self) {
        if self.started {
            self.left.events = self.left.events.saturating_sub(1);
        }
    }

    /// Everything there was to skip is skipped.
    pub fn done(&self) -> bool {
        self.started && self.left.events == 0 && self.left.rows == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debezium's rule: the events counted from the transaction's start
    /// (included), each decremented after it is handled; a rows event met
    /// while some remain is skipped whole, the next one loses its first rows.
    #[test]
    fn events_then_rows_are_skipped_once() {
        // GTID, TABLE_MAP, WRITE_ROWS (3 rows), TABLE_MAP, WRITE_ROWS (3 rows):
        // the connector completed the first three events and one row of the next.
        let mut skip = RestartSkip::new(StartSkip { events: 3, rows: 1 });
        assert!(!skip.done());
        skip.on_begin();
        let mut seen = Vec::new();
        for event in ["gtid", "map", "rows", "map", "rows", "xid"] {
            if event == "rows" && !skip.done() {
                seen.push(skip.rows_event());
            }
            skip.after_event();
        }
        assert_eq!(seen, [RowsSkip::Whole, RowsSkip::First(1)]);
        assert!(skip.done());
        // Rows only: the first rows event loses its first rows.
        let mut skip = RestartSkip::new(StartSkip { events: 0, rows: 2 });
        skip.on_begin();
        assert_eq!(skip.rows_event(), RowsSkip::First(2));
        assert!(skip.done());
    }
}
