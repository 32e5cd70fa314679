//! Binary row values of the column types most tables are made of (integers,
//! FLOAT/DOUBLE, CHAR/VARCHAR text, DECIMAL, DATE, DATETIME2, TIMESTAMP2) read
//! straight into [`Value`]s. mysql_common's parser builds a `BinlogValue` first,
//! formats DECIMAL digit group by digit group and TIMESTAMP2 as text that is
//! parsed back; here each value is one pass over its bytes. Every other type, and
//! any column whose metadata is not the usual shape, goes through mysql_common
//! and [`decode_value`](crate::row_decoder::decode_value); the unit tests check
//! both paths agree on random values.

use mysql_async::consts::ColumnType;
use mysql_common::io::ParseBuf;
use tributary_proto::Value;

use crate::row_decoder::{Calendar, ValueError, float_value, text_value};
use crate::schema::{Charset, ColumnKind};

/// Decodes one non-NULL value of a column of `column_type` with TABLE_MAP
/// metadata `meta`; `None` (nothing consumed) when the slow path must do it.
pub(crate) fn decode(
    column_type: ColumnType,
    meta: &[u8],
    kind: &ColumnKind,
    buf: &mut ParseBuf<'_>,
) -> Option<Result<Value, ValueError>> {
    use ColumnType::*;
    let value = match (column_type, kind) {
        (MYSQL_TYPE_TINY, ColumnKind::Int { unsigned, bytes: 1 }) => int(buf, 1, *unsigned),
        (MYSQL_TYPE_SHORT, ColumnKind::Int { unsigned, bytes: 2 }) => int(buf, 2, *unsigned),
        (MYSQL_TYPE_INT24, ColumnKind::Int { unsigned, bytes: 3 }) => int(buf, 3, *unsigned),
        (MYSQL_TYPE_LONG, ColumnKind::Int { unsigned, bytes: 4 }) => int(buf, 4, *unsigned),
        (MYSQL_TYPE_LONGLONG, ColumnKind::Int { unsigned, bytes: 8 }) => int(buf, 8, *unsigned),
        (MYSQL_TYPE_DOUBLE, ColumnKind::Double | ColumnKind::Float) => {
            be_or_le(buf, 8, false).map(|bits| Value::Float(f64::from_bits(bits)))
        }
        (MYSQL_TYPE_FLOAT, ColumnKind::Float) => {
            be_or_le(buf, 4, false).map(|bits| float_value(f32::from_bits(bits as u32)))
        }
        (MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING, ColumnKind::Text(charset)) => {
            let max_len = u16::from_le_bytes([*meta.first()?, *meta.get(1)?]);
            return Some(text_of(buf, max_len >= 256, charset));
        }
        (MYSQL_TYPE_STRING, ColumnKind::Text(charset)) => {
            let (&byte0, &byte1) = (meta.first()?, meta.get(1)?);
            if byte0 == 0 {
                return None;
            }
            let max_len = if byte0 & 0x30 != 0x30 {
                usize::from(byte1) | (usize::from((byte0 & 0x30) ^ 0x30) << 4)
            } else {
                usize::from(byte1)
            };
            return Some(text_of(buf, max_len >= 256, charset));
        }
        (MYSQL_TYPE_NEWDECIMAL, ColumnKind::Decimal) => {
            let (&precision, &scale) = (meta.first()?, meta.get(1)?);
            if scale > precision {
                return None;
            }
            decimal(buf, usize::from(precision), usize::from(scale)).map(Value::String)
        }
        (MYSQL_TYPE_NEWDATE, ColumnKind::Date) => be_or_le(buf, 3, false).map(|v| {
            Calendar {
                year: (v >> 9) as u16,
                month: (v >> 5 & 15) as u8,
                day: (v & 31) as u8,
                ..Calendar::default()
            }
            .date_value()
        }),
        (MYSQL_TYPE_DATETIME2, ColumnKind::DateTime { fsp }) => {
            datetime2(buf, *meta.first()?).map(|c| c.datetime_value(*fsp))
        }
        (MYSQL_TYPE_TIMESTAMP2, ColumnKind::Timestamp { fsp }) => {
            let fraction = fraction_bytes(*meta.first()?);
            be_or_le(buf, 4, true).and_then(|secs| {
                let micros = fraction_micros(buf, fraction)?;
                Some(crate::row_decoder::timestamp_value(
                    secs as i64,
                    micros,
                    *fsp,
                ))
            })
        }
        _ => return None,
    };
    Some(truncated_if_none(value))
}

