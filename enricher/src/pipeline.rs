//! What a job does to one input record: parse it, run its join steps in order,
//! and decide what to write: an enriched event, nothing, or a dead letter with
//! the reason. No Kafka here, so every rule is unit-tested with in-memory tables.
//!
//! An as-of join reads its (versioned) table at the event's time, from a
//! field or the record's timestamp. When the key's partition has not reached
//! that time (behind its topic, its newest version older), the join waits up
//! to `max_wait_ms` for it, then joins what the table holds and counts it
//! (`result="ahead"`). A time older than the history the table keeps is a
//! miss with that reason (`result="beyond_history"`).
//!
//! An aliased join (`as: u`) keeps the row it found for the job's expressions
//! instead of copying columns into the event; the filter's parts run between
//! the joins ([`crate::stages`]), and the output's fields, when named, are
//! computed last.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use serde_json::Value;
use tributary_metrics::StripedCounter;
use tributary_proto::debezium_json;
use tributary_proto::event_time::{self, TimeUnit};
use tributary_table_api::{AsOf, Columns, LookupError, Table};

use crate::config::{AsOfConfig, InputFormat, JobConfig, JoinType, MissPolicy};
use crate::event::{Event, write_member};
use crate::expr::{Names as _, Ref, Scope};
use crate::field_path::{FieldPath, KeyFieldError, key_of};
use crate::metrics::EnrichMetrics;
use crate::skip::Skip;
use crate::stages::{Compiled, OutputFields, Stages};

/// What to write for one input record.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The enriched event and its record key.
    Emit {
        /// Record key (the input key when the output names none).
        key: Option<Vec<u8>>,
        /// Enriched event, JSON.
        value: Vec<u8>,
    },
    /// Nothing.
    Skip(Skip),
    /// A dead letter, with the reason.
    Dead(String),
    /// Enrich again later (an inner join with `on_miss: retry` missed), with the reason.
    Retry(String),
    /// A table partition the key lives in is not held here: after a rebalance the
    /// event belongs to another instance; otherwise the input is not co-partitioned.
    NotHeld {
        /// Table looked up.
        table: String,
        /// Its partition the key maps to.
        partition: i32,
    },
}

/// A row a join found.
enum Row {
    /// The selected columns.
    Columns(Columns),
    /// The whole row (the join selects no columns).
    Whole(Arc<Value>),
}

/// What a join's lookup found.
enum Found {
    /// The row.
    Row(Row),
    /// No row (at the time asked, for an as-of join).
    Missing,
    /// The time asked is older than the history the table keeps.
    BeyondHistory {
        /// The oldest time the table answers for.
        horizon: i64,
    },
}

/// Where an as-of join finds the event's time.
enum EventTime {
    /// A field of the event, numbers in a unit.
    Field(FieldPath, TimeUnit),
    /// The input record's Kafka timestamp.
    RecordTimestamp,
}

/// How often a join waiting for its table to reach an event's time looks again.
const AHEAD_POLL: Duration = Duration::from_millis(20);

/// The as-of part of a join.
struct AsOfJoin {
    time: EventTime,
    max_wait: Duration,
    ahead: StripedCounter,
    beyond_history: StripedCounter,
}

impl AsOfJoin {
    fn new(config: &AsOfConfig, job: &str, table: &str, metrics: &EnrichMetrics) -> Self {
        let time = match &config.field {
            Some(field) => EventTime::Field(
                FieldPath::parse(field).expect("validated with the config"),
                config.unit.unwrap_or_default(),
            ),
            None => EventTime::RecordTimestamp,
        };
        AsOfJoin {
            time,
            max_wait: Duration::from_millis(config.max_wait_ms),
            ahead: metrics.join(job, table, "ahead"),
            beyond_history: metrics.join(job, table, "beyond_history"),
        }
    }

    /// The event's time, µs since the epoch, or why it has none.
    fn time_of(&self, event: &Event<'_>, record_ms: Option<i64>) -> Result<i64, String> {
        match &self.time {
            EventTime::Field(path, unit) => {
                let value = event
                    .get(path)
                    .ok_or_else(|| format!("as_of field `{}` is missing", path.as_str()))?;
                event_time::micros_of(&value, *unit)
                    .map_err(|e| format!("as_of field `{}`: {e}", path.as_str()))
            }
            EventTime::RecordTimestamp => record_ms
                .and_then(|ms| ms.checked_mul(1000))
                .ok_or_else(|| "the record has no timestamp to join as of".to_owned()),
        }
    }
}

/// One join step, resolved against its table.
pub struct Join {
    table: Arc<dyn Table>,
    key: Vec<FieldPath>,
    /// What each key path reads (an aliased join's column, or the event).
    key_refs: Vec<Ref>,
    /// An aliased join: the row is kept for expressions, not copied.
    bound: bool,
    on_miss: Option<MissPolicy>,
    /// The selected columns (`None`: every column of the row).
    select: Option<Vec<String>>,
    /// Output name per selected column, in `select`'s order.
    select_as: Vec<String>,
    /// The same, each written as a JSON object's name and colon.
    select_as_json: Vec<Box<[u8]>>,
    rename: Vec<(String, String)>,
    into: Option<String>,
    /// `into` written as a JSON object's name, with its colon.
    into_json: Option<Box<[u8]>>,
    /// A remote table that cannot answer sends the event to the retry topic.
    retry_unavailable: bool,
    /// Read the table as of the event's time.
    as_of: Option<AsOfJoin>,
    hits: StripedCounter,
    misses: StripedCounter,
}

impl Join {
    fn name(&self) -> &str {
        self.table.name()
    }

    /// The row of `key` (as of `time`, for an as-of join): only the selected
    /// columns when the join selects some.
    async fn lookup(&self, key: &Value, time: Option<i64>) -> Result<Found, LookupError> {
        if let (Some(as_of), Some(t)) = (&self.as_of, time) {
            // Boxed: its waiting would make every lookup's future, and every
            // future holding one, larger (they are moved when made).
            return Box::pin(self.lookup_as_of(key, t, as_of)).await;
        }
        let row = match &self.select {
            Some(columns) => self
                .table
                .get_columns(key, columns)
                .await?
                .map(Row::Columns),
            None => self.table.get_shared(key).await?.map(Row::Whole),
        };
        Ok(row.map_or(Found::Missing, Found::Row))
    }

