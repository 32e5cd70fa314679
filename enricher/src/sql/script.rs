//! The statements of a SQL job file, parsed with `sqlparser`'s parser (its
//! tokenizer, expressions, column definitions, constraints, options and
//! queries); the three statements it does not know (`CREATE STREAM`, `CREATE
//! JOB`, and Flink's computed column `name AS PROCTIME()`) are read with its
//! primitives.

use serde_json::Value;
use sqlparser::ast::{
    self, ColumnDef, Expr, Ident, ObjectName, SqlOption, Statement, TableConstraint,
};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

use super::SqlError;
use crate::expr::Position;

/// A SQL job file.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// `SET a.b = value`: settings of the job file (`kafka.brokers`, `tables`, …).
    pub settings: Vec<(Vec<String>, Value, Option<Position>)>,
    /// `CREATE STREAM`: topics read or written.
    pub streams: Vec<StreamDecl>,
    /// `CREATE TABLE`: the key of a table of the tables config.
    pub tables: Vec<TableDecl>,
    /// `CREATE JOB`.
    pub jobs: Vec<JobDecl>,
}

/// `CREATE STREAM name (…) WITH (topic = …, format = …)`.
#[derive(Debug, Clone)]
pub struct StreamDecl {
    /// Name in queries.
    pub name: String,
    /// Where it is declared.
    pub at: Option<Position>,
    /// Its options.
    pub options: Vec<SqlOption>,
    /// The column declared `AS PROCTIME()`, if any.
    pub proc_time: Option<String>,
    /// `PRIMARY KEY (…)`: a sink's record key.
    pub key: Vec<String>,
}

/// `CREATE TABLE name (…, PRIMARY KEY (…) NOT ENFORCED) [WITH (…)]`.
#[derive(Debug, Clone)]
pub struct TableDecl {
    /// The table's name in the tables config.
    pub name: String,
    /// Where it is declared.
    pub at: Option<Position>,
    /// Its key columns, in key order.
    pub key: Vec<String>,
    /// Its settings as the tables config names them (`topic`, `mode`,
    /// `mysql.url`, …): empty for a table of the tables config.
    pub options: Vec<(Vec<String>, Value)>,
}

/// `CREATE JOB name [WITH (…)] AS INSERT INTO sink SELECT …`.
#[derive(Debug, Clone)]
pub struct JobDecl {
    /// Job name.
    pub name: String,
    /// Where it is declared.
    pub at: Option<Position>,
    /// Its options.
    pub options: Vec<SqlOption>,
    /// The `INSERT`.
    pub insert: ast::Insert,
}

const STATEMENTS: &str = "a job file holds SET, CREATE STREAM, CREATE TABLE and CREATE JOB \
     statements, each ended by `;`";

fn parse_error(e: ParserError) -> SqlError {
    SqlError::new(None, e.to_string().replace("sql parser error: ", ""))
}

