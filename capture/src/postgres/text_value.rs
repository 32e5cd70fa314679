//! PostgreSQL values from their text form to [`Value`]s. `pgoutput` sends
//! every column as its type's output text, and the snapshot reads the same
//! text, so streamed and snapshot rows decode alike. Both sessions set what
//! the text depends on ([`SESSION_SETTINGS`]): ISO dates, UTC, hex `bytea`,
//! `postgres` intervals, C money, UTF-8.
//!
//! Values come out as the other decoders give them (Tributary's defaults:
//! exact decimal text, temporal values as integers); the `values` modes
//! ([`crate::value_modes`]) are applied after.

use std::fmt::Write as _;

use tributary_proto::{Geometry, Value};

use crate::postgres::pg_type::PgType;
use crate::row_decoder::days_from_civil;

/// Session settings the text forms below assume, for the replication
/// connection (as startup options) and the snapshot's connection alike.
pub const SESSION_SETTINGS: [(&str, &str); 8] = [
    ("client_encoding", "UTF8"),
    ("DateStyle", "ISO, YMD"),
    ("TimeZone", "UTC"),
    ("IntervalStyle", "postgres"),
    ("bytea_output", "hex"),
    ("lc_monetary", "C"),
    ("extra_float_digits", "1"),
    // Quoted literals (on-demand snapshot cursors) take backslashes as they are.
    ("standard_conforming_strings", "on"),
];

/// Debezium's values of `timestamp 'infinity'` and `'-infinity'` in
/// microseconds (PgJDBC's `PGStatement.DATE_POSITIVE_INFINITY` and
/// `DATE_NEGATIVE_INFINITY`); in milliseconds for `timestamp(0..3)`, these
/// divided by 1000.
const TIMESTAMP_INFINITY: i64 = 9_223_372_036_825_200_000;
const TIMESTAMP_NEGATIVE_INFINITY: i64 = -9_223_372_036_832_400_000;

/// Debezium's values of `date 'infinity'` and `'-infinity'` when streaming
/// (PostgreSQL's infinite day numbers, shifted to the Unix epoch in 32 bits).
const DATE_INFINITY: i64 = -2_147_472_692;
const DATE_NEGATIVE_INFINITY: i64 = -2_147_472_691;

