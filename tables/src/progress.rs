//! Which partitions an instance holds and how far each has got: offsets,
//! readiness, how far the source's log is applied, and a notification on every
//! applied batch (for reads that wait for a position).
//!
//! Which partitions are held, and whether each is ready, is also kept as a
//! snapshot replaced whenever it changes: every lookup and every enriched
//! event asks, and reading it takes no lock (two cores taking a read lock in
//! turn move its line between them on every event).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use crate::applied_log::AppliedLog;

/// Progress of one held partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProgress {
    /// Offset of the next record to apply.
    pub next_offset: i64,
    /// The topic's end observed after assignment; `None` until fetched.
    pub end_at_assignment: Option<i64>,
    /// The topic's end as last observed (refreshed every few seconds).
    pub latest_end: Option<i64>,
    /// Caught up once with `end_at_assignment`; stays true until revoked.
    pub ready: bool,
    /// How far the source's log is applied (GTIDs, WAL positions).
    pub log: AppliedLog,
    /// Records on another partition than the table's partitioner gives their
    /// key: the partition is not ready while any were seen.
    pub misplaced: u64,
    /// A versioned table's stream time: the newest time a version it applied
    /// became valid (µs since the epoch).
    pub stream_time: Option<i64>,
}

/// How far in time a versioned table partition holds its versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldVersions {
    /// The newest time a version applied became valid, if any was applied.
    pub stream_time: Option<i64>,
    /// `i64::MAX` once the partition has applied everything up to its
    /// topic's end as last observed (no later version can be missing), else
    /// its stream time (`i64::MIN` before any version).
    pub complete_until: i64,
}

impl PartitionProgress {
    /// Records behind the topic's end as last observed (0 when unknown).
    pub fn lag(&self) -> i64 {
        self.latest_end
            .or(self.end_at_assignment)
            .map_or(0, |end| (end - self.next_offset).max(0))
    }
}

/// Held partitions per table: table name → partition → progress.
type Held = BTreeMap<String, BTreeMap<i32, PartitionProgress>>;

/// The partitions of each table held, each with whether it is ready.
type Holdings = BTreeMap<String, BTreeMap<i32, bool>>;

/// Held partitions of every table, shared by materializer threads and lookups.
#[derive(Debug, Default)]
pub struct Progress {
    held: RwLock<Held>,
    /// What `held` holds and whether it is ready, replaced when that changes.
    holdings: ArcSwap<Holdings>,
    awaiting_group: AtomicBool,
    applied: Notify,
}

impl Progress {
    fn with<R>(&self, f: impl FnOnce(&mut Held) -> R) -> R {
        let mut held = self.held.write().expect("progress lock");
        let result = f(&mut held);
        // Replaced under the lock, so snapshots follow each other in order.
        if !agree(&held, &self.holdings.load()) {
            let holdings = held.iter().map(|(table, parts)| {
                let parts = parts.iter().map(|(p, s)| (*p, s.ready));
                (table.clone(), parts.collect())
            });
            self.holdings.store(Arc::new(holdings.collect()));
        }
        result
    }

    fn read<R>(&self, f: impl FnOnce(&Held) -> R) -> R {
        f(&self.held.read().expect("progress lock"))
    }

    /// The instance joined a consumer group and waits for its first assignment.
    pub fn await_group(&self) {
        self.awaiting_group.store(true, Ordering::SeqCst);
    }

    /// The group assigned this instance its partitions (possibly none).
    pub fn group_assigned(&self) {
        self.awaiting_group.store(false, Ordering::SeqCst);
    }

    /// A partition was assigned; applying resumes at `next_offset`, after the
    /// changes of `log`.
    pub fn assign(&self, table: &str, partition: i32, next_offset: i64, log: AppliedLog) {
        let fresh = PartitionProgress {
            next_offset,
            end_at_assignment: None,
            latest_end: None,
            ready: false,
            log,
            misplaced: 0,
            stream_time: None,
        };
        self.with(|held| {
            held.entry(table.to_owned())
                .or_default()
                .insert(partition, fresh)
        });
    }

