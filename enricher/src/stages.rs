//! The stages around a job's joins, compiled from its config: the filter,
//! split into the parts of its `AND`, each checked before the first join that
//! follows every join it reads (before any join when it reads only the input,
//! so no lookup is spent on an event it rejects), and the output's fields.

use std::collections::BTreeMap;

use serde::Deserialize;
use sqlparser::ast::{self, BinaryOperator};

use crate::expr::{self, Expr, Kind, Ref};
use crate::job_names::JobNames;

/// One field of the output.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum OutputField {
    /// `"*"`, or a name written under its last part.
    Name(String),
    /// `{ name: expression }`.
    Computed(BTreeMap<String, String>),
}

impl OutputField {
    /// `"*"`: the event itself.
    pub fn is_event(&self) -> bool {
        matches!(self, OutputField::Name(name) if name == "*")
    }

    /// The output name and the expression, for a field other than `"*"`.
    fn named(&self) -> Result<(String, &str), String> {
        match self {
            OutputField::Name(text) => {
                let last = text.rsplit('.').next().unwrap_or(text).trim();
                if last.is_empty() || !last.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    return Err(format!(
                        "{text:?} is not a name: give an expression its name with `{{ name: expression }}`"
                    ));
                }
                Ok((last.to_owned(), text))
            }
            OutputField::Computed(map) => match map.iter().next() {
                Some((name, expr)) if map.len() == 1 => Ok((name.clone(), expr)),
                _ => Err("write one `name: expression` per field".to_owned()),
            },
        }
    }
}

/// A stage that does not compile: the config field (relative to the job)
/// and the problem.
#[derive(Debug, Clone, PartialEq)]
pub struct StageError {
    /// `filter`, `output.fields[2]`, …
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

/// An expression and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    /// As written (normalised by the parser).
    pub text: String,
    /// Compiled.
    pub expr: Expr,
}

/// The output's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputFields {
    /// The event (with what un-aliased joins copied into it) comes first.
    pub event: bool,
    /// The fields after it (replacing the event's own of the same name).
    pub fields: Vec<(String, Compiled)>,
}

/// A job's compiled stages.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stages {
    /// The conditions checked before each join (`filters[joins]`: after the last).
    pub filters: Vec<Vec<Compiled>>,
    /// The output's fields (absent: the event as the joins left it).
    pub output: Option<OutputFields>,
}

impl Stages {
    /// Compiles the filter and output fields of a job with these names.
    pub fn compile(
        names: &JobNames<'_>,
        filter: Option<&str>,
        fields: Option<&[OutputField]>,
    ) -> Result<Self, StageError> {
        let joins = names.joins().len();
        let mut filters = vec![Vec::new(); joins + 1];
        if let Some(text) = filter {
            let error = |problem: String| StageError {
                field: "filter".into(),
                problem,
            };
            let condition = expr::parse(text).map_err(|e| error(e.to_string()))?;
            for part in conjuncts(&condition) {
                let compiled = expr::compile(part, names).map_err(|e| error(e.to_string()))?;
                if !matches!(compiled.kind(), Kind::Bool | Kind::Any) {
                    return Err(error(format!(
                        "must be a condition, not {}: `{part}`",
                        compiled.kind().name()
                    )));
                }
                let at = position(names, &compiled);
                filters[at].push(Compiled {
                    text: part.to_string(),
                    expr: compiled,
                });
            }
        }
        let output = fields
            .map(|fields| output_fields(names, fields))
            .transpose()?;
        Ok(Stages { filters, output })
    }
}

/// The parts of a chain of `AND`s.
fn conjuncts(condition: &ast::Expr) -> Vec<&ast::Expr> {
    match condition {
        ast::Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut parts = conjuncts(left);
            parts.extend(conjuncts(right));
            parts
        }
        ast::Expr::Nested(inner) => conjuncts(inner),
        other => vec![other],
    }
}

/// The first join index at which everything `part` reads is there.
fn position(names: &JobNames<'_>, part: &Expr) -> usize {
    // Event fields may have been set by an un-aliased join.
    let after_unaliased = names
        .joins()
        .iter()
        .rposition(Option::is_none)
        .map_or(0, |i| i + 1);
    part.refs()
        .into_iter()
        .map(|r| match r {
            Ref::Event(_) => after_unaliased,
            Ref::Column { join, .. } | Ref::Row(join) => join + 1,
        })
        .max()
        .unwrap_or(0)
}

fn output_fields(names: &JobNames<'_>, fields: &[OutputField]) -> Result<OutputFields, StageError> {
    let event = fields.first().is_some_and(OutputField::is_event);
    let mut compiled: Vec<(String, Compiled)> = Vec::with_capacity(fields.len());
    for (i, field) in fields.iter().enumerate().skip(usize::from(event)) {
        let error = |problem: String| StageError {
            field: format!("output.fields[{i}]"),
            problem,
        };
        if field.is_event() {
            return Err(error("`*` (the event) comes first, if at all".into()));
        }
        let (name, text) = field.named().map_err(error)?;
        if compiled.iter().any(|(n, _)| *n == name) {
            return Err(error(format!("`{name}` is written twice")));
        }
        let parsed = expr::parse(text).map_err(|e| error(e.to_string()))?;
        let value = expr::compile(&parsed, names).map_err(|e| error(e.to_string()))?;
        compiled.push((
            name,
            Compiled {
                text: parsed.to_string(),
                expr: value,
            },
        ));
    }
    if !event && compiled.is_empty() {
        return Err(StageError {
            field: "output.fields".into(),
            problem: "name at least one field (or \"*\" for the event)".into(),
        });
    }
    Ok(OutputFields {
        event,
        fields: compiled,
    })
}
