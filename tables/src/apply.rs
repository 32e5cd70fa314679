//! What one change record does to the store: its key normalised
//! ([`record_key`]) and encoded ([`key_codec`]), its value read as a change
//! event or a plain row, and the row written or deleted in the batch. A global
//! table's keyspace keeps the version of the partition that wrote a key last
//! ([`global_rows`](crate::global_rows)); a partitioned table's record is
//! checked against the table's partitioner; placeholders of values the
//! source did not send are filled from the held row where the table asks
//! ([`unavailable_fill`]). No Kafka here: the materializer
//! hands records over as [`Record`]s, and the table conformance suite applies
//! its changes through the same path.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tributary_proto::debezium_json;
use tributary_proto::lsn::Lsn;
use tributary_proto::unavailable::may_hold_unavailable;
use tributary_table_api::key_codec;

use crate::applied_log::{Mark, WalChange};
use crate::error::TableError;
use crate::global_rows::Owner;
use crate::history::{ChangeTime, Stamp, VersionRule, VersionTimeError};
use crate::local_table::{Partitioning, SharedShape};
use crate::partition_check;
use crate::record_key::{self, KeyShape};
use crate::store::{ApplyBatch, Keyspace};
use crate::unavailable_fill::{self, Filled};

/// How a table keeps its rows.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// `None`: a global table (one keyspace); otherwise where keys belong.
    pub(crate) partitioning: Option<Partitioning>,
    /// Partitions of its topic.
    pub(crate) partitions: u32,
    /// Placeholders of values the source did not send are filled from the
    /// held row ([`unavailable_fill`]).
    pub(crate) fill_unavailable: bool,
    /// A versioned table keeps each key's versions ([`history`](crate::history)).
    pub(crate) versioned: Option<VersionRule>,
    /// The key columns declared for the table (config `key:`, or a SQL job's
    /// `CREATE TABLE … PRIMARY KEY`): records keyed otherwise stop it.
    pub(crate) key: Option<Vec<String>>,
}

/// What applying one record did.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// The source position the record names (GTID, streamed WAL change).
    pub(crate) mark: Option<Mark>,
    /// The partition the table's partitioner gives the key, when not the record's.
    pub(crate) misplaced: Option<i32>,
    /// A global table kept a newer version of the key from another partition.
    pub(crate) superseded: bool,
    /// Placeholders of values the source did not send, filled or left.
    pub(crate) unavailable: Filled,
    /// Versions of the key that retention removed.
    pub(crate) versions_removed: usize,
}

