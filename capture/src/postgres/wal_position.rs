//! Positions in a PostgreSQL database's change stream (a [`SourcePosition`]):
//! the end LSN of the last transaction whose changes are all before it.
//!
//! That LSN is what capture stores and, once stored, what it confirms to the
//! replication slot (its `confirmed_flush_lsn`): the server keeps the WAL
//! after it, and a restart asks for the changes after it. A snapshot's
//! position is the slot's consistent point: transactions that commit after
//! it are streamed, those before are in the snapshot.

use std::fmt;

use serde::{Deserialize, Serialize};
use tributary_proto::lsn::Lsn;
use tributary_proto::{LogCoordinates, SourceInfo, WalCoordinates};

use crate::source_position::SourcePosition;

/// A position in a PostgreSQL database's change stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalPosition {
    /// The end of the last complete transaction (or the consistent point).
    #[serde(with = "lsn_text")]
    pub lsn: Lsn,
    /// That transaction's id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_id: Option<u32>,
    /// Its commit time, in milliseconds since the epoch; 0 when unknown.
    #[serde(default)]
    pub ts_ms: i64,
}

impl SourcePosition for WalPosition {
    fn reached(&self, other: &WalPosition) -> bool {
        self.lsn >= other.lsn
    }

    fn is_after(&self, other: &WalPosition) -> bool {
        self.lsn > other.lsn
    }

    fn same_transactions(&self, other: &WalPosition) -> bool {
        self.lsn == other.lsn
    }

    fn ts_ms(&self) -> i64 {
        self.ts_ms
    }

    /// The position as the `lsn` (and `sequence`) of a snapshot's events,
    /// as Debezium's snapshot records carry the slot's consistent point.
    fn mark_source(&self, source: &mut SourceInfo) {
        let lsn = Some(self.lsn.0);
        match &mut source.log {
            LogCoordinates::Wal(wal) => {
                wal.lsn = lsn;
                wal.last_commit_lsn = lsn;
                wal.tx_id = self.tx_id.map(u64::from);
            }
            log => {
                *log = LogCoordinates::Wal(Box::new(WalCoordinates {
                    schema: "".into(),
                    tx_id: self.tx_id.map(u64::from),
                    lsn,
                    last_commit_lsn: lsn,
                    xmin: None,
                }));
            }
        }
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "lsn": self.lsn.to_string(), "tx_id": self.tx_id })
    }
}

impl fmt::Display for WalPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LSN {}", self.lsn)?;
        if let Some(tx) = self.tx_id {
            write!(f, " (after transaction {tx})")?;
        }
        Ok(())
    }
}

/// An LSN stored as PostgreSQL writes it (`16/B374D848`).
mod lsn_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use tributary_proto::lsn::Lsn;

    pub(super) fn serialize<S: Serializer>(lsn: &Lsn, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(lsn)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Lsn, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_by_lsn_and_store_it_as_text() {
        let at = |lsn| WalPosition {
            lsn: Lsn(lsn),
            tx_id: Some(7),
            ts_ms: 1,
        };
        assert!(at(5).reached(&at(5)) && !at(5).is_after(&at(5)));
        assert!(at(6).is_after(&at(5)) && !at(4).reached(&at(5)));
        assert!(at(5).same_transactions(&at(5)) && !at(5).same_transactions(&at(6)));
        let json = serde_json::to_string(&at(0x16_B374_D848)).unwrap();
        assert_eq!(json, r#"{"lsn":"16/B374D848","tx_id":7,"ts_ms":1}"#);
        assert_eq!(
            serde_json::from_str::<WalPosition>(&json).unwrap(),
            at(0x16_B374_D848)
        );
        assert!(serde_json::from_str::<WalPosition>(r#"{"lsn":"x"}"#).is_err());
        let mut source = SourceInfo::default();
        at(9).mark_source(&mut source);
        let LogCoordinates::Wal(wal) = &source.log else {
            panic!("{source:?}")
        };
        assert_eq!(
            (wal.lsn, wal.last_commit_lsn, wal.tx_id),
            (Some(9), Some(9), Some(7))
        );
    }
}
