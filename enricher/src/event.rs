//! An input event as a job sees it: the JSON object's text with its top-level
//! fields indexed (not decoded into a map), plus the fields the joins add.
//! The output is the original text with the added fields appended, so what an
//! event passes through is copied as it is instead of being decoded and encoded
//! again; only the fields a key path reads are decoded. Added fields are kept as
//! JSON text too, in one buffer, so enriching an event allocates little.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::Serialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::field_path::FieldPath;

/// An event being enriched.
#[derive(Debug)]
pub struct Event<'a> {
    /// The object's text, without surrounding whitespace.
    text: &'a str,
    /// Its top-level fields: name and value text, in order.
    fields: Vec<(Cow<'a, str>, &'a RawValue)>,
    /// Fields the joins set, in the order first set: name and where its value's
    /// text is in `added_json`.
    added: Vec<Added<'a>>,
    /// The values set, as JSON text (a value set again leaves its old text unused).
    added_json: Vec<u8>,
}

/// A field a join set.
#[derive(Debug)]
struct Added<'a> {
    name: Cow<'a, str>,
    /// The name written as a JSON object's name with its colon, when the
    /// setter knew it ahead (else it is written with the event).
    name_json: Option<&'a [u8]>,
    /// Where its value's text is in `added_json`.
    value: Range<usize>,
}

/// Why a record value is not an event.
#[derive(Debug, thiserror::Error)]
pub enum NotAnEvent {
    /// Not JSON.
    #[error("value is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// JSON of another type than an object.
    #[error("event is not a JSON object")]
    NotAnObject,
}

/// Bytes first set aside for the JSON of the fields joins set.
const ADDED_JSON_CAPACITY: usize = 256;

impl<'a> Event<'a> {
    /// Indexes the JSON object in `text`; the error is the reason it is not one.
    pub fn parse(text: &'a str) -> Result<Self, NotAnEvent> {
        let mut parser = serde_json::Deserializer::from_str(text);
        let fields = match parser
            .deserialize_map(Fields)
            .and_then(|fields| parser.end().map(|()| fields))
        {
            Ok(fields) => fields,
            // Valid JSON, but another type than an object.
            Err(_) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                return Err(NotAnEvent::NotAnObject);
            }
            Err(e) => return Err(NotAnEvent::NotJson(e)),
        };
        Ok(Event {
            text: text.trim(),
            fields,
            added: Vec::new(),
            // Room for a join's columns or two without growing (a growing
            // buffer showed as five reallocations per event).
            added_json: Vec::with_capacity(ADDED_JSON_CAPACITY),
        })
    }

    /// The value at `path`: a field a join set wins over the event's own.
    pub fn get(&self, path: &FieldPath) -> Option<Value> {
        let (first, below) = path.split_first();
        let text = match self.added.iter().find(|added| added.name == first) {
            Some(added) => &self.added_json[added.value.clone()],
            // The last of repeated names counts, as when decoding into a map.
            None => {
                let (_, raw) = self.fields.iter().rev().find(|(name, _)| name == first)?;
                raw.get().as_bytes()
            }
        };
        let value = serde_json::from_slice(text).expect("JSON text");
        FieldPath::descend(value, below)
    }

    /// Sets field `name` to `value` (replacing the event's own field of that
    /// name in place).
    pub fn set(&mut self, name: impl Into<Cow<'a, str>>, value: &(impl Serialize + ?Sized)) {
        self.set_written(name, |out| {
            serde_json::to_writer(out, value).expect("JSON serializes");
        });
    }

    /// Sets field `name` to the JSON text `json` (as [`Event::set`]).
    pub fn set_json(&mut self, name: impl Into<Cow<'a, str>>, json: &[u8]) {
        self.set_written(name, |out| out.extend_from_slice(json));
    }

    /// Sets field `name` to the JSON text `write` appends to the buffer it
    /// is handed (as [`Event::set`]).
    pub fn set_written(&mut self, name: impl Into<Cow<'a, str>>, write: impl FnOnce(&mut Vec<u8>)) {
        self.set_written_as(name, None, write);
    }

    /// [`Event::set_written`], with the name also written as a JSON
    /// object's name and its colon (`"user":`), when the caller has it
    /// ahead: the event is then written without escaping the name again.
    pub fn set_written_as(
        &mut self,
        name: impl Into<Cow<'a, str>>,
        name_json: Option<&'a [u8]>,
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        let start = self.added_json.len();
        write(&mut self.added_json);
        let (name, value) = (name.into(), start..self.added_json.len());
        match self.added.iter_mut().find(|added| added.name == name) {
            Some(added) => added.value = value,
            None => self.added.push(Added {
                name,
                name_json,
                value,
            }),
        }
    }

    /// Writes the event, with the fields set, as a JSON object.
    pub fn write(&self, out: &mut Vec<u8>) {
        let replaces = |added: &Added| self.fields.iter().any(|(n, _)| *n == added.name);
        if self.added.iter().any(replaces) {
            return self.write_field_by_field(out);
        }
        let body = self.text[..self.text.len() - 1].trim_end(); // without the `}`
        out.extend_from_slice(body.as_bytes());
        let mut first = body.ends_with('{');
        for added in &self.added {
            self.write_added(out, &mut first, added);
        }
        out.push(b'}');
    }

    /// Writes each field (a set one in place of the event's own), then the new ones.
    fn write_field_by_field(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut first = true;
        let mut written = Vec::new();
        for (i, (name, _)) in self.fields.iter().enumerate() {
            if self.fields[..i].iter().any(|(n, _)| n == name) {
                continue; // a repeated name: its last value, at its first place
            }
            match self.added.iter().position(|added| added.name == *name) {
                Some(set) => {
                    self.write_added(out, &mut first, &self.added[set]);
                    written.push(set);
                }
                None => {
                    let (_, last) = self
                        .fields
                        .iter()
                        .rev()
                        .find(|(n, _)| n == name)
                        .expect("itself");
                    write_member(out, &mut first, name, None);
                    out.extend_from_slice(last.get().as_bytes());
                }
            }
        }
        for (i, added) in self.added.iter().enumerate() {
            if !written.contains(&i) {
                self.write_added(out, &mut first, added);
            }
        }
        out.push(b'}');
    }

    /// Writes a field a join set, after a comma unless it is the first.
    fn write_added(&self, out: &mut Vec<u8>, first: &mut bool, added: &Added) {
        write_member(out, first, &added.name, added.name_json);
        out.extend_from_slice(&self.added_json[added.value.clone()]);
    }
}

