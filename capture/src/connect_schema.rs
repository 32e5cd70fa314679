//! Kafka Connect schemas of a table's change records, as Debezium's MySQL
//! and PostgreSQL connectors declare them and Kafka's `JsonConverter` writes them with
//! `schemas.enable=true` (`converter: { schemas.enable: true }`).
//!
//! Built once per table version (and per [`ValueModes`]), rendered to JSON
//! text and shared by every record of that version ([`RecordSchemas`]).
//! Follows Debezium 3.6's source: `TableSchemaBuilder` (names, optional
//! flags, the envelope's field order), `SchemaFactory` (source and
//! transaction blocks), `JdbcValueConverters`/`BinlogValueConverters` (one
//! Connect type per column type), and the `JsonConverter`'s key order (`type`,
//! `fields`, `optional`, `name`, `version`, `parameters`, then `field`).
//! A column's `default` is declared as Debezium declares it ([`crate::column_default`]).

use serde_json::{Map, Value as Json, json};
use tributary_proto::RecordSchemas;
use tributary_proto::debezium_json::POSTGRES_CONNECTOR;
use tributary_proto::json_number::{DoubleFormat, json_text};

use crate::schema::{ColumnKind, ColumnSchema, Declared, TableSchema};
use crate::value_modes::{
    BigIntUnsignedMode, BinaryMode, DecimalMode, GeometryMode, TimePrecisionMode, ValueModes,
};
use crate::value_plan::Mapper;

/// `source.snapshot`'s allowed values, in Debezium's `SnapshotRecord` order.
const SNAPSHOT_VALUES: &str =
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental";

/// The Connect schemas of `table`'s records, named after `server_name`, for
/// Debezium's `connector` (`mysql`, `mariadb`, `postgresql`).
pub fn record_schemas(
    server_name: &str,
    connector: &str,
    table: &TableSchema,
    modes: &ValueModes,
    doubles: DoubleFormat,
) -> RecordSchemas {
    let prefix = format!("{server_name}.{}.{}", table.db, table.table);
    let key = (!table.key.is_empty()).then(|| {
        let fields = table
            .key
            .iter()
            .map(|&i| field(&table.columns[i], modes, &table.columns[i].name));
        struct_schema(fields, false, Some(&format!("{prefix}.Key")), None)
    });
    let row = |field_name: &str| {
        let fields: Vec<Json> = match &table.value_plan {
            None => table
                .columns
                .iter()
                .map(|c| field(c, modes, &c.name))
                .collect(),
            Some(plan) => plan
                .columns
                .iter()
                .map(|planned| {
                    let column = &table.columns[planned.index];
                    let schema = mapped(column_schema(column, modes), planned.mapper.as_ref());
                    named_field(with_default(schema, column), &column.name)
                })
                .collect(),
        };
        named_field(
            struct_schema(fields, true, Some(&format!("{prefix}.Value")), None),
            field_name,
        )
    };
    let envelope = struct_schema(
        [
            row("before"),
            row("after"),
            named_field(source_schema(connector), "source"),
            named_field(transaction_schema(), "transaction"),
            named_field(plain("string", false), "op"),
            named_field(plain("int64", true), "ts_ms"),
            named_field(plain("int64", true), "ts_us"),
            named_field(plain("int64", true), "ts_ns"),
        ],
        false,
        Some(&format!("{prefix}.Envelope")),
        Some(2),
    );
    RecordSchemas {
        key: key.map(|k| json_text(&k, doubles)),
        value: json_text(&envelope, doubles),
    }
}

/// `schema` with the parameter a column mapper adds (Debezium's
/// `alterFieldSchema`): `masked` for masks and hashes, `truncateLength`.
fn mapped(mut schema: Json, mapper: Option<&Mapper>) -> Json {
    let (name, value) = match mapper {
        None => return schema,
        Some(Mapper::Mask(_) | Mapper::Hash(_)) => ("masked", "true".to_owned()),
        Some(Mapper::Truncate(n)) => ("truncateLength", n.to_string()),
    };
    let map = schema.as_object_mut().expect("an object");
    let parameters = map
        .entry("parameters")
        .or_insert_with(|| Json::Object(Map::new()));
    parameters
        .as_object_mut()
        .expect("parameters are an object")
        .insert(name.into(), value.into());
    schema
}

