//! A table as Debezium's schema change topic describes it (`tableChanges[].table`):
//! its default character set, primary key, comment, and each column's JDBC
//! type, type name, length, scale, character set, position, nullability,
//! auto-increment, comment, default and ENUM/SET values.
//!
//! Derived from a table's model (`crate::table_model`: read from
//! `information_schema`, or replayed); each attribute derived as
//! Debezium 3.6's DDL parser derives it from `SHOW CREATE TABLE`
//! (`MySqlAntlrDdlParser`'s data types, `ColumnDefinitionParserListener`),
//! which prints what `information_schema.COLUMNS.COLUMN_TYPE` holds (MariaDB's
//! `int(11)`: length 11).

use crate::column_default::DefaultExpr;
use crate::schema::InfoColumn;

/// `tableChanges[].table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDefinition {
    /// `defaultCharsetName`: the character set of the table's collation.
    pub default_charset: Option<String>,
    /// `primaryKeyColumnNames`, in key order.
    pub primary_key: Vec<String>,
    /// `columns`, in table order.
    pub columns: Vec<ColumnDefinition>,
    /// `comment` (Debezium's MariaDB connector writes comments by default,
    /// its MySQL connector not).
    pub comment: Option<String>,
}

/// One column of a [`TableDefinition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDefinition {
    /// `name`.
    pub name: String,
    /// `jdbcType`: the `java.sql.Types` code Debezium gives the type.
    pub jdbc_type: i32,
    /// `typeName` (and `typeExpression`): the type, upper case, with
    /// ` UNSIGNED` / ` UNSIGNED ZEROFILL`.
    pub type_name: String,
    /// `charsetName`: text types only.
    pub charset: Option<String>,
    /// `length`: the declared length, precision or fraction digits; 1 for an
    /// ENUM, 2n−1 for a SET of n values.
    pub length: Option<i32>,
    /// `scale`.
    pub scale: Option<i32>,
    /// `position`, from 1.
    pub position: i32,
    /// `optional`.
    pub optional: bool,
    /// `autoIncremented` and `generated` (Debezium sets both alike).
    pub auto_incremented: bool,
    /// `comment`.
    pub comment: Option<String>,
    /// `defaultValueExpression`.
    pub default: Option<String>,
    /// `enumValues`: each value quoted, as declared.
    pub enum_values: Option<Vec<String>>,
}

/// Which of Debezium's connectors the definition is shaped for: its MariaDB
/// connector writes comments, and does not count `ON UPDATE
/// CURRENT_TIMESTAMP` after `DEFAULT CURRENT_TIMESTAMP` as auto-increment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flavor {
    /// Debezium's MariaDB connector (`events.source.connector: mariadb`).
    pub mariadb_connector: bool,
}

/// What `information_schema.COLUMNS` says of a column besides [`InfoColumn`].
pub(crate) struct Attributes<'a> {
    pub(crate) extra: &'a str,
    pub(crate) comment: &'a str,
    pub(crate) default: &'a DefaultExpr,
    pub(crate) table_charset: Option<&'a str>,
}

pub(crate) fn column_definition(
    info: &InfoColumn,
    position: usize,
    attributes: &Attributes<'_>,
    flavor: Flavor,
) -> ColumnDefinition {
    let declared = DeclaredType::parse(&info.column_type);
    let jdbc_type = jdbc_type(&declared.base);
    let extra = attributes.extra.to_ascii_lowercase();
    let on_update = extra.contains("on update");
    let auto_incremented = extra.contains("auto_increment")
        || on_update
            && !(flavor.mariadb_connector && *attributes.default == DefaultExpr::CurrentTimestamp);
    let (length, enum_values) = match declared.base.as_str() {
        "enum" => (Some(1), Some(declared.values.clone())),
        "set" => (
            Some(2 * declared.values.len() as i32 - 1),
            Some(declared.values.clone()),
        ),
        _ => (declared.length, None),
    };
    ColumnDefinition {
        name: info.name.clone(),
        jdbc_type,
        type_name: declared.type_name(),
        charset: uses_charset(jdbc_type)
            .then(|| {
                info.charset
                    .clone()
                    .or_else(|| attributes.table_charset.map(str::to_owned))
            })
            .flatten(),
        length,
        scale: declared.scale,
        position: position as i32,
        optional: info.nullable,
        auto_incremented,
        comment: non_empty(attributes.comment).filter(|_| flavor.mariadb_connector),
        default: attributes.default.as_written().map(str::to_owned),
        enum_values: enum_values.filter(|values| !values.is_empty()),
    }
}

pub(crate) fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

