//! Typed column values.
//!
//! Capture turns every binlog column into one [`Value`], already mapped the
//! way Debezium's MySQL connector maps it (with `decimal.handling.mode=string`,
//! `binary.handling.mode=base64`, `time.precision.mode=adaptive_time_microseconds`);
//! see `docs/types.md` for the full table.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

/// One column value of a captured row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// BIT(1).
    Bool(bool),
    /// Signed integers, and temporal values encoded as integers (DATE as days,
    /// TIME as microseconds, DATETIME as epoch milli/microseconds, YEAR).
    Int(i64),
    /// Unsigned integers above `i64::MAX` (BIGINT UNSIGNED).
    UInt(u64),
    /// FLOAT and DOUBLE.
    Float(f64),
    /// Text, DECIMAL (as its exact decimal string), ENUM/SET labels, JSON
    /// documents, TIMESTAMP (ISO-8601 UTC).
    String(String),
    /// BINARY/VARBINARY/BLOB and BIT(n>1): base64 in JSON.
    Bytes(Vec<u8>),
}

impl Value {
    /// The JSON form written into Debezium envelopes and keys.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::UInt(u) => serde_json::Value::from(*u),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                // NaN and infinities have no JSON number; Debezium writes them as strings too.
                .unwrap_or_else(|| serde_json::Value::String(f.to_string())),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Bytes(b) => serde_json::Value::String(BASE64.encode(b)),
        }
    }

    /// Reads a value back from JSON. Without the schema, base64 bytes stay strings.
    pub fn from_json(json: &serde_json::Value) -> Value {
        match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Value::UInt(u)
                } else {
                    Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => Value::String(s.clone()),
            other => Value::String(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_forms() {
        assert_eq!(
            Value::UInt(u64::MAX).to_json().to_string(),
            "18446744073709551615"
        );
        assert_eq!(Value::Int(-5).to_json().to_string(), "-5");
        assert_eq!(
            Value::Bytes(vec![0, 255, 1]).to_json(),
            serde_json::json!("AP8B")
        );
        assert_eq!(Value::Float(f64::NAN).to_json(), serde_json::json!("NaN"));
        assert_eq!(
            Value::from_json(&serde_json::json!(18446744073709551615u64)),
            Value::UInt(u64::MAX)
        );
        assert_eq!(Value::from_json(&serde_json::json!(1.5)), Value::Float(1.5));
    }
}
