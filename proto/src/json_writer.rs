//! JSON written by hand on the hot path: capture encodes every change this
//! way. Field names are constant fragments written whole, strings are copied
//! in one piece unless they need escaping, integers go through `itoa` and
//! doubles through serde_json's own formatter. What is rare (escaped strings,
//! bytes, geometries, arrays, structs, non-finite doubles) goes through
//! serde_json, so the text is byte for byte what serde_json writes (the tests
//! of [`crate::debezium_json`] compare the two).

use serde_json::ser::{CompactFormatter, Formatter as _};

use crate::envelope::Row;
use crate::json_number::{DoubleFormat, java_double, write_json};
use crate::value::Value;

/// Appends `text` as a JSON string.
pub(crate) fn string(out: &mut Vec<u8>, text: &str) {
    if text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        write_json(out, &text, DoubleFormat::Compact);
        return;
    }
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

/// Appends an integer.
pub(crate) fn int(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `value` as JSON, doubles in `doubles`.
pub(crate) fn value(out: &mut Vec<u8>, value: &Value, doubles: DoubleFormat) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int(i) => int(out, *i),
        Value::UInt(u) => int(out, *u),
        Value::Float(f) if f.is_finite() => match doubles {
            DoubleFormat::Compact => CompactFormatter
                .write_f64(out, *f)
                .expect("a Vec takes every write"),
            DoubleFormat::Java => out.extend_from_slice(java_double(*f).as_bytes()),
        },
        Value::String(text) => string(out, text),
        other => write_json(out, other, doubles),
    }
}

/// Appends `row` as a JSON object of its columns, in order.
pub(crate) fn row(out: &mut Vec<u8>, row: &Row, doubles: DoubleFormat) {
    out.push(b'{');
    for (i, (name, v)) in row.columns.iter().zip(&row.values).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, name);
        out.push(b':');
        value(out, v, doubles);
    }
    out.push(b'}');
}

/// Appends `text` as a JSON string, or `null`.
pub(crate) fn optional_string(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) => string(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

/// Appends `n`, or `null`.
pub(crate) fn optional_int(out: &mut Vec<u8>, n: Option<impl itoa::Integer>) {
    match n {
        Some(n) => int(out, n),
        None => out.extend_from_slice(b"null"),
    }
}
