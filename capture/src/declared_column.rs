//! A column as a DDL statement declares it, stored as the server stores it
//! ([`declare`]): `INTEGER` is `int(11)` on MariaDB (`int` on MySQL 8),
//! `BOOLEAN` is `tinyint(1)`, `DECIMAL` is `decimal(10,0)`, `TEXT(10)` in
//! utf8mb4 is `tinytext`; a text column takes its table's character set
//! unless it names one (or a collation); a default is shown as the server
//! shows it for the column's type (`DECIMAL(10,2) DEFAULT 0` is `0.00`,
//! `DATE DEFAULT '2020-1-2'` is `'2020-01-02'`).
//!
//! What this module cannot say exactly as the server would (a default that
//! the server would round or convert, a type it does not know) is
//! [`Unmodelled`]: the caller then reads the table from the server instead.

use sqlparser::ast::{ColumnOption, DataType, Expr, GeneratedAs, UnaryOperator, Value};
use sqlparser::tokenizer::Token;

use crate::column_default::DefaultExpr;
use crate::server_rules::ServerRules;
use crate::table_definition::DeclaredType;
use crate::table_model::ColumnModel;

/// Why a statement cannot be replayed exactly (for the debug log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmodelled(pub String);

/// A declared column, and the keys it declares itself part of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// The column as stored.
    pub column: ColumnModel,
    /// `PRIMARY KEY` in the column's definition.
    pub primary_key: bool,
    /// `UNIQUE` (or `SERIAL`) in the column's definition.
    pub unique: bool,
}

/// `name data_type options…`, in a table whose character set is
/// `table_charset`.
pub fn declare(
    name: &str,
    data_type: &DataType,
    options: &[&ColumnOption],
    table_charset: Option<&str>,
    rules: ServerRules,
) -> Result<Declared, Unmodelled> {
    let declared_text = data_type.to_string();
    let mut declared = declared_type(&declared_text, rules)?;
    let serial = declared.base == "serial";
    if serial {
        declared = declared_type("BIGINT UNSIGNED", rules)?;
    }
    let national = matches!(declared.base.as_str(), "nchar" | "nvarchar");
    if national {
        declared.base = declared.base.trim_start_matches('n').to_owned();
    }
    let mut charset = None;
    let mut collation_charset = None;
    let mut nullable = None;
    let mut default = None;
    let mut extra = Vec::new();
    let mut comment = String::new();
    let (mut primary_key, mut unique) = (false, serial);
    for option in options {
        match option {
            ColumnOption::Null => nullable = Some(true),
            ColumnOption::NotNull => nullable = Some(false),
            ColumnOption::Default(expr) => default = Some(expr),
            ColumnOption::PrimaryKey(_) => primary_key = true,
            ColumnOption::Unique(_) => unique = true,
            ColumnOption::CharacterSet(name) => {
                charset = Some(rules.charset_name(&name.to_string()))
            }
            ColumnOption::Collation(name) => {
                collation_charset = Some(rules.charset_of_collation(&name.to_string()))
            }
            ColumnOption::Comment(text) => comment = text.clone(),
            ColumnOption::OnUpdate(expr) => {
                if !is_current_timestamp(expr) {
                    return Err(Unmodelled(format!("ON UPDATE {expr}")));
                }
                extra.push(if rules.mariadb {
                    "on update current_timestamp()".to_owned()
                } else {
                    "on update CURRENT_TIMESTAMP".to_owned()
                });
            }
            ColumnOption::DialectSpecific(tokens) => {
                if tokens
                    .iter()
                    .any(|t| matches!(t, Token::Word(w) if w.value.eq_ignore_ascii_case("AUTO_INCREMENT")))
                {
                    extra.insert(0, "auto_increment".to_owned());
                }
            }
            ColumnOption::Generated { generated_as, .. } => {
                extra.push(
                    if matches!(generated_as, GeneratedAs::ExpStored) {
                        "STORED GENERATED"
                    } else {
                        "VIRTUAL GENERATED"
                    }
                    .to_owned(),
                );
            }
            ColumnOption::ForeignKey(_)
            | ColumnOption::Check(_)
            | ColumnOption::Invisible
            | ColumnOption::Srid(_) => {}
            other => return Err(Unmodelled(format!("column option {other}"))),
        }
    }
    if serial {
        extra.insert(0, "auto_increment".to_owned());
        nullable = Some(false);
    }
    let json = declared.base == "json" && rules.mariadb;
    if json {
        // MariaDB's JSON is a LONGTEXT in utf8mb4 (with a JSON_VALID check).
        declared = DeclaredType::parse("longtext");
    }
    let charset = if json {
        Some("utf8mb4".to_owned())
    } else if holds_text(&declared.base) {
        charset
            .or(collation_charset)
            .or_else(|| national.then(|| rules.charset_name("utf8")))
            .or_else(|| table_charset.map(str::to_owned))
    } else {
        None
    };
    if charset.as_deref() == Some("binary") {
        return Err(Unmodelled(format!("{declared_text} CHARACTER SET binary")));
    }
    sized_by_length(&mut declared, charset.as_deref())?;
    if declared.base == "timestamp"
        && !rules.explicit_defaults_for_timestamp
        && nullable != Some(true)
    {
        return Err(Unmodelled(
            "a TIMESTAMP with implicit defaults (explicit_defaults_for_timestamp=OFF)".into(),
        ));
    }
    let default = match default {
        None => DefaultExpr::None,
        Some(expr) => default_expr(expr, &declared, rules)?,
    };
    Ok(Declared {
        column: ColumnModel {
            name: name.to_owned(),
            column_type: declared.column_type(),
            charset,
            nullable: nullable.unwrap_or(true) && !primary_key,
            default,
            default_exact: true,
            extra: extra.join(" "),
            comment,
        },
        primary_key,
        unique,
    })
}

