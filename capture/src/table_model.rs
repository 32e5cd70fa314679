//! A table as the server stores its definition ([`TableModel`]): each
//! column's `COLUMN_TYPE`, character set, nullability, default, `EXTRA` and
//! comment, the table's default character set, comment and primary key. The
//! schema change topic's [`TableDefinition`] is derived from it
//! ([`TableModel::definition`]); [`crate::ddl_replay`] changes it as each DDL
//! statement does.
//!
//! Read from `information_schema` ([`TableModel::read`]), or rebuilt from a
//! definition the schema change topic recorded ([`TableModel::from_definition`]).

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::column_default::DefaultExpr;
use crate::error::CaptureError;
use crate::schema::InfoColumn;
use crate::source;
use crate::table_definition::{
    Attributes, DeclaredType, Flavor, TableDefinition, column_definition, non_empty,
};

/// One table's stored definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableModel {
    /// The character set of the table's collation.
    pub charset: Option<String>,
    /// `TABLE_COMMENT` (empty: none).
    pub comment: String,
    /// The columns, in table order.
    pub columns: Vec<ColumnModel>,
    /// The primary key's columns in key order (or those of the unique index
    /// the server promoted to primary key).
    pub primary_key: Vec<String>,
}

/// One column of a [`TableModel`], as `information_schema.COLUMNS` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnModel {
    /// `COLUMN_NAME`.
    pub name: String,
    /// `COLUMN_TYPE` (`int(11)`, `enum('a','b')`, `decimal(10,2) unsigned`).
    pub column_type: String,
    /// `CHARACTER_SET_NAME` (text types only).
    pub charset: Option<String>,
    /// `IS_NULLABLE = 'YES'`.
    pub nullable: bool,
    /// `COLUMN_DEFAULT`.
    pub default: DefaultExpr,
    /// Whether `default` is the server's own (read, or replayed), not
    /// rebuilt from a recorded definition, which keeps only its text.
    pub default_exact: bool,
    /// `EXTRA`: `auto_increment`, `on update current_timestamp()`, …
    pub extra: String,
    /// `COLUMN_COMMENT` (empty: none).
    pub comment: String,
}

/// `db.table` as it is now, as the schema change topic describes it; `None`
/// if it does not exist.
pub async fn read_definition(
    conn: &mut Conn,
    db: &str,
    table: &str,
    flavor: Flavor,
) -> Result<Option<TableDefinition>, CaptureError> {
    Ok(TableModel::read(conn, db, table)
        .await?
        .map(|model| model.definition(flavor)))
}

/// `COLUMN_NAME, COLUMN_DEFAULT, EXTRA, COLUMN_COMMENT`, and whether the
/// server is MariaDB.
type ExtraRow = (String, Option<String>, String, String, bool);

impl TableModel {
    /// `db.table` as it is now; `None` if it does not exist.
    pub async fn read(
        conn: &mut Conn,
        db: &str,
        table: &str,
    ) -> Result<Option<TableModel>, CaptureError> {
        let info = source::info_columns_on(conn, db, table).await?;
        if info.is_empty() {
            return Ok(None);
        }
        let extra: Vec<ExtraRow> = conn
            .exec(
                "SELECT COLUMN_NAME, COLUMN_DEFAULT, EXTRA, COLUMN_COMMENT, VERSION() LIKE '%MariaDB%' \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
                 ORDER BY ORDINAL_POSITION",
                (db, table),
            )
            .await?;
        let (charset, comment): (Option<String>, String) = conn
            .exec_first(
                "SELECT c.CHARACTER_SET_NAME, t.TABLE_COMMENT FROM information_schema.TABLES t \
                 LEFT JOIN information_schema.COLLATIONS c ON c.COLLATION_NAME = t.TABLE_COLLATION \
                 WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ?",
                (db, table),
            )
            .await?
            .unwrap_or_default();
        let columns = info
            .iter()
            .zip(extra)
            .map(
                |(column, (_, default, extra, comment, mariadb))| ColumnModel {
                    name: column.name.clone(),
                    column_type: column.column_type.clone(),
                    charset: column.charset.clone(),
                    nullable: column.nullable,
                    default: DefaultExpr::parse(default.as_deref(), &extra, mariadb),
                    default_exact: true,
                    extra,
                    comment,
                },
            )
            .collect();
        Ok(Some(TableModel {
            charset,
            comment,
            columns,
            primary_key: InfoColumn::key_of(&info)
                .into_iter()
                .map(|i| info[i].name.clone())
                .collect(),
        }))
    }

    /// The table as the schema change topic describes it.
    pub fn definition(&self, flavor: Flavor) -> TableDefinition {
        let columns = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, column)| {
                let info = InfoColumn {
                    name: column.name.clone(),
                    column_type: column.column_type.clone(),
                    charset: column.charset.clone(),
                    collation: None,
                    key_position: None,
                    nullable: column.nullable,
                    char_length: None,
                    default: column.default.clone(),
                };
                column_definition(
                    &info,
                    i + 1,
                    &Attributes {
                        extra: &column.extra,
                        comment: &column.comment,
                        default: &column.default,
                        table_charset: self.charset.as_deref(),
                    },
                    flavor,
                )
            })
            .collect();
        TableDefinition {
            default_charset: self.charset.clone(),
            primary_key: self.primary_key.clone(),
            columns,
            comment: non_empty(&self.comment).filter(|_| flavor.mariadb_connector),
        }
    }

    /// The model a recorded definition was derived from, as far as the
    /// definition shows it: `COLUMN_TYPE` from the type name, length, scale
    /// and values; `auto_increment` for an auto-incremented column; a default
    /// as the server shows it on MariaDB (`mariadb`: quotes' escapes kept).
    /// Its [`TableModel::definition`] is `definition` again.
    pub fn from_definition(definition: &TableDefinition, mariadb: bool) -> TableModel {
        let columns = definition
            .columns
            .iter()
            .map(|column| {
                let declared = DeclaredType::from_definition(column);
                ColumnModel {
                    name: column.name.clone(),
                    column_type: declared.column_type(),
                    charset: column.charset.clone(),
                    nullable: column.optional,
                    default: match &column.default {
                        None => DefaultExpr::None,
                        Some(text) => DefaultExpr::Literal {
                            text: text.clone(),
                            escaped: mariadb,
                        },
                    },
                    default_exact: false,
                    extra: if column.auto_incremented {
                        "auto_increment".to_owned()
                    } else {
                        String::new()
                    },
                    comment: column.comment.clone().unwrap_or_default(),
                }
            })
            .collect();
        TableModel {
            charset: definition.default_charset.clone(),
            comment: definition.comment.clone().unwrap_or_default(),
            columns,
            primary_key: definition.primary_key.clone(),
        }
    }

    /// Sets the defaults of the server's `columns` (read when a table's
    /// rows are decoded, perhaps after later DDL) to this model's, where
    /// they are the same columns and the model's defaults are exact: rows
    /// before an `ALTER … SET DEFAULT` declare the default of their time.
    pub fn set_defaults_of(&self, columns: &mut [InfoColumn]) {
        let same = columns.len() == self.columns.len()
            && columns
                .iter()
                .zip(&self.columns)
                .all(|(info, model)| info.name.eq_ignore_ascii_case(&model.name));
        if !same {
            return;
        }
        for (info, model) in columns.iter_mut().zip(&self.columns) {
            if model.default_exact {
                info.default = model.default.clone();
            }
        }
    }

    /// The column named `name` (names are case-insensitive).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    }
}
