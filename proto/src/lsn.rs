//! PostgreSQL's write-ahead log positions (`pg_lsn`), written `16/B374D848`.

use std::fmt;
use std::str::FromStr;

/// A position in PostgreSQL's write-ahead log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// A text that is not an LSN (`<hex>/<hex>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a PostgreSQL LSN (two hexadecimal numbers separated by '/', as 16/B374D848)")]
pub struct BadLsn(String);

impl FromStr for Lsn {
    type Err = BadLsn;

    fn from_str(text: &str) -> Result<Self, BadLsn> {
        let bad = || BadLsn(text.to_owned());
        let (high, low) = text.split_once('/').ok_or_else(bad)?;
        let part = |hex: &str| {
            (!hex.is_empty() && hex.len() <= 8)
                .then(|| u32::from_str_radix(hex, 16).ok())
                .flatten()
                .ok_or_else(bad)
        };
        Ok(Lsn((u64::from(part(high)?) << 32) | u64::from(part(low)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_read_and_print_as_postgresql_does() {
        for (text, value) in [
            ("0/0", 0),
            ("0/156EDF0", 0x156_EDF0),
            ("16/B374D848", 0x16_B374_D848),
            ("FFFFFFFF/FFFFFFFF", u64::MAX),
        ] {
            let lsn: Lsn = text.parse().unwrap();
            assert_eq!(lsn, Lsn(value));
            assert_eq!(lsn.to_string(), text);
        }
        for bad in ["", "16", "/1", "1/", "g/1", "1/2/3", "123456789/0"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
        assert!(Lsn(1) < Lsn(0x1_0000_0000));
    }
}
