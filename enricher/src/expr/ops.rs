//! Operators and casts on JSON values, with SQL's NULL rules: arithmetic on
//! integers stays integral (overflow is an error, not a wrap), mixed with a
//! fraction it is done in doubles; comparisons order numbers by value and
//! text by code point, and refuse to compare values of different types.

use std::cmp::Ordering;

use serde_json::{Number, Value};
use sqlparser::ast::DataType;

use super::{EvalError, Kind};

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integral on integers, truncated toward zero)
    Div,
    /// `%`
    Rem,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// Whether two values so ordered satisfy the comparison.
    pub fn holds(self, ordering: Ordering) -> bool {
        match self {
            CmpOp::Eq => ordering.is_eq(),
            CmpOp::Ne => ordering.is_ne(),
            CmpOp::Lt => ordering.is_lt(),
            CmpOp::Le => ordering.is_le(),
            CmpOp::Gt => ordering.is_gt(),
            CmpOp::Ge => ordering.is_ge(),
        }
    }
}

/// The target of a `CAST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CastType {
    /// BIGINT, INT, INTEGER, SMALLINT, TINYINT: a whole number of that many
    /// bits (fractions are truncated toward zero; out of range is an error).
    Integer(u32),
    /// DOUBLE, FLOAT, REAL.
    Double,
    /// DECIMAL(p, s) / NUMERIC(p, s): a number rounded half away from zero to
    /// `s` decimals (held as a double).
    Decimal(u32),
    /// VARCHAR, STRING, CHAR, TEXT.
    Text,
    /// BOOLEAN.
    Boolean,
}

impl CastType {
    /// The target named by `data_type`, if supported.
    pub fn of(data_type: &DataType) -> Option<CastType> {
        let text = data_type.to_string().to_uppercase();
        let (name, args) = match text.split_once('(') {
            Some((name, args)) => (name.trim(), Some(args.trim_end_matches(')'))),
            None => (text.trim(), None),
        };
        Some(match name {
            "BIGINT" | "INT64" => CastType::Integer(64),
            "INT" | "INTEGER" => CastType::Integer(32),
            "SMALLINT" => CastType::Integer(16),
            "TINYINT" => CastType::Integer(8),
            "DOUBLE" | "DOUBLE PRECISION" | "FLOAT" | "REAL" | "FLOAT64" => CastType::Double,
            "DECIMAL" | "NUMERIC" | "DEC" => {
                let scale = match args.map(|a| a.split(',').map(str::trim).collect::<Vec<_>>()) {
                    None => 0,
                    Some(parts) if parts.len() == 1 => 0,
                    Some(parts) if parts.len() == 2 => parts[1].parse().ok()?,
                    Some(_) => return None,
                };
                // A double holds 15 to 17 significant digits.
                (scale <= 15).then_some(CastType::Decimal(scale))?
            }
            "VARCHAR" | "STRING" | "CHAR" | "TEXT" | "CHARACTER VARYING" | "CHARACTER" => {
                CastType::Text
            }
            "BOOLEAN" | "BOOL" => CastType::Boolean,
            _ => return None,
        })
    }

    /// The kind of the cast's results.
    pub fn kind(self) -> Kind {
        match self {
            CastType::Integer(_) | CastType::Double | CastType::Decimal(_) => Kind::Number,
            CastType::Text => Kind::Text,
            CastType::Boolean => Kind::Bool,
        }
    }

    /// `value` cast to this type.
    pub fn apply(self, value: Value) -> Result<Value, EvalError> {
        if value.is_null() {
            return Ok(Value::Null);
        }
        let cannot = |why: &str| EvalError(format!("cannot CAST {value} to {}{why}", self.name()));
        Ok(match self {
            CastType::Text => match value {
                Value::String(_) => value,
                Value::Bool(b) => Value::String(if b { "TRUE" } else { "FALSE" }.to_owned()),
                Value::Number(n) => Value::String(n.to_string()),
                other => Value::String(other.to_string()),
            },
            CastType::Boolean => match &value {
                Value::Bool(_) => value,
                Value::Number(n) => Value::Bool(n.as_f64() != Some(0.0)),
                Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                    "true" | "t" | "yes" | "y" | "1" => Value::Bool(true),
                    "false" | "f" | "no" | "n" | "0" => Value::Bool(false),
                    _ => return Err(cannot("")),
                },
                _ => return Err(cannot("")),
            },
            CastType::Integer(bits) => {
                let whole = match &value {
                    Value::Number(n) => match integer(n) {
                        Some(i) => i,
                        None => n.as_f64().expect("a number").trunc() as i128,
                    },
                    Value::Bool(b) => i128::from(*b),
                    Value::String(s) => match s.trim().parse::<i128>() {
                        Ok(i) => i,
                        Err(_) => s.trim().parse::<f64>().map_err(|_| cannot(""))?.trunc() as i128,
                    },
                    _ => return Err(cannot("")),
                };
                let half = 1i128 << (bits - 1);
                if whole < -half || whole >= half {
                    return Err(cannot(" (out of range)"));
                }
                Value::from(whole as i64)
            }
            CastType::Double | CastType::Decimal(_) => {
                let f = match &value {
                    Value::Number(n) if self == CastType::Double => {
                        return Ok(Value::Number(n.clone()));
                    }
                    Value::Number(n) => n.as_f64().expect("a number"),
                    Value::Bool(b) => f64::from(u8::from(*b)),
                    Value::String(s) => s.trim().parse::<f64>().map_err(|_| cannot(""))?,
                    _ => return Err(cannot("")),
                };
                let f = match self {
                    CastType::Decimal(scale) => round_decimal(f, scale),
                    _ => f,
                };
                double(f)?
            }
        })
    }

    fn name(self) -> String {
        match self {
            CastType::Integer(64) => "BIGINT".into(),
            CastType::Integer(32) => "INT".into(),
            CastType::Integer(16) => "SMALLINT".into(),
            CastType::Integer(_) => "TINYINT".into(),
            CastType::Double => "DOUBLE".into(),
            CastType::Decimal(scale) => format!("DECIMAL with scale {scale}"),
            CastType::Text => "STRING".into(),
            CastType::Boolean => "BOOLEAN".into(),
        }
    }
}

