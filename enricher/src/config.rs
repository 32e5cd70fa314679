//! Configuration of enrichment jobs (`tributary enrich --config FILE`).
//!
//! ```yaml
//! kafka: { brokers: 127.0.0.1:19092 }
//! tables: tables.yaml            # a tables config; relative to this file
//! jobs:
//!   - name: orders-enriched
//!     input: { topics: [orders], format: json }
//!     joins:
//!       - table: users
//!         key: user_id            # a field path (a.b.c), or a list for composite keys
//!         select: [name, tier]    # row columns to copy (all when absent)
//!         rename: { name: user_name }
//!         into: user              # nest under this field (top level when absent)
//!         type: left              # left: a miss adds nulls; inner: see on_miss
//!       - table: prices           # a `versioned` table: the row valid when the order was placed
//!         key: sku
//!         as_of: { field: placed_at, unit: ms, max_wait_ms: 2000 }   # or { record_timestamp: true }
//!     output: { topic: orders.enriched, key: order_id }
//!     dead_letter: { topic: orders.dlq }
//! ```
//!
//! Aliases, a filter and computed fields (the stages a SQL job compiles to):
//!
//! ```yaml
//!   - name: order-totals
//!     input: { topics: [orders], as: o }
//!     joins:
//!       - { table: products, key: o.sku, as: p }   # copies nothing: the row is `p`
//!     filter: "o.quantity > 0 AND p IS NOT NULL"    # an event it does not hold for is skipped
//!     output:
//!       topic: order-totals
//!       key: id
//!       fields: ["*", { total: "p.price * o.quantity" }, { title: "UPPER(p.title)" }]
//!     dead_letter: { topic: orders.dlq }
//! ```

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
pub use tributary_config::Delivery;
use tributary_config::{ConfigError, HttpConfig, Validate};
pub use tributary_kafka::KafkaConfig;
pub use tributary_proto::event_time::TimeUnit;

use crate::expr::{Names as _, Ref};
use crate::field_path::FieldPath;
use crate::job_names::JobNames;
pub use crate::stages::OutputField;
use crate::stages::{StageError, Stages};

/// Default port of the HTTP endpoint (`/metrics`, `/healthz`, `/readyz`).
pub const DEFAULT_HTTP_PORT: u16 = 9102;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrichConfig {
    /// The Kafka cluster of the input, output and dead-letter topics.
    pub kafka: KafkaConfig,
    /// A tables config file naming the tables joins look up (relative to this file).
    #[serde(default)]
    pub tables: Option<PathBuf>,
    /// The jobs; each has its own consumer group.
    pub jobs: Vec<JobConfig>,
    /// Delivery guarantee of the output.
    #[serde(default)]
    pub delivery: Delivery,
    /// Milliseconds between transaction commits (`delivery: exactly_once`).
    #[serde(default = "default_commit_interval")]
    pub commit_interval_ms: u64,
    /// Events in flight (being looked up) per job. 4096 by default: in `bench enrich`,
    /// 256 reached 0.23–0.27× the raw rate, 1024 0.30×, 4096 0.34–0.39×, 16384 0.33×.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Larger input events go to the dead-letter topic.
    #[serde(default = "default_max_event_bytes")]
    pub max_event_bytes: usize,
    /// MiB of input events a job holds at once (read and not yet acknowledged:
    /// being enriched or written); the consumer's prefetch and the producer's
    /// queue are bounded by the same. One larger event is still taken, alone.
    #[serde(default = "default_max_in_flight_mb")]
    pub max_in_flight_mb: u64,
    /// Seconds to finish in-flight events after SIGTERM before exiting.
    #[serde(default = "default_grace")]
    pub shutdown_grace_s: u64,
    /// Seconds a job keeps being started again after broker errors without an
    /// event acknowledged before it stops (and the process exits non-zero).
    #[serde(default = "default_recovery_timeout_s")]
    pub recovery_timeout_s: u64,
    /// HTTP endpoint for `/metrics`, `/healthz`, `/readyz`.
    #[serde(default)]
    pub metrics: HttpConfig,
}