/// Days Debezium counts in a month of an interval.
const DAYS_PER_MONTH: f64 = 30.4375;

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// A value whose text is not what its type's output function writes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{type_name} value {text:?}: {problem}")]
pub struct TextValueError {
    /// The column's type.
    pub type_name: &'static str,
    /// The text (cut to 64 characters).
    pub text: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

/// Decodes one non-null column value of type `ty` from its text.
pub fn decode(ty: &PgType, bytes: &[u8]) -> Result<Value, TextValueError> {
    let text = std::str::from_utf8(bytes).map_err(|_| TextValueError {
        type_name: type_name(ty),
        text: String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned(),
        problem: "not UTF-8 (the session's client_encoding is UTF8)",
    })?;
    decode_str(ty, text)
}

fn decode_str(ty: &PgType, text: &str) -> Result<Value, TextValueError> {
    let bad = |problem| TextValueError {
        type_name: type_name(ty),
        text: text.chars().take(64).collect(),
        problem,
    };
    let int = |text: &str| text.parse::<i64>().map_err(|_| bad("not an integer"));
    Ok(match ty {
        PgType::Bool => match text {
            "t" => Value::Bool(true),
            "f" => Value::Bool(false),
            _ => return Err(bad("not t or f")),
        },
        PgType::Int2 | PgType::Int4 | PgType::Int8 | PgType::Oid => Value::Int(int(text)?),
        PgType::Float4 | PgType::Float8 => {
            Value::Float(text.parse().map_err(|_| bad("not a number"))?)
        }
        PgType::Numeric(_) => Value::String(text.to_owned()),
        PgType::Money => Value::String(money(text).ok_or_else(|| bad("not C-locale money"))?),
        PgType::Text
        | PgType::OtherText
        | PgType::Json
        | PgType::Xml
        | PgType::Uuid
        | PgType::Enum(_) => Value::String(text.to_owned()),
        PgType::Bytea => {
            let hex = text
                .strip_prefix("\\x")
                .ok_or_else(|| bad("not hex output"))?;
            Value::Bytes(hex::decode(hex).map_err(|_| bad("not hex output"))?)
        }
        PgType::Date => match text {
            "infinity" => Value::Int(DATE_INFINITY),
            "-infinity" => Value::Int(DATE_NEGATIVE_INFINITY),
            _ => Value::Int(date(text).ok_or_else(|| bad("not an ISO date"))?),
        },
        PgType::Time(precision) => {
            let micros = time_of_day(text).ok_or_else(|| bad("not hh:mm:ss[.ffffff]"))?;
            Value::Int(if *precision <= 3 {
                micros / 1000
            } else {
                micros
            })
        }
        PgType::TimeTz => {
            Value::String(zoned_time(text).ok_or_else(|| bad("not a time with zone"))?)
        }
        PgType::Timestamp(precision) => {
            let micros = match text {
                "infinity" => TIMESTAMP_INFINITY,
                "-infinity" => TIMESTAMP_NEGATIVE_INFINITY,
                _ => timestamp_micros(text).ok_or_else(|| bad("not an ISO timestamp"))?,
            };
            Value::Int(if *precision <= 3 {
                micros.div_euclid(1000)
            } else {
                micros
            })
        }
        PgType::TimestampTz(precision) => match text {
            "infinity" | "-infinity" => Value::String(text.to_owned()),
            _ => Value::String(
                zoned_timestamp(text, *precision)
                    .ok_or_else(|| bad("not an ISO timestamp in UTC"))?,
            ),
        },
        PgType::Interval => {
            Value::Int(interval_micros(text).ok_or_else(|| bad("not a postgres-style interval"))?)
        }
        PgType::Bit(length) => {
            if !text.bytes().all(|b| b == b'0' || b == b'1') {
                return Err(bad("not a bit string"));
            }
            if *length == Some(1) {
                Value::Bool(text == "1")
            } else {
                Value::Bytes(bits(text))
            }
        }
        PgType::Hstore => Value::String(hstore_json(text).ok_or_else(|| bad("not hstore output"))?),
        PgType::Point => point(text).ok_or_else(|| bad("not (x,y)"))?,
        PgType::Array(element) => {
            let mut parser = ArrayParser { text, at: 0 };
            let items = parser.array(element).map_err(|e| match e {
                ArrayError::Syntax => bad("not array output"),
                ArrayError::Element(e) => e,
            })?;
            if parser.at != text.len() {
                return Err(bad("not array output"));
            }
            items
        }
    })
}

/// The type's name for errors.
fn type_name(ty: &PgType) -> &'static str {
    match ty {
        PgType::Bool => "boolean",
        PgType::Int2 => "smallint",
        PgType::Int4 => "integer",
        PgType::Int8 => "bigint",
        PgType::Oid => "oid",
        PgType::Float4 => "real",
        PgType::Float8 => "double precision",
        PgType::Numeric(_) => "numeric",
        PgType::Money => "money",
        PgType::Text | PgType::OtherText => "text",
        PgType::Bytea => "bytea",
        PgType::Json => "json",
        PgType::Xml => "xml",
        PgType::Uuid => "uuid",
        PgType::Date => "date",
        PgType::Time(_) => "time",
        PgType::TimeTz => "time with time zone",
        PgType::Timestamp(_) => "timestamp",
        PgType::TimestampTz(_) => "timestamp with time zone",
        PgType::Interval => "interval",
        PgType::Bit(_) => "bit",
        PgType::Enum(_) => "enum",
        PgType::Hstore => "hstore",
        PgType::Point => "point",
        PgType::Array(_) => "array",
    }
}

/// `-$1,234.56` (C locale) → `-1234.56`.
fn money(text: &str) -> Option<String> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let digits: String = rest
        .strip_prefix('$')?
        .chars()
        .filter(|c| *c != ',')
        .collect();
    let (int, frac) = digits.split_once('.')?;
    let valid = !int.is_empty()
        && frac.len() == 2
        && int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit());
    valid.then(|| format!("{}{digits}", if negative { "-" } else { "" }))
}

