//! [`RawColumns`]: some columns of a stored row, kept as their JSON text.
//!
//! A join that selects columns writes them into events as they are: taking
//! their text from the stored row (the values of the other columns skipped
//! over by the parser, not built) and copying it on costs neither a JSON
//! tree nor escaping strings again, and alters no value (a number keeps its
//! digits). A column is decoded into a [`Value`] only when an expression
//! reads it.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// Columns of a row, in the order asked for, as their JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawColumns {
    /// The columns' texts, one after the other.
    text: Box<str>,
    /// Where each column's text is in `text` (`None`: the row lacks it).
    spans: Box<[Option<(u32, u32)>]>,
}

impl RawColumns {
    /// The values of `columns` in the row object whose JSON text is `row`
    /// (the last of a repeated name counts, as when decoding into a map), or
    /// the parser's error when `row` is not one JSON object.
    pub fn select(row: &[u8], columns: &[String]) -> serde_json::Result<Self> {
        let mut parser = serde_json::Deserializer::from_slice(row);
        let texts = Selected(columns).deserialize(&mut parser)?;
        parser.end()?;
        let mut text = String::with_capacity(texts.iter().flatten().map(|t| t.len()).sum());
        let spans = texts
            .iter()
            .map(|found| {
                found.map(|raw| {
                    let start = text.len() as u32;
                    text.push_str(raw);
                    (start, text.len() as u32)
                })
            })
            .collect();
        Ok(RawColumns {
            text: text.into(),
            spans,
        })
    }

    /// `columns` columns, none of them present (a row that is not an object).
    pub fn absent(columns: usize) -> Self {
        RawColumns {
            text: Box::default(),
            spans: vec![None; columns].into(),
        }
    }

    /// The JSON text of the `i`th column, if the row has it.
    pub fn json(&self, i: usize) -> Option<&str> {
        let (start, end) = (*self.spans.get(i)?)?;
        Some(&self.text[start as usize..end as usize])
    }

    /// The value of the `i`th column, if the row has it, decoded.
    pub fn value(&self, i: usize) -> Option<Value> {
        let json = self.json(i)?;
        Some(serde_json::from_str(json).expect("JSON checked by the parser that selected it"))
    }

    /// Bytes held beyond the struct itself.
    pub fn heap_bytes(&self) -> u64 {
        (self.text.len() + std::mem::size_of_val(&*self.spans)) as u64
    }
}

/// A row object, keeping the text of `columns`.
struct Selected<'a>(&'a [String]);

impl<'de> DeserializeSeed<'de> for Selected<'_> {
    type Value = Vec<Option<&'de str>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Selected<'_> {
    type Value = Vec<Option<&'de str>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a row object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut row = vec![None; self.0.len()];
        while let Some(wanted) = map.next_key_seed(Column(self.0))? {
            match wanted {
                Some(i) => row[i] = Some(map.next_value::<&'de RawValue>()?.get()),
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
        let row = RawColumns::select(&raw, &wanted).unwrap();
        for (i, column) in wanted.iter().enumerate() {
            assert_eq!(row.value(i).as_ref(), full.get(column), "{column}");
        }
        assert_eq!(row.json(1), Some(r#""Ada \"A\" Lé""#), "as stored");
        assert_eq!(row.json(3), None);
        assert!(RawColumns::select(&raw, &[]).unwrap().json(0).is_none());
        let repeated = RawColumns::select(br#"{"a": 1, "b": 2, "a": 3}"#, &columns(&["a"]));
        assert_eq!(repeated.unwrap().value(0), Some(json!(3)));
    }

    #[test]
    fn keeps_a_numbers_digits_as_stored() {
        let row = br#"{"price": 1.50, "big": 123456789012345678901234567890}"#;
        let row = RawColumns::select(row, &columns(&["price", "big"])).unwrap();
        assert_eq!(row.json(0), Some("1.50"));
        assert_eq!(row.json(1), Some("123456789012345678901234567890"));
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
                RawColumns::select(raw, &wanted).is_err(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        assert_eq!(RawColumns::absent(2).json(1), None);
    }
}
