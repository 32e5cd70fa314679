//! Record keys: from the bytes a producer wrote to the values a table is keyed
//! by, and back to the bytes a producer would write for given values.
//!
//! Normalisation (so a lookup never misses because of how a key was written):
//! - whitespace and the order of an object's members do not matter: a key is
//!   parsed as JSON and its values are taken in the table's key-column order;
//! - a Kafka Connect `JsonConverter` key with schemas enabled,
//!   `{"schema": …, "payload": {…}}`, is its payload;
//! - a key that is not an object is the one column `key`;
//! - a string holding a canonical decimal integer (`"42"`, `"-7"`, not `"042"`
//!   or `"4.0"`) is that integer, in records and lookups alike.
//!
//! The [`KeyShape`] remembers how the producer wrote its keys (member order,
//! which integers were quoted, the schema wrapper), so that [`KeyShape::bytes`]
//! writes the exact key bytes of given values in a [`KeyFormat`]: the bytes a
//! partitioner hashes.

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;

use serde_json::Value;

/// How a topic's producer serialises keys (for partitioned tables, whose
/// lookups must find a key's partition from its values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyFormat {
    /// Compact JSON, `{"id":1}`: Debezium, Kafka Connect (schemas off), Tributary, Jackson.
    #[default]
    Json,
    /// JSON as Python's `json.dumps` writes it by default: `{"id": 1, "name": "\u00e9"}`
    /// (a space after `:` and `,`, non-ASCII escaped).
    JsonSpaced,
    /// Kafka Connect's `JsonConverter` with schemas enabled:
    /// `{"schema":{…},"payload":{"id":1}}`, compact.
    JsonWithSchema,
}

impl KeyFormat {
    /// Every format, to find one that explains a topic.
    pub const ALL: [KeyFormat; 3] = [
        KeyFormat::Json,
        KeyFormat::JsonSpaced,
        KeyFormat::JsonWithSchema,
    ];

    /// The name used in configuration.
    pub fn name(self) -> &'static str {
        match self {
            KeyFormat::Json => "json",
            KeyFormat::JsonSpaced => "json_spaced",
            KeyFormat::JsonWithSchema => "json_with_schema",
        }
    }
}

/// How a producer wrote a table's keys, learned from its records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyShape {
    /// Key column names, in the order the producer wrote them (the key order).
    pub columns: Vec<String>,
    /// Columns whose integers were written as strings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quoted: Vec<String>,
    /// The key was a bare value, not an object (its one column is `key`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scalar: bool,
    /// The `JsonConverter` schema the key was wrapped with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

/// A record key: its normalised values in key order, and how it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordKey {
    /// Values in the order of `shape.columns`.
    pub values: Vec<Value>,
    /// How this record's key was written.
    pub shape: KeyShape,
}

/// Why a record's key cannot be a table key.
#[derive(Debug, thiserror::Error)]
pub enum RecordKeyError {
    /// Not JSON.
    #[error("key is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// JSON `null`.
    #[error("key is JSON null")]
    Null,
    /// `{}`.
    #[error("key is an empty object")]
    Empty,
    /// A key column whose value is an array or an object.
    #[error("key column `{0}` is not a scalar (arrays and objects cannot be keys)")]
    NotScalar(String),
}