/// The value, or [`ValueError::Truncated`]; made only when it is needed
/// (`ok_or` makes the error for every value and drops it: ~20 instructions each).
fn truncated_if_none<T>(value: Option<T>) -> Result<T, ValueError> {
    match value {
        Some(value) => Ok(value),
        None => Err(ValueError::Truncated),
    }
}

/// A length-prefixed text value in `charset`.
fn text_of(buf: &mut ParseBuf<'_>, long: bool, charset: &Charset) -> Result<Value, ValueError> {
    let bytes = truncated_if_none(text(buf, long))?;
    text_value(charset, bytes)
}

/// An integer of `width` bytes, little-endian, at the column's signedness.
fn int(buf: &mut ParseBuf<'_>, width: usize, unsigned: bool) -> Option<Value> {
    let raw = be_or_le(buf, width, false)?;
    let bits = width as u32 * 8;
    Some(if unsigned {
        i64::try_from(raw).map_or(Value::UInt(raw), Value::Int)
    } else {
        let shift = 64 - bits;
        Value::Int(((raw << shift) as i64) >> shift)
    })
}

/// `width` bytes as an unsigned integer, big- or little-endian.
fn be_or_le(buf: &mut ParseBuf<'_>, width: usize, big_endian: bool) -> Option<u64> {
    let bytes = buf.checked_eat(width)?;
    let fold = |acc: u64, byte: &u8| acc << 8 | u64::from(*byte);
    Some(if big_endian {
        bytes.iter().fold(0, fold)
    } else {
        bytes.iter().rev().fold(0, fold)
    })
}

/// A length-prefixed string (one length byte, two when the column may exceed 255 bytes).
fn text<'a>(buf: &mut ParseBuf<'a>, wide: bool) -> Option<&'a [u8]> {
    let len = be_or_le(buf, if wide { 2 } else { 1 }, false)?;
    buf.checked_eat(len as usize)
}

/// Bytes of the fractional seconds of a DATETIME2/TIMESTAMP2/TIME2 with `fsp` digits.
fn fraction_bytes(fsp: u8) -> usize {
    usize::from(fsp).div_ceil(2)
}

/// Fractional seconds (big-endian, signed, in units of 10^-fsp rounded to pairs of digits) as microseconds.
fn fraction_micros(buf: &mut ParseBuf<'_>, bytes: usize) -> Option<u32> {
    let raw = be_or_le(buf, bytes, true)?;
    Some(match bytes {
        0 => 0,
        1 => raw as u8 as i8 as i32 * 10_000,
        2 => raw as u16 as i16 as i32 * 100,
        _ => ((raw as u32) << 8) as i32 >> 8,
    } as u32)
}

/// DATETIME2: 40 bits (sign, year*13+month, day, hour, minute, second), then the fraction.
fn datetime2(buf: &mut ParseBuf<'_>, fsp: u8) -> Option<Calendar> {
    const OFFSET: i64 = 0x80_0000_0000;
    let int_part = be_or_le(buf, 5, true)? as i64 - OFFSET;
    let fraction = fraction_micros(buf, fraction_bytes(fsp))?;
    let packed = ((int_part << 24) + i64::from(fraction as i32)).abs();
    let micros = packed % (1 << 24);
    let ymdhms = packed >> 24;
    let ymd = ymdhms >> 17;
    let ym = ymd >> 5;
    let hms = ymdhms % (1 << 17);
    Some(Calendar {
        year: (ym / 13) as u16,
        month: (ym % 13) as u8,
        day: (ymd % (1 << 5)) as u8,
        hour: (hms >> 12) as u8,
        minute: ((hms >> 6) % (1 << 6)) as u8,
        second: (hms % (1 << 6)) as u8,
        micros: micros as u32,
    })
}