    /// The version of `key` valid at `t`, once the table has reached `t` or
    /// the join's wait is over.
    async fn lookup_as_of(
        &self,
        key: &Value,
        t: i64,
        as_of: &AsOfJoin,
    ) -> Result<Found, LookupError> {
        let deadline = Instant::now() + as_of.max_wait;
        let answer = loop {
            let read = self.table.get_as_of(key, t).await?;
            if read.complete_until >= t {
                break read.answer;
            }
            let now = Instant::now();
            if now >= deadline {
                as_of.ahead.inc();
                break read.answer;
            }
            tokio::time::sleep(AHEAD_POLL.min(deadline - now)).await;
        };
        Ok(match answer {
            // The selected columns are read from the row by name.
            AsOf::Row(row) => Found::Row(match self.select {
                Some(_) => Row::Columns(Columns::Shared(Arc::new(row))),
                None => Row::Whole(Arc::new(row)),
            }),
            AsOf::Absent => Found::Missing,
            AsOf::BeyondHistory { horizon } => {
                as_of.beyond_history.inc();
                Found::BeyondHistory { horizon }
            }
        })
    }

    /// The name a column is written under.
    fn renamed(&self, column: &str) -> Cow<'_, str> {
        self.rename
            .iter()
            .find(|(from, _)| from == column)
            .map_or_else(
                || Cow::Owned(column.to_owned()),
                |(_, to)| Cow::Borrowed(to.as_str()),
            )
    }

    /// Looks the event's key up (as of its time, for an as-of join) and adds
    /// the row's columns; `Err` ends the event. The job's joins are `joins`,
    /// this one the `index`th: an aliased join keeps its row in `rows[index]`.
    async fn apply<'e>(
        &'e self,
        index: usize,
        event: &mut Event<'e>,
        rows: &mut [Option<Row>],
        joins: &[Join],
        record_ms: Option<i64>,
    ) -> Result<(), Outcome> {
        let dead = |reason: String| Outcome::Dead(format!("join `{}`: {reason}", self.name()));
        let scope = EventScope {
            event: &*event,
            rows: &*rows,
            joins,
        };
        let key = key_of(&self.key, |i, _| match &self.key_refs[i] {
            // A column of an earlier join that missed is NULL: no lookup.
            column @ (Ref::Column { .. } | Ref::Row(_)) => {
                Some(scope.get(column).map_or(Value::Null, Cow::into_owned))
            }
            field => scope.get(field).map(Cow::into_owned),
        })
        .map_err(|r| dead(r.to_string()))?;
        let time = match &self.as_of {
            Some(as_of) => Some(as_of.time_of(event, record_ms).map_err(dead)?),
            None => None,
        };
        let found = match &key {
            None => Found::Missing,
            Some(key) => match self.lookup(key, time).await {
                Ok(found) => found,
                Err(LookupError::NotOwned { table, partition }) => {
                    return Err(Outcome::NotHeld { table, partition });
                }
                Err(e) => {
                    let reason = format!("join `{}`: lookup of {key} failed: {e}", self.name());
                    let unavailable = matches!(e, LookupError::Unavailable { .. });
                    return Err(if unavailable && self.retry_unavailable {
                        Outcome::Retry(reason) // the backend may be back by then
                    } else {
                        Outcome::Dead(reason)
                    });
                }
            },
        };
        let missed = match found {
            Found::Row(row) => {
                self.hits.inc();
                if self.bound {
                    rows[index] = Some(row);
                } else {
                    self.project(event, Some(&row));
                }
                return Ok(());
            }
            Found::Missing => None,
            Found::BeyondHistory { horizon } => Some(horizon),
        };
        self.misses.inc();
        let policy = match self.on_miss {
            None => {
                if !self.bound {
                    self.project(event, None);
                }
                return Ok(());
            }
            Some(MissPolicy::Drop) => return Err(Outcome::Skip(Skip::Missed)),
            Some(policy) => policy,
        };
        let key = key.map_or_else(|| "null".to_owned(), |k| k.to_string());
        let when = time.map(event_time::format_micros);
        let reason = match (missed, when) {
            (Some(horizon), Some(when)) => format!(
                "join `{}`: key {key} as of {when} is older than the history the table keeps \
                 (it answers from {})",
                self.name(),
                event_time::format_micros(horizon)
            ),
            (None, Some(when)) => {
                format!("join `{}`: no row with key {key} as of {when}", self.name())
            }
            _ => format!("join `{}`: no row with key {key}", self.name()),
        };
        Err(if policy == MissPolicy::Retry {
            Outcome::Retry(reason)
        } else {
            Outcome::Dead(reason)
        })
    }

    /// Sets the selected (renamed) columns of `row` in the event, or nulls on a miss.
    fn project<'e>(&'e self, event: &mut Event<'e>, row: Option<&Row>) {
        let into_json = self.into_json.as_deref();
        match (&self.into, row) {
            (Some(into), None) => {
                event.set_written_as(into.as_str(), into_json, |out| {
                    out.extend_from_slice(b"null")
                });
            }
            (Some(into), Some(row)) => {
                event.set_written_as(into.as_str(), into_json, |out| self.write_nested(row, out));
            }
            (None, row) => {
                self.each_column(row, |name, name_json, write| {
                    event.set_written_as(name, name_json, write)
                });
            }
        }
    }

    /// Writes the columns of `row` as one JSON object (a join's `into`).
    fn write_nested(&self, row: &Row, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut first = true;
        self.each_column(Some(row), |name, json_name, write| {
            write_member(out, &mut first, &name, json_name);
            write(out);
        });
        out.push(b'}');
    }

    /// Hands `put` each column to write: its output name, that name written
    /// as a JSON object's name with its colon when it is known ahead (a
    /// selected column), and what writes its value as JSON (`null` when a
    /// selected column is missing).
    fn each_column<'j>(
        &'j self,
        row: Option<&Row>,
        mut put: impl FnMut(Cow<'j, str>, Option<&'j [u8]>, &dyn Fn(&mut Vec<u8>)),
    ) {
        let selected = self.select_as.iter().zip(&self.select_as_json);
        match row {
            Some(Row::Columns(columns)) => {
                let select = self.select.iter().flatten();
                for (i, (column, (name, json_name))) in select.zip(selected).enumerate() {
                    put(Cow::Borrowed(name), Some(json_name), &|out| {
                        columns.write_json(i, column, out)
                    });
                }
            }
            Some(Row::Whole(row)) => {
                for (column, value) in row.as_object().into_iter().flatten() {
                    put(self.renamed(column), None, &|out| {
                        serde_json::to_writer(out, value).expect("JSON values serialize");
                    });
                }
            }
            // A miss: the selected columns (if the join selects any) as nulls.
            None => {
                for (name, json_name) in selected {
                    put(Cow::Borrowed(name), Some(json_name), &|out| {
                        out.extend_from_slice(b"null")
                    });
                }
            }
        }
    }
}

