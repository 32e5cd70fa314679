//! Debezium's value converter modes: how a decoded DECIMAL, BIGINT UNSIGNED,
//! TIME/DATETIME or binary column is written, under Debezium's property names
//! and values (`decimal.handling.mode`, `bigint.unsigned.handling.mode`,
//! `time.precision.mode`, `binary.handling.mode`), and GEOMETRY as bytes or
//! Debezium's structs (`geometry.handling.mode`).
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
use tributary_proto::{Geometry, Value};

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

/// `geometry.handling.mode` (Tributary's name; Debezium has no such option
/// and always writes structs): GEOMETRY columns and their subtypes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GeometryMode {
    /// MySQL's internal form (4-byte little-endian SRID, then the WKB), base64
    /// in JSON. Tributary's default.
    Bytes,
    /// Debezium's structs: `io.debezium.data.geometry.Point` `{x, y, wkb,
    /// srid}` for a POINT column, `Geometry` `{wkb, srid}` for the others (an
    /// SRID of 0 is `null`).
    Struct,
}

/// The modes together.
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
    /// GEOMETRY.
    pub geometry: GeometryMode,
}

impl ValueModes {
    /// Tributary's defaults: what capture wrote before these modes existed.
    pub const TRIBUTARY: ValueModes = ValueModes {
        decimal: DecimalMode::String,
        bigint_unsigned: BigIntUnsignedMode::Number,
        time_precision: TimePrecisionMode::AdaptiveTimeMicroseconds,
        binary: BinaryMode::Bytes,
        geometry: GeometryMode::Bytes,
    };

    /// Debezium's MySQL connector's defaults.
    pub const DEBEZIUM: ValueModes = ValueModes {
        decimal: DecimalMode::Precise,
        bigint_unsigned: BigIntUnsignedMode::Long,
        time_precision: TimePrecisionMode::AdaptiveTimeMicroseconds,
        binary: BinaryMode::Bytes,
        geometry: GeometryMode::Struct,
    };

    /// `value` (as the decoders give it for a column of `kind`) in these modes.
    pub fn apply(&self, kind: &ColumnKind, value: Value) -> Result<Value, ValueError> {
        if value == Value::Null {
            return Ok(value);
        }
        match kind {
            ColumnKind::Decimal => self.decimal(value),
            ColumnKind::VariableDecimal => self.variable_decimal(value),
            ColumnKind::Array(element) => match value {
                Value::Array(items) => Ok(Value::Array(
                    items
                        .into_iter()
                        .map(|item| self.apply(element, item))
                        .collect::<Result<_, _>>()?,
                )),
                other => Ok(other),
            },
            ColumnKind::Int {
                unsigned: true,
                bytes: 8,
            } => Ok(self.bigint_unsigned(value)),
            ColumnKind::Time => self.time(value),
            ColumnKind::DateTime { fsp } => Ok(self.datetime(value, *fsp)),
            ColumnKind::Binary { .. } => Ok(self.binary(value)),
            ColumnKind::Geometry { point } if self.geometry == GeometryMode::Struct => {
                geometry(value, *point)
            }
            _ => Ok(value),
        }
    }

