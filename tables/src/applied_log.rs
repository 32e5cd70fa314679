//! How far a partition has applied its source's log, for reads that wait for
//! a source position (read-your-writes): the newest GTID of each replication
//! stream (MariaDB, MySQL) and, for PostgreSQL, the newest WAL position a
//! streamed change proves passed and the transactions applied last. The
//! materializer stores it with the partition's offset.
//!
//! A transaction counts as applied in a partition only once all its changes
//! there are: when a change of another transaction follows it, or when the
//! batch that applied it drained what the consumer had fetched
//! ([`LogOfBatch`]); a batch cut by its size limits leaves its last
//! transaction open for the next one. A WAL position needs no such wait: a
//! change written at or after it belongs to a transaction that committed
//! later, and pgoutput sends transactions whole in commit order, so every
//! change of an earlier transaction precedes it in the partition.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use tributary_proto::gtid::{AppliedGtids, Gtid};
use tributary_proto::lsn::Lsn;

/// PostgreSQL transactions remembered per partition. A read naming one that
/// this many others in the partition followed waits, as a read without a
/// transaction id does, for a change written after its LSN.
const RECENT_TRANSACTIONS: usize = 256;

/// The source position one change record names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mark {
    /// A change of a MariaDB or MySQL transaction.
    Gtid(Gtid),
    /// A streamed PostgreSQL change (snapshot rows name none).
    Wal(WalChange),
}

/// A streamed PostgreSQL change, as its `source` block places it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WalChange {
    /// The newest WAL position the change proves passed: its own LSN, or the
    /// commit LSN of the transaction sent before it, whichever is later.
    pub(crate) lsn: Lsn,
    /// Its transaction's id (`txId`: pgoutput sends 32 bits).
    pub(crate) xid: u32,
}

impl Mark {
    fn same_transaction(&self, other: &Mark) -> bool {
        match (self, other) {
            (Mark::Gtid(a), Mark::Gtid(b)) => a == b,
            (Mark::Wal(a), Mark::Wal(b)) => a.xid == b.xid,
            _ => false,
        }
    }
}

/// A PostgreSQL position a read waits for: the writer's
/// `pg_current_wal_lsn()` after its commit and, if known, its transaction id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalPosition {
    /// At or after the end of the writer's commit record.
    pub lsn: Lsn,
    /// The writer's transaction, modulo 2^32.
    pub xid: Option<u32>,
}

/// How far one partition has applied a PostgreSQL source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppliedWal {
    /// The newest position an applied streamed change proved passed (0: none).
    lsn: u64,
    /// Transactions whose changes here are all applied, oldest first.
    xids: VecDeque<u32>,
}

impl AppliedWal {
    fn passed(&mut self, lsn: Lsn) {
        self.lsn = self.lsn.max(lsn.0);
    }

    fn completed(&mut self, xid: u32) {
        // A replay after a capture restart may bring a transaction again.
        if !self.xids.contains(&xid) {
            if self.xids.len() == RECENT_TRANSACTIONS {
                self.xids.pop_front();
            }
            self.xids.push_back(xid);
        }
    }

    /// Whether the writer's transaction has been applied here: it is one of
    /// the transactions applied, or a change written after it was.
    pub fn reached(&self, want: &WalPosition) -> bool {
        self.lsn >= want.lsn.0 || want.xid.is_some_and(|xid| self.xids.contains(&xid))
    }

    /// The newest position a streamed change proved passed.
    pub fn lsn(&self) -> Option<Lsn> {
        (self.lsn > 0).then_some(Lsn(self.lsn))
    }

    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self.lsn == 0 && self.xids.is_empty()
    }
}

/// Everything a partition has applied of its source's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedLog {
    /// The newest GTID applied per replication domain (MySQL: source).
    pub gtids: AppliedGtids,
    /// PostgreSQL sources.
    pub wal: AppliedWal,
}

impl AppliedLog {
    /// A change of `mark` was applied (its transaction may go on).
    fn passed(&mut self, mark: &Mark) {
        if let Mark::Wal(change) = mark {
            self.wal.passed(change.lsn);
        }
    }

    /// Every change of `mark`'s transaction in the partition was applied.
    fn completed(&mut self, mark: &Mark) {
        match mark {
            Mark::Gtid(gtid) => self.gtids.apply(gtid),
            Mark::Wal(change) => self.wal.completed(change.xid),
        }
    }

