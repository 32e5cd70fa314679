//! The schemas against Debezium's, as its source builds them (v3.6:
//! `TableSchemaBuilder`, `SchemaFactory`, `BinlogValueConverters`) and Kafka's
//! `JsonConverter` writes them. Debezium's docs print a different envelope
//! (`snapshot` a boolean, no `transaction`, no versions): the source is followed.

use super::*;
use crate::column_default::DefaultExpr;
use crate::schema::InfoColumn;

fn info(name: &str, column_type: &str, nullable: bool, key: Option<u32>) -> InfoColumn {
    let text = column_type.starts_with("varchar") || column_type.starts_with("enum");
    InfoColumn {
        name: name.into(),
        column_type: column_type.into(),
        charset: text.then(|| "utf8mb4".into()),
        collation: text.then(|| "utf8mb4_general_ci".into()),
        key_position: key,
        nullable,
        char_length: None,
        default: DefaultExpr::None,
    }
}

/// `CREATE TABLE shop.t (id INT NOT NULL PRIMARY KEY, name VARCHAR(20),
/// price DECIMAL(10,2) NOT NULL, flag BIT(1), tiny TINYINT, created DATETIME(6) NULL,
/// size ENUM('s','m,l'), stamp TIMESTAMP(3) NULL)`.
fn table() -> TableSchema {
    TableSchema::from_info_columns(
        "shop",
        "t",
        &[
            info("id", "int(11)", false, Some(1)),
            info("name", "varchar(20)", true, None),
            info("price", "decimal(10,2)", false, None),
            info("flag", "bit(1)", true, None),
            info("tiny", "tinyint(4)", true, None),
            info("created", "datetime(6)", true, None),
            info("size", "enum('s','m,l')", true, None),
            info("stamp", "timestamp(3)", true, None),
        ],
    )
}