/// What an event's expressions read: its fields and the rows aliased joins found.
struct EventScope<'s, 'e> {
    event: &'s Event<'e>,
    rows: &'s [Option<Row>],
    joins: &'s [Join],
}

impl Scope for EventScope<'_, '_> {
    fn is_null(&self, name: &Ref) -> bool {
        match name {
            Ref::Row(join) => self.rows[*join].is_none(),
            other => self.get(other).is_none_or(|v| v.is_null()),
        }
    }

    fn get(&self, name: &Ref) -> Option<Cow<'_, Value>> {
        match name {
            Ref::Event(path) => self.event.get(path).map(Cow::Owned),
            Ref::Row(join) => match self.rows[*join].as_ref()? {
                Row::Whole(row) => Some(Cow::Borrowed(row.as_ref())),
                Row::Columns(columns) => {
                    let select = self.joins[*join].select.iter().flatten();
                    let object = select
                        .enumerate()
                        .map(|(i, c)| {
                            let value = columns.get(i, c).map_or(Value::Null, Cow::into_owned);
                            (c.clone(), value)
                        })
                        .collect();
                    Some(Cow::Owned(Value::Object(object)))
                }
            },
            Ref::Column {
                join,
                column,
                below,
            } => {
                let value = match self.rows[*join].as_ref()? {
                    Row::Whole(row) => Cow::Borrowed(row.get(column)?),
                    Row::Columns(columns) => {
                        let select = self.joins[*join].select.as_deref().unwrap_or_default();
                        let i = select.iter().position(|c| c == column)?;
                        columns.get(i, column)?
                    }
                };
                if below.is_empty() {
                    return Some(value);
                }
                FieldPath::descend(value.into_owned(), below).map(Cow::Owned)
            }
        }
    }
}

/// A job's steps for one record.
pub struct Pipeline {
    format: InputFormat,
    joins: Vec<Join>,
    stages: Stages,
    output_key: Option<OutputKey>,
    max_event_bytes: usize,
}

/// `name` written as a JSON object's name, with its colon.
fn name_json(name: &str) -> Box<[u8]> {
    let mut json = serde_json::to_vec(name).expect("strings serialize");
    json.push(b':');
    json.into()
}

fn paths(texts: &[&str]) -> Vec<FieldPath> {
    texts
        .iter()
        .map(|t| FieldPath::parse(t).expect("validated with the config"))
        .collect()
}

impl Pipeline {
    /// Resolves `job`'s joins against `tables` (every name was checked with the config).
    pub fn new(
        job: &JobConfig,
        tables: &[Arc<dyn Table>],
        max_event_bytes: usize,
        metrics: &EnrichMetrics,
    ) -> Self {
        let names = job.names();
        let joins = job
            .joins
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let select_as: Vec<String> = j
                    .select
                    .iter()
                    .flatten()
                    .map(|c| j.rename.get(c).unwrap_or(c).clone())
                    .collect();
                Join {
                    table: tables
                        .iter()
                        .find(|t| t.name() == j.table)
                        .expect("join tables checked with the config")
                        .clone(),
                    key: paths(&j.key.paths()),
                    key_refs: paths(&j.key.paths())
                        .iter()
                        .map(|p| {
                            let before = names.before(i);
                            before
                                .resolve(p.segments())
                                .expect("key names checked with the config")
                        })
                        .collect(),
                    bound: j.alias.is_some(),
                    on_miss: match j.join_type {
                        JoinType::Left => None,
                        JoinType::Inner => Some(j.on_miss.unwrap_or(MissPolicy::Drop)),
                    },
                    select: j.select.clone(),
                    select_as_json: select_as.iter().map(|name| name_json(name)).collect(),
                    select_as,
                    rename: j.rename.clone().into_iter().collect(),
                    into: j.into.clone(),
                    into_json: j.into.as_deref().map(name_json),
                    retry_unavailable: job.retry.is_some(),
                    as_of: j
                        .as_of
                        .as_ref()
                        .map(|a| AsOfJoin::new(a, &job.name, &j.table, metrics)),
                    hits: metrics.join(&job.name, &j.table, "hit"),
                    misses: metrics.join(&job.name, &j.table, "miss"),
                }
            })
            .collect();
        Pipeline {
            format: job.input.format,
            joins,
            stages: job.stages().expect("stages checked with the config"),
            output_key: job
                .output
                .key
                .as_ref()
                .map(|k| OutputKey::new(paths(&k.paths()))),
            max_event_bytes,
        }
    }

    /// What to write for a record with this key, value and timestamp (ms).
    pub fn process<'p>(
        &'p self,
        key: Option<&'p [u8]>,
        value: Option<&'p [u8]>,
        timestamp_ms: Option<i64>,
    ) -> impl Future<Output = Outcome> + Send + 'p {
        // A map, not an async fn: a future of its own would hold the
        // enriching one, and moving it in would copy it again.
        self.enrich(key, value, timestamp_ms)
            .map(|(Ok(outcome) | Err(outcome))| outcome)
    }

    async fn enrich(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: Option<i64>,
    ) -> Result<Outcome, Outcome> {
        let dead = |reason: String| Outcome::Dead(reason);
        let Some(value) = value else {
            return match self.format {
                InputFormat::Change => Ok(Outcome::Skip(Skip::Deleted)),
                InputFormat::Json => Err(dead("record has no value (a tombstone)".into())),
            };
        };
        if value.len() > self.max_event_bytes {
            return Err(dead(format!(
                "event is {} bytes, more than max_event_bytes ({})",
                value.len(),
                self.max_event_bytes
            )));
        }
        let not_json = |e: &dyn std::fmt::Display| dead(format!("value is not JSON: {e}"));
        let after: String;
        let text = match self.format {
            InputFormat::Json => std::str::from_utf8(value).map_err(|e| not_json(&e))?,
            InputFormat::Change => {
                let parsed: Value = serde_json::from_slice(value).map_err(|e| not_json(&e))?;
                match debezium_json::row_after(parsed) {
                    Ok(Some(row)) => {
                        after = row.to_string();
                        &after
                    }
                    Ok(None) => return Ok(Outcome::Skip(Skip::Deleted)),
                    Err(reason) => return Err(dead(format!("not a change event: {reason}"))),
                }
            }
        };
        let mut event = Event::parse(text).map_err(|e| dead(e.to_string()))?;
        let mut rows: Vec<Option<Row>> = (0..self.joins.len()).map(|_| None).collect();
        for (i, join) in self.joins.iter().enumerate() {
            self.check(i, &event, &rows)?;
            join.apply(i, &mut event, &mut rows, &self.joins, timestamp_ms)
                .await?;
        }
        self.check(self.joins.len(), &event, &rows)?;
        let scope = EventScope {
            event: &event,
            rows: &rows,
            joins: &self.joins,
        };
        let mut out = Vec::with_capacity(value.len() + 256);
        let output_key = match &self.stages.output {
            None => {
                let key = self.output_key(key, |p| event.get(p))?;
                event.write(&mut out);
                key
            }
            Some(OutputFields {
                event: false,
                fields,
            }) => {
                let written = write_fields(fields, &scope)?;
                let key = self.output_key(key, |p| {
                    let (first, below) = p.split_first();
                    let (_, json) = written.iter().find(|(name, _)| *name == first)?;
                    let value = serde_json::from_slice(json).expect("JSON written here");
                    FieldPath::descend(value, below)
                })?;
                out.push(b'{');
                let mut first = true;
                for (name, json) in written.iter() {
                    write_member(&mut out, &mut first, name, None);
                    out.extend_from_slice(json);
                }
                out.push(b'}');
                key
            }
            Some(OutputFields {
                event: true,
                fields,
            }) => {
                let written = write_fields(fields, &scope)?;
                for (name, json) in written.iter() {
                    event.set_json(name, json);
                }
                let key = self.output_key(key, |p| event.get(p))?;
                event.write(&mut out);
                key
            }
        };
        Ok(Outcome::Emit {
            key: output_key,
            value: out,
        })
    }

    /// Checks the filter's parts due before join `i` (after the last, when
    /// `i` is the number of joins).
    fn check(&self, i: usize, event: &Event<'_>, rows: &[Option<Row>]) -> Result<(), Outcome> {
        let scope = EventScope {
            event,
            rows,
            joins: &self.joins,
        };
        for part in &self.stages.filters[i] {
            match part.expr.truth(&scope) {
                Ok(Some(true)) => {}
                Ok(_) => return Err(Outcome::Skip(Skip::Filtered)),
                Err(e) => return Err(Outcome::Dead(format!("filter: {e}"))),
            }
        }
        Ok(())
    }

    /// The output record's key: the input's, or the output key's fields as
    /// `get` reads them.
    fn output_key(
        &self,
        input: Option<&[u8]>,
        get: impl Fn(&FieldPath) -> Option<Value>,
    ) -> Result<Option<Vec<u8>>, Outcome> {
        match &self.output_key {
            None => Ok(input.map(<[u8]>::to_vec)),
            Some(output_key) => output_key
                .of(get)
                .map(Some)
                .map_err(|e| Outcome::Dead(e.to_string())),
        }
    }
}

