//! A column's default as Debezium's PostgreSQL connector declares it in the
//! Connect schemas (and as `converter.replace.null.with.default` writes
//! NULLs): a literal the catalog shows (`pg_get_expr`: `42`, `true`,
//! `'it''s'::character varying`, `'2024-02-29'::date`) is decoded as the
//! column's values are; a function's value (`now()`, `nextval(…)`,
//! `CURRENT_DATE`) is Debezium's stand-in for the type (zero, `false`, the
//! empty string, `{}`, the nil UUID, the epoch) or none; any other expression
//! (an operator, a cast of an expression) and `NULL` declare none.

use tributary_proto::Value;

use crate::postgres::pg_type::PgType;
use crate::postgres::text_value;
use crate::schema::ColumnKind;
use crate::value_modes::ValueModes;

/// SQL's date and time keywords a default may be (`pg_get_expr` shows them
/// as they were written), besides function calls.
const CURRENT_DATE_TIMES: [&str; 5] = [
    "current_timestamp",
    "current_time",
    "current_date",
    "localtime",
    "localtimestamp",
];

/// The default `expr` (`pg_get_expr` of the column's default) declares for a
/// column of type `ty`, written as its values are in `modes`; `None` when
/// it declares none, or a literal the type does not read.
pub(crate) fn value(
    expr: &str,
    ty: &PgType,
    kind: &ColumnKind,
    modes: &ValueModes,
) -> Option<Value> {
    let text = match declared(expr)? {
        Declared::Literal(text) => text,
        Declared::Generated => stand_in(ty)?.to_owned(),
    };
    let text = match ty {
        PgType::Numeric(Some((_, scale))) => with_scale(text, *scale),
        _ => text,
    };
    let value = text_value::decode(ty, text.as_bytes()).ok()?;
    modes.apply(kind, value).ok()
}

/// What a default expression declares.
#[derive(Debug, PartialEq)]
enum Declared {
    /// A literal's value, in its type's text form.
    Literal(String),
    /// A value a function gives when the row is written.
    Generated,
}

/// What `expr` declares: a quoted string (its `''` undoubled) with nothing
/// after it but casts to a type, a bare number, `true`/`false` (as the text
/// form, `t`/`f`, writes them), or a function's value; `None` for anything
/// else.
fn declared(expr: &str) -> Option<Declared> {
    let expr = expr.trim();
    if let Some(quoted) = expr.strip_prefix('\'') {
        let (text, rest) = unquote(quoted)?;
        return only_casts(rest).then_some(Declared::Literal(text));
    }
    match expr {
        "true" => return Some(Declared::Literal("t".into())),
        "false" => return Some(Declared::Literal("f".into())),
        _ => {}
    }
    if is_call(expr) || CURRENT_DATE_TIMES.contains(&expr.to_ascii_lowercase().as_str()) {
        return Some(Declared::Generated);
    }
    // A negative number may be shown in parentheses.
    let number = expr
        .strip_prefix('(')
        .and_then(|e| e.strip_suffix(')'))
        .unwrap_or(expr);
    is_number(number).then(|| Declared::Literal(number.to_owned()))
}

/// Debezium's stand-in, as text, for a function's default in a column of
/// type `ty`, where it declares one.
fn stand_in(ty: &PgType) -> Option<&'static str> {
    Some(match ty {
        PgType::Int2 | PgType::Int4 | PgType::Int8 | PgType::Float4 | PgType::Float8 => "0",
        PgType::Numeric(_) => "0",
        PgType::Bool => "f",
        PgType::Text | PgType::Xml => "",
        PgType::Json => "{}",
        PgType::Uuid => "00000000-0000-0000-0000-000000000000",
        PgType::Date => "1970-01-01",
        PgType::Time(_) => "00:00:00",
        PgType::Timestamp(_) => "1970-01-01 00:00:00",
        PgType::TimestampTz(_) => "1970-01-01 00:00:00+00",
        _ => return None,
    })
}

/// A decimal's text with at least `scale` digits after its point (a row's
/// value of the column has them: `1.5` in a `numeric(10,2)` is `1.50`).
fn with_scale(text: String, scale: u32) -> String {
    if text.contains(['e', 'E']) {
        return text;
    }
    let digits = text
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.len());
    let missing = (scale as usize).saturating_sub(digits);
    if missing == 0 {
        return text;
    }
    let point = if digits == 0 { "." } else { "" };
    format!("{text}{point}{}", "0".repeat(missing))
}