pub(super) fn parse(text: &str) -> Result<Script, SqlError> {
    let mut parser = crate::dialect::parser(text).map_err(parse_error)?;
    let mut script = Script::default();
    loop {
        while parser.consume_token(&Token::SemiColon) {}
        let next = parser.peek_token();
        if next.token == Token::EOF {
            break;
        }
        let at = Position::of_span(next.span);
        if parser.parse_keyword(Keyword::CREATE) {
            let word = parser.next_token();
            match &word.token {
                Token::Word(w) if w.value.eq_ignore_ascii_case("JOB") => {
                    let job = job(&mut parser, at)?;
                    once(script.jobs.iter().map(|j| &j.name), &job.name, at)?;
                    script.jobs.push(job);
                }
                Token::Word(w) if w.keyword == Keyword::STREAM => {
                    let (name, columns, options) = relation(&mut parser)?;
                    once(script.streams.iter().map(|s| &s.name), &name, at)?;
                    script.streams.push(StreamDecl {
                        name,
                        at,
                        options,
                        proc_time: columns.proc_time,
                        key: columns.key,
                    });
                }
                Token::Word(w) if w.keyword == Keyword::TABLE => {
                    let (name, columns, options) = relation(&mut parser)?;
                    once(script.tables.iter().map(|t| &t.name), &name, at)?;
                    if columns.proc_time.is_some() {
                        return Err(SqlError::new(at, "a table has no PROCTIME() column"));
                    }
                    let options = options.iter().map(table_option).collect::<Result<_, _>>()?;
                    script.tables.push(TableDecl {
                        name,
                        at,
                        key: columns.key,
                        options,
                    });
                }
                _ => {
                    return Err(SqlError::new(
                        Position::of_span(word.span),
                        format!("CREATE {} is not supported ({STATEMENTS})", word.token),
                    ));
                }
            }
        } else {
            let statement = parser.parse_statement().map_err(parse_error)?;
            match statement {
                Statement::Set(ast::Set::SingleAssignment {
                    scope: None,
                    hivevar: false,
                    variable,
                    values,
                }) if values.len() == 1 => {
                    let value = literal(&values[0])?;
                    script.settings.push((dotted(&variable), value, at));
                }
                other => {
                    return Err(SqlError::new(
                        at,
                        format!(
                            "`{}` is not supported ({STATEMENTS})",
                            first_words(&other.to_string())
                        ),
                    ));
                }
            }
        }
        let end = parser.peek_token();
        if !matches!(end.token, Token::SemiColon | Token::EOF) {
            return Err(SqlError::new(
                Position::of_span(end.span),
                format!("expected `;` after the statement, found {}", end.token),
            ));
        }
    }
    Ok(script)
}

/// `name` is not among the names declared before.
fn once<'n>(
    mut declared: impl Iterator<Item = &'n String>,
    name: &str,
    at: Option<Position>,
) -> Result<(), SqlError> {
    if declared.any(|n| n == name) {
        return Err(SqlError::new(at, format!("`{name}` is declared twice")));
    }
    Ok(())
}