/// Bytes of a group of `digits` (< 9) decimal digits.
const DIGIT_BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// DECIMAL(precision, scale) in MySQL's binary form: groups of nine digits in four
/// big-endian bytes (shorter leading and trailing groups), sign in the top bit,
/// negative numbers with every bit inverted. Written as mysql_common writes it.
fn decimal(buf: &mut ParseBuf<'_>, precision: usize, scale: usize) -> Option<String> {
    let integer_digits = precision - scale;
    let (lead, full_integer) = (integer_digits % 9, integer_digits / 9);
    let (tail, full_fraction) = (scale % 9, scale / 9);
    let size = DIGIT_BYTES[lead] + full_integer * 4 + full_fraction * 4 + DIGIT_BYTES[tail];
    let bytes = buf.checked_eat(size)?;
    let negative = bytes.first().is_some_and(|b| b & 0x80 == 0);
    let mask: i32 = if negative { -1 } else { 0 };
    let mut at = 0;
    let mut group = |len: usize| {
        let mut x = 0i32;
        for (i, byte) in bytes[at..at + len].iter().enumerate() {
            let byte = if at + i == 0 { byte ^ 0x80 } else { *byte };
            x = x << 8 | i32::from(byte);
        }
        // Sign-extend a short group, as the reference reads it.
        let shift = 32 - 8 * len as u32;
        at += len;
        ((x << shift) >> shift) ^ mask
    };
    let mut out = String::with_capacity(precision + 3);
    if negative {
        out.push('-');
    }
    let mut printed = false;
    let integer_groups = (lead > 0)
        .then_some(DIGIT_BYTES[lead])
        .into_iter()
        .chain(std::iter::repeat_n(4, full_integer));
    for len in integer_groups {
        let x = group(len);
        if printed {
            push_padded(&mut out, x, 9);
        } else if x != 0 {
            push_padded(&mut out, x, 0);
            printed = true;
        }
    }
    if !printed {
        if scale == 0 {
            return Some("0".to_owned()); // no sign on a zero without decimals
        }
        out.push('0');
    }
    if scale > 0 {
        out.push('.');
        for _ in 0..full_fraction {
            let x = group(4);
            push_padded(&mut out, x, 9);
        }
        if tail > 0 {
            let x = group(DIGIT_BYTES[tail]);
            push_padded(&mut out, x, tail);
        }
    }
    Some(out)
}

/// Appends `x` in decimal, zero-padded to `width` digits.
fn push_padded(out: &mut String, x: i32, width: usize) {
    let mut digits = [0u8; 12];
    let mut n = x.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    while digits.len() - i < width {
        i -= 1;
        digits[i] = b'0';
    }
    // ASCII digits, pushed as they are: no UTF-8 check.
    out.extend(digits[i..].iter().map(|&digit| char::from(digit)));
}

#[cfg(test)]
mod tests {
    use mysql_async::binlog::value::BinlogValue;

    use super::*;
    use crate::row_decoder::decode_value;

    /// xorshift64*: reproducible random bytes.
    struct Random(u64);

