//! MySQL/MariaDB binlog positions (a [`SourcePosition`]), and where capture
//! starts in the binlog when no position is stored.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tributary_proto::SourceInfo;

use crate::gtid_state::{GtidState, GtidStateError};
use crate::source_position::SourcePosition;

/// A position in the source's binlog, recorded after a committed transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinlogPosition {
    /// Binlog file name.
    pub file: String,
    /// Byte offset of the next event in `file`.
    pub pos: u64,
    /// GTID state after the transaction, when the server has GTIDs: MariaDB's
    /// last GTID per domain (`domain-server-seq,...`) or MySQL's executed GTID
    /// set (`uuid:1-42,...`; empty when MySQL has GTIDs on but none executed yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
    /// Commit time of the transaction on the source, in milliseconds since the epoch.
    #[serde(default)]
    pub ts_ms: i64,
}

impl BinlogPosition {
    /// `(file base name, file sequence number, offset)`; `None` without a numbered
    /// file name (a start given only as a GTID).
    fn order(&self) -> Option<(&str, u64, u64)> {
        let (base, seq) = self.file.rsplit_once('.')?;
        Some((base, seq.parse().ok()?, self.pos))
    }
}

impl SourcePosition for BinlogPosition {
    /// Unplaced positions (a start given only as a GTID) have not reached
    /// anything; positions in files of different base names (the server's
    /// `log_bin` name changed) count as reached.
    fn reached(&self, other: &BinlogPosition) -> bool {
        match (self.order(), other.order()) {
            (Some((a, ..)), Some((b, ..))) if a != b => true,
            (Some((_, seq, pos)), Some((_, other_seq, other_pos))) => {
                (seq, pos) >= (other_seq, other_pos)
            }
            _ => false,
        }
    }

    fn is_after(&self, other: &BinlogPosition) -> bool {
        match (self.order(), other.order()) {
            (Some((a, seq, pos)), Some((b, other_seq, other_pos))) if a == b => {
                (seq, pos) > (other_seq, other_pos)
            }
            _ => true,
        }
    }

    /// Both carry the same GTID state.
    fn same_transactions(&self, other: &BinlogPosition) -> bool {
        let state = |p: &BinlogPosition| p.gtid.as_deref().map(GtidState::parse);
        matches!((state(self), state(other)), (Some(Ok(a)), Some(Ok(b))) if a == b)
    }

    fn ts_ms(&self) -> i64 {
        self.ts_ms
    }

    fn mark_source(&self, source: &mut SourceInfo) {
        let binlog = source.binlog_mut();
        binlog.gtid = self.gtid.as_deref().map(Arc::from);
        binlog.file = self.file.as_str().into();
        binlog.pos = self.pos;
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "file": self.file, "pos": self.pos, "gtid": self.gtid })
    }
}

impl fmt::Display for BinlogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)?;
        if let Some(gtid) = self.gtid.as_deref().filter(|g| !g.is_empty()) {
            write!(f, " (gtid {gtid})")?;
        }
        Ok(())
    }
}

/// Where capture begins when no position has been stored yet.
///
/// YAML: `latest`, `earliest`, `{gtid: 0-1-42}` (MySQL: `{gtid: "uuid:1-42"}`, the
/// executed set to start after) or `{binlog: {file: binlog.000003, pos: 4}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(try_from = "StartRepr")]
pub enum StartPosition {
    /// The server's current end of binlog: only changes made from now on.
    #[default]
    Latest,
    /// The oldest binlog the server still has.
    Earliest,
    /// After the given GTID state: MariaDB's, e.g. `0-1-1234`, or a MySQL GTID
    /// set, e.g. `3e11fa47-71ca-11e1-9e33-c80aa9429562:1-1234`.
    Gtid(String),
    /// A binlog file and offset.
    Binlog {
        /// Binlog file name.
        file: String,
        /// Byte offset.
        pos: u64,
    },
}

/// The YAML shapes of [`StartPosition`].
#[derive(Deserialize)]
#[serde(untagged)]
enum StartRepr {
    Named(String),
    Gtid { gtid: String },
    Binlog { binlog: BinlogStart },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BinlogStart {
    file: String,
    pos: u64,
}

/// A `source.start` that names no start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// A word other than `latest` or `earliest`.
    #[error(
        "unknown start {0:?}: use latest, earliest, {{gtid: D-S-N}} (MySQL: {{gtid: \"UUID:1-N\"}}) or {{binlog: {{file: F, pos: N}}}}"
    )]
    Unknown(String),
    /// A GTID state that cannot be read.
    #[error(transparent)]
    Gtid(#[from] GtidStateError),
}

impl TryFrom<StartRepr> for StartPosition {
    type Error = StartError;

