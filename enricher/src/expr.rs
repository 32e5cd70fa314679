//! Expressions of jobs (filters and computed fields, in SQL jobs and YAML
//! jobs alike): SQL text parsed by `sqlparser`, compiled once into a tree
//! whose names are resolved, functions looked up, JSON paths parsed and
//! literal types checked, then evaluated per event over JSON values.
//!
//! Values are JSON (events carry no schema), so a field's type is known only
//! when the event arrives: an operator given a value of the wrong type fails
//! the event with a reason naming the expression (the job dead-letters it).
//! What is known beforehand is checked when compiling: literals, operators'
//! result types, `CAST` targets (`'a' * 2`, `NOT 3`, `LOWER(1)` are rejected
//! there). NULL follows SQL: operators and functions given NULL give NULL
//! (`COALESCE`, `IS [NOT] NULL`, `CASE` and `CONCAT_WS` aside), and `AND`/`OR`
//! use three-valued logic; a missing field is NULL.
//!
//! - [`ops`]: arithmetic, comparison and casts on values.
//! - [`functions`]: string and JSON functions.

mod functions;
mod ops;

use std::borrow::Cow;
use std::fmt;

use serde_json::{Map, Value};
use sqlparser::ast::{self, BinaryOperator, Spanned, UnaryOperator};

use crate::field_path::FieldPath;

pub use functions::Function;
pub use ops::{ArithOp, CastType, CmpOp};

/// What a name in an expression stands for, resolved when compiling.
#[derive(Debug, Clone, PartialEq)]
pub enum Ref {
    /// A field of the event (a path into it).
    Event(FieldPath),
    /// A column of the row a join found (NULL when it missed), and a path
    /// below the column.
    Column {
        /// The join's position in the job.
        join: usize,
        /// The column.
        column: String,
        /// Fields below the column.
        below: Vec<String>,
    },
    /// The whole row a join found, as an object (NULL when it missed).
    Row(usize),
}

/// Resolves the names an expression uses (the job's inputs and joins).
pub trait Names {
    /// What the dotted name `parts` refers to, or why it refers to nothing.
    fn resolve(&self, parts: &[String]) -> Result<Ref, String>;
}

/// The values of one event's names while evaluating.
pub trait Scope {
    /// The value `name` refers to (`None`: missing, read as NULL).
    fn get(&self, name: &Ref) -> Option<Cow<'_, Value>>;

    /// Whether `name` is NULL (or missing).
    fn is_null(&self, name: &Ref) -> bool {
        self.get(name).is_none_or(|v| v.is_null())
    }
}

/// Where in the expression's text something is (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Line.
    pub line: u64,
    /// Column.
    pub column: u64,
}

impl Position {
    /// The start of `node`, if the parser recorded one.
    pub fn of(node: &impl Spanned) -> Option<Position> {
        Position::of_span(node.span())
    }

    /// The start of `span`, if the parser recorded one.
    pub fn of_span(span: sqlparser::tokenizer::Span) -> Option<Position> {
        let start = span.start;
        (start.line > 0).then_some(Position {
            line: start.line,
            column: start.column,
        })
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// An expression (or a SQL job file) that cannot be compiled, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", at.map(|p| format!("{p}: ")).unwrap_or_default())]
pub struct CompileError {
    /// Where the offending part starts.
    pub at: Option<Position>,
    /// What is wrong, and what is supported.
    pub message: String,
}

impl CompileError {
    /// An error at `node`.
    pub fn at(node: &impl Spanned, message: impl Into<String>) -> Self {
        CompileError::new(Position::of(node), message)
    }

    /// An error at `at` (absent for a whole-file problem).
    pub fn new(at: Option<Position>, message: impl Into<String>) -> Self {
        CompileError {
            at,
            message: message.into(),
        }
    }
}

/// Why an expression has no value for one event.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

/// The type an expression is known to have before any event arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Not known (a field, or NULL).
    Any,
    /// TRUE / FALSE.
    Bool,
    /// A number.
    Number,
    /// A string.
    Text,
    /// An object.
    Object,
}

impl Kind {
    /// How errors name the kind.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Any => "a value",
            Kind::Bool => "a boolean",
            Kind::Number => "a number",
            Kind::Text => "text",
            Kind::Object => "an object",
        }
    }
}

