//! Maps decoded binlog column values onto Debezium's representations.
//!
//! Temporal values follow Debezium's `adaptive_time_microseconds` mode: DATE as
//! days since the epoch, TIME as microseconds, DATETIME(0–3) as epoch
//! milliseconds and DATETIME(4–6) as epoch microseconds (both without time
//! zone), TIMESTAMP as an ISO-8601 UTC string. The full table is `docs/types.md`.

use mysql_async::Value as MyValue;
use mysql_async::binlog::value::BinlogValue;
use tributary_proto::Value;

use crate::charset::TextError;
use crate::schema::{Charset, ColumnKind};

/// Why a column value cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Text that cannot be read exactly in its character set.
    #[error(transparent)]
    Text(#[from] TextError),
    /// A binary JSON document that has no JSON text.
    #[error("JSON document: {0}")]
    Json(String),
    /// A partial JSON update, which capture cannot apply to a whole document.
    #[error("partial JSON update (binlog_row_value_options=PARTIAL_JSON) is not supported")]
    PartialJson,
    /// A YEAR, TIMESTAMP or DECIMAL the server wrote as text that is not a number.
    #[error("{column_type} {text:?} is not a number")]
    NotANumber {
        /// `YEAR`, `TIMESTAMP` or `DECIMAL`.
        column_type: &'static str,
        /// The text.
        text: String,
    },
    /// A value the configured representation cannot hold.
    #[error("{what} value {value} is outside {range}")]
    OutOfRange {
        /// The column type.
        what: &'static str,
        /// The value, as the database writes it.
        value: String,
        /// What the representation holds, and what to do.
        range: &'static str,
    },
    /// A geometry whose bytes are not MySQL's internal form.
    #[error("geometry: {0}")]
    Geometry(String),
    /// A value of another type than the column's.
    #[error("unexpected binlog value {value} for a {kind} column")]
    Unexpected {
        /// The value, as read.
        value: String,
        /// The column's kind.
        kind: String,
    },
    /// The row image ends inside the value.
    #[error("row image ends early")]
    Truncated,
    /// The binlog's value parser failed.
    #[error("{0}")]
    Binlog(String),
}