/// `type` and `optional`.
fn plain(ty: &str, optional: bool) -> Json {
    json!({ "type": ty, "optional": optional })
}

/// A semantic type: `type`, `optional`, `name`, `version`, `parameters`.
fn semantic(ty: &str, optional: bool, name: &str, parameters: Option<Json>) -> Json {
    let mut schema = plain(ty, optional);
    let map = schema.as_object_mut().expect("an object");
    map.insert("name".into(), name.into());
    map.insert("version".into(), 1.into());
    if let Some(parameters) = parameters {
        map.insert("parameters".into(), parameters);
    }
    schema
}

/// A struct of `fields` (each already carrying its `field` name).
fn struct_schema(
    fields: impl IntoIterator<Item = Json>,
    optional: bool,
    name: Option<&str>,
    version: Option<u32>,
) -> Json {
    let mut map = Map::new();
    map.insert("type".into(), "struct".into());
    map.insert("fields".into(), Json::Array(fields.into_iter().collect()));
    map.insert("optional".into(), optional.into());
    if let Some(name) = name {
        map.insert("name".into(), name.into());
    }
    if let Some(version) = version {
        map.insert("version".into(), version.into());
    }
    Json::Object(map)
}

/// `schema` as a struct member: its `field` name comes last.
fn named_field(mut schema: Json, name: &str) -> Json {
    schema
        .as_object_mut()
        .expect("an object")
        .insert("field".into(), name.into());
    schema
}

/// The field of one column.
fn field(column: &ColumnSchema, modes: &ValueModes, name: &str) -> Json {
    named_field(with_default(column_schema(column, modes), column), name)
}

/// `schema` with the column's `default` (after its `parameters`, as the
/// JsonConverter writes it; a column mapper leaves it as declared).
fn with_default(mut schema: Json, column: &ColumnSchema) -> Json {
    if let Some(default) = &column.default {
        schema
            .as_object_mut()
            .expect("an object")
            .insert("default".into(), default.to_json());
    }
    schema
}

/// The Connect schema of one column's values in `modes`.
fn column_schema(column: &ColumnSchema, modes: &ValueModes) -> Json {
    kind_schema(&column.declared, &column.kind, column.nullable, modes)
}

