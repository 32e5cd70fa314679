//! Order-preserving key encoding.
//!
//! A key is the list of its primary-key column values, in key order. Each value
//! is a type tag followed by bytes that sort like the value:
//!
//! | tag | value | bytes |
//! |---|---|---|
//! | `01` | null | — |
//! | `02`/`03` | false/true | — |
//! | `04` | integer (i64 or u64) | 16 bytes: big-endian i128 with the sign bit flipped |
//! | `05` | float | 8 bytes: IEEE-754 bits, sign-flipped (all bits flipped if negative) |
//! | `06` | string | UTF-8 with `00` escaped as `00 FF`, terminated by `00 01` |
//!
//! So the encoding of a key's leading columns is a byte prefix of the full key:
//! `scan` by prefix over a composite key returns exactly the rows whose first
//! columns equal the prefix, in key order. Keys that begin with `00` are
//! reserved for table metadata (stored offsets).

use serde_json::Value;

const NULL: u8 = 0x01;
const FALSE: u8 = 0x02;
const TRUE: u8 = 0x03;
const INT: u8 = 0x04;
const FLOAT: u8 = 0x05;
const STRING: u8 = 0x06;

/// Why key values cannot be encoded, or bytes cannot be decoded as a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyCodecError {
    /// An array or object as a key value.
    #[error("key columns must be scalars, not arrays or objects")]
    NotScalar,
    /// A JSON number that is neither a 64-bit integer nor a double.
    #[error("number out of range")]
    NumberOutOfRange,
    /// Encoded bytes that end inside a value.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// An encoded integer beyond `i64::MIN..=u64::MAX`.
    #[error("integer out of range")]
    IntegerOutOfRange,
    /// An encoded string that is not UTF-8.
    #[error("string is not UTF-8: {0}")]
    NotUtf8(#[from] std::string::FromUtf8Error),
    /// A byte that starts no value.
    #[error("unknown key tag {0:#04x}")]
    UnknownTag(u8),
}

/// Encodes key column values, in key order.
pub fn encode<'a>(values: impl IntoIterator<Item = &'a Value>) -> Result<Vec<u8>, KeyCodecError> {
    let mut out = Vec::with_capacity(32);
    for value in values {
        encode_value(value, &mut out)?;
    }
    Ok(out)
}

fn encode_value(value: &Value, out: &mut Vec<u8>) -> Result<(), KeyCodecError> {
    match value {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Number(n) => {
            if let Some(i) = n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
            {
                out.push(INT);
                out.extend_from_slice(&((i as u128) ^ (1 << 127)).to_be_bytes());
            } else {
                let f = n.as_f64().ok_or(KeyCodecError::NumberOutOfRange)?;
                let bits = f.to_bits();
                let ordered = if f.is_sign_negative() {
                    !bits
                } else {
                    bits ^ (1 << 63)
                };
                out.push(FLOAT);
                out.extend_from_slice(&ordered.to_be_bytes());
            }
        }
        Value::String(s) => {
            out.push(STRING);
            for &b in s.as_bytes() {
                out.push(b);
                if b == 0 {
                    out.push(0xff);
                }
            }
            out.extend_from_slice(&[0, 1]);
        }
        Value::Array(_) | Value::Object(_) => {
            return Err(KeyCodecError::NotScalar);
        }
    }
    Ok(())
}

/// Decodes an encoded key back into its column values.
pub fn decode(mut bytes: &[u8]) -> Result<Vec<Value>, KeyCodecError> {
    let mut values = Vec::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        bytes = rest;
        let value = match tag {
            NULL => Value::Null,
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            INT => {
                let (raw, rest) = bytes
                    .split_at_checked(16)
                    .ok_or(KeyCodecError::Truncated("integer"))?;
                bytes = rest;
                let i =
                    (u128::from_be_bytes(raw.try_into().expect("16 bytes")) ^ (1 << 127)) as i128;
                if let Ok(i) = i64::try_from(i) {
                    Value::from(i)
                } else {
                    Value::from(u64::try_from(i).map_err(|_| KeyCodecError::IntegerOutOfRange)?)
                }
            }
            FLOAT => {
                let (raw, rest) = bytes
                    .split_at_checked(8)
                    .ok_or(KeyCodecError::Truncated("float"))?;
                bytes = rest;
                let ordered = u64::from_be_bytes(raw.try_into().expect("8 bytes"));
                let bits = if ordered & (1 << 63) != 0 {
                    ordered ^ (1 << 63)
                } else {
                    !ordered
                };
                Value::from(f64::from_bits(bits))
            }
            STRING => {
                let mut s = Vec::new();
                loop {
                    match bytes {
                        [0, 1, rest @ ..] => {
                            bytes = rest;
                            break;
                        }
                        [0, 0xff, rest @ ..] => {
                            s.push(0);
                            bytes = rest;
                        }
                        [b, rest @ ..] => {
                            s.push(*b);
                            bytes = rest;
                        }
                        [] => return Err(KeyCodecError::Truncated("string")),
                    }
                }
                Value::String(String::from_utf8(s)?)
            }
            other => return Err(KeyCodecError::UnknownTag(other)),
        };
        values.push(value);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn enc(values: &[Value]) -> Vec<u8> {
        encode(values).unwrap()
    }

    #[test]
    fn round_trips() {
        let cases = [
            vec![json!(0), json!(-1), json!(i64::MIN), json!(u64::MAX)],
            vec![json!("a\u{0}b"), json!(""), json!("😀")],
            vec![
                json!(null),
                json!(true),
                json!(false),
                json!(-2.5),
                json!(1e300),
            ],
        ];
        for values in cases {
            assert_eq!(decode(&enc(&values)).unwrap(), values);
        }
    }

    #[test]
    fn preserves_order() {
        let ordered = [
            vec![json!(i64::MIN)],
            vec![json!(-1)],
            vec![json!(0)],
            vec![json!(7)],
            vec![json!(u64::MAX)],
        ];
        for pair in ordered.windows(2) {
            assert!(
                enc(&pair[0]) < enc(&pair[1]),
                "{:?} < {:?}",
                pair[0],
                pair[1]
            );
        }
        let strings = ["", "a", "a\u{0}", "a\u{0}b", "ab", "b"];
        for pair in strings.windows(2) {
            assert!(enc(&[json!(pair[0])]) < enc(&[json!(pair[1])]), "{pair:?}");
        }
        let floats = [-1e10, -1.5, -0.0, 0.5, 2.0, 1e10];
        for pair in floats.windows(2) {
            assert!(enc(&[json!(pair[0])]) < enc(&[json!(pair[1])]), "{pair:?}");
        }
    }

    #[test]
    fn a_leading_column_is_a_byte_prefix() {
        let full = enc(&[json!("eu"), json!(42)]);
        assert!(full.starts_with(&enc(&[json!("eu")])));
        assert!(!enc(&[json!("eu2"), json!(1)]).starts_with(&enc(&[json!("eu")])));
    }

    #[test]
    fn rejects_nested_values() {
        assert_eq!(encode(&[json!([1])]), Err(KeyCodecError::NotScalar));
        assert_eq!(decode(&[0x09]), Err(KeyCodecError::UnknownTag(0x09)));
        assert_eq!(
            decode(&[INT, 0, 0]),
            Err(KeyCodecError::Truncated("integer"))
        );
        assert_eq!(
            decode(&[STRING, b'a']),
            Err(KeyCodecError::Truncated("string"))
        );
    }
}
