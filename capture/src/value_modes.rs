//! Debezium's value converter modes: how a decoded DECIMAL, BIGINT UNSIGNED,
//! TIME/DATETIME or binary column is written, under Debezium's property names
//! and values (`decimal.handling.mode`, `bigint.unsigned.handling.mode`,
//! `time.precision.mode`, `binary.handling.mode`).
//!
//! The decoders ([`crate::row_decoder`], [`crate::fast_value`]) produce one
//! representation per column kind (Tributary's defaults); [`ValueModes::apply`]
//! turns it into the configured one, for streamed rows and snapshot rows alike,
//! keys included (as Debezium does). The conversions follow Debezium's
//! `JdbcValueConverters` and `BinlogValueConverters`; `docs/types.md` has the
//! table.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE as BASE64_URL_SAFE};
use num_bigint::BigInt;
use serde::Deserialize;
use tributary_proto::Value;

use crate::row_decoder::ValueError;
use crate::schema::ColumnKind;

/// Microseconds in a day: Connect's `Time` holds 00:00:00 to 24:00:00.
const DAY_MICROS: i64 = 86_400_000_000;

/// `decimal.handling.mode`: DECIMAL/NUMERIC columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecimalMode {
    /// Connect's `Decimal`: the unscaled value's two's-complement bytes, base64
    /// in JSON (Debezium's default). Exact, but a consumer needs the scale.
    Precise,
    /// The exact decimal text, with the column's scale (`"12.340"`), as Java's
    /// `BigDecimal.toPlainString()` writes it. Tributary's default.
    String,
    /// A double: loses digits beyond about 15 significant ones.
    Double,
}

/// `bigint.unsigned.handling.mode`: BIGINT UNSIGNED columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BigIntUnsignedMode {
    /// A JSON number, exact to 18446744073709551615. Tributary's default; not
    /// one of Debezium's modes (a Connect `int64` cannot hold it).
    Number,
    /// A signed 64-bit integer (Debezium's default): values above
    /// 9223372036854775807 wrap around to negative numbers, as in Debezium.
    Long,
    /// Connect's `Decimal` with scale 0 (base64 two's-complement bytes in JSON).
    Precise,
}

/// `time.precision.mode`: TIME and DATETIME columns (DATE is days since the
/// epoch and TIMESTAMP an ISO-8601 UTC string in both modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimePrecisionMode {
    /// TIME in microseconds; DATETIME(0–3) in epoch milliseconds and
    /// DATETIME(4–6) in epoch microseconds. Debezium's default and Tributary's.
    AdaptiveTimeMicroseconds,
    /// Connect's `Time` and `Timestamp`: milliseconds (fractions below a
    /// millisecond are dropped, rounding down). A TIME outside 00:00:00 to
    /// 24:00:00 stops capture, naming the column (Debezium writes null or
    /// 00:00:00 for it).
    Connect,
}

/// `binary.handling.mode`: BINARY, VARBINARY and BLOB columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum BinaryMode {
    /// Connect `bytes`, base64 in JSON. Debezium's default and Tributary's.
    #[serde(rename = "bytes")]
    Bytes,
    /// A base64 string (the same JSON as `bytes`; a `string` in schemas).
    #[serde(rename = "base64")]
    Base64,
    /// A URL-safe base64 string (`-` and `_`, padded).
    #[serde(rename = "base64-url-safe")]
    Base64UrlSafe,
    /// A lowercase hexadecimal string.
    #[serde(rename = "hex")]
    Hex,
}

/// The four modes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueModes {
    /// DECIMAL/NUMERIC.
    pub decimal: DecimalMode,
    /// BIGINT UNSIGNED.
    pub bigint_unsigned: BigIntUnsignedMode,
    /// TIME and DATETIME.
    pub time_precision: TimePrecisionMode,
    /// BINARY/VARBINARY/BLOB.
    pub binary: BinaryMode,
}

impl ValueModes {
    /// Tributary's defaults: what capture wrote before these modes existed.
    pub const TRIBUTARY: ValueModes = ValueModes {
        decimal: DecimalMode::String,
        bigint_unsigned: BigIntUnsignedMode::Number,
        time_precision: TimePrecisionMode::AdaptiveTimeMicroseconds,
        binary: BinaryMode::Bytes,
    };

    /// Debezium's MySQL connector's defaults.
    pub const DEBEZIUM: ValueModes = ValueModes {
        decimal: DecimalMode::Precise,
        bigint_unsigned: BigIntUnsignedMode::Long,
        time_precision: TimePrecisionMode::AdaptiveTimeMicroseconds,
        binary: BinaryMode::Bytes,
    };

    /// `value` (as the decoders give it for a column of `kind`) in these modes.
    pub fn apply(&self, kind: &ColumnKind, value: Value) -> Result<Value, ValueError> {
        if value == Value::Null {
            return Ok(value);
        }
        match kind {
            ColumnKind::Decimal => self.decimal(value),
            ColumnKind::Int {
                unsigned: true,
                bytes: 8,
            } => Ok(self.bigint_unsigned(value)),
            ColumnKind::Time => self.time(value),
            ColumnKind::DateTime { fsp } => Ok(self.datetime(value, *fsp)),
            ColumnKind::Binary { .. } => Ok(self.binary(value)),
            _ => Ok(value),
        }
    }