    impl Random {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Decodes `bytes` with both paths and checks they agree and consume the same bytes.
    fn agree(column_type: ColumnType, meta: &[u8], kind: &ColumnKind, bytes: &[u8]) {
        let unsigned = matches!(kind, ColumnKind::Int { unsigned: true, .. });
        let mut slow_buf = ParseBuf(bytes);
        let raw: BinlogValue<'_> = slow_buf
            .parse((column_type, meta, unsigned, false))
            .unwrap_or_else(|e| panic!("{column_type:?} {meta:?} {bytes:?}: {e}"));
        let slow = decode_value(kind, Some(raw));
        let mut fast_buf = ParseBuf(bytes);
        let fast = decode(column_type, meta, kind, &mut fast_buf)
            .unwrap_or_else(|| panic!("{column_type:?} {kind:?} has a fast path"));
        assert_eq!(fast, slow, "{column_type:?} {meta:?} {kind:?} {bytes:02x?}");
        assert_eq!(fast_buf.len(), slow_buf.len(), "bytes consumed");
    }

    #[test]
    fn integers_and_floats_agree_with_mysql_common() {
        let mut random = Random(0x1234_5678_9abc_def1);
        let types = [
            (ColumnType::MYSQL_TYPE_TINY, 1u8),
            (ColumnType::MYSQL_TYPE_SHORT, 2),
            (ColumnType::MYSQL_TYPE_INT24, 3),
            (ColumnType::MYSQL_TYPE_LONG, 4),
            (ColumnType::MYSQL_TYPE_LONGLONG, 8),
        ];
        for _ in 0..2000 {
            for (column_type, width) in types {
                let bytes = random.next().to_le_bytes();
                for unsigned in [false, true] {
                    let kind = ColumnKind::Int {
                        unsigned,
                        bytes: width,
                    };
                    agree(column_type, &[], &kind, &bytes[..usize::from(width)]);
                }
            }
            let double = f64::from_bits(random.next());
            if double.is_finite() {
                agree(
                    ColumnType::MYSQL_TYPE_DOUBLE,
                    &[8],
                    &ColumnKind::Double,
                    &double.to_le_bytes(),
                );
            }
            let float = f32::from_bits(random.next() as u32);
            if float.is_finite() {
                agree(
                    ColumnType::MYSQL_TYPE_FLOAT,
                    &[4],
                    &ColumnKind::Float,
                    &float.to_le_bytes(),
                );
            }
        }
    }

    #[test]
    fn decimals_agree_with_mysql_common() {
        let mut random = Random(0x0dec_1a1a_5eed_0001);
        for _ in 0..20_000 {
            let precision = 1 + random.below(65) as usize;
            let scale = random.below(precision.min(30) as u64 + 1) as usize;
            // Digit groups in the binary form, from random digits (mostly short numbers).
            let integer_digits = precision - scale;
            let used = random.below(integer_digits as u64 + 1) as usize;
            let mut digits = String::new();
            for i in 0..precision {
                let leading_zero = i < integer_digits - used;
                digits.push(if leading_zero {
                    '0'
                } else {
                    char::from(b'0' + random.below(10) as u8)
                });
            }
            let negative = random.below(2) == 1;
            let mut bytes = Vec::new();
            let mut push_group = |text: &str| {
                let value: u32 = text.parse().unwrap_or(0);
                let len = DIGIT_BYTES[text.len().min(9)];
                bytes.extend_from_slice(&value.to_be_bytes()[4 - len..]);
            };
            let (int_part, frac_part) = digits.split_at(integer_digits);
            let lead = integer_digits % 9;
            if lead > 0 {
                push_group(&int_part[..lead]);
            }
            for chunk in int_part.as_bytes()[lead..].chunks(9) {
                push_group(std::str::from_utf8(chunk).unwrap());
            }
            for chunk in frac_part.as_bytes().chunks(9) {
                push_group(std::str::from_utf8(chunk).unwrap());
            }
            bytes[0] ^= 0x80;
            if negative {
                bytes.iter_mut().for_each(|b| *b = !*b);
            }
            let meta = [precision as u8, scale as u8];
            agree(
                ColumnType::MYSQL_TYPE_NEWDECIMAL,
                &meta,
                &ColumnKind::Decimal,
                &bytes,
            );
        }
    }

