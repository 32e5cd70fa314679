//! The legacy character sets (every one but the Unicode encodings and ascii)
//! decoded through mapping tables generated from the server itself:
//! `capture/charsets/<name>.map` lists each valid byte sequence (one, two, or
//! for ujis/eucjpms three bytes) and the character the server converts it to
//! (`CONVERT(CONVERT(b USING <name>) USING utf8mb4)`). No general-purpose codec
//! library has MySQL's tables (encoding_rs, checked against the server, maps
//! hundreds of big5, sjis, ujis, greek, hebrew, cp866 and koi8u sequences
//! differently), and `tests/capture_charsets.rs` regenerates every table from
//! the server and fails if one differs from the committed data
//! (`TRIBUTARY_WRITE_CHARSET_MAPS=1` writes them instead).
//!
//! Format: one `HEXBYTES HEXCODEPOINT` line per sequence, e.g. `8140 3000`.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Every mapped character set and its table's text.
pub const MAPS: &[(&str, &str)] = &[
    ("armscii8", include_str!("../charsets/armscii8.map")),
    ("big5", include_str!("../charsets/big5.map")),
    ("cp1250", include_str!("../charsets/cp1250.map")),
    ("cp1251", include_str!("../charsets/cp1251.map")),
    ("cp1256", include_str!("../charsets/cp1256.map")),
    ("cp1257", include_str!("../charsets/cp1257.map")),
    ("cp850", include_str!("../charsets/cp850.map")),
    ("cp852", include_str!("../charsets/cp852.map")),
    ("cp866", include_str!("../charsets/cp866.map")),
    ("cp932", include_str!("../charsets/cp932.map")),
    ("dec8", include_str!("../charsets/dec8.map")),
    ("eucjpms", include_str!("../charsets/eucjpms.map")),
    ("euckr", include_str!("../charsets/euckr.map")),
    ("gb2312", include_str!("../charsets/gb2312.map")),
    ("gbk", include_str!("../charsets/gbk.map")),
    ("geostd8", include_str!("../charsets/geostd8.map")),
    ("greek", include_str!("../charsets/greek.map")),
    ("hebrew", include_str!("../charsets/hebrew.map")),
    ("hp8", include_str!("../charsets/hp8.map")),
    ("keybcs2", include_str!("../charsets/keybcs2.map")),
    ("koi8r", include_str!("../charsets/koi8r.map")),
    ("koi8u", include_str!("../charsets/koi8u.map")),
    ("latin1", include_str!("../charsets/latin1.map")),
    ("latin2", include_str!("../charsets/latin2.map")),
    ("latin5", include_str!("../charsets/latin5.map")),
    ("latin7", include_str!("../charsets/latin7.map")),
    ("macce", include_str!("../charsets/macce.map")),
    ("macroman", include_str!("../charsets/macroman.map")),
    ("sjis", include_str!("../charsets/sjis.map")),
    ("swe7", include_str!("../charsets/swe7.map")),
    ("tis620", include_str!("../charsets/tis620.map")),
    ("ujis", include_str!("../charsets/ujis.map")),
];

/// A character set read through its table: single bytes by index, longer
/// sequences (packed big-endian into a `u32`, with their length) by hash.
#[derive(Debug)]
pub struct CharsetMap {
    /// The character set's name.
    pub name: &'static str,
    single: [Option<char>; 256],
    sequences: HashMap<(u8, u32), char>,
    /// Every ASCII byte stands for itself (not in swe7): runs of them are
    /// copied whole.
    ascii_as_is: bool,
}

