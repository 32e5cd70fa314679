//! The SQL dialect of jobs and expressions: ANSI identifiers (double quotes or
//! Flink's backticks for quoting), `FOR SYSTEM_TIME AS OF` on joined tables,
//! and `STRUCT(a AS x, ...)` to nest fields. Everything else is `sqlparser`'s
//! defaults; what the compiler accepts of it is decided by [`crate::expr`] and
//! [`crate::sql`].

use sqlparser::dialect::Dialect;
use sqlparser::parser::{Parser, ParserError};

/// Tributary's dialect.
#[derive(Debug, Default, Clone, Copy)]
pub struct TributaryDialect;

impl Dialect for TributaryDialect {
    fn is_identifier_start(&self, ch: char) -> bool {
        ch.is_alphabetic() || ch == '_'
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        ch.is_alphanumeric() || ch == '_' || ch == '$'
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '"' || ch == '`'
    }

    fn supports_table_versioning(&self) -> bool {
        true
    }

    fn supports_struct_literal(&self) -> bool {
        true
    }
}

/// A parser over `text` in this dialect.
pub fn parser(text: &str) -> Result<Parser<'static>, ParserError> {
    Parser::new(&TributaryDialect).try_with_sql(text)
}
