//! The one keyspace of a `global` table: every row, whatever partition its
//! records arrived on, so a lookup never depends on a partitioner.
//!
//! Each stored row starts with a header naming the partition that owns the key
//! (the partition of the record that last wrote it) and that record's Kafka
//! timestamp. Kafka orders records only within a partition, so:
//! - a record from the owning partition always applies (offset order);
//! - an upsert from another partition applies if it is at least as new as the
//!   owner's record: the producer moved the key (e.g. changed partitioners);
//! - a delete from another partition never applies: it removes that partition's
//!   former copy, not the row that now lives elsewhere.
//!
//! What this cannot tell apart: if a key moved and was later deleted on its new
//! partition while its old copy was never tombstoned, a rebuild that reads the
//! old partition last brings the old row back. Tombstone a moved key's old copy
//! (compaction then removes it) to avoid that.

/// Owning partition (i32), timestamp (i64), both big-endian.
const HEADER_LEN: usize = 12;

/// Which record last wrote a key: its partition and Kafka timestamp (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Partition of the record.
    pub partition: i32,
    /// Its Kafka timestamp in milliseconds (0 when the broker gave none).
    pub timestamp: i64,
}

impl Owner {
    /// Whether a record of `self` writing a row (`upsert`) or deleting it
    /// replaces what `stored` wrote.
    pub fn supersedes(self, stored: Option<Owner>, upsert: bool) -> bool {
        match stored {
            None => upsert,
            Some(s) if s.partition == self.partition => true,
            Some(s) => upsert && self.timestamp >= s.timestamp,
        }
    }
}

/// The stored value of a row.
pub fn encode(owner: Owner, row: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + row.len());
    out.extend_from_slice(&owner.partition.to_be_bytes());
    out.extend_from_slice(&owner.timestamp.to_be_bytes());
    out.extend_from_slice(row);
    out
}

/// A stored value's owner and row bytes (`None` if it is not one).
pub fn decode(value: &[u8]) -> Option<(Owner, &[u8])> {
    let (header, row) = value.split_at_checked(HEADER_LEN)?;
    let owner = Owner {
        partition: i32::from_be_bytes(header[..4].try_into().expect("4 bytes")),
        timestamp: i64::from_be_bytes(header[4..].try_into().expect("8 bytes")),
    };
    Some((owner, row))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn owner(partition: i32, timestamp: i64) -> Owner {
        Owner {
            partition,
            timestamp,
        }
    }

    #[test]
    fn rows_round_trip() {
        let row = encode(owner(2, 1_700), b"{\"id\":1}");
        assert_eq!(decode(&row), Some((owner(2, 1_700), &b"{\"id\":1}"[..])));
        assert_eq!(
            decode(&encode(owner(-1, -5), b"")),
            Some((owner(-1, -5), &b""[..]))
        );
        assert!(decode(b"short").is_none());
    }

    #[test]
    fn the_owning_partition_always_wins_and_others_only_with_a_newer_row() {
        assert!(owner(0, 5).supersedes(None, true));
        assert!(!owner(0, 5).supersedes(None, false), "nothing to delete");
        for upsert in [true, false] {
            assert!(
                owner(0, 1).supersedes(Some(owner(0, 9)), upsert),
                "same partition: offset order, whatever the timestamps"
            );
        }
        assert!(
            owner(1, 9).supersedes(Some(owner(0, 9)), true),
            "moved: as new"
        );
        assert!(
            owner(1, 10).supersedes(Some(owner(0, 9)), true),
            "moved: newer"
        );
        assert!(
            !owner(0, 8).supersedes(Some(owner(1, 9)), true),
            "an older version left on the former partition"
        );
        assert!(
            !owner(0, 99).supersedes(Some(owner(1, 9)), false),
            "a delete on the former partition removes only the former copy"
        );
    }
}