/// `sqlparser`'s rendering of a declared type, with the server's names and
/// default lengths.
fn declared_type(text: &str, rules: ServerRules) -> Result<DeclaredType, Unmodelled> {
    // The type's words before its arguments (ENUM values keep their case).
    let (head, arguments) = text.split_at(text.find('(').unwrap_or(text.len()));
    let head = head
        .to_ascii_uppercase()
        .replacen("DOUBLE PRECISION", "DOUBLE", 1)
        .replacen("CHARACTER VARYING", "VARCHAR", 1);
    let head = match head.strip_prefix("CHARACTER") {
        Some(rest) if rest.is_empty() || rest.starts_with(' ') => format!("CHAR{rest}"),
        _ => head,
    };
    let mut declared = DeclaredType::parse(&format!("{head}{arguments}"));
    for value in &mut declared.values {
        *value = value.trim().to_owned();
    }
    if declared.zerofill {
        declared.unsigned = true;
    }
    let base = match declared.base.as_str() {
        "integer" | "int4" => "int",
        "int1" => "tinyint",
        "int2" => "smallint",
        "int3" | "middleint" => "mediumint",
        "int8" => "bigint",
        "bool" | "boolean" => {
            declared.length = Some(1);
            "tinyint"
        }
        "dec" | "numeric" | "fixed" => "decimal",
        "real" => "double",
        other => other,
    }
    .to_owned();
    declared.base = base;
    match declared.base.as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => {
            let width = match (declared.base.as_str(), declared.unsigned) {
                ("tinyint", false) => 4,
                ("tinyint", true) => 3,
                ("smallint", false) => 6,
                ("smallint", true) => 5,
                ("mediumint", false) => 9,
                ("mediumint", true) => 8,
                ("int", false) => 11,
                ("int", true) => 10,
                _ => 20,
            };
            let length = declared.length.unwrap_or(width);
            let shown = rules.int_widths
                || declared.zerofill
                || (declared.base == "tinyint" && length == 1);
            declared.length = shown.then_some(length);
        }
        "decimal" => {
            declared.length = Some(declared.length.unwrap_or(10));
            declared.scale = Some(declared.scale.unwrap_or(0));
        }
        "float" => {
            if let (Some(precision), None) = (declared.length, declared.scale) {
                declared.length = None;
                if precision > 24 {
                    declared.base = "double".into();
                }
            }
        }
        "bit" | "char" | "binary" | "nchar" => {
            declared.length = Some(declared.length.unwrap_or(1));
        }
        "year" => {
            declared.length = rules.int_widths.then_some(4);
        }
        "time" | "datetime" | "timestamp" => {
            declared.length = declared.length.filter(|fsp| *fsp > 0);
        }
        "double" | "varchar" | "varbinary" | "nvarchar" | "text" | "blob" | "tinytext"
        | "mediumtext" | "longtext" | "tinyblob" | "mediumblob" | "longblob" | "enum" | "set"
        | "date" | "json" | "serial" | "point" | "geometry" | "linestring" | "polygon"
        | "multipoint" | "multilinestring" | "multipolygon" | "geometrycollection" => {}
        _ => return Err(Unmodelled(format!("the type {text}"))),
    }
    Ok(declared)
}