impl CharsetMap {
    /// The table of a mapped character set, parsed once.
    pub fn of(name: &str) -> Option<&'static CharsetMap> {
        static PARSED: OnceLock<HashMap<&'static str, OnceLock<CharsetMap>>> = OnceLock::new();
        let all = PARSED.get_or_init(|| MAPS.iter().map(|(n, _)| (*n, OnceLock::new())).collect());
        let (&name, slot) = all.get_key_value(name)?;
        Some(slot.get_or_init(|| {
            let text = MAPS.iter().find(|(n, _)| *n == name).expect("listed").1;
            CharsetMap::parse(name, text)
        }))
    }

    fn parse(name: &'static str, text: &str) -> Self {
        let mut map = CharsetMap {
            name,
            single: [None; 256],
            sequences: HashMap::new(),
            ascii_as_is: false,
        };
        for line in text.lines() {
            let parsed = line.split_once(' ').and_then(|(bytes, code)| {
                let packed = u32::from_str_radix(bytes, 16).ok()?;
                let c = char::from_u32(u32::from_str_radix(code, 16).ok()?)?;
                Some((bytes.len() / 2, packed, c))
            });
            match parsed {
                Some((1, byte, c)) => map.single[byte as usize] = Some(c),
                Some((len, packed, c)) => {
                    map.sequences.insert((len as u8, packed), c);
                }
                None => {}
            }
        }
        map.ascii_as_is = (0..0x80u8).all(|b| map.single[usize::from(b)] == Some(char::from(b)));
        map
    }

    /// Sequences in the table.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.single.iter().flatten().count() + self.sequences.len()
    }

    /// The text of `bytes`, or `None` at the first sequence the server would not read.
    pub fn decode(&self, bytes: &[u8]) -> Option<String> {
        let mut out = String::with_capacity(bytes.len());
        let mut rest = bytes;
        'chars: while let Some(&first) = rest.first() {
            if first < 0x80 && self.ascii_as_is {
                let run = rest.iter().position(|&b| b >= 0x80).unwrap_or(rest.len());
                let (ascii, after) = rest.split_at(run);
                out.push_str(std::str::from_utf8(ascii).expect("ASCII is UTF-8"));
                rest = after;
                continue;
            }
            // Longest sequence first: a lead byte never stands alone where it leads one.
            let longest = if first < 0x80 || self.sequences.is_empty() {
                1
            } else {
                rest.len().min(3)
            };
            for len in (2..=longest).rev() {
                let packed = rest[..len]
                    .iter()
                    .fold(0u32, |acc, &b| acc << 8 | u32::from(b));
                if let Some(&c) = self.sequences.get(&(len as u8, packed)) {
                    out.push(c);
                    rest = &rest[len..];
                    continue 'chars;
                }
            }
            out.push(self.single[usize::from(first)]?);
            rest = &rest[1..];
        }
        Some(out)
    }
}

impl PartialEq for CharsetMap {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for CharsetMap {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_parses_whole_and_maps_ascii_letters_to_themselves() {
        for (name, text) in MAPS {
            let map = CharsetMap::of(name).unwrap();
            assert_eq!(map.len(), text.lines().count(), "{name}: a bad line");
            if *name != "swe7" {
                // swe7 puts Swedish letters on some ASCII punctuation, not on letters.
                assert_eq!(map.decode(b"Az09").as_deref(), Some("Az09"), "{name}");
            }
        }
        assert!(CharsetMap::of("utf8mb4").is_none());
    }

    #[test]
    fn ascii_runs_decode_as_byte_by_byte() {
        // Every table, bytes mixing ASCII runs with every other byte, decoded
        // whole and one byte pair at a time (the lookups alone).
        let mut bytes = Vec::new();
        for b in 0..=255u8 {
            bytes.extend_from_slice(b"ab c\x7f");
            bytes.push(b);
        }
        for (name, text) in MAPS {
            let map = CharsetMap::of(name).unwrap();
            let mut slow = CharsetMap::parse(name, text);
            slow.ascii_as_is = false;
            assert_eq!(map.decode(&bytes), slow.decode(&bytes), "{name}");
        }
        assert!(CharsetMap::of("latin1").unwrap().ascii_as_is);
        assert!(!CharsetMap::of("swe7").unwrap().ascii_as_is);
    }

    #[test]
    fn multi_byte_sequences_and_invalid_ones() {
        let sjis = CharsetMap::of("sjis").unwrap();
        assert_eq!(sjis.decode(b"\x93\xfa\x96\x7b").as_deref(), Some("日本"));
        assert_eq!(sjis.decode(b"\x81"), None, "a lead byte without its trail");
        let ujis = CharsetMap::of("ujis").unwrap();
        assert_eq!(ujis.decode(b"\xc6\xfc\xcb\xdc").as_deref(), Some("日本"));
    }
}
