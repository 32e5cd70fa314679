//! How a table's events are shaped from its schema, the same for streamed
//! and snapshot rows: the key columns (`message_key_columns`), the value
//! columns and their masks (`columns:`), how values are written (`values:`,
//! `source.undecodable_text`), the columns' defaults and the Connect schemas
//! (`converter:`).

use std::sync::Arc;

use tributary_proto::Value;
use tributary_proto::json_number::DoubleFormat;

use crate::column_rules::ColumnRules;
use crate::config::UndecodableText;
use crate::config::{CaptureConfig, Compat, SchemaChangesFormat};
use crate::connect_schema;
use crate::default_value;
use crate::error::CaptureError;
use crate::message_key::MessageKeyColumns;
use crate::schema::{ColumnSchema, InfoColumn, SchemaError, TableSchema};
use crate::value_modes::ValueModes;
use crate::value_plan::ValuePlan;

/// How the decoders write values: text that is not valid in its character
/// set, and the converter modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// `source.undecodable_text`.
    pub undecodable: UndecodableText,
    /// `values`.
    pub modes: ValueModes,
    /// Records carry their Kafka Connect schemas (`converter.schemas.enable`).
    pub schemas: bool,
    /// NULLs are written as their column's default
    /// (`converter.replace.null.with.default`).
    pub replace_null_with_default: bool,
    /// A value of a NOT NULL column that decodes to NULL (a zero date) is
    /// written as the column's default, else the epoch, as Debezium's
    /// converters write it (`compat: debezium`).
    pub zero_dates_as_epoch: bool,
    /// How doubles are written in the Connect schemas' defaults
    /// (`converter.double.format`).
    pub doubles: DoubleFormat,
}

impl DecodeOptions {
    /// Columns' defaults are needed: the schemas declare them, or they
    /// replace NULLs.
    pub fn needs_defaults(&self) -> bool {
        self.schemas || self.replace_null_with_default || self.zero_dates_as_epoch
    }

    /// What a NULL of `column` is written as, if not NULL.
    fn null_default(&self, column: &ColumnSchema) -> Option<Value> {
        if !column.nullable && self.zero_dates_as_epoch {
            column
                .default
                .clone()
                .or_else(|| default_value::not_null_fallback(&column.kind))
        } else if self.replace_null_with_default {
            column.default.clone()
        } else {
            None
        }
    }
}

/// Everything the configuration says about the shape of events.
#[derive(Debug, Clone)]
pub struct EventShape {
    /// `server_name`: `source.name` and the prefix of schema names.
    pub server_name: Arc<str>,
    /// Key columns chosen by configuration.
    pub keys: MessageKeyColumns,
    /// Value columns, masks, hashes, truncations.
    pub columns: ColumnRules,
    /// How values are decoded and written.
    pub decode: DecodeOptions,
    /// `events.source.connector`: named by the Connect schemas.
    pub connector: &'static str,
    /// DDL goes to Debezium's schema change topic, each changed table
    /// described (`events.schema.changes.format: debezium`).
    pub debezium_schema_changes: bool,
    /// `events.include.query`: binlog changes carry their statement in `source.query`.
    pub include_query: bool,
    /// `snapshot.signal_table` (database, table): `columns:` rules never
    /// apply to it, so its rows keep the columns signals are read from.
    pub signal_table: Option<(String, String)>,
}

impl EventShape {
    /// The shape a capture config asks for.
    pub fn of(config: &CaptureConfig) -> Result<Self, CaptureError> {
        Ok(EventShape {
            server_name: config.server_name.as_str().into(),
            keys: config.message_key_columns.clone(),
            columns: ColumnRules::parse(&config.columns)?,
            decode: DecodeOptions {
                undecodable: config.source.undecodable_text,
                modes: config.value_modes(),
                schemas: config.schemas_enabled(),
                replace_null_with_default: config.replaces_null_with_default(),
                zero_dates_as_epoch: config.compat == Compat::Debezium,
                doubles: config.double_format(),
            },
            connector: config.events().connector,
            debezium_schema_changes: config.events().schema_changes_format
                == SchemaChangesFormat::Debezium,
            include_query: config.events().include_query,
            signal_table: config.snapshot.signal_table_name(),
        })
    }

    /// Shaping a table needs its `information_schema` columns (declared
    /// lengths, defaults).
    pub fn needs_info(&self) -> bool {
        self.columns.needs_lengths() || self.decode.needs_defaults()
    }

