//! What an event's value carries of a table's columns, and how each is
//! masked, hashed or truncated on the way (Debezium's `column.*` properties,
//! chosen per table by [`crate::column_rules`]).
//!
//! The key is built from the columns as decoded, before any of this, as
//! Debezium builds it (its key converters have no column mappers). A plan
//! also writes columns' defaults in place of NULLs where the converter's
//! `replace.null.with.default` asks for it.

use std::sync::Arc;

use tributary_proto::{Row, Value};

/// A table's value columns and their mappers.
#[derive(Debug, Clone, PartialEq)]
pub struct ValuePlan {
    /// Names of the columns the value carries, in table order.
    pub names: Arc<[String]>,
    /// Each of them, in the same order.
    pub columns: Vec<PlannedColumn>,
}

/// One column of a [`ValuePlan`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedColumn {
    /// Its index in the table.
    pub index: usize,
    /// How its values are changed.
    pub mapper: Option<Mapper>,
    /// Written in place of a NULL (after the mapper): the column's default,
    /// as Kafka's `JsonConverter` does with `replace.null.with.default`.
    pub null_default: Option<Value>,
}

impl ValuePlan {
    /// Every column of a table (`names`, in table order), as decoded.
    pub fn every_column(names: Arc<[String]>) -> ValuePlan {
        ValuePlan {
            columns: (0..names.len())
                .map(|index| PlannedColumn {
                    index,
                    mapper: None,
                    null_default: None,
                })
                .collect(),
            names,
        }
    }

    /// This plan with what each column's NULLs are written as (by the
    /// column's index in the table).
    pub fn with_null_defaults(mut self, defaults: &[Option<Value>]) -> ValuePlan {
        for planned in &mut self.columns {
            planned.null_default = defaults[planned.index].clone();
        }
        self
    }

    /// The value row of a decoded row (every column, in table order).
    pub fn apply(&self, mut values: Vec<Value>) -> Row {
        let values = self
            .columns
            .iter()
            .map(|planned| {
                let value = std::mem::replace(&mut values[planned.index], Value::Null);
                let value = match &planned.mapper {
                    Some(mapper) => mapper.apply(value),
                    None => value,
                };
                match (value, &planned.null_default) {
                    (Value::Null, Some(default)) => default.clone(),
                    (value, _) => value,
                }
            })
            .collect();
        Row {
            columns: self.names.clone(),
            values,
        }
    }
}

/// How one column's values are changed (Debezium's `ColumnMapper`s).
#[derive(Debug, Clone, PartialEq)]
pub enum Mapper {
    /// `column.truncate.to.N.chars`: text longer than N UTF-16 code units (Java
    /// `String.length()`) is cut to N (one fewer rather than split a surrogate
    /// pair); bytes longer than N bytes are cut to N.
    Truncate(usize),
    /// `column.mask.with.N.chars`: every value, NULL included, becomes N `*`.
    Mask(usize),
    /// `column.mask.hash.*`: the lowercase hex digest of salt and value; NULL stays NULL.
    Hash(Hashing),
}

impl Mapper {
    fn apply(&self, value: Value) -> Value {
        match (self, value) {
            (Mapper::Mask(n), _) => Value::String("*".repeat(*n)),
            (Mapper::Truncate(n), Value::String(text)) => Value::String(truncate_utf16(text, *n)),
            (Mapper::Truncate(n), Value::Bytes(mut bytes)) => {
                bytes.truncate(*n);
                Value::Bytes(bytes)
            }
            (Mapper::Hash(hashing), Value::String(text)) => Value::String(hashing.hash(&text)),
            (_, value) => value,
        }
    }
}

/// `text` cut to at most `max` UTF-16 code units, never inside a character.
fn truncate_utf16(mut text: String, max: usize) -> String {
    let mut units = 0;
    for (at, c) in text.char_indices() {
        units += c.len_utf16();
        if units > max {
            text.truncate(at);
            break;
        }
    }
    text
}

