//! [`HeldPartitions`]: the seam between jobs and the partitioned local tables
//! they join. A job tells the tables which input partitions its consumer
//! group gave it (co-partitioned tables then hold exactly those), and an event
//! waits until the table partitions it reads have caught up.
//! [`MemoryPartitions`] stands in for the tables in tests of jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// The table partitions an instance holds, as jobs see them.
pub trait HeldPartitions: Send + Sync {
    /// `owner` (a job) now owns exactly these input `partitions` of the `of`
    /// its input has, replacing what it owned before; co-partitioned tables
    /// hold the union of owners', and shared rate limits give this process a
    /// part by the share of input it holds.
    fn follow(&self, owner: &str, partitions: BTreeSet<i32>, of: u32);

    /// Whether `table`'s `partition` is held here and has caught up.
    fn is_ready(&self, table: &str, partition: i32) -> bool;

    /// Whether all `partitions` partitions of `table` are held here and have
    /// caught up (a global table).
    fn all_ready(&self, table: &str, partitions: u32) -> bool;
}

/// Held partitions in memory: readiness is set by the test, and what owners
/// follow is recorded.
#[derive(Debug, Default)]
pub struct MemoryPartitions {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    ready: BTreeSet<(String, i32)>,
    followed: BTreeMap<String, (BTreeSet<i32>, u32)>,
}

impl MemoryPartitions {
    /// Marks `table`'s `partition` ready (`true`) or not.
    pub fn set_ready(&self, table: &str, partition: i32, ready: bool) {
        let mut state = self.state.lock().expect("partitions lock");
        let entry = (table.to_owned(), partition);
        if ready {
            state.ready.insert(entry);
        } else {
            state.ready.remove(&entry);
        }
    }

    /// The partitions `owner` follows now.
    pub fn followed(&self, owner: &str) -> BTreeSet<i32> {
        let state = self.state.lock().expect("partitions lock");
        state
            .followed
            .get(owner)
            .map(|(held, _)| held.clone())
            .unwrap_or_default()
    }

    /// How many partitions `owner`'s input has, as it last said.
    pub fn input_partitions(&self, owner: &str) -> Option<u32> {
        let state = self.state.lock().expect("partitions lock");
        state.followed.get(owner).map(|(_, of)| *of)
    }
}

impl HeldPartitions for MemoryPartitions {
    fn follow(&self, owner: &str, partitions: BTreeSet<i32>, of: u32) {
        let mut state = self.state.lock().expect("partitions lock");
        state.followed.insert(owner.to_owned(), (partitions, of));
    }

    fn is_ready(&self, table: &str, partition: i32) -> bool {
        let state = self.state.lock().expect("partitions lock");
        state.ready.contains(&(table.to_owned(), partition))
    }

    fn all_ready(&self, table: &str, partitions: u32) -> bool {
        (0..partitions as i32).all(|p| self.is_ready(table, p))
    }
}
