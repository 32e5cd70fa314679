//! Times as change events and rows carry them, read as microseconds since
//! the Unix epoch: what a versioned table's time column holds, and what a
//! job's or a lookup's as-of time names.
//!
//! A time is a number in a declared [`TimeUnit`] (how Debezium writes
//! DATETIME: epoch milliseconds for DATETIME(0–3), microseconds for
//! DATETIME(4–6)) or a text in UTC, RFC 3339 with `Z` or without a zone,
//! `T` or a space between date and time (`2026-12-04T10:00:00.250Z`,
//! `2026-12-04 10:00:00`, how Debezium writes TIMESTAMP).

use std::time::UNIX_EPOCH;

use serde::Deserialize;
use serde_json::Value;

/// The unit of a time given as a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Seconds since the epoch.
    #[serde(alias = "seconds")]
    S,
    /// Milliseconds since the epoch (Debezium's `Timestamp`, Kafka's record time).
    #[default]
    Ms,
    /// Microseconds since the epoch (Debezium's `MicroTimestamp`).
    Us,
}

impl TimeUnit {
    fn micros(self, n: i64) -> Option<i64> {
        match self {
            TimeUnit::S => n.checked_mul(1_000_000),
            TimeUnit::Ms => n.checked_mul(1_000),
            TimeUnit::Us => Some(n),
        }
    }
}

/// Why a value is not a time.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EventTimeError {
    /// Neither a number nor a text.
    #[error("expected a time (a number or an RFC 3339 text), got {0}")]
    NotATime(&'static str),
    /// A text that is not a UTC time.
    #[error("{0:?} is not a UTC time (RFC 3339 with Z or no zone, e.g. 2026-12-04T10:00:00Z)")]
    BadText(String),
    /// A number that is not a whole time in range.
    #[error("{0} is not a whole number of {1:?} in range")]
    BadNumber(String, TimeUnit),
}

/// The time `value` holds, in microseconds since the epoch; numbers are in `unit`.
pub fn micros_of(value: &Value, unit: TimeUnit) -> Result<i64, EventTimeError> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| unit.micros(n))
            .ok_or_else(|| EventTimeError::BadNumber(n.to_string(), unit)),
        Value::String(text) => parse_text(text),
        Value::Null => Err(EventTimeError::NotATime("null")),
        Value::Bool(_) => Err(EventTimeError::NotATime("a boolean")),
        Value::Array(_) => Err(EventTimeError::NotATime("an array")),
        Value::Object(_) => Err(EventTimeError::NotATime("an object")),
    }
}

/// A UTC time written as text, in microseconds since the epoch.
pub fn parse_text(text: &str) -> Result<i64, EventTimeError> {
    let bad = || EventTimeError::BadText(text.to_owned());
    let time = humantime::parse_rfc3339_weak(text).map_err(|_| bad())?;
    let since = time.duration_since(UNIX_EPOCH).map_err(|_| bad())?;
    i64::try_from(since.as_micros()).map_err(|_| bad())
}

/// A time in microseconds since the epoch, as RFC 3339 text in UTC (for messages).
pub fn format_micros(micros: i64) -> String {
    match u64::try_from(micros) {
        Ok(us) => {
            humantime::format_rfc3339_micros(UNIX_EPOCH + std::time::Duration::from_micros(us))
                .to_string()
        }
        Err(_) => format!("{micros} µs before the epoch"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn numbers_in_their_unit_and_utc_texts() {
        // 2026-12-04T10:00:00Z, from `date -u -d 2026-12-04T10:00:00Z +%s`.
        let seconds = 1_796_378_400_i64;
        let us = seconds * 1_000_000;
        assert_eq!(micros_of(&json!(seconds), TimeUnit::S), Ok(us));
        assert_eq!(micros_of(&json!(seconds * 1000), TimeUnit::Ms), Ok(us));
        assert_eq!(micros_of(&json!(us + 7), TimeUnit::Us), Ok(us + 7));
        for text in [
            "2026-12-04T10:00:00Z",
            "2026-12-04 10:00:00",
            "2026-12-04T10:00:00",
        ] {
            assert_eq!(micros_of(&json!(text), TimeUnit::Ms), Ok(us), "{text}");
        }
        assert_eq!(parse_text("2026-12-04T10:00:00.000250Z"), Ok(us + 250));
        assert_eq!(format_micros(us + 250), "2026-12-04T10:00:00.000250Z");
    }

    #[test]
    fn what_is_not_a_time_says_why() {
        assert_eq!(
            micros_of(&json!(null), TimeUnit::Ms),
            Err(EventTimeError::NotATime("null"))
        );
        assert!(matches!(
            micros_of(&json!(1.5), TimeUnit::Ms),
            Err(EventTimeError::BadNumber(..))
        ));
        assert!(matches!(
            micros_of(&json!(i64::MAX), TimeUnit::S),
            Err(EventTimeError::BadNumber(..))
        ));
        let zoned = micros_of(&json!("2026-12-04T10:00:00+02:00"), TimeUnit::Ms);
        assert!(
            matches!(&zoned, Err(EventTimeError::BadText(t)) if t.contains("+02:00")),
            "{zoned:?}"
        );
    }
}
