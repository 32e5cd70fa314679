//! [`MemoryTable`]: a [`Table`] held in a sorted map. It stands in for local and
//! remote tables in the tests of what reads tables (jobs, the lookup API), and
//! passes the same [conformance suite](crate::conformance) they do. A
//! [`versioned`](MemoryTable::versioned) one keeps every version written with
//! a time, for as-of reads.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::LookupError;
use crate::key_codec;
use crate::key_values::{Expect, key_values};
use crate::table::{AsOf, AsOfRead, KeyRange, Table, TableDescription};

/// A failure every lookup of a [`MemoryTable`] answers with, while set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The key's partition is held elsewhere ([`LookupError::NotOwned`]).
    NotOwned {
        /// The partition named in the error.
        partition: i32,
    },
    /// The store cannot answer now ([`LookupError::Unavailable`]).
    Unavailable(String),
}

/// Rows by encoded key: the key's values and the row.
/// Rows by encoded key: the key's values and the row, shared with readers
/// that take it whole ([`Table::get_shared`]).
type Rows = BTreeMap<Vec<u8>, (Vec<Value>, Arc<Value>)>;

/// Versions by encoded key: (valid from, order written, row or `None` for absent).
type Versions = BTreeMap<Vec<u8>, Vec<(i64, u64, Option<Value>)>>;

/// The history of a versioned memory table.
#[derive(Debug, Default)]
struct History {
    /// How far back reads answer, µs.
    keep_us: i64,
    /// The newest time a version became valid.
    newest: Option<i64>,
    versions: Versions,
    written: u64,
}

/// A table in memory, ordered by the encoding of its keys as local tables are.
#[derive(Debug)]
pub struct MemoryTable {
    name: String,
    key_columns: Vec<String>,
    rows: RwLock<Rows>,
    fault: RwLock<Option<Fault>>,
    /// `None`: the table keeps no history.
    history: Option<RwLock<History>>,
}

impl MemoryTable {
    /// An empty table keyed by `key_columns`, in key order.
    pub fn new(name: &str, key_columns: &[&str]) -> Self {
        MemoryTable {
            name: name.to_owned(),
            key_columns: key_columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: RwLock::default(),
            fault: RwLock::default(),
            history: None,
        }
    }

    /// An empty table that keeps each key's versions, answering reads as of
    /// times no older than `history_us` µs before its newest version.
    pub fn versioned(name: &str, key_columns: &[&str], history_us: i64) -> Self {
        MemoryTable {
            history: Some(RwLock::new(History {
                keep_us: history_us,
                ..History::default()
            })),
            ..Self::new(name, key_columns)
        }
    }

    /// Stores `row` as [`upsert`](Self::upsert) does, as the version valid
    /// from `valid_from` (µs since the epoch) in a versioned table.
    pub fn upsert_at(&self, valid_from: i64, row: Value) -> Result<(), LookupError> {
        self.upsert(row.clone())?;
        let key = self.key_of(&row);
        self.record_version(valid_from, &key, Some(row))
    }

    /// Removes the row of `key` as [`delete`](Self::delete) does, as the
    /// version valid from `valid_from` in a versioned table.
    pub fn delete_at(&self, valid_from: i64, key: &Value) -> Result<(), LookupError> {
        self.delete(key)?;
        self.record_version(valid_from, key, None)
    }

    fn record_version(
        &self,
        valid_from: i64,
        key: &Value,
        row: Option<Value>,
    ) -> Result<(), LookupError> {
        let Some(history) = &self.history else {
            return Ok(());
        };
        let (encoded, _) = self.encode(key, Expect::Full)?;
        let mut history = history.write().expect("history lock");
        history.written += 1;
        let written = history.written;
        history.newest = Some(history.newest.map_or(valid_from, |t| t.max(valid_from)));
        let versions = history.versions.entry(encoded).or_default();
        versions.push((valid_from, written, row));
        Ok(())
    }

    /// The key object of `row`: its key columns.
    fn key_of(&self, row: &Value) -> Value {
        let key: Map<String, Value> = self
            .key_columns
            .iter()
            .filter_map(|c| Some((c.clone(), row.get(c)?.clone())))
            .collect();
        Value::Object(key)
    }

    /// Stores `row` (an object holding every key column), replacing the row
    /// with the same key.
    pub fn upsert(&self, row: Value) -> Result<(), LookupError> {
        if !row.is_object() {
            return Err(self.bad_key("a row must be an object of its columns".into()));
        }
        let (encoded, values) = self.encode(&self.key_of(&row), Expect::Full)?;
        self.rows
            .write()
            .expect("rows lock")
            .insert(encoded, (values, Arc::new(row)));
        Ok(())
    }

    /// Removes the row of `key`, if there is one.
    pub fn delete(&self, key: &Value) -> Result<(), LookupError> {
        let (encoded, _) = self.encode(key, Expect::Full)?;
        self.rows.write().expect("rows lock").remove(&encoded);
        Ok(())
    }

