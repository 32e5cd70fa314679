//! The history of a `versioned` table: every version of each key with the
//! time it became valid, for reads as of a time.
//!
//! **Layout.** Each partition keeps its versions in a column family of their
//! own, `<table>@<partition>~history` ([`Store`](crate::store::Store)), written
//! in the same `WriteBatch` as the rows and the offset. A version is stored
//! under `key ‖ !valid_from ‖ !offset`: the key's
//! [`key_codec`](tributary_table_api::key_codec) bytes (self-delimiting, and a
//! table's keys all have the same columns), then the time and the record's
//! topic offset, each as 8 order-preserving big-endian bytes, bit-inverted.
//! The first entry at or after `key ‖ !t ‖ !i64::MAX` is therefore the newest
//! version valid at `t` (of two versions valid from the same time, the one
//! later in the topic): one seek answers ([`version_at`]). Its value is a tag
//! and the row JSON, or the tag of a delete ("absent from then on").
//!
//! **Times.** A version is valid from its change's commit time in the source
//! (`source.ts_us`, else `source.ts_ms`; a binlog's is whole seconds), or
//! from the row's time column when the table names one (a delete, which has
//! no new row, takes its commit time). Rows read by a snapshot (`op: r`) are
//! valid from the epoch, as Flink CDC dates snapshot records: the snapshot
//! says what a row held when it was read, not since when, so an as-of read
//! before a row's first streamed change answers with its snapshot row; a row
//! a later (on-demand) snapshot reads for a key that has versions is valid
//! from the snapshot's time. A record without a source block (a plain row, a
//! tombstone) is valid from its Kafka timestamp.
//!
//! **Retention.** A partition's *stream time* is the newest valid-from time
//! it has applied (kept under a meta key with the offset). Reads older than
//! the stream time minus `history` (the horizon) answer
//! [`AsOf::BeyondHistory`](tributary_table_api::AsOf). When a key is written,
//! its versions whose successor became valid before the horizon are deleted,
//! keeping the newest version older than the horizon (it answers reads at the
//! horizon). A key not written again keeps what it had at its last write: at
//! most the versions written within one `history` before it.

use std::fmt;

use serde_json::Value;
use tributary_proto::event_time::{self, EventTimeError, TimeUnit};
use tributary_table_api::RawColumns;

use crate::config::VersionedConfig;

/// Meta key (in the partition's row column family): the partition's stream
/// time, µs since the epoch (i64, big-endian).
pub(crate) const STREAM_TIME_KEY: &[u8] = b"\x00stream_time";

/// Tag of a version that holds a row.
const ROW: u8 = b'R';
/// Tag of a version that says the key is absent (deleted).
const ABSENT: u8 = b'D';

/// How a versioned table dates and keeps its versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VersionRule {
    /// How far back reads answer, µs.
    history_us: i64,
    /// The row column holding each version's time, and its unit for numbers.
    column: Option<(String, TimeUnit)>,
}

/// When a change happened, as its record says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ChangeTime {
    /// Read by a snapshot (`op: r`).
    pub(crate) snapshot: bool,
    /// Commit time in the source, µs (`source.ts_us` or `source.ts_ms`).
    pub(crate) source_us: Option<i64>,
    /// The record's Kafka timestamp, ms.
    pub(crate) record_ms: i64,
}

impl ChangeTime {
    /// The time of a change event's `source` block.
    pub(crate) fn of_source(source: &Value) -> Option<i64> {
        if let Some(us) = source.get("ts_us").and_then(Value::as_i64) {
            return Some(us);
        }
        source.get("ts_ms")?.as_i64()?.checked_mul(1000)
    }
}

/// Why a change's version has no time.
#[derive(Debug, thiserror::Error)]
#[error("versioned table: time column {column:?}: {problem}")]
pub(crate) struct VersionTimeError {
    column: String,
    problem: String,
}

impl VersionRule {
    /// The rule a table's config declares.
    pub(crate) fn of(config: &VersionedConfig) -> Self {
        VersionRule {
            history_us: i64::try_from(config.history.as_micros()).unwrap_or(i64::MAX),
            column: config
                .column
                .clone()
                .map(|c| (c, config.unit.unwrap_or_default())),
        }
    }

    /// How versions are dated, as the store records it (a table whose dating
    /// changes rebuilds its history).
    pub(crate) fn dating(&self) -> String {
        match &self.column {
            None => "source_ts".to_owned(),
            Some((column, unit)) => format!("column {column} ({unit:?})"),
        }
    }

    /// The oldest time reads answer for, given the partition's stream time.
    pub(crate) fn horizon(&self, stream_time: Option<i64>) -> Option<i64> {
        stream_time.map(|t| t.saturating_sub(self.history_us))
    }