    /// A partition was taken away.
    pub fn revoke(&self, table: &str, partition: i32) {
        self.with(|held| held.get_mut(table).and_then(|t| t.remove(&partition)));
    }

    /// Records the end of the topic as observed after assignment.
    pub fn set_end(&self, table: &str, partition: i32, end: i64) {
        self.update(table, partition, |p| p.end_at_assignment = Some(end));
    }

    /// Records the topic's end as observed now (for lag).
    pub fn set_latest_end(&self, table: &str, partition: i32, end: i64) {
        self.update(table, partition, |p| p.latest_end = Some(end));
    }

    /// Records that `count` more records of the partition were misplaced: it is
    /// not ready from now on (until it is assigned again).
    pub fn misplaced(&self, table: &str, partition: i32, count: u64) {
        self.update(table, partition, |p| {
            p.misplaced += count;
            p.ready = false;
        });
    }

    /// Records that everything before `next_offset` is applied, up to `log`.
    pub fn applied(&self, table: &str, partition: i32, next_offset: i64, log: AppliedLog) {
        self.update(table, partition, |p| {
            p.next_offset = next_offset;
            p.log = log;
        });
        self.applied.notify_waiters();
    }

    /// Records a versioned table partition's stream time.
    pub fn set_stream_time(&self, table: &str, partition: i32, micros: i64) {
        self.update(table, partition, |p| p.stream_time = Some(micros));
    }

    /// A versioned table partition's stream time, if held and any version was applied.
    pub fn stream_time(&self, table: &str, partition: i32) -> Option<i64> {
        self.read(|held| held.get(table)?.get(&partition)?.stream_time)
    }

    /// How far in time a versioned table partition holds its versions
    /// (`None` when the partition is not held).
    pub fn held_versions(&self, table: &str, partition: i32) -> Option<HeldVersions> {
        self.read(|held| {
            let p = held.get(table)?.get(&partition)?;
            let end = p.latest_end.or(p.end_at_assignment);
            Some(HeldVersions {
                stream_time: p.stream_time,
                complete_until: if end.is_some_and(|end| p.next_offset >= end) {
                    i64::MAX
                } else {
                    p.stream_time.unwrap_or(i64::MIN)
                },
            })
        })
    }