/// The Connect schema of values of `kind`, declared as `declared`.
fn kind_schema(declared: &Declared, kind: &ColumnKind, optional: bool, modes: &ValueModes) -> Json {
    let decimal = |precision: u16, scale: u16| {
        semantic(
            "bytes",
            optional,
            "org.apache.kafka.connect.data.Decimal",
            Some(
                json!({ "scale": scale.to_string(), "connect.decimal.precision": precision.to_string() }),
            ),
        )
    };
    match (declared, kind) {
        (Declared::Enum(labels), _) => semantic(
            "string",
            optional,
            "io.debezium.data.Enum",
            Some(allowed(labels)),
        ),
        (Declared::Set(labels), _) => semantic(
            "string",
            optional,
            "io.debezium.data.EnumSet",
            Some(allowed(labels)),
        ),
        (declared, ColumnKind::Decimal) => match modes.decimal {
            DecimalMode::Precise => match declared {
                Declared::Decimal { precision, scale } => decimal(*precision, *scale),
                Declared::Scale(scale) => semantic(
                    "bytes",
                    optional,
                    "org.apache.kafka.connect.data.Decimal",
                    Some(json!({ "scale": scale.to_string() })),
                ),
                _ => decimal(10, 0),
            },
            DecimalMode::String => plain("string", optional),
            DecimalMode::Double => plain("double", optional),
        },
        (_, ColumnKind::Int { unsigned, bytes }) => match (bytes, unsigned) {
            (1, _) | (2, false) => plain("int16", optional),
            (2, true) | (3, _) | (4, false) => plain("int32", optional),
            (4, true) => plain("int64", optional),
            (_, true) if modes.bigint_unsigned == BigIntUnsignedMode::Precise => decimal(20, 0),
            _ => plain("int64", optional),
        },
        (_, ColumnKind::Float) => plain("float", optional),
        (_, ColumnKind::Double) => plain("double", optional),
        (_, ColumnKind::Year) => semantic("int32", optional, "io.debezium.time.Year", None),
        (_, ColumnKind::Date) => match modes.time_precision {
            TimePrecisionMode::AdaptiveTimeMicroseconds => {
                semantic("int32", optional, "io.debezium.time.Date", None)
            }
            TimePrecisionMode::Connect => semantic(
                "int32",
                optional,
                "org.apache.kafka.connect.data.Date",
                None,
            ),
        },
        (_, ColumnKind::Time) => match modes.time_precision {
            TimePrecisionMode::AdaptiveTimeMicroseconds => {
                semantic("int64", optional, "io.debezium.time.MicroTime", None)
            }
            TimePrecisionMode::Connect => semantic(
                "int32",
                optional,
                "org.apache.kafka.connect.data.Time",
                None,
            ),
        },
        (_, ColumnKind::DateTime { fsp }) => match modes.time_precision {
            TimePrecisionMode::AdaptiveTimeMicroseconds if *fsp <= 3 => {
                semantic("int64", optional, "io.debezium.time.Timestamp", None)
            }
            TimePrecisionMode::AdaptiveTimeMicroseconds => {
                semantic("int64", optional, "io.debezium.time.MicroTimestamp", None)
            }
            TimePrecisionMode::Connect => semantic(
                "int64",
                optional,
                "org.apache.kafka.connect.data.Timestamp",
                None,
            ),
        },
        (_, ColumnKind::Timestamp { .. }) => {
            semantic("string", optional, "io.debezium.time.ZonedTimestamp", None)
        }
        (_, ColumnKind::Text(_)) => plain("string", optional),
        (_, ColumnKind::Binary { .. }) => match modes.binary {
            BinaryMode::Bytes => plain("bytes", optional),
            _ => plain("string", optional),
        },
        (_, ColumnKind::Enum(labels)) => semantic(
            "string",
            optional,
            "io.debezium.data.Enum",
            Some(allowed(labels)),
        ),
        (_, ColumnKind::Set(labels)) => semantic(
            "string",
            optional,
            "io.debezium.data.EnumSet",
            Some(allowed(labels)),
        ),
        (_, ColumnKind::Bit { bits: 1 }) => plain("boolean", optional),
        (_, ColumnKind::Bit { bits }) => semantic(
            "bytes",
            optional,
            "io.debezium.data.Bits",
            Some(json!({ "length": bits.to_string() })),
        ),
        (_, ColumnKind::Json) => semantic("string", optional, "io.debezium.data.Json", None),
        (_, ColumnKind::Geometry { point }) if modes.geometry == GeometryMode::Struct => {
            geometry_schema(*point, optional)
        }
        (_, ColumnKind::Geometry { .. } | ColumnKind::Other) => plain("bytes", optional),
        (_, ColumnKind::Bool) => plain("boolean", optional),
        (_, ColumnKind::Uuid) => semantic("string", optional, "io.debezium.data.Uuid", None),
        (_, ColumnKind::Xml) => semantic("string", optional, "io.debezium.data.Xml", None),
        (_, ColumnKind::TimeMillis) => semantic("int32", optional, "io.debezium.time.Time", None),
        (_, ColumnKind::ZonedTime) => {
            semantic("string", optional, "io.debezium.time.ZonedTime", None)
        }
        (_, ColumnKind::Interval) => {
            semantic("int64", optional, "io.debezium.time.MicroDuration", None)
        }
        (_, ColumnKind::VariableDecimal) => match modes.decimal {
            DecimalMode::Precise => {
                let mut schema = struct_schema(
                    vec![
                        named_field(plain("int32", false), "scale"),
                        named_field(plain("bytes", false), "value"),
                    ],
                    optional,
                    Some("io.debezium.data.VariableScaleDecimal"),
                    Some(1),
                );
                let map = schema.as_object_mut().expect("an object");
                map.insert("doc".into(), "Variable scaled decimal".into());
                schema
            }
            DecimalMode::String => plain("string", optional),
            DecimalMode::Double => plain("double", optional),
        },
        (_, ColumnKind::PlainText) => plain("string", optional),
        (_, ColumnKind::Array(element)) => json!({
            "type": "array",
            "items": kind_schema(&Declared::Plain, element, true, modes),
            "optional": optional,
        }),
    }
}