/// One enrichment job.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Job name (metrics label, default group id).
    pub name: String,
    /// Consumer group (default `tributary-enrich.<name>`).
    #[serde(default)]
    pub group_id: Option<String>,
    /// Where events come from.
    pub input: InputConfig,
    /// Join steps, applied in order (a later key may use an earlier join's fields).
    #[serde(default)]
    pub joins: Vec<JoinConfig>,
    /// Where enriched events go.
    pub output: OutputConfig,
    /// Where events that cannot be enriched go, with the reason.
    pub dead_letter: DeadLetterConfig,
    /// Where events wait before another attempt (joins with `on_miss: retry`).
    #[serde(default)]
    pub retry: Option<RetryConfig>,
    /// A condition (SQL expression) an event must meet to be written; others
    /// are skipped (counted, `reason="filtered"`). Each part of an `AND` is
    /// checked as soon as the joins it reads have run (before any, when it
    /// reads only the input's fields).
    #[serde(default)]
    pub filter: Option<String>,
}

/// The retry topic of a job: an event whose inner join misses is written there
/// and enriched again after `delay_ms`, up to `max_attempts` times in all.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Topic (created with the input's partition count when missing; the job
    /// consumes it too).
    pub topic: String,
    /// Wait before each further attempt, in milliseconds.
    #[serde(default = "default_retry_delay")]
    pub delay_ms: u64,
    /// Attempts in all, the first included; then the event is dead-lettered.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
}

impl JobConfig {
    /// The names its expressions and join keys may use.
    pub fn names(&self) -> JobNames<'_> {
        let joins = self.joins.iter();
        JobNames::new(
            self.input.alias.as_deref(),
            joins
                .map(|j| j.alias.as_deref().map(|a| (a, j.select.as_deref())))
                .collect(),
        )
    }

    /// Its filter and output fields, compiled; the error names the field below the job.
    pub fn stages(&self) -> Result<Stages, StageError> {
        Stages::compile(
            &self.names(),
            self.filter.as_deref(),
            self.output.fields.as_deref(),
        )
    }

    /// The job's consumer group.
    pub fn group_id(&self) -> String {
        self.group_id
            .clone()
            .unwrap_or_else(|| format!("tributary-enrich.{}", self.name))
    }
}

/// Input topics and their format.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputConfig {
    /// Topics consumed.
    pub topics: Vec<String>,
    /// How record values are read.
    #[serde(default)]
    pub format: InputFormat,
    /// A name for the event in expressions (`o.quantity`).
    #[serde(default, rename = "as")]
    pub alias: Option<String>,
}

/// How input record values are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// Each value is a JSON object: the event.
    #[default]
    Json,
    /// Tributary/Debezium change events: the event is the row after the change;
    /// deletes and tombstones are skipped.
    Change,
}

/// One join step.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinConfig {
    /// Table name, from the tables config.
    pub table: String,
    /// Field path(s) of the event giving the table key, in key-column order.
    pub key: KeyFields,
    /// `left` keeps events whose key is not found; `inner` applies `on_miss`.
    #[serde(default, rename = "type")]
    pub join_type: JoinType,
    /// What an inner join does on a miss (default `drop`).
    #[serde(default)]
    pub on_miss: Option<MissPolicy>,
    /// Row columns copied into the event (every column when absent).
    #[serde(default)]
    pub select: Option<Vec<String>>,
    /// Column → field name in the output.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// Nest the copied columns under this field (top level when absent).
    #[serde(default)]
    pub into: Option<String>,
    /// Join the row as it was at the event's time (a `versioned` local table).
    #[serde(default)]
    pub as_of: Option<AsOfConfig>,
    /// A name for the row found, in expressions and later keys (`u.name`;
    /// `u` is the whole row, NULL on a miss). An aliased join copies nothing
    /// into the event: `output.fields` says what is written.
    #[serde(default, rename = "as")]
    pub alias: Option<String>,
}

/// The time an as-of join reads its table at.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsOfConfig {
    /// The event field holding its time (a field path).
    #[serde(default)]
    pub field: Option<String>,
    /// The unit of `field` when it holds numbers (texts are UTC times; default ms).
    #[serde(default)]
    pub unit: Option<TimeUnit>,
    /// Use the input record's Kafka timestamp instead of a field.
    #[serde(default)]
    pub record_timestamp: bool,
    /// How long a join waits for a table that has not reached the event's
    /// time yet (its partition behind its topic, its newest version older);
    /// after that (or at once, with 0) it joins the newest version, counted.
    #[serde(default)]
    pub max_wait_ms: u64,
}

