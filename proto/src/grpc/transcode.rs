//! JSON text straight to the protobuf encoding of a `tributary.v1.Value`, with
//! no tree between: how the lookup API answers with stored rows.
//!
//! The bytes are those `prost` writes for the [`v1::Value`] that
//! [`from_json`] makes of the parsed text (tested below against it). One
//! case is left to a tree ([`from_json_slice`]): an object that repeats a
//! field name, whose value is its last one in its first place (the
//! transcoder says so with [`Untranscoded::RepeatedName`]).
//!
//! [`v1::Value`]: super::v1::Value
//! [`from_json`]: super::from_json
//! [`from_json_slice`]: super::from_json_slice

use std::hash::BuildHasher as _;

use prost::encoding::{encode_varint, encoded_len_varint};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Wire keys (field number << 3 | wire type) of `Value`'s kinds.
const NULL: u8 = 1 << 3;
const BOOL: u8 = 2 << 3;
const INT: u8 = 3 << 3;
const UINT: u8 = 4 << 3;
const DOUBLE: u8 = 5 << 3 | 1;
const STRING: u8 = 6 << 3 | 2;
const LIST: u8 = 7 << 3 | 2;
const STRUCT: u8 = 8 << 3 | 2;
/// Field 1, length-delimited: `ListValue.values`, `Struct.fields`, `Field.name`.
const FIRST: u8 = 1 << 3 | 2;
/// `Field.value`.
const FIELD_VALUE: u8 = 2 << 3 | 2;

/// Why JSON text was not transcoded.
#[derive(Debug)]
pub(crate) enum Untranscoded {
    /// Not JSON.
    Json(serde_json::Error),
    /// An object repeats a field name: left to the tree, which keeps the last value.
    RepeatedName,
}

/// Writes the encoding of the `Value` that `json` holds into `out` (emptied first).
pub(crate) fn transcode(json: &[u8], out: &mut Vec<u8>) -> Result<(), Untranscoded> {
    out.clear();
    let mut state = State {
        out,
        names: Vec::new(),
        repeated: false,
    };
    // Text checked as UTF-8 once, whole, is parsed without checking each
    // string again; bytes that are not UTF-8 are parsed as bytes, for the
    // parser to say where.
    let parsed = match std::str::from_utf8(json) {
        Ok(text) => parse(serde_json::Deserializer::from_str(text), &mut state),
        Err(_) => parse(serde_json::Deserializer::from_slice(json), &mut state),
    };
    match parsed {
        Ok(()) => Ok(()),
        Err(_) if state.repeated => Err(Untranscoded::RepeatedName),
        Err(e) => Err(Untranscoded::Json(e)),
    }
}

fn parse<'de, R: serde_json::de::Read<'de>>(
    mut parser: serde_json::Deserializer<R>,
    state: &mut State<'_>,
) -> serde_json::Result<()> {
    Body(state).deserialize(&mut parser)?;
    parser.end()
}

/// What the parse writes to, and the hashes of the field names of the objects
/// it is in (a stack: an object's names sit above its parent's).
struct State<'o> {
    out: &'o mut Vec<u8>,
    names: Vec<u64>,
    repeated: bool,
}

impl State<'_> {
    fn byte(&mut self, byte: u8) {
        self.out.push(byte);
    }

    fn varint(&mut self, value: u64) {
        encode_varint(value, self.out);
    }

    /// `int_value` is a `sint64`: zigzag-encoded.
    fn int(&mut self, i: i64) {
        self.byte(INT);
        self.varint(((i << 1) ^ (i >> 63)) as u64);
    }

    fn bytes(&mut self, key: u8, bytes: &[u8]) {
        self.byte(key);
        self.varint(bytes.len() as u64);
        self.out.extend_from_slice(bytes);
    }

    /// Starts a length-delimited field whose length is known at its end:
    /// writes its key and one byte for the length, and returns where that byte is.
    fn open(&mut self, key: u8) -> usize {
        self.out.extend_from_slice(&[key, 0]);
        self.out.len() - 1
    }

    /// Ends the field [`open`](Self::open) started: writes its length, moving
    /// its contents when the length needs more than one byte.
    fn close(&mut self, at: usize) {
        let len = self.out.len() - at - 1;
        if let Ok(byte @ 0..0x80) = u8::try_from(len) {
            self.out[at] = byte;
            return;
        }
        let width = encoded_len_varint(len as u64);
        self.out.resize(self.out.len() + width - 1, 0);
        self.out.copy_within(at + 1..at + 1 + len, at + width);
        let mut length = &mut self.out[at..at + width];
        encode_varint(len as u64, &mut length);
    }
}

/// Writes one JSON value as the body of a `Value`.
struct Body<'s, 'o>(&'s mut State<'o>);

