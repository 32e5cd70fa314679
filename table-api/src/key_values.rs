//! How a lookup key names a table's key values: an object of key columns
//! (`{"id": 7}`, the same object as the Kafka record key), an array of values
//! in key order (`[7]`), or, for one key column, the bare value (`7`). Scan
//! bounds may name only the leading key columns (a prefix), or none (`null`).

use serde_json::Value;
use smallvec::{SmallVec, smallvec};

use crate::error::LookupError;

/// A key's values, in key order: inline for keys of up to four columns (a
/// lookup allocates nothing for them).
pub type KeyValues<'k> = SmallVec<[&'k Value; 4]>;

/// Whether a key must name every key column, or may name leading ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A lookup key: every key column.
    Full,
    /// A scan bound: leading key columns, possibly none.
    Prefix,
}

/// The values `key` gives for `columns` (the table's key columns, in key
/// order), in that order; an error naming `table` says what does not fit.
pub fn key_values<'k>(
    table: &str,
    columns: &[String],
    key: &'k Value,
    expect: Expect,
) -> Result<KeyValues<'k>, LookupError> {
    let bad = |problem: String| LookupError::BadKey {
        table: table.to_owned(),
        problem,
    };
    let full = expect == Expect::Full;
    let values = match key {
        Value::Object(map) => {
            if let Some(extra) = map.keys().find(|k| !columns.contains(k)) {
                return Err(bad(format!(
                    "`{extra}` is not a key column (key columns: {columns:?})"
                )));
            }
            let mut values = KeyValues::with_capacity(columns.len());
            for column in columns {
                match map.get(column) {
                    Some(v) => values.push(v),
                    None if full => return Err(bad(format!("missing key column `{column}`"))),
                    None => break,
                }
            }
            if values.len() != map.len() {
                return Err(bad(format!(
                    "a prefix must name leading key columns in order {columns:?}"
                )));
            }
            values
        }
        Value::Array(values) => values.iter().collect(),
        Value::Null if !full => KeyValues::new(),
        scalar => smallvec![scalar],
    };
    if full && values.len() != columns.len() {
        return Err(bad(format!(
            "expected {} key values ({columns:?}), got {}",
            columns.len(),
            values.len()
        )));
    }
    if values.len() > columns.len() {
        return Err(bad(format!("more values than key columns {columns:?}")));
    }
    if let Some(nested) = values.iter().find(|v| v.is_array() || v.is_object()) {
        return Err(bad(format!("key values are scalars, not {nested}")));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn columns() -> Vec<String> {
        vec!["region".into(), "id".into()]
    }

    fn values(key: Value, expect: Expect) -> Result<Vec<Value>, String> {
        key_values("t", &columns(), &key, expect)
            .map(|v| v.into_iter().cloned().collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn objects_arrays_and_bare_values_name_the_same_key() {
        let expected = vec![json!("eu"), json!(7)];
        assert_eq!(
            values(json!({"id": 7, "region": "eu"}), Expect::Full),
            Ok(expected.clone())
        );
        assert_eq!(values(json!(["eu", 7]), Expect::Full), Ok(expected));
        let one = vec!["id".to_owned()];
        let seven = json!(7);
        let bare = key_values("t", &one, &seven, Expect::Full).unwrap();
        assert_eq!(bare.as_slice(), [&seven]);
    }

    #[test]
    fn keys_that_do_not_fit_are_refused_naming_what_is_wrong() {
        let err = values(json!({"id": 7}), Expect::Full).unwrap_err();
        assert!(err.contains("missing key column `region`"), "{err}");
        let err = values(json!({"id": 7, "region": "eu", "x": 1}), Expect::Full).unwrap_err();
        assert!(err.contains("`x` is not a key column"), "{err}");
        let err = values(json!(["eu"]), Expect::Full).unwrap_err();
        assert!(err.contains("expected 2 key values"), "{err}");
        let err = values(json!(["eu", 7, 1]), Expect::Prefix).unwrap_err();
        assert!(err.contains("more values than key columns"), "{err}");
        let err = values(json!({"id": 7}), Expect::Prefix).unwrap_err();
        assert!(err.contains("leading key columns"), "{err}");
        let err = values(json!(["eu", [7]]), Expect::Full).unwrap_err();
        assert!(err.contains("scalars, not [7]"), "{err}");
    }

    #[test]
    fn prefixes_name_leading_columns_or_none() {
        assert_eq!(
            values(json!({"region": "eu"}), Expect::Prefix),
            Ok(vec![json!("eu")])
        );
        assert_eq!(values(json!(null), Expect::Prefix), Ok(vec![]));
        assert_eq!(values(json!("eu"), Expect::Prefix), Ok(vec![json!("eu")]));
    }
}
