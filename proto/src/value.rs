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
    /// GEOMETRY and its subtypes as Debezium's `io.debezium.data.geometry`
    /// structs (`geometry.handling.mode: struct`).
    Geometry(Box<Geometry>),
    /// A PostgreSQL array: its elements in order (nested for more than one
    /// dimension).
    Array(Vec<Value>),
    /// A Connect struct written as a JSON object, fields in schema order
    /// (Debezium's `VariableScaleDecimal` `{scale, value}`).
    Struct(Vec<(&'static str, Value)>),
}

/// A spatial value: its well-known binary and SRID, and a POINT column's
/// coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    /// The OGC well-known binary.
    pub wkb: Vec<u8>,
    /// The spatial reference system; `None` for 0 (unset), as Debezium.
    pub srid: Option<i32>,
    /// A POINT column's `x` and `y` (Debezium's `Point`), else `None`
    /// (its `Geometry`).
    pub point: Option<(f64, f64)>,
}

impl Geometry {
    /// `{"x", "y", "wkb", "srid"}` for a point, `{"wkb", "srid"}` otherwise,
    /// fields in the order of Debezium's schemas.
    pub fn to_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        if let Some((x, y)) = self.point {
            map.insert("x".into(), Value::Float(x).to_json());
            map.insert("y".into(), Value::Float(y).to_json());
        }
        map.insert("wkb".into(), BASE64.encode(&self.wkb).into());
        map.insert("srid".into(), self.srid.into());
        serde_json::Value::Object(map)
    }
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
            Value::Geometry(g) => g.to_json(),
            Value::Array(items) => items.iter().map(Value::to_json).collect(),
            Value::Struct(fields) => serde_json::Value::Object(
                fields
                    .iter()
                    .map(|(name, value)| ((*name).to_owned(), value.to_json()))
                    .collect(),
            ),
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
        let array = Value::Array(vec![Value::Int(1), Value::Null, Value::Array(vec![])]);
        assert_eq!(array.to_json().to_string(), "[1,null,[]]");
        let decimal = Value::Struct(vec![
            ("scale", Value::Int(2)),
            ("value", Value::Bytes(vec![1])),
        ]);
        assert_eq!(
            decimal.to_json().to_string(),
            r#"{"scale":2,"value":"AQ=="}"#
        );
        assert_eq!(
            Value::from_json(&serde_json::json!(18446744073709551615u64)),
            Value::UInt(u64::MAX)
        );
        assert_eq!(Value::from_json(&serde_json::json!(1.5)), Value::Float(1.5));
        let point = Geometry {
            wkb: vec![1, 2],
            srid: Some(4326),
            point: Some((1.5, -2.0)),
        };
        assert_eq!(
            Value::Geometry(Box::new(point.clone()))
                .to_json()
                .to_string(),
            r#"{"x":1.5,"y":-2.0,"wkb":"AQI=","srid":4326}"#
        );
        let shape = Geometry {
            point: None,
            srid: None,
            ..point
        };
        assert_eq!(
            Value::Geometry(Box::new(shape)).to_json().to_string(),
            r#"{"wkb":"AQI=","srid":null}"#
        );
    }
}
