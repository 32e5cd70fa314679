//! How doubles are written in JSON: Tributary's compact text (`1e+20`,
//! `0.0001`) or as Kafka's `JsonConverter` writes them, through Java's
//! `Double.toString` (`1.0E20`, `1.0E-4`).
//!
//! Both carry the same shortest digits that read back as the same double
//! (JDK 19+ prints the shortest decimal, as Rust does): only the layout
//! differs. Java writes `d.dddE±n` outside `[10^-3, 10^7)` and a plain
//! decimal with at least one fraction digit inside it. One difference is
//! left: for a double whose shortest decimal has one digit and that also
//! rounds from a closer two-digit decimal (only some subnormals below
//! `2.3E-308`, such as `4.9E-324`), Java prints the two digits. JDK 18 and
//! older print a few doubles with more digits than needed (`1e23` as
//! `9.999999999999999E22`); Kafka Connect on those JDKs differs there too.

use serde::{Deserialize, Serialize};
use serde_json::ser::Formatter;
use std::io::{self, Write};

/// The layout of doubles in the JSON Tributary writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DoubleFormat {
    /// serde_json's shortest text: `1e+20`, `0.0001`, `2.5`.
    #[default]
    Compact,
    /// Java's `Double.toString`: `1.0E20`, `1.0E-4`, `2.5`.
    Java,
}

/// `value` as compact JSON with doubles in `format`, appended to `out`.
pub fn write_json(out: &mut Vec<u8>, value: &impl Serialize, format: DoubleFormat) {
    let written = match format {
        DoubleFormat::Compact => serde_json::to_writer(&mut *out, value),
        DoubleFormat::Java => {
            let mut ser = serde_json::Serializer::with_formatter(&mut *out, JavaDoubles);
            value.serialize(&mut ser)
        }
    };
    written.expect("JSON of in-memory values always serialises");
}

/// `value` as compact JSON text with doubles in `format`.
pub fn json_text(value: &impl Serialize, format: DoubleFormat) -> String {
    let mut out = Vec::new();
    write_json(&mut out, value, format);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// A finite double as Java's `Double.toString` (JDK 19+) prints it.
pub fn java_double(value: f64) -> String {
    let mut buffer = ryu::Buffer::new();
    let shortest = buffer.format_finite(value);
    let (negative, unsigned) = match shortest.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, shortest),
    };
    let sign = if negative { "-" } else { "" };
    let Some((digits, exponent)) = decimal_digits(unsigned) else {
        return format!("{sign}0.0");
    };
    let body = if (-3..7).contains(&exponent) {
        plain(&digits, exponent)
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        format!("{first}.{rest}E{exponent}")
    };
    format!("{sign}{body}")
}

/// The significant digits of ryu's unsigned text (no leading or trailing
/// zeros) and the exponent of the first one (`1.5e3` → `("15", 3)`); `None`
/// for zero.
fn decimal_digits(text: &str) -> Option<(String, i32)> {
    let (mantissa, exponent) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().expect("ryu writes an integer exponent")),
        None => (text, 0),
    };
    let point = mantissa.find('.').unwrap_or(mantissa.len());
    let all: String = mantissa.chars().filter(|c| *c != '.').collect();
    let leading = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_start_matches('0').trim_end_matches('0');
    if digits.is_empty() {
        return None;
    }
    let first_exponent = point as i32 - 1 - leading as i32 + exponent;
    Some((digits.to_owned(), first_exponent))
}

/// Digits whose first has `exponent` in `-3..7`, laid out without an exponent
/// and with at least one fraction digit (`("15", 3)` → `1500.0`).
fn plain(digits: &str, exponent: i32) -> String {
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        return format!("0.{zeros}{digits}");
    }
    let whole = exponent as usize + 1;
    if digits.len() <= whole {
        format!("{digits}{}.0", "0".repeat(whole - digits.len()))
    } else {
        format!("{}.{}", &digits[..whole], &digits[whole..])
    }
}

/// serde_json's compact output with doubles as [`java_double`] prints them.
struct JavaDoubles;

impl Formatter for JavaDoubles {
    fn write_f64<W: ?Sized + Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        // serde_json writes non-finite doubles as `null` before reaching here.
        writer.write_all(java_double(value).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected texts are what `Double.toString(x)` printed on OpenJDK 17.0.15
    /// (`java` on the dev machine; JDK 19+ prints the same for these).
    const JAVA: &[(f64, &str)] = &[
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (-2.5, "-2.5"),
        (100.0, "100.0"),
        (0.001, "0.001"),
        (0.000_999_9, "9.999E-4"),
        (0.0001, "1.0E-4"),
        (1_234_567.0, "1234567.0"),
        (9_999_999.5, "9999999.5"),
        (10_000_000.0, "1.0E7"),
        (12_345_678.9, "1.23456789E7"),
        (1e20, "1.0E20"),
        (1.1, "1.1"),
        (0.1 + 0.2, "0.30000000000000004"),
        (123.456, "123.456"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (2.2250738585072014e-308, "2.2250738585072014E-308"),
        (-1.5e-10, "-1.5E-10"),
        (3.0e-3, "0.003"),
    ];

    #[test]
    fn doubles_print_as_javas_double_to_string() {
        for (value, java) in JAVA {
            assert_eq!(java_double(*value), *java, "{value:e}");
            assert_eq!(java.parse::<f64>().unwrap().to_bits(), value.to_bits());
        }
    }

    #[test]
    fn only_doubles_change_with_the_format() {
        let value = serde_json::json!({"d": 1e20, "i": 7, "u": u64::MAX, "s": "1e20", "n": null, "list": [0.0001]});
        assert_eq!(
            json_text(&value, DoubleFormat::Compact),
            r#"{"d":1e+20,"i":7,"u":18446744073709551615,"s":"1e20","n":null,"list":[0.0001]}"#
        );
        assert_eq!(
            json_text(&value, DoubleFormat::Java),
            r#"{"d":1.0E20,"i":7,"u":18446744073709551615,"s":"1e20","n":null,"list":[1.0E-4]}"#
        );
    }
}