    /// `schema` shaped: keyed, its columns' defaults set, its value columns
    /// chosen and mapped, its Connect schemas attached; `info` as
    /// [`Self::needs_info`] asks.
    pub fn table(
        &self,
        mut schema: TableSchema,
        info: Option<&[InfoColumn]>,
    ) -> Result<TableSchema, SchemaError> {
        // MySQL declares defaults in `information_schema`; a PostgreSQL
        // table's schema comes with them (`postgres::pg_default`).
        if let Some(info) = info.filter(|_| self.decode.needs_defaults()) {
            for column in &mut schema.columns {
                let declared = info.iter().find(|i| i.name == column.name);
                column.default = declared.and_then(|declared| {
                    declared
                        .default
                        .value(&column.kind, column.nullable, &self.decode.modes)
                });
            }
        }
        let signals = self
            .signal_table
            .as_ref()
            .is_some_and(|(db, table)| **db == *schema.db && **table == *schema.table);
        let schema = schema.keyed_by(&self.keys)?;
        let mut schema = if signals {
            schema
        } else {
            self.columns.attach(schema, info)
        };
        let null_defaults: Vec<Option<Value>> = schema
            .columns
            .iter()
            .map(|c| self.decode.null_default(c))
            .collect();
        if null_defaults.iter().any(Option::is_some) {
            let plan = match schema.value_plan.take() {
                Some(plan) => Arc::unwrap_or_clone(plan),
                None => ValuePlan::every_column(schema.names.clone()),
            };
            schema.value_plan = Some(Arc::new(plan.with_null_defaults(&null_defaults)));
        }
        if self.decode.schemas {
            let schemas = connect_schema::record_schemas(
                &self.server_name,
                self.connector,
                &schema,
                &self.decode.modes,
                self.decode.doubles,
            );
            schema.record_schemas = Some(Arc::new(schemas));
        }
        Ok(schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::column_default::DefaultExpr;

    fn shape(schemas: bool) -> EventShape {
        EventShape {
            server_name: "srv".into(),
            keys: MessageKeyColumns::default(),
            columns: ColumnRules::default(),
            decode: DecodeOptions {
                undecodable: UndecodableText::Stop,
                modes: ValueModes::DEBEZIUM,
                schemas,
                replace_null_with_default: false,
                zero_dates_as_epoch: false,
                doubles: DoubleFormat::Compact,
            },
            connector: "mysql",
            debezium_schema_changes: false,
            include_query: false,
            signal_table: None,
        }
    }

    #[test]
    fn schemas_are_attached_only_when_asked_for() {
        let info = [InfoColumn {
            name: "id".into(),
            column_type: "int(11)".into(),
            charset: None,
            collation: None,
            key_position: Some(1),
            nullable: false,
            char_length: None,
            default: DefaultExpr::None,
        }];
        let table = || TableSchema::from_info_columns("shop", "t", &info);
        let plain = shape(false).table(table(), None).unwrap();
        assert!(plain.record_schemas.is_none());
        let with = shape(true).table(table(), None).unwrap();
        let schemas = with.record_schemas.unwrap();
        assert!(schemas.value.contains("srv.shop.t.Envelope"));
        assert!(schemas.key.as_deref().unwrap().contains("srv.shop.t.Key"));
    }

    #[test]
    fn defaults_are_declared_and_replace_nulls_only_when_asked_for() {
        let column = |name: &str, key_position, default| InfoColumn {
            name: name.into(),
            column_type: "int(11)".into(),
            charset: None,
            collation: None,
            key_position,
            nullable: key_position.is_none(),
            char_length: None,
            default,
        };
        let info = [
            column("id", Some(1), DefaultExpr::None),
            column(
                "n",
                None,
                DefaultExpr::Literal {
                    text: "5".into(),
                    escaped: false,
                },
            ),
        ];
        let table = || TableSchema::from_info_columns("shop", "t", &info);
        let row = |shape: &EventShape| {
            let t = shape.table(table(), Some(&info)).unwrap();
            (
                t.value_row(vec![Value::Int(1), Value::Null]).values,
                t.record_schemas,
            )
        };
        let (values, schemas) = row(&shape(false));
        assert_eq!(values, [Value::Int(1), Value::Null]);
        assert!(schemas.is_none());
        let (values, schemas) = row(&shape(true));
        assert_eq!(
            values,
            [Value::Int(1), Value::Null],
            "schemas alone keep NULLs"
        );
        assert!(
            schemas
                .unwrap()
                .value
                .contains(r#""default":5,"field":"n""#)
        );
        let mut replacing = shape(false);
        replacing.decode.replace_null_with_default = true;
        assert!(replacing.needs_info());
        let (values, _) = row(&replacing);
        assert_eq!(values, [Value::Int(1), Value::Int(5)]);
    }

    #[test]
    fn column_rules_leave_the_signal_table_whole() {
        let column = |name: &str| InfoColumn {
            name: name.into(),
            column_type: "varchar(64)".into(),
            charset: Some("utf8mb4".into()),
            collation: None,
            key_position: (name == "id").then_some(1),
            nullable: name != "id",
            char_length: Some(64),
            default: DefaultExpr::None,
        };
        let info = [column("id"), column("type"), column("data")];
        let mut shape = shape(false);
        shape.columns = ColumnRules::parse(
            &[(
                "column.include.list".to_owned(),
                "shop\\..*\\.id".to_owned(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        shape.signal_table = Some(("shop".into(), "signals".into()));
        let kept = |table: &str| {
            let schema = TableSchema::from_info_columns("shop", table, &info);
            let shaped = shape.table(schema, Some(&info)).unwrap();
            let row = shaped.value_row(vec![Value::Null, Value::Null, Value::Null]);
            row.columns.to_vec()
        };
        assert_eq!(kept("t"), ["id"]);
        assert_eq!(kept("signals"), ["id", "type", "data"]);
    }
}
