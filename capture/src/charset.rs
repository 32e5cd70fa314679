//! Text columns' character sets: which one a column has, and its bytes as a
//! string, exactly or not at all.
//!
//! A binlog row carries text in the column's own character set, named by a
//! collation id in the TABLE_MAP; the ids are mapped to character set names
//! with the server's own `information_schema.COLLATIONS` ([`Collations`]), not
//! a hand-written list. The Unicode encodings are decoded here; every other
//! set through a table generated from the server ([`crate::charset_map`]).
//! Decoding never substitutes a replacement character:
//! bytes that are not valid in the character set, or a character set not
//! decoded yet, are an error that names the column (and, from the caller, the
//! table and binlog position), so capture stops rather than publish a value
//! that differs from the database's. Snapshots need none of this: the server
//! converts their text to the connection's utf8mb4.

use std::collections::HashMap;
use std::sync::Arc;

use crate::charset_map::CharsetMap;

/// Text bytes that cannot be read exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// Bytes that are not text in the character set.
    #[error("bytes {bytes} are not valid {charset}")]
    Invalid {
        /// The bytes in hexadecimal (the first 32).
        bytes: String,
        /// The character set's name.
        charset: String,
    },
    /// A character set that is not decoded yet.
    #[error(
        "character set {0} is not decoded yet (docs/types.md lists those that are); \
         capture stops rather than publish text it cannot read exactly"
    )]
    Unsupported(Arc<str>),
}

impl TextError {
    /// `bytes` that are not valid in `charset`.
    pub fn invalid(bytes: &[u8], charset: &str) -> Self {
        TextError::Invalid {
            bytes: hex(bytes),
            charset: charset.to_owned(),
        }
    }
}

/// A character set Tributary can read column bytes in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Charset {
    /// utf8mb3 / utf8mb4.
    Utf8,
    /// ascii: 7-bit only.
    Ascii,
    /// ucs2 and utf16: big-endian UTF-16.
    Utf16Be,
    /// utf16le.
    Utf16Le,
    /// utf32: big-endian.
    Utf32Be,
    /// A character set read through the server's own table.
    Mapped(&'static CharsetMap),
    /// A character set not decoded yet (named, for the error).
    Unsupported(Arc<str>),
}

impl Charset {
    /// The character set of a `CHARACTER_SET_NAME`; `None` for `binary` (bytes).
    pub fn from_name(name: &str) -> Option<Charset> {
        match name {
            "binary" => None,
            "utf8" | "utf8mb3" | "utf8mb4" => Some(Charset::Utf8),
            "ascii" => Some(Charset::Ascii),
            "ucs2" | "utf16" => Some(Charset::Utf16Be),
            "utf16le" => Some(Charset::Utf16Le),
            "utf32" => Some(Charset::Utf32Be),
            other => Some(match CharsetMap::of(other) {
                Some(map) => Charset::Mapped(map),
                None => Charset::Unsupported(other.into()),
            }),
        }
    }

    /// The text `bytes` hold in this character set.
    pub fn decode(&self, bytes: &[u8]) -> Result<String, TextError> {
        if bytes.is_empty() {
            return Ok(String::new());
        }
        let invalid = || TextError::invalid(bytes, self.name());
        match self {
            Charset::Utf8 => std::str::from_utf8(bytes)
                .map(str::to_owned)
                .map_err(|_| invalid()),
            Charset::Ascii if bytes.is_ascii() => {
                Ok(std::str::from_utf8(bytes).expect("ASCII").to_owned())
            }
            Charset::Ascii => Err(invalid()),
            Charset::Utf16Be | Charset::Utf16Le => {
                let units = bytes.chunks_exact(2);
                if !units.remainder().is_empty() {
                    return Err(invalid());
                }
                let units = units.map(|pair| match self {
                    Charset::Utf16Be => u16::from_be_bytes([pair[0], pair[1]]),
                    _ => u16::from_le_bytes([pair[0], pair[1]]),
                });
                char::decode_utf16(units)
                    .collect::<Result<String, _>>()
                    .map_err(|_| invalid())
            }
            Charset::Utf32Be => {
                let units = bytes.chunks_exact(4);
                if !units.remainder().is_empty() {
                    return Err(invalid());
                }
                units
                    .map(|quad| char::from_u32(u32::from_be_bytes(quad.try_into().expect("4"))))
                    .collect::<Option<String>>()
                    .ok_or_else(invalid)
            }
            Charset::Mapped(map) => map.decode(bytes).ok_or_else(invalid),
            Charset::Unsupported(name) => Err(TextError::Unsupported(name.clone())),
        }
    }

