//! Which columns key a table's change events, as Debezium decides:
//! `message_key_columns` when it names the table (Debezium's
//! `message.key.columns`), else the primary key (or the first unique key whose
//! columns are all NOT NULL, which the server reports as the primary key when
//! there is none), else no key at all: the events of such a table have a null
//! Kafka key.
//!
//! `message_key_columns` uses Debezium's syntax,
//! `<db>.<table>:<column>,<column>;<db>.<table>:<column>`, where the table part
//! is a regular expression matched against the whole `db.table` (the first
//! matching entry wins) and the columns are listed in key order.

use regex::Regex;

/// An entry of `message_key_columns` that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageKeyError {
    /// An entry without `:`.
    #[error("{0:?} must be <db>.<table>:<column>[,<column>…]")]
    Form(String),
    /// A table part that is not a regular expression.
    #[error("{pattern:?} is not a regular expression: {problem}")]
    Pattern {
        /// The table part.
        pattern: String,
        /// The regex crate's error.
        problem: String,
    },
    /// An entry with no column after `:`.
    #[error("{0:?} names no key column")]
    NoColumn(String),
}

/// Key columns chosen per table by configuration.
#[derive(Debug, Clone, Default)]
pub struct MessageKeyColumns {
    entries: Vec<(Regex, Vec<String>)>,
}

impl TryFrom<String> for MessageKeyColumns {
    type Error = MessageKeyError;

    fn try_from(text: String) -> Result<Self, MessageKeyError> {
        let mut entries = Vec::new();
        for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (table, columns) = entry
                .split_once(':')
                .ok_or_else(|| MessageKeyError::Form(entry.to_owned()))?;
            let pattern = Regex::new(&format!("^(?:{})$", table.trim())).map_err(|e| {
                MessageKeyError::Pattern {
                    pattern: table.trim().to_owned(),
                    problem: e.to_string(),
                }
            })?;
            let columns: Vec<String> = columns
                .split(',')
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect();
            if columns.is_empty() {
                return Err(MessageKeyError::NoColumn(entry.to_owned()));
            }
            entries.push((pattern, columns));
        }
        Ok(MessageKeyColumns { entries })
    }
}

impl<'de> serde::Deserialize<'de> for MessageKeyColumns {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        MessageKeyColumns::try_from(text).map_err(serde::de::Error::custom)
    }
}

impl MessageKeyColumns {
    /// The key columns configured for `db.table`, in key order.
    pub fn for_table(&self, db: &str, table: &str) -> Option<&[String]> {
        let name = format!("{db}.{table}");
        self.entries
            .iter()
            .find(|(pattern, _)| pattern.is_match(&name))
            .map(|(_, columns)| columns.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<MessageKeyColumns, MessageKeyError> {
        MessageKeyColumns::try_from(text.to_owned())
    }

    #[test]
    fn debezium_syntax_with_table_regexes() {
        let keys = parse("shop.events:device_id, ts ; (.*).logs:id;shop.e.*:other").unwrap();
        assert_eq!(
            keys.for_table("shop", "events").unwrap(),
            ["device_id", "ts"]
        );
        assert_eq!(keys.for_table("app", "logs").unwrap(), ["id"]);
        assert_eq!(
            keys.for_table("shop", "extra").unwrap(),
            ["other"],
            "the first matching entry wins"
        );
        assert_eq!(
            keys.for_table("shop", "events2").unwrap(),
            ["other"],
            "the whole name must match"
        );
        assert!(keys.for_table("shop", "users").is_none());
        assert!(parse("").unwrap().for_table("a", "b").is_none());
    }

    #[test]
    fn malformed_entries_are_named() {
        assert_eq!(
            parse("shop.events").unwrap_err(),
            MessageKeyError::Form("shop.events".into())
        );
        assert_eq!(
            parse("shop.events:").unwrap_err().to_string(),
            "\"shop.events:\" names no key column"
        );
        assert!(matches!(
            parse("shop.(:id"),
            Err(MessageKeyError::Pattern { pattern, .. }) if pattern == "shop.("
        ));
    }
}
