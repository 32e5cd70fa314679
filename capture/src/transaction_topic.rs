//! Debezium's transaction metadata topic (`<server_name>.transaction`, with
//! `events.provide.transaction.metadata`): a `BEGIN` record before the first
//! change event of each source transaction that has any, an `END` record with
//! its event counts, in all and per table (`data_collections`), after its last.
//!
//! Pure bookkeeping: [`TransactionTopic`] turns the events and commits the
//! writer sees into records; the writer sends them.

use std::sync::Arc;

use serde_json::json;
use tributary_proto::ChangeEvent;

use crate::connect_schema;

/// One record of the topic, as JSON (with its Connect schemas when records carry them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TransactionRecord {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
}

/// The transaction whose events are being written.
#[derive(Debug)]
struct Open {
    id: Arc<str>,
    ts_ms: i64,
    events: u64,
    /// `db.table` and its events, in the order the tables first appear.
    per_table: Vec<(String, u64)>,
}

/// Where the topic's records come from.
#[derive(Debug, Default)]
pub(crate) struct TransactionTopic {
    open: Option<Open>,
    /// Records carry the JsonConverter's Connect schemas.
    schemas: bool,
}

impl TransactionTopic {
    /// With or without Connect schemas (`converter.schemas.enable`).
    pub(crate) fn new(schemas: bool) -> Self {
        TransactionTopic {
            open: None,
            schemas,
        }
    }

    /// The records to write before `event`: a `BEGIN` when it starts a
    /// transaction (after the `END` of one left open, which a commit closes
    /// first in a well-formed stream). Snapshot events belong to none.
    pub(crate) fn before_event(&mut self, event: &ChangeEvent) -> Vec<TransactionRecord> {
        let Some(txn) = &event.transaction else {
            return Vec::new();
        };
        let mut records = Vec::new();
        if self.open.as_ref().is_some_and(|open| open.id != txn.id) {
            records.extend(self.on_commit());
        }
        if self.open.is_none() {
            self.open = Some(Open {
                id: txn.id.clone(),
                ts_ms: event.source.ts_ms,
                events: 0,
                per_table: Vec::new(),
            });
            let value = json!({
                "status": "BEGIN",
                "id": &*txn.id,
                "event_count": null,
                "data_collections": null,
                "ts_ms": event.source.ts_ms,
            });
            records.push(self.record(&txn.id, &value));
        }
        let open = self.open.as_mut().expect("opened above");
        open.events += 1;
        let table = format!("{}.{}", event.source.db, event.source.table);
        match open.per_table.iter_mut().find(|(name, _)| *name == table) {
            Some((_, count)) => *count += 1,
            None => open.per_table.push((table, 1)),
        }
        records
    }

    /// The `END` record of the transaction a commit closes, if it had events.
    pub(crate) fn on_commit(&mut self) -> Option<TransactionRecord> {
        let open = self.open.take()?;
        let collections: Vec<serde_json::Value> = open
            .per_table
            .iter()
            .map(|(table, count)| json!({ "data_collection": table, "event_count": count }))
            .collect();
        let value = json!({
            "status": "END",
            "id": &*open.id,
            "event_count": open.events,
            "data_collections": collections,
            "ts_ms": open.ts_ms,
        });
        Some(self.record(&open.id, &value))
    }