/// `io.debezium.data.geometry.Point` (`{x, y, wkb, srid}`, optional as the
/// column) or `Geometry` (`{wkb, srid}`, always optional, as Debezium's
/// builder makes it), version 1, with their `doc`.
fn geometry_schema(point: bool, optional: bool) -> Json {
    let wkb_srid = |wkb_optional| {
        [
            named_field(plain("bytes", wkb_optional), "wkb"),
            named_field(plain("int32", true), "srid"),
        ]
    };
    let (fields, optional, name, doc): (Vec<Json>, _, _, _) = if point {
        let xy = [
            named_field(plain("double", false), "x"),
            named_field(plain("double", false), "y"),
        ];
        (
            xy.into_iter().chain(wkb_srid(true)).collect(),
            optional,
            "io.debezium.data.geometry.Point",
            "Geometry (POINT)",
        )
    } else {
        (
            wkb_srid(false).into_iter().collect(),
            true,
            "io.debezium.data.geometry.Geometry",
            "Geometry",
        )
    };
    let mut schema = struct_schema(fields, optional, Some(name), Some(1));
    schema
        .as_object_mut()
        .expect("an object")
        .insert("doc".into(), doc.into());
    schema
}

/// ENUM/SET labels as Debezium's `allowed` parameter: joined by `,`, a `,`
/// inside a label escaped as `\,`.
fn allowed(labels: &[String]) -> Json {
    let escaped: Vec<String> = labels.iter().map(|l| l.replace(',', "\\,")).collect();
    json!({ "allowed": escaped.join(",") })
}

/// `io.debezium.connector.<connector>.Source`, version 1: the fields every
/// connector's block has, then the binlog's (`mysql`, `mariadb`) or the
/// WAL's (`postgresql`).
fn source_schema(connector: &str) -> Json {
    let snapshot = {
        let mut s = semantic(
            "string",
            true,
            "io.debezium.data.Enum",
            Some(json!({ "allowed": SNAPSHOT_VALUES })),
        );
        s.as_object_mut()
            .expect("an object")
            .insert("default".into(), "false".into());
        s
    };
    let common = [
        ("version", plain("string", false)),
        ("connector", plain("string", false)),
        ("name", plain("string", false)),
        ("ts_ms", plain("int64", false)),
        ("snapshot", snapshot),
        ("db", plain("string", false)),
        ("sequence", plain("string", true)),
        ("ts_us", plain("int64", true)),
        ("ts_ns", plain("int64", true)),
    ];
    let specific: &[(&str, Json)] = if connector == POSTGRES_CONNECTOR {
        &[
            ("schema", plain("string", false)),
            ("table", plain("string", false)),
            ("txId", plain("int64", true)),
            ("lsn", plain("int64", true)),
            ("xmin", plain("int64", true)),
            ("origin", plain("string", true)),
            ("origin_lsn", plain("int64", true)),
        ]
    } else {
        &[
            ("table", plain("string", true)),
            ("server_id", plain("int64", false)),
            ("gtid", plain("string", true)),
            ("file", plain("string", false)),
            ("pos", plain("int64", false)),
            ("row", plain("int32", false)),
            ("thread", plain("int64", true)),
            ("query", plain("string", true)),
        ]
    };
    struct_schema(
        common
            .into_iter()
            .chain(specific.iter().cloned())
            .map(|(name, schema)| named_field(schema, name)),
        false,
        Some(&format!("io.debezium.connector.{connector}.Source")),
        Some(1),
    )
}

/// A heartbeat record as Debezium writes it: key `{"serverName"}`
/// (`io.debezium.connector.common.ServerNameKey`), value `{"ts_ms"}`
/// (`io.debezium.connector.common.Heartbeat`), with their schemas when `schemas`.
pub fn heartbeat_record(server_name: &str, ts_ms: i64, schemas: bool) -> (Vec<u8>, Vec<u8>) {
    let key = json!({ "serverName": server_name });
    let value = json!({ "ts_ms": ts_ms });
    if !schemas {
        return (key.to_string().into_bytes(), value.to_string().into_bytes());
    }
    let key_schema = struct_schema(
        [named_field(plain("string", false), "serverName")],
        false,
        Some("io.debezium.connector.common.ServerNameKey"),
        Some(1),
    );
    let value_schema = struct_schema(
        [named_field(plain("int64", false), "ts_ms")],
        false,
        Some("io.debezium.connector.common.Heartbeat"),
        Some(1),
    );
    (
        json!({ "schema": key_schema, "payload": key })
            .to_string()
            .into_bytes(),
        json!({ "schema": value_schema, "payload": value })
            .to_string()
            .into_bytes(),
    )
}

