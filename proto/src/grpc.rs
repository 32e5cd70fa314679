//! The gRPC lookup API (`tributary.v1`, from `tributary/v1/lookup.proto`): the
//! generated messages and client, the descriptor set for server reflection,
//! and the mapping between [`v1::Value`] and JSON. The server's side, which
//! sends stored rows as they are encoded, is [`served`].
//!
//! The mapping is one-to-one: integers that fit `i64` become `int_value`, larger
//! ones `uint_value`, other numbers `double_value`; objects keep their field order.

use serde_json::{Map, Number, Value as Json};

/// Generated code of package `tributary.v1`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("tributary.v1");
}

pub mod served;
mod served_codec;
mod transcode;

use v1::value::Kind;

/// The encoded `FileDescriptorSet` of the API, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/lookup_descriptor.bin"));

/// Fully qualified name of the lookup service (for health checks).
pub const SERVICE_NAME: &str = "tributary.v1.Lookup";

/// A JSON value as an API value.
pub fn from_json(json: &Json) -> v1::Value {
    let kind = match json {
        Json::Null => Kind::NullValue(v1::NullValue::NullValue as i32),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Kind::IntValue(i),
            (None, Some(u)) => Kind::UintValue(u),
            (None, None) => Kind::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(items) => Kind::ListValue(v1::ListValue {
            values: items.iter().map(from_json).collect(),
        }),
        Json::Object(map) => Kind::StructValue(v1::Struct {
            fields: map
                .iter()
                .map(|(name, value)| v1::Field {
                    name: name.clone(),
                    value: Some(from_json(value)),
                })
                .collect(),
        }),
    };
    v1::Value { kind: Some(kind) }
}

/// JSON text as an API value, built as it is parsed (no JSON tree in
/// between): what [`from_json`] makes of the parsed text, for answering
/// lookups from stored row bytes.
pub fn from_json_slice(json: &[u8]) -> Result<v1::Value, serde_json::Error> {
    serde_json::from_slice::<Parsed>(json).map(|parsed| parsed.0)
}

/// A value parsed straight into its API form.
struct Parsed(v1::Value);

impl Parsed {
    fn of(kind: Kind) -> Self {
        Parsed(v1::Value { kind: Some(kind) })
    }
}

impl<'de> serde::Deserialize<'de> for Parsed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ParsedVisitor)
    }
}

/// Objects with more fields than this find a repeated name by an index
/// instead of a scan.
const SCANNED_FIELDS: usize = 16;

struct ParsedVisitor;

impl<'de> serde::de::Visitor<'de> for ParsedVisitor {
    type Value = Parsed;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Parsed, E> {
        Ok(Parsed::of(Kind::NullValue(v1::NullValue::NullValue as i32)))
    }