/// `f` rounded half away from zero to `scale` decimals, as written in
/// decimal (`1.005` → `1.01`, where rounding its binary value gives `1.00`).
fn round_decimal(f: f64, scale: u32) -> f64 {
    // The shortest text that reads back as `f` (never in exponent form).
    let text = f.abs().to_string();
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let scale = scale as usize;
    if fraction.len() <= scale {
        return f;
    }
    let mut digits: Vec<u8> = whole.bytes().chain(fraction[..scale].bytes()).collect();
    if fraction.as_bytes()[scale] >= b'5' {
        // Add one in the last place kept, carrying.
        let mut i = digits.len();
        loop {
            if i == 0 {
                digits.insert(0, b'1');
                break;
            }
            i -= 1;
            if digits[i] == b'9' {
                digits[i] = b'0';
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    let split = digits.len() - scale;
    let rounded = format!(
        "{}.{}",
        std::str::from_utf8(&digits[..split]).expect("digits"),
        std::str::from_utf8(&digits[split..]).expect("digits")
    );
    let magnitude: f64 = rounded.trim_end_matches('.').parse().expect("a decimal");
    magnitude.copysign(f)
}

/// An integral number's value, whether it fits an i64 or a u64.
fn integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// A numeric literal's value: an integer when it has no fraction or exponent
/// and fits, else a double.
pub(super) fn number(text: &str) -> Option<Value> {
    if let Ok(i) = text.parse::<i64>() {
        return Some(Value::from(i));
    }
    if let Ok(u) = text.parse::<u64>() {
        return Some(Value::from(u));
    }
    text.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
}

fn double(f: f64) -> Result<Value, EvalError> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| EvalError(format!("{f} is not a finite number")))
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NULL",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A condition's truth: TRUE, FALSE or NULL (`None`); other values are errors.
pub(super) fn truth(value: &Value) -> Result<Option<bool>, EvalError> {
    match value {
        Value::Bool(b) => Ok(Some(*b)),
        Value::Null => Ok(None),
        other => Err(EvalError(format!(
            "{} is not a boolean ({other})",
            type_name(other)
        ))),
    }
}

/// `a AND b` in three-valued logic; `b` is not evaluated when `a` is FALSE.
pub(super) fn and(
    a: Option<bool>,
    b: impl FnOnce() -> Result<Option<bool>, EvalError>,
) -> Result<Value, EvalError> {
    if a == Some(false) {
        return Ok(Value::Bool(false));
    }
    Ok(match (a, b()?) {
        (_, Some(false)) => Value::Bool(false),
        (Some(true), Some(true)) => Value::Bool(true),
        _ => Value::Null,
    })
}

/// `a OR b` in three-valued logic; `b` is not evaluated when `a` is TRUE.
pub(super) fn or(
    a: Option<bool>,
    b: impl FnOnce() -> Result<Option<bool>, EvalError>,
) -> Result<Value, EvalError> {
    if a == Some(true) {
        return Ok(Value::Bool(true));
    }
    Ok(match (a, b()?) {
        (_, Some(true)) => Value::Bool(true),
        (Some(false), Some(false)) => Value::Bool(false),
        _ => Value::Null,
    })
}

enum Num {
    Int(i128),
    Float(f64),
}

fn num(value: &Value, op: &str) -> Result<Option<Num>, EvalError> {
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => Ok(Some(match integer(n) {
            Some(i) => Num::Int(i),
            None => Num::Float(n.as_f64().expect("a number")),
        })),
        other => Err(EvalError(format!(
            "{op} needs numbers, not {} ({other})",
            type_name(other)
        ))),
    }
}

/// An integer result, if it fits an i64 or a u64 (JSON's integers here).
fn whole(i: i128) -> Option<Value> {
    i64::try_from(i)
        .map(Value::from)
        .or_else(|_| u64::try_from(i).map(Value::from))
        .ok()
}

/// `-value`.
pub(super) fn negate(value: &Value) -> Result<Value, EvalError> {
    match num(value, "`-`")? {
        None => Ok(Value::Null),
        Some(Num::Int(i)) => {
            whole(-i).ok_or_else(|| EvalError(format!("-{i} overflows a 64-bit integer")))
        }
        Some(Num::Float(f)) => double(-f),
    }
}

/// `a op b`.
pub(super) fn arith(op: ArithOp, a: &Value, b: &Value) -> Result<Value, EvalError> {
    let symbol = match op {
        ArithOp::Add => "+",
        ArithOp::Sub => "-",
        ArithOp::Mul => "*",
        ArithOp::Div => "/",
        ArithOp::Rem => "%",
    };
    let (Some(x), Some(y)) = (num(a, symbol)?, num(b, symbol)?) else {
        return Ok(Value::Null);
    };
    let zero = || EvalError(format!("division by zero ({a} {symbol} {b})"));
    match (x, y) {
        (Num::Int(x), Num::Int(y)) => {
            let result = match op {
                ArithOp::Add => x.checked_add(y),
                ArithOp::Sub => x.checked_sub(y),
                ArithOp::Mul => x.checked_mul(y),
                ArithOp::Div if y == 0 => return Err(zero()),
                ArithOp::Div => x.checked_div(y),
                ArithOp::Rem if y == 0 => return Err(zero()),
                ArithOp::Rem => x.checked_rem(y),
            };
            result
                .and_then(whole)
                .ok_or_else(|| EvalError(format!("{x} {symbol} {y} overflows a 64-bit integer")))
        }
        (x, y) => {
            let as_f = |n| match n {
                Num::Int(i) => i as f64,
                Num::Float(f) => f,
            };
            let (x, y) = (as_f(x), as_f(y));
            if matches!(op, ArithOp::Div | ArithOp::Rem) && y == 0.0 {
                return Err(zero());
            }
            double(match op {
                ArithOp::Add => x + y,
                ArithOp::Sub => x - y,
                ArithOp::Mul => x * y,
                ArithOp::Div => x / y,
                ArithOp::Rem => x % y,
            })
        }
    }
}

/// How `a` compares with `b` (`None` when either is NULL).
pub(super) fn compare(a: &Value, b: &Value) -> Result<Option<Ordering>, EvalError> {
    Ok(Some(match (a, b) {
        (Value::Null, _) | (_, Value::Null) => return Ok(None),
        (Value::Number(x), Value::Number(y)) => match (integer(x), integer(y)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (x.as_f64().expect("a number"), y.as_f64().expect("a number"));
                x.partial_cmp(&y).expect("finite numbers")
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => {
            return Err(EvalError(format!(
                "cannot compare objects or arrays ({a}, {b}): compare their fields"
            )));
        }
        _ => {
            return Err(EvalError(format!(
                "cannot compare {} with {} ({a}, {b})",
                type_name(a),
                type_name(b)
            )));
        }
    }))
}

/// `needle [NOT] IN (list)`: TRUE when an item equals it, NULL when none does
/// but one is NULL.
pub(super) fn in_list(
    needle: &Value,
    list: impl Iterator<Item = Result<Value, EvalError>>,
    negated: bool,
) -> Result<Value, EvalError> {
    if needle.is_null() {
        return Ok(Value::Null);
    }
    let mut saw_null = false;
    for item in list {
        match compare(needle, &item?)? {
            Some(Ordering::Equal) => return Ok(Value::Bool(!negated)),
            Some(_) => {}
            None => saw_null = true,
        }
    }
    Ok(if saw_null {
        Value::Null
    } else {
        Value::Bool(negated)
    })
}

/// `text LIKE pattern` (`%`: any characters, `_`: one character, `\`
/// escapes), `None` when either is NULL.
pub(super) fn like(text: &Value, pattern: &Value) -> Result<Option<bool>, EvalError> {
    let (text, pattern) = match (text, pattern) {
        (Value::Null, _) | (_, Value::Null) => return Ok(None),
        (Value::String(t), Value::String(p)) => (t, p),
        (t, p) => {
            return Err(EvalError(format!(
                "LIKE needs text, not {} and {}",
                type_name(t),
                type_name(p)
            )));
        }
    };
    let text: Vec<char> = text.chars().collect();
    let mut pattern_chars = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        pattern_chars.push(match c {
            '\\' => Pattern::Literal(chars.next().unwrap_or('\\')),
            '%' => Pattern::Any,
            '_' => Pattern::One,
            c => Pattern::Literal(c),
        });
    }
    Ok(Some(matches(&text, &pattern_chars)))
}

#[derive(Clone, Copy)]
enum Pattern {
    Literal(char),
    One,
    Any,
}

/// Whether `text` matches `pattern` (iterative, backtracking to the last `%`).
fn matches(text: &[char], pattern: &[Pattern]) -> bool {
    let (mut t, mut p) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(Pattern::Any) => {
                star = Some((p, t));
                p += 1;
            }
            Some(Pattern::One) => {
                t += 1;
                p += 1;
            }
            Some(Pattern::Literal(c)) if *c == text[t] => {
                t += 1;
                p += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| matches!(c, Pattern::Any))
}
