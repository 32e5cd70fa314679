//! Decoding only some columns of a stored row: the values of the others are
//! skipped over by the parser instead of being built and thrown away.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// The values of `columns` in the row object in `raw`, in `columns`' order
/// (`None` for those it lacks), or the parser's error when `raw` is not a JSON
/// object.
pub(crate) fn decode(raw: &[u8], columns: &[String]) -> serde_json::Result<Vec<Option<Value>>> {
    let mut parser = serde_json::Deserializer::from_slice(raw);
    let row = Columns(columns).deserialize(&mut parser)?;
    parser.end()?;
    Ok(row)
}

/// A row object, keeping `columns`.
struct Columns<'a>(&'a [String]);

impl<'de> DeserializeSeed<'de> for Columns<'_> {
    type Value = Vec<Option<Value>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Columns<'_> {
    type Value = Vec<Option<Value>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a row object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut row = vec![None; self.0.len()];
        while let Some(wanted) = map.next_key_seed(Column(self.0))? {
            match wanted {
                // The last of repeated names counts, as when decoding into a map.
                Some(i) => row[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(row)
    }
}

/// A column name: its index among the wanted columns, if it is one (read in
/// place, without allocating the name).
struct Column<'a>(&'a [String]);

impl<'de> DeserializeSeed<'de> for Column<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for Column<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a column name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|c| c == name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn columns(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn keeps_the_wanted_columns_whatever_the_others_hold() {
        let full = json!({
            "id": 7,
            "name": "Ada \"A\" L\u{e9}",
            "nested": {"deep": [1, {"x": null}], "name": "not this one"},
            "tier": "pro",
            "score": 1.5e3,
            "esc\u{e9}ped": "\\u0000"
        });
        let raw = serde_json::to_vec(&full).unwrap();
        let wanted = columns(&["tier", "name", "nested", "absent"]);
        let row = decode(&raw, &wanted).unwrap();
        let expected: Vec<Option<Value>> = wanted.iter().map(|c| full.get(c).cloned()).collect();
        assert_eq!(row, expected);
        assert_eq!(row.iter().flatten().count(), 3);
        assert!(decode(&raw, &[]).unwrap().is_empty());
        let repeated = decode(br#"{"a": 1, "b": 2, "a": 3}"#, &columns(&["a"])).unwrap();
        assert_eq!(repeated, [Some(json!(3))]);
    }

    #[test]
    fn rejects_what_is_not_one_json_object() {
        let wanted = columns(&["a"]);
        for raw in [
            &b"[1,2]"[..],
            b"7",
            b"{\"a\":1",
            b"{\"a\":1} x",
            b"{\"a\":tru}",
        ] {
            assert!(
                decode(raw, &wanted).is_err(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }
}
