//! [`Follower`]: partitions of `partitioned` tables chosen from outside the tables'
//! own consumer group.
//!
//! An enricher job consuming a co-partitioned input topic tells the follower which
//! input partitions the job's consumer group gave it; the materializer then holds
//! exactly those partitions of every `partitioned` table. Several owners (jobs)
//! may name partitions; the materializer holds their union.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct Wanted {
    by_owner: BTreeMap<String, BTreeSet<i32>>,
    changed: bool,
}

/// Partitions wanted by their owners, shared between owners and the materializer.
#[derive(Debug, Clone, Default)]
pub struct Follower(Arc<Mutex<Wanted>>);

impl Follower {
    /// `owner` now wants exactly `partitions` (replacing what it wanted before).
    pub fn want(&self, owner: &str, partitions: BTreeSet<i32>) {
        let mut wanted = self.0.lock().expect("follower lock");
        if wanted.by_owner.get(owner) != Some(&partitions) {
            wanted.by_owner.insert(owner.to_owned(), partitions);
            wanted.changed = true;
        }
    }

    /// The union of wanted partitions, if it may have changed since the last call.
    pub(crate) fn take_change(&self) -> Option<BTreeSet<i32>> {
        let mut wanted = self.0.lock().expect("follower lock");
        if !std::mem::take(&mut wanted.changed) {
            return None;
        }
        Some(wanted.by_owner.values().flatten().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_the_union_of_owners_and_reports_changes_once() {
        let follower = Follower::default();
        assert_eq!(follower.take_change(), None);
        follower.want("a", BTreeSet::from([0, 1]));
        follower.want("b", BTreeSet::from([1, 2]));
        assert_eq!(follower.take_change(), Some(BTreeSet::from([0, 1, 2])));
        assert_eq!(follower.take_change(), None);
        follower.want("b", BTreeSet::from([1, 2])); // unchanged
        assert_eq!(follower.take_change(), None);
        follower.want("a", BTreeSet::new());
        assert_eq!(follower.take_change(), Some(BTreeSet::from([1, 2])));
    }
}