    fn name(&self) -> &str {
        match self {
            Charset::Utf8 => "UTF-8",
            Charset::Ascii => "ASCII",
            Charset::Utf16Be => "UTF-16 (big-endian)",
            Charset::Utf16Le => "UTF-16LE",
            Charset::Utf32Be => "UTF-32",
            Charset::Mapped(map) => map.name,
            Charset::Unsupported(name) => name,
        }
    }
}

/// Collation ids → character set names, as the server lists them.
#[derive(Debug, Clone, Default)]
pub struct Collations(Arc<HashMap<u16, String>>);

impl Collations {
    /// The server's `(ID, CHARACTER_SET_NAME)` pairs.
    pub fn new(pairs: impl IntoIterator<Item = (u16, String)>) -> Self {
        Collations(Arc::new(pairs.into_iter().collect()))
    }

    /// The character set of a collation id (`None`: binary); an id the server
    /// did not list is an unsupported character set named by its id.
    pub fn charset(&self, id: u16) -> Option<Charset> {
        match self.0.get(&id) {
            Some(name) => Charset::from_name(name),
            None => Some(Charset::Unsupported(format!("of collation id {id}").into())),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const SHOWN: usize = 32;
    let mut out: String = bytes
        .iter()
        .take(SHOWN)
        .map(|b| format!("{b:02X}"))
        .collect();
    if bytes.len() > SHOWN {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(name: &str, bytes: &[u8]) -> Result<String, String> {
        Charset::from_name(name)
            .unwrap()
            .decode(bytes)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_character_of_latin1_is_windows_1252_or_a_c1_control() {
        let all: Vec<u8> = (0..=255).collect();
        let text: Vec<char> = decode("latin1", &all).unwrap().chars().collect();
        assert_eq!(text.len(), 256);
        assert_eq!(text[0x80], '€');
        assert_eq!(text[0x81], '\u{81}');
        assert_eq!(text[0x9f], 'Ÿ');
        assert_eq!(text[0xe9], 'é');
    }

    #[test]
    fn unicode_encodings_are_exact() {
        assert_eq!(
            decode("utf16", &[0x00, 0x41, 0xd8, 0x3d, 0xde, 0x00]).unwrap(),
            "A😀"
        );
        assert_eq!(decode("ucs2", &[0x04, 0x16]).unwrap(), "Ж");
        assert_eq!(
            decode("utf16le", &[0x41, 0x00, 0x3d, 0xd8, 0x00, 0xde]).unwrap(),
            "A😀"
        );
        assert_eq!(decode("utf32", &[0, 1, 0xf6, 0x00]).unwrap(), "😀");
        assert!(
            decode("utf16", &[0xd8, 0x3d]).unwrap_err().contains("D83D"),
            "lone surrogate"
        );
        assert!(decode("utf32", &[0, 0x11, 0, 0]).is_err(), "beyond Unicode");
        assert!(decode("utf16", &[0x00]).is_err(), "odd length");
    }

    #[test]
    fn invalid_bytes_are_an_error_never_a_replacement_character() {
        for (name, bytes) in [
            ("utf8mb4", &b"\xc3\x28"[..]),
            ("ascii", b"caf\xe9"),
            ("sjis", b"\x81"),
            ("hebrew", b"\xff"),
            ("euckr", b"\xc7"),
        ] {
            let err = decode(name, bytes).unwrap_err();
            assert!(err.contains("are not valid"), "{name}: {err}");
        }
        assert_eq!(
            decode("cp1251", b"\xcf\xf0\xe8\xe2\xe5\xf2").unwrap(),
            "Привет"
        );
        assert_eq!(decode("sjis", b"\x93\xfa\x96\x7b").unwrap(), "日本");
        assert_eq!(decode("gbk", b"\xd6\xd0\xce\xc4").unwrap(), "中文");
    }

    #[test]
    fn collation_ids_come_from_the_server_and_unknown_sets_are_named() {
        let collations = Collations::new([
            (8, "latin1".to_owned()),
            (63, "binary".to_owned()),
            (3, "gb18030".to_owned()),
        ]);
        assert_eq!(collations.charset(8), Charset::from_name("latin1"));
        assert_eq!(collations.charset(63), None);
        let gb18030 = collations.charset(3).unwrap().decode(b"x").unwrap_err();
        assert_eq!(gb18030, TextError::Unsupported("gb18030".into()));
        assert!(
            gb18030
                .to_string()
                .contains("character set gb18030 is not decoded yet"),
            "{gb18030}"
        );
        let unknown = collations.charset(999).unwrap().decode(b"x").unwrap_err();
        assert!(
            unknown.to_string().contains("collation id 999"),
            "{unknown}"
        );
    }
}
