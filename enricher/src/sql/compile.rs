//! A SQL job file compiled to the job model: the document a YAML job file
//! would hold (settings from `SET`, one job per `CREATE JOB`), validated by
//! the same code. What is outside the subset is refused here, with the line
//! and column and what is supported.

use std::collections::HashSet;

use serde_json::{Map, Value, json};
use sqlparser::ast::{
    self, BinaryOperator, Expr, GroupByExpr, JoinConstraint, JoinOperator, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, SqlOption, TableFactor, TableVersion,
};

use super::script::{JobDecl, Script, StreamDecl, dotted, is_proctime, literal};
use super::{SqlError, TableKeys};
use crate::config::EnrichConfig;
use crate::expr::{self, Names as _, Position, Ref};
use crate::job_names::JobNames;

const QUERY: &str = "a job is INSERT INTO <stream> SELECT <fields> FROM <stream> [AS s] \
     {[LEFT] JOIN <table> FOR SYSTEM_TIME AS OF s.<proctime> [AS t] ON t.<key> = s.<field> \
     [AND …]} [WHERE <condition>]";

/// The job file `script` declares on top of the settings `document` (a YAML
/// job file's, for SQL in its `sql:` field).
pub(super) fn job_file(
    script: &Script,
    keys: &TableKeys,
    mut document: Map<String, Value>,
) -> Result<EnrichConfig, SqlError> {
    for (name, value, at) in &script.settings {
        set(&mut document, name, value.clone(), *at)?;
    }
    let mut keys = keys.clone();
    for table in &script.tables {
        if table.key.is_empty() {
            return Err(SqlError::new(
                table.at,
                format!(
                    "declare the key of table `{}`: CREATE TABLE {} (PRIMARY KEY (…) NOT ENFORCED)",
                    table.name, table.name
                ),
            ));
        }
        if let Some(known) = keys.get(&table.name)
            && *known != table.key
        {
            return Err(SqlError::new(
                table.at,
                format!(
                    "table `{}` has the key {known:?} in the tables config, not {:?}",
                    table.name, table.key
                ),
            ));
        }
        keys.insert(table.name.clone(), table.key.clone());
    }
    for stream in &script.streams {
        stream_options(stream)?;
    }
    if script.jobs.is_empty() {
        return Err(SqlError::new(
            None,
            "declare a job: CREATE JOB <name> WITH (dead_letter_topic = '…') AS INSERT INTO …",
        ));
    }
    let mut jobs = Vec::new();
    for decl in &script.jobs {
        let (job, delivery) = Job::compile(script, &keys, decl)?;
        jobs.push(job);
        if let Some(delivery) = delivery {
            match document.get("delivery") {
                Some(set) if *set != delivery => {
                    return Err(SqlError::new(
                        decl.at,
                        format!(
                            "delivery {delivery} differs from {set} of another job or SET: a job \
                             file has one delivery"
                        ),
                    ));
                }
                _ => {
                    document.insert("delivery".into(), delivery);
                }
            }
        }
    }
    document.insert("jobs".into(), Value::Array(jobs));
    tributary_config::from_document(Value::Object(document))
        .map_err(|e| SqlError::new(None, format!("{}: {}", e.field, e.problem)))
}

/// `SET a.b.c = value` into the document.
pub(super) fn set(
    document: &mut Map<String, Value>,
    name: &[String],
    value: Value,
    at: Option<Position>,
) -> Result<(), SqlError> {
    let dotted = name.join(".");
    if name.first().is_some_and(|n| n == "jobs") {
        return Err(SqlError::new(
            at,
            "jobs are declared with CREATE JOB, not SET",
        ));
    }
    let (last, parents) = name.split_last().expect("a name");
    let mut object = document;
    for parent in parents {
        let slot = object
            .entry(parent.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        object = slot.as_object_mut().ok_or_else(|| {
            SqlError::new(at, format!("`{dotted}`: `{parent}` is set to a value"))
        })?;
    }
    if object.insert(last.clone(), value).is_some() {
        return Err(SqlError::new(at, format!("`{dotted}` is set twice")));
    }
    Ok(())
}

/// The stream `name` declares.
fn stream<'s>(script: &'s Script, name: &ast::ObjectName) -> Result<&'s StreamDecl, SqlError> {
    let text = name.to_string();
    script
        .streams
        .iter()
        .find(|s| ident(name) == Some(&s.name))
        .ok_or_else(|| {
            SqlError::at(
                name,
                format!(
                    "`{text}` is not a declared stream: CREATE STREAM {text} WITH (topic = '…')"
                ),
            )
        })
}