    /// When the version `change` makes (`row`: the new row, `None` for a
    /// delete) became valid; `has_versions`: the key has earlier versions.
    /// A row whose time column is null is dated as if no column were named;
    /// one without the column, or with a value that is no time, is an error
    /// (the record is skipped and counted as malformed).
    pub(crate) fn valid_from(
        &self,
        change: ChangeTime,
        row: Option<&[u8]>,
        has_versions: bool,
    ) -> Result<i64, VersionTimeError> {
        if let (Some((column, unit)), Some(row)) = (&self.column, row) {
            let problem = |problem: String| VersionTimeError {
                column: column.clone(),
                problem,
            };
            let selected = RawColumns::select(row, std::slice::from_ref(column))
                .map_err(|e| problem(format!("the row is not a JSON object ({e})")))?;
            match selected.value(0) {
                None => return Err(problem("the row has no such column".into())),
                // A null time (a row never updated): dated as without a column.
                Some(serde_json::Value::Null) => {}
                Some(value) => {
                    return event_time::micros_of(&value, *unit)
                        .map_err(|e: EventTimeError| problem(e.to_string()));
                }
            }
        }
        if change.snapshot && !has_versions {
            return Ok(0);
        }
        Ok(change
            .source_us
            .unwrap_or_else(|| change.record_ms.saturating_mul(1000)))
    }
}

/// Order-preserving, bit-inverted bytes of `n`: larger values sort first.
fn descending(n: i64) -> [u8; 8] {
    (!((n as u64) ^ (1 << 63))).to_be_bytes()
}

fn from_descending(bytes: &[u8]) -> i64 {
    let raw = u64::from_be_bytes(bytes.try_into().expect("8 bytes"));
    ((!raw) ^ (1 << 63)) as i64
}

/// The history key of the version of `key` valid from `valid_from`, written at `offset`.
pub(crate) fn version_key(key: &[u8], valid_from: i64, offset: i64) -> Vec<u8> {
    let mut stored = Vec::with_capacity(key.len() + 16);
    stored.extend_from_slice(key);
    stored.extend_from_slice(&descending(valid_from));
    stored.extend_from_slice(&descending(offset));
    stored
}

/// Where the versions valid at `as_of` start: the first entry at or after it
/// is the newest version of `key` valid then, if it is `key`'s.
pub(crate) fn seek_key(key: &[u8], as_of: i64) -> Vec<u8> {
    version_key(key, as_of, i64::MAX)
}

/// The time and offset of a stored version, if it is a version of `key`.
pub(crate) fn version_of(stored: &[u8], key: &[u8]) -> Option<Stamp> {
    if stored.len() != key.len() + 16 || !stored.starts_with(key) {
        return None;
    }
    let suffix = &stored[key.len()..];
    Some(Stamp {
        valid_from: from_descending(&suffix[..8]),
        offset: from_descending(&suffix[8..]),
    })
}

/// When a version became valid and where it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) valid_from: i64,
    pub(crate) offset: i64,
}

/// The stored value of a version.
pub(crate) fn encode_version(row: Option<&[u8]>) -> Vec<u8> {
    match row {
        Some(row) => {
            let mut value = Vec::with_capacity(row.len() + 1);
            value.push(ROW);
            value.extend_from_slice(row);
            value
        }
        None => vec![ABSENT],
    }
}

/// A stored version's row (`None`: absent from then on), or why it is not one.
pub(crate) fn decode_version(value: &[u8]) -> Result<Option<&[u8]>, CorruptVersion> {
    match value.split_first() {
        Some((&ROW, row)) => Ok(Some(row)),
        Some((&ABSENT, [])) => Ok(None),
        _ => Err(CorruptVersion),
    }
}

/// A stored version that the table did not write.
#[derive(Debug)]
pub(crate) struct CorruptVersion;

impl fmt::Display for CorruptVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a stored version without its tag")
    }
}