    fn try_from(repr: StartRepr) -> Result<Self, StartError> {
        match repr {
            StartRepr::Named(name) => match name.as_str() {
                "latest" => Ok(StartPosition::Latest),
                "earliest" => Ok(StartPosition::Earliest),
                _ => Err(StartError::Unknown(name)),
            },
            StartRepr::Gtid { gtid } => {
                GtidState::parse(&gtid)?;
                Ok(StartPosition::Gtid(gtid))
            }
            StartRepr::Binlog { binlog } => Ok(StartPosition::Binlog {
                file: binlog.file,
                pos: binlog.pos,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source_position::CapturePosition;

    #[test]
    fn positions_compare_across_files() {
        let at = |file: &str, pos| BinlogPosition {
            file: file.into(),
            pos,
            ..Default::default()
        };
        let a = at("mariadb-bin.000009", 900);
        let b = at("mariadb-bin.000010", 4);
        assert!(b.reached(&a) && b.is_after(&a));
        assert!(!a.reached(&b) && !a.is_after(&b));
        assert!(a.reached(&a) && !a.is_after(&a));
        assert!(at("mariadb-bin.1000000", 4).is_after(&at("mariadb-bin.999999", 5)));
        let unplaced = at("", 4);
        assert!(!unplaced.reached(&a) && !a.reached(&unplaced));
        assert!(unplaced.is_after(&a) && a.is_after(&unplaced));
        let with_gtid = |file: &str, pos, gtid: &str| BinlogPosition {
            gtid: Some(gtid.into()),
            ..at(file, pos)
        };
        let commit = with_gtid("mariadb-bin.000010", 900, "0-1-7,1-2-3");
        let end_of_file = with_gtid("mariadb-bin.000010", 980, "1-2-3, 0-1-7");
        assert!(end_of_file.same_transactions(&commit));
        assert!(!commit.same_transactions(&with_gtid("mariadb-bin.000010", 900, "0-1-8,1-2-3")));
        assert!(!a.same_transactions(&a), "no GTID, nothing known");
        let renamed = at("other-bin.000001", 4);
        assert!(renamed.reached(&a) && a.reached(&renamed));
        assert!(renamed.is_after(&a) && a.is_after(&renamed));
    }

    #[test]
    fn start_position_from_yaml() {
        let p: StartPosition = tributary_config::parse_yaml("latest").unwrap();
        assert_eq!(p, StartPosition::Latest);
        let p: StartPosition = tributary_config::parse_yaml("gtid: 0-1-9").unwrap();
        assert_eq!(p, StartPosition::Gtid("0-1-9".into()));
        let p: StartPosition =
            tributary_config::parse_yaml("binlog: { file: binlog.000002, pos: 4 }").unwrap();
        assert_eq!(
            p,
            StartPosition::Binlog {
                file: "binlog.000002".into(),
                pos: 4
            }
        );
        let err = tributary_config::parse_yaml::<StartPosition>("newest").unwrap_err();
        assert!(err.to_string().contains("unknown start"), "{err}");
        assert!(tributary_config::parse_yaml::<StartPosition>("gtid: 0-1").is_err());
        let mysql = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42";
        let p: StartPosition = tributary_config::parse_yaml(&format!("gtid: \"{mysql}\"")).unwrap();
        assert_eq!(p, StartPosition::Gtid(mysql.into()));
        let bad = "gtid: \"3e11fa47-71ca-11e1-9e33-c80aa9429562:0\"";
        assert!(tributary_config::parse_yaml::<StartPosition>(bad).is_err());
    }

    /// A position as versions before the split stored it (one object).
    const STORED: &str = r#"{"file":"mariadb-bin.000003","pos":1234,"gtid":"0-1-42","ts_ms":1700000000000,"snapshot_incomplete":true,"incremental":{"tables":["shop.users"],"after":{"columns":["id"],"values":[{"int":7}]}}}"#;

    #[test]
    fn a_stored_position_reads_and_writes_the_same_json() {
        let position: CapturePosition<BinlogPosition> = serde_json::from_str(STORED).unwrap();
        assert_eq!(
            position.source,
            BinlogPosition {
                file: "mariadb-bin.000003".into(),
                pos: 1234,
                gtid: Some("0-1-42".into()),
                ts_ms: 1_700_000_000_000,
            }
        );
        assert!(position.snapshot_incomplete);
        let incremental = position.incremental.as_ref().unwrap();
        assert_eq!(incremental.tables, ["shop.users"]);
        let written = serde_json::to_value(&position).unwrap();
        let stored: serde_json::Value = serde_json::from_str(STORED).unwrap();
        assert_eq!(written, stored);
        // Nothing in progress: only the source's fields.
        let plain = serde_json::to_value(CapturePosition::at(position.source)).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({ "file": "mariadb-bin.000003", "pos": 1234, "gtid": "0-1-42", "ts_ms": 1_700_000_000_000_i64 })
        );
    }
}