/// A compiled expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant.
    Literal(Value),
    /// A name of the event or of a join.
    Ref(Ref),
    /// `NOT e`.
    Not(Box<Expr>),
    /// `-e`.
    Neg(Box<Expr>),
    /// `a + b`, …
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    /// `a = b`, …
    Compare(CmpOp, Box<Expr>, Box<Expr>),
    /// `a AND b`.
    And(Box<Expr>, Box<Expr>),
    /// `a OR b`.
    Or(Box<Expr>, Box<Expr>),
    /// `e IS [NOT] NULL`.
    IsNull(Box<Expr>, bool),
    /// `e IS [NOT] TRUE` (`true`) / `FALSE` (`false`), then negated or not.
    IsBool {
        /// The expression.
        expr: Box<Expr>,
        /// Compared with TRUE or FALSE.
        value: bool,
        /// `IS NOT`.
        negated: bool,
    },
    /// `e [NOT] IN (…)`.
    InList(Box<Expr>, Vec<Expr>, bool),
    /// `e [NOT] BETWEEN low AND high`.
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
    /// `e [NOT] LIKE pattern`.
    Like(Box<Expr>, Box<Expr>, bool),
    /// `CASE [operand] WHEN … THEN … [ELSE …] END`.
    Case {
        /// Compared with each `WHEN` (absent: each `WHEN` is a condition).
        operand: Option<Box<Expr>>,
        /// `WHEN` and `THEN`.
        branches: Vec<(Expr, Expr)>,
        /// `ELSE` (NULL when absent).
        otherwise: Option<Box<Expr>>,
    },
    /// `CAST(e AS type)`.
    Cast(Box<Expr>, CastType),
    /// A function call.
    Call(Function, Vec<Expr>),
    /// `JSON_VALUE(e, 'path')`: the scalar at a JSON path (parsed once).
    JsonValue(Box<Expr>, functions::JsonPath),
    /// `STRUCT(a AS x, …)`: an object.
    Struct(Vec<(String, Expr)>),
}

/// Parses the expression `text`.
pub fn parse(text: &str) -> Result<ast::Expr, CompileError> {
    crate::dialect::parser(text)
        .and_then(|mut parser| {
            let expr = parser.parse_expr()?;
            parser.expect_token(&sqlparser::tokenizer::Token::EOF)?;
            Ok(expr)
        })
        .map_err(|e| CompileError {
            at: None,
            message: e.to_string().replace("sql parser error: ", ""),
        })
}

/// Parses and compiles the expression `text`, resolving names with `names`.
pub fn compile_text(text: &str, names: &dyn Names) -> Result<Expr, CompileError> {
    compile(&parse(text)?, names)
}

/// Compiles `expr`, resolving names with `names`.
pub fn compile(expr: &ast::Expr, names: &dyn Names) -> Result<Expr, CompileError> {
    Compiler { names }.expr(expr)
}

struct Compiler<'a> {
    names: &'a dyn Names,
}

const SUPPORTED: &str = "supported: field and column names, literals, arithmetic, comparisons, \
     AND/OR/NOT, IS [NOT] NULL, IN, BETWEEN, LIKE, CASE, CAST, COALESCE, NULLIF, LOWER, UPPER, \
     CONCAT, CONCAT_WS, SUBSTRING, TRIM, CHAR_LENGTH, JSON_VALUE, STRUCT";