    #[test]
    fn dates_and_times_agree_with_mysql_common() {
        let mut random = Random(0x0da7_e5ee_d000_0002);
        for _ in 0..5000 {
            let (year, month, day) = (random.below(10_000), random.below(13), random.below(32));
            let date = (year << 9 | month << 5 | day) as u32;
            agree(
                ColumnType::MYSQL_TYPE_NEWDATE,
                &[],
                &ColumnKind::Date,
                &date.to_le_bytes()[..3],
            );
            let fsp = random.below(7) as u8;
            let (hour, minute, second) = (random.below(24), random.below(60), random.below(60));
            let ymdhms = ((year * 13 + month) << 5 | day) << 17 | hour << 12 | minute << 6 | second;
            let mut bytes = (ymdhms + 0x80_0000_0000).to_be_bytes()[3..].to_vec();
            let digits = u32::from(fsp.div_ceil(2)) * 2;
            let fraction = random.below(10u64.pow(digits)) as u32;
            bytes.extend_from_slice(&fraction.to_be_bytes()[4 - usize::from(fsp.div_ceil(2))..]);
            agree(
                ColumnType::MYSQL_TYPE_DATETIME2,
                &[fsp],
                &ColumnKind::DateTime { fsp },
                &bytes,
            );
            let secs = random.next() as u32;
            let mut bytes = secs.to_be_bytes().to_vec();
            bytes.extend_from_slice(&fraction.to_be_bytes()[4 - usize::from(fsp.div_ceil(2))..]);
            agree(
                ColumnType::MYSQL_TYPE_TIMESTAMP2,
                &[fsp],
                &ColumnKind::Timestamp { fsp },
                &bytes,
            );
        }
    }

    #[test]
    fn strings_agree_with_mysql_common() {
        let mut random = Random(0x5791_0000_0000_0003);
        for _ in 0..2000 {
            let len = random.below(300) as usize;
            let text: Vec<u8> = (0..len).map(|_| random.below(256) as u8).collect();
            // Random bytes: mostly not UTF-8, so both paths must refuse them alike.
            for charset in [
                Charset::Utf8,
                Charset::from_name("latin1").unwrap(),
                Charset::from_name("sjis").unwrap(),
            ] {
                let kind = ColumnKind::Text(charset);
                for max_len in [len.max(10), 255, 256, 4000] {
                    if max_len < len {
                        continue;
                    }
                    let mut bytes = if max_len < 256 {
                        vec![len as u8]
                    } else {
                        (len as u16).to_le_bytes().to_vec()
                    };
                    bytes.extend_from_slice(&text);
                    let meta = (max_len as u16).to_le_bytes();
                    agree(ColumnType::MYSQL_TYPE_VARCHAR, &meta, &kind, &bytes);
                    // CHAR(n): real type and length folded into two bytes.
                    let char_meta = [
                        0xfe ^ (((max_len >> 4) & 0x30) as u8),
                        (max_len & 0xff) as u8,
                    ];
                    agree(ColumnType::MYSQL_TYPE_STRING, &char_meta, &kind, &bytes);
                }
            }
        }
    }

    #[test]
    fn other_types_take_the_slow_path_and_consume_nothing() {
        let bytes = [1u8, 2, 3];
        let mut buf = ParseBuf(&bytes);
        let json = decode(
            ColumnType::MYSQL_TYPE_JSON,
            &[4],
            &ColumnKind::Json,
            &mut buf,
        );
        assert!(json.is_none());
        let narrowed = ColumnKind::Int {
            unsigned: false,
            bytes: 2,
        };
        assert!(decode(ColumnType::MYSQL_TYPE_LONG, &[], &narrowed, &mut buf).is_none());
        assert_eq!(buf.len(), 3);
        let mut short = ParseBuf(&bytes[..2]);
        let truncated = decode(
            ColumnType::MYSQL_TYPE_LONG,
            &[],
            &ColumnKind::Int {
                unsigned: false,
                bytes: 4,
            },
            &mut short,
        );
        assert_eq!(truncated, Some(Err(ValueError::Truncated)));
    }
}