/// `2024-01-02` or `0044-03-15 BC` → days since 1970-01-01.
fn date(text: &str) -> Option<i64> {
    let (ymd, bc) = match text.strip_suffix(" BC") {
        Some(ymd) => (ymd, true),
        None => (text, false),
    };
    let mut parts = ymd.splitn(3, '-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: u32 = parts.next()?.parse().ok()?;
    let day: u32 = parts.next()?.parse().ok()?;
    // 1 BC is year 0 of the proleptic Gregorian calendar.
    let year = if bc { 1 - year } else { year };
    ((1..=12).contains(&month) && (1..=31).contains(&day))
        .then(|| days_from_civil(year, month, day))
}

/// `13:45:01.123` → microseconds since midnight (up to `24:00:00`).
fn time_of_day(text: &str) -> Option<i64> {
    let (hms, frac) = text.split_once('.').unwrap_or((text, ""));
    let mut parts = hms.splitn(3, ':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let s: i64 = parts.next()?.parse().ok()?;
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) || m > 59 || s > 60 {
        return None;
    }
    let micros = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().ok()? * 10_i64.pow(6 - frac.len() as u32)
    };
    let total = (h * 3600 + m * 60 + s) * MICROS_PER_SECOND + micros;
    (0..=MICROS_PER_DAY).contains(&total).then_some(total)
}

/// A UTC offset `+02`, `-05:30` or `+05:30:15` → seconds east of UTC.
fn offset_seconds(text: &str) -> Option<i64> {
    let sign = match text.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let mut seconds = 0;
    for (i, part) in text[1..].split(':').enumerate() {
        if i > 2 || part.len() != 2 {
            return None;
        }
        seconds += part.parse::<i64>().ok()? * [3600, 60, 1][i];
    }
    Some(sign * seconds)
}

/// Splits `13:45:01.5+02` at the offset's sign.
fn split_offset(text: &str) -> Option<(&str, i64)> {
    let at = text.rfind(['+', '-'])?;
    Some((&text[..at], offset_seconds(&text[at..])?))
}

/// `13:45:01.12+02` → `11:45:01.12Z`: the time in UTC, its fraction as
/// written (Debezium's `ZonedTime`).
fn zoned_time(text: &str) -> Option<String> {
    let (time, offset) = split_offset(text)?;
    let micros = time_of_day(time)?;
    let utc = (micros - offset * MICROS_PER_SECOND).rem_euclid(MICROS_PER_DAY);
    let mut out = hms(utc / MICROS_PER_SECOND);
    let frac = time.split_once('.').map_or("", |(_, f)| f);
    if !frac.is_empty() {
        write!(out, ".{frac}").ok()?;
    }
    out.push('Z');
    Some(out)
}