    fn decimal(&self, value: Value) -> Result<Value, ValueError> {
        let Value::String(text) = value else {
            return Ok(value);
        };
        Ok(match self.decimal {
            DecimalMode::String => Value::String(text),
            DecimalMode::Double => {
                Value::Float(text.parse().map_err(|_| ValueError::NotANumber {
                    column_type: "DECIMAL",
                    text: text.clone(),
                })?)
            }
            DecimalMode::Precise => {
                let unscaled: BigInt =
                    text.replacen('.', "", 1)
                        .parse()
                        .map_err(|_| ValueError::NotANumber {
                            column_type: "DECIMAL",
                            text: text.clone(),
                        })?;
                Value::Bytes(unscaled.to_signed_bytes_be())
            }
        })
    }

    fn bigint_unsigned(&self, value: Value) -> Value {
        let unsigned = match value {
            Value::UInt(u) => u,
            Value::Int(i) => i as u64,
            other => return other,
        };
        match self.bigint_unsigned {
            BigIntUnsignedMode::Number => value,
            BigIntUnsignedMode::Long => Value::Int(unsigned as i64),
            BigIntUnsignedMode::Precise => {
                Value::Bytes(BigInt::from(unsigned).to_signed_bytes_be())
            }
        }
    }

    fn time(&self, value: Value) -> Result<Value, ValueError> {
        match (self.time_precision, value) {
            (TimePrecisionMode::Connect, Value::Int(micros)) => {
                if !(0..=DAY_MICROS).contains(&micros) {
                    return Err(ValueError::OutOfRange {
                        what: "TIME",
                        value: time_text(micros),
                        range: "00:00:00 to 24:00:00 (Connect's Time, time.precision.mode=connect); \
                                use adaptive_time_microseconds",
                    });
                }
                Ok(Value::Int(micros.div_euclid(1000)))
            }
            (_, value) => Ok(value),
        }
    }

    fn datetime(&self, value: Value, fsp: u8) -> Value {
        match (self.time_precision, value) {
            (TimePrecisionMode::Connect, Value::Int(micros)) if fsp > 3 => {
                Value::Int(micros.div_euclid(1000))
            }
            (_, value) => value,
        }
    }

    fn binary(&self, value: Value) -> Value {
        let Value::Bytes(bytes) = value else {
            return value;
        };
        match self.binary {
            BinaryMode::Bytes => Value::Bytes(bytes),
            BinaryMode::Base64 => Value::String(BASE64.encode(bytes)),
            BinaryMode::Base64UrlSafe => Value::String(BASE64_URL_SAFE.encode(bytes)),
            BinaryMode::Hex => Value::String(hex::encode(bytes)),
        }
    }
}