impl<'de> DeserializeSeed<'de> for Body<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Body<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.out.extend_from_slice(&[NULL, 0]);
        Ok(())
    }

    fn visit_bool<E>(self, b: bool) -> Result<(), E> {
        self.0.out.extend_from_slice(&[BOOL, u8::from(b)]);
        Ok(())
    }

    fn visit_i64<E>(self, i: i64) -> Result<(), E> {
        self.0.int(i);
        Ok(())
    }

    fn visit_u64<E>(self, u: u64) -> Result<(), E> {
        match i64::try_from(u) {
            Ok(i) => self.0.int(i),
            Err(_) => {
                self.0.byte(UINT);
                self.0.varint(u);
            }
        }
        Ok(())
    }

    fn visit_f64<E>(self, d: f64) -> Result<(), E> {
        self.0.byte(DOUBLE);
        self.0.out.extend_from_slice(&d.to_le_bytes());
        Ok(())
    }

    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        self.0.bytes(STRING, s.as_bytes());
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let state = self.0;
        let list = state.open(LIST);
        while seq
            .next_element_seed(Enclosed(&mut *state, FIRST))?
            .is_some()
        {}
        state.close(list);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.0;
        let object = state.open(STRUCT);
        let first_name = state.names.len();
        while let Some(field) = map.next_key_seed(Name(&mut *state))? {
            map.next_value_seed(Enclosed(&mut *state, FIELD_VALUE))?;
            state.close(field);
        }
        // Equal hashes are taken as a repeated name: a collision only sends
        // the text to the tree, which gives the same answer.
        let names = &mut state.names[first_name..];
        names.sort_unstable();
        if names.windows(2).any(|pair| pair[0] == pair[1]) {
            state.repeated = true;
            return Err(de::Error::custom("a field name is repeated"));
        }
        state.names.truncate(first_name);
        state.close(object);
        Ok(())
    }
}

/// A value in a length-delimited field of its own, the field's key given: a
/// list's element (`ListValue.values`, [`FIRST`]) or a field's value
/// (`Field.value`, [`FIELD_VALUE`]).
struct Enclosed<'s, 'o>(&'s mut State<'o>, u8);

impl<'de> DeserializeSeed<'de> for Enclosed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let Enclosed(state, key) = self;
        let enclosing = state.open(key);
        Body(&mut *state).deserialize(d)?;
        state.close(enclosing);
        Ok(())
    }
}

/// A field's name: opens its `Struct.fields` entry and writes `Field.name`
/// (absent when empty, as protobuf leaves a default string); returns where
/// the entry's length goes.
struct Name<'s, 'o>(&'s mut State<'o>);

impl<'de> DeserializeSeed<'de> for Name<'_, '_> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name<'_, '_> {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, name: &str) -> Result<usize, E> {
        let state = self.0;
        let field = state.open(FIRST);
        if !name.is_empty() {
            state.bytes(FIRST, name.as_bytes());
        }
        state
            .names
            .push(foldhash::fast::FixedState::default().hash_one(name.as_bytes()));
        Ok(field)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::grpc::{from_json, v1};

    fn transcoded(text: &str) -> Result<Vec<u8>, Untranscoded> {
        let mut out = vec![0xff];
        transcode(text.as_bytes(), &mut out).map(|()| out)
    }

    #[test]
    fn writes_what_prost_writes_for_the_parsed_tree() {
        let wide: String = (0..40)
            .map(|i| format!("\"c{i}\":{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let long = "x".repeat(300);
        let nested = format!(r#"{{"a":{{"b":["{long}",{{"c":"{long}"}}]}},"d":[[[]]]}}"#);
        for text in [
            r#"{"id":1,"name":"user 1","email":"user1@example.com","tier":"pro","score":1}"#,
            r#"{"z":1,"a":[true,false,null,"s\u00e9\n",1.5,-7,0,[],{}],"big":18446744073709551615,"max":9007199254740993,"min":-9223372036854775808}"#,
            r#" [ 1e300 , -0.0 , "x", "" ] "#,
            r#"{"":"empty name","e":""}"#,
            "null",
            "0",
            "-1",
            &format!("{{{wide}}}"),
            &nested,
        ] {
            let tree: serde_json::Value = serde_json::from_str(text).unwrap();
            let want = from_json(&tree).encode_to_vec();
            let got = transcoded(text).unwrap_or_else(|_| panic!("{text} transcodes"));
            assert_eq!(got, want, "{text}");
            assert_eq!(v1::Value::decode(&got[..]).unwrap(), from_json(&tree));
        }
    }

    #[test]
    fn leaves_repeated_names_to_the_tree_and_refuses_what_is_not_json() {
        for text in [r#"{"a":1,"b":2,"a":3}"#, r#"[{"x":{"y":1,"y":2}}]"#] {
            assert!(
                matches!(transcoded(text), Err(Untranscoded::RepeatedName)),
                "{text}"
            );
        }
        // The same name in different objects is not repeated.
        assert!(transcoded(r#"{"a":{"a":1},"b":{"a":2}}"#).is_ok());
        assert!(matches!(
            transcode(b"[\"\xff\"]", &mut Vec::new()),
            Err(Untranscoded::Json(_))
        ));
        for text in [r#"{"a":"#, "[1,]", "1 2", ""] {
            assert!(
                matches!(transcoded(text), Err(Untranscoded::Json(_))),
                "{text}"
            );
        }
    }
}