fn hms(seconds: i64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// `2024-01-02 03:04:05.123456[ BC]` → microseconds since the epoch.
fn timestamp_micros(text: &str) -> Option<i64> {
    let (body, bc) = match text.strip_suffix(" BC") {
        Some(body) => (body, true),
        None => (text, false),
    };
    let (date_text, time_text) = body.split_once(' ')?;
    let days = date(&if bc {
        format!("{date_text} BC")
    } else {
        date_text.to_owned()
    })?;
    days.checked_mul(MICROS_PER_DAY)?
        .checked_add(time_of_day(time_text)?)
}

/// `2024-01-02 03:04:05.12+00` (TimeZone UTC) → `2024-01-02T03:04:05.120000Z`:
/// as many fraction digits as the column's precision (Debezium's
/// `ZonedTimestamp`).
fn zoned_timestamp(text: &str, precision: u8) -> Option<String> {
    let (body, bc) = match text.strip_suffix(" BC") {
        Some(body) => (body, true),
        None => (text, false),
    };
    let (date_text, time_text) = body.split_once(' ')?;
    let (time, offset) = split_offset(time_text)?;
    let days = date(&if bc {
        format!("{date_text} BC")
    } else {
        date_text.to_owned()
    })?;
    let micros = days * MICROS_PER_DAY + time_of_day(time)? - offset * MICROS_PER_SECOND;
    let days = micros.div_euclid(MICROS_PER_DAY);
    let of_day = micros.rem_euclid(MICROS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    // As Java's ISO formatter: a sign before years of more than four digits.
    let plus = if year > 9999 { "+" } else { "" };
    let mut out = format!(
        "{plus}{year:04}-{month:02}-{day:02}T{}",
        hms(of_day / MICROS_PER_SECOND)
    );
    if precision > 0 {
        let frac = format!("{:06}", of_day % MICROS_PER_SECOND);
        write!(out, ".{}", &frac[..usize::from(precision.min(6))]).ok()?;
    }
    out.push('Z');
    Some(out)
}

/// Days since 1970-01-01 → proleptic Gregorian (year, month, day).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `1 year 2 mons -3 days +04:05:06.5` (IntervalStyle postgres) →
/// microseconds, a month being 30.4375 days, computed in doubles and
/// truncated as Debezium's `MicroDuration` does.
fn interval_micros(text: &str) -> Option<i64> {
    let (mut years, mut months, mut days) = (0.0, 0.0, 0.0);
    let mut seconds = 0.0;
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        if word.contains(':') {
            let (sign, time) = match word.as_bytes()[0] {
                b'-' => (-1.0, &word[1..]),
                b'+' => (1.0, &word[1..]),
                _ => (1.0, word),
            };
            let mut parts = time.splitn(3, ':');
            let h: f64 = parts.next()?.parse().ok()?;
            let m: f64 = parts.next()?.parse().ok()?;
            let s: f64 = parts.next().unwrap_or("0").parse().ok()?;
            seconds += sign * (h * 3600.0 + m * 60.0 + s);
            continue;
        }
        let n: f64 = word.parse().ok()?;
        match words.next()? {
            "year" | "years" => years += n,
            "mon" | "mons" => months += n,
            "day" | "days" => days += n,
            _ => return None,
        }
    }
    let total_days = (years * 12.0 + months) * DAYS_PER_MONTH + days;
    Some(((total_days * 86_400.0 + seconds) * 1e6) as i64)
}

/// A bit string (`"1010"`, most significant bit first) as Debezium's
/// `Bits` (Java's `BitSet.toByteArray`): little-endian bytes, the last
/// character being bit 0, without high zero bytes (none for all zeros).
fn bits(text: &str) -> Vec<u8> {
    let mut bytes = vec![0u8; text.len().div_ceil(8)];
    for (i, bit) in text.bytes().rev().enumerate() {
        if bit == b'1' {
            bytes[i / 8] |= 1 << (i % 8);
        }
    }
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

/// `"a"=>"1", "b"=>NULL` → `{"a":"1","b":null}`.
fn hstore_json(text: &str) -> Option<String> {
    let mut map = serde_json::Map::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (key, after) = quoted(rest)?;
        let after = after.trim_start().strip_prefix("=>")?.trim_start();
        let (value, after) = match after.strip_prefix("NULL") {
            Some(after) => (serde_json::Value::Null, after),
            None => {
                let (value, after) = quoted(after)?;
                (serde_json::Value::String(value), after)
            }
        };
        map.insert(key, value);
        rest = after.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
        } else if !rest.is_empty() {
            return None;
        }
    }
    Some(serde_json::Value::Object(map).to_string())
}

/// A double-quoted string with backslash escapes at the start of `text`,
/// unquoted, and what follows it.
fn quoted(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.strip_prefix('"')?.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?.1),
            '"' => return Some((out, &text[i + 2..])),
            c => out.push(c),
        }
    }
    None
}

/// `(1.5,-2)` → Debezium's `Point` (its WKB little-endian, no SRID).
fn point(text: &str) -> Option<Value> {
    let (x, y) = text.strip_prefix('(')?.strip_suffix(')')?.split_once(',')?;
    let (x, y): (f64, f64) = (x.parse().ok()?, y.parse().ok()?);
    let mut wkb = vec![1u8];
    wkb.extend_from_slice(&1u32.to_le_bytes());
    wkb.extend_from_slice(&x.to_le_bytes());
    wkb.extend_from_slice(&y.to_le_bytes());
    Some(Value::Geometry(Box::new(Geometry {
        wkb,
        srid: None,
        point: Some((x, y)),
    })))
}