/// `TEXT(n)` and `BLOB(n)`: the smallest type that holds `n` characters.
fn sized_by_length(declared: &mut DeclaredType, charset: Option<&str>) -> Result<(), Unmodelled> {
    let (Some(length), family) = (declared.length, declared.base.clone()) else {
        return Ok(());
    };
    if family != "text" && family != "blob" {
        return Ok(());
    }
    let bytes_per_char = match (family.as_str(), charset) {
        ("blob", _) => 1,
        (_, Some("latin1" | "ascii" | "latin2" | "cp1250" | "cp1251" | "cp1252")) => 1,
        (_, Some("ucs2")) => 2,
        (_, Some("utf8mb3" | "utf8")) => 3,
        (_, Some("utf8mb4" | "utf16" | "utf32")) => 4,
        (_, other) => {
            return Err(Unmodelled(format!(
                "{family}({length}) in character set {other:?}"
            )));
        }
    };
    let bytes = i64::from(length) * bytes_per_char;
    let size = if bytes < 1 << 8 {
        "tiny"
    } else if bytes < 1 << 16 {
        ""
    } else if bytes < 1 << 24 {
        "medium"
    } else {
        "long"
    };
    declared.base = format!("{size}{family}");
    declared.length = None;
    Ok(())
}

/// Types whose columns have a character set.
fn holds_text(base: &str) -> bool {
    matches!(
        base,
        "char"
            | "varchar"
            | "nchar"
            | "nvarchar"
            | "tinytext"
            | "text"
            | "mediumtext"
            | "longtext"
            | "enum"
            | "set"
    )
}

fn is_current_timestamp(expr: &Expr) -> bool {
    match expr {
        Expr::Function(function) => {
            let name = function.name.to_string().to_ascii_uppercase();
            matches!(
                name.as_str(),
                "CURRENT_TIMESTAMP" | "NOW" | "LOCALTIME" | "LOCALTIMESTAMP"
            )
        }
        Expr::Identifier(ident) => matches!(
            ident.value.to_ascii_uppercase().as_str(),
            "CURRENT_TIMESTAMP" | "LOCALTIME" | "LOCALTIMESTAMP"
        ),
        _ => false,
    }
}

/// A column's `DEFAULT expr`, as the server shows it for its type.
pub(crate) fn default_expr(
    expr: &Expr,
    declared: &DeclaredType,
    rules: ServerRules,
) -> Result<DefaultExpr, Unmodelled> {
    let unmodelled = || {
        Err(Unmodelled(format!(
            "DEFAULT {expr} for {}",
            declared.column_type()
        )))
    };
    // MariaDB stores `DEFAULT (1)`, `(-1)`, `(NOW())`, `(uuid())` without
    // their parentheses, and shows other expressions in them (`(1 + 2)`);
    // MySQL 8 takes any parenthesised default as an expression.
    let mut expr = expr;
    let mut nested = false;
    while let Expr::Nested(inner) = expr {
        expr = inner;
        nested = true;
    }
    if nested && !rules.mariadb {
        return if is_current_timestamp(expr) {
            unmodelled()
        } else {
            Ok(DefaultExpr::Expression(None))
        };
    }
    if is_current_timestamp(expr) {
        return Ok(DefaultExpr::CurrentTimestamp);
    }
    let numeric = matches!(expr, Expr::Value(v) if matches!(v.value, Value::Number(..)))
        || matches!(expr, Expr::UnaryOp { .. });
    let literal = match expr {
        Expr::Value(value) => match &value.value {
            Value::Null => return Ok(DefaultExpr::None),
            Value::Number(n, _) => n.clone(),
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::SingleQuotedByteStringLiteral(bits) if declared.base == "bit" => {
                return if bits.starts_with('1') {
                    Ok(DefaultExpr::Bits(bits.clone()))
                } else {
                    unmodelled()
                };
            }
            Value::HexStringLiteral(hex) if is_bytes(&declared.base) => match hex_text(hex) {
                Some(text) => text,
                None => return unmodelled(),
            },
            _ => return unmodelled(),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match &**expr {
            Expr::Value(value) => match &value.value {
                Value::Number(n, _) => format!("-{n}"),
                _ => return unmodelled(),
            },
            _ => return unmodelled(),
        },
        Expr::Function(function) => {
            let arguments = function.args.to_string();
            let name = function.name.to_string().to_ascii_lowercase();
            return match shown_function(&name) {
                Some(shown) if arguments.is_empty() || arguments == "()" => Ok(
                    DefaultExpr::Expression(rules.mariadb.then(|| format!("{shown}()"))),
                ),
                _ => unmodelled(),
            };
        }
        _ if nested => return Ok(DefaultExpr::Expression(None)),
        _ => return unmodelled(),
    };
    let bare = |text: String| DefaultExpr::Literal {
        text,
        escaped: false,
    };
    let quoted = |text: &str| DefaultExpr::Literal {
        text: if rules.mariadb {
            escape(text)
        } else {
            text.to_owned()
        },
        escaped: rules.mariadb,
    };
    let shown = match declared.base.as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => {
            integer(&literal).map(|n| bare(n.to_string()))
        }
        "decimal" => decimal(&literal, declared.scale.unwrap_or(0)).map(bare),
        "float" | "double" => float(&literal).map(bare),
        "date" => date(&literal).map(|d| quoted(&d)),
        "datetime" | "timestamp" => {
            datetime(&literal, declared.length.unwrap_or(0)).map(|d| quoted(&d))
        }
        // A number is an ENUM's or SET's index (or bits) to the server; MySQL
        // drops (or refuses) a literal default of a TEXT or BLOB.
        "enum" | "set" if numeric => None,
        base if !rules.mariadb && (base.ends_with("text") || base.ends_with("blob")) => None,
        base if holds_text(base) || (is_bytes(base) && base != "binary") => Some(quoted(&literal)),
        _ => None,
    };
    match shown {
        Some(shown) => Ok(shown),
        None => unmodelled(),
    }
}