/// Decodes one column value.
pub fn decode_value(kind: &ColumnKind, raw: Option<BinlogValue<'_>>) -> Result<Value, ValueError> {
    let raw = match raw {
        // No value (a snapshot row without the column) or NULL.
        None | Some(BinlogValue::Value(MyValue::NULL)) => return Ok(Value::Null),
        Some(BinlogValue::Value(v)) => v,
        Some(BinlogValue::Jsonb(j)) => {
            let json =
                serde_json::Value::try_from(j).map_err(|e| ValueError::Json(e.to_string()))?;
            return Ok(Value::String(json.to_string()));
        }
        Some(BinlogValue::JsonDiff(_)) => return Err(ValueError::PartialJson),
    };
    Ok(match (kind, raw) {
        (ColumnKind::Int { unsigned, bytes }, MyValue::Int(i)) => integer(i, *unsigned, *bytes),
        (ColumnKind::Int { .. }, MyValue::UInt(u)) => {
            i64::try_from(u).map_or(Value::UInt(u), Value::Int)
        }
        (ColumnKind::Float, MyValue::Float(f)) => float_value(f),
        (ColumnKind::Float | ColumnKind::Double, MyValue::Double(d)) => Value::Float(d),
        (ColumnKind::Decimal, MyValue::Bytes(b)) => Value::String(utf8(b)?),
        (ColumnKind::Year, MyValue::Bytes(b)) => {
            let text = utf8(b)?;
            let year: i64 = text.parse().map_err(|_| ValueError::NotANumber {
                column_type: "YEAR",
                text,
            })?;
            // YEAR 0000 is stored as 0, which the decoder renders as 1900 (not a valid YEAR).
            Value::Int(if year == 1900 { 0 } else { year })
        }
        (ColumnKind::Year, MyValue::Int(y)) => Value::Int(y),
        (ColumnKind::Date, MyValue::Date(y, m, d, ..)) => Calendar::date(y, m, d).date_value(),
        (ColumnKind::Time, MyValue::Time(negative, days, h, m, s, us)) => {
            let secs =
                (i64::from(days) * 24 + i64::from(h)) * 3600 + i64::from(m) * 60 + i64::from(s);
            let micros = secs * 1_000_000 + i64::from(us);
            Value::Int(if negative { -micros } else { micros })
        }
        (ColumnKind::DateTime { fsp }, MyValue::Date(y, mo, d, h, mi, s, us)) => Calendar {
            year: y,
            month: mo,
            day: d,
            hour: h,
            minute: mi,
            second: s,
            micros: us,
        }
        .datetime_value(*fsp),
        (ColumnKind::Timestamp { fsp }, MyValue::Bytes(b)) => {
            let text = utf8(b)?;
            let (secs, micros) = match text.split_once('.') {
                Some((s, us)) => (s.parse(), us.parse().unwrap_or(0)),
                None => (text.parse(), 0),
            };
            let secs: i64 = secs.map_err(|_| ValueError::NotANumber {
                column_type: "TIMESTAMP",
                text: text.clone(),
            })?;
            // An unsigned 32-bit count (to 2106 on MariaDB 11.5+) that mysql_common reads as signed.
            timestamp_value(if secs < 0 { secs + (1 << 32) } else { secs }, micros, *fsp)
        }
        // Snapshots read TIMESTAMP through a UTC session as a date-time.
        (ColumnKind::Timestamp { fsp }, MyValue::Date(y, mo, d, h, mi, s, us)) => {
            let days = days_from_civil(i64::from(y), u32::from(mo), u32::from(d));
            let secs = days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
            timestamp_value(secs, us, *fsp)
        }
        (ColumnKind::Timestamp { fsp }, MyValue::Int(secs)) => timestamp_value(secs, 0, *fsp),
        // UTF-8 as it is, without a copy; the same error as any charset otherwise.
        (ColumnKind::Text(Charset::Utf8), MyValue::Bytes(b)) => match String::from_utf8(b) {
            Ok(text) => Value::String(text),
            Err(e) => return text_value(&Charset::Utf8, e.as_bytes()),
        },
        (ColumnKind::Text(charset), MyValue::Bytes(b)) => return text_value(charset, &b),
        (ColumnKind::Binary { fixed_len }, MyValue::Bytes(mut b)) => {
            if let Some(len) = fixed_len {
                b.resize((*len).max(b.len()), 0);
            }
            Value::Bytes(b)
        }
        (ColumnKind::Geometry { .. } | ColumnKind::Other, MyValue::Bytes(b)) => Value::Bytes(b),
        (ColumnKind::Json, MyValue::Bytes(b)) => Value::String(utf8(b)?),
        (ColumnKind::Enum(labels), MyValue::Int(index)) => Value::String(
            // Index 0 is the empty "error" value MySQL stores for invalid input.
            usize::try_from(index - 1)
                .ok()
                .and_then(|i| labels.get(i).cloned())
                .unwrap_or_default(),
        ),
        (ColumnKind::Set(labels), MyValue::Bytes(mask)) => {
            let chosen: Vec<&str> = labels
                .iter()
                .enumerate()
                .filter(|(i, _)| {
                    mask.get(i / 8)
                        .is_some_and(|byte| byte & (1 << (i % 8)) != 0)
                })
                .map(|(_, label)| label.as_str())
                .collect();
            Value::String(chosen.join(","))
        }
        (ColumnKind::Bit { bits }, MyValue::Bytes(mut b)) => {
            if *bits == 1 {
                Value::Bool(b.last().is_some_and(|byte| byte & 1 == 1))
            } else {
                // Debezium's io.debezium.data.Bits holds the bytes little-endian.
                b.reverse();
                Value::Bytes(b)
            }
        }
        (kind, other) => {
            return Err(ValueError::Unexpected {
                value: format!("{other:?}"),
                kind: format!("{kind:?}"),
            });
        }
    })
}

/// Reinterprets a decoded integer at the column's width and signedness: small
/// unsigned values can arrive sign-extended, and signed MEDIUMINTs zero-extended.
fn integer(i: i64, unsigned: bool, bytes: u8) -> Value {
    let bits = u32::from(bytes.clamp(1, 8)) * 8;
    if bits == 64 {
        return if unsigned && i < 0 {
            Value::UInt(i as u64)
        } else {
            Value::Int(i)
        };
    }
    let shift = 64 - bits;
    if unsigned {
        Value::Int(((i as u64) << shift >> shift) as i64)
    } else {
        Value::Int((i << shift) >> shift)
    }
}

