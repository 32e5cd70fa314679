//! The value a column's default declares ([`DefaultExpr::value`]): the
//! `"default"` of the column's Connect schema, and what Kafka's
//! `JsonConverter` writes in place of a NULL with `replace.null.with.default`
//! (its default).
//!
//! Follows Debezium 3.6's `BinlogDefaultValueConverter`: a literal becomes the
//! value a row holding it would be written as (the same `values:` modes);
//! `CURRENT_TIMESTAMP` is the epoch (a nullable TIMESTAMP has no default); a
//! zero date is the epoch in a NOT NULL column and no default otherwise;
//! integers go through a double and `Math.round`, as Debezium parses them;
//! expressions, JSON and geometries have none.

use tributary_proto::Value;

use crate::column_default::{DefaultExpr, unescape};
use crate::row_decoder::{Calendar, days_from_civil, float_value, timestamp_value};
use crate::schema::ColumnKind;
use crate::value_modes::{BigIntUnsignedMode, ValueModes};

impl DefaultExpr {
    /// The default of a column of `kind` as Debezium declares it, written as
    /// the column's values are in `modes`; `None` when it declares none.
    pub fn value(&self, kind: &ColumnKind, nullable: bool, modes: &ValueModes) -> Option<Value> {
        let value = match self {
            DefaultExpr::None | DefaultExpr::Expression(_) => return None,
            DefaultExpr::CurrentTimestamp => epoch(kind, nullable, true)?,
            DefaultExpr::Bits(digits) => bit_value(kind, digits)?,
            DefaultExpr::Literal { text, escaped } => {
                let text = if *escaped {
                    unescape(text)
                } else {
                    text.clone()
                };
                literal_value(kind, nullable, &text, modes)?
            }
        };
        modes.apply(kind, value).ok()
    }
}

/// The epoch in a temporal column (`CURRENT_TIMESTAMP`, a zero date): none for
/// a nullable TIMESTAMP, or a nullable zero date (`current` tells which).
fn epoch(kind: &ColumnKind, nullable: bool, current: bool) -> Option<Value> {
    match kind {
        ColumnKind::Timestamp { .. } if !nullable => {
            Some(Value::String("1970-01-01T00:00:00Z".into()))
        }
        ColumnKind::DateTime { .. } if current || !nullable => Some(Value::Int(0)),
        ColumnKind::Date if !current && !nullable => Some(Value::Int(0)),
        _ => None,
    }
}

/// What Debezium's converters write for a NOT NULL column whose value is
/// NULL (a zero date) and that has no default: the epoch.
pub fn not_null_fallback(kind: &ColumnKind) -> Option<Value> {
    epoch(kind, false, false)
}

/// A BIT default: BIT(1) a boolean, BIT(n) its bytes little-endian (as rows).
fn bit_value(kind: &ColumnKind, digits: &str) -> Option<Value> {
    let ColumnKind::Bit { bits } = kind else {
        return None;
    };
    let number = u64::from_str_radix(digits, 2).ok()?;
    if *bits == 1 {
        return Some(Value::Bool(number != 0));
    }
    let bytes = (*bits as usize).div_ceil(8);
    Some(Value::Bytes(number.to_le_bytes()[..bytes.min(8)].to_vec()))
}

