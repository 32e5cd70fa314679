//! A captured PostgreSQL table: its shape, from the `pgoutput` Relation
//! message (names, types, replica identity) and the catalog (nullability,
//! primary key), and its tuples decoded into values in the capture's
//! `values` modes.
//!
//! The key of its events is the primary key, whatever the replica identity
//! (with `REPLICA IDENTITY FULL` the Relation message marks every column),
//! or the columns `message_key_columns` names; a table without either has
//! events with a null key, as Debezium's. The rest of the event's shape
//! (`columns:` rules) is [`EventShape`]'s, as for MySQL.

use tributary_proto::Value;
use tributary_proto::unavailable::UNAVAILABLE_VALUE;

use crate::event_shape::EventShape;
use crate::postgres::catalog::{CatalogColumn, CatalogTypes};
use crate::postgres::pg_default;
use crate::postgres::pg_type::{PgType, UnknownType};
use crate::postgres::pgoutput::{Datum, Relation, ReplicaIdentity};
use crate::postgres::text_value::{self, TextValueError};
use crate::row_decoder::ValueError;
use crate::schema::{ColumnSchema, SchemaError, TableSchema};
use crate::value_modes::ValueModes;

/// A table as capture decodes its changes.
#[derive(Debug, Clone)]
pub struct PgTable {
    /// Its shape; `db` is its schema (`public`).
    pub schema: TableSchema,
    /// Each column's type.
    pub types: Vec<PgType>,
    /// What its updates' and deletes' old rows hold.
    pub identity: ReplicaIdentity,
}

/// Why a table's shape or one of its rows could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PgTableError {
    /// A column's type is not in the catalog read for it.
    #[error("{table}.{column}: {source}")]
    Type {
        /// `schema.table`.
        table: String,
        /// The column.
        column: String,
        /// The type.
        source: UnknownType,
    },
    /// `message_key_columns` or `columns` name a column the table lacks.
    #[error(transparent)]
    Key(#[from] SchemaError),
    /// A tuple has a different number of columns than its relation.
    #[error("{table}: a row of {got} columns, its relation has {want}")]
    Arity {
        /// `schema.table`.
        table: String,
        /// Columns in the row.
        got: usize,
        /// Columns in the relation.
        want: usize,
    },
    /// A value's text does not decode.
    #[error("{table}.{column}: {source}")]
    Text {
        /// `schema.table`.
        table: String,
        /// The column.
        column: String,
        /// What is wrong.
        source: TextValueError,
    },
    /// A value has no form in the configured `values` modes.
    #[error("{table}.{column}: {source}")]
    Mode {
        /// `schema.table`.
        table: String,
        /// The column.
        column: String,
        /// What is wrong.
        source: ValueError,
    },
}

impl PgTable {
    /// The table a Relation message describes, completed from the catalog
    /// (`columns`, read when the message arrived: a column it lacks is
    /// nullable and outside the key).
    pub fn new(
        relation: &Relation,
        types: &CatalogTypes,
        columns: &[CatalogColumn],
        shape: &EventShape,
    ) -> Result<PgTable, PgTableError> {
        let table = format!("{}.{}", relation.namespace, relation.name);
        let mut pg_types = Vec::with_capacity(relation.columns.len());
        let mut schema_columns = Vec::with_capacity(relation.columns.len());
        let mut key: Vec<(u16, usize)> = Vec::new();
        for (i, column) in relation.columns.iter().enumerate() {
            let ty = types
                .resolve(column.type_oid, column.type_modifier)
                .map_err(|source| PgTableError::Type {
                    table: table.clone(),
                    column: column.name.clone(),
                    source,
                })?;
            let catalog = columns.iter().find(|c| c.name == column.name);
            if let Some(position) = catalog.and_then(|c| c.key_position) {
                key.push((position, i));
            }
            let kind = ty.column_kind();
            let default = catalog
                .and_then(|c| c.default.as_deref())
                .filter(|_| shape.decode.needs_defaults())
                .and_then(|expr| pg_default::value(expr, &ty, &kind, &shape.decode.modes));
            schema_columns.push(ColumnSchema {
                name: column.name.clone(),
                kind,
                nullable: !catalog.is_some_and(|c| c.not_null),
                declared: ty.declared(),
                default,
            });
            pg_types.push(ty);
        }
        key.sort_unstable();
        let schema = shape.table(
            TableSchema::assemble(
                relation.namespace.clone(),
                relation.name.clone(),
                schema_columns,
                key.into_iter().map(|(_, i)| i).collect(),
            ),
            None,
        )?;
        Ok(PgTable {
            schema,
            types: pg_types,
            identity: relation.replica_identity,
        })
    }