fn ident(name: &ast::ObjectName) -> Option<&String> {
    match name.0.as_slice() {
        [ast::ObjectNamePart::Identifier(i)] => Some(&i.value),
        _ => None,
    }
}

/// Options as (dotted key, value as text, where the key starts).
fn option_pairs(list: &[SqlOption]) -> Result<Vec<(String, String, Option<Position>)>, SqlError> {
    list.iter()
        .map(|option| match option {
            SqlOption::KeyValue { key, value } => {
                let at = match key.0.first() {
                    Some(ast::ObjectNamePart::Identifier(i)) => Position::of_span(i.span),
                    _ => Position::of(option),
                };
                let text = match literal(value)? {
                    Value::String(text) => text,
                    other => other.to_string(),
                };
                Ok((dotted(key).join("."), text, at))
            }
            other => Err(SqlError::at(other, "write options as name = 'value'")),
        })
        .collect()
}

/// A stream's topics and format.
fn stream_options(stream: &StreamDecl) -> Result<(Vec<String>, Option<String>), SqlError> {
    let (mut topics, mut format) = (None, None);
    for (key, value, at) in option_pairs(&stream.options)? {
        match key.as_str() {
            "topic" => {
                topics = Some(
                    value
                        .split(';')
                        .map(|t| t.trim().to_owned())
                        .collect::<Vec<_>>(),
                )
            }
            "format" => {
                format = Some(match value.as_str() {
                    "json" => "json",
                    "change" | "debezium-json" => "change",
                    other => {
                        return Err(SqlError::new(
                            at,
                            format!(
                                "format {other:?} is not supported (json, change or debezium-json)"
                            ),
                        ));
                    }
                })
            }
            other => {
                return Err(SqlError::new(
                    at,
                    format!("stream option `{other}` is not supported (topic, format)"),
                ));
            }
        }
    }
    let topics = topics.ok_or_else(|| {
        SqlError::new(
            stream.at,
            format!(
                "stream `{}` names no topic: WITH (topic = '…')",
                stream.name
            ),
        )
    })?;
    Ok((topics, format.map(str::to_owned)))
}

/// One lookup join being compiled.
struct JoinPlan {
    alias: String,
    document: Map<String, Value>,
    /// Columns read (in first-read order); `None`: the whole row.
    columns: Option<Vec<String>>,
    key_columns: Vec<String>,
}

struct Job<'s> {
    script: &'s Script,
    input_alias: String,
    proc_time: Option<String>,
    joins: Vec<JoinPlan>,
}