/// A literal default of a column of `kind`, before the `modes`.
fn literal_value(
    kind: &ColumnKind,
    nullable: bool,
    text: &str,
    modes: &ValueModes,
) -> Option<Value> {
    let trimmed = text.trim();
    Some(match kind {
        ColumnKind::Int { unsigned, bytes } => {
            if *unsigned && *bytes == 8 && modes.bigint_unsigned != BigIntUnsignedMode::Long {
                // Parsed as a BigDecimal: exact.
                let u: u64 = trimmed.parse().ok()?;
                i64::try_from(u).map_or(Value::UInt(u), Value::Int)
            } else {
                Value::Int(connect_integer(
                    java_round(trimmed.parse().ok()?),
                    *bytes,
                    *unsigned,
                ))
            }
        }
        ColumnKind::Float => float_value(trimmed.parse::<f64>().ok()? as f32),
        ColumnKind::Double => Value::Float(trimmed.parse().ok()?),
        ColumnKind::Decimal => Value::String(trimmed.to_owned()),
        ColumnKind::Year => {
            let year: i64 = trimmed.parse().ok()?;
            // Debezium's time adjuster: 0–69 are 2000–2069, 70–99 1970–1999.
            Value::Int(match year {
                0..=69 => year + 2000,
                70..=99 => year + 1900,
                _ => year,
            })
        }
        ColumnKind::Date | ColumnKind::DateTime { .. } | ColumnKind::Timestamp { .. } => {
            let at = calendar(trimmed)?;
            let zero = at.month == 0 || at.day == 0 || trimmed == "0";
            match kind {
                _ if zero => epoch(kind, nullable, false)?,
                ColumnKind::Date => at.date_value(),
                ColumnKind::DateTime { fsp } => at.datetime_value(*fsp),
                ColumnKind::Timestamp { fsp } => {
                    let days =
                        days_from_civil(i64::from(at.year), u32::from(at.month), u32::from(at.day));
                    let secs = days * 86_400
                        + i64::from(at.hour) * 3600
                        + i64::from(at.minute) * 60
                        + i64::from(at.second);
                    timestamp_value(secs, at.micros, *fsp)
                }
                _ => return None,
            }
        }
        ColumnKind::Time => Value::Int(time_micros(trimmed)?),
        ColumnKind::Text(_) | ColumnKind::Enum(_) | ColumnKind::Set(_) => {
            Value::String(text.to_owned())
        }
        // The literal's bytes, not padded to the column's length (as Debezium).
        ColumnKind::Binary { .. } => Value::Bytes(text.as_bytes().to_vec()),
        ColumnKind::Bit { .. } => bit_value(kind, trimmed)?,
        ColumnKind::Json | ColumnKind::Geometry { .. } | ColumnKind::Other => return None,
        // PostgreSQL's kinds: their defaults are not read from MySQL's catalog.
        ColumnKind::Bool
        | ColumnKind::Uuid
        | ColumnKind::Xml
        | ColumnKind::TimeMillis
        | ColumnKind::ZonedTime
        | ColumnKind::Interval
        | ColumnKind::VariableDecimal
        | ColumnKind::PlainText
        | ColumnKind::Array(_) => return None,
    })
}

/// Java's `Math.round(double)`: half up, saturating, NaN 0 (Rust's `as` saturates
/// and maps NaN to 0 the same way).
fn java_round(x: f64) -> i64 {
    let floor = x.floor();
    (if x - floor >= 0.5 { floor + 1.0 } else { floor }) as i64
}

/// A rounded integer narrowed to its Connect type as Java narrows a `long`
/// (`shortValue()`, `intValue()`: the low bits).
fn connect_integer(n: i64, bytes: u8, unsigned: bool) -> i64 {
    match (bytes, unsigned) {
        (1, _) | (2, false) => i64::from(n as i16),
        (2, true) | (3, _) | (4, false) => i64::from(n as i32),
        _ => n,
    }
}

/// `YYYY-MM-DD[ HH:MM:SS[.ffffff]]`; `0` is the zero date.
fn calendar(text: &str) -> Option<Calendar> {
    if text == "0" {
        return Some(Calendar::default());
    }
    let (date, time) = text.split_once(' ').unwrap_or((text, "00:00:00"));
    let mut ymd = date.splitn(3, '-').map(str::parse::<u16>);
    let (year, month, day) = (ymd.next()?.ok()?, ymd.next()?.ok()?, ymd.next()?.ok()?);
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut hms = clock.splitn(3, ':').map(str::parse::<u8>);
    let (hour, minute, second) = (hms.next()?.ok()?, hms.next()?.ok()?, hms.next()?.ok()?);
    Some(Calendar {
        year,
        month: u8::try_from(month).ok()?,
        day: u8::try_from(day).ok()?,
        hour,
        minute,
        second,
        micros: micros_of_fraction(fraction)?,
    })
}

