//! JSON written by hand on the hot path: capture encodes every change this
//! way. Field names are constant fragments written whole, strings are copied
//! in one piece unless they need escaping (looked for eight bytes at a time),
//! integers go through `itoa` and doubles through serde_json's own
//! formatter. What is rare (escaped strings, bytes, geometries, arrays,
//! structs, non-finite doubles) goes through serde_json, so the text is byte
//! for byte what serde_json writes (the tests of [`crate::debezium_json`]
//! compare the two).

use serde_json::ser::{CompactFormatter, Formatter as _};

use crate::envelope::Row;
use crate::json_number::{DoubleFormat, java_double, write_json};
use crate::value::Value;

/// Appends `text` as a JSON string.
pub(crate) fn string(out: &mut Vec<u8>, text: &str) {
    if needs_escape(text.as_bytes()) {
        write_json(out, &text, DoubleFormat::Compact);
        return;
    }
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

/// Whether JSON must escape a byte of `bytes` (a control character, `"` or
/// `\`): eight bytes at a time, the last word overlapping the one before.
fn needs_escape(bytes: &[u8]) -> bool {
    if bytes.len() < 8 {
        return bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
    }
    let word_at = |at: usize| {
        word_needs_escape(u64::from_le_bytes(
            bytes[at..at + 8].try_into().expect("eight bytes"),
        ))
    };
    (0..bytes.len() / 8).any(|i| word_at(8 * i)) || word_at(bytes.len() - 8)
}

/// Whether a byte of `word` is below 0x20, `"` or `\`. Each test (a byte
/// below n; a zero byte after an XOR) may mark the wrong byte of a word that
/// has one, but never marks a word without one.
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = ONES * 0x80;
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    (below_space
        | zero_byte(word ^ (ONES * u64::from(b'"')))
        | zero_byte(word ^ (ONES * u64::from(b'\\'))))
        & HIGH
        != 0
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule, one byte at a time.
    fn escaped_byte(b: u8) -> bool {
        b < 0x20 || b == b'"' || b == b'\\'
    }

    #[test]
    fn every_byte_needing_escape_is_found_wherever_it_is() {
        // Every byte value at every place of texts of 0 to 24 bytes, over
        // plain text and over text of bytes just past the ones escaped.
        for filler in [b'a', b' ', b'#', b']', 0x7f, 0xc3, 0xff] {
            for len in 0..=24 {
                let plain = vec![filler; len];
                assert!(!needs_escape(&plain), "{plain:?}");
                for at in 0..len {
                    for b in 0..=255u8 {
                        let mut text = plain.clone();
                        text[at] = b;
                        assert_eq!(needs_escape(&text), escaped_byte(b), "{text:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_string_is_escaped_only_when_it_must_be() {
        for text in [
            "",
            "plain",
            "ünïcode text, longer than a word",
            "tab\there",
            "q\"",
            "back\\slash",
            "\u{1f}",
        ] {
            let mut out = Vec::new();
            string(&mut out, text);
            assert_eq!(out, serde_json::to_vec(text).unwrap(), "{text:?}");
        }
    }
}
