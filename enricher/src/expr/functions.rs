//! The functions expressions may call: NULL handling, strings, and JSON
//! (`JSON_VALUE` with an RFC 9535 path, by `serde_json_path`).

use std::borrow::Cow;

use serde_json::Value;
use sqlparser::ast;

use super::{EvalError, Expr, Kind, Scope};

/// A function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// `COALESCE(a, b, …)`: the first that is not NULL.
    Coalesce,
    /// `NULLIF(a, b)`: NULL when `a = b`, else `a`.
    NullIf,
    /// `LOWER(s)`.
    Lower,
    /// `UPPER(s)`.
    Upper,
    /// `CONCAT(a, b, …)` and `a || b`: NULL when any is NULL (numbers and
    /// booleans are written as text).
    Concat,
    /// `CONCAT_WS(separator, a, …)`: NULL arguments are skipped.
    ConcatWs,
    /// `SUBSTRING(s FROM start [FOR length])` (1-based, in characters).
    Substring,
    /// `TRIM([BOTH] [chars FROM] s)`.
    Trim,
    /// `TRIM(LEADING …)`.
    TrimLeading,
    /// `TRIM(TRAILING …)`.
    TrimTrailing,
    /// `CHAR_LENGTH(s)` / `CHARACTER_LENGTH(s)`: characters.
    CharLength,
    /// `JSON_VALUE(json, 'path')`: the scalar at the path of a JSON object
    /// (or of JSON text), NULL when absent or not a scalar.
    JsonValue,
}

/// Aggregate and window functions, named in the error that refuses them.
pub(super) fn is_aggregate(name: &str) -> bool {
    matches!(
        name,
        "COUNT"
            | "SUM"
            | "AVG"
            | "MIN"
            | "MAX"
            | "LISTAGG"
            | "COLLECT"
            | "ROW_NUMBER"
            | "RANK"
            | "DENSE_RANK"
            | "FIRST_VALUE"
            | "LAST_VALUE"
            | "LAG"
            | "LEAD"
            | "TUMBLE"
            | "HOP"
            | "SESSION"
            | "CUMULATE"
    )
}

impl Function {
    /// The function called `name` (upper case).
    pub fn named(name: &str) -> Option<Function> {
        Some(match name {
            "COALESCE" => Function::Coalesce,
            "NULLIF" => Function::NullIf,
            "LOWER" => Function::Lower,
            "UPPER" => Function::Upper,
            "CONCAT" => Function::Concat,
            "CONCAT_WS" => Function::ConcatWs,
            "CHAR_LENGTH" | "CHARACTER_LENGTH" => Function::CharLength,
            "JSON_VALUE" => Function::JsonValue,
            _ => return None,
        })
    }