/// Parses a record's key bytes.
pub fn parse(raw: &[u8]) -> Result<RecordKey, RecordKeyError> {
    let key: Value = serde_json::from_slice(raw)?;
    let (key, schema) = match key {
        Value::Object(mut map)
            if map.len() == 2 && map.contains_key("schema") && map.contains_key("payload") =>
        {
            let payload = map.remove("payload").expect("checked");
            (payload, map.remove("schema"))
        }
        other => (other, None),
    };
    let (pairs, scalar): (Vec<(String, Value)>, bool) = match key {
        Value::Object(map) => (map.into_iter().collect(), false),
        Value::Null => return Err(RecordKeyError::Null),
        scalar => (vec![("key".to_owned(), scalar)], true),
    };
    if pairs.is_empty() {
        return Err(RecordKeyError::Empty);
    }
    let mut shape = KeyShape {
        columns: Vec::with_capacity(pairs.len()),
        quoted: Vec::new(),
        scalar,
        schema,
    };
    let mut values = Vec::with_capacity(pairs.len());
    for (column, value) in pairs {
        if value.is_array() || value.is_object() {
            return Err(RecordKeyError::NotScalar(column));
        }
        let (value, was_quoted) = match integer_in(&value) {
            Some(n) => (n, true),
            None => (value, false),
        };
        if was_quoted {
            shape.quoted.push(column.clone());
        }
        shape.columns.push(column);
        values.push(value);
    }
    Ok(RecordKey { values, shape })
}

/// The integer a key value stands for when it is a canonical integer written
/// as a string (tables store and look such a value up as the integer).
pub fn integer_in(value: &Value) -> Option<Value> {
    value.as_str().and_then(canonical_integer)
}

/// `Some(n)` for strings written exactly as serde_json writes the integer `n`.
fn canonical_integer(s: &str) -> Option<Value> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    if !canonical {
        return None;
    }
    s.parse::<i64>()
        .map(Value::from)
        .or_else(|_| s.parse::<u64>().map(Value::from))
        .ok()
}

impl RecordKey {
    /// This key with its columns in the order of `columns` (the table's key
    /// order), when it has exactly those columns in another order; as it is otherwise.
    pub fn in_order_of(mut self, columns: &[String]) -> Self {
        if self.shape.columns == columns || self.shape.columns.len() != columns.len() {
            return self;
        }
        let positions: Option<Vec<usize>> = columns
            .iter()
            .map(|c| self.shape.columns.iter().position(|k| k == c))
            .collect();
        let Some(positions) = positions else {
            return self;
        };
        self.values = positions.iter().map(|&i| self.values[i].take()).collect();
        self.shape.columns = columns.to_vec();
        self
    }
}

impl KeyShape {
    /// The key bytes a producer of this shape writes for `values` (in
    /// `columns` order) in `format`.
    pub fn bytes<V: Borrow<Value>>(&self, values: &[V], format: KeyFormat) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * values.len() + 8);
        if format == KeyFormat::JsonWithSchema {
            out.extend_from_slice(b"{\"schema\":");
            let schema = self.schema.as_ref().unwrap_or(&Value::Null);
            serde_json::to_writer(&mut out, schema).expect("writing to a Vec");
            out.extend_from_slice(b",\"payload\":");
        }
        let spaced = format == KeyFormat::JsonSpaced;
        if self.scalar {
            if let Some(value) = values.first() {
                self.write_value("key", value.borrow(), spaced, &mut out);
            }
        } else {
            out.push(b'{');
            for (i, (column, value)) in self.columns.iter().zip(values).enumerate() {
                if i > 0 {
                    out.extend_from_slice(if spaced { b", " } else { b"," });
                }
                write_string(column, spaced, &mut out);
                out.extend_from_slice(if spaced { b": " } else { b":" });
                self.write_value(column, value.borrow(), spaced, &mut out);
            }
            out.push(b'}');
        }
        if format == KeyFormat::JsonWithSchema {
            out.push(b'}');
        }
        out
    }

    fn write_value(&self, column: &str, value: &Value, ascii: bool, out: &mut Vec<u8>) {
        match value {
            Value::Number(n) if self.quoted.iter().any(|q| q == column) => {
                write_string(&n.to_string(), ascii, out);
            }
            Value::String(s) => write_string(s, ascii, out),
            other => serde_json::to_writer(&mut *out, other).expect("writing to a Vec"),
        }
    }
}