/// One field path, or several for a composite key.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum KeyFields {
    /// A single-column key.
    One(String),
    /// A composite key, in key-column order.
    Many(Vec<String>),
}

impl KeyFields {
    /// The paths, in order.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            KeyFields::One(path) => vec![path],
            KeyFields::Many(paths) => paths.iter().map(String::as_str).collect(),
        }
    }
}

/// Join type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinType {
    /// A miss adds nulls.
    #[default]
    Left,
    /// A miss applies `on_miss`.
    Inner,
}

/// What an inner join does with an event whose key is not in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissPolicy {
    /// Skip the event (counted).
    Drop,
    /// Send it to the dead-letter topic.
    Dlq,
    /// Try again after the job's `retry.delay_ms` (the row may not have arrived
    /// yet), up to `retry.max_attempts`; then dead-letter it.
    Retry,
}

/// The output topic and key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Topic enriched events are written to.
    pub topic: String,
    /// Field path(s) of the enriched event giving the record key (the input
    /// record's key when absent).
    #[serde(default)]
    pub key: Option<KeyFields>,
    /// The output's fields, in order (the event with what the joins copied
    /// into it when absent): `"*"` for that event (first, if at all), a name
    /// (`id`, `u.name`: written under its last part), or `{ name: expression }`.
    #[serde(default)]
    pub fields: Option<Vec<OutputField>>,
}

/// The dead-letter topic.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Topic receiving the original bytes with the reason in headers.
    pub topic: String,
}

fn default_retry_delay() -> u64 {
    5000
}
fn default_attempts() -> u32 {
    3
}
fn default_commit_interval() -> u64 {
    200
}
fn default_recovery_timeout_s() -> u64 {
    300
}
fn default_concurrency() -> usize {
    4096
}
fn default_max_in_flight_mb() -> u64 {
    256
}
fn default_max_event_bytes() -> usize {
    1 << 20
}
fn default_grace() -> u64 {
    30
}