/// The output fields' values, as JSON text.
struct Written<'f> {
    text: Vec<u8>,
    /// Each field's name and where its value is in `text`.
    fields: Vec<(&'f str, std::ops::Range<usize>)>,
}

impl Written<'_> {
    fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.fields
            .iter()
            .map(|(name, range)| (*name, &self.text[range.clone()]))
    }
}

/// Writes each output field's value.
fn write_fields<'f>(
    fields: &'f [(String, Compiled)],
    scope: &EventScope<'_, '_>,
) -> Result<Written<'f>, Outcome> {
    let mut written = Written {
        text: Vec::with_capacity(64 * fields.len()),
        fields: Vec::with_capacity(fields.len()),
    };
    for (name, field) in fields {
        let start = written.text.len();
        field
            .expr
            .write_json(scope, &mut written.text)
            .map_err(|e| Outcome::Dead(format!("output field `{name}`: {e}")))?;
        written.fields.push((name, start..written.text.len()));
    }
    Ok(written)
}

/// Why an enriched event has no output key.
#[derive(Debug, thiserror::Error)]
enum OutputKeyError {
    /// A key field that is null.
    #[error("output key field `{0}` is null")]
    Null(String),
    /// A key field that is missing or not a scalar.
    #[error("output {0}")]
    Field(#[from] KeyFieldError),
}

/// The output record key: a JSON object of the key fields (named by their last
/// path segment), like the keys of change topics, so outputs can feed tables.
/// Written as a JSON object of the fields' last names would be: a repeated
/// name keeps its first place and takes the last value.
struct OutputKey {
    /// Each key path, with the place of its name.
    paths: Vec<(FieldPath, usize)>,
    /// The names in place order, each written as a JSON object's name with
    /// its colon, once.
    names: Vec<Box<[u8]>>,
}

impl OutputKey {
    fn new(paths: Vec<FieldPath>) -> Self {
        let mut last_names: Vec<String> = Vec::new();
        let paths = paths
            .into_iter()
            .map(|path| {
                let name = path.as_str().rsplit('.').next().unwrap_or(path.as_str());
                let place = match last_names.iter().position(|n| n == name) {
                    Some(place) => place,
                    None => {
                        last_names.push(name.to_owned());
                        last_names.len() - 1
                    }
                };
                (path, place)
            })
            .collect();
        OutputKey {
            paths,
            names: last_names.iter().map(|n| name_json(n)).collect(),
        }
    }