/// `COLUMN_TYPE` taken apart: `decimal(10,2) unsigned zerofill`, `enum('a','b')`.
#[derive(Debug, PartialEq)]
pub(crate) struct DeclaredType {
    /// The type's name, lower case (`int`, `varchar`).
    pub(crate) base: String,
    pub(crate) length: Option<i32>,
    pub(crate) scale: Option<i32>,
    /// ENUM/SET values, quoted as declared.
    pub(crate) values: Vec<String>,
    pub(crate) unsigned: bool,
    pub(crate) zerofill: bool,
}

impl DeclaredType {
    pub(crate) fn parse(column_type: &str) -> DeclaredType {
        let text = column_type.trim();
        let (base, rest) = match text.find(['(', ' ']) {
            Some(at) => text.split_at(at),
            None => (text, ""),
        };
        let (arguments, attributes) = match rest.strip_prefix('(') {
            Some(inner) => {
                let end = closing_paren(inner);
                (&inner[..end], &inner[(end + 1).min(inner.len())..])
            }
            None => ("", rest),
        };
        let base = base.to_ascii_lowercase();
        let attributes = attributes.to_ascii_lowercase();
        let mut declared = DeclaredType {
            unsigned: attributes.contains("unsigned"),
            zerofill: attributes.contains("zerofill"),
            base,
            length: None,
            scale: None,
            values: Vec::new(),
        };
        if declared.base == "enum" || declared.base == "set" {
            declared.values = quoted_values(arguments);
        } else if !arguments.is_empty() {
            let mut numbers = arguments.split(',').map(|n| n.trim().parse::<i32>().ok());
            declared.length = numbers.next().flatten();
            declared.scale = numbers.next().flatten();
        }
        declared
    }

    /// The type a column's definition was derived from: its
    /// [`DeclaredType::type_name`], length, scale and values taken apart.
    pub(crate) fn from_definition(column: &ColumnDefinition) -> DeclaredType {
        let mut words = column.type_name.split(' ');
        let base = words.next().unwrap_or_default().to_ascii_lowercase();
        let attributes: Vec<&str> = words.collect();
        let values = column.enum_values.clone().unwrap_or_default();
        let enumerated = base == "enum" || base == "set";
        DeclaredType {
            length: column.length.filter(|_| !enumerated),
            scale: column.scale,
            values,
            unsigned: attributes.contains(&"UNSIGNED"),
            zerofill: attributes.contains(&"ZEROFILL"),
            base,
        }
    }

    /// As `COLUMN_TYPE` shows it: `decimal(10,2) unsigned`, `enum('a','b')`.
    pub(crate) fn column_type(&self) -> String {
        let mut text = self.base.clone();
        if self.base == "enum" || self.base == "set" {
            text = format!("{text}({})", self.values.join(","));
        } else if let Some(length) = self.length {
            text.push_str(&match self.scale {
                Some(scale) => format!("({length},{scale})"),
                None => format!("({length})"),
            });
        }
        if self.unsigned {
            text.push_str(" unsigned");
        }
        if self.zerofill {
            text.push_str(" zerofill");
        }
        text
    }

    fn type_name(&self) -> String {
        let mut name = self.base.to_ascii_uppercase();
        if self.unsigned || self.zerofill {
            name.push_str(" UNSIGNED");
        }
        if self.zerofill {
            name.push_str(" ZEROFILL");
        }
        name
    }
}

/// Where the parenthesis opened before `inner` closes (quotes respected).
fn closing_paren(inner: &str) -> usize {
    let mut quoted = false;
    for (i, c) in inner.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            ')' if !quoted => return i,
            _ => {}
        }
    }
    inner.len()
}

/// `'a','it''s'` as `["'a'", "'it''s'"]`.
fn quoted_values(list: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in list.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => values.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        values.push(current);
    }
    values
}

/// The `java.sql.Types` code Debezium's MySQL grammar gives a type.
fn jdbc_type(base: &str) -> i32 {
    match base {
        "tinyint" | "smallint" => 5,
        "mediumint" | "int" | "integer" | "year" => 4,
        "bigint" => -5,
        "real" => 7,
        "double" => 8,
        "float" => 6,
        "decimal" | "dec" | "fixed" => 3,
        "numeric" => 2,
        "bit" => -7,
        "bool" | "boolean" => 16,
        "char" | "enum" | "set" => 1,
        "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => 12,
        "date" => 91,
        "time" => 92,
        "datetime" => 93,
        "timestamp" => 2014,
        "binary" => -2,
        "varbinary" => -3,
        "tinyblob" | "blob" | "mediumblob" | "longblob" => 2004,
        _ => 1111,
    }
}

