//! Column defaults as `information_schema.COLUMNS` shows them
//! ([`DefaultExpr`]: MariaDB's quoted literals and expressions, MySQL's bare
//! values), and as Debezium's DDL parser records them
//! ([`DefaultExpr::as_written`]). The value a default declares is
//! [`crate::default_value`]'s.

/// A column's `DEFAULT` clause.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DefaultExpr {
    /// No default, or `DEFAULT NULL`.
    #[default]
    None,
    /// A literal as the server shows it: a number, or a string's text
    /// between its quotes, with its `''` and backslash escapes when `escaped`
    /// (MariaDB's form: `'it''s'` is `it''s`; MySQL shows `it's`).
    Literal {
        /// The text.
        text: String,
        /// Escapes are still in it.
        escaped: bool,
    },
    /// A bit literal's digits (`b'101'` is `101`).
    Bits(String),
    /// `CURRENT_TIMESTAMP[(n)]` (`NOW()`, `LOCALTIMESTAMP`: the server shows them so).
    CurrentTimestamp,
    /// Any other expression (`(1 + 2)`, `curdate()`, `uuid()`); a bare
    /// function call MariaDB shows as such (`curdate()`) is kept, as
    /// Debezium's MariaDB grammar records it.
    Expression(Option<String>),
}

impl DefaultExpr {
    /// `COLUMN_DEFAULT` and `EXTRA` as `information_schema.COLUMNS` shows them:
    /// on MariaDB (10.2.7+) SQL NULL for no default, `NULL` for `DEFAULT NULL`,
    /// quoted strings, bare numbers, bit literals and expressions; on MySQL
    /// the bare value, and `DEFAULT_GENERATED` in `EXTRA` for an expression.
    pub fn parse(column_default: Option<&str>, extra: &str, mariadb: bool) -> DefaultExpr {
        let Some(text) = column_default else {
            return DefaultExpr::None;
        };
        let current_timestamp = || {
            let lower = text.to_ascii_lowercase();
            lower == "current_timestamp" || lower.starts_with("current_timestamp(")
        };
        let literal = |text: &str, escaped| DefaultExpr::Literal {
            text: text.to_owned(),
            escaped,
        };
        if !mariadb {
            return if !extra.contains("DEFAULT_GENERATED") {
                bits(text).unwrap_or_else(|| literal(text, false))
            } else if current_timestamp() {
                DefaultExpr::CurrentTimestamp
            } else {
                DefaultExpr::Expression(None)
            };
        }
        if text == "NULL" {
            DefaultExpr::None
        } else if let Some(quoted) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
            literal(quoted, true)
        } else if let Some(bits) = bits(text) {
            bits
        } else if current_timestamp() {
            DefaultExpr::CurrentTimestamp
        } else if text.parse::<f64>().is_ok() {
            literal(text, false)
        } else {
            DefaultExpr::Expression((!text.starts_with('(')).then(|| text.to_owned()))
        }
    }

    /// The default as Debezium's DDL parser records it
    /// (`defaultValueExpression` of the schema change topic): a string's text
    /// without its quotes (escapes kept), a bit literal's digits,
    /// `CURRENT_TIMESTAMP` as `1970-01-01 00:00:00`.
    pub fn as_written(&self) -> Option<&str> {
        match self {
            DefaultExpr::None => None,
            DefaultExpr::Literal { text, .. } | DefaultExpr::Bits(text) => Some(text),
            DefaultExpr::CurrentTimestamp => Some("1970-01-01 00:00:00"),
            DefaultExpr::Expression(text) => text.as_deref(),
        }
    }
}

/// `b'…'` as [`DefaultExpr::Bits`].
fn bits(text: &str) -> Option<DefaultExpr> {
    let digits = text.strip_prefix("b'")?.strip_suffix('\'')?;
    digits
        .bytes()
        .all(|b| b == b'0' || b == b'1')
        .then(|| DefaultExpr::Bits(digits.to_owned()))
}

/// A quoted literal's text: `''` is `'`, and the server's backslash escapes
/// (`\\`, `\0`, `\n`, `\r`, `\Z`) are the characters they stand for.
pub(crate) fn unescape(quoted: &str) -> String {
    let mut out = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                // The second quote of a doubled pair.
                chars.next();
                out.push('\'');
            }
            '\\' => match chars.next() {
                Some('0') => out.push('\0'),
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some('t') => out.push('\t'),
                Some('Z') => out.push('\u{1a}'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `information_schema.COLUMNS` of MariaDB 10.11 shows the defaults
    /// of `a INT DEFAULT -5`, `b VARCHAR(20) DEFAULT 'it''s \\ x'`, …
    #[test]
    fn mariadb_defaults_parse_as_the_server_shows_them() {
        let quoted = |text: &str| DefaultExpr::Literal {
            text: text.into(),
            escaped: true,
        };
        let cases: [(Option<&str>, DefaultExpr, Option<&str>); 10] = [
            (None, DefaultExpr::None, None),
            (Some("NULL"), DefaultExpr::None, None),
            (Some("'NULL'"), quoted("NULL"), Some("NULL")),
            (Some("-5"), unescaped("-5"), Some("-5")),
            (
                Some(r"'it''s \\ x'"),
                quoted(r"it''s \\ x"),
                Some(r"it''s \\ x"),
            ),
            (Some("b'101'"), DefaultExpr::Bits("101".into()), Some("101")),
            (
                Some("current_timestamp(3)"),
                DefaultExpr::CurrentTimestamp,
                Some("1970-01-01 00:00:00"),
            ),
            (Some("(1 + 2)"), DefaultExpr::Expression(None), None),
            (
                Some("curdate()"),
                DefaultExpr::Expression(Some("curdate()".into())),
                Some("curdate()"),
            ),
            (Some(r"'a\nb	c'"), quoted(r"a\nb	c"), Some(r"a\nb	c")),
        ];
        for (text, expected, written) in cases {
            let parsed = DefaultExpr::parse(text, "", true);
            assert_eq!(parsed, expected, "{text:?}");
            assert_eq!(parsed.as_written(), written, "{text:?}");
        }
    }

    fn unescaped(text: &str) -> DefaultExpr {
        DefaultExpr::Literal {
            text: text.into(),
            escaped: false,
        }
    }

    #[test]
    fn mysql_defaults_are_bare_and_expressions_flagged() {
        let parse = |text, extra| DefaultExpr::parse(Some(text), extra, false);
        assert_eq!(parse("it's", ""), unescaped("it's"));
        assert_eq!(parse("NULL", ""), unescaped("NULL"));
        assert_eq!(
            parse(
                "CURRENT_TIMESTAMP",
                "DEFAULT_GENERATED on update CURRENT_TIMESTAMP"
            ),
            DefaultExpr::CurrentTimestamp
        );
        assert_eq!(
            parse("(now() + 1)", "DEFAULT_GENERATED"),
            DefaultExpr::Expression(None)
        );
        assert_eq!(parse("b'11'", ""), DefaultExpr::Bits("11".into()));
    }
}
