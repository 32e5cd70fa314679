//! The tables at a binlog position, rebuilt from what the schema change
//! topic recorded before it ([`rebuild`]), as Debezium recovers its schema
//! history when it starts: a restarted capture replays the DDL it had not
//! yet read onto the definitions as they stood at its stored position, not
//! onto the tables as they are now.
//!
//! Each record before the position is applied in order: its statement
//! (database character sets, renames, drops), then the definitions it
//! recorded, which are authoritative. A snapshot's records count at their
//! position; a statement's, once the position is past it.

use rdkafka::message::Message;
use serde_json::Value as Json;
use tracing::{info, warn};
use tributary_kafka::BaseConsumer;
use tributary_kafka::KafkaConfig;

use crate::ddl_replay::SchemaModel;
use crate::error::CaptureError;
use crate::position::BinlogPosition;
use crate::schema_change_record::table_from_json;
use crate::server_rules::ServerRules;
use crate::source_position::SourcePosition;
use crate::table_model::TableModel;
use crate::topic_reader::read_to_end;

/// The model at `until`, from the records of the schema change topic `topic`
/// (one partition) of a server with `rules`.
pub async fn rebuild(
    kafka: &KafkaConfig,
    topic: &str,
    until: &BinlogPosition,
    rules: ServerRules,
) -> Result<SchemaModel, CaptureError> {
    if until.file.rsplit_once('.').is_none() {
        // A start given as a GTID set only: which records come before it is
        // unknown. Tables are read from the server at their first statement.
        info!(%topic, "a start without a binlog file: table definitions are read from the server");
        return Ok(SchemaModel::new(rules));
    }
    let consumer: BaseConsumer = kafka
        .consumer(
            "capture.schemas",
            &format!("tributary-capture-schemas.{topic}"),
        )
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let topic = topic.to_owned();
    let until = until.clone();
    tokio::task::spawn_blocking(move || {
        let mut model = SchemaModel::new(rules);
        let (mut applied, mut unreadable, mut first_unreadable) = (0usize, 0usize, None);
        read_to_end(&consumer, &topic, 0, "the end of the schema change topic", |msg| {
            let record = msg
                .payload()
                .and_then(|payload| serde_json::from_slice::<Json>(payload).ok());
            let payload = record.as_ref().map(|json| match json.get("payload") {
                Some(payload) if json.get("schema").is_some() => payload,
                _ => json,
            });
            match payload.map(|payload| apply(&mut model, payload, &until, rules.mariadb)) {
                Some(Some(true)) => applied += 1,
                Some(Some(false)) => {}
                _ => {
                    unreadable += 1;
                    first_unreadable.get_or_insert(msg.offset());
                }
            }
            Ok(())
        })?;
        if let Some(offset) = first_unreadable {
            warn!(
                %topic,
                unreadable,
                first_offset = offset,
                "schema change records that are not Debezium's were skipped: their tables are read from the server"
            );
        }
        info!(%topic, applied, until = %until, "table definitions rebuilt from the schema change topic");
        Ok(model)
    })
    .await
    .expect("the schema rebuild does not panic")
}

/// Applies one record if it comes before `until`: `Some(applied)`, or `None`
/// for a record that is not a schema change record.
fn apply(
    model: &mut SchemaModel,
    record: &Json,
    until: &BinlogPosition,
    mariadb: bool,
) -> Option<bool> {
    let source = &record["source"];
    let at = BinlogPosition {
        file: source["file"].as_str()?.to_owned(),
        pos: source["pos"].as_u64()?,
        ..BinlogPosition::default()
    };
    let snapshot = !matches!(source["snapshot"].as_str(), Some("false") | None);
    let before = if snapshot {
        until.reached(&at)
    } else {
        until.is_after(&at)
    };
    if !before {
        return Some(false);
    }
    let db = record["databaseName"].as_str()?;
    model.apply(record["ddl"].as_str()?, db);
    for change in record["tableChanges"].as_array()? {
        let table = source["table"].as_str()?;
        match change["type"].as_str()? {
            "DROP" => model.forget(db, table),
            _ => model.set_table(
                db,
                table,
                TableModel::from_definition(&table_from_json(&change["table"])?, mariadb),
            ),
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        snapshot: &str,
        pos: u64,
        ddl: &str,
        table: Option<(&str, &str)>,
        definition: Json,
    ) -> Json {
        let changes = match table {
            Some((kind, _)) => serde_json::json!([{ "type": kind, "table": definition }]),
            None => serde_json::json!([]),
        };
        serde_json::json!({
            "source": { "snapshot": snapshot, "file": "bin.000002", "pos": pos, "table": table.map(|t| t.1) },
            "databaseName": "shop",
            "ddl": ddl,
            "tableChanges": changes,
        })
    }

    #[test]
    fn records_before_the_position_are_applied_in_order() {
        let mut source = SchemaModel::new(ServerRules::mariadb_10_11());
        source.set_database("shop", "utf8mb4");
        source.apply("CREATE TABLE t (id INT PRIMARY KEY)", "shop");
        let v1 = crate::schema_change_record::table_json(
            &source
                .table("shop", "t")
                .unwrap()
                .definition(crate::table_definition::Flavor {
                    mariadb_connector: true,
                }),
        );
        let until = BinlogPosition {
            file: "bin.000002".into(),
            pos: 500,
            ..BinlogPosition::default()
        };
        let mut model = SchemaModel::new(ServerRules::mariadb_10_11());
        let records = [
            record(
                "true",
                300,
                "CREATE DATABASE `shop` CHARSET utf8mb4",
                None,
                Json::Null,
            ),
            record(
                "true",
                300,
                "CREATE TABLE t (id INT PRIMARY KEY)",
                Some(("CREATE", "t")),
                v1.clone(),
            ),
            record(
                "false",
                400,
                "RENAME TABLE t TO u",
                Some(("ALTER", "u")),
                v1.clone(),
            ),
            record(
                "false",
                500,
                "DROP TABLE `shop`.`u`",
                Some(("DROP", "u")),
                Json::Null,
            ),
        ];
        let applied: Vec<Option<bool>> = records
            .iter()
            .map(|r| apply(&mut model, r, &until, true))
            .collect();
        assert_eq!(applied, [Some(true), Some(true), Some(true), Some(false)]);
        assert!(model.table("shop", "t").is_none(), "renamed");
        assert_eq!(
            model.table("shop", "u"),
            Some(&TableModel::from_definition(
                &table_from_json(&v1).unwrap(),
                true
            ))
        );
        assert!(model.knows_database("shop"));
        assert_eq!(
            apply(&mut model, &serde_json::json!({"a": 1}), &until, true),
            None
        );
        let at_the_position = record(
            "true",
            500,
            "CREATE TABLE t (id INT PRIMARY KEY)",
            Some(("CREATE", "t")),
            v1,
        );
        assert_eq!(
            apply(&mut model, &at_the_position, &until, true),
            Some(true),
            "a snapshot at the position"
        );
        assert!(model.table("shop", "t").is_some());
    }
}
