//! The [`Table`] trait: what the enricher and the gRPC API look rows up through.
//!
//! Keys and rows are JSON values. A key is given as an object of the key
//! columns (`{"id": 7}`, the same object as the Kafka record key), as an array
//! of key values in key order, or, for single-column keys, as the bare value
//! ([`key_values`](crate::key_values)). Scans return rows in the order of the
//! [`key_codec`](crate::key_codec) encoding of their keys.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use crate::error::LookupError;
use crate::raw_columns::RawColumns;

/// State of one partition held by an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionState {
    /// Kafka partition.
    pub partition: i32,
    /// Offset of the next record to apply.
    pub next_offset: i64,
    /// The topic's end when the partition was assigned (the readiness target).
    pub end_at_assignment: Option<i64>,
    /// Caught up with `end_at_assignment`.
    pub ready: bool,
    /// RocksDB's row estimate (0 for a global table, whose rows share one
    /// keyspace: see [`TableDescription::rows_estimate`]).
    pub rows_estimate: u64,
    /// Records that arrived on another partition than the table's partitioner
    /// gives their key (lookups would miss them; the partition is not ready).
    pub misplaced_records: u64,
    /// Records behind the topic's end as last observed.
    pub lag: i64,
    /// The topic's end as last observed.
    pub latest_end: Option<i64>,
    /// The newest source GTID applied per replication domain.
    pub applied_gtids: Vec<String>,
    /// PostgreSQL sources: the newest WAL position a streamed change proved
    /// passed (`16/B374D848`).
    pub applied_lsn: Option<String>,
}

/// What a table is and how far it has got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableDescription {
    /// Table name.
    pub name: String,
    /// `local` or `remote`.
    pub kind: &'static str,
    /// Source topic.
    pub topic: String,
    /// Key column names in key order (empty until the first record is seen).
    pub key_columns: Vec<String>,
    /// Partitions of the source topic.
    pub partition_count: u32,
    /// Every instance holds every row (a `global` local table).
    pub global: bool,
    /// RocksDB's estimate of the rows held here.
    pub rows_estimate: u64,
    /// Partitions held here.
    pub partitions: Vec<PartitionState>,
}

/// Which rows a scan returns. Bounds are leading key values, given like keys:
/// an object of leading key columns, an array of leading values, or a bare value.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyRange {
    /// Rows whose leading key columns equal these values (`null`: every row).
    Prefix(Value),
    /// Rows with `from <= key < to` in key order (`None`: unbounded).
    Between {
        /// Lower bound, inclusive.
        from: Option<Value>,
        /// Upper bound, exclusive.
        to: Option<Value>,
    },
}

impl KeyRange {
    /// Every row.
    pub fn all() -> Self {
        KeyRange::Prefix(Value::Null)
    }
}

/// A table rows can be looked up in.
#[async_trait]
pub trait Table: Send + Sync {
    /// The table's name.
    fn name(&self) -> &str;

    /// The row with this key, if any.
    async fn get(&self, key: &Value) -> Result<Option<Value>, LookupError>;

    /// The row with this key, shared: a table that keeps rows in memory (a remote
    /// table's cache) hands out its own copy instead of cloning the row.
    async fn get_shared(&self, key: &Value) -> Result<Option<Arc<Value>>, LookupError> {
        Ok(self.get(key).await?.map(Arc::new))
    }

    /// The values of `columns` in the row with this key: a table that has to
    /// decode rows may skip the other columns; one that keeps rows in memory
    /// (a remote table's cache) hands out the shared row.
    async fn get_columns(
        &self,
        key: &Value,
        _columns: &[String],
    ) -> Result<Option<Columns>, LookupError> {
        Ok(self.get_shared(key).await?.map(Columns::Shared))
    }

    /// The rows of several keys, in the same order.
    async fn multi_get(&self, keys: &[Value]) -> Result<Vec<Option<Value>>, LookupError> {
        let mut rows = Vec::with_capacity(keys.len());
        for key in keys {
            rows.push(self.get(key).await?);
        }
        Ok(rows)
    }

    /// The row this key had at `as_of` (microseconds since the Unix epoch):
    /// the version valid then, in a table that keeps its history (a
    /// `versioned` local table), with how far in time the table held the
    /// key's versions when it answered. Other tables refuse.
    async fn get_as_of(&self, _key: &Value, _as_of: i64) -> Result<AsOfRead, LookupError> {
        Err(LookupError::Unsupported {
            table: self.name().to_owned(),
            operation: "an as-of lookup (the table keeps no history: declare it `versioned`)",
        })
    }