    /// From now on every lookup fails with `fault` (`None`: answers again).
    pub fn fail(&self, fault: Option<Fault>) {
        *self.fault.write().expect("fault lock") = fault;
    }

    fn check_fault(&self) -> Result<(), LookupError> {
        let table = self.name.clone();
        match self.fault.read().expect("fault lock").clone() {
            None => Ok(()),
            Some(Fault::NotOwned { partition }) => Err(LookupError::NotOwned { table, partition }),
            Some(Fault::Unavailable(problem)) => Err(LookupError::Unavailable { table, problem }),
        }
    }

    fn bad_key(&self, problem: String) -> LookupError {
        LookupError::BadKey {
            table: self.name.clone(),
            problem,
        }
    }

    /// The encoding of `key` (or of a prefix of it), and its values.
    fn encode(&self, key: &Value, expect: Expect) -> Result<(Vec<u8>, Vec<Value>), LookupError> {
        let values = key_values(&self.name, &self.key_columns, key, expect)?;
        let encoded =
            key_codec::encode(values.iter().copied()).map_err(|e| self.bad_key(e.to_string()))?;
        Ok((encoded, values.into_iter().cloned().collect()))
    }
}

#[async_trait]
impl Table for MemoryTable {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &Value) -> Result<Option<Value>, LookupError> {
        self.check_fault()?;
        let (encoded, _) = self.encode(key, Expect::Full)?;
        let rows = self.rows.read().expect("rows lock");
        Ok(rows.get(&encoded).map(|(_, row)| Value::clone(row)))
    }

    /// The stored row itself, not a copy.
    async fn get_shared(&self, key: &Value) -> Result<Option<Arc<Value>>, LookupError> {
        self.check_fault()?;
        let (encoded, _) = self.encode(key, Expect::Full)?;
        let rows = self.rows.read().expect("rows lock");
        Ok(rows.get(&encoded).map(|(_, row)| row.clone()))
    }

    /// Everything written is applied: every answer is complete.
    async fn get_as_of(&self, key: &Value, as_of: i64) -> Result<AsOfRead, LookupError> {
        self.check_fault()?;
        let Some(history) = &self.history else {
            return Err(LookupError::Unsupported {
                table: self.name.clone(),
                operation: "an as-of lookup (the table keeps no history)",
            });
        };
        let (encoded, _) = self.encode(key, Expect::Full)?;
        let history = history.read().expect("history lock");
        if let Some(horizon) = history.newest.map(|t| t.saturating_sub(history.keep_us))
            && as_of < horizon
        {
            return Ok(AsOfRead::complete(AsOf::BeyondHistory { horizon }));
        }
        let valid = history
            .versions
            .get(&encoded)
            .into_iter()
            .flatten()
            .filter(|(from, _, _)| *from <= as_of)
            .max_by_key(|(from, written, _)| (*from, *written));
        Ok(AsOfRead::complete(match valid {
            Some((_, _, Some(row))) => AsOf::Row(row.clone()),
            _ => AsOf::Absent,
        }))
    }

    async fn scan(
        &self,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<(Value, Value)>, LookupError> {
        self.check_fault()?;
        let (prefix, from, to) = match range {
            KeyRange::Prefix(prefix) => (self.encode(prefix, Expect::Prefix)?.0, None, None),
            KeyRange::Between { from, to } => {
                let bound = |b: &Option<Value>| {
                    b.as_ref()
                        .map(|v| self.encode(v, Expect::Prefix).map(|(e, _)| e))
                        .transpose()
                };
                (Vec::new(), bound(from)?, bound(to)?)
            }
        };
        let start = from.unwrap_or_else(|| prefix.clone());
        if to.as_ref().is_some_and(|to| *to <= start) {
            return Ok(Vec::new()); // an empty range (`BTreeMap::range` would panic)
        }
        let end = to.map_or(Bound::Unbounded, Bound::Excluded);
        let rows = self.rows.read().expect("rows lock");
        Ok(rows
            .range((Bound::Included(start), end))
            .take_while(|(encoded, _)| encoded.starts_with(&prefix))
            .take(limit)
            .map(|(_, (values, row))| {
                let key: Map<String, Value> = self
                    .key_columns
                    .iter()
                    .cloned()
                    .zip(values.clone())
                    .collect();
                (Value::Object(key), Value::clone(row))
            })
            .collect())
    }

    async fn describe(&self) -> TableDescription {
        TableDescription {
            name: self.name.clone(),
            kind: "memory",
            topic: String::new(),
            key_columns: self.key_columns.clone(),
            partition_count: 0,
            global: false,
            rows_estimate: self.rows.read().expect("rows lock").len() as u64,
            partitions: Vec::new(),
        }
    }
}