impl Compiler<'_> {
    fn boxed(&self, expr: &ast::Expr) -> Result<Box<Expr>, CompileError> {
        self.expr(expr).map(Box::new)
    }

    /// Compiles `expr`, which must not be known to be of a kind other than `want`.
    fn typed(&self, expr: &ast::Expr, want: Kind, role: &str) -> Result<Expr, CompileError> {
        let compiled = self.expr(expr)?;
        let kind = compiled.kind();
        if kind != Kind::Any && kind != want {
            return Err(CompileError::at(
                expr,
                format!(
                    "{role} must be {}, not {}: `{expr}`",
                    want.name(),
                    kind.name()
                ),
            ));
        }
        Ok(compiled)
    }

    fn expr(&self, expr: &ast::Expr) -> Result<Expr, CompileError> {
        use ast::Expr as E;
        Ok(match expr {
            E::Identifier(ident) => self.name(expr, std::slice::from_ref(ident))?,
            E::CompoundIdentifier(parts) => self.name(expr, parts)?,
            E::Value(value) => Expr::Literal(literal(expr, &value.value)?),
            E::Nested(inner) => self.expr(inner)?,
            E::UnaryOp { op, expr: inner } => match op {
                UnaryOperator::Not => {
                    Expr::Not(Box::new(self.typed(inner, Kind::Bool, "NOT's operand")?))
                }
                UnaryOperator::Minus => Expr::Neg(Box::new(self.typed(
                    inner,
                    Kind::Number,
                    "`-`'s operand",
                )?)),
                UnaryOperator::Plus => self.typed(inner, Kind::Number, "`+`'s operand")?,
                other => return Err(unsupported(expr, &format!("the operator {other}"))),
            },
            E::BinaryOp { left, op, right } => self.binary(expr, left, op, right)?,
            E::IsNull(inner) => Expr::IsNull(self.boxed(inner)?, false),
            E::IsNotNull(inner) => Expr::IsNull(self.boxed(inner)?, true),
            E::IsTrue(inner) | E::IsNotTrue(inner) | E::IsFalse(inner) | E::IsNotFalse(inner) => {
                Expr::IsBool {
                    expr: Box::new(self.typed(inner, Kind::Bool, "IS TRUE/FALSE's operand")?),
                    value: matches!(expr, E::IsTrue(_) | E::IsNotTrue(_)),
                    negated: matches!(expr, E::IsNotTrue(_) | E::IsNotFalse(_)),
                }
            }
            E::In {
                expr: inner,
                target: ast::InTarget::List(list),
                negated,
                global: false,
            } => {
                let needle = self.expr(inner)?;
                let mut items: Vec<Expr> = Vec::with_capacity(list.len());
                for item in list {
                    let compiled = self.expr(item)?;
                    for other in std::iter::once(&needle).chain(&items) {
                        comparable(expr, other, &compiled)?;
                    }
                    items.push(compiled);
                }
                Expr::InList(Box::new(needle), items, *negated)
            }
            E::Between {
                expr: inner,
                negated,
                low,
                high,
            } => {
                let (value, low, high) = (self.expr(inner)?, self.expr(low)?, self.expr(high)?);
                comparable(expr, &value, &low)?;
                comparable(expr, &value, &high)?;
                comparable(expr, &low, &high)?;
                Expr::Between(Box::new(value), Box::new(low), Box::new(high), *negated)
            }
            E::Like {
                negated,
                any: false,
                expr: inner,
                pattern,
                escape_char: None,
            } => Expr::Like(
                Box::new(self.typed(inner, Kind::Text, "LIKE's operand")?),
                Box::new(self.typed(pattern, Kind::Text, "LIKE's pattern")?),
                *negated,
            ),
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => Expr::Case {
                operand: operand.as_deref().map(|o| self.boxed(o)).transpose()?,
                branches: conditions
                    .iter()
                    .map(|when| {
                        let condition = match operand {
                            None => self.typed(&when.condition, Kind::Bool, "a WHEN condition")?,
                            Some(operand) => {
                                let value = self.expr(&when.condition)?;
                                comparable(expr, &self.expr(operand)?, &value)?;
                                value
                            }
                        };
                        Ok((condition, self.expr(&when.result)?))
                    })
                    .collect::<Result<_, CompileError>>()?,
                otherwise: else_result.as_deref().map(|e| self.boxed(e)).transpose()?,
            },
            E::Cast {
                kind: ast::CastKind::Cast | ast::CastKind::DoubleColon,
                expr: inner,
                data_type,
                format: None,
            } => {
                let target = CastType::of(data_type).ok_or_else(|| {
                    CompileError::at(
                        expr,
                        format!(
                            "CAST to {data_type} is not supported (supported: BIGINT, INT, \
                             SMALLINT, DOUBLE, FLOAT, DECIMAL(p, s), VARCHAR, STRING, CHAR, TEXT, \
                             BOOLEAN)"
                        ),
                    )
                })?;
                Expr::Cast(self.boxed(inner)?, target)
            }
            E::Substring {
                expr: inner,
                substring_from,
                substring_for,
                ..
            } => {
                let from = substring_from.as_deref().ok_or_else(|| {
                    CompileError::at(
                        expr,
                        "SUBSTRING needs a start: SUBSTRING(s FROM start [FOR length])",
                    )
                })?;
                let mut args = vec![
                    (inner.as_ref(), self.expr(inner)?),
                    (from, self.typed(from, Kind::Number, "SUBSTRING's start")?),
                ];
                if let Some(length) = substring_for {
                    args.push((
                        length,
                        self.typed(length, Kind::Number, "SUBSTRING's length")?,
                    ));
                }
                self.call(expr, Function::Substring, args)?
            }
            E::Trim {
                trim_where,
                trim_what,
                expr: inner,
                trim_characters: None,
            } => {
                let mut args = vec![(inner.as_ref(), self.expr(inner)?)];
                if let Some(what) = trim_what {
                    args.push((what, self.typed(what, Kind::Text, "TRIM's characters")?));
                }
                let function = match trim_where {
                    None | Some(ast::TrimWhereField::Both) => Function::Trim,
                    Some(ast::TrimWhereField::Leading) => Function::TrimLeading,
                    Some(ast::TrimWhereField::Trailing) => Function::TrimTrailing,
                };
                self.call(expr, function, args)?
            }
            E::Function(function) => self.function(expr, function)?,
            E::Struct { values, fields } if fields.is_empty() => {
                let mut members = Vec::with_capacity(values.len());
                for value in values {
                    let (name, inner) = match value {
                        E::Named { expr, name } => (name.value.clone(), expr.as_ref()),
                        E::Identifier(ident) => (ident.value.clone(), value),
                        E::CompoundIdentifier(parts) => {
                            (parts.last().expect("compound").value.clone(), value)
                        }
                        _ => {
                            return Err(CompileError::at(
                                value,
                                format!("name this STRUCT field: `{value} AS name`"),
                            ));
                        }
                    };
                    if members.iter().any(|(n, _)| *n == name) {
                        return Err(CompileError::at(
                            value,
                            format!("STRUCT field `{name}` is named twice"),
                        ));
                    }
                    members.push((name, self.expr(inner)?));
                }
                Expr::Struct(members)
            }
            E::Subquery(_) | E::Exists { .. } | E::In { .. } => {
                return Err(unsupported(expr, "subqueries"));
            }
            _ => return Err(unsupported(expr, &format!("`{expr}`"))),
        })
    }

    fn name(&self, expr: &ast::Expr, parts: &[ast::Ident]) -> Result<Expr, CompileError> {
        let parts: Vec<String> = parts.iter().map(|i| i.value.clone()).collect();
        self.names
            .resolve(&parts)
            .map(Expr::Ref)
            .map_err(|problem| CompileError::at(expr, problem))
    }

    fn binary(
        &self,
        expr: &ast::Expr,
        left: &ast::Expr,
        op: &BinaryOperator,
        right: &ast::Expr,
    ) -> Result<Expr, CompileError> {
        use BinaryOperator as B;
        let both = |kind, role: &str| -> Result<(Box<Expr>, Box<Expr>), CompileError> {
            Ok((
                Box::new(self.typed(left, kind, role)?),
                Box::new(self.typed(right, kind, role)?),
            ))
        };
        let arith = |op| -> Result<Expr, CompileError> {
            let (l, r) = both(Kind::Number, "an operand of arithmetic")?;
            Ok(Expr::Arith(op, l, r))
        };
        let compare = |op| -> Result<Expr, CompileError> {
            let (l, r) = (self.expr(left)?, self.expr(right)?);
            comparable(expr, &l, &r)?;
            Ok(Expr::Compare(op, Box::new(l), Box::new(r)))
        };
        match op {
            B::Plus => arith(ArithOp::Add),
            B::Minus => arith(ArithOp::Sub),
            B::Multiply => arith(ArithOp::Mul),
            B::Divide => arith(ArithOp::Div),
            B::Modulo => arith(ArithOp::Rem),
            B::Eq => compare(CmpOp::Eq),
            B::NotEq => compare(CmpOp::Ne),
            B::Lt => compare(CmpOp::Lt),
            B::LtEq => compare(CmpOp::Le),
            B::Gt => compare(CmpOp::Gt),
            B::GtEq => compare(CmpOp::Ge),
            B::And => {
                let (l, r) = both(Kind::Bool, "an operand of AND")?;
                Ok(Expr::And(l, r))
            }
            B::Or => {
                let (l, r) = both(Kind::Bool, "an operand of OR")?;
                Ok(Expr::Or(l, r))
            }
            B::StringConcat => Ok(Expr::Call(
                Function::Concat,
                vec![self.expr(left)?, self.expr(right)?],
            )),
            other => Err(unsupported(expr, &format!("the operator {other}"))),
        }
    }

    fn function(&self, expr: &ast::Expr, call: &ast::Function) -> Result<Expr, CompileError> {
        let name = call.name.to_string().to_uppercase();
        let Some(function) = Function::named(&name) else {
            let what = if functions::is_aggregate(&name) {
                format!(
                    "{name}: aggregations are not supported (a job enriches each event on its own)"
                )
            } else {
                format!("the function {name}")
            };
            return Err(unsupported(expr, &what));
        };
        let args = match &call.args {
            ast::FunctionArguments::List(list)
                if list.duplicate_treatment.is_none()
                    && list.clauses.is_empty()
                    && call.filter.is_none()
                    && call.over.is_none()
                    && call.within_group.is_empty() =>
            {
                &list.args
            }
            ast::FunctionArguments::None => &Vec::new(),
            _ => {
                return Err(unsupported(
                    expr,
                    &format!("{name} with DISTINCT, ORDER BY, FILTER or OVER"),
                ));
            }
        };
        let mut compiled = Vec::with_capacity(args.len());
        for arg in args {
            let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(arg)) = arg else {
                return Err(CompileError::at(
                    expr,
                    format!("{name} takes plain arguments: `{arg}`"),
                ));
            };
            compiled.push((arg, self.expr(arg)?));
        }
        self.call(expr, function, compiled)
    }

    /// A call of `function` with these arguments, checked.
    fn call(
        &self,
        expr: &ast::Expr,
        function: Function,
        args: Vec<(&ast::Expr, Expr)>,
    ) -> Result<Expr, CompileError> {
        function
            .check(&args)
            .map_err(|problem| CompileError::at(expr, problem))?;
        let mut args = args.into_iter().map(|(_, e)| e);
        if function != Function::JsonValue {
            return Ok(Expr::Call(function, args.collect()));
        }
        // A JSON path is parsed once.
        let target = args.next().expect("checked: two arguments");
        let Some(Expr::Literal(Value::String(path))) = args.next() else {
            unreachable!("checked: a literal path")
        };
        let path =
            functions::JsonPath::parse(&path).map_err(|problem| CompileError::at(expr, problem))?;
        Ok(Expr::JsonValue(Box::new(target), path))
    }
}

