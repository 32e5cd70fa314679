//! Why an event produces no output: the outcome a job counts, by reason.

/// Why an event produces no output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// A delete (or tombstone) in a change stream.
    Deleted,
    /// An inner join with `on_miss: drop` found no row.
    Missed,
    /// The job's `filter` (a SQL job's `WHERE`) did not hold.
    Filtered,
}

impl Skip {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Skip::Deleted => "deleted",
            Skip::Missed => "missed",
            Skip::Filtered => "filtered",
        }
    }
}