/// Why an array's text did not decode.
enum ArrayError {
    Syntax,
    Element(TextValueError),
}

/// Reads array output: `{1,NULL,"a b","q\"uote"}`, nested for more
/// dimensions; a leading `[1:2]=` dimension decoration is skipped.
struct ArrayParser<'a> {
    text: &'a str,
    at: usize,
}

impl ArrayParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn array(&mut self, element: &PgType) -> Result<Value, ArrayError> {
        if self.peek() == Some(b'[') {
            let eq = self.text[self.at..].find('=').ok_or(ArrayError::Syntax)?;
            self.at += eq + 1;
        }
        if self.peek() != Some(b'{') {
            return Err(ArrayError::Syntax);
        }
        self.at += 1;
        let mut items = Vec::new();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(match self.peek() {
                Some(b'{') => self.array(element)?,
                Some(b'"') => {
                    let (text, rest) = quoted(&self.text[self.at..]).ok_or(ArrayError::Syntax)?;
                    self.at = self.text.len() - rest.len();
                    decode_str(element, &text).map_err(ArrayError::Element)?
                }
                Some(_) => {
                    let rest = &self.text[self.at..];
                    let end = rest.find([',', '}']).ok_or(ArrayError::Syntax)?;
                    let word = &rest[..end];
                    self.at += end;
                    if word == "NULL" {
                        Value::Null
                    } else {
                        decode_str(element, word).map_err(ArrayError::Element)?
                    }
                }
                None => return Err(ArrayError::Syntax),
            });
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(ArrayError::Syntax),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(ty: PgType, text: &str) -> Value {
        decode(&ty, text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn dates_and_times_count_from_the_epoch_across_eras() {
        assert_eq!(value(PgType::Date, "1970-01-02"), Value::Int(1));
        assert_eq!(value(PgType::Date, "1969-12-31"), Value::Int(-1));
        // 0001-01-01 is day -719162; 1 BC (year 0) a leap year before it.
        assert_eq!(value(PgType::Date, "0001-12-31 BC"), Value::Int(-719_163));
        assert_eq!(
            value(PgType::Time(6), "24:00:00"),
            Value::Int(MICROS_PER_DAY)
        );
        assert_eq!(value(PgType::Time(3), "00:00:01.5"), Value::Int(1500));
        assert_eq!(
            value(PgType::Timestamp(6), "1969-12-31 23:59:59.999999"),
            Value::Int(-1)
        );
        assert_eq!(
            value(PgType::Timestamp(3), "1969-12-31 23:59:59.9995"),
            Value::Int(-1),
            "milliseconds round down, as the epoch's floor"
        );
        assert_eq!(
            value(PgType::TimestampTz(3), "2024-02-29 23:30:00.5+00"),
            Value::String("2024-02-29T23:30:00.500Z".into())
        );
        assert_eq!(
            value(PgType::TimestampTz(0), "2024-03-01 01:30:00+05:30"),
            Value::String("2024-02-29T20:00:00Z".into())
        );
        assert_eq!(
            value(PgType::TimeTz, "01:00:00.25-02"),
            Value::String("03:00:00.25Z".into())
        );
        assert_eq!(
            value(PgType::TimeTz, "01:00:00+02"),
            Value::String("23:00:00Z".into())
        );
        assert_eq!(
            value(PgType::TimestampTz(6), "4714-11-24 00:00:00+00 BC"),
            Value::String("-4713-11-24T00:00:00.000000Z".into())
        );
        assert_eq!(
            value(PgType::TimestampTz(1), "12000-01-01 00:00:00+00"),
            Value::String("+12000-01-01T00:00:00.0Z".into())
        );
        assert_eq!(
            value(PgType::Timestamp(3), "infinity"),
            Value::Int(9_223_372_036_825_200)
        );
        assert_eq!(
            value(PgType::Timestamp(6), "-infinity"),
            Value::Int(-9_223_372_036_832_400_000)
        );
        assert_eq!(value(PgType::Date, "infinity"), Value::Int(-2_147_472_692));
    }

    #[test]
    fn intervals_count_months_as_debezium_does() {
        assert_eq!(value(PgType::Interval, "00:00:01.5"), Value::Int(1_500_000));
        assert_eq!(
            value(PgType::Interval, "1 mon"),
            Value::Int((30.4375 * 86_400.0 * 1e6) as i64)
        );
        assert_eq!(
            value(PgType::Interval, "-1 years -2 mons +3 days -04:05:06"),
            Value::Int(
                (((-14.0 * 30.4375 + 3.0) * 86_400.0 - (4.0 * 3600.0 + 5.0 * 60.0 + 6.0)) * 1e6)
                    as i64
            )
        );
    }

    #[test]
    fn money_bits_hstore_points_and_bytea() {
        assert_eq!(
            value(PgType::Money, "-$1,234.50"),
            Value::String("-1234.50".into())
        );
        assert!(decode(&PgType::Money, b"1234.50").is_err());
        assert_eq!(value(PgType::Bit(Some(1)), "1"), Value::Bool(true));
        assert_eq!(
            value(PgType::Bit(Some(10)), "1000000011"),
            Value::Bytes(vec![0x03, 0x02])
        );
        // Debezium's own expectations: no high zero bytes.
        assert_eq!(
            value(PgType::Bit(Some(7)), "1000000"),
            Value::Bytes(vec![64])
        );
        assert_eq!(value(PgType::Bit(None), "00"), Value::Bytes(vec![]));
        assert_eq!(
            value(PgType::Bit(Some(24)), "000000110000001000000001"),
            Value::Bytes(vec![1, 2, 3])
        );
        assert_eq!(
            value(PgType::Hstore, r#""a"=>"1", "b \"q\""=>NULL"#),
            Value::String(r#"{"a":"1","b \"q\"":null}"#.into())
        );
        assert_eq!(value(PgType::Hstore, ""), Value::String("{}".into()));
        let Value::Geometry(point) = value(PgType::Point, "(1.5,-2)") else {
            panic!("a point")
        };
        assert_eq!(point.point, Some((1.5, -2.0)));
        assert_eq!(point.wkb.len(), 21);
        assert_eq!(value(PgType::Bytea, "\\x00ff"), Value::Bytes(vec![0, 255]));
        assert!(decode(&PgType::Bytea, b"\\000").is_err());
    }

    #[test]
    fn arrays_nest_quote_and_hold_nulls() {
        let ints = PgType::Array(Box::new(PgType::Int4));
        assert_eq!(
            value(ints.clone(), "{1,NULL,-3}"),
            Value::Array(vec![Value::Int(1), Value::Null, Value::Int(-3)])
        );
        assert_eq!(
            value(ints.clone(), "{{1,2},{3,4}}"),
            Value::Array(vec![
                Value::Array(vec![Value::Int(1), Value::Int(2)]),
                Value::Array(vec![Value::Int(3), Value::Int(4)]),
            ])
        );
        assert_eq!(
            value(ints.clone(), "[0:1]={5,6}"),
            value(ints.clone(), "{5,6}")
        );
        assert_eq!(value(ints.clone(), "{}"), Value::Array(vec![]));
        let texts = PgType::Array(Box::new(PgType::Text));
        assert_eq!(
            value(texts, r#"{"a,b","NULL",NULL,"q\"\\"}"#),
            Value::Array(vec![
                Value::String("a,b".into()),
                Value::String("NULL".into()),
                Value::Null,
                Value::String("q\"\\".into()),
            ])
        );
        let err = decode(&ints, b"{1,x}").unwrap_err();
        assert_eq!(err.type_name, "integer", "{err}");
        assert!(decode(&ints, b"{1,2").is_err());
        assert!(decode(&ints, b"{1}x").is_err());
    }

    #[test]
    fn bad_text_names_its_type() {
        let err = decode(&PgType::Bool, b"yes").unwrap_err();
        assert_eq!(err.to_string(), "boolean value \"yes\": not t or f");
        assert!(decode(&PgType::Text, b"\xff").is_err());
        assert!(decode(&PgType::Date, b"2024-13-01").is_err());
    }
}