/// `a` and `b` may be compared: neither is known to be of another kind.
fn comparable(node: &ast::Expr, a: &Expr, b: &Expr) -> Result<(), CompileError> {
    let (ak, bk) = (a.kind(), b.kind());
    if ak != Kind::Any && bk != Kind::Any && ak != bk {
        return Err(CompileError::at(
            node,
            format!("cannot compare {} with {}: `{node}`", ak.name(), bk.name()),
        ));
    }
    Ok(())
}

fn unsupported(node: &impl Spanned, what: &str) -> CompileError {
    CompileError::at(node, format!("{what} is not supported ({SUPPORTED})"))
}

fn literal(node: &ast::Expr, value: &ast::Value) -> Result<Value, CompileError> {
    use ast::Value as V;
    Ok(match value {
        V::Number(text, _) => ops::number(text).ok_or_else(|| {
            CompileError::at(node, format!("{text} is not a number this job can hold"))
        })?,
        V::SingleQuotedString(text) => Value::String(text.clone()),
        V::Boolean(b) => Value::Bool(*b),
        V::Null => Value::Null,
        other => return Err(unsupported(node, &format!("the literal {other}"))),
    })
}

impl Expr {
    /// The type known before evaluation.
    pub fn kind(&self) -> Kind {
        match self {
            Expr::Literal(Value::Bool(_)) => Kind::Bool,
            Expr::Literal(Value::Number(_)) => Kind::Number,
            Expr::Literal(Value::String(_)) => Kind::Text,
            Expr::Literal(_) | Expr::Ref(_) | Expr::Case { .. } => Kind::Any,
            Expr::Not(_)
            | Expr::Compare(..)
            | Expr::And(..)
            | Expr::Or(..)
            | Expr::IsNull(..)
            | Expr::IsBool { .. }
            | Expr::InList(..)
            | Expr::Between(..)
            | Expr::Like(..) => Kind::Bool,
            Expr::Neg(_) | Expr::Arith(..) => Kind::Number,
            Expr::Cast(_, target) => target.kind(),
            Expr::Call(function, _) => function.kind(),
            Expr::JsonValue(..) => Kind::Any,
            Expr::Struct(_) => Kind::Object,
        }
    }