/// Why a record cannot be applied (it is skipped and counted).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unapplicable {
    /// No key at all.
    #[error(
        "record has no key (a table captured without a primary key has null keys; \
         give it key columns with capture's message_key_columns)"
    )]
    NoKey,
    /// A key that is not a table key.
    #[error(transparent)]
    Key(#[from] record_key::RecordKeyError),
    /// Key values that cannot be encoded.
    #[error("key: {0}")]
    KeyValues(#[from] key_codec::KeyCodecError),
    /// A value that is not JSON.
    #[error("value is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// JSON that is neither a change event nor a row.
    #[error(transparent)]
    Value(#[from] tributary_proto::CodecError),
    /// A versioned table cannot tell when the version became valid.
    #[error(transparent)]
    VersionTime(#[from] VersionTimeError),
}

/// A change record, as the materializer hands it over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record<'a> {
    /// The partition it was read from.
    pub(crate) partition: i32,
    /// Its key bytes.
    pub(crate) key: Option<&'a [u8]>,
    /// Its value bytes (`None`: a tombstone).
    pub(crate) payload: Option<&'a [u8]>,
    /// Its timestamp (ms), which orders a global table's versions of a key.
    pub(crate) timestamp_ms: i64,
    /// Its offset, which orders a versioned table's versions of one time.
    pub(crate) offset: i64,
}

/// Applies records to batches, remembering how each table partition's keys
/// are written (a new shape is stored with the batch that first shows it).
#[derive(Debug, Default)]
pub(crate) struct Applier {
    known_shapes: HashMap<String, HashMap<i32, KeyShape>>,
    /// Versioned tables: the key a partition's last record deleted by a change
    /// event (the tombstone that follows it makes no version).
    deleted: HashMap<String, HashMap<i32, Vec<u8>>>,
}

impl Applier {
    /// Adds one record of `table` to the batch. The outer error is a storage
    /// failure (fatal); the inner one a record that cannot be applied (skipped).
    /// A versioned table's version advances `stream_time`, its partition's.
    pub(crate) fn apply(
        &mut self,
        shared_shape: &SharedShape,
        batch: &mut ApplyBatch<'_>,
        table: &str,
        layout: &Layout,
        record: Record<'_>,
        stream_time: &mut Option<i64>,
    ) -> Result<Result<Applied, Unapplicable>, TableError> {
        let partition = record.partition;
        let Some(raw_key) = record.key else {
            return Ok(Err(Unapplicable::NoKey));
        };
        let key = match record_key::parse(raw_key) {
            Ok(key) => key,
            Err(reason) => return Ok(Err(reason.into())),
        };
        let known = self.known_shapes.get(table).and_then(|t| t.get(&partition));
        // Members in another order are the same key: the table keeps its column
        // order (so a key is stored once), and lookups write keys in that order.
        let key = match (known, &layout.key) {
            (Some(shape), _) => key.in_order_of(&shape.columns),
            // A declared key orders the columns (joins give its values in that order).
            (None, Some(declared)) => key.in_order_of(declared),
            (None, None) => key,
        };
        if known != Some(&key.shape) {
            if let Some(declared) = &layout.key
                && *declared != key.shape.columns
            {
                return Err(TableError::KeyMismatch {
                    table: table.to_owned(),
                    partition,
                    offset: record.offset,
                    declared: declared.clone(),
                    found: key.shape.columns.clone(),
                });
            }
            batch.key_shape(table, partition, &key.shape)?;
            // Lookups write keys as the producer now does (a schema wrapper added,
            // integers quoted), without waiting for a restart.
            shared_shape.store(Some(Arc::new(key.shape.clone())));
            self.known_shapes
                .entry(table.to_owned())
                .or_default()
                .insert(partition, key.shape.clone());
        }
        let encoded = match key_codec::encode(&key.values) {
            Ok(encoded) => encoded,
            Err(e) => return Ok(Err(e.into())),
        };
        let mut applied = Applied::default();
        let mut time = ChangeTime {
            record_ms: record.timestamp_ms,
            ..ChangeTime::default()
        };
        let row = match record.payload {
            None => None, // a tombstone
            Some(payload) => match row_of(payload) {
                Ok(change) => {
                    applied.mark = change.mark;
                    time.snapshot = change.snapshot;
                    time.source_us = change.source_us;
                    change.row
                }
                Err(reason) => return Ok(Err(reason)),
            },
        };
        let keyspace = match layout.partitioning {
            None => Keyspace::Global,
            Some(_) => Keyspace::Partition(partition),
        };
        let row = match row {
            Some(row) if layout.fill_unavailable && may_hold_unavailable(&row) => {
                let held = batch.held_row(table, keyspace, &encoded)?;
                let (row, counts) = unavailable_fill::fill(row, held.as_deref());
                applied.unavailable = counts;
                Some(row)
            }
            row => row,
        };
        let valid_from = match &layout.versioned {
            Some(rule) => {
                let tombstone = record.payload.is_none();
                let version = VersionOf {
                    table,
                    partition,
                    offset: record.offset,
                    key: &encoded,
                    time,
                    row: row.as_deref(),
                    tombstone,
                };
                match self.valid_from(batch, rule, version)? {
                    Ok(t) => t.map(|t| (rule, t)),
                    Err(reason) => return Ok(Err(reason.into())),
                }
            }
            None => None,
        };
        match layout.partitioning {
            None => {
                let owner = Owner {
                    partition,
                    timestamp: record.timestamp_ms,
                };
                applied.superseded = !batch.apply_global(table, &encoded, owner, row.as_deref())?;
                if applied.superseded {
                    // Not written: its placeholders are not the table's.
                    applied.unavailable = Filled::default();
                }
            }
            Some(partitioning) => {
                let expected =
                    partition_check::expected_partition(partitioning, &key, layout.partitions);
                if expected != partition {
                    applied.misplaced = Some(expected);
                }
                match &row {
                    Some(row) => batch.upsert(table, partition, &encoded, row)?,
                    None => batch.delete(table, partition, &encoded)?,
                }
                if let Some((rule, valid_from)) = valid_from {
                    let newest = stream_time.map_or(valid_from, |t| t.max(valid_from));
                    *stream_time = Some(newest);
                    if let Some(horizon) = rule.horizon(Some(newest)) {
                        // Before the put: a version put again (a replay) stays.
                        applied.versions_removed =
                            batch.trim_versions(table, partition, &encoded, horizon)?;
                    }
                    let stamp = Stamp {
                        valid_from,
                        offset: record.offset,
                    };
                    batch.put_version(table, partition, &encoded, stamp, row.as_deref())?;
                }
            }
        }
        if layout.fill_unavailable && !applied.superseded {
            batch.remember(table, keyspace, &encoded, row);
        }
        Ok(Ok(applied))
    }
}

/// A record of a versioned table, as its version is dated.
struct VersionOf<'r> {
    table: &'r str,
    partition: i32,
    offset: i64,
    key: &'r [u8],
    time: ChangeTime,
    row: Option<&'r [u8]>,
    tombstone: bool,
}

impl Applier {
    /// When the version a record makes became valid; `None` when it makes
    /// none: the tombstone right after a change event's delete of the key
    /// (the record before it in the partition: applied by this applier, or
    /// stored) says nothing new, and is dated by when it was produced, not
    /// committed.
    fn valid_from(
        &mut self,
        batch: &mut ApplyBatch<'_>,
        rule: &VersionRule,
        record: VersionOf<'_>,
    ) -> Result<Result<Option<i64>, VersionTimeError>, TableError> {
        let VersionOf {
            table,
            partition,
            key,
            ..
        } = record;
        let last_deleted = self
            .deleted
            .get_mut(table)
            .and_then(|p| p.remove(&partition));
        if record.tombstone {
            if last_deleted.as_deref() == Some(key)
                || batch.deleted_at(table, partition, key, record.offset - 1)?
            {
                return Ok(Ok(None));
            }
        } else if record.row.is_none() {
            self.deleted
                .entry(table.to_owned())
                .or_default()
                .insert(partition, key.to_vec());
        }
        // A snapshot's row of a key with history is not from the epoch.
        let dated = record.time.snapshot && batch.has_versions(table, partition, key)?;
        Ok(rule.valid_from(record.time, record.row, dated).map(Some))
    }
}

/// What a record value does to its row.
#[derive(Debug, PartialEq)]
struct RowChange {
    /// The row JSON to store; `None` deletes.
    row: Option<Vec<u8>>,
    /// The source position of a change event.
    mark: Option<Mark>,
    /// A row read by a snapshot (`op: r`).
    snapshot: bool,
    /// The change's commit time in the source, µs.
    source_us: Option<i64>,
}

/// The row a record value stores and the source position it comes from.
fn row_of(payload: &[u8]) -> Result<RowChange, Unapplicable> {
    let value: Value = serde_json::from_slice(payload)?;
    // Neither a change event nor one wrapped with its schema.
    let plain = value.as_object().is_some_and(|m| {
        let wrapped = m.contains_key("schema") && m.contains_key("payload");
        !(m.contains_key("op") || wrapped)
    });
    let (mut mark, mut snapshot, mut source_us) = (None, false, None);
    if !plain {
        let event = value.get("payload").unwrap_or(&value);
        snapshot = event.get("op").and_then(Value::as_str) == Some("r");
        if let Some(source) = event.get("source") {
            mark = mark_of(source);
            source_us = ChangeTime::of_source(source);
        }
    }
    let row = match debezium_json::row_after(value)? {
        // A plain row is stored as it came.
        Some(_) if plain => Some(payload.to_vec()),
        Some(row) => Some(serde_json::to_vec(&row).expect("JSON serializes")),
        None => None,
    };
    Ok(RowChange {
        row,
        mark,
        snapshot,
        source_us,
    })
}

/// The position a change event's `source` block names: a MariaDB/MySQL
/// GTID, or a streamed PostgreSQL change (snapshot rows, read at the
/// snapshot's point in any order, name none).
fn mark_of(source: &Value) -> Option<Mark> {
    if let Some(gtid) = source.get("gtid").and_then(Value::as_str) {
        return gtid.parse().ok().map(Mark::Gtid);
    }
    let lsn = source.get("lsn")?.as_u64()?;
    if source.get("snapshot").and_then(Value::as_str) != Some("false") {
        return None;
    }
    let xid = source.get("txId")?.as_u64()?;
    let last_commit = debezium_json::last_commit_lsn(source).unwrap_or(0);
    Some(Mark::Wal(WalChange {
        lsn: Lsn(lsn.max(last_commit)),
        // pgoutput sends 32 bits; a writer's pg_current_xact_id() has the epoch above.
        xid: xid as u32,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_from_envelopes_plain_rows_and_bad_values() {
        let row = |s: &str| row_of(s.as_bytes()).map(|c| c.row);
        assert_eq!(
            row(r#"{"op":"c","after":{"id":1},"before":null}"#)
                .unwrap()
                .unwrap(),
            br#"{"id":1}"#
        );
        assert_eq!(
            row(r#"{"op":"u","before":{"id":1},"after":{"id":1,"x":2}}"#)
                .unwrap()
                .unwrap(),
            br#"{"id":1,"x":2}"#
        );
        assert_eq!(
            row(r#"{"op":"d","before":{"id":1},"after":null}"#).unwrap(),
            None
        );
        assert_eq!(
            row(r#"{"schema":{},"payload":{"op":"r","after":{"id":3}}}"#)
                .unwrap()
                .unwrap(),
            br#"{"id":3}"#
        );
        assert_eq!(
            row(r#"{"id":5,"name":"plain"}"#).unwrap().unwrap(),
            br#"{"id":5,"name":"plain"}"#
        );
        assert_eq!(row("null").unwrap(), None);
        assert!(
            row(r#"{"op":"x"}"#)
                .unwrap_err()
                .to_string()
                .contains("unknown op")
        );
        assert!(row(r#"{"op":"c","after":null}"#).is_err());
        assert!(row("[1]").is_err());
        assert!(matches!(row("{oops"), Err(Unapplicable::NotJson(_))));
    }

    /// Applies `records` (value, Kafka timestamp ms) of key `{"id":1}`, from
    /// `first_offset` on, to a table versioned by commit time, in one batch
    /// (a fresh `applier` is one after a restart).
    fn apply_versioned(
        store: &crate::store::Store,
        applier: &mut Applier,
        stream_time: &mut Option<i64>,
        records: &[(Option<&str>, i64)],
        first_offset: i64,
    ) {
        let config = crate::TablesConfig::parse(
            "data_dir: /x\nkafka: { brokers: b }\ntables: [{ name: t, topic: t, versioned: { history: 1d } }]\n",
        )
        .unwrap();
        let layout = Layout {
            partitioning: Some(Partitioning::default()),
            partitions: 1,
            fill_unavailable: false,
            versioned: config.tables[0].versioned.as_ref().map(VersionRule::of),
            key: None,
        };
        let shape = SharedShape::default();
        let mut batch = store.batch();
        for (i, (payload, timestamp_ms)) in records.iter().enumerate() {
            let record = Record {
                partition: 0,
                key: Some(br#"{"id":1}"#),
                payload: payload.map(str::as_bytes),
                timestamp_ms: *timestamp_ms,
                offset: first_offset + i as i64,
            };
            applier
                .apply(&shape, &mut batch, "t", &layout, record, stream_time)
                .unwrap()
                .unwrap();
        }
        batch.commit().unwrap();
    }

    #[test]
    fn records_keyed_otherwise_than_the_declared_key_stop_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &crate::config::RocksDbConfig::default())
            .unwrap();
        let layout = Layout {
            partitioning: Some(Partitioning::default()),
            partitions: 1,
            fill_unavailable: false,
            versioned: None,
            key: Some(vec!["sku".into(), "region".into()]),
        };
        let (shape, mut applier, mut time) = (SharedShape::default(), Applier::default(), None);
        let mut batch = store.batch();
        let mut apply = |key: &'static [u8], offset| {
            let record = Record {
                partition: 0,
                key: Some(key),
                payload: Some(br#"{"sku":"a","region":"eu","qty":1}"#),
                timestamp_ms: 0,
                offset,
            };
            applier.apply(&shape, &mut batch, "stock", &layout, record, &mut time)
        };
        // The declared columns, in any order (the first as the key of a
        // restarted table, in another order than declared): applied.
        assert!(apply(br#"{"region":"eu","sku":"a"}"#, 0).unwrap().is_ok());
        assert_eq!(
            shape.load().as_ref().unwrap().columns,
            ["sku", "region"],
            "kept in the declared order"
        );
        assert!(apply(br#"{"sku":"b","region":"eu"}"#, 1).unwrap().is_ok());
        let error = apply(br#"{"sku":"a"}"#, 2).unwrap_err().to_string();
        assert_eq!(
            error,
            "table stock: the record at partition 0 offset 2 is keyed by [\"sku\"], not by the \
             declared key [\"sku\", \"region\"]: fix the declared key (tables config `key:`, or \
             the SQL job's CREATE TABLE … PRIMARY KEY) or the topic's keys"
        );
    }

    #[test]
    fn the_tombstone_after_a_delete_event_makes_no_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &crate::config::RocksDbConfig::default())
            .unwrap();
        let event = |op: &str, ts_ms: i64| {
            let row = if op == "d" { "null" } else { r#"{"id":1}"# };
            format!(
                r#"{{"op":"{op}","before":{{"id":1}},"after":{row},"source":{{"ts_ms":{ts_ms}}}}}"#
            )
        };
        let (c1, d5, c7) = (event("c", 1_000), event("d", 5_000), event("c", 7_000));
        let mut stream_time = None;
        // The tombstone is produced (timestamp 20 s) after the re-insert's commit (7 s).
        apply_versioned(
            &store,
            &mut Applier::default(),
            &mut stream_time,
            &[
                (Some(&c1), 0),
                (Some(&d5), 0),
                (None, 20_000),
                (Some(&c7), 0),
            ],
            0,
        );
        // A delete committed at 30 s; its tombstone (50 s) comes after a restart,
        // followed by a re-insert committed at 40 s.
        let (d30, c40) = (event("d", 30_000), event("c", 40_000));
        apply_versioned(
            &store,
            &mut Applier::default(),
            &mut stream_time,
            &[(Some(&d30), 0)],
            4,
        );
        apply_versioned(
            &store,
            &mut Applier::default(),
            &mut stream_time,
            &[(None, 50_000), (Some(&c40), 0)],
            5,
        );
        let key = key_codec::encode([&serde_json::json!(1)]).unwrap();
        let cf = crate::store::history_cf_name("t", 0);
        let at = |ms: i64| {
            store
                .version_at(&cf, &key, ms * 1000, |v| {
                    crate::history::decode_version(v).unwrap().is_some()
                })
                .unwrap()
        };
        assert_eq!(at(6_000), Some(false), "deleted at 5 s");
        assert_eq!(
            at(21_000),
            Some(true),
            "re-inserted at 7 s, whatever the tombstone's time"
        );
        assert_eq!(at(35_000), Some(false), "deleted at 30 s");
        assert_eq!(
            at(60_000),
            Some(true),
            "re-inserted at 40 s, after a restart too"
        );
        // A delete committed at 50 s arrives after an insert committed at 60 s;
        // its tombstone (100 s) comes after a restart.
        let (c60, d50) = (event("c", 60_000), event("d", 50_000));
        apply_versioned(
            &store,
            &mut Applier::default(),
            &mut stream_time,
            &[(Some(&c60), 0), (Some(&d50), 0)],
            7,
        );
        apply_versioned(
            &store,
            &mut Applier::default(),
            &mut stream_time,
            &[(None, 100_000)],
            9,
        );
        assert_eq!(at(55_000), Some(false), "deleted at 50 s");
        assert_eq!(
            at(150_000),
            Some(true),
            "inserted at 60 s: the tombstone deletes nothing"
        );
        assert_eq!(stream_time, Some(60_000_000));
    }

    #[test]
    fn change_events_say_when_they_were_committed_and_whether_a_snapshot_read_them() {
        let change = |s: &str| {
            let c = row_of(s.as_bytes()).unwrap();
            (c.snapshot, c.source_us)
        };
        assert_eq!(
            change(r#"{"op":"u","after":{"id":1},"source":{"ts_ms":5,"ts_us":5001}}"#),
            (false, Some(5001))
        );
        assert_eq!(
            change(r#"{"schema":{},"payload":{"op":"r","after":{"id":1},"source":{"ts_ms":7}}}"#),
            (true, Some(7000))
        );
        assert_eq!(
            change(r#"{"id":1,"source":{"ts_ms":7}}"#),
            (false, None),
            "a plain row"
        );
    }

    #[test]
    fn change_events_carry_their_source_gtid() {
        let gtid = |s: &str| match row_of(s.as_bytes()).unwrap().mark {
            Some(Mark::Gtid(g)) => Some(g.to_string()),
            _ => None,
        };
        assert_eq!(
            gtid(r#"{"op":"c","after":{"id":1},"source":{"gtid":"0-1-42"}}"#).as_deref(),
            Some("0-1-42")
        );
        assert_eq!(
            gtid(
                r#"{"schema":{},"payload":{"op":"d","before":{"id":1},"source":{"gtid":"2-3-4"}}}"#
            )
            .as_deref(),
            Some("2-3-4")
        );
        let mysql = r#"{"op":"u","after":{"id":1},"source":{"gtid":"3E11FA47-71CA-11E1-9E33-C80AA9429562:23"}}"#;
        assert_eq!(
            gtid(mysql).as_deref(),
            Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:23"),
            "a MySQL GTID"
        );
        assert_eq!(gtid(r#"{"op":"r","after":{"id":1},"source":{}}"#), None);
        assert_eq!(
            gtid(r#"{"id":1,"source":{"gtid":"0-1-1"}}"#),
            None,
            "a plain row"
        );
    }

    #[test]
    fn streamed_postgresql_changes_carry_their_wal_position() {
        let mark = |source: &str| {
            row_of(format!(r#"{{"op":"u","after":{{"id":1}},"source":{source}}}"#).as_bytes())
                .unwrap()
                .mark
        };
        let wal = |lsn, xid| Some(Mark::Wal(WalChange { lsn: Lsn(lsn), xid }));
        assert_eq!(
            mark(
                r#"{"connector":"postgresql","snapshot":"false","txId":751,"lsn":900,"sequence":"[\"880\",\"900\"]"}"#
            ),
            wal(900, 751)
        );
        // A change written before the previous transaction committed.
        assert_eq!(
            mark(r#"{"snapshot":"false","txId":752,"lsn":850,"sequence":"[\"950\",\"850\"]"}"#),
            wal(950, 752)
        );
        assert_eq!(
            mark(r#"{"snapshot":"false","txId":4294967297,"lsn":10,"sequence":"[null,\"10\"]"}"#),
            wal(10, 1),
            "an xid with its epoch"
        );
        for snapshot in ["true", "first", "last", "incremental"] {
            let source = format!(r#"{{"snapshot":"{snapshot}","txId":7,"lsn":10}}"#);
            assert_eq!(mark(&source), None, "{snapshot}");
        }
    }
}