    /// Adds what a later batch applied.
    pub(crate) fn merge(&mut self, newer: &AppliedLog) {
        self.gtids.merge(&newer.gtids);
        self.wal.passed(Lsn(newer.wal.lsn));
        for &xid in &newer.wal.xids {
            self.wal.completed(xid);
        }
    }

    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self.gtids.is_empty() && self.wal.is_empty()
    }
}

/// What one batch learns of one partition's log: what it applied, and the
/// transaction of its last record, complete only once the batch shows it is.
#[derive(Debug, Default)]
pub(crate) struct LogOfBatch {
    pub(crate) applied: AppliedLog,
    open: Option<Mark>,
}

impl LogOfBatch {
    /// A batch that continues a transaction the previous batch left open.
    pub(crate) fn continuing(open: Option<Mark>) -> Self {
        LogOfBatch {
            applied: AppliedLog::default(),
            open,
        }
    }

    /// A record naming `mark` was applied.
    pub(crate) fn record(&mut self, mark: Mark) {
        self.applied.passed(&mark);
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.same_transaction(&mark))
        {
            return;
        }
        if let Some(done) = self.open.replace(mark) {
            self.applied.completed(&done);
        }
    }

    /// The batch ends. `drained`: the consumer had nothing more fetched, so
    /// the open transaction is whole; otherwise it is handed back, to go on in
    /// the next batch.
    pub(crate) fn finish(&mut self, drained: bool) -> Option<Mark> {
        let open = self.open.take()?;
        if drained {
            self.applied.completed(&open);
            None
        } else {
            Some(open)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal(lsn: u64, xid: u32) -> Mark {
        Mark::Wal(WalChange { lsn: Lsn(lsn), xid })
    }

    fn want(lsn: u64, xid: Option<u32>) -> WalPosition {
        WalPosition { lsn: Lsn(lsn), xid }
    }

    #[test]
    fn a_transaction_counts_once_its_changes_in_the_partition_are_all_applied() {
        // A full batch ends inside transaction 7: only what its changes passed counts.
        let mut first = LogOfBatch::default();
        first.record(wal(100, 6));
        first.record(wal(110, 7));
        let open = first.finish(false);
        assert!(first.applied.wal.reached(&want(90, Some(7))), "passed 90");
        assert!(!first.applied.wal.reached(&want(500, Some(7))), "7 is open");
        assert!(first.applied.wal.reached(&want(500, Some(6))), "6 is whole");
        // The next batch finishes 7 and drains: 8 is whole too.
        let mut second = LogOfBatch::continuing(open);
        second.record(wal(120, 7));
        second.record(wal(130, 8));
        assert_eq!(second.finish(true), None);
        let mut all = first.applied.clone();
        all.merge(&second.applied);
        for xid in [6, 7, 8] {
            assert!(all.wal.reached(&want(500, Some(xid))), "{xid}");
        }
        assert!(!all.wal.reached(&want(500, Some(9))));
        assert!(!all.wal.reached(&want(131, None)));
        assert!(all.wal.reached(&want(130, None)));
        assert_eq!(all.wal.lsn(), Some(Lsn(130)));
    }

    #[test]
    fn gtids_wait_for_the_transaction_to_end_too() {
        let gtid = |seq: u64| Mark::Gtid(format!("0-1-{seq}").parse().unwrap());
        let reached = |log: &AppliedLog, seq: u64| {
            log.gtids
                .reached(&format!("0-1-{seq}").parse::<Gtid>().unwrap())
        };
        let mut batch = LogOfBatch::default();
        batch.record(gtid(41));
        batch.record(gtid(42));
        batch.record(gtid(42));
        let open = batch.finish(false);
        assert!(reached(&batch.applied, 41));
        assert!(!reached(&batch.applied, 42));
        let mut next = LogOfBatch::continuing(open);
        assert_eq!(next.finish(true), None);
        assert!(reached(&next.applied, 42));
    }

    #[test]
    fn the_newest_transactions_are_remembered_and_stored_as_json() {
        let mut log = AppliedLog::default();
        for xid in 0..(RECENT_TRANSACTIONS as u32 + 10) {
            log.completed(&wal(u64::from(xid), xid));
            log.completed(&wal(u64::from(xid), xid)); // replayed
        }
        assert_eq!(log.wal.xids.len(), RECENT_TRANSACTIONS);
        assert!(!log.wal.reached(&want(u64::MAX, Some(9))), "forgotten");
        assert!(log.wal.reached(&want(u64::MAX, Some(10))));
        let stored = serde_json::to_vec(&log.wal).unwrap();
        let read: AppliedWal = serde_json::from_slice(&stored).unwrap();
        assert_eq!(read, log.wal);
    }
}