    fn record(&self, id: &str, value: &serde_json::Value) -> TransactionRecord {
        let key = json!({ "id": id });
        let (key_schema, value_schema) = connect_schema::transaction_topic_schemas();
        let wrap = |schema: &serde_json::Value, payload: serde_json::Value| {
            if self.schemas {
                json!({ "schema": schema, "payload": payload })
            } else {
                payload
            }
        };
        TransactionRecord {
            key: wrap(&key_schema, key).to_string().into_bytes(),
            value: wrap(&value_schema, value.clone()).to_string().into_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tributary_proto::{Op, Row, SourceInfo, TransactionInfo, Value};

    fn event(txn: Option<&str>, table: &str) -> ChangeEvent {
        ChangeEvent {
            op: Op::Create,
            key: Row {
                columns: vec!["id".to_owned()].into(),
                values: vec![Value::Int(1)],
            },
            before: None,
            after: None,
            source: SourceInfo {
                db: "shop".into(),
                table: table.into(),
                ts_ms: 1_700_000_000_000,
                ..SourceInfo::default()
            },
            ts_ms: 0,
            transaction: txn.map(|id| TransactionInfo {
                id: id.into(),
                total_order: 1,
                data_collection_order: 1,
            }),
            undecodable: Vec::new(),
            schemas: None,
            key_change: None,
        }
    }

    fn json(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn begin_before_the_first_event_end_with_counts_at_the_commit() {
        let mut topic = TransactionTopic::new(false);
        let begin = topic.before_event(&event(Some("0-1-7"), "orders"));
        assert_eq!(begin.len(), 1);
        assert_eq!(json(&begin[0].key), json!({ "id": "0-1-7" }));
        assert_eq!(
            json(&begin[0].value),
            json!({"status": "BEGIN", "id": "0-1-7", "event_count": null, "data_collections": null,
                   "ts_ms": 1_700_000_000_000i64})
        );
        assert!(
            topic
                .before_event(&event(Some("0-1-7"), "items"))
                .is_empty()
        );
        assert!(
            topic
                .before_event(&event(Some("0-1-7"), "orders"))
                .is_empty()
        );
        let end = topic.on_commit().unwrap();
        assert_eq!(
            json(&end.value),
            json!({"status": "END", "id": "0-1-7", "event_count": 3,
                   "data_collections": [{"data_collection": "shop.orders", "event_count": 2},
                                        {"data_collection": "shop.items", "event_count": 1}],
                   "ts_ms": 1_700_000_000_000i64})
        );
        // A transaction without events (or a snapshot row) writes nothing.
        assert_eq!(topic.on_commit(), None);
        assert!(topic.before_event(&event(None, "orders")).is_empty());
    }

    #[test]
    fn a_new_transaction_ends_one_left_open() {
        let mut topic = TransactionTopic::new(false);
        topic.before_event(&event(Some("a"), "t"));
        let records = topic.before_event(&event(Some("b"), "t"));
        let statuses: Vec<_> = records
            .iter()
            .map(|r| json(&r.value)["status"].clone())
            .collect();
        assert_eq!(statuses, [json!("END"), json!("BEGIN")]);
    }

    #[test]
    fn with_schemas_records_are_the_json_converters() {
        let mut topic = TransactionTopic::new(true);
        let begin = &topic.before_event(&event(Some("t1"), "orders"))[0];
        let key = json(&begin.key);
        assert_eq!(key["payload"], json!({ "id": "t1" }));
        assert_eq!(
            key["schema"]["name"],
            "io.debezium.connector.common.TransactionMetadataKey"
        );
        let value = json(&begin.value);
        assert_eq!(
            value["schema"]["name"],
            "io.debezium.connector.common.TransactionMetadataValue"
        );
        assert_eq!(value["payload"]["status"], "BEGIN");
    }

    /// Debezium's documented BEGIN and END records (`shared-mariadb-mysql.adoc`,
    /// "Transaction metadata"), field for field; `ts_ms` is the source's time
    /// of the transaction's events (the docs' END is 566 ms after its BEGIN,
    /// the time of the commit event: normalised).
    #[test]
    fn begin_and_end_are_debeziums_documented_records() {
        let documented = [
            r#"{"status": "BEGIN", "id": "0e4d5dcd-a33b-11ea-80f1-02010a22a99e:10",
                "ts_ms": 1486500577125, "event_count": null, "data_collections": null}"#,
            r#"{"status": "END", "id": "0e4d5dcd-a33b-11ea-80f1-02010a22a99e:10",
                "ts_ms": 1486500577691, "event_count": 2,
                "data_collections": [{"data_collection": "s1.a", "event_count": 1},
                                     {"data_collection": "s2.a", "event_count": 1}]}"#,
        ];
        let id = "0e4d5dcd-a33b-11ea-80f1-02010a22a99e:10";
        let in_db = |db: &str| {
            let mut e = event(Some(id), "a");
            e.source.db = db.into();
            e
        };
        let mut topic = TransactionTopic::new(false);
        let mut records = topic.before_event(&in_db("s1"));
        records.extend(topic.before_event(&in_db("s2")));
        records.extend(topic.on_commit());
        assert_eq!(records.len(), 2);
        for (record, documented) in records.iter().zip(documented) {
            let mut ours = json(&record.value);
            let mut theirs: serde_json::Value = serde_json::from_str(documented).unwrap();
            for v in [&mut ours, &mut theirs] {
                v["ts_ms"] = serde_json::Value::Null;
            }
            // The same fields and values (the docs print them in another order
            // than Debezium's schema, which Tributary follows).
            assert_eq!(ours, theirs);
            assert_eq!(json(&record.key), json!({ "id": id }));
        }
    }
}