    /// Completes at the next applied batch (of any partition). Create it before
    /// checking a condition, then await it, so no batch is missed in between.
    pub fn next_applied(&self) -> tokio::sync::futures::Notified<'_> {
        self.applied.notified()
    }

    fn update(&self, table: &str, partition: i32, f: impl FnOnce(&mut PartitionProgress)) {
        self.with(|held| {
            if let Some(p) = held.get_mut(table).and_then(|t| t.get_mut(&partition)) {
                f(p);
                // Some brokers under-report the end (STACK.md: Tansu); being past it is fine.
                let caught_up = p.end_at_assignment.is_some_and(|end| p.next_offset >= end);
                if !p.ready && p.misplaced == 0 && caught_up {
                    p.ready = true;
                    tracing::info!(%table, partition, next_offset = p.next_offset, "partition caught up");
                }
            }
        });
    }

    /// Whether this instance holds the partition.
    pub fn holds(&self, table: &str, partition: i32) -> bool {
        let holdings = self.holdings.load();
        holdings
            .get(table)
            .is_some_and(|t| t.contains_key(&partition))
    }

    /// The partitions of `table` this instance holds, in order (for a
    /// batch of keys: one look at the progress for all of them).
    pub fn held_partitions(&self, table: &str) -> Vec<i32> {
        let holdings = self.holdings.load();
        let parts = holdings.get(table);
        parts
            .map(|t| t.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Whether this instance holds the partition and has caught up with it.
    pub fn is_ready(&self, table: &str, partition: i32) -> bool {
        let holdings = self.holdings.load();
        holdings.get(table).and_then(|t| t.get(&partition)) == Some(&true)
    }

    /// Progress of one held partition.
    pub fn of_partition(&self, table: &str, partition: i32) -> Option<PartitionProgress> {
        self.read(|held| held.get(table).and_then(|t| t.get(&partition)).cloned())
    }

    /// Tables with partitions held here.
    pub fn table_names(&self) -> Vec<String> {
        self.read(|held| held.keys().cloned().collect())
    }

    /// Held partitions of a table.
    pub fn of_table(&self, table: &str) -> Vec<(i32, PartitionProgress)> {
        self.read(|held| {
            held.get(table)
                .map(|t| t.iter().map(|(p, s)| (*p, s.clone())).collect())
                .unwrap_or_default()
        })
    }

    fn all(held: &Held) -> impl Iterator<Item = (&String, i32, &PartitionProgress)> {
        held.iter()
            .flat_map(|(table, parts)| parts.iter().map(move |(p, s)| (table, *p, s)))
    }

    /// Held partitions whose end has not been observed yet.
    pub fn missing_ends(&self) -> Vec<(String, i32)> {
        self.read(|held| {
            Self::all(held)
                .filter(|(_, _, s)| s.end_at_assignment.is_none())
                .map(|(t, p, _)| (t.clone(), p))
                .collect()
        })
    }

    /// The group (if any) has assigned partitions, at least one partition is held,
    /// and every held partition has caught up.
    pub fn serving(&self) -> bool {
        !self.awaiting_group.load(Ordering::SeqCst)
            && self.read(|held| {
                let mut parts = Self::all(held).peekable();
                parts.peek().is_some() && parts.all(|(_, _, s)| s.ready)
            })
    }
}

/// Whether `holdings` says what `held` holds, and which of it is ready.
fn agree(held: &Held, holdings: &Holdings) -> bool {
    held.len() == holdings.len()
        && held
            .iter()
            .zip(holdings)
            .all(|((table, parts), (t, states))| {
                table == t
                    && parts.len() == states.len()
                    && parts
                        .iter()
                        .zip(states)
                        .all(|((p, s), (q, ready))| p == q && s.ready == *ready)
            })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_caught_up_with_the_end_at_assignment() {
        let p = Progress::default();
        assert!(!p.serving(), "nothing held yet");
        p.assign("t", 0, 10, AppliedLog::default());
        assert!(!p.of_table("t").iter().all(|(_, s)| s.ready));
        p.set_end("t", 0, 20);
        p.applied("t", 0, 15, AppliedLog::default());
        assert!(!p.of_table("t").iter().all(|(_, s)| s.ready));
        p.applied("t", 0, 25, AppliedLog::default()); // past an under-reported end
        assert!(p.of_table("t").iter().all(|(_, s)| s.ready));
        assert!(p.serving());
        p.await_group();
        assert!(!p.serving(), "a group assignment is pending");
        p.group_assigned();
        assert!(p.serving());
        p.assign("t", 1, 0, AppliedLog::default());
        p.set_end("t", 1, 0); // empty partition: ready at once
        assert!(p.of_table("t").iter().all(|(_, s)| s.ready));
        p.revoke("t", 0);
        assert!(!p.holds("t", 0));
        assert_eq!(p.of_table("t").len(), 1);
    }

    #[test]
    fn what_lookups_read_follows_every_change_of_holdings_and_readiness() {
        let p = Progress::default();
        let seen = |p: &Progress| {
            let ready = |t, n| p.is_ready(t, n);
            (
                p.held_partitions("t"),
                p.holds("t", 0),
                ready("t", 0),
                ready("t", 1),
            )
        };
        assert_eq!(seen(&p), (vec![], false, false, false));
        p.assign("t", 0, 0, AppliedLog::default());
        p.assign("t", 1, 0, AppliedLog::default());
        assert_eq!(seen(&p), (vec![0, 1], true, false, false));
        p.set_end("t", 1, 5);
        p.applied("t", 1, 4, AppliedLog::default());
        assert_eq!(
            seen(&p),
            (vec![0, 1], true, false, false),
            "not caught up yet"
        );
        p.applied("t", 1, 5, AppliedLog::default());
        assert_eq!(seen(&p), (vec![0, 1], true, false, true));
        p.misplaced("t", 1, 1);
        assert_eq!(seen(&p), (vec![0, 1], true, false, false));
        p.revoke("t", 0);
        assert_eq!(seen(&p), (vec![1], false, false, false));
        assert!(!p.is_ready("other", 1) && !p.holds("other", 1));
    }
}