    /// The name in SQL.
    pub fn name(self) -> &'static str {
        match self {
            Function::Coalesce => "COALESCE",
            Function::NullIf => "NULLIF",
            Function::Lower => "LOWER",
            Function::Upper => "UPPER",
            Function::Concat => "CONCAT",
            Function::ConcatWs => "CONCAT_WS",
            Function::Substring => "SUBSTRING",
            Function::Trim => "TRIM",
            Function::TrimLeading => "TRIM(LEADING)",
            Function::TrimTrailing => "TRIM(TRAILING)",
            Function::CharLength => "CHAR_LENGTH",
            Function::JsonValue => "JSON_VALUE",
        }
    }

    /// The kind of the results.
    pub fn kind(self) -> Kind {
        match self {
            Function::Coalesce | Function::NullIf | Function::JsonValue => Kind::Any,
            Function::CharLength => Kind::Number,
            _ => Kind::Text,
        }
    }

    /// Checks the arguments: their number and known kinds.
    pub(super) fn check(self, args: &[(&ast::Expr, Expr)]) -> Result<(), String> {
        let (min, max) = match self {
            Function::Coalesce => (1, usize::MAX),
            Function::NullIf | Function::JsonValue => (2, 2),
            Function::Concat => (1, usize::MAX),
            Function::ConcatWs => (2, usize::MAX),
            Function::Substring => (2, 3),
            Function::Trim | Function::TrimLeading | Function::TrimTrailing => (1, 2),
            Function::Lower | Function::Upper | Function::CharLength => (1, 1),
        };
        if args.len() < min || args.len() > max {
            let expected = match (min, max) {
                (min, usize::MAX) => format!("at least {min}"),
                (min, max) if min == max => min.to_string(),
                (min, max) => format!("{min} to {max}"),
            };
            return Err(format!(
                "{} takes {expected} argument(s), not {}",
                self.name(),
                args.len()
            ));
        }
        let text_args = match self {
            Function::Lower
            | Function::Upper
            | Function::CharLength
            | Function::Substring
            | Function::Trim
            | Function::TrimLeading
            | Function::TrimTrailing => 1,
            _ => 0,
        };
        for (source, arg) in &args[..text_args] {
            let kind = arg.kind();
            if kind != Kind::Any && kind != Kind::Text {
                return Err(format!(
                    "{} needs text, not {}: `{source}`",
                    self.name(),
                    kind.name()
                ));
            }
        }
        if self == Function::JsonValue && !matches!(args[1].1, Expr::Literal(Value::String(_))) {
            return Err(format!(
                "JSON_VALUE's path must be a string literal such as '$.a.b', not `{}`",
                args[1].0
            ));
        }
        Ok(())
    }

    /// The result for `args` in `scope`.
    pub(super) fn call(self, args: &[Expr], scope: &dyn Scope) -> Result<Value, EvalError> {
        match self {
            Function::Coalesce => {
                for arg in args {
                    let value = arg.eval(scope)?;
                    if !value.is_null() {
                        return Ok(value);
                    }
                }
                Ok(Value::Null)
            }
            Function::NullIf => {
                let a = args[0].eval(scope)?;
                let b = args[1].eval(scope)?;
                Ok(match super::ops::compare(&a, &b)? {
                    Some(o) if o.is_eq() => Value::Null,
                    _ => a,
                })
            }
            Function::Concat => {
                let mut out = String::new();
                for arg in args {
                    match text_of(&arg.eval(scope)?, "CONCAT")? {
                        Some(piece) => out.push_str(&piece),
                        None => return Ok(Value::Null),
                    }
                }
                Ok(Value::String(out))
            }
            Function::ConcatWs => {
                let separator = args[0].eval(scope)?;
                let Some(separator) = text_of(&separator, "CONCAT_WS")? else {
                    return Ok(Value::Null);
                };
                let mut pieces = Vec::with_capacity(args.len() - 1);
                for arg in &args[1..] {
                    if let Some(piece) = text_of(&arg.eval(scope)?, "CONCAT_WS")? {
                        pieces.push(piece.into_owned());
                    }
                }
                Ok(Value::String(pieces.join(&separator)))
            }
            _ => self.on_text(args, scope),
        }
    }

    /// The functions of one string (and numbers after it).
    fn on_text(self, args: &[Expr], scope: &dyn Scope) -> Result<Value, EvalError> {
        let name = self.name();
        let value = args[0].eval(scope)?;
        let text = match &value {
            Value::Null => return Ok(Value::Null),
            Value::String(s) => s.as_str(),
            other => {
                return Err(EvalError(format!("{name} needs text, not {other}")));
            }
        };
        let mut rest = Vec::with_capacity(args.len() - 1);
        for arg in &args[1..] {
            let value = arg.eval(scope)?;
            if value.is_null() {
                return Ok(Value::Null);
            }
            rest.push(value);
        }
        Ok(match self {
            Function::Lower => Value::String(text.to_lowercase()),
            Function::Upper => Value::String(text.to_uppercase()),
            Function::CharLength => Value::from(text.chars().count()),
            Function::Substring => {
                let whole = |v: &Value, what: &str| {
                    v.as_i64().ok_or_else(|| {
                        EvalError(format!("SUBSTRING's {what} must be an integer, not {v}"))
                    })
                };
                let start = whole(&rest[0], "start")?;
                let length = rest.get(1).map(|l| whole(l, "length")).transpose()?;
                Value::String(substring(text, start, length)?)
            }
            Function::Trim | Function::TrimLeading | Function::TrimTrailing => {
                let set: Vec<char> = match rest.first() {
                    Some(Value::String(chars)) => chars.chars().collect(),
                    Some(other) => {
                        return Err(EvalError(format!(
                            "TRIM's characters must be text, not {other}"
                        )));
                    }
                    None => vec![' '],
                };
                let trimmed = match self {
                    Function::TrimLeading => text.trim_start_matches(set.as_slice()),
                    Function::TrimTrailing => text.trim_end_matches(set.as_slice()),
                    _ => text.trim_matches(set.as_slice()),
                };
                Value::String(trimmed.to_owned())
            }
            _ => unreachable!("{self:?} is not a function of text"),
        })
    }
}

