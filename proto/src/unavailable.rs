//! Debezium's placeholder for a value the source did not send: PostgreSQL
//! leaves an unchanged TOASTed value out of an UPDATE (under `REPLICA
//! IDENTITY DEFAULT`), and the event carries this text in its place (its
//! `unavailable.value.placeholder`). Capture writes it; local tables can
//! fill it from the row they hold, recognising it in each form a row's JSON
//! gives it.

use std::sync::LazyLock;

use base64::Engine as _;
use serde_json::Value;

/// The placeholder text.
pub const UNAVAILABLE_VALUE: &str = "__debezium_unavailable_value";

/// The placeholder's forms in JSON strings: the text, its bytes as base64
/// (standard and URL-safe alike, for this text) and as hex.
static FORMS: LazyLock<[String; 3]> = LazyLock::new(|| {
    [
        UNAVAILABLE_VALUE.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(UNAVAILABLE_VALUE),
        UNAVAILABLE_VALUE
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect(),
    ]
});

/// Whether a column's JSON value is the placeholder: the text (text,
/// JSON, and most other columns), its bytes as base64 or hex (binary
/// columns, whatever `binary.handling.mode`), or an array of the text
/// alone (array columns).
pub fn is_unavailable(value: &Value) -> bool {
    match value {
        Value::String(s) => FORMS.contains(s),
        Value::Array(items) => matches!(&items[..], [Value::String(s)] if s == UNAVAILABLE_VALUE),
        _ => false,
    }
}

/// Whether a row's JSON bytes may hold the placeholder (a quick test before
/// parsing: false means it certainly does not).
pub fn may_hold_unavailable(row: &[u8]) -> bool {
    FORMS
        .iter()
        .any(|form| row.windows(form.len()).any(|w| w == form.as_bytes()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_placeholder_is_recognised_in_every_form_and_nothing_else_is() {
        for form in [
            json!("__debezium_unavailable_value"),
            json!("X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="),
            json!("5f5f646562657a69756d5f756e617661696c61626c655f76616c7565"),
            json!(["__debezium_unavailable_value"]),
        ] {
            assert!(is_unavailable(&form), "{form}");
            assert!(may_hold_unavailable(
                json!({ "c": form }).to_string().as_bytes()
            ));
        }
        for other in [
            json!("__debezium_unavailable_value "),
            json!(["__debezium_unavailable_value", "x"]),
            json!(null),
            json!(1),
        ] {
            assert!(!is_unavailable(&other), "{other}");
        }
        assert!(!may_hold_unavailable(br#"{"c":"an ordinary value"}"#));
    }
}