/// Which of a key's stored versions retention removes: given their times
/// newest first, the indices of those whose successor became valid before
/// `horizon` (every one after the newest version older than the horizon).
pub(crate) fn expired(valid_from_newest_first: &[i64], horizon: i64) -> std::ops::Range<usize> {
    let len = valid_from_newest_first.len();
    match valid_from_newest_first.iter().position(|t| *t < horizon) {
        Some(kept) => kept + 1..len,
        None => len..len,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_first_entry_at_the_seek_key_is_the_version_valid_then() {
        let key = b"\x06k\x00\x01".as_slice();
        let other = b"\x06l\x00\x01".as_slice();
        // (valid_from, offset) of four versions of `key`, one of the next key.
        let mut stored = [
            version_key(key, 100, 5),
            version_key(key, 200, 6),
            version_key(key, 200, 9), // same time, later in the topic: wins
            version_key(key, 300, 7), // out of order in the topic
            version_key(other, 50, 1),
            version_key(key, -5, 3),
        ];
        stored.sort();
        let at = |t: i64| {
            let seek = seek_key(key, t);
            stored
                .iter()
                .find(|s| s.as_slice() >= seek.as_slice())
                .and_then(|s| version_of(s, key))
        };
        let stamp = |valid_from, offset| Some(Stamp { valid_from, offset });
        assert_eq!(at(99), stamp(-5, 3));
        assert_eq!(at(100), stamp(100, 5));
        assert_eq!(at(199), stamp(100, 5));
        assert_eq!(at(200), stamp(200, 9));
        assert_eq!(at(250), stamp(200, 9));
        assert_eq!(at(i64::MAX), stamp(300, 7));
        assert_eq!(
            at(-6),
            None,
            "before the first version: the next key's entry"
        );
        assert_eq!(version_of(&version_key(other, 1, 1), key), None);
    }

    #[test]
    fn versions_hold_a_row_or_an_absence() {
        assert_eq!(
            decode_version(&encode_version(Some(b"{\"a\":1}"))).unwrap(),
            Some(&b"{\"a\":1}"[..])
        );
        assert_eq!(decode_version(&encode_version(None)).unwrap(), None);
        assert!(decode_version(b"").is_err());
        assert!(decode_version(b"Dx").is_err());
    }

    #[test]
    fn retention_keeps_the_newest_version_older_than_the_horizon() {
        assert_eq!(expired(&[500, 400, 300, 200], 350), 3..4);
        assert_eq!(expired(&[500, 400], 350), 2..2, "nothing older than it");
        assert_eq!(expired(&[300, 200, 100], 350), 1..3);
        assert_eq!(expired(&[], 350), 0..0);
    }

    #[test]
    fn a_version_is_dated_by_its_source_its_column_or_its_record() {
        let by_source = VersionRule {
            history_us: 10,
            column: None,
        };
        let streamed = ChangeTime {
            snapshot: false,
            source_us: Some(7_000),
            record_ms: 9,
        };
        assert_eq!(
            by_source.valid_from(streamed, Some(b"{}"), false).unwrap(),
            7_000
        );
        let snapshot = ChangeTime {
            snapshot: true,
            ..streamed
        };
        assert_eq!(
            by_source.valid_from(snapshot, Some(b"{}"), false).unwrap(),
            0
        );
        assert_eq!(
            by_source.valid_from(snapshot, Some(b"{}"), true).unwrap(),
            7_000,
            "a snapshot of a key with history is dated"
        );
        let plain = ChangeTime {
            source_us: None,
            ..streamed
        };
        assert_eq!(by_source.valid_from(plain, None, true).unwrap(), 9_000);
        assert_eq!(
            ChangeTime::of_source(&json!({"ts_ms": 5, "ts_us": 5_001})),
            Some(5_001)
        );
        assert_eq!(ChangeTime::of_source(&json!({"ts_ms": 5})), Some(5_000));

        let by_column = VersionRule {
            history_us: 10,
            column: Some(("updated_at".into(), TimeUnit::Us)),
        };
        let row = br#"{"id":1,"updated_at":1234567}"#;
        assert_eq!(
            by_column.valid_from(snapshot, Some(row), false).unwrap(),
            1_234_567
        );
        assert_eq!(
            by_column.valid_from(streamed, None, true).unwrap(),
            7_000,
            "a delete is dated by its commit"
        );
        let text = br#"{"updated_at":"1970-01-01T00:00:01Z"}"#;
        assert_eq!(
            by_column.valid_from(streamed, Some(text), true).unwrap(),
            1_000_000
        );
        let missing = by_column
            .valid_from(streamed, Some(br#"{"id":1}"#), true)
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("updated_at") && missing.contains("no such column"),
            "{missing}"
        );
        let null = br#"{"id":1,"updated_at":null}"#;
        assert_eq!(
            by_column.valid_from(streamed, Some(null), true).unwrap(),
            7_000,
            "a null time: the commit's"
        );
        assert_eq!(
            by_column.valid_from(snapshot, Some(null), false).unwrap(),
            0,
            "a null time in a snapshot row: the epoch"
        );
        let bad = by_column
            .valid_from(streamed, Some(br#"{"updated_at":"yesterday"}"#), true)
            .unwrap_err()
            .to_string();
        assert!(bad.contains("yesterday"), "{bad}");
        assert_eq!(by_column.horizon(Some(100)), Some(90));
        assert_eq!(by_column.horizon(None), None);
    }
}