/// Types whose columns carry a character set (`ColumnImpl.typeUsesCharset`).
fn uses_charset(jdbc_type: i32) -> bool {
    matches!(
        jdbc_type,
        1 | 12 | -1 | 2005 | -15 | -9 | -16 | 2011 | 70 | 2009
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, column_type: &str, charset: Option<&str>, nullable: bool) -> InfoColumn {
        InfoColumn {
            name: name.into(),
            column_type: column_type.into(),
            charset: charset.map(str::to_owned),
            collation: None,
            key_position: None,
            nullable,
            char_length: None,
            default: DefaultExpr::None,
        }
    }

    fn definition(
        column_type: &str,
        charset: Option<&str>,
        extra: &str,
        default: &DefaultExpr,
        mariadb_connector: bool,
    ) -> ColumnDefinition {
        column_definition(
            &info("c", column_type, charset, true),
            3,
            &Attributes {
                extra,
                comment: "a note",
                default,
                table_charset: Some("latin1"),
            },
            Flavor { mariadb_connector },
        )
    }

    /// (COLUMN_TYPE, charset, jdbcType, typeName, length, scale, charsetName).
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        i32,
        &'a str,
        Option<i32>,
        Option<i32>,
        Option<&'a str>,
    );

    /// Debezium 3.6's parse of the same columns (its `MySqlAntlrDdlParser`
    /// data types; lengths as `SHOW CREATE TABLE` prints them).
    #[test]
    fn columns_as_debeziums_parser_describes_them() {
        let none = DefaultExpr::None;
        let cases: [Case; 12] = [
            ("int(11)", None, 4, "INT", Some(11), None, None),
            (
                "int(10) unsigned",
                None,
                4,
                "INT UNSIGNED",
                Some(10),
                None,
                None,
            ),
            (
                "bigint(20) unsigned zerofill",
                None,
                -5,
                "BIGINT UNSIGNED ZEROFILL",
                Some(20),
                None,
                None,
            ),
            ("tinyint(1)", None, 5, "TINYINT", Some(1), None, None),
            (
                "varchar(20)",
                Some("utf8mb4"),
                12,
                "VARCHAR",
                Some(20),
                None,
                Some("utf8mb4"),
            ),
            ("decimal(10,2)", None, 3, "DECIMAL", Some(10), Some(2), None),
            ("datetime(3)", None, 93, "DATETIME", Some(3), None, None),
            ("timestamp", None, 2014, "TIMESTAMP", None, None, None),
            (
                "longtext",
                Some("utf8mb4"),
                12,
                "LONGTEXT",
                None,
                None,
                Some("utf8mb4"),
            ),
            ("blob", None, 2004, "BLOB", None, None, None),
            ("bit(1)", None, -7, "BIT", Some(1), None, None),
            ("year(4)", None, 4, "YEAR", Some(4), None, None),
        ];
        for (column_type, charset, jdbc, name, length, scale, charset_name) in cases {
            let d = definition(column_type, charset, "", &none, false);
            assert_eq!(
                (
                    d.jdbc_type,
                    d.type_name.as_str(),
                    d.length,
                    d.scale,
                    d.charset.as_deref()
                ),
                (jdbc, name, length, scale, charset_name),
                "{column_type}"
            );
            assert_eq!((d.position, d.optional, d.enum_values), (3, true, None));
        }
        let e = definition("enum('a','it''s')", Some("utf8mb4"), "", &none, false);
        assert_eq!(
            (e.jdbc_type, e.type_name.as_str(), e.length),
            (1, "ENUM", Some(1))
        );
        assert_eq!(e.enum_values.unwrap(), ["'a'", "'it''s'"]);
        let s = definition("set('x','y,z','w')", None, "", &none, false);
        assert_eq!((s.length, s.charset.as_deref()), (Some(5), Some("latin1")));
        assert_eq!(s.enum_values.unwrap(), ["'x'", "'y,z'", "'w'"]);
    }

    #[test]
    fn auto_increment_comments_and_defaults_follow_the_connector() {
        let id = definition("int(11)", None, "auto_increment", &DefaultExpr::None, false);
        assert!(id.auto_incremented);
        assert_eq!(id.comment, None, "the MySQL connector writes no comments");
        let now = DefaultExpr::CurrentTimestamp;
        let stamp = |mariadb| {
            definition(
                "timestamp",
                None,
                "on update current_timestamp()",
                &now,
                mariadb,
            )
        };
        assert!(stamp(false).auto_incremented);
        assert!(!stamp(true).auto_incremented);
        assert_eq!(stamp(true).comment.as_deref(), Some("a note"));
        assert_eq!(stamp(true).default.as_deref(), Some("1970-01-01 00:00:00"));
    }
}