/// What Debezium 3.6 writes for the table above, with its default modes
/// (columns without defaults: Debezium would add a column's `default`).
const DEBEZIUM_VALUE_SCHEMA: &str = r#"{"type":"struct","fields":[
  {"type":"struct","fields":[
    {"type":"int32","optional":false,"field":"id"},
    {"type":"string","optional":true,"field":"name"},
    {"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,
     "parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"price"},
    {"type":"boolean","optional":true,"field":"flag"},
    {"type":"int16","optional":true,"field":"tiny"},
    {"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"created"},
    {"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,
     "parameters":{"allowed":"s,m\\,l"},"field":"size"},
    {"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"stamp"}
  ],"optional":true,"name":"srv.shop.t.Value","field":"before"},
  {"type":"struct","fields":[
    {"type":"int32","optional":false,"field":"id"},
    {"type":"string","optional":true,"field":"name"},
    {"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,
     "parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"price"},
    {"type":"boolean","optional":true,"field":"flag"},
    {"type":"int16","optional":true,"field":"tiny"},
    {"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"created"},
    {"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,
     "parameters":{"allowed":"s,m\\,l"},"field":"size"},
    {"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"stamp"}
  ],"optional":true,"name":"srv.shop.t.Value","field":"after"},
  {"type":"struct","fields":[
    {"type":"string","optional":false,"field":"version"},
    {"type":"string","optional":false,"field":"connector"},
    {"type":"string","optional":false,"field":"name"},
    {"type":"int64","optional":false,"field":"ts_ms"},
    {"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,
     "parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
     "default":"false","field":"snapshot"},
    {"type":"string","optional":false,"field":"db"},
    {"type":"string","optional":true,"field":"sequence"},
    {"type":"int64","optional":true,"field":"ts_us"},
    {"type":"int64","optional":true,"field":"ts_ns"},
    {"type":"string","optional":true,"field":"table"},
    {"type":"int64","optional":false,"field":"server_id"},
    {"type":"string","optional":true,"field":"gtid"},
    {"type":"string","optional":false,"field":"file"},
    {"type":"int64","optional":false,"field":"pos"},
    {"type":"int32","optional":false,"field":"row"},
    {"type":"int64","optional":true,"field":"thread"},
    {"type":"string","optional":true,"field":"query"}
  ],"optional":false,"name":"io.debezium.connector.mysql.Source","version":1,"field":"source"},
  {"type":"struct","fields":[
    {"type":"string","optional":false,"field":"id"},
    {"type":"int64","optional":false,"field":"total_order"},
    {"type":"int64","optional":false,"field":"data_collection_order"}
  ],"optional":true,"name":"event.block","version":1,"field":"transaction"},
  {"type":"string","optional":false,"field":"op"},
  {"type":"int64","optional":true,"field":"ts_ms"},
  {"type":"int64","optional":true,"field":"ts_us"},
  {"type":"int64","optional":true,"field":"ts_ns"}
],"optional":false,"name":"srv.shop.t.Envelope","version":2}"#;

/// Compact JSON text, keys in their order: the bytes the converter writes.
fn compact(text: &str) -> String {
    serde_json::from_str::<Json>(text).unwrap().to_string()
}

#[test]
fn the_value_schema_is_debeziums_byte_for_byte() {
    let schemas = record_schemas(
        "srv",
        "mysql",
        &table(),
        &ValueModes::DEBEZIUM,
        DoubleFormat::Compact,
    );
    assert_eq!(schemas.value, compact(DEBEZIUM_VALUE_SCHEMA));
    assert_eq!(
        schemas.key.as_deref(),
        Some(
            r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"srv.shop.t.Key"}"#
        )
    );
}

#[test]
fn modes_change_the_column_types() {
    let modes = ValueModes {
        decimal: DecimalMode::String,
        bigint_unsigned: BigIntUnsignedMode::Precise,
        time_precision: TimePrecisionMode::Connect,
        binary: BinaryMode::Hex,
        geometry: GeometryMode::Bytes,
    };
    let table = TableSchema::from_info_columns(
        "shop",
        "u",
        &[
            info("big", "bigint(20) unsigned", false, Some(1)),
            info("price", "decimal(10,2)", true, None),
            info("t", "time(6)", true, None),
            info("d", "date", true, None),
            info("dt", "datetime(3)", true, None),
            info("b", "varbinary(4)", true, None),
            info("s", "smallint(5) unsigned", true, None),
        ],
    );
    let schemas = record_schemas("srv", "mysql", &table, &modes, DoubleFormat::Compact);
    let value: Json = serde_json::from_str(&schemas.value).unwrap();
    let fields = &value["fields"][1]["fields"];
    let by_name = |name: &str| {
        fields
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["field"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_name("big"),
        json!({"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,
               "parameters":{"scale":"0","connect.decimal.precision":"20"},"field":"big"})
    );
    assert_eq!(
        by_name("price"),
        json!({"type":"string","optional":true,"field":"price"})
    );
    assert_eq!(
        by_name("t"),
        json!({"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1,"field":"t"})
    );
    assert_eq!(by_name("d")["name"], "org.apache.kafka.connect.data.Date");
    assert_eq!(
        by_name("dt")["name"],
        "org.apache.kafka.connect.data.Timestamp"
    );
    assert_eq!(
        by_name("b"),
        json!({"type":"string","optional":true,"field":"b"})
    );
    assert_eq!(
        by_name("s"),
        json!({"type":"int32","optional":true,"field":"s"})
    );
}

#[test]
fn the_source_schema_names_the_connector() {
    let value = record_schemas(
        "srv",
        "mariadb",
        &table(),
        &ValueModes::DEBEZIUM,
        DoubleFormat::Compact,
    )
    .value;
    assert!(value.contains(r#""name":"io.debezium.connector.mariadb.Source""#));
    assert!(!value.contains("connector.mysql"));
}

/// Debezium 3.6's schema change value schema as Kafka's JsonConverter writes
/// it (`SchemaFactory.schemaHistoryConnectorValueSchema`, MySQL connector).
const DEBEZIUM_SCHEMA_CHANGE_VALUE: &str = r#"{"type":"struct","fields":[{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"},{"type":"string","optional":true,"field":"table"},{"type":"int64","optional":false,"field":"server_id"},{"type":"string","optional":true,"field":"gtid"},{"type":"string","optional":false,"field":"file"},{"type":"int64","optional":false,"field":"pos"},{"type":"int32","optional":false,"field":"row"},{"type":"int64","optional":true,"field":"thread"},{"type":"string","optional":true,"field":"query"}],"optional":false,"name":"io.debezium.connector.mysql.Source","version":1,"field":"source"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"field":"databaseName"},{"type":"string","optional":true,"field":"schemaName"},{"type":"string","optional":true,"field":"ddl"},{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":false,"field":"type"},{"type":"string","optional":false,"field":"id"},{"type":"struct","fields":[{"type":"string","optional":true,"field":"defaultCharsetName"},{"type":"array","items":{"type":"string","optional":false},"optional":true,"field":"primaryKeyColumnNames"},{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":false,"field":"name"},{"type":"int32","optional":false,"field":"jdbcType"},{"type":"int32","optional":true,"field":"nativeType"},{"type":"string","optional":false,"field":"typeName"},{"type":"string","optional":true,"field":"typeExpression"},{"type":"string","optional":true,"field":"charsetName"},{"type":"int32","optional":true,"field":"length"},{"type":"int32","optional":true,"field":"scale"},{"type":"int32","optional":false,"field":"position"},{"type":"boolean","optional":true,"field":"optional"},{"type":"boolean","optional":true,"field":"autoIncremented"},{"type":"boolean","optional":true,"field":"generated"},{"type":"string","optional":true,"field":"comment"},{"type":"string","optional":true,"field":"defaultValueExpression"},{"type":"array","items":{"type":"string","optional":false},"optional":true,"field":"enumValues"}],"optional":false,"name":"io.debezium.connector.schema.Column","version":1},"optional":false,"field":"columns"},{"type":"string","optional":true,"field":"comment"}],"optional":true,"name":"io.debezium.connector.schema.Table","version":1,"field":"table"}],"optional":false,"name":"io.debezium.connector.schema.Change","version":1},"optional":false,"field":"tableChanges"}],"optional":false,"name":"io.debezium.connector.mysql.SchemaChangeValue","version":1}"#;

#[test]
fn schema_change_schemas_are_debeziums_byte_for_byte() {
    let (key, value) = schema_change_schemas("mysql");
    assert_eq!(value.to_string(), DEBEZIUM_SCHEMA_CHANGE_VALUE);
    assert_eq!(
        key.to_string(),
        r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"databaseName"}],"optional":false,"name":"io.debezium.connector.mysql.SchemaChangeKey","version":1}"#
    );
}

#[test]
fn a_double_default_is_written_in_the_double_format() {
    let mut table = TableSchema::from_info_columns(
        "shop",
        "d",
        &[
            info("id", "int(11)", false, Some(1)),
            info("ratio", "double", true, None),
        ],
    );
    table.columns[1].default = Some(tributary_proto::Value::Float(1e20));
    let modes = ValueModes::DEBEZIUM;
    let java = record_schemas("srv", "mysql", &table, &modes, DoubleFormat::Java).value;
    assert!(
        java.contains(r#""default":1.0E20,"field":"ratio""#),
        "{java}"
    );
    let compact = record_schemas("srv", "mysql", &table, &modes, DoubleFormat::Compact).value;
    assert!(
        compact.contains(r#""default":1e+20,"field":"ratio""#),
        "{compact}"
    );
}

#[test]
fn a_postgresql_source_block_has_debeziums_postgres_fields() {
    let schemas = record_schemas(
        "srv",
        "postgresql",
        &table(),
        &ValueModes::DEBEZIUM,
        DoubleFormat::Compact,
    );
    let value: Json = serde_json::from_str(&schemas.value).unwrap();
    let source = &value["fields"][2];
    assert_eq!(source["name"], "io.debezium.connector.postgresql.Source");
    let fields: Vec<(String, String, bool)> = source["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["field"].as_str().unwrap().to_owned(),
                f["type"].as_str().unwrap().to_owned(),
                f["optional"].as_bool().unwrap(),
            )
        })
        .collect();
    // PostgresSourceInfoStructMaker (Debezium 3.6): the common fields, then these.
    let expected = [
        ("version", "string", false),
        ("connector", "string", false),
        ("name", "string", false),
        ("ts_ms", "int64", false),
        ("snapshot", "string", true),
        ("db", "string", false),
        ("sequence", "string", true),
        ("ts_us", "int64", true),
        ("ts_ns", "int64", true),
        ("schema", "string", false),
        ("table", "string", false),
        ("txId", "int64", true),
        ("lsn", "int64", true),
        ("xmin", "int64", true),
        ("origin", "string", true),
        ("origin_lsn", "int64", true),
    ]
    .map(|(n, t, o)| (n.to_owned(), t.to_owned(), o));
    assert_eq!(fields, expected);
}