    /// `schema.table`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.schema.db, self.schema.table)
    }

    /// A tuple's values, in `modes`; an unchanged TOASTed value is
    /// [`UNAVAILABLE_VALUE`].
    pub fn values(&self, tuple: &[Datum], modes: &ValueModes) -> Result<Vec<Value>, PgTableError> {
        if tuple.len() != self.types.len() {
            return Err(PgTableError::Arity {
                table: self.name(),
                got: tuple.len(),
                want: self.types.len(),
            });
        }
        tuple
            .iter()
            .zip(&self.types)
            .zip(&self.schema.columns)
            .map(|((datum, ty), column)| {
                let value = match datum {
                    Datum::Null => return Ok(Value::Null),
                    Datum::UnchangedToast => unavailable(ty),
                    Datum::Text(text) => {
                        text_value::decode(ty, text).map_err(|source| PgTableError::Text {
                            table: self.name(),
                            column: column.name.clone(),
                            source,
                        })?
                    }
                };
                modes
                    .apply(&column.kind, value)
                    .map_err(|source| PgTableError::Mode {
                        table: self.name(),
                        column: column.name.clone(),
                        source,
                    })
            })
            .collect()
    }
}

/// Debezium's placeholder for an unchanged TOASTed value of type `ty`:
/// its bytes for `bytea`, a one-element array for arrays, else its text.
fn unavailable(ty: &PgType) -> Value {
    match ty {
        PgType::Bytea => Value::Bytes(UNAVAILABLE_VALUE.as_bytes().to_vec()),
        PgType::Array(_) => Value::Array(vec![Value::String(UNAVAILABLE_VALUE.to_owned())]),
        _ => Value::String(UNAVAILABLE_VALUE.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CaptureConfig;
    use crate::postgres::pgoutput::RelationColumn;

    fn shape() -> EventShape {
        let config = CaptureConfig::parse(
            "server_name: shop\n\
             source: { kind: postgres, host: h, user: u, database: shop }\n\
             kafka: { brokers: 'b:9092' }\n",
        )
        .unwrap();
        EventShape::of(&config).unwrap()
    }

    fn relation(identity: ReplicaIdentity) -> Relation {
        let column = |name: &str, type_oid, key| RelationColumn {
            key,
            name: name.to_owned(),
            type_oid,
            type_modifier: -1,
        };
        Relation {
            oid: 1,
            namespace: "public".into(),
            name: "orders".into(),
            replica_identity: identity,
            columns: vec![
                column("note", 25, true),
                column("id", 23, true),
                column("region", 25, true),
                column("doc", 17, true),
            ],
        }
    }

    fn catalog() -> Vec<CatalogColumn> {
        let column = |name: &str, not_null, key_position| CatalogColumn {
            name: name.to_owned(),
            not_null,
            key_position,
            type_oid: 25,
            type_modifier: -1,
            type_name: "text".to_owned(),
            default: None,
        };
        vec![
            column("note", false, None),
            column("id", true, Some(2)),
            column("region", true, Some(1)),
            column("doc", false, None),
        ]
    }

    #[test]
    fn the_key_is_the_primary_key_in_its_order_whatever_the_identity() {
        let table = PgTable::new(
            &relation(ReplicaIdentity::Full),
            &CatalogTypes::default(),
            &catalog(),
            &shape(),
        )
        .unwrap();
        assert_eq!(&*table.schema.key_names, ["region", "id"]);
        assert_eq!(&*table.schema.db, "public");
        assert!(table.schema.columns[0].nullable);
        assert!(!table.schema.columns[1].nullable);
        let values = table
            .values(
                &[
                    Datum::UnchangedToast,
                    Datum::Text(b"7".to_vec()),
                    Datum::Null,
                    Datum::UnchangedToast,
                ],
                &ValueModes::TRIBUTARY,
            )
            .unwrap();
        assert_eq!(
            values,
            [
                Value::String(UNAVAILABLE_VALUE.into()),
                Value::Int(7),
                Value::Null,
                Value::Bytes(UNAVAILABLE_VALUE.as_bytes().to_vec()),
            ]
        );
    }

    #[test]
    fn bad_rows_name_table_and_column() {
        let table = PgTable::new(
            &relation(ReplicaIdentity::Default),
            &CatalogTypes::default(),
            &catalog(),
            &shape(),
        )
        .unwrap();
        let err = table
            .values(
                &[
                    Datum::Null,
                    Datum::Text(b"x".to_vec()),
                    Datum::Null,
                    Datum::Null,
                ],
                &ValueModes::TRIBUTARY,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "public.orders.id: integer value \"x\": not an integer"
        );
        let err = table
            .values(&[Datum::Null], &ValueModes::TRIBUTARY)
            .unwrap_err();
        assert!(
            matches!(
                err,
                PgTableError::Arity {
                    got: 1,
                    want: 4,
                    ..
                }
            ),
            "{err}"
        );
    }
}