/// A JSON string; `ascii` escapes every non-ASCII character as Python does
/// (`\u00e9`, surrogate pairs beyond the basic plane).
fn write_string(s: &str, ascii: bool, out: &mut Vec<u8>) {
    if !ascii || s.is_ascii() {
        serde_json::to_writer(&mut *out, s).expect("writing to a Vec");
        return;
    }
    out.push(b'"');
    for c in s.chars() {
        if c.is_ascii() {
            let mut buf = [0; 4];
            let quoted = serde_json::to_string(c.encode_utf8(&mut buf)).expect("a string");
            out.extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]);
        } else {
            let mut units = [0; 2];
            for unit in c.encode_utf16(&mut units) {
                out.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bytes(raw: &str, format: KeyFormat) -> String {
        let key = parse(raw.as_bytes()).unwrap();
        String::from_utf8(key.shape.bytes(&key.values, format)).unwrap()
    }

    #[test]
    fn written_forms_of_one_key_normalise_to_the_same_values() {
        let forms = [
            r#"{"id":42,"region":"eu"}"#,
            r#"{"id": 42, "region": "eu"}"#,
            r#"{"id":"42","region":"eu"}"#,
            r#"{"schema":{"type":"struct"},"payload":{"id":42,"region":"eu"}}"#,
        ];
        for form in forms {
            let key = parse(form.as_bytes()).unwrap();
            assert_eq!(key.values, [json!(42), json!("eu")], "{form}");
            assert_eq!(key.shape.columns, ["id", "region"], "{form}");
        }
        let reordered = parse(br#"{"region":"eu","id":42}"#).unwrap();
        let columns = ["id".to_owned(), "region".to_owned()];
        let in_order = reordered.clone().in_order_of(&columns);
        assert_eq!(in_order.values, [json!(42), json!("eu")]);
        assert_eq!(in_order.shape.columns, columns);
        assert_eq!(reordered.clone().in_order_of(&columns[..1]), reordered);
        let other = ["id".to_owned(), "country".to_owned()];
        assert_eq!(reordered.clone().in_order_of(&other), reordered);
    }

    #[test]
    fn only_canonical_integers_lose_their_quotes() {
        for (text, expected) in [
            ("42", json!(42)),
            ("-7", json!(-7)),
            ("0", json!(0)),
            ("18446744073709551615", json!(u64::MAX)),
            ("042", json!("042")),
            ("-0", json!("-0")),
            ("4.0", json!("4.0")),
            ("1e3", json!("1e3")),
            (" 1", json!(" 1")),
            ("", json!("")),
            ("99999999999999999999", json!("99999999999999999999")),
        ] {
            let normalized = integer_in(&json!(text)).unwrap_or_else(|| json!(text));
            assert_eq!(normalized, expected, "{text:?}");
        }
    }

    #[test]
    fn bad_keys_are_named() {
        assert!(matches!(parse(b"{oops"), Err(RecordKeyError::NotJson(_))));
        assert!(matches!(parse(b"null"), Err(RecordKeyError::Null)));
        assert!(matches!(parse(b"{}"), Err(RecordKeyError::Empty)));
        assert!(matches!(parse(br#"{"id":[1]}"#), Err(RecordKeyError::NotScalar(c)) if c == "id"));
    }

    #[test]
    fn keys_are_rewritten_exactly_as_their_producer_wrote_them() {
        for raw in [r#"{"id":1,"name":"x\"y"}"#, r#"{"b":"2","a":true}"#, "17"] {
            assert_eq!(bytes(raw, KeyFormat::Json), raw);
        }
        let python = r#"{"id": 1, "name": "caf\u00e9 \ud83d\ude00\n"}"#;
        assert_eq!(bytes(python, KeyFormat::JsonSpaced), python);
        let connect = r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"db.users.Key"},"payload":{"id":1001}}"#;
        assert_eq!(bytes(connect, KeyFormat::JsonWithSchema), connect);
        assert_eq!(bytes(connect, KeyFormat::Json), r#"{"id":1001}"#);
    }
}