/// `column.mask.hash.<algorithm>.with.salt.<salt>` (`v1`) and
/// `column.mask.hash.v2.<algorithm>.with.salt.<salt>` (`v2`).
#[derive(Clone, PartialEq)]
pub struct Hashing {
    /// The digest, by Java's `MessageDigest` name.
    pub algorithm: HashAlgorithm,
    /// Salt bytes, hashed before the value.
    pub salt: Arc<[u8]>,
    /// How the value becomes bytes: v1 as Java serialises a `String` object
    /// (`ObjectOutputStream`), v2 as its UTF-8 bytes.
    pub v2: bool,
    /// The column's declared length in characters: a longer digest is cut to
    /// it, as Debezium does; `None` keeps it whole.
    pub max_chars: Option<usize>,
}

impl std::fmt::Debug for Hashing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The salt is a secret.
        f.debug_struct("Hashing")
            .field("algorithm", &self.algorithm)
            .field("v2", &self.v2)
            .field("max_chars", &self.max_chars)
            .finish_non_exhaustive()
    }
}

/// The digests Tributary offers, named as Java's `MessageDigest` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithm {
    /// `SHA-1`.
    Sha1,
    /// `SHA-224`.
    Sha224,
    /// `SHA-256`.
    Sha256,
    /// `SHA-384`.
    Sha384,
    /// `SHA-512`.
    Sha512,
}