    /// Up to `limit` `(key, row)` pairs within `range`, in key order.
    async fn scan(
        &self,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<(Value, Value)>, LookupError>;

    /// What the table holds and how far it has got.
    async fn describe(&self) -> TableDescription;
}

/// A versioned table's answer for a key as of a time (`R`: the row, decoded
/// or as its stored bytes), and whether a later change could still alter it.
#[derive(Debug, Clone, PartialEq)]
pub struct AsOfRead<R = Value> {
    /// The version valid then.
    pub answer: AsOf<R>,
    /// How far in time the table held the key's versions when it answered:
    /// the newest time a version of the key's partition became valid, or
    /// `i64::MAX` once the partition had applied everything its topic held
    /// when last checked (no later version can be missing). An answer for a
    /// time after it may change as the table catches up.
    pub complete_until: i64,
}

impl<R> AsOfRead<R> {
    /// An answer no later change can alter (a table that applies every
    /// change before it answers).
    pub fn complete(answer: AsOf<R>) -> Self {
        AsOfRead {
            answer,
            complete_until: i64::MAX,
        }
    }
}

/// What a versioned table answers for a key as of a time (`R`: the row,
/// decoded or as its stored bytes).
#[derive(Debug, Clone, PartialEq)]
pub enum AsOf<R = Value> {
    /// The row valid at that time.
    Row(R),
    /// No row then: the key was deleted, or not written yet.
    Absent,
    /// The time is older than the history the table keeps: versions before
    /// `horizon` (microseconds since the Unix epoch) may have been removed.
    BeyondHistory {
        /// The oldest time the table answers for now.
        horizon: i64,
    },
}

/// The selected columns of a row, as [`Table::get_columns`] finds them.
#[derive(Debug, Clone, PartialEq)]
pub enum Columns {
    /// Their JSON text, in the order asked for, as the row had it.
    Raw(Arc<RawColumns>),
    /// The whole row, shared: the columns are read from it by name.
    Shared(Arc<Value>),
}

impl Columns {
    /// The value of the `i`th column asked for, `name`: borrowed from a
    /// shared row, or decoded from its text.
    pub fn get(&self, i: usize, name: &str) -> Option<Cow<'_, Value>> {
        match self {
            Columns::Raw(columns) => columns.value(i).map(Cow::Owned),
            Columns::Shared(row) => {
                // Rows have few columns: a scan beats hashing the name.
                let mut columns = row.as_object()?.iter();
                let (_, value) = columns.find(|(n, _)| *n == name)?;
                Some(Cow::Borrowed(value))
            }
        }
    }

    /// Appends the JSON text of the `i`th column asked for, `name` (`null`
    /// when the row lacks it): copied as the row had it, when it can be.
    pub fn write_json(&self, i: usize, name: &str, out: &mut Vec<u8>) {
        match self {
            Columns::Raw(columns) => {
                out.extend_from_slice(columns.json(i).unwrap_or("null").as_bytes());
            }
            Columns::Shared(_) => {
                let value = self.get(i, name);
                serde_json::to_writer(out, &value).expect("JSON values serialize");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn columns_are_read_by_position_or_from_the_shared_row_by_name() {
        let shared = Columns::Shared(Arc::new(json!({"a": 1, "b": "x"})));
        assert_eq!(shared.get(0, "b").as_deref(), Some(&json!("x")));
        assert_eq!(shared.get(1, "a").as_deref(), Some(&json!(1)));
        assert_eq!(shared.get(0, "absent"), None);
        assert_eq!(Columns::Shared(Arc::new(json!([1]))).get(0, "a"), None);
        let names = ["absent", "b"].map(String::from);
        let raw = RawColumns::select(br#"{"a": 1, "b": 2.50}"#, &names).unwrap();
        let raw = Columns::Raw(Arc::new(raw));
        assert_eq!(raw.get(0, "absent"), None);
        assert_eq!(raw.get(1, "b").as_deref(), Some(&json!(2.5)));
        for columns in [&shared, &raw] {
            let mut out = Vec::new();
            columns.write_json(0, "absent", &mut out);
            out.push(b' ');
            columns.write_json(1, "b", &mut out);
            let expected = if columns == &raw {
                "null 2.50"
            } else {
                r#"null "x""#
            };
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }
}