/// `expr` is a function call (`now()`, `nextval('s'::regclass)`), perhaps
/// in parentheses, and nothing else (`now() + '1 day'` is not).
fn is_call(expr: &str) -> bool {
    let expr = expr
        .strip_prefix('(')
        .and_then(|e| e.strip_suffix(')'))
        .unwrap_or(expr);
    let name_len = expr
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(expr.len());
    let args = &expr[name_len..];
    if name_len == 0 || !args.starts_with('(') {
        return false;
    }
    // The parenthesis that closes the arguments ends the expression.
    let (mut depth, mut quoted) = (0usize, false);
    for (i, c) in args.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => {
                depth -= 1;
                if depth == 0 {
                    return i + 1 == args.len();
                }
            }
            _ => {}
        }
    }
    false
}

/// The text of a string literal whose opening quote is gone, and what
/// follows its closing quote; `None` when it does not close.
fn unquote(quoted: &str) -> Option<(String, &str)> {
    let mut text = String::new();
    let mut chars = quoted.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '\'' {
            text.push(c);
        } else if chars.peek().is_some_and(|&(_, next)| next == '\'') {
            chars.next();
            text.push('\'');
        } else {
            return Some((text, &quoted[i + 1..]));
        }
    }
    None
}

/// `rest` is nothing, or casts to types (`::character varying`,
/// `::"char"`, `::text[]`, `::public.mood`), with no operator or call.
fn only_casts(rest: &str) -> bool {
    rest.is_empty()
        || rest.strip_prefix("::").is_some_and(|types| {
            types.split("::").all(|ty| {
                !ty.is_empty()
                    && ty.chars().all(|c| {
                        c.is_alphanumeric() || matches!(c, '_' | ' ' | '"' | '.' | '[' | ']')
                    })
            })
        })
}

/// A bare numeric constant: digits with an optional sign, point and exponent.
fn is_number(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    digits.starts_with(|c: char| c.is_ascii_digit())
        && digits.parse::<f64>().is_ok()
        && digits
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_give_their_text_form() {
        for (expr, text) in [
            ("42", "42"),
            ("1.5", "1.5"),
            ("(-1.5)", "-1.5"),
            ("1e10", "1e10"),
            ("true", "t"),
            ("false", "f"),
            ("'-5'::integer", "-5"),
            ("'it''s'::character varying", "it's"),
            ("''::text", ""),
            ("'2024-02-29'::date", "2024-02-29"),
            ("'{a,b}'::text[]", "{a,b}"),
            ("'happy'::public.mood", "happy"),
            ("'x'::\"char\"", "x"),
            ("'a::b'", "a::b"),
            ("'1'::text::integer", "1"),
        ] {
            assert_eq!(
                declared(expr),
                Some(Declared::Literal(text.into())),
                "{expr}"
            );
        }
    }

    #[test]
    fn functions_are_generated_values() {
        for expr in [
            "now()",
            "CURRENT_TIMESTAMP",
            "current_date",
            "nextval('t_id_seq'::regclass)",
            "gen_random_uuid()",
            "pg_catalog.now()",
        ] {
            assert_eq!(declared(expr), Some(Declared::Generated), "{expr}");
        }
        assert_eq!(
            stand_in(&PgType::TimestampTz(6)),
            Some("1970-01-01 00:00:00+00")
        );
        assert_eq!(stand_in(&PgType::Bytea), None);
    }

    #[test]
    fn decimals_take_their_columns_scale() {
        for (text, scale, scaled) in [
            ("1.5", 2, "1.50"),
            ("0", 2, "0.00"),
            ("-3", 1, "-3.0"),
            ("1.234", 2, "1.234"),
            ("7", 0, "7"),
        ] {
            assert_eq!(with_scale(text.into(), scale), scaled);
        }
    }

    #[test]
    fn other_expressions_and_null_declare_nothing() {
        for expr in [
            "NULL::integer",
            "NULL",
            "('now'::text)::date",
            "'a'::text || 'b'::text",
            "(1 + 2)",
            "'unclosed",
            "now() + '1 day'::interval",
            "(now() - '1 hour'::interval)",
            "lower('A'::text) || 'b'::text",
            "- 1",
            "1.5.5",
        ] {
            assert_eq!(declared(expr), None, "{expr}");
        }
    }
}