impl HashAlgorithm {
    /// Every algorithm with its Java name.
    pub const ALL: [(&'static str, HashAlgorithm); 5] = [
        ("SHA-1", HashAlgorithm::Sha1),
        ("SHA-224", HashAlgorithm::Sha224),
        ("SHA-256", HashAlgorithm::Sha256),
        ("SHA-384", HashAlgorithm::Sha384),
        ("SHA-512", HashAlgorithm::Sha512),
    ];

    fn digest(self, parts: [&[u8]; 2]) -> Vec<u8> {
        fn run<D: sha1::Digest>(parts: [&[u8]; 2]) -> Vec<u8> {
            let mut digest = D::new();
            for part in parts {
                digest.update(part);
            }
            digest.finalize().to_vec()
        }
        match self {
            HashAlgorithm::Sha1 => run::<sha1::Sha1>(parts),
            HashAlgorithm::Sha224 => run::<sha2::Sha224>(parts),
            HashAlgorithm::Sha256 => run::<sha2::Sha256>(parts),
            HashAlgorithm::Sha384 => run::<sha2::Sha384>(parts),
            HashAlgorithm::Sha512 => run::<sha2::Sha512>(parts),
        }
    }
}

impl Hashing {
    fn hash(&self, text: &str) -> String {
        let value = if self.v2 {
            text.as_bytes().to_vec()
        } else {
            java_serialized_string(text)
        };
        let mut hex = hex::encode(self.algorithm.digest([&self.salt, &value]));
        if let Some(max) = self.max_chars {
            hex.truncate(max);
        }
        hex
    }
}

/// A `String` as Java's `ObjectOutputStream.writeObject` writes it: the
/// stream header, `TC_STRING` and a 2-byte length (`TC_LONGSTRING` and 8
/// bytes past 65535), then the text in modified UTF-8 (NUL as two bytes,
/// each UTF-16 unit of a surrogate pair as three).
fn java_serialized_string(text: &str) -> Vec<u8> {
    let mut utf = Vec::with_capacity(text.len() + 8);
    for unit in text.encode_utf16() {
        match unit {
            0x0001..=0x007f => utf.push(unit as u8),
            0x0000 | 0x0080..=0x07ff => {
                utf.push(0xc0 | (unit >> 6) as u8);
                utf.push(0x80 | (unit & 0x3f) as u8);
            }
            _ => {
                utf.push(0xe0 | (unit >> 12) as u8);
                utf.push(0x80 | ((unit >> 6) & 0x3f) as u8);
                utf.push(0x80 | (unit & 0x3f) as u8);
            }
        }
    }
    let mut out = vec![0xac, 0xed, 0x00, 0x05];
    match u16::try_from(utf.len()) {
        Ok(len) => {
            out.push(0x74);
            out.extend_from_slice(&len.to_be_bytes());
        }
        Err(_) => {
            out.push(0x7c);
            out.extend_from_slice(&(utf.len() as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&utf);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashing(v2: bool, max_chars: Option<usize>) -> Hashing {
        Hashing {
            algorithm: HashAlgorithm::Sha256,
            salt: Arc::from(&b"CzQMA0cB5K"[..]),
            v2,
            max_chars,
        }
    }

    #[test]
    fn java_serialises_strings_so() {
        // new ObjectOutputStream(bos).writeObject("hé\0😀")
        assert_eq!(
            java_serialized_string("hé\0😀"),
            [
                0xac, 0xed, 0x00, 0x05, 0x74, 0x00, 0x0b, b'h', 0xc3, 0xa9, 0xc0, 0x80, 0xed, 0xa0,
                0xbd, 0xed, 0xb8, 0x80
            ]
        );
        let long = "x".repeat(70_000);
        let bytes = java_serialized_string(&long);
        assert_eq!(
            &bytes[..13],
            [0xac, 0xed, 0, 5, 0x7c, 0, 0, 0, 0, 0, 1, 0x11, 0x70]
        );
    }

    /// Expected digests from Java 17: `MessageDigest.getInstance("SHA-256")`,
    /// `update("CzQMA0cB5K".getBytes())`, then `digest` of the value's bytes
    /// (v1: `ObjectOutputStream.writeObject(value)`; v2: `getBytes("UTF-8")`).
    #[test]
    fn hashes_are_javas_hex_digests_of_salt_and_value() {
        let cases = [
            (
                "a@b.c",
                "1fde28cc0671304ae409d31e887b420c380a1bc4817f0edd5f8fe25ccaf847f8",
                "1cd1a81a2fea4a8f5f20c45d882cc7cbeb72011b435e7b3ccf3d575c93e40672",
            ),
            (
                "hé\0😀",
                "72bc0c5e0e5dea50522807a9b4d3db08c5976b71e87bac7bb40b9b4efece290a",
                "42f80af35979ece12e561f4031cff859fb9aa67ecf2e04d7c21ae5136b78e815",
            ),
        ];
        for (value, v1, v2) in cases {
            assert_eq!(hashing(false, None).hash(value), v1, "{value}");
            assert_eq!(hashing(true, None).hash(value), v2, "{value}");
        }
        assert_eq!(hashing(false, Some(20)).hash("a@b.c"), cases[0].1[..20]);
    }

    #[test]
    fn mappers() {
        assert_eq!(
            Mapper::Mask(3).apply(Value::Null),
            Value::String("***".into())
        );
        assert_eq!(
            Mapper::Truncate(3).apply(Value::String("a😀bc".into())),
            Value::String("a😀".into())
        );
        assert_eq!(
            Mapper::Truncate(2).apply(Value::String("a😀bc".into())),
            Value::String("a".into()),
            "a surrogate pair is not split"
        );
        assert_eq!(
            Mapper::Truncate(2).apply(Value::Bytes(vec![1, 2, 3])),
            Value::Bytes(vec![1, 2])
        );
        assert_eq!(
            Mapper::Hash(hashing(true, None)).apply(Value::Null),
            Value::Null
        );
        assert_eq!(
            Mapper::Truncate(2).apply(Value::Int(12345)),
            Value::Int(12345)
        );
    }

    #[test]
    fn a_plan_keeps_and_maps_columns() {
        let planned = |index, mapper, null_default| PlannedColumn {
            index,
            mapper,
            null_default,
        };
        let plan = ValuePlan {
            names: ["a", "c"].map(String::from).into(),
            columns: vec![
                planned(0, None, None),
                planned(2, Some(Mapper::Mask(2)), None),
            ],
        };
        let row = plan.apply(vec![
            Value::Int(1),
            Value::Int(2),
            Value::String("x".into()),
        ]);
        assert_eq!(row.values, [Value::Int(1), Value::String("**".into())]);
        assert_eq!(&*row.columns, ["a", "c"]);
        // A NULL left after the mapper is written as the default; a mask
        // leaves no NULL to replace.
        let default = Some(Value::Int(5));
        let plan = ValuePlan {
            names: ["a", "b", "c"].map(String::from).into(),
            columns: vec![
                planned(0, None, default.clone()),
                planned(1, Some(Mapper::Hash(hashing(true, None))), default.clone()),
                planned(2, Some(Mapper::Mask(2)), default),
            ],
        };
        let row = plan.apply(vec![Value::Null, Value::Null, Value::Null]);
        assert_eq!(
            row.values,
            [Value::Int(5), Value::Int(5), Value::String("**".into())]
        );
        let row = plan.apply(vec![
            Value::Int(1),
            Value::String("x".into()),
            Value::Int(2),
        ]);
        assert_eq!(row.values[0], Value::Int(1), "a value is never replaced");
    }
}
