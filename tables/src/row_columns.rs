//! Decoding only some columns of a stored row: the values of the others are
//! skipped over by the parser instead of being built and thrown away.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// The row object in `raw` with only `columns` (those it has), or the parser's
/// error when `raw` is not a JSON object.
pub(crate) fn decode(raw: &[u8], columns: &[String]) -> serde_json::Result<Map<String, Value>> {
    let mut parser = serde_json::Deserializer::from_slice(raw);
    let row = Columns(columns).deserialize(&mut parser)?;
    parser.end()?;
    Ok(row)
}

/// A row object, keeping `columns`.
struct Columns<'a>(&'a [String]);

impl<'de> DeserializeSeed<'de> for Columns<'_> {
    type Value = Map<String, Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Columns<'_> {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a row object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut row = Map::new();
        while let Some(wanted) = map.next_key_seed(Column(self.0))? {
            match wanted {
                Some(i) => {
                    row.insert(self.0[i].clone(), map.next_value()?);
                }
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
        let expected: Map<String, Value> = full
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| wanted.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(row.len(), 3);
        for (column, value) in &expected {
            assert_eq!(row.get(column), Some(value), "{column}");
        }
        assert!(decode(&raw, &[]).unwrap().is_empty());
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