/// A TIME in microseconds as MySQL writes it: `-838:59:59.000000`.
fn time_text(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    let secs = abs / 1_000_000;
    format!(
        "{sign}{:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        abs % 1_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modes(f: impl FnOnce(&mut ValueModes)) -> ValueModes {
        let mut modes = ValueModes::TRIBUTARY;
        f(&mut modes);
        modes
    }

    fn decimal(mode: DecimalMode, text: &str) -> Value {
        modes(|m| m.decimal = mode)
            .apply(&ColumnKind::Decimal, Value::String(text.into()))
            .unwrap()
    }

    /// Expected bytes are Java's `new BigDecimal(text).unscaledValue().toByteArray()`.
    #[test]
    fn precise_decimals_are_the_unscaled_twos_complement_bytes() {
        let cases: [(&str, &[u8]); 8] = [
            ("0.00", &[0]),
            ("1.00", &[100]),
            ("1.27", &[127]),
            ("1.28", &[0, 128]),
            ("-1.28", &[128]),
            ("-1.29", &[255, 127]),
            ("-0.01", &[255]),
            (
                "12345678901234567890.12345",
                &[
                    0x01, 0x05, 0x6E, 0x0F, 0x36, 0xA6, 0x44, 0x3D, 0xE2, 0xDF, 0x79,
                ],
            ),
        ];
        for (text, bytes) in cases {
            assert_eq!(
                decimal(DecimalMode::Precise, text),
                Value::Bytes(bytes.to_vec()),
                "{text}"
            );
        }
        // 65 digits, MySQL's widest DECIMAL.
        let widest = format!("-{}.{}", "9".repeat(35), "9".repeat(30));
        let Value::Bytes(bytes) = decimal(DecimalMode::Precise, &widest) else {
            panic!("not bytes");
        };
        let back = BigInt::from_signed_bytes_be(&bytes);
        assert_eq!(back.to_string(), format!("-{}", "9".repeat(65)));
    }

    #[test]
    fn string_and_double_decimals() {
        assert_eq!(
            decimal(DecimalMode::String, "0.0000000001"),
            Value::String("0.0000000001".into())
        );
        assert_eq!(
            decimal(DecimalMode::Double, "-12.340"),
            Value::Float(-12.34)
        );
        let err = modes(|m| m.decimal = DecimalMode::Double)
            .apply(&ColumnKind::Decimal, Value::String("x".into()))
            .unwrap_err();
        assert!(err.to_string().contains("\"x\""), "{err}");
    }

    #[test]
    fn bigint_unsigned_modes() {
        let kind = ColumnKind::Int {
            unsigned: true,
            bytes: 8,
        };
        let apply = |mode, value| {
            modes(|m| m.bigint_unsigned = mode)
                .apply(&kind, value)
                .unwrap()
        };
        assert_eq!(
            apply(BigIntUnsignedMode::Number, Value::UInt(u64::MAX)),
            Value::UInt(u64::MAX)
        );
        assert_eq!(
            apply(BigIntUnsignedMode::Long, Value::UInt(u64::MAX)),
            Value::Int(-1)
        );
        assert_eq!(
            apply(BigIntUnsignedMode::Long, Value::Int(5)),
            Value::Int(5)
        );
        // Java: new BigInteger("18446744073709551615").toByteArray()
        assert_eq!(
            apply(BigIntUnsignedMode::Precise, Value::UInt(u64::MAX)),
            Value::Bytes(vec![0, 255, 255, 255, 255, 255, 255, 255, 255])
        );
        assert_eq!(
            apply(BigIntUnsignedMode::Precise, Value::Int(256)),
            Value::Bytes(vec![1, 0])
        );
        // Signed BIGINT is not BIGINT UNSIGNED.
        let signed = ColumnKind::Int {
            unsigned: false,
            bytes: 8,
        };
        let precise = modes(|m| m.bigint_unsigned = BigIntUnsignedMode::Precise);
        assert_eq!(
            precise.apply(&signed, Value::Int(-1)).unwrap(),
            Value::Int(-1)
        );
    }

    #[test]
    fn connect_times_are_milliseconds() {
        let connect = modes(|m| m.time_precision = TimePrecisionMode::Connect);
        // 12:34:56.789999 → 45296789 ms (rounded down, as Duration.toMillis).
        assert_eq!(
            connect
                .apply(&ColumnKind::Time, Value::Int(45_296_789_999))
                .unwrap(),
            Value::Int(45_296_789)
        );
        assert_eq!(
            connect
                .apply(&ColumnKind::Time, Value::Int(DAY_MICROS))
                .unwrap(),
            Value::Int(86_400_000)
        );
        let err = connect
            .apply(&ColumnKind::Time, Value::Int(-1))
            .unwrap_err();
        assert!(
            err.to_string().contains("adaptive_time_microseconds"),
            "{err}"
        );
        let err = connect
            .apply(
                &ColumnKind::Time,
                Value::Int(-((838 * 3600 + 59 * 60 + 59) * 1_000_000)),
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("TIME value -838:59:59.000000 is outside"),
            "{err}"
        );
        // DATETIME(6) is in microseconds, DATETIME(3) already in milliseconds.
        assert_eq!(
            connect
                .apply(&ColumnKind::DateTime { fsp: 6 }, Value::Int(-1_500))
                .unwrap(),
            Value::Int(-2)
        );
        assert_eq!(
            connect
                .apply(&ColumnKind::DateTime { fsp: 3 }, Value::Int(-1_500))
                .unwrap(),
            Value::Int(-1_500)
        );
        let adaptive = ValueModes::TRIBUTARY;
        assert_eq!(
            adaptive.apply(&ColumnKind::Time, Value::Int(-1)).unwrap(),
            Value::Int(-1)
        );
    }

    #[test]
    fn binary_modes() {
        let kind = ColumnKind::Binary { fixed_len: None };
        let bytes = Value::Bytes(vec![0xfb, 0xff, 0x00, 0x3e]);
        let apply = |mode| {
            modes(|m| m.binary = mode)
                .apply(&kind, bytes.clone())
                .unwrap()
        };
        assert_eq!(apply(BinaryMode::Bytes), bytes);
        assert_eq!(apply(BinaryMode::Base64), Value::String("+/8APg==".into()));
        assert_eq!(
            apply(BinaryMode::Base64UrlSafe),
            Value::String("-_8APg==".into())
        );
        assert_eq!(apply(BinaryMode::Hex), Value::String("fbff003e".into()));
        // BIT(n) is Debezium's Bits, not a binary column.
        let bits = modes(|m| m.binary = BinaryMode::Hex)
            .apply(&ColumnKind::Bit { bits: 9 }, bytes.clone())
            .unwrap();
        assert_eq!(bits, bytes);
    }

    #[test]
    fn nulls_stay_null() {
        let all = ValueModes {
            decimal: DecimalMode::Precise,
            bigint_unsigned: BigIntUnsignedMode::Precise,
            time_precision: TimePrecisionMode::Connect,
            binary: BinaryMode::Hex,
        };
        for kind in [
            ColumnKind::Decimal,
            ColumnKind::Time,
            ColumnKind::Binary { fixed_len: None },
        ] {
            assert_eq!(all.apply(&kind, Value::Null).unwrap(), Value::Null);
        }
    }
}
