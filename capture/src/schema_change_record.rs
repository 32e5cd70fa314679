//! Debezium's schema change topic records (`events.schema.changes.format:
//! debezium`): on `<server_name>` (Debezium's `<topic.prefix>`), one record
//! per table a DDL statement changes ([`crate::ddl_statement`]), keyed by
//! `{"databaseName"}`, valued `{source, ts_ms, databaseName, schemaName, ddl,
//! tableChanges}` with the changed table's definition
//! ([`crate::table_definition`]), as Debezium 3.6's `SchemaChangeValue`.

use serde_json::{Value as Json, json};
use tributary_proto::SourceInfo;
use tributary_proto::debezium_json::source_json;
#[cfg(test)]
use tributary_proto::{BinlogCoordinates, LogCoordinates};

use crate::connect_schema;
use crate::ddl_statement::{DdlEffect, TableChangeKind};
use crate::table_definition::{ColumnDefinition, TableDefinition};

/// What the schema change topic records of one DDL statement.
#[derive(Debug, Clone, PartialEq)]
pub struct DescribedChange {
    /// The statement's `source` block (its event's position and time).
    pub source: SourceInfo,
    /// One record each: what the statement does, and the changed table as
    /// the statement left it ([`crate::ddl_replay`]; `None`: dropped, or
    /// gone since where it was read from the server).
    pub effects: Vec<(DdlEffect, Option<TableDefinition>)>,
}

/// One record's key and value, serialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChangeRecord {
    /// `{"databaseName"}`.
    pub key: Vec<u8>,
    /// `SchemaChangeValue`.
    pub value: Vec<u8>,
}

impl DescribedChange {
    /// The records, for Debezium's `connector` (`mysql`, `mariadb`), with
    /// their Connect schemas when `schemas`; `now_ms` is their `ts_ms`.
    pub fn records(
        &self,
        connector: &'static str,
        schemas: bool,
        now_ms: i64,
    ) -> Vec<SchemaChangeRecord> {
        let schema_pair = schemas.then(|| connect_schema::schema_change_schemas(connector));
        self.effects
            .iter()
            .map(|(effect, definition)| {
                let key = json!({ "databaseName": effect.db });
                let value = self.value(connector, effect, definition.as_ref(), now_ms);
                let (key, value) = match &schema_pair {
                    Some((key_schema, value_schema)) => (
                        json!({ "schema": key_schema, "payload": key }),
                        json!({ "schema": value_schema, "payload": value }),
                    ),
                    None => (key, value),
                };
                SchemaChangeRecord {
                    key: key.to_string().into_bytes(),
                    value: value.to_string().into_bytes(),
                }
            })
            .collect()
    }

    fn value(
        &self,
        connector: &'static str,
        effect: &DdlEffect,
        definition: Option<&TableDefinition>,
        now_ms: i64,
    ) -> Json {
        let mut source = self.source.clone();
        source.db = effect.db.as_str().into();
        let mut source = source_json(&source, connector);
        // The table changed; none (`null`) for a database-level statement,
        // `""` for one recorded as it is (as Debezium's fallback event).
        source["table"] = match (&effect.table, effect.parsed) {
            (Some((_, table)), _) => table.as_str().into(),
            (None, true) => Json::Null,
            (None, false) => "".into(),
        };
        let changes: Vec<Json> = match &effect.table {
            Some((TableChangeKind::Drop, table)) => vec![table_change(
                TableChangeKind::Drop,
                &effect.db,
                table,
                Json::Null,
            )],
            Some((kind, table)) => definition
                .map(|d| table_change(*kind, &effect.db, table, table_json(d)))
                .into_iter()
                .collect(),
            None => Vec::new(),
        };
        json!({
            "source": source,
            "ts_ms": now_ms,
            "databaseName": effect.db,
            "schemaName": null,
            "ddl": effect.ddl,
            "tableChanges": changes,
        })
    }
}

fn table_change(kind: TableChangeKind, db: &str, table: &str, definition: Json) -> Json {
    json!({ "type": kind.as_str(), "id": double_quoted(db, table), "table": definition })
}

/// `"db"."table"` (a `"` in a name doubled), Debezium's table id.
fn double_quoted(db: &str, table: &str) -> String {
    let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    format!("{}.{}", quote(db), quote(table))
}