impl<'s> Job<'s> {
    /// The job's document and the delivery it asks for.
    fn compile(
        script: &'s Script,
        keys: &TableKeys,
        decl: &JobDecl,
    ) -> Result<(Value, Option<Value>), SqlError> {
        let insert = &decl.insert;
        let ast::TableObject::TableName(sink_name) = &insert.table else {
            return Err(SqlError::new(
                decl.at,
                "INSERT INTO names a declared stream",
            ));
        };
        if !insert.columns.is_empty() || insert.overwrite || insert.on.is_some() {
            return Err(SqlError::at(
                sink_name,
                "INSERT INTO <stream> SELECT …: the SELECT names the fields (no column list, \
                 OVERWRITE or ON CONFLICT)",
            ));
        }
        let sink = stream(script, sink_name)?;
        let (sink_topics, sink_format) = stream_options(sink)?;
        if sink_topics.len() != 1 || sink_format.as_deref().is_some_and(|f| f != "json") {
            return Err(SqlError::new(
                sink.at,
                format!("stream `{}` is written: one topic, format json", sink.name),
            ));
        }
        let query = insert
            .source
            .as_ref()
            .ok_or_else(|| SqlError::new(decl.at, QUERY))?;
        if query.with.is_some()
            || query.order_by.is_some()
            || query.limit_clause.is_some()
            || query.fetch.is_some()
        {
            return Err(SqlError::at(
                query.as_ref(),
                format!("WITH, ORDER BY, LIMIT and FETCH are not supported ({QUERY})"),
            ));
        }
        let SetExpr::Select(select) = query.body.as_ref() else {
            return Err(SqlError::at(
                query.body.as_ref(),
                format!("UNION, VALUES and nested queries are not supported ({QUERY})"),
            ));
        };
        if let Some(having) = &select.having {
            return Err(SqlError::at(
                having,
                "HAVING: aggregations are not supported (a job enriches each event on its own)",
            ));
        }
        if !matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty())
        {
            return Err(SqlError::at(
                select.as_ref(),
                "GROUP BY: aggregations and windows are not supported (a job enriches each \
                 event on its own)",
            ));
        }
        if select.distinct.is_some()
            || select.top.is_some()
            || select.into.is_some()
            || !select.named_window.is_empty()
            || select.qualify.is_some()
            || !select.lateral_views.is_empty()
        {
            return Err(SqlError::at(
                select.as_ref(),
                format!(
                    "DISTINCT, TOP, INTO, WINDOW, QUALIFY and LATERAL VIEW are not supported ({QUERY})"
                ),
            ));
        }
        let [from] = select.from.as_slice() else {
            return Err(SqlError::at(
                select.as_ref(),
                format!("one stream in FROM, joined with tables ({QUERY})"),
            ));
        };
        let TableFactor::Table {
            name,
            alias,
            args: None,
            version: None,
            ..
        } = &from.relation
        else {
            return Err(SqlError::at(
                &from.relation,
                format!(
                    "FROM names a declared stream: windows, table functions and subqueries are \
                     not supported ({QUERY})"
                ),
            ));
        };
        let input = stream(script, name)?;
        let (topics, format) = stream_options(input)?;
        let mut job = Job {
            script,
            input_alias: alias
                .as_ref()
                .map_or_else(|| input.name.clone(), |a| a.name.value.clone()),
            proc_time: input.proc_time.clone(),
            joins: Vec::new(),
        };
        for join in &from.joins {
            job.join(keys, join)?;
        }
        let options = job.job_options(decl)?;
        // Every expression, compiled once against every join's whole row, to
        // find the columns each join must fetch, and to point at errors.
        let names = job.names(None);
        let mut fields = Vec::new();
        let mut names_written = std::collections::BTreeSet::new();
        let mut reads = Vec::new();
        for (i, item) in select.projection.iter().enumerate() {
            match item {
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(n),
                    _,
                ) if ident(n) == Some(&job.input_alias) => {
                    if i > 0 {
                        return Err(SqlError::at(
                            item,
                            format!("{n}.* (the event) comes first, if at all"),
                        ));
                    }
                    fields.push(json!("*"));
                }
                SelectItem::QualifiedWildcard(kind, _) => {
                    return Err(SqlError::at(
                        item,
                        format!(
                            "`{kind}`: name the table's columns (t.name AS user_name) or nest \
                             its row (`t AS user`)"
                        ),
                    ));
                }
                SelectItem::Wildcard(_) => {
                    return Err(SqlError::at(
                        item,
                        format!(
                            "SELECT *: write {}.* for the stream's fields",
                            job.input_alias
                        ),
                    ));
                }
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    let name = match (item, e) {
                        (SelectItem::ExprWithAlias { alias, .. }, _) => alias.value.clone(),
                        (_, Expr::Identifier(i)) => i.value.clone(),
                        (_, Expr::CompoundIdentifier(parts)) => {
                            parts.last().expect("parts").value.clone()
                        }
                        _ => {
                            return Err(SqlError::at(e, format!("name this field: `{e} AS name`")));
                        }
                    };
                    if !names_written.insert(name.clone()) {
                        return Err(SqlError::at(
                            item,
                            format!("`{name}` is written twice: name one of them with AS"),
                        ));
                    }
                    reads.extend(expr::compile(e, &names)?.values_read().into_iter().cloned());
                    fields.push(json!({ name: e.to_string() }));
                }
                other => return Err(SqlError::at(other, format!("`{other}` is not supported"))),
            }
        }
        // The output key is read from what is written.
        if fields.first() != Some(&json!("*"))
            && let Some(column) = sink.key.iter().find(|c| !names_written.contains(*c))
        {
            return Err(SqlError::new(
                sink.at,
                format!(
                    "`{}`'s key column `{column}` is not among the fields the job writes \
                     ({names_written:?})",
                    sink.name
                ),
            ));
        }
        let filter = match &select.selection {
            Some(condition) => {
                let compiled = expr::compile(condition, &names)?;
                if !matches!(compiled.kind(), expr::Kind::Bool | expr::Kind::Any) {
                    return Err(SqlError::at(condition, "WHERE needs a condition"));
                }
                reads.extend(compiled.values_read().into_iter().cloned());
                Some(condition.to_string())
            }
            None => None,
        };
        job.fetch(&reads);
        let mut output = Map::new();
        output.insert("topic".into(), json!(sink_topics[0]));
        if !sink.key.is_empty() {
            output.insert("key".into(), json!(sink.key));
        }
        output.insert("fields".into(), Value::Array(fields));
        let mut document = Map::new();
        document.insert("name".into(), json!(decl.name));
        let mut input_doc = json!({ "topics": topics, "as": job.input_alias });
        if let Some(format) = format {
            input_doc["format"] = json!(format);
        }
        document.insert("input".into(), input_doc);
        document.insert(
            "joins".into(),
            Value::Array(
                job.joins
                    .into_iter()
                    .map(|j| Value::Object(j.into_document()))
                    .collect(),
            ),
        );
        if let Some(filter) = filter {
            document.insert("filter".into(), json!(filter));
        }
        document.insert("output".into(), Value::Object(output));
        let delivery = options.apply(&mut document, decl)?;
        Ok((Value::Object(document), delivery))
    }

    /// The names of the job's joins so far (`before`: the first joins only),
    /// every join reading whole rows.
    fn names(&self, before: Option<usize>) -> JobNames<'_> {
        let joins = &self.joins[..before.unwrap_or(self.joins.len())];
        JobNames::new(
            Some(&self.input_alias),
            joins
                .iter()
                .map(|j| Some((j.alias.as_str(), None)))
                .collect(),
        )
    }

    fn join(&mut self, keys: &TableKeys, join: &ast::Join) -> Result<(), SqlError> {
        let TableFactor::Table {
            name,
            alias,
            version,
            args: None,
            ..
        } = &join.relation
        else {
            return Err(SqlError::at(
                &join.relation,
                format!("a join reads a table of the tables config ({QUERY})"),
            ));
        };
        let table = ident(name)
            .cloned()
            .ok_or_else(|| SqlError::at(name, "name a table"))?;
        if self.script.streams.iter().any(|s| s.name == table) {
            return Err(SqlError::at(
                name,
                "stream–stream joins are not supported: a job joins its stream with tables \
                 (lookups FOR SYSTEM_TIME AS OF)",
            ));
        }
        let alias = alias
            .as_ref()
            .map_or_else(|| table.clone(), |a| a.name.value.clone());
        if alias == self.input_alias || self.joins.iter().any(|j| j.alias == alias) {
            return Err(SqlError::at(
                name,
                format!("`{alias}` names another join or the stream"),
            ));
        }
        let mut document = Map::new();
        document.insert("table".into(), json!(table));
        let Some(TableVersion::ForSystemTimeAsOf(time)) = version else {
            return Err(SqlError::at(
                name,
                format!(
                    "a lookup join reads the table FOR SYSTEM_TIME AS OF {0}.{1}: the latest row \
                     (with {1} declared `{1} AS PROCTIME()` in the stream), or AS OF a time \
                     field of the stream: the row of a versioned table at that time",
                    self.input_alias,
                    self.proc_time.as_deref().unwrap_or("proc_time")
                ),
            ));
        };
        if let Some(field) = self.as_of_field(time)? {
            document.insert("as_of".into(), json!({ "field": field }));
        }
        let (join_type, on) = match &join.join_operator {
            JoinOperator::Left(JoinConstraint::On(on))
            | JoinOperator::LeftOuter(JoinConstraint::On(on)) => ("left", on),
            JoinOperator::Join(JoinConstraint::On(on))
            | JoinOperator::Inner(JoinConstraint::On(on)) => ("inner", on),
            _ => {
                return Err(SqlError::at(
                    &join.relation,
                    format!("only [INNER] JOIN and LEFT [OUTER] JOIN … ON are supported ({QUERY})"),
                ));
            }
        };
        document.insert("type".into(), json!(join_type));
        let key_columns = keys.get(&table).cloned().ok_or_else(|| {
            SqlError::at(
                name,
                format!(
                    "the key of table `{table}` is not declared: CREATE TABLE {table} (PRIMARY KEY \
                     (…) NOT ENFORCED), or `key: [...]` in the tables config"
                ),
            )
        })?;
        let pairs = self.key_pairs(&alias, on)?;
        let mut key = Vec::with_capacity(key_columns.len());
        for column in &key_columns {
            let found = pairs.iter().find(|(c, _)| c == column).ok_or_else(|| {
                SqlError::at(
                    on,
                    format!(
                        "a lookup join is on the table's whole key ({}); ON does not give `{alias}.{column}`",
                        key_columns.join(", ")
                    ),
                )
            })?;
            key.push(json!(found.1));
        }
        if let Some((column, _)) = pairs.iter().find(|(c, _)| !key_columns.contains(c)) {
            return Err(SqlError::at(
                on,
                format!(
                    "`{alias}.{column}` is not a key column of `{table}` (key: {}): a lookup \
                     join is on the table's key; filter on other columns in WHERE",
                    key_columns.join(", ")
                ),
            ));
        }
        document.insert(
            "key".into(),
            if key.len() == 1 {
                key.pop().expect("one")
            } else {
                Value::Array(key)
            },
        );
        document.insert("as".into(), json!(alias));
        self.joins.push(JoinPlan {
            alias,
            document,
            columns: Some(Vec::new()),
            key_columns,
        });
        Ok(())
    }

    /// The event field an `AS OF` reads (`None`: the processing time, the latest row).
    fn as_of_field(&self, time: &Expr) -> Result<Option<String>, SqlError> {
        let parts: Vec<String> = match time {
            _ if is_proctime(time) => return Ok(None),
            Expr::Identifier(i) => vec![i.value.clone()],
            Expr::CompoundIdentifier(parts) => parts.iter().map(|p| p.value.clone()).collect(),
            other => {
                return Err(SqlError::at(
                    other,
                    "AS OF names the stream's PROCTIME() column or one of its time fields",
                ));
            }
        };
        let path = match parts.split_first() {
            Some((first, rest)) if *first == self.input_alias && !rest.is_empty() => rest.to_vec(),
            _ => parts,
        };
        if path.len() == 1 && self.proc_time.as_ref() == Some(&path[0]) {
            return Ok(None);
        }
        if self.proc_time.is_none()
            && path.len() == 1
            && matches!(path[0].to_lowercase().as_str(), "proc_time" | "proctime")
        {
            return Err(SqlError::at(
                time,
                format!(
                    "the stream declares no processing-time column: CREATE STREAM … ({} AS \
                     PROCTIME()) (or read AS OF PROCTIME())",
                    path[0]
                ),
            ));
        }
        Ok(Some(path.join(".")))
    }

    /// `t.key = s.field [AND …]`: each key column of the join `alias` and the
    /// path (through the stream or an earlier join) giving it.
    fn key_pairs(&self, alias: &str, on: &Expr) -> Result<Vec<(String, String)>, SqlError> {
        let mut pairs = Vec::new();
        let mut parts = vec![on];
        while let Some(part) = parts.pop() {
            let (left, right) = match part {
                Expr::Nested(inner) => {
                    parts.push(inner);
                    continue;
                }
                Expr::BinaryOp {
                    left,
                    op: BinaryOperator::And,
                    right,
                } => {
                    parts.push(right);
                    parts.push(left);
                    continue;
                }
                Expr::BinaryOp {
                    left,
                    op: BinaryOperator::Eq,
                    right,
                } => (left, right),
                other => {
                    return Err(SqlError::at(
                        other,
                        format!(
                            "ON equates the table's key columns with fields: `{alias}.id = s.user_id [AND …]`"
                        ),
                    ));
                }
            };
            let column_of = |e: &Expr| match e {
                Expr::CompoundIdentifier(p) if p.len() == 2 && p[0].value == alias => {
                    Some(p[1].value.clone())
                }
                _ => None,
            };
            let (column, other) = match (column_of(left), column_of(right)) {
                (Some(c), None) => (c, right.as_ref()),
                (None, Some(c)) => (c, left.as_ref()),
                _ => {
                    return Err(SqlError::at(
                        part,
                        format!(
                            "ON equates a key column of `{alias}` with a field of the stream or an earlier join"
                        ),
                    ));
                }
            };
            let path: Vec<String> = match other {
                Expr::Identifier(i) => vec![i.value.clone()],
                Expr::CompoundIdentifier(p) => p.iter().map(|i| i.value.clone()).collect(),
                _ => {
                    return Err(SqlError::at(
                        other,
                        format!(
                            "`{alias}.{column}` is compared with a field (`s.user_id`), not an \
                             expression: compute it in the stream, or join on the field"
                        ),
                    ));
                }
            };
            let names = self.names(None);
            match names.resolve(&path) {
                Ok(Ref::Row(_)) | Err(_) => {
                    return Err(SqlError::at(
                        other,
                        format!("`{other}` is not a field of the stream or an earlier join"),
                    ));
                }
                Ok(_) => {}
            }
            if pairs.iter().any(|(c, _)| *c == column) {
                return Err(SqlError::at(
                    part,
                    format!("`{alias}.{column}` is compared twice"),
                ));
            }
            pairs.push((column, path.join(".")));
        }
        Ok(pairs)
    }

    /// Records what each join must fetch: the columns the query reads of it,
    /// or its whole row.
    fn fetch(&mut self, reads: &[Ref]) {
        // Later joins' keys read earlier joins too.
        let key_reads: Vec<Ref> = self
            .joins
            .iter()
            .enumerate()
            .flat_map(|(i, j)| {
                let names = self.names(Some(i));
                let key = match &j.document["key"] {
                    Value::Array(paths) => paths.clone(),
                    one => vec![one.clone()],
                };
                key.into_iter()
                    .filter_map(move |p| {
                        let parts: Vec<String> =
                            p.as_str()?.split('.').map(str::to_owned).collect();
                        names.resolve(&parts).ok()
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        for read in reads.iter().chain(&key_reads) {
            match read {
                Ref::Row(j) => self.joins[*j].columns = None,
                Ref::Column { join, column, .. } => {
                    if let Some(columns) = &mut self.joins[*join].columns
                        && !columns.contains(column)
                    {
                        columns.push(column.clone());
                    }
                }
                Ref::Event(_) => {}
            }
        }
    }

    fn job_options(&self, decl: &JobDecl) -> Result<JobOptions, SqlError> {
        let mut options = JobOptions::default();
        let mut seen = HashSet::new();
        for (key, value, at) in option_pairs(&decl.options)? {
            if !seen.insert(key.clone()) {
                return Err(SqlError::new(at, format!("option `{key}` is given twice")));
            }
            let (scope, name) = match key.split_once('.') {
                Some((alias, name)) => (Some(alias), name),
                None => (None, key.as_str()),
            };
            match (scope, name) {
                (None, "delivery") => options.delivery = Some(value),
                (None, "dead_letter_topic") => options.dead_letter = Some(value),
                (None, "group_id") => options.group_id = Some(value),
                (None, "retry_topic") => options.retry_topic = Some(value),
                (None, "retry_delay_ms") => options.retry_delay_ms = Some(number(&value, at)?),
                (None, "retry_max_attempts") => {
                    options.retry_max_attempts = Some(number(&value, at)?)
                }
                (Some(alias), option @ ("on_miss" | "max_wait_ms" | "time_unit")) => {
                    let Some(join) = self.joins.iter().position(|j| j.alias == alias) else {
                        return Err(SqlError::new(
                            at,
                            format!("`{alias}` is not a join of this job"),
                        ));
                    };
                    options.joins.push((join, option.to_owned(), value, at));
                }
                _ => {
                    return Err(SqlError::new(
                        at,
                        format!(
                            "job option `{key}` is not supported (delivery, dead_letter_topic, \
                             group_id, retry_topic, retry_delay_ms, retry_max_attempts, and per \
                             join <alias>.on_miss, <alias>.max_wait_ms, <alias>.time_unit)"
                        ),
                    ));
                }
            }
        }
        options.join_types = self
            .joins
            .iter()
            .map(|j| j.document.get("type").cloned())
            .collect();
        Ok(options)
    }
}

fn number(value: &str, at: Option<Position>) -> Result<u64, SqlError> {
    value
        .parse()
        .map_err(|_| SqlError::new(at, format!("{value:?} is not a whole number")))
}

/// The options of `CREATE JOB … WITH (…)`.
#[derive(Default)]
struct JobOptions {
    delivery: Option<String>,
    dead_letter: Option<String>,
    group_id: Option<String>,
    retry_topic: Option<String>,
    retry_delay_ms: Option<u64>,
    retry_max_attempts: Option<u64>,
    /// Per join: its index, the option, the value, where.
    joins: Vec<(usize, String, String, Option<Position>)>,
    /// Each join's type.
    join_types: Vec<Option<Value>>,
}

impl JobOptions {
    /// Writes the options into the job's document; the delivery is the file's.
    fn apply(
        self,
        document: &mut Map<String, Value>,
        decl: &JobDecl,
    ) -> Result<Option<Value>, SqlError> {
        let dead_letter = self.dead_letter.ok_or_else(|| {
            SqlError::new(
                decl.at,
                format!(
                    "job `{}` names no dead-letter topic: CREATE JOB {} WITH (dead_letter_topic = '…')",
                    decl.name, decl.name
                ),
            )
        })?;
        document.insert("dead_letter".into(), json!({ "topic": dead_letter }));
        if let Some(group) = self.group_id {
            document.insert("group_id".into(), json!(group));
        }
        if let Some(topic) = self.retry_topic {
            let mut retry = json!({ "topic": topic });
            if let Some(delay) = self.retry_delay_ms {
                retry["delay_ms"] = json!(delay);
            }
            if let Some(attempts) = self.retry_max_attempts {
                retry["max_attempts"] = json!(attempts);
            }
            document.insert("retry".into(), retry);
        } else if self.retry_delay_ms.is_some() || self.retry_max_attempts.is_some() {
            return Err(SqlError::new(
                decl.at,
                "retry_delay_ms and retry_max_attempts need retry_topic",
            ));
        }
        let joins = document
            .get_mut("joins")
            .and_then(Value::as_array_mut)
            .expect("joins written before the options");
        for (join, option, value, at) in self.joins {
            let target = joins[join].as_object_mut().expect("a join document");
            match option.as_str() {
                "on_miss" => {
                    if self.join_types[join].as_ref() != Some(&json!("inner")) {
                        return Err(SqlError::new(
                            at,
                            "on_miss applies to inner joins: a LEFT JOIN keeps the event, with \
                             NULLs, on a miss",
                        ));
                    }
                    if !matches!(value.as_str(), "drop" | "dlq" | "retry") {
                        return Err(SqlError::new(
                            at,
                            format!("on_miss {value:?}: drop, dlq or retry"),
                        ));
                    }
                    target.insert("on_miss".into(), json!(value));
                }
                "max_wait_ms" | "time_unit" => {
                    let Some(as_of) = target.get_mut("as_of").and_then(Value::as_object_mut) else {
                        return Err(SqlError::new(
                            at,
                            format!("{option} applies to a join AS OF a time field of the stream"),
                        ));
                    };
                    let (name, value) = match option.as_str() {
                        "max_wait_ms" => ("max_wait_ms", json!(number(&value, at)?)),
                        _ => ("unit", json!(value)),
                    };
                    as_of.insert(name.into(), value);
                }
                _ => unreachable!("join options are checked when read"),
            }
        }
        Ok(self.delivery.map(Value::String))
    }
}

impl JoinPlan {
    fn into_document(mut self) -> Map<String, Value> {
        let select = match self.columns {
            None => None,
            Some(columns) if columns.is_empty() => Some(vec![self.key_columns[0].clone()]),
            Some(columns) => Some(columns),
        };
        if let Some(select) = select {
            self.document.insert("select".into(), json!(select));
        }
        self.document
    }
}