fn first_words(statement: &str) -> String {
    statement
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A literal of `SET` or an option: a string (`${NAME}` read from the
/// environment, as in YAML files), a number or a boolean.
pub(super) fn literal(value: &Expr) -> Result<Value, SqlError> {
    let not_literal = || {
        SqlError::at(
            value,
            "a setting or option takes a literal: 'text', 42 or TRUE",
        )
    };
    let Expr::Value(v) = value else {
        return Err(not_literal());
    };
    Ok(match &v.value {
        ast::Value::SingleQuotedString(s) => Value::String(
            tributary_config::interpolate_env(s).map_err(|e| SqlError::at(value, e.problem))?,
        ),
        ast::Value::Boolean(b) => Value::Bool(*b),
        ast::Value::Number(n, _) => serde_json::from_str(n)
            .map_err(|_| SqlError::at(value, format!("{n} is not a number")))?,
        _ => return Err(not_literal()),
    })
}

/// An option's or setting's dotted name, part by part.
pub(super) fn dotted(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|p| match p {
            ast::ObjectNamePart::Identifier(i) => i.value.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// Whether `expr` is `PROCTIME()`.
pub(super) fn is_proctime(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("PROCTIME"))
}

/// A table's option: its dotted name and literal value.
fn table_option(option: &SqlOption) -> Result<(Vec<String>, Value), SqlError> {
    match option {
        SqlOption::KeyValue { key, value } => Ok((dotted(key), literal(value)?)),
        other => Err(SqlError::at(other, "write options as name = 'value'")),
    }
}

/// The column list of a stream or table.
#[derive(Default)]
struct Columns {
    proc_time: Option<String>,
    key: Vec<String>,
}

/// `name [(columns)] [WITH (options)]`.
fn relation(parser: &mut Parser) -> Result<(String, Columns, Vec<SqlOption>), SqlError> {
    let name = parser.parse_object_name(false).map_err(parse_error)?;
    let name = single(&name)?;
    let mut columns = Columns::default();
    if parser.consume_token(&Token::LParen) {
        loop {
            column_item(parser, &mut columns)?;
            if parser.consume_token(&Token::Comma) {
                continue;
            }
            parser.expect_token(&Token::RParen).map_err(parse_error)?;
            break;
        }
    }
    let options = parser.parse_options(Keyword::WITH).map_err(parse_error)?;
    Ok((name, columns, options))
}

fn single(name: &ObjectName) -> Result<String, SqlError> {
    match name.0.as_slice() {
        [ast::ObjectNamePart::Identifier(ident)] => Ok(ident.value.clone()),
        _ => Err(SqlError::at(
            name,
            format!("`{name}`: name it with one identifier"),
        )),
    }
}

/// One item of a column list: `name AS PROCTIME()`, a constraint, or a
/// column definition (whose type is documentation: events are JSON).
fn column_item(parser: &mut Parser, columns: &mut Columns) -> Result<(), SqlError> {
    if matches!(&parser.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::AS) {
        let name: Ident = parser.parse_identifier().map_err(parse_error)?;
        parser.expect_keyword(Keyword::AS).map_err(parse_error)?;
        let expr = parser.parse_expr().map_err(parse_error)?;
        if !is_proctime(&expr) {
            return Err(SqlError::at(
                &expr,
                "computed columns are written in the query; a column declared here with AS is \
                 the processing-time attribute: `proc_time AS PROCTIME()`",
            ));
        }
        if columns.proc_time.replace(name.value).is_some() {
            return Err(SqlError::at(&expr, "one PROCTIME() column per stream"));
        }
        return Ok(());
    }
    if let Some(constraint) = parser
        .parse_optional_table_constraint()
        .map_err(parse_error)?
    {
        return primary_key(&constraint, columns);
    }
    let column: ColumnDef = parser.parse_column_def().map_err(parse_error)?;
    if let Some(option) = column.options.iter().find(|o| {
        !matches!(
            o.option,
            ast::ColumnOption::Null | ast::ColumnOption::NotNull
        )
    }) {
        return Err(SqlError::at(
            &column,
            format!(
                "column `{}`: only a type and NULL / NOT NULL are read here, not `{}`",
                column.name, option.option
            ),
        ));
    }
    Ok(())
}

fn primary_key(constraint: &TableConstraint, columns: &mut Columns) -> Result<(), SqlError> {
    let TableConstraint::PrimaryKey(pk) = constraint else {
        return Err(SqlError::at(
            constraint,
            "only PRIMARY KEY (…) NOT ENFORCED is read among constraints",
        ));
    };
    if !columns.key.is_empty() {
        return Err(SqlError::at(constraint, "one PRIMARY KEY per declaration"));
    }
    for column in &pk.columns {
        match &column.column.expr {
            Expr::Identifier(ident) => columns.key.push(ident.value.clone()),
            other => {
                return Err(SqlError::at(
                    other,
                    format!("a key column is a name, not `{other}`"),
                ));
            }
        }
    }
    Ok(())
}

/// `name [WITH (options)] AS INSERT …`.
fn job(parser: &mut Parser, at: Option<Position>) -> Result<JobDecl, SqlError> {
    let name = parser.parse_identifier().map_err(parse_error)?.value;
    let options = parser.parse_options(Keyword::WITH).map_err(parse_error)?;
    parser.expect_keyword(Keyword::AS).map_err(parse_error)?;
    let start = parser.peek_token();
    match parser.parse_statement().map_err(parse_error)? {
        Statement::Insert(insert) => Ok(JobDecl {
            name,
            at,
            options,
            insert,
        }),
        other => Err(SqlError::new(
            Position::of_span(start.span),
            format!(
                "a job is `INSERT INTO <stream> SELECT …`, not `{}`",
                first_words(&other.to_string())
            ),
        )),
    }
}