    /// Every name the expression reads.
    pub fn refs(&self) -> Vec<&Ref> {
        let mut refs = Vec::new();
        self.each_ref(&mut |r| refs.push(r));
        refs
    }

    /// The names whose values the expression reads: a whole row only tested
    /// for NULL (`t IS NULL`: did the join find one?) needs none of its columns.
    pub fn values_read(&self) -> Vec<&Ref> {
        let mut refs = Vec::new();
        self.each_value_read(&mut |r| refs.push(r));
        refs
    }

    fn each_value_read<'e>(&'e self, visit: &mut impl FnMut(&'e Ref)) {
        match self {
            Expr::IsNull(inner, _) if matches!(**inner, Expr::Ref(Ref::Row(_))) => {}
            Expr::Ref(r) => visit(r),
            _ => self.each_child(&mut |child| child.each_value_read(visit)),
        }
    }

    fn each_ref<'e>(&'e self, visit: &mut impl FnMut(&'e Ref)) {
        match self {
            Expr::Ref(r) => visit(r),
            _ => self.each_child(&mut |child| child.each_ref(visit)),
        }
    }

    /// Calls `visit` with each direct sub-expression.
    fn each_child<'e>(&'e self, visit: &mut impl FnMut(&'e Expr)) {
        match self {
            Expr::Literal(_) | Expr::Ref(_) => {}
            Expr::Not(e)
            | Expr::Neg(e)
            | Expr::IsNull(e, _)
            | Expr::Cast(e, _)
            | Expr::JsonValue(e, _) => visit(e),
            Expr::IsBool { expr, .. } => visit(expr),
            Expr::Arith(_, a, b)
            | Expr::Compare(_, a, b)
            | Expr::And(a, b)
            | Expr::Or(a, b)
            | Expr::Like(a, b, _) => {
                visit(a);
                visit(b);
            }
            Expr::Between(e, low, high, _) => {
                for e in [e, low, high] {
                    visit(e);
                }
            }
            Expr::InList(e, list, _) => {
                visit(e);
                list.iter().for_each(visit);
            }
            Expr::Case {
                operand,
                branches,
                otherwise,
            } => {
                operand.iter().for_each(|e| visit(e));
                for (when, then) in branches {
                    visit(when);
                    visit(then);
                }
                otherwise.iter().for_each(|e| visit(e));
            }
            Expr::Call(_, args) => args.iter().for_each(visit),
            Expr::Struct(members) => members.iter().for_each(|(_, e)| visit(e)),
        }
    }