/// A FLOAT through its shortest decimal form, so FLOAT 1.1 reads 1.1, not 1.100000023841858.
pub(crate) fn float_value(f: f32) -> Value {
    Value::Float(f.to_string().parse().unwrap_or(f64::from(f)))
}

/// Text in `charset`, exactly, or the reason it is not valid there.
pub(crate) fn text_value(charset: &Charset, bytes: &[u8]) -> Result<Value, ValueError> {
    Ok(Value::String(charset.decode(bytes)?))
}

/// TIMESTAMP(fsp): Debezium's ZonedTimestamp string.
pub(crate) fn timestamp_value(secs: i64, micros: u32, fsp: u8) -> Value {
    Value::String(iso_timestamp(secs, micros, fsp))
}

/// A date and time of day as the binlog holds them (zero months and days allowed).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Calendar {
    pub year: u16,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    pub micros: u32,
}

impl Calendar {
    fn date(year: u16, month: u8, day: u8) -> Self {
        Calendar {
            year,
            month,
            day,
            ..Calendar::default()
        }
    }

    fn days(self) -> Option<i64> {
        // Zero dates have no day count.
        (self.month != 0 && self.day != 0).then(|| {
            days_from_civil(
                i64::from(self.year),
                u32::from(self.month),
                u32::from(self.day),
            )
        })
    }

    /// DATE: days since the epoch.
    pub(crate) fn date_value(self) -> Value {
        self.days().map_or(Value::Null, Value::Int)
    }

    /// DATETIME(fsp): epoch milliseconds (fsp ≤ 3) or microseconds, without time zone.
    pub(crate) fn datetime_value(self, fsp: u8) -> Value {
        let Some(days) = self.days() else {
            return Value::Null;
        };
        let micros = ((days * 24 + i64::from(self.hour)) * 60 + i64::from(self.minute))
            * 60_000_000
            + i64::from(self.second) * 1_000_000
            + i64::from(self.micros);
        Value::Int(if fsp <= 3 {
            micros.div_euclid(1000)
        } else {
            micros
        })
    }
}

/// Text the server writes in UTF-8 (JSON documents, TIMESTAMP text).
fn utf8(bytes: Vec<u8>) -> Result<String, TextError> {
    String::from_utf8(bytes).map_err(|e| TextError::invalid(e.as_bytes(), "UTF-8"))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DDTHH:MM:SS[.f…]Z` with `fsp` fractional digits (Debezium's ZonedTimestamp).
fn iso_timestamp(secs: i64, micros: u32, fsp: u8) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    let mut out = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        t / 3600,
        t / 60 % 60,
        t % 60
    );
    if fsp > 0 {
        let digits = format!("{micros:06}");
        out.push('.');
        out.push_str(&digits[..usize::from(fsp.min(6))]);
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        for z in [-800_000, -1, 0, 59, 10_000, 2_932_896] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(iso_timestamp(0, 0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(
            iso_timestamp(1_700_000_000, 123_456, 3),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            iso_timestamp(1_700_000_000, 5, 6),
            "2023-11-14T22:13:20.000005Z"
        );
    }

    #[test]
    fn unsigned_reinterpretation() {
        assert_eq!(integer(-1, true, 1), Value::Int(255));
        assert_eq!(integer(-1, true, 8), Value::UInt(u64::MAX));
        assert_eq!(integer(-1, false, 8), Value::Int(-1));
        assert_eq!(integer(0x80_0000, false, 3), Value::Int(-8_388_608));
        assert_eq!(integer(0xff_ffff, true, 3), Value::Int(16_777_215));
        assert_eq!(integer(-128, false, 1), Value::Int(-128));
    }

    #[test]
    fn text_is_decoded_exactly_or_refused() {
        let latin1 = decode_value(
            &ColumnKind::Text(Charset::from_name("latin1").unwrap()),
            Some(BinlogValue::Value(MyValue::Bytes(vec![
                0x63, 0x61, 0x66, 0xe9, 0x80,
            ]))),
        );
        assert_eq!(latin1, Ok(Value::String("café€".into())));
        let bad = decode_value(
            &ColumnKind::Text(Charset::Utf8),
            Some(BinlogValue::Value(MyValue::Bytes(vec![0x61, 0xff]))),
        );
        assert_eq!(
            bad.unwrap_err().to_string(),
            "bytes 61FF are not valid UTF-8"
        );
    }
}