/// SQL's SUBSTRING: characters `start ..< start + length`, 1-based, where
/// positions before the first character count but select nothing.
fn substring(text: &str, start: i64, length: Option<i64>) -> Result<String, EvalError> {
    let end = match length {
        Some(l) if l < 0 => {
            return Err(EvalError(format!("SUBSTRING's length is negative ({l})")));
        }
        Some(l) => Some(start.saturating_add(l)),
        None => None,
    };
    let first = start.max(1);
    Ok(text
        .chars()
        .enumerate()
        .map(|(i, c)| (i as i64 + 1, c))
        .skip_while(|(position, _)| *position < first)
        .take_while(|(position, _)| end.is_none_or(|end| *position < end))
        .map(|(_, c)| c)
        .collect())
}

/// A value as text for CONCAT (`None`: NULL); objects and arrays are refused.
fn text_of<'v>(value: &'v Value, function: &str) -> Result<Option<Cow<'v, str>>, EvalError> {
    Ok(Some(match value {
        Value::Null => return Ok(None),
        Value::String(s) => Cow::Borrowed(s.as_str()),
        Value::Number(n) => Cow::Owned(n.to_string()),
        Value::Bool(b) => Cow::Borrowed(if *b { "TRUE" } else { "FALSE" }),
        other => {
            return Err(EvalError(format!(
                "{function} needs text, numbers or booleans, not {other}"
            )));
        }
    }))
}

/// A JSON path of `JSON_VALUE`, parsed once.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    text: String,
    path: serde_json_path::JsonPath,
}

impl JsonPath {
    /// Parses `text` (RFC 9535: `$.a.b`, `$.items[0].sku`, `$['odd name']`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let path = serde_json_path::JsonPath::parse(text).map_err(|e| {
            format!("{text:?} is not a JSON path ({e}); e.g. '$.a.b' or '$.items[0]'")
        })?;
        Ok(JsonPath {
            text: text.to_owned(),
            path,
        })
    }

    /// The scalar at the path in `value` (an object or array, or JSON text).
    pub fn value_in(&self, value: Value) -> Result<Value, EvalError> {
        let document = match value {
            Value::Null => return Ok(Value::Null),
            Value::String(text) => serde_json::from_str(&text).map_err(|e| {
                EvalError(format!(
                    "JSON_VALUE({}): the text is not JSON: {e}",
                    self.text
                ))
            })?,
            other => other,
        };
        let found = self.path.query(&document).at_most_one().map_err(|_| {
            EvalError(format!(
                "JSON_VALUE: {} selects more than one value",
                self.text
            ))
        })?;
        Ok(match found {
            Some(Value::Object(_) | Value::Array(_)) | None => Value::Null,
            Some(scalar) => scalar.clone(),
        })
    }
}
