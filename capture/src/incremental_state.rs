//! What an on-demand snapshot has done so far, stored with every committed
//! binlog position: the tables still to read and the key of the last row sent.

use serde::{Deserialize, Serialize};

/// Tables still to snapshot and how far the first one has got.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalState {
    /// `db.table` names in request order; the first one is being read.
    pub tables: Vec<String>,
    /// Primary key of the last row of the first table that was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<KeyCursor>,
}

/// Where the next chunk starts: after this key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCursor {
    /// The key's columns, in key order (a key changed since is read from the start).
    pub columns: Vec<String>,
    /// The key's values.
    pub values: Vec<CursorValue>,
}

/// A key column value as the server returned it, stored losslessly (floats by
/// their bits) so the next chunk starts exactly after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CursorValue {
    /// SQL NULL.
    Null,
    /// Text and binary values.
    Bytes(Vec<u8>),
    /// Signed integers.
    Int(i64),
    /// Unsigned integers.
    UInt(u64),
    /// FLOAT, by its bits.
    Float(u32),
    /// DOUBLE, by its bits.
    Double(u64),
    /// DATE/DATETIME/TIMESTAMP: year, month, day, hour, minute, second, microsecond.
    Date(u16, u8, u8, u8, u8, u8, u32),
    /// TIME: negative, days, hours, minutes, seconds, microseconds.
    Time(bool, u32, u8, u8, u8, u32),
}

/// `id=42`, `a=1, b='x'`: the key as the log shows where a snapshot resumes.
impl std::fmt::Display for KeyCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (column, value)) in self.columns.iter().zip(&self.values).enumerate() {
            let separator = if i == 0 { "" } else { ", " };
            let value = mysql_async::Value::from(value).as_sql(false);
            write!(f, "{separator}{column}={value}")?;
        }
        Ok(())
    }
}

impl From<&mysql_async::Value> for CursorValue {
    fn from(value: &mysql_async::Value) -> Self {
        use mysql_async::Value as V;
        match value {
            V::NULL => CursorValue::Null,
            V::Bytes(b) => CursorValue::Bytes(b.clone()),
            V::Int(i) => CursorValue::Int(*i),
            V::UInt(u) => CursorValue::UInt(*u),
            V::Float(f) => CursorValue::Float(f.to_bits()),
            V::Double(d) => CursorValue::Double(d.to_bits()),
            V::Date(y, mo, d, h, mi, s, us) => CursorValue::Date(*y, *mo, *d, *h, *mi, *s, *us),
            V::Time(neg, d, h, mi, s, us) => CursorValue::Time(*neg, *d, *h, *mi, *s, *us),
        }
    }
}

impl From<&CursorValue> for mysql_async::Value {
    fn from(value: &CursorValue) -> Self {
        use mysql_async::Value as V;
        match value {
            CursorValue::Null => V::NULL,
            CursorValue::Bytes(b) => V::Bytes(b.clone()),
            CursorValue::Int(i) => V::Int(*i),
            CursorValue::UInt(u) => V::UInt(*u),
            CursorValue::Float(bits) => V::Float(f32::from_bits(*bits)),
            CursorValue::Double(bits) => V::Double(f64::from_bits(*bits)),
            CursorValue::Date(y, mo, d, h, mi, s, us) => V::Date(*y, *mo, *d, *h, *mi, *s, *us),
            CursorValue::Time(neg, d, h, mi, s, us) => V::Time(*neg, *d, *h, *mi, *s, *us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_shows_its_columns_and_values() {
        let cursor = KeyCursor {
            columns: vec!["a".to_owned(), "b".to_owned()],
            values: vec![CursorValue::Int(1), CursorValue::Bytes(b"x'y".to_vec())],
        };
        assert_eq!(cursor.to_string(), r"a=1, b='x\'y'");
    }

    #[test]
    fn cursor_values_survive_json() {
        use mysql_async::Value as V;
        let values = [
            V::NULL,
            V::Bytes(vec![0, 255, b'a']),
            V::Int(-7),
            V::UInt(u64::MAX),
            V::Float(0.1),
            V::Double(-1e300),
            V::Date(2026, 11, 30, 23, 59, 58, 123_456),
            V::Time(true, 3, 4, 5, 6, 7),
        ];
        let state = IncrementalState {
            tables: vec!["shop.users".into()],
            after: Some(KeyCursor {
                columns: vec!["id".into()],
                values: values.iter().map(CursorValue::from).collect(),
            }),
        };
        let json = serde_json::to_string(&state).unwrap();
        let back: IncrementalState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, state);
        let restored: Vec<V> = back.after.unwrap().values.iter().map(V::from).collect();
        assert_eq!(restored, values);
    }
}