/// Digits after a decimal point as microseconds (`45` is 450000).
fn micros_of_fraction(fraction: &str) -> Option<u32> {
    if fraction.is_empty() {
        return Some(0);
    }
    let digits: String = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(6)
        .collect();
    digits.parse().ok()
}

/// `[-]H:MM[:SS[.ffffff]]` as microseconds (negative when it starts with `-`).
fn time_micros(text: &str) -> Option<i64> {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (clock, fraction) = text.split_once('.').unwrap_or((text, ""));
    let mut parts = clock.splitn(3, ':').map(str::parse::<i64>);
    let hours = parts.next()?.ok()?;
    let minutes = parts.next()?.ok()?;
    let seconds = parts.next().transpose().ok()?.unwrap_or(0);
    let micros = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000
        + i64::from(micros_of_fraction(fraction)?);
    Some(if negative { -micros } else { micros })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::charset::Charset;
    use crate::value_modes::DecimalMode;

    fn unescaped(text: &str) -> DefaultExpr {
        DefaultExpr::Literal {
            text: text.into(),
            escaped: false,
        }
    }

    #[test]
    fn quoted_literals_have_their_escapes_undone() {
        // The value has the escapes undone.
        let text = ColumnKind::Text(Charset::Utf8);
        let value =
            |raw| DefaultExpr::parse(Some(raw), "", true).value(&text, true, &ValueModes::DEBEZIUM);
        assert_eq!(
            value(r"'it''s \\ x'"),
            Some(Value::String(r"it's \ x".into()))
        );
        assert_eq!(
            value(r"'a\nb	c\\d\0e'"),
            Some(Value::String("a\nb\tc\\d\0e".into()))
        );
    }

    fn value(kind: ColumnKind, nullable: bool, expr: DefaultExpr) -> Option<Value> {
        expr.value(&kind, nullable, &ValueModes::DEBEZIUM)
    }

    fn literal(text: &str) -> DefaultExpr {
        unescaped(text)
    }

    /// Expectations from Debezium 3.6's own tests of its default converter
    /// (`MySqlDefaultValueTest`, `BinlogDefaultValueConverterTest`).
    #[test]
    fn literals_become_what_debezium_declares() {
        let int = ColumnKind::Int {
            unsigned: false,
            bytes: 4,
        };
        assert_eq!(
            value(int.clone(), true, literal("1.5")),
            Some(Value::Int(2))
        );
        assert_eq!(
            value(int.clone(), true, literal("-.789")),
            Some(Value::Int(-1))
        );
        assert_eq!(value(int, true, literal("1E1")), Some(Value::Int(10)));
        let bigint_unsigned = ColumnKind::Int {
            unsigned: true,
            bytes: 8,
        };
        let max = literal("18446744073709551615");
        // long mode: through a double and Math.round, saturated.
        assert_eq!(
            value(bigint_unsigned.clone(), true, max.clone()),
            Some(Value::Int(i64::MAX))
        );
        let precise = ValueModes {
            bigint_unsigned: BigIntUnsignedMode::Precise,
            ..ValueModes::DEBEZIUM
        };
        assert_eq!(
            max.value(&bigint_unsigned, true, &precise)
                .map(|v| v.to_json()),
            Some("AP//////////".into())
        );
        let decimal = |text| {
            literal(text)
                .value(&ColumnKind::Decimal, true, &ValueModes::DEBEZIUM)
                .map(|v| v.to_json())
        };
        assert_eq!(decimal("1.23"), Some("ew==".into()));
        assert_eq!(decimal("-1.50"), Some("/2o=".into()));
        let string = ValueModes {
            decimal: DecimalMode::String,
            ..ValueModes::DEBEZIUM
        };
        assert_eq!(
            literal("12.68").value(&ColumnKind::Decimal, true, &string),
            Some(Value::String("12.68".into()))
        );
        assert_eq!(
            value(ColumnKind::Date, true, literal("1976-08-23")),
            Some(Value::Int(2426))
        );
        assert_eq!(
            value(
                ColumnKind::DateTime { fsp: 0 },
                true,
                literal("2018-01-03 00:00:10")
            ),
            Some(Value::Int(1_514_937_610_000))
        );
        assert_eq!(
            value(ColumnKind::Time, true, literal("08:00")),
            Some(Value::Int(28_800_000_000))
        );
        assert_eq!(
            value(ColumnKind::Time, true, literal("-23:45:56.7")),
            Some(Value::Int(
                -(((23 * 60 + 45) * 60 + 56) * 1_000_000 + 700_000)
            ))
        );
        assert_eq!(
            value(ColumnKind::Year, true, literal("1")),
            Some(Value::Int(2001))
        );
        assert_eq!(
            value(
                ColumnKind::Bit { bits: 10 },
                true,
                DefaultExpr::Bits("101000010".into())
            ),
            Some(Value::Bytes(vec![66, 1]))
        );
        assert_eq!(
            value(
                ColumnKind::Bit { bits: 25 },
                true,
                DefaultExpr::Bits("10110000100001111".into())
            ),
            Some(Value::Bytes(vec![15, 97, 1, 0]))
        );
        assert_eq!(
            value(
                ColumnKind::Bit { bits: 1 },
                true,
                DefaultExpr::Bits("1".into())
            ),
            Some(Value::Bool(true))
        );
        let text = ColumnKind::Text(Charset::Utf8);
        assert_eq!(
            value(text, true, literal(" 3 ")),
            Some(Value::String(" 3 ".into()))
        );
        let labels: Arc<[String]> = ["b2c".to_owned(), "b2b".to_owned()].into();
        assert_eq!(
            value(ColumnKind::Enum(labels), false, literal("b2c")),
            Some(Value::String("b2c".into()))
        );
        assert_eq!(
            value(
                ColumnKind::Binary { fixed_len: Some(4) },
                true,
                literal("abc")
            ),
            Some(Value::Bytes(b"abc".to_vec()))
        );
        assert_eq!(
            value(
                ColumnKind::Timestamp { fsp: 3 },
                true,
                literal("2020-01-01 00:00:00")
            ),
            Some(Value::String("2020-01-01T00:00:00.000Z".into()))
        );
        assert_eq!(value(ColumnKind::Json, true, literal("{}")), None);
    }

    #[test]
    fn current_timestamp_and_zero_dates_are_the_epoch_where_debezium_says() {
        let timestamp = ColumnKind::Timestamp { fsp: 6 };
        let datetime = ColumnKind::DateTime { fsp: 3 };
        let now = DefaultExpr::CurrentTimestamp;
        let epoch = Some(Value::String("1970-01-01T00:00:00Z".into()));
        assert_eq!(value(timestamp.clone(), false, now.clone()), epoch);
        assert_eq!(value(timestamp.clone(), true, now.clone()), None);
        assert_eq!(
            value(datetime.clone(), true, now.clone()),
            Some(Value::Int(0))
        );
        let zero = literal("0000-00-00 00:00:00");
        assert_eq!(value(timestamp.clone(), false, zero.clone()), epoch);
        assert_eq!(value(timestamp, true, zero.clone()), None);
        assert_eq!(
            value(datetime.clone(), false, zero.clone()),
            Some(Value::Int(0))
        );
        assert_eq!(value(datetime, true, zero), None);
        assert_eq!(
            value(ColumnKind::Date, false, literal("0000-00-00")),
            Some(Value::Int(0))
        );
        assert_eq!(value(ColumnKind::Date, true, literal("2020-00-10")), None);
        assert_eq!(
            value(ColumnKind::Date, true, DefaultExpr::Expression(None)),
            None
        );
    }
}