    /// The key of the event whose fields `get` reads.
    fn of(&self, get: impl Fn(&FieldPath) -> Option<Value>) -> Result<Vec<u8>, OutputKeyError> {
        let value_of = |path: &FieldPath| match key_of(std::slice::from_ref(path), |_, p| get(p))? {
            Some(value) => Ok(value),
            None => Err(OutputKeyError::Null(path.as_str().to_owned())),
        };
        let mut key = Vec::with_capacity(64);
        key.push(b'{');
        if let [(path, _)] = self.paths.as_slice() {
            key.extend_from_slice(&self.names[0]);
            serde_json::to_writer(&mut key, &value_of(path)?).expect("JSON serializes");
        } else {
            let mut values = vec![Value::Null; self.names.len()];
            for (path, place) in &self.paths {
                values[*place] = value_of(path)?;
            }
            for (i, (name, value)) in self.names.iter().zip(&values).enumerate() {
                if i > 0 {
                    key.push(b',');
                }
                key.extend_from_slice(name);
                serde_json::to_writer(&mut key, value).expect("JSON serializes");
            }
        }
        key.push(b'}');
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};
    use tributary_table_api::{AsOfRead, Fault, MemoryTable};

    use super::*;
    use crate::config::EnrichConfig;

    #[test]
    fn an_output_key_is_the_json_object_of_its_fields_last_names() {
        let event = json!({"order_id": 5, "line": {"sku": "A-\"1\""}, "a": {"order_id": 6}});
        let get = |p: &FieldPath| {
            p.segments()
                .iter()
                .try_fold(&event, |v, s| v.get(s.as_str()))
                .cloned()
        };
        let paths: Vec<FieldPath> = ["order_id", "line.sku", "a.order_id"]
            .iter()
            .map(|p| FieldPath::parse(p).unwrap())
            .collect();
        // serde_json's own object: a repeated name keeps its place, takes the last value.
        let mut expected = Map::new();
        expected.insert("order_id".into(), json!(5));
        expected.insert("sku".into(), json!("A-\"1\""));
        expected.insert("order_id".into(), json!(6));
        assert_eq!(
            OutputKey::new(paths.clone()).of(get).unwrap(),
            serde_json::to_vec(&expected).unwrap()
        );
        let one = OutputKey::new(paths[..1].to_vec());
        assert_eq!(one.of(get).unwrap(), br#"{"order_id":5}"#);
        assert!(matches!(
            one.of(|_| Some(Value::Null)),
            Err(OutputKeyError::Null(field)) if field == "order_id"
        ));
    }

    fn tables(fault: Option<Fault>) -> Vec<Arc<dyn Table>> {
        let users = MemoryTable::new("users", &["id"]);
        users
            .upsert(json!({"id": 7, "name": "Ada", "tier": "gold", "email": "a@x"}))
            .unwrap();
        users.fail(fault);
        let stock = MemoryTable::new("stock", &["sku", "region"]);
        stock
            .upsert(json!({"sku": "A-1", "region": "eu", "qty": 3}))
            .unwrap();
        vec![Arc::new(users), Arc::new(stock)]
    }

    fn pipeline(joins: &str, fault: Option<Fault>) -> Pipeline {
        pipeline_with(joins, "", fault)
    }

    /// A pipeline of one job with `joins` and the job settings `extra`.
    fn pipeline_with(joins: &str, extra: &str, fault: Option<Fault>) -> Pipeline {
        let text = format!(
            "kafka: {{ brokers: b }}\njobs:\n  - name: j\n    input: {{ topics: [in] }}\n    joins: {joins}\n    output: {{ topic: out, key: order_id }}\n    dead_letter: {{ topic: dlq }}\n{extra}"
        );
        let config = EnrichConfig::parse(&text, &["users", "stock"]).unwrap();
        Pipeline::new(
            &config.jobs[0],
            &tables(fault),
            200,
            &EnrichMetrics::default(),
        )
    }

    async fn run(p: &Pipeline, event: &str) -> Outcome {
        p.process(Some(b"k"), Some(event.as_bytes()), None).await
    }

    fn emitted(outcome: Outcome) -> (String, Value) {
        match outcome {
            Outcome::Emit { key, value } => (
                String::from_utf8(key.unwrap()).unwrap(),
                serde_json::from_slice(&value).unwrap(),
            ),
            other => panic!("expected an output, got {other:?}"),
        }
    }

    fn dead(outcome: Outcome) -> String {
        match outcome {
            Outcome::Dead(reason) => reason,
            other => panic!("expected a dead letter, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn joins_project_rename_and_nest() {
        let p = pipeline(
            "[{ table: users, key: user_id, select: [name, tier], rename: { name: user_name }, into: user }, { table: stock, key: [line.sku, line.region], select: [qty] }]",
            None,
        );
        let (key, value) = emitted(
            run(
                &p,
                r#"{"order_id": 1, "user_id": 7, "line": {"sku": "A-1", "region": "eu"}}"#,
            )
            .await,
        );
        assert_eq!(key, r#"{"order_id":1}"#);
        assert_eq!(
            value,
            json!({"order_id": 1, "user_id": 7, "line": {"sku": "A-1", "region": "eu"},
                   "user": {"user_name": "Ada", "tier": "gold"}, "qty": 3})
        );
    }

    #[tokio::test]
    async fn left_joins_add_nulls_and_copy_every_column_without_select() {
        let p = pipeline("[{ table: users, key: user_id }]", None);
        let (_, hit) = emitted(run(&p, r#"{"order_id": 1, "user_id": 7}"#).await);
        assert_eq!(hit["email"], "a@x");
        assert_eq!(hit["id"], 7);
        let (_, miss) = emitted(run(&p, r#"{"order_id": 2, "user_id": 8}"#).await);
        assert_eq!(miss, json!({"order_id": 2, "user_id": 8}));
        let p = pipeline(
            "[{ table: users, key: user_id, rename: { name: user_name }, into: user }]",
            None,
        );
        let (_, hit) = emitted(run(&p, r#"{"order_id": 1, "user_id": 7}"#).await);
        assert_eq!(
            hit["user"],
            json!({"id": 7, "user_name": "Ada", "tier": "gold", "email": "a@x"})
        );
        let (_, miss) = emitted(run(&p, r#"{"order_id": 2, "user_id": null}"#).await);
        assert_eq!(miss, json!({"order_id": 2, "user_id": null, "user": null}));
        let p = pipeline("[{ table: users, key: user_id, select: [name] }]", None);
        let (_, miss) = emitted(run(&p, r#"{"order_id": 2, "user_id": 8}"#).await);
        assert_eq!(miss, json!({"order_id": 2, "user_id": 8, "name": null}));
    }

    #[tokio::test]
    async fn inner_join_misses_follow_the_policy() {
        let drop = pipeline("[{ table: users, key: user_id, type: inner }]", None);
        assert_eq!(
            run(&drop, r#"{"order_id": 1, "user_id": 8}"#).await,
            Outcome::Skip(Skip::Missed)
        );
        let dlq = pipeline(
            "[{ table: users, key: user_id, type: inner, on_miss: dlq }]",
            None,
        );
        assert_eq!(
            dead(run(&dlq, r#"{"order_id": 1, "user_id": 8}"#).await),
            "join `users`: no row with key 8"
        );
    }

    #[tokio::test]
    async fn bad_input_is_dead_lettered_with_the_reason() {
        let p = pipeline("[{ table: users, key: user_id }]", None);
        let reason = |s: &'static str| async { dead(run(&p, s).await) };
        assert!(reason("{oops").await.starts_with("value is not JSON"));
        let not_utf8 = dead(
            p.process(Some(b"k"), Some(b"{\"a\": \"\xff\"}"), None)
                .await,
        );
        assert_eq!(
            not_utf8,
            "value is not JSON: invalid utf-8 sequence of 1 bytes from index 7"
        );
        assert_eq!(reason("[1, 2]").await, "event is not a JSON object");
        assert_eq!(
            reason(r#"{"order_id": 1}"#).await,
            "join `users`: missing key field `user_id`"
        );
        assert!(
            reason(r#"{"order_id": 1, "user_id": {"a": 1}}"#)
                .await
                .contains("is an object")
        );
        assert_eq!(
            reason(r#"{"user_id": 7}"#).await,
            "output missing key field `order_id`"
        );
        let big = format!(r#"{{"order_id": 1, "pad": "{}"}}"#, "x".repeat(300));
        assert!(
            dead(run(&p, &big).await).contains("more than max_event_bytes (200)"),
            "oversized events are refused"
        );
        assert_eq!(
            dead(p.process(Some(b"k"), None, None).await),
            "record has no value (a tombstone)"
        );
    }

    #[tokio::test]
    async fn change_streams_use_the_row_after_and_skip_deletes() {
        let config = EnrichConfig::parse(
            "kafka: { brokers: b }\njobs:\n  - name: j\n    input: { topics: [in], format: change }\n    joins: [{ table: users, key: user_id, select: [name] }]\n    output: { topic: out }\n    dead_letter: { topic: dlq }\n",
            &["users"],
        )
        .unwrap();
        let p = Pipeline::new(
            &config.jobs[0],
            &tables(None),
            1000,
            &EnrichMetrics::default(),
        );
        let created = r#"{"op":"c","before":null,"after":{"order_id":5,"user_id":7}}"#;
        let outcome = p
            .process(Some(b"{\"order_id\":5}"), Some(created.as_bytes()), None)
            .await;
        assert_eq!(
            outcome,
            Outcome::Emit {
                key: Some(b"{\"order_id\":5}".to_vec()),
                value: br#"{"order_id":5,"user_id":7,"name":"Ada"}"#.to_vec()
            }
        );
        let deleted = r#"{"op":"d","before":{"order_id":5},"after":null}"#;
        assert_eq!(
            p.process(None, Some(deleted.as_bytes()), None).await,
            Outcome::Skip(Skip::Deleted)
        );
        assert_eq!(
            p.process(None, None, None).await,
            Outcome::Skip(Skip::Deleted)
        );
        assert!(dead(p.process(None, Some(br#"{"op":"z"}"#), None).await).contains("unknown op"));
    }

    #[tokio::test]
    async fn partitions_not_held_are_reported() {
        let p = pipeline(
            "[{ table: users, key: user_id }]",
            Some(Fault::NotOwned { partition: 2 }),
        );
        assert_eq!(
            run(&p, r#"{"order_id": 1, "user_id": 7}"#).await,
            Outcome::NotHeld {
                table: "users".into(),
                partition: 2
            }
        );
    }

    #[tokio::test]
    async fn a_table_that_cannot_answer_sends_the_event_to_retry_when_the_job_retries() {
        let joins = "[{ table: users, key: user_id }]";
        let down = || Some(Fault::Unavailable("breaker open".into()));
        let event = r#"{"order_id": 1, "user_id": 7}"#;
        let reason = "join `users`: lookup of 7 failed: table users: breaker open";
        let retrying = pipeline_with(joins, "    retry: { topic: orders.retry }\n", down());
        assert_eq!(run(&retrying, event).await, Outcome::Retry(reason.into()));
        let without_retry = pipeline(joins, down());
        assert_eq!(
            run(&without_retry, event).await,
            Outcome::Dead(reason.into())
        );
    }

    /// A pipeline of the job whose settings after `name` and `input` are `rest`.
    fn job(rest: &str, fault: Option<Fault>) -> Pipeline {
        let text = format!(
            "kafka: {{ brokers: b }}\njobs:\n  - name: j\n    input: {{ topics: [in], as: o }}\n    dead_letter: {{ topic: dlq }}\n{rest}"
        );
        let config = EnrichConfig::parse(&text, &["users", "stock"])
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        Pipeline::new(
            &config.jobs[0],
            &tables(fault),
            500,
            &EnrichMetrics::default(),
        )
    }

    #[tokio::test]
    async fn aliased_joins_feed_the_filter_and_the_computed_fields() {
        let p = job(
            "    joins:
      - { table: users, key: o.user_id, as: u }
      - { table: stock, key: [o.line.sku, o.line.region], as: s, select: [qty] }
    filter: \"o.qty > 0 AND u.tier = 'gold' AND s.qty >= o.qty\"
    output:
      topic: out
      key: order_id
      fields: ['*', { total: 's.qty * o.qty' }, { user: 'CASE WHEN u IS NOT NULL THEN STRUCT(UPPER(u.name) AS customer, u.tier) END' }]
",
            None,
        );
        let order = |qty: i64, user: i64| {
            format!(
                r#"{{"order_id": 1, "user_id": {user}, "qty": {qty}, "line": {{"sku": "A-1", "region": "eu"}}}}"#
            )
        };
        let out = run(&p, &order(2, 7)).await;
        let Outcome::Emit { key, value } = out else {
            panic!("{out:?}")
        };
        assert_eq!(key.as_deref(), Some(&br#"{"order_id":1}"#[..]));
        assert_eq!(
            String::from_utf8(value).unwrap(),
            r#"{"order_id": 1, "user_id": 7, "qty": 2, "line": {"sku": "A-1", "region": "eu"},"total":6,"user":{"customer":"ADA","tier":"gold"}}"#,
            "the event's text as it came, then the fields"
        );
        for (event, why) in [
            (order(0, 7), "o.qty > 0 fails"),
            (order(4, 7), "more than the stock"),
            (order(2, 8), "no user: u.tier is NULL"),
        ] {
            assert_eq!(
                run(&p, &event).await,
                Outcome::Skip(Skip::Filtered),
                "{why}"
            );
        }
    }

    #[tokio::test]
    async fn a_filter_on_the_input_runs_before_any_lookup() {
        // The table fails every lookup: an event the filter rejects never reaches it.
        let p = job(
            "    joins: [{ table: users, key: o.user_id, as: u }]
    filter: \"o.kind = 'sale' AND u.tier = 'gold'\"
    output: { topic: out, fields: ['*'] }
",
            Some(Fault::Unavailable("down".into())),
        );
        let refund = r#"{"kind": "refund", "user_id": 7}"#;
        assert_eq!(run(&p, refund).await, Outcome::Skip(Skip::Filtered));
        let sale = r#"{"kind": "sale", "user_id": 7}"#;
        assert!(dead(run(&p, sale).await).contains("down"));
        let bad = dead(run(&p, r#"{"kind": 3, "user_id": 7}"#).await);
        assert_eq!(
            bad,
            "filter: cannot compare a number with text (3, \"sale\")"
        );
    }

    #[tokio::test]
    async fn named_fields_alone_make_the_output_and_its_key() {
        let p = job(
            "    joins: [{ table: users, key: o.user_id, as: u, select: [name] }]
    output: { topic: out, key: id, fields: [{ id: o.order_id }, u.name, { n: 'CHAR_LENGTH(u.name)' }, { per: o.order_id / o.parts }] }
",
            None,
        );
        let (key, value) = emitted(run(&p, r#"{"order_id": 5, "user_id": 7, "x": 1}"#).await);
        assert_eq!(key, r#"{"id":5}"#);
        assert_eq!(value, json!({"id": 5, "name": "Ada", "n": 3, "per": null}));
        let (_, miss) = emitted(run(&p, r#"{"order_id": 6, "user_id": 8, "parts": 4}"#).await);
        assert_eq!(miss, json!({"id": 6, "name": null, "n": null, "per": 1}));
        let reason = dead(run(&p, r#"{"order_id": 6, "user_id": 7, "parts": 0}"#).await);
        assert_eq!(reason, "output field `per`: division by zero (6 / 0)");
    }

    #[tokio::test]
    async fn a_key_read_from_a_join_that_missed_is_null_a_miss() {
        let p = job(
            "    joins:
      - { table: users, key: o.user_id, as: u }
      - { table: stock, key: [u.fav_sku, o.region], as: s, select: [qty] }
    output: { topic: out, fields: ['*', s.qty] }
",
            None,
        );
        let (_, out) = emitted(run(&p, r#"{"user_id": 8, "region": "eu"}"#).await);
        assert_eq!(out, json!({"user_id": 8, "region": "eu", "qty": null}));
    }

    /// A future is moved (copied) when it is made and again into whatever
    /// awaits it: an event's futures were 0.95 KiB, ~700 instructions of
    /// copying per event, until the as-of wait was boxed and `process` lost
    /// its own state (`bench instructions`, session 40).
    #[test]
    fn an_events_futures_stay_small() {
        let p = pipeline(
            "[{ table: users, key: user_id, select: [name], into: user }, { table: stock, key: [line.sku, line.region], select: [qty] }]",
            None,
        );
        let process = p.process(None, Some(b"{}"), None);
        assert!(
            size_of_val(&process) <= 640,
            "{} bytes",
            size_of_val(&process)
        );
        let key = json!(7);
        let lookup = p.joins[0].lookup(&key, None);
        assert!(size_of_val(&lookup) <= 64, "{} bytes", size_of_val(&lookup));
    }

    /// What `into:` writes, the SQL form writes byte for byte: the event's
    /// text, then the row nested under its name (NULL on a miss).
    #[tokio::test]
    async fn nesting_under_a_name_matches_into_byte_for_byte() {
        let yaml = pipeline(
            "[{ table: users, key: user_id, select: [name, tier], rename: { name: customer }, into: user }]",
            None,
        );
        let sql_form = job(
            "    joins: [{ table: users, key: o.user_id, as: u, select: [name, tier] }]
    output: { topic: out, key: order_id, fields: ['*', { user: 'CASE WHEN u IS NOT NULL THEN STRUCT(u.name AS customer, u.tier) END' }] }
",
            None,
        );
        for event in [
            r#"{"order_id": 1, "user_id": 7, "note": "caf\u00e9"}"#,
            r#"{"order_id":2,"user_id":8}"#,
            r#"{"order_id": 3, "user_id": null}"#,
        ] {
            assert_eq!(
                run(&yaml, event).await,
                run(&sql_form, event).await,
                "{event}"
            );
        }
    }

    /// A versioned table whose key partition holds versions up to `until`
    /// (µs), as a local table that has not caught up.
    struct Lagging {
        table: MemoryTable,
        until: std::sync::atomic::AtomicI64,
    }

    #[async_trait::async_trait]
    impl Table for Lagging {
        fn name(&self) -> &str {
            self.table.name()
        }

        async fn get(&self, key: &Value) -> Result<Option<Value>, LookupError> {
            self.table.get(key).await
        }

        async fn get_as_of(&self, key: &Value, as_of: i64) -> Result<AsOfRead, LookupError> {
            Ok(AsOfRead {
                complete_until: self.until.load(std::sync::atomic::Ordering::SeqCst),
                ..self.table.get_as_of(key, as_of).await?
            })
        }

        async fn scan(
            &self,
            range: &tributary_table_api::KeyRange,
            limit: usize,
        ) -> Result<Vec<(Value, Value)>, LookupError> {
            self.table.scan(range, limit).await
        }

        async fn describe(&self) -> tributary_table_api::TableDescription {
            self.table.describe().await
        }
    }

    const MS: i64 = 1000; // µs

    /// User 7 was `free` from 1 s on and `pro` from 5 s on; history: 1000 s.
    fn user_versions() -> MemoryTable {
        let users = MemoryTable::versioned("users", &["id"], 1_000_000 * MS);
        users
            .upsert_at(1000 * MS, json!({"id": 7, "tier": "free"}))
            .unwrap();
        users
            .upsert_at(5000 * MS, json!({"id": 7, "tier": "pro"}))
            .unwrap();
        users
    }

    fn as_of_pipeline(join: &str, users: Arc<dyn Table>, metrics: &EnrichMetrics) -> Pipeline {
        let text = format!(
            "kafka: {{ brokers: b }}\njobs:\n  - name: j\n    input: {{ topics: [in] }}\n    joins: [{join}]\n    output: {{ topic: out, key: order_id }}\n    dead_letter: {{ topic: dlq }}\n"
        );
        let config = EnrichConfig::parse(&text, &["users"]).unwrap();
        Pipeline::new(&config.jobs[0], &[users], 500, metrics)
    }

    fn tier(outcome: Outcome) -> Value {
        emitted(outcome).1["tier"].clone()
    }

    #[tokio::test]
    async fn as_of_joins_read_the_version_valid_at_the_events_time() {
        let metrics = EnrichMetrics::default();
        let users: Arc<dyn Table> = Arc::new(user_versions());
        let by_field = as_of_pipeline(
            "{ table: users, key: user_id, select: [tier], as_of: { field: placed_at } }",
            users.clone(),
            &metrics,
        );
        let order = |placed_at: &str| {
            format!(r#"{{"order_id": 1, "user_id": 7, "placed_at": {placed_at}}}"#)
        };
        let (_, joined) = emitted(run(&by_field, &order("3000")).await);
        assert_eq!(joined["tier"], "free");
        assert_eq!(
            joined.get("id"),
            None,
            "only the selected columns: {joined}"
        );
        assert_eq!(tier(run(&by_field, &order("5000")).await), "pro");
        assert_eq!(
            tier(run(&by_field, &order(r#""1970-01-01T00:00:04.999Z""#)).await),
            "free"
        );
        assert_eq!(
            tier(run(&by_field, &order("999")).await),
            Value::Null,
            "before the first version: a left join's nulls"
        );
        // The record's timestamp.
        let by_record = as_of_pipeline(
            "{ table: users, key: user_id, as_of: { record_timestamp: true } }",
            users.clone(),
            &metrics,
        );
        let event = r#"{"order_id": 1, "user_id": 7}"#;
        let at = |ms| by_record.process(Some(b"k"), Some(event.as_bytes()), ms);
        assert_eq!(tier(at(Some(4000)).await), "free");
        assert_eq!(tier(at(Some(9000)).await), "pro");
        assert!(dead(at(None).await).contains("no timestamp"));
        // An inner join's miss says as of when.
        let inner = as_of_pipeline(
            "{ table: users, key: user_id, type: inner, on_miss: dlq, as_of: { field: placed_at, unit: s } }",
            users,
            &metrics,
        );
        let reason = dead(run(&inner, &order("0")).await);
        assert!(
            reason.contains("no row with key 7 as of 1970-01-01T00:00:00"),
            "{reason}"
        );
        // A time the event does not have is a dead letter naming the field.
        let missing = dead(run(&by_field, r#"{"order_id": 1, "user_id": 7}"#).await);
        assert!(
            missing.contains("as_of field `placed_at` is missing"),
            "{missing}"
        );
        let bad = dead(run(&by_field, &order(r#""yesterday""#)).await);
        assert!(
            bad.contains("placed_at") && bad.contains("yesterday"),
            "{bad}"
        );
        assert_eq!(metrics.join("j", "users", "ahead").get(), 0);
    }

    #[tokio::test]
    async fn times_older_than_the_history_kept_are_misses_that_say_so() {
        let metrics = EnrichMetrics::default();
        let users = MemoryTable::versioned("users", &["id"], 10_000 * MS);
        users
            .upsert_at(1000 * MS, json!({"id": 7, "tier": "free"}))
            .unwrap();
        users
            .upsert_at(100_000 * MS, json!({"id": 7, "tier": "pro"}))
            .unwrap();
        let users: Arc<dyn Table> = Arc::new(users);
        let order = r#"{"order_id": 1, "user_id": 7, "placed_at": 50000}"#;
        let left = as_of_pipeline(
            "{ table: users, key: user_id, select: [tier], as_of: { field: placed_at } }",
            users.clone(),
            &metrics,
        );
        assert_eq!(tier(run(&left, order).await), Value::Null);
        let inner = as_of_pipeline(
            "{ table: users, key: user_id, type: inner, on_miss: dlq, as_of: { field: placed_at } }",
            users,
            &metrics,
        );
        let reason = dead(run(&inner, order).await);
        assert!(
            reason.contains("older than the history") && reason.contains("1970-01-01T00:01:30"),
            "{reason}"
        );
        assert_eq!(metrics.join("j", "users", "beyond_history").get(), 2);
    }

    #[tokio::test]
    async fn a_table_behind_the_events_time_is_waited_for_then_joined_as_it_is() {
        let metrics = EnrichMetrics::default();
        let lagging = Arc::new(Lagging {
            table: user_versions(),
            until: std::sync::atomic::AtomicI64::new(4000 * MS),
        });
        let order = r#"{"order_id": 1, "user_id": 7, "placed_at": 6000}"#;
        // No wait: the newest version it holds, counted.
        let now = as_of_pipeline(
            "{ table: users, key: user_id, as_of: { field: placed_at } }",
            lagging.clone(),
            &metrics,
        );
        assert_eq!(tier(run(&now, order).await), "pro");
        assert_eq!(metrics.join("j", "users", "ahead").get(), 1);
        // Waiting: a version valid from 5.5 s arrives while the join waits.
        let waiting = as_of_pipeline(
            "{ table: users, key: user_id, as_of: { field: placed_at, max_wait_ms: 60000 } }",
            lagging.clone(),
            &metrics,
        );
        let catch_up = {
            let lagging = lagging.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                lagging
                    .table
                    .upsert_at(5500 * MS, json!({"id": 7, "tier": "late"}))
                    .unwrap();
                lagging
                    .until
                    .store(i64::MAX, std::sync::atomic::Ordering::SeqCst);
            }
        };
        let (outcome, ()) = tokio::join!(run(&waiting, order), catch_up);
        assert_eq!(tier(outcome), "late", "the join waited for the table");
        assert_eq!(
            metrics.join("j", "users", "ahead").get(),
            1,
            "not counted again"
        );
    }
}