    fn decimal(&self, value: Value) -> Result<Value, ValueError> {
        let Value::String(text) = value else {
            return Ok(value);
        };
        if !is_finite_decimal(&text) {
            return self.special_decimal(text);
        }
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

    /// A NUMERIC without declared scale: precise, Debezium's
    /// `VariableScaleDecimal` struct (the value's scale with trailing zeros
    /// dropped, as `BigDecimal.stripTrailingZeros`, and its unscaled bytes).
    fn variable_decimal(&self, value: Value) -> Result<Value, ValueError> {
        let Value::String(text) = &value else {
            return Ok(value);
        };
        if self.decimal != DecimalMode::Precise || !is_finite_decimal(text) {
            return self.decimal(value);
        }
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        let frac = frac.trim_end_matches('0');
        let unscaled: BigInt =
            format!("{int}{frac}")
                .parse()
                .map_err(|_| ValueError::NotANumber {
                    column_type: "NUMERIC",
                    text: text.clone(),
                })?;
        // Debezium strips trailing zeros, but keeps the scale at 0 or more.
        let scale = if unscaled == BigInt::ZERO {
            0
        } else {
            frac.len() as i64
        };
        Ok(Value::Struct(vec![
            ("scale", Value::Int(scale)),
            ("value", Value::Bytes(unscaled.to_signed_bytes_be())),
        ]))
    }

    /// PostgreSQL's `NaN`, `Infinity` and `-Infinity` NUMERICs as Debezium
    /// writes them: names in `string` mode, doubles in `double` mode, and
    /// none in `precise` mode (Debezium stops there too).
    fn special_decimal(&self, text: String) -> Result<Value, ValueError> {
        let name = match text.as_str() {
            "NaN" => "NAN",
            "Infinity" => "POSITIVE_INFINITY",
            "-Infinity" => "NEGATIVE_INFINITY",
            _ => {
                return Err(ValueError::NotANumber {
                    column_type: "DECIMAL",
                    text,
                });
            }
        };
        match self.decimal {
            DecimalMode::String => Ok(Value::String(name.to_owned())),
            DecimalMode::Double => Ok(Value::Float(
                text.parse().expect("NaN and infinities parse"),
            )),
            DecimalMode::Precise => Err(ValueError::OutOfRange {
                what: "NUMERIC",
                value: text,
                range: "finite numbers in values.decimal.handling.mode precise: \
                        set it to string or double to capture NaN and infinities",
            }),
        }
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

/// Whether a decimal's text is a number (PostgreSQL's NUMERIC can also be
/// `NaN`, `Infinity` or `-Infinity`).
fn is_finite_decimal(text: &str) -> bool {
    text.bytes().any(|b| b.is_ascii_digit())
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-' || b == b'+')
}

/// MySQL's internal geometry (SRID, then WKB) as Debezium's struct; a POINT
/// column's WKB must be a 2D point.
fn geometry(value: Value, point: bool) -> Result<Value, ValueError> {
    let Value::Bytes(bytes) = value else {
        return Ok(value);
    };
    let bad = |detail: &str| ValueError::Geometry(detail.to_owned());
    let (srid, wkb) = bytes
        .split_first_chunk::<4>()
        .ok_or_else(|| bad("shorter than its 4-byte SRID"))?;
    let srid = i32::from_le_bytes(*srid);
    let point = if point {
        Some(point_of(wkb).ok_or_else(|| bad("a POINT column's value is not a 2D point"))?)
    } else {
        None
    };
    Ok(Value::Geometry(Box::new(Geometry {
        wkb: wkb.to_vec(),
        srid: (srid != 0).then_some(srid),
        point,
    })))
}

/// `x` and `y` of a 2D point's WKB (byte order, type 1, two doubles).
fn point_of(wkb: &[u8]) -> Option<(f64, f64)> {
    let [order, rest @ ..] = wkb else { return None };
    if rest.len() != 20 {
        return None;
    }
    let little = *order == 1;
    let u32_at = |b: &[u8]| {
        let b: [u8; 4] = b.try_into().ok()?;
        Some(if little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let f64_at = |b: &[u8]| {
        let b: [u8; 8] = b.try_into().ok()?;
        Some(if little {
            f64::from_le_bytes(b)
        } else {
            f64::from_be_bytes(b)
        })
    };
    (u32_at(&rest[..4])? == 1).then_some(())?;
    Some((f64_at(&rest[4..12])?, f64_at(&rest[12..20])?))
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

    /// Debezium's `VariableScaleDecimal`: `stripTrailingZeros`, scale kept at
    /// 0 or more; PostgreSQL's specials as Debezium writes them.
    #[test]
    fn variable_scale_decimals_and_specials() {
        let precise = modes(|m| m.decimal = DecimalMode::Precise);
        let variable = |text: &str| {
            precise
                .apply(&ColumnKind::VariableDecimal, Value::String(text.into()))
                .unwrap()
        };
        let decimal = |scale: i64, bytes: &[u8]| {
            Value::Struct(vec![
                ("scale", Value::Int(scale)),
                ("value", Value::Bytes(bytes.to_vec())),
            ])
        };
        assert_eq!(variable("1.2300"), decimal(2, &[123]));
        assert_eq!(variable("100"), decimal(0, &[100]));
        assert_eq!(variable("-0.000"), decimal(0, &[0]));
        assert_eq!(variable("-1.28"), decimal(2, &[128]));
        let string = ValueModes::TRIBUTARY;
        assert_eq!(
            string.apply(&ColumnKind::VariableDecimal, Value::String("1.2300".into())),
            Ok(Value::String("1.2300".into()))
        );
        for kind in [ColumnKind::Decimal, ColumnKind::VariableDecimal] {
            let nan = || Value::String("NaN".into());
            assert_eq!(string.apply(&kind, nan()), Ok(Value::String("NAN".into())));
            assert!(precise.apply(&kind, nan()).is_err());
            let double = modes(|m| m.decimal = DecimalMode::Double);
            assert_eq!(
                double.apply(&kind, Value::String("-Infinity".into())),
                Ok(Value::Float(f64::NEG_INFINITY))
            );
        }
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

    /// MySQL's internal form: the SRID (4 bytes, little-endian), then the WKB.
    fn internal(srid: u32, wkb: &[u8]) -> Value {
        Value::Bytes(srid.to_le_bytes().iter().chain(wkb).copied().collect())
    }

    #[test]
    fn geometries_become_debeziums_structs() {
        let modes = ValueModes::DEBEZIUM;
        // POINT(1.5 -2): byte order 1 (little-endian), type 1, x, y.
        let mut wkb = vec![1, 1, 0, 0, 0];
        wkb.extend(1.5f64.to_le_bytes());
        wkb.extend((-2.0f64).to_le_bytes());
        let point = ColumnKind::Geometry { point: true };
        assert_eq!(
            modes.apply(&point, internal(4326, &wkb)).unwrap(),
            Value::Geometry(Box::new(Geometry {
                wkb: wkb.clone(),
                srid: Some(4326),
                point: Some((1.5, -2.0)),
            }))
        );
        // The same point in a GEOMETRY column, SRID 0: no coordinates, no SRID.
        let shape = ColumnKind::Geometry { point: false };
        assert_eq!(
            modes.apply(&shape, internal(0, &wkb)).unwrap(),
            Value::Geometry(Box::new(Geometry {
                wkb: wkb.clone(),
                srid: None,
                point: None,
            }))
        );
        // Big-endian WKB reads the same.
        let mut big = vec![0, 0, 0, 0, 1];
        big.extend(1.5f64.to_be_bytes());
        big.extend((-2.0f64).to_be_bytes());
        let Value::Geometry(read) = modes.apply(&point, internal(0, &big)).unwrap() else {
            panic!("a struct");
        };
        assert_eq!(read.point, Some((1.5, -2.0)));
        // A LINESTRING in a POINT column, or a value shorter than its SRID, stops capture.
        let line = [1, 2, 0, 0, 0, 0, 0, 0, 0];
        assert!(modes.apply(&point, internal(0, &line)).is_err());
        assert!(modes.apply(&shape, Value::Bytes(vec![1, 2])).is_err());
        // Tributary's default: the internal form, as it is.
        assert_eq!(
            ValueModes::TRIBUTARY
                .apply(&point, internal(4326, &wkb))
                .unwrap(),
            internal(4326, &wkb)
        );
    }

    #[test]
    fn nulls_stay_null() {
        let all = ValueModes {
            decimal: DecimalMode::Precise,
            bigint_unsigned: BigIntUnsignedMode::Precise,
            time_precision: TimePrecisionMode::Connect,
            binary: BinaryMode::Hex,
            geometry: GeometryMode::Struct,
        };
        for kind in [
            ColumnKind::Decimal,
            ColumnKind::Time,
            ColumnKind::Binary { fixed_len: None },
            ColumnKind::Geometry { point: true },
        ] {
            assert_eq!(all.apply(&kind, Value::Null).unwrap(), Value::Null);
        }
    }
}
