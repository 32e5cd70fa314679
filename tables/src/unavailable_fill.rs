//! Filling Debezium's placeholder for values the source did not send
//! ([`UNAVAILABLE_VALUE`](tributary_proto::unavailable::UNAVAILABLE_VALUE):
//! PostgreSQL leaves a TOASTed value an UPDATE did not change out of the
//! change, under `REPLICA IDENTITY DEFAULT`) with the value the table
//! already holds for the key, for tables with `fill_unavailable_values`.
//! The held row is the one the previous change of the key left (in the same
//! batch or stored); a placeholder with nothing to fill it from (the key's
//! earlier changes were never applied here, or held the placeholder too)
//! stays, and is counted.

use serde_json::{Map, Value};
use tributary_proto::unavailable::is_unavailable;

/// What filling one row did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Filled {
    /// Placeholders replaced by the held value.
    pub(crate) filled: u32,
    /// Placeholders left (no held value for the column).
    pub(crate) unfilled: u32,
}

/// `row` (a row's JSON object) with each placeholder replaced by the value
/// the `held` row has for its column. A row that is not an object, or has
/// no placeholder, comes back as it is.
pub(crate) fn fill(row: Vec<u8>, held: Option<&[u8]>) -> (Vec<u8>, Filled) {
    let mut counts = Filled::default();
    let Ok(Value::Object(mut columns)) = serde_json::from_slice::<Value>(&row) else {
        return (row, counts);
    };
    let held: Option<Map<String, Value>> = held.and_then(|h| match serde_json::from_slice(h) {
        Ok(Value::Object(held)) => Some(held),
        _ => None,
    });
    for (name, value) in columns.iter_mut() {
        if !is_unavailable(value) {
            continue;
        }
        match held.as_ref().and_then(|h| h.get(name)) {
            Some(old) if !is_unavailable(old) => {
                *value = old.clone();
                counts.filled += 1;
            }
            _ => counts.unfilled += 1,
        }
    }
    if counts.filled == 0 {
        return (row, counts);
    }
    let filled = serde_json::to_vec(&Value::Object(columns)).expect("JSON serializes");
    (filled, counts)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bytes(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn placeholders_take_the_held_values_and_the_rest_is_kept() {
        let held =
            bytes(json!({"id": 1, "doc": "a long text", "blob": "AAEC", "tags": ["x"], "n": 5}));
        let row = bytes(json!({
            "id": 1,
            "doc": "__debezium_unavailable_value",
            "blob": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==",
            "tags": ["__debezium_unavailable_value"],
            "n": 6
        }));
        let (out, counts) = fill(row, Some(&held));
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap(),
            json!({"id": 1, "doc": "a long text", "blob": "AAEC", "tags": ["x"], "n": 6})
        );
        assert_eq!(
            counts,
            Filled {
                filled: 3,
                unfilled: 0
            }
        );
    }

    #[test]
    fn a_placeholder_without_a_held_value_stays_and_is_counted() {
        let row = bytes(json!({"id": 1, "doc": "__debezium_unavailable_value"}));
        let (out, counts) = fill(row.clone(), None);
        assert_eq!((out, counts.unfilled), (row.clone(), 1));
        let placeholder_held = bytes(json!({"id": 1, "doc": "__debezium_unavailable_value"}));
        let (out, counts) = fill(row.clone(), Some(&placeholder_held));
        assert_eq!((out, counts.unfilled), (row, 1));
        let plain = bytes(json!({"id": 2, "doc": "text"}));
        assert_eq!(fill(plain.clone(), None), (plain, Filled::default()));
    }
}