    /// The value for the event `scope` holds.
    pub fn eval(&self, scope: &dyn Scope) -> Result<Value, EvalError> {
        Ok(match self {
            Expr::Literal(value) => value.clone(),
            Expr::Ref(name) => scope.get(name).map_or(Value::Null, Cow::into_owned),
            Expr::Not(e) => match ops::truth(&e.eval(scope)?)? {
                Some(b) => Value::Bool(!b),
                None => Value::Null,
            },
            Expr::Neg(e) => ops::negate(&e.eval(scope)?)?,
            Expr::Arith(op, a, b) => ops::arith(*op, &a.eval(scope)?, &b.eval(scope)?)?,
            Expr::Compare(op, a, b) => match ops::compare(&a.eval(scope)?, &b.eval(scope)?)? {
                Some(ordering) => Value::Bool(op.holds(ordering)),
                None => Value::Null,
            },
            Expr::And(a, b) => ops::and(a.truth(scope)?, || b.truth(scope))?,
            Expr::Or(a, b) => ops::or(a.truth(scope)?, || b.truth(scope))?,
            Expr::IsNull(e, negated) => {
                let null = match &**e {
                    Expr::Ref(name) => scope.is_null(name),
                    e => e.eval(scope)?.is_null(),
                };
                Value::Bool(null != *negated)
            }
            Expr::IsBool {
                expr,
                value,
                negated,
            } => Value::Bool((expr.truth(scope)? == Some(*value)) != *negated),
            Expr::InList(e, list, negated) => {
                let needle = e.eval(scope)?;
                ops::in_list(&needle, list.iter().map(|e| e.eval(scope)), *negated)?
            }
            Expr::Between(e, low, high, negated) => {
                let value = e.eval(scope)?;
                let above = ops::compare(&value, &low.eval(scope)?)?.map(|o| o.is_ge());
                let below = ops::compare(&value, &high.eval(scope)?)?.map(|o| o.is_le());
                let within = ops::and(above, || Ok(below))?;
                match (within, negated) {
                    (Value::Bool(b), true) => Value::Bool(!b),
                    (within, _) => within,
                }
            }
            Expr::Like(e, pattern, negated) => {
                match ops::like(&e.eval(scope)?, &pattern.eval(scope)?)? {
                    Some(matched) => Value::Bool(matched != *negated),
                    None => Value::Null,
                }
            }
            Expr::Case { .. } => match self.case_branch(scope)? {
                Some(branch) => branch.eval(scope)?,
                None => Value::Null,
            },
            Expr::Cast(e, target) => target.apply(e.eval(scope)?)?,
            Expr::Call(function, args) => function.call(args, scope)?,
            Expr::JsonValue(e, path) => path.value_in(e.eval(scope)?)?,
            Expr::Struct(members) => {
                let mut object = Map::with_capacity(members.len());
                for (name, e) in members {
                    object.insert(name.clone(), e.eval(scope)?);
                }
                Value::Object(object)
            }
        })
    }