/// The name MariaDB shows a function without arguments by, in a default
/// (`CURRENT_DATE` is `curdate()`); `None` for one not known here.
fn shown_function(name: &str) -> Option<&str> {
    match name {
        "current_date" | "curdate" => Some("curdate"),
        "current_time" | "curtime" => Some("curtime"),
        "utc_timestamp" | "utc_date" | "utc_time" | "uuid" | "uuid_short" | "rand" | "user" => {
            Some(name)
        }
        _ => None,
    }
}

fn is_bytes(base: &str) -> bool {
    matches!(
        base,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob"
    )
}

/// `0x41` as `A` (printable ASCII only).
fn hex_text(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .map(|b| b.filter(|b| (0x20..0x7f).contains(b)).map(char::from))
        .collect()
}

/// A quoted default as MariaDB shows it: `'` doubled, backslash escapes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            '\u{1a}' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out
}

fn integer(text: &str) -> Option<i128> {
    text.trim().parse::<i128>().ok()
}

/// `text` with `scale` fraction digits (`None` if the server would round).
fn decimal(text: &str, scale: i32) -> Option<String> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let scale = usize::try_from(scale).ok()?;
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || !all_digits(fraction) || whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > scale {
        return None;
    }
    let whole = whole.trim_start_matches('0');
    let whole = if whole.is_empty() { "0" } else { whole };
    let zero = whole == "0" && fraction.is_empty();
    let sign = if negative && !zero { "-" } else { "" };
    Some(if scale == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction:0<scale$}")
    })
}

/// A float default the server shows as its shortest decimal form; `None`
/// where that form is not the literal's (exponents, many digits).
fn float(text: &str) -> Option<String> {
    let value: f64 = text.trim().parse().ok()?;
    let shown = value.to_string();
    let plain = decimal(text, 16)?;
    let plain = plain.trim_end_matches('0').trim_end_matches('.').to_owned();
    (shown == plain && shown.len() <= 8).then_some(shown)
}

/// `y-m-d` as `yyyy-mm-dd`.
fn date(text: &str) -> Option<String> {
    let mut parts = text.trim().split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let number = |s: &str, max: u32| {
        s.parse::<u32>()
            .ok()
            .filter(|n| (1..=max).contains(n) && !s.is_empty())
    };
    let (year, month, day) = (y.parse::<u32>().ok()?, number(m, 12)?, number(d, 31)?);
    (y.len() == 4).then(|| format!("{year:04}-{month:02}-{day:02}"))
}

/// `y-m-d[ h:m:s[.f]]` as `yyyy-mm-dd hh:mm:ss[.f…]` with `fsp` digits.
fn datetime(text: &str, fsp: i32) -> Option<String> {
    let text = text.trim();
    let (day, time) = text.split_once([' ', 'T']).unwrap_or((text, "00:00:00"));
    let day = date(day)?;
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut parts = clock.split(':').map(|p| p.parse::<u32>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() || h > 23 || m > 59 || s > 59 {
        return None;
    }
    let fsp = usize::try_from(fsp).ok()?;
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > fsp || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut shown = format!("{day} {h:02}:{m:02}:{s:02}");
    if fsp > 0 {
        shown.push_str(&format!(".{fraction:0<fsp$}"));
    }
    Some(shown)
}

#[cfg(test)]
mod tests;