/// Writes an object member's `"name":` (as `name_json` when the caller has
/// it written ahead, else escaped here), after a comma unless it is the
/// object's first; its value is the caller's to write next.
pub fn write_member(out: &mut Vec<u8>, first: &mut bool, name: &str, name_json: Option<&[u8]>) {
    if !std::mem::take(first) {
        out.push(b',');
    }
    match name_json {
        Some(name_json) => out.extend_from_slice(name_json),
        None => {
            serde_json::to_writer(&mut *out, name).expect("writing to a Vec");
            out.push(b':');
        }
    }
}

/// The top-level fields of an object, borrowed from the text where possible.
struct Fields;

impl<'de> Visitor<'de> for Fields {
    type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(Name(name)) = map.next_key()? {
            fields.push((name, map.next_value()?));
        }
        Ok(fields)
    }
}

/// A field name: borrowed unless it has escapes.
struct Name<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Borrowed(name)))
            }
            fn visit_str<E>(self, name: &str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Owned(name.to_owned())))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn path(text: &str) -> FieldPath {
        FieldPath::parse(text).unwrap()
    }

    fn written(event: &Event) -> String {
        let mut out = Vec::new();
        event.write(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn passes_fields_through_and_appends_the_set_ones() {
        let mut event = Event::parse(" {\"a\": 1, \"b\": {\"c\": [1.50, \"x\"]}}\n").unwrap();
        assert_eq!(written(&event), r#"{"a": 1, "b": {"c": [1.50, "x"]}}"#);
        event.set("u", &json!({"name": "Ada"}));
        event.set("q", &json!(3));
        event.set("u", &json!(null)); // set again: replaced where it is
        assert_eq!(
            written(&event),
            r#"{"a": 1, "b": {"c": [1.50, "x"]},"u":null,"q":3}"#
        );
        let mut empty = Event::parse("{ }").unwrap();
        empty.set("x", &json!("y"));
        assert_eq!(written(&empty), r#"{"x":"y"}"#);
    }

    #[test]
    fn a_set_field_replaces_the_events_own_in_place() {
        let mut event = Event::parse(r#"{"a": 1, "n\u0061me": "old", "a": 2, "z": 0}"#).unwrap();
        event.set("name", &json!("new"));
        event.set("extra", &json!(true));
        let out = written(&event);
        assert_eq!(out, r#"{"a":2,"name":"new","z":0,"extra":true}"#);
        let decoded: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            decoded,
            json!({"a": 2, "name": "new", "z": 0, "extra": true})
        );
    }

    #[test]
    fn names_written_ahead_give_the_same_event() {
        let names = ["user", "tier", "a\"b"].map(|n| format!("{}:", json!(n)).into_bytes());
        for text in [r#"{"a": 1, "tier": 0}"#, r#"{"a": 1}"#] {
            let (mut ahead, mut plain) = (Event::parse(text).unwrap(), Event::parse(text).unwrap());
            for ((name, name_json), value) in
                ["user", "tier", "a\"b"]
                    .iter()
                    .zip(&names)
                    .zip([r#"{"n":"x"}"#, r#""gold""#, "2"])
            {
                ahead.set_written_as(*name, Some(name_json), |out| {
                    out.extend_from_slice(value.as_bytes())
                });
                plain.set_json(*name, value.as_bytes());
            }
            assert_eq!(written(&ahead), written(&plain));
            let decoded: Value = serde_json::from_str(&written(&ahead)).unwrap();
            assert_eq!(decoded["a\"b"], json!(2));
        }
    }

    #[test]
    fn paths_read_set_fields_first_then_the_events_own() {
        let mut event = Event::parse(r#"{"id": 7, "line": {"sku": "A-1"}, "id": 8}"#).unwrap();
        assert_eq!(event.get(&path("id")), Some(json!(8)));
        assert_eq!(event.get(&path("line.sku")), Some(json!("A-1")));
        assert_eq!(event.get(&path("line.gone")), None);
        assert_eq!(event.get(&path("gone")), None);
        event.set("user", &json!({"tier": "gold"}));
        event.set("id", &json!(9));
        assert_eq!(event.get(&path("user.tier")), Some(json!("gold")));
        assert_eq!(event.get(&path("id")), Some(json!(9)));
    }

    #[test]
    fn says_why_text_is_not_an_event() {
        let reason = |text| Event::parse(text).err().map(|e| e.to_string());
        assert!(reason("{oops").unwrap().starts_with("value is not JSON"));
        assert!(
            reason(r#"{"a": 1} x"#)
                .unwrap()
                .starts_with("value is not JSON")
        );
        assert_eq!(reason("[1, 2]").unwrap(), "event is not a JSON object");
        assert_eq!(reason("3").unwrap(), "event is not a JSON object");
    }
}