impl EnrichConfig {
    /// Reads and validates a job file. The tables its joins name are checked
    /// with [`EnrichConfig::check_tables`] once the tables config is loaded.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        tributary_config::load(path)
    }

    /// Parses and validates text; every join must name one of `tables`.
    pub fn parse(text: &str, tables: &[&str]) -> Result<Self, ConfigError> {
        let config: EnrichConfig = tributary_config::parse(text)?;
        config.check_tables(tables)?;
        Ok(config)
    }

    /// Every as-of join names one of `versioned` (the tables that keep history).
    pub fn check_as_of(&self, versioned: &[&str]) -> Result<(), ConfigError> {
        for (j, job) in self.jobs.iter().enumerate() {
            for (i, join) in job.joins.iter().enumerate() {
                if join.as_of.is_some() && !versioned.contains(&join.table.as_str()) {
                    return Err(ConfigError::new(
                        format!("jobs[{j}].joins[{i}].as_of"),
                        format!(
                            "table {:?} keeps no history: declare it `versioned` in the tables \
                             config (versioned tables: {versioned:?})",
                            join.table
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every join names one of `known` (the tables of the tables config).
    pub fn check_tables(&self, known: &[&str]) -> Result<(), ConfigError> {
        for (j, job) in self.jobs.iter().enumerate() {
            for (i, join) in job.joins.iter().enumerate() {
                if !known.contains(&join.table.as_str()) {
                    return Err(ConfigError::new(
                        format!("jobs[{j}].joins[{i}].table"),
                        format!(
                            "{:?} is not a table of the tables config (tables: {known:?})",
                            join.table
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl AsOfConfig {
    fn validate(&self, at: &str) -> Result<(), ConfigError> {
        match (&self.field, self.record_timestamp) {
            (Some(_), true) | (None, false) => {
                return Err(ConfigError::new(
                    at,
                    "name the event's time: `field: <path>` or `record_timestamp: true`",
                ));
            }
            (Some(field), false) => {
                FieldPath::parse(field)
                    .map_err(|e| ConfigError::new(format!("{at}.field"), e.to_string()))?;
            }
            (None, true) => {
                if self.unit.is_some() {
                    return Err(ConfigError::new(
                        format!("{at}.unit"),
                        "applies to `field` only (record timestamps are milliseconds)",
                    ));
                }
            }
        }
        if self.max_wait_ms > 3_600_000 {
            return Err(ConfigError::new(
                format!("{at}.max_wait_ms"),
                "must be at most 3600000 (an hour)",
            ));
        }
        Ok(())
    }
}

fn check_paths(field: &str, key: &KeyFields) -> Result<(), ConfigError> {
    let paths = key.paths();
    if paths.is_empty() {
        return Err(ConfigError::new(field, "name at least one field"));
    }
    for (i, path) in paths.iter().enumerate() {
        FieldPath::parse(path).map_err(|problem| {
            let field = match key {
                KeyFields::One(_) => field.to_owned(),
                KeyFields::Many(_) => format!("{field}[{i}]"),
            };
            ConfigError::new(field, problem.to_string())
        })?;
    }
    Ok(())
}

impl Validate for EnrichConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        self.metrics.validate("metrics")?;
        self.kafka.validate("kafka")?;
        if self.jobs.is_empty() {
            return Err(ConfigError::new("jobs", "declare at least one job"));
        }
        if self.commit_interval_ms == 0 {
            return Err(ConfigError::new("commit_interval_ms", "must be at least 1"));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1"));
        }
        if self.max_event_bytes == 0 {
            return Err(ConfigError::new("max_event_bytes", "must be at least 1"));
        }
        if self.max_in_flight_mb == 0 {
            return Err(ConfigError::new("max_in_flight_mb", "must be at least 1"));
        }
        let mut names = HashSet::new();
        for (j, job) in self.jobs.iter().enumerate() {
            let at = |field: &str| format!("jobs[{j}].{field}");
            tributary_config::check_name(at("name"), &job.name)?;
            if !names.insert(&job.name) {
                return Err(ConfigError::new(
                    at("name"),
                    format!("{:?} is declared twice", job.name),
                ));
            }
            if job.input.topics.is_empty() || job.input.topics.iter().any(String::is_empty) {
                return Err(ConfigError::new(
                    at("input.topics"),
                    "name at least one topic, none empty",
                ));
            }
            let mut outputs = vec![
                ("output.topic", &job.output.topic),
                ("dead_letter.topic", &job.dead_letter.topic),
            ];
            if let Some(retry) = &job.retry {
                // Events held for their retry delay are work the job is waiting on.
                if retry.delay_ms >= self.metrics.stall_after_s * 1000 {
                    return Err(ConfigError::new(
                        "metrics.stall_after_s",
                        format!(
                            "{} s is not longer than {} (its {} ms): the watchdog would call the waiting job stuck",
                            self.metrics.stall_after_s,
                            at("retry.delay_ms"),
                            retry.delay_ms
                        ),
                    ));
                }
                outputs.push(("retry.topic", &retry.topic));
                if retry.max_attempts < 2 {
                    return Err(ConfigError::new(
                        at("retry.max_attempts"),
                        "must be at least 2 (the first attempt counts)",
                    ));
                }
            }
            for (field, topic) in outputs {
                if topic.is_empty() {
                    return Err(ConfigError::new(at(field), "must not be empty"));
                }
                if job.input.topics.contains(topic) {
                    return Err(ConfigError::new(
                        at(field),
                        format!(
                            "{topic:?} is also an input topic (the job would read its own output)"
                        ),
                    ));
                }
            }
            if let Some(key) = &job.output.key {
                check_paths(&at("output.key"), key)?;
            }
            let names = job.names();
            let mut aliases: Vec<&str> = job.input.alias.as_deref().into_iter().collect();
            if let Some(alias) = &job.input.alias {
                tributary_config::check_name(at("input.as"), alias)?;
            }
            for (i, join) in job.joins.iter().enumerate() {
                let at = |field: &str| format!("jobs[{j}].joins[{i}].{field}");
                check_paths(&at("key"), &join.key)?;
                check_key_names(&at("key"), &join.key, &names.before(i))?;
                if let Some(alias) = &join.alias {
                    tributary_config::check_name(at("as"), alias)?;
                    if aliases.contains(&alias.as_str()) {
                        return Err(ConfigError::new(
                            at("as"),
                            format!("{alias:?} names another join or the input already"),
                        ));
                    }
                    aliases.push(alias);
                    if !join.rename.is_empty() || join.into.is_some() {
                        return Err(ConfigError::new(
                            at(if join.into.is_some() {
                                "into"
                            } else {
                                "rename"
                            }),
                            "an aliased join copies nothing into the event: name its columns in \
                             `output.fields` (`{ user_name: u.name }`)",
                        ));
                    }
                }
                if join.on_miss == Some(MissPolicy::Retry) && job.retry.is_none() {
                    return Err(ConfigError::new(
                        at("on_miss"),
                        format!(
                            "`retry` needs the job's retry topic: add `retry: {{ topic: ... }}` to jobs[{j}]"
                        ),
                    ));
                }
                if join.join_type == JoinType::Left && join.on_miss.is_some() {
                    return Err(ConfigError::new(
                        at("on_miss"),
                        "applies to `type: inner` only (a left join adds nulls on a miss)",
                    ));
                }
                if let Some(as_of) = &join.as_of {
                    as_of.validate(&at("as_of"))?;
                }
                if let Some(into) = &join.into
                    && into.is_empty()
                {
                    return Err(ConfigError::new(at("into"), "must not be empty"));
                }
                if let Some(select) = &join.select
                    && let Some(column) = join.rename.keys().find(|c| !select.contains(c))
                {
                    return Err(ConfigError::new(
                        at("rename"),
                        format!("{column:?} is not among the selected columns {select:?}"),
                    ));
                }
            }
            job.stages()
                .map_err(|e| ConfigError::new(at(&e.field), e.problem))?;
        }
        Ok(())
    }
}

/// A key path naming a join (`u.fav_sku`) names one before this join.
fn check_key_names(field: &str, key: &KeyFields, names: &JobNames<'_>) -> Result<(), ConfigError> {
    for path in key.paths() {
        let parts: Vec<String> = path.split('.').map(str::to_owned).collect();
        match names.resolve(&parts) {
            Ok(Ref::Row(_)) => {
                return Err(ConfigError::new(
                    field,
                    format!("`{path}` is a whole row: name one of its columns"),
                ));
            }
            Ok(_) => {}
            Err(problem) => return Err(ConfigError::new(field, problem)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: &[&str] = &["users", "products"];

    const GOOD: &str = "
kafka: { brokers: 'b:1' }
jobs:
  - name: orders
    input: { topics: [orders] }
    joins:
      - { table: users, key: user_id, select: [name, tier], rename: { name: user_name }, into: user }
      - { table: products, key: [line.sku, region], type: inner, on_miss: dlq }
    output: { topic: orders.enriched, key: order_id }
    dead_letter: { topic: orders.dlq }
";

    #[test]
    fn parses_and_defaults() {
        let c = EnrichConfig::parse(GOOD, TABLES).unwrap();
        let job = &c.jobs[0];
        assert_eq!(job.group_id(), "tributary-enrich.orders");
        assert_eq!(job.input.format, InputFormat::Json);
        assert_eq!(job.joins[0].join_type, JoinType::Left);
        assert_eq!(job.joins[1].key.paths(), ["line.sku", "region"]);
        assert_eq!(job.joins[1].on_miss, Some(MissPolicy::Dlq));
        assert_eq!(c.delivery, Delivery::AtLeastOnce);
    }

    #[test]
    fn as_of_joins_name_the_events_time_and_a_versioned_table() {
        let as_of =
            |spec: &str| GOOD.replace("into: user }", &format!("into: user, as_of: {spec} }}"));
        let c = EnrichConfig::parse(
            &as_of("{ field: placed_at, unit: us, max_wait_ms: 500 }"),
            TABLES,
        )
        .unwrap();
        let a = c.jobs[0].joins[0].as_of.as_ref().unwrap();
        assert_eq!(a.field.as_deref(), Some("placed_at"));
        assert_eq!((a.unit, a.max_wait_ms), (Some(TimeUnit::Us), 500));
        assert!(c.check_as_of(&["users"]).is_ok());
        let unversioned = c.check_as_of(&["products"]).unwrap_err();
        assert_eq!(unversioned.field, "jobs[0].joins[0].as_of");
        assert!(
            unversioned.problem.contains("versioned"),
            "{}",
            unversioned.problem
        );
        let c = EnrichConfig::parse(&as_of("{ record_timestamp: true }"), TABLES).unwrap();
        assert!(c.jobs[0].joins[0].as_of.as_ref().unwrap().record_timestamp);
        let field = |text: &str| EnrichConfig::parse(text, TABLES).unwrap_err().field;
        for (spec, at) in [
            ("{}", ""),
            ("{ field: t, record_timestamp: true }", ""),
            ("{ field: 'a..b' }", ".field"),
            ("{ record_timestamp: true, unit: s }", ".unit"),
            ("{ field: t, max_wait_ms: 7200000 }", ".max_wait_ms"),
            ("{ field: t, unit: days }", ".unit"),
        ] {
            assert_eq!(
                field(&as_of(spec)),
                format!("jobs[0].joins[0].as_of{at}"),
                "{spec}"
            );
        }
    }

    #[test]
    fn errors_name_the_field() {
        let field = |text: &str| EnrichConfig::parse(text, TABLES).unwrap_err().field;
        assert_eq!(
            field(&GOOD.replace("table: users", "table: clients")),
            "jobs[0].joins[0].table"
        );
        assert_eq!(
            field(&GOOD.replace("[line.sku, region]", "[line..sku, region]")),
            "jobs[0].joins[1].key[0]"
        );
        assert_eq!(
            field(&GOOD.replace("on_miss: dlq", "on_miss: retry")),
            "jobs[0].joins[1].on_miss"
        );
        assert_eq!(
            field(&GOOD.replace("on_miss: dlq", "on_miss: later")),
            "jobs[0].joins[1].on_miss"
        );
        let with_retry = |retry: &str| {
            GOOD.replace("on_miss: dlq", "on_miss: retry").replace(
                "dead_letter: { topic: orders.dlq }",
                &format!("dead_letter: {{ topic: orders.dlq }}\n    retry: {retry}"),
            )
        };
        assert!(EnrichConfig::parse(&with_retry("{ topic: orders.retry }"), TABLES).is_ok());
        assert_eq!(
            field(&with_retry("{ topic: orders.retry, max_attempts: 1 }")),
            "jobs[0].retry.max_attempts"
        );
        assert_eq!(
            field(&with_retry("{ topic: orders }")),
            "jobs[0].retry.topic"
        );
        assert_eq!(
            field(&format!(
                "{}metrics: {{ stall_after_s: 10 }}\n",
                with_retry("{ topic: orders.retry, delay_ms: 60000 }")
            )),
            "metrics.stall_after_s"
        );
        assert_eq!(
            field(&GOOD.replace("brokers: 'b:1' }", "brokers: 'b:1', stall_timeout_s: 0 }")),
            "kafka.stall_timeout_s"
        );
        assert_eq!(
            field(&GOOD.replace("type: inner, ", "")),
            "jobs[0].joins[1].on_miss"
        );
        assert_eq!(
            field(&GOOD.replace("rename: { name: user_name }", "rename: { email: mail }")),
            "jobs[0].joins[0].rename"
        );
        assert_eq!(
            field(&GOOD.replace("topic: orders.dlq", "topic: orders")),
            "jobs[0].dead_letter.topic"
        );
        assert_eq!(
            field(&GOOD.replace("name: orders", "name: 'a b'")),
            "jobs[0].name"
        );
        assert_eq!(field(&format!("{GOOD}concurrency: 0")), "concurrency");
        assert_eq!(
            field(&format!("{GOOD}max_in_flight_mb: 0")),
            "max_in_flight_mb"
        );
        assert_eq!(field(&format!("{GOOD}colour: blue")), "colour");
    }
}