/// The key and value schemas of the transaction metadata topic
/// (`io.debezium.connector.common.TransactionMetadataKey`/`Value`, version 1).
pub fn transaction_topic_schemas() -> (Json, Json) {
    let key = struct_schema(
        [named_field(plain("string", false), "id")],
        false,
        Some("io.debezium.connector.common.TransactionMetadataKey"),
        Some(1),
    );
    let per_collection = struct_schema(
        [
            named_field(plain("string", false), "data_collection"),
            named_field(plain("int64", false), "event_count"),
        ],
        true,
        Some("event.collection"),
        Some(1),
    );
    let collections = json!({ "type": "array", "items": per_collection, "optional": true });
    let value = struct_schema(
        [
            named_field(plain("string", false), "status"),
            named_field(plain("string", false), "id"),
            named_field(plain("int64", true), "event_count"),
            named_field(collections, "data_collections"),
            named_field(plain("int64", false), "ts_ms"),
        ],
        false,
        Some("io.debezium.connector.common.TransactionMetadataValue"),
        Some(1),
    );
    (key, value)
}

/// The key and value schemas of Debezium's schema change topic
/// (`io.debezium.connector.<connector>.SchemaChangeKey`/`SchemaChangeValue`,
/// version 1; `tableChanges` of `io.debezium.connector.schema.Change`).
pub fn schema_change_schemas(connector: &str) -> (Json, Json) {
    let key = struct_schema(
        [named_field(plain("string", false), "databaseName")],
        false,
        Some(&format!(
            "io.debezium.connector.{connector}.SchemaChangeKey"
        )),
        Some(1),
    );
    let array = |items: Json, optional: bool| json!({ "type": "array", "items": items, "optional": optional });
    let strings = || array(plain("string", false), true);
    let column = struct_schema(
        [
            ("name", plain("string", false)),
            ("jdbcType", plain("int32", false)),
            ("nativeType", plain("int32", true)),
            ("typeName", plain("string", false)),
            ("typeExpression", plain("string", true)),
            ("charsetName", plain("string", true)),
            ("length", plain("int32", true)),
            ("scale", plain("int32", true)),
            ("position", plain("int32", false)),
            ("optional", plain("boolean", true)),
            ("autoIncremented", plain("boolean", true)),
            ("generated", plain("boolean", true)),
            ("comment", plain("string", true)),
            ("defaultValueExpression", plain("string", true)),
            ("enumValues", strings()),
        ]
        .into_iter()
        .map(|(name, schema)| named_field(schema, name)),
        false,
        Some("io.debezium.connector.schema.Column"),
        Some(1),
    );
    let table = struct_schema(
        [
            named_field(plain("string", true), "defaultCharsetName"),
            named_field(strings(), "primaryKeyColumnNames"),
            named_field(array(column, false), "columns"),
            named_field(plain("string", true), "comment"),
        ],
        true,
        Some("io.debezium.connector.schema.Table"),
        Some(1),
    );
    let change = struct_schema(
        [
            named_field(plain("string", false), "type"),
            named_field(plain("string", false), "id"),
            named_field(table, "table"),
        ],
        false,
        Some("io.debezium.connector.schema.Change"),
        Some(1),
    );
    let value = struct_schema(
        [
            named_field(source_schema(connector), "source"),
            named_field(plain("int64", false), "ts_ms"),
            named_field(plain("string", true), "databaseName"),
            named_field(plain("string", true), "schemaName"),
            named_field(plain("string", true), "ddl"),
            named_field(array(change, false), "tableChanges"),
        ],
        false,
        Some(&format!(
            "io.debezium.connector.{connector}.SchemaChangeValue"
        )),
        Some(1),
    );
    (key, value)
}

/// `event.block`, version 1: the envelope's `transaction`.
fn transaction_schema() -> Json {
    struct_schema(
        [
            named_field(plain("string", false), "id"),
            named_field(plain("int64", false), "total_order"),
            named_field(plain("int64", false), "data_collection_order"),
        ],
        true,
        Some("event.block"),
        Some(1),
    )
}

#[cfg(test)]
mod tests;