    /// Writes the value as JSON text, without building the objects of
    /// `STRUCT`s or copying the values of names (what `eval` would serialize).
    pub fn write_json(&self, scope: &dyn Scope, out: &mut Vec<u8>) -> Result<(), EvalError> {
        match self {
            Expr::Ref(name) => match scope.get(name) {
                Some(value) => serde_json::to_writer(&mut *out, value.as_ref()),
                None => serde_json::to_writer(&mut *out, &Value::Null),
            }
            .expect("JSON serializes"),
            Expr::Struct(members) => {
                out.push(b'{');
                for (i, (name, e)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, name).expect("JSON serializes");
                    out.push(b':');
                    e.write_json(scope, out)?;
                }
                out.push(b'}');
            }
            Expr::Case { .. } => match self.case_branch(scope)? {
                Some(branch) => branch.write_json(scope, out)?,
                None => out.extend_from_slice(b"null"),
            },
            other => {
                serde_json::to_writer(&mut *out, &other.eval(scope)?).expect("JSON serializes")
            }
        }
        Ok(())
    }

    /// The branch a `CASE` takes (`None`: no branch and no `ELSE`).
    fn case_branch(&self, scope: &dyn Scope) -> Result<Option<&Expr>, EvalError> {
        let Expr::Case {
            operand,
            branches,
            otherwise,
        } = self
        else {
            unreachable!("a CASE")
        };
        let operand = operand.as_ref().map(|o| o.eval(scope)).transpose()?;
        for (when, then) in branches {
            let taken = match &operand {
                None => when.truth(scope)? == Some(true),
                Some(operand) => {
                    ops::compare(operand, &when.eval(scope)?)?.is_some_and(|o| o.is_eq())
                }
            };
            if taken {
                return Ok(Some(then));
            }
        }
        Ok(otherwise.as_deref())
    }

    /// The expression as a condition: TRUE, FALSE or NULL (`None`).
    pub fn truth(&self, scope: &dyn Scope) -> Result<Option<bool>, EvalError> {
        ops::truth(&self.eval(scope)?)
    }
}

#[cfg(test)]
mod tests;