/// `tableChanges[].table`.
pub fn table_json(table: &TableDefinition) -> Json {
    json!({
        "defaultCharsetName": table.default_charset,
        "primaryKeyColumnNames": table.primary_key,
        "columns": table.columns.iter().map(column_json).collect::<Vec<_>>(),
        "comment": table.comment,
    })
}

fn column_json(column: &ColumnDefinition) -> Json {
    json!({
        "name": column.name,
        "jdbcType": column.jdbc_type,
        "nativeType": null,
        "typeName": column.type_name,
        "typeExpression": column.type_name,
        "charsetName": column.charset,
        "length": column.length,
        "scale": column.scale,
        "position": column.position,
        "optional": column.optional,
        "autoIncremented": column.auto_incremented,
        "generated": column.auto_incremented,
        "comment": column.comment,
        "defaultValueExpression": column.default,
        "enumValues": column.enum_values,
    })
}

/// A table's definition as [`table_json`] wrote it; `None` if `json` is not one.
pub fn table_from_json(json: &Json) -> Option<TableDefinition> {
    let text = |value: &Json| value.as_str().map(str::to_owned);
    let int = |value: &Json| value.as_i64().and_then(|n| i32::try_from(n).ok());
    let columns = json["columns"]
        .as_array()?
        .iter()
        .map(|c| {
            Some(ColumnDefinition {
                name: text(&c["name"])?,
                jdbc_type: int(&c["jdbcType"])?,
                type_name: text(&c["typeName"])?,
                charset: text(&c["charsetName"]),
                length: int(&c["length"]),
                scale: int(&c["scale"]),
                position: int(&c["position"])?,
                optional: c["optional"].as_bool()?,
                auto_incremented: c["autoIncremented"].as_bool()?,
                comment: text(&c["comment"]),
                default: text(&c["defaultValueExpression"]),
                enum_values: c["enumValues"]
                    .as_array()
                    .map(|values| values.iter().filter_map(text).collect()),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(TableDefinition {
        default_charset: text(&json["defaultCharsetName"]),
        primary_key: json["primaryKeyColumnNames"]
            .as_array()?
            .iter()
            .filter_map(text)
            .collect(),
        columns,
        comment: text(&json["comment"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, jdbc_type: i32, type_name: &str, position: i32) -> ColumnDefinition {
        ColumnDefinition {
            name: name.into(),
            jdbc_type,
            type_name: type_name.into(),
            charset: None,
            length: None,
            scale: None,
            position,
            optional: true,
            auto_incremented: false,
            comment: None,
            default: None,
            enum_values: None,
        }
    }

    /// Debezium 3.6's record for `CREATE TABLE t (id INT PRIMARY KEY
    /// AUTO_INCREMENT, s VARCHAR(20) CHARACTER SET utf8mb4, ts TIMESTAMP
    /// DEFAULT CURRENT_TIMESTAMP, e ENUM('a','b'))` in `inventory`, as its
    /// `ConnectTableChangeSerializer` and `SchemaFactory` build it (only the
    /// writer's `version` differs).
    const DEBEZIUM_CREATE: &str = r#"{"source":{"version":"3.6.1.Final","connector":"mysql","name":"dbserver1","ts_ms":1700000000123,"snapshot":"false","db":"inventory","sequence":null,"ts_us":1700000000123000,"ts_ns":1700000000123000000,"table":"t","server_id":223344,"gtid":"3e11fa47-71ca-11e1-9e33-c80aa9429562:23","file":"mysql-bin.000003","pos":1234,"row":0,"thread":null,"query":null},"ts_ms":1700000000456,"databaseName":"inventory","schemaName":null,"ddl":"CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, s VARCHAR(20) CHARACTER SET utf8mb4, ts TIMESTAMP DEFAULT CURRENT_TIMESTAMP, e ENUM('a','b'))","tableChanges":[{"type":"CREATE","id":"\"inventory\".\"t\"","table":{"defaultCharsetName":"utf8mb4","primaryKeyColumnNames":["id"],"columns":[{"name":"id","jdbcType":4,"nativeType":null,"typeName":"INT","typeExpression":"INT","charsetName":null,"length":null,"scale":null,"position":1,"optional":false,"autoIncremented":true,"generated":true,"comment":null,"defaultValueExpression":null,"enumValues":null},{"name":"s","jdbcType":12,"nativeType":null,"typeName":"VARCHAR","typeExpression":"VARCHAR","charsetName":"utf8mb4","length":20,"scale":null,"position":2,"optional":true,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":null,"enumValues":null},{"name":"ts","jdbcType":2014,"nativeType":null,"typeName":"TIMESTAMP","typeExpression":"TIMESTAMP","charsetName":null,"length":null,"scale":null,"position":3,"optional":true,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":"1970-01-01 00:00:00","enumValues":null},{"name":"e","jdbcType":1,"nativeType":null,"typeName":"ENUM","typeExpression":"ENUM","charsetName":"utf8mb4","length":1,"scale":null,"position":4,"optional":true,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":null,"enumValues":["'a'","'b'"]}],"comment":null}}]}"#;

    fn source() -> SourceInfo {
        SourceInfo {
            name: "dbserver1".into(),
            ts_ms: 1_700_000_000_123,
            log: LogCoordinates::Binlog(BinlogCoordinates {
                server_id: 223_344,
                gtid: Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:23".into()),
                file: "mysql-bin.000003".into(),
                pos: 1234,
                ..BinlogCoordinates::default()
            }),
            ..SourceInfo::default()
        }
    }

    #[test]
    fn a_create_table_record_is_debeziums_byte_for_byte() {
        let ddl = "CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, s VARCHAR(20) CHARACTER SET utf8mb4, ts TIMESTAMP DEFAULT CURRENT_TIMESTAMP, e ENUM('a','b'))";
        let definition = TableDefinition {
            default_charset: Some("utf8mb4".into()),
            primary_key: vec!["id".into()],
            columns: vec![
                ColumnDefinition {
                    optional: false,
                    auto_incremented: true,
                    ..column("id", 4, "INT", 1)
                },
                ColumnDefinition {
                    charset: Some("utf8mb4".into()),
                    length: Some(20),
                    ..column("s", 12, "VARCHAR", 2)
                },
                ColumnDefinition {
                    default: Some("1970-01-01 00:00:00".into()),
                    ..column("ts", 2014, "TIMESTAMP", 3)
                },
                ColumnDefinition {
                    charset: Some("utf8mb4".into()),
                    length: Some(1),
                    enum_values: Some(vec!["'a'".into(), "'b'".into()]),
                    ..column("e", 1, "ENUM", 4)
                },
            ],
            comment: None,
        };
        let change = DescribedChange {
            source: source(),
            effects: vec![(
                DdlEffect {
                    db: "inventory".into(),
                    ddl: ddl.into(),
                    table: Some((TableChangeKind::Create, "t".into())),
                    parsed: true,
                },
                Some(definition),
            )],
        };
        let records = change.records("mysql", false, 1_700_000_000_456);
        let mut ours: Json = serde_json::from_slice(&records[0].value).unwrap();
        ours["source"]["version"] = "3.6.1.Final".into();
        assert_eq!(ours.to_string(), DEBEZIUM_CREATE);
        assert_eq!(records[0].key, br#"{"databaseName":"inventory"}"#);
        let debezium: Json = serde_json::from_str(DEBEZIUM_CREATE).unwrap();
        assert_eq!(
            table_from_json(&debezium["tableChanges"][0]["table"]).as_ref(),
            change.effects[0].1.as_ref(),
            "a recorded definition reads back as it was"
        );
    }

    #[test]
    fn drops_and_database_statements_have_no_table() {
        let effect = |table, parsed| DdlEffect {
            db: "shop".into(),
            ddl: "DROP TABLE `shop`.`t`".into(),
            table,
            parsed,
        };
        let change = DescribedChange {
            source: source(),
            effects: vec![
                (
                    effect(Some((TableChangeKind::Drop, "t".into())), true),
                    None,
                ),
                (effect(None, true), None),
                (effect(None, false), None),
                // Altered, but gone by the time capture read it.
                (
                    effect(Some((TableChangeKind::Alter, "u".into())), true),
                    None,
                ),
            ],
        };
        let values: Vec<Json> = change
            .records("mariadb", false, 1)
            .iter()
            .map(|r| serde_json::from_slice(&r.value).unwrap())
            .collect();
        assert_eq!(
            values[0]["tableChanges"],
            json!([{ "type": "DROP", "id": "\"shop\".\"t\"", "table": null }])
        );
        assert_eq!(values[0]["source"]["table"], "t");
        assert_eq!(values[0]["source"]["connector"], "mariadb");
        assert_eq!(values[1]["source"]["table"], Json::Null);
        assert_eq!(values[2]["source"]["table"], "");
        for value in &values[1..] {
            assert_eq!(value["tableChanges"], json!([]));
        }
    }
}