    fn visit_bool<E>(self, b: bool) -> Result<Parsed, E> {
        Ok(Parsed::of(Kind::BoolValue(b)))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Parsed, E> {
        Ok(Parsed::of(Kind::IntValue(i)))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Parsed, E> {
        Ok(Parsed::of(match i64::try_from(u) {
            Ok(i) => Kind::IntValue(i),
            Err(_) => Kind::UintValue(u),
        }))
    }

    fn visit_f64<E>(self, d: f64) -> Result<Parsed, E> {
        Ok(Parsed::of(Kind::DoubleValue(d)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Parsed, E> {
        Ok(Parsed::of(Kind::StringValue(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Parsed, E> {
        Ok(Parsed::of(Kind::StringValue(s)))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Parsed, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Parsed(value)) = seq.next_element()? {
            values.push(value);
        }
        Ok(Parsed::of(Kind::ListValue(v1::ListValue { values })))
    }

    /// Fields keep their first place; a repeated name takes the last value,
    /// as a parsed JSON object does.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut fields: Vec<v1::Field> = Vec::new();
        let mut index: Option<std::collections::HashMap<String, usize>> = None;
        while let Some(name) = map.next_key::<String>()? {
            let Parsed(value) = map.next_value()?;
            let earlier = match &mut index {
                Some(index) => index.get(&name).copied(),
                None => fields.iter().position(|f| f.name == name),
            };
            if let Some(i) = earlier {
                fields[i].value = Some(value);
                continue;
            }
            if let Some(index) = &mut index {
                index.insert(name.clone(), fields.len());
            } else if fields.len() == SCANNED_FIELDS {
                let mut built: std::collections::HashMap<String, usize> = fields
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (f.name.clone(), i))
                    .collect();
                built.insert(name.clone(), fields.len());
                index = Some(built);
            }
            fields.push(v1::Field {
                name,
                value: Some(value),
            });
        }
        Ok(Parsed::of(Kind::StructValue(v1::Struct { fields })))
    }
}

/// An API value that has no JSON form, and where in the value it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {problem}")]
pub struct NotJson {
    /// Its path, from `$` (the whole value): `$.items[2].price`.
    pub at: String,
    /// Why it has no JSON form.
    pub problem: String,
}

/// An API value as JSON; the error says what cannot be JSON and where.
pub fn to_json(value: &v1::Value) -> Result<Json, NotJson> {
    to_json_at(value, "$")
}

fn to_json_at(value: &v1::Value, at: &str) -> Result<Json, NotJson> {
    let not_json = |problem: String| NotJson {
        at: at.to_owned(),
        problem,
    };
    Ok(match &value.kind {
        None => return Err(not_json("a value must set one of its kinds".into())),
        Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::IntValue(i)) => Json::from(*i),
        Some(Kind::UintValue(u)) => Json::from(*u),
        Some(Kind::DoubleValue(d)) => Json::Number(
            Number::from_f64(*d).ok_or_else(|| not_json(format!("{d} is not a JSON number")))?,
        ),
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(list)) => Json::Array(
            list.values
                .iter()
                .enumerate()
                .map(|(i, v)| to_json_at(v, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Some(Kind::StructValue(s)) => {
            let mut map = Map::new();
            for field in &s.fields {
                let at = format!("{at}.{}", field.name);
                let value = field.value.as_ref().ok_or_else(|| NotJson {
                    at: at.clone(),
                    problem: "a field needs a value".into(),
                })?;
                map.insert(field.name.clone(), to_json_at(value, &at)?);
            }
            Json::Object(map)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips_with_exact_integers_and_field_order() {
        let json: Json = serde_json::from_str(
            r#"{"z":1,"a":[true,null,"s",1.5,-7],"big":18446744073709551615,"max":9007199254740993}"#,
        )
        .unwrap();
        let value = from_json(&json);
        assert_eq!(to_json(&value).unwrap(), json);
        let Some(Kind::StructValue(s)) = &value.kind else {
            panic!("an object maps to a struct");
        };
        let names: Vec<&str> = s.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["z", "a", "big", "max"], "field order is kept");
        assert_eq!(
            s.fields[2].value.as_ref().unwrap().kind,
            Some(Kind::UintValue(u64::MAX))
        );
        assert_eq!(
            s.fields[3].value.as_ref().unwrap().kind,
            Some(Kind::IntValue(9_007_199_254_740_993)),
            "above 2^53 stays exact"
        );
    }

    #[test]
    fn parsing_into_api_values_gives_what_the_json_tree_gives() {
        let wide: String = (0..40)
            .map(|i| format!("\"c{i}\":{i}"))
            .collect::<Vec<_>>()
            .join(",");
        for text in [
            r#"{"id":1,"name":"user 1","email":"user1@example.com","tier":"pro","score":1}"#,
            r#"{"z":1,"a":[true,null,"s\u00e9\n",1.5,-7,[],{}],"big":18446744073709551615,"max":9007199254740993,"min":-9223372036854775808}"#,
            r#"{"a":1,"b":2,"a":3}"#,
            r#" [ 1e300 , -0.0 , "x" ] "#,
            "null",
            &format!("{{{wide},\"c3\":\"again\",\"late\":true}}"),
        ] {
            let tree: Json = serde_json::from_str(text).unwrap();
            assert_eq!(
                from_json_slice(text.as_bytes()).unwrap(),
                from_json(&tree),
                "{text}"
            );
        }
        assert!(from_json_slice(b"{\"a\":").is_err());
    }

    #[test]
    fn values_that_are_not_json_are_refused_with_their_place() {
        let nan = v1::Value {
            kind: Some(Kind::DoubleValue(f64::NAN)),
        };
        let list = v1::Value {
            kind: Some(Kind::ListValue(v1::ListValue {
                values: vec![from_json(&Json::Null), nan],
            })),
        };
        assert_eq!(to_json(&list).unwrap_err().at, "$[1]");
        let empty = v1::Value { kind: None };
        assert!(
            to_json(&empty)
                .unwrap_err()
                .problem
                .contains("one of its kinds")
        );
    }
}
