//! `tributary explain`: a job file's compiled plan, in the order each event
//! goes through it (input, filter parts, joins with their tables, keys and
//! fetched columns, output fields, topics, delivery). SQL and YAML job files
//! print the same way, so a SQL job can be read as the YAML job it compiles to.

use std::fmt::Write as _;

use crate::config::{Delivery, EnrichConfig, InputFormat, JobConfig, JoinType, MissPolicy};
use crate::stages::OutputFields;

/// The plan of every job of `config`.
pub fn explain(config: &EnrichConfig) -> String {
    let mut out = String::new();
    for (i, job) in config.jobs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        job_plan(&mut out, config, job);
    }
    out
}

fn job_plan(out: &mut String, config: &EnrichConfig, job: &JobConfig) {
    let stages = job.stages().expect("stages checked with the config");
    let _ = writeln!(out, "job {} (consumer group {})", job.name, job.group_id());
    let delivery = match config.delivery {
        Delivery::AtLeastOnce => "at least once",
        Delivery::ExactlyOnce => "exactly once (Kafka transactions)",
    };
    let _ = writeln!(out, "  delivery: {delivery}");
    let format = match job.input.format {
        InputFormat::Json => "json",
        InputFormat::Change => "change events (the row after; deletes skipped)",
    };
    let alias = job
        .input
        .alias
        .as_ref()
        .map(|a| format!(" as {a}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  input: {}{alias}, {format}",
        job.input.topics.join(", ")
    );
    let filters = |out: &mut String, i: usize| {
        for part in &stages.filters[i] {
            let _ = writeln!(out, "  filter: {}", part.text);
        }
    };
    for (i, join) in job.joins.iter().enumerate() {
        filters(out, i);
        let kind = match join.join_type {
            JoinType::Left => "left join".to_owned(),
            JoinType::Inner => format!(
                "inner join (on a miss: {})",
                match join.on_miss.unwrap_or(MissPolicy::Drop) {
                    MissPolicy::Drop => "drop",
                    MissPolicy::Dlq => "dead-letter",
                    MissPolicy::Retry => "retry",
                }
            ),
        };
        let alias = join
            .alias
            .as_ref()
            .map(|a| format!(" as {a}"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {kind} {}{alias}", join.table);
        let _ = writeln!(out, "    key: {}", join.key.paths().join(", "));
        let time = match &join.as_of {
            None => "the latest row".to_owned(),
            Some(as_of) => match &as_of.field {
                Some(field) => format!("the row as of field {field}"),
                None => "the row as of the record's timestamp".to_owned(),
            },
        };
        let _ = writeln!(out, "    reads: {time}");
        let fetched = match &join.select {
            Some(columns) => columns.join(", "),
            None => "every column".to_owned(),
        };
        let _ = writeln!(out, "    fetches: {fetched}");
        if join.alias.is_none() {
            let into = join
                .into
                .as_ref()
                .map_or_else(|| "the event".to_owned(), |into| format!("field {into}"));
            let _ = writeln!(out, "    copies into: {into}");
        }
    }
    filters(out, job.joins.len());
    let key = job.output.key.as_ref().map_or_else(
        || "the input record's key".to_owned(),
        |k| k.paths().join(", "),
    );
    let _ = writeln!(out, "  output: {} (key: {key})", job.output.topic);
    match &stages.output {
        None => {
            let _ = writeln!(out, "    fields: the event, with what the joins copied");
        }
        Some(OutputFields { event, fields }) => {
            if *event {
                let _ = writeln!(out, "    fields: the event's own, then");
            }
            for (name, value) in fields {
                let _ = writeln!(out, "    {name} = {}", value.text);
            }
        }
    }
    let _ = writeln!(out, "  dead letters: {}", job.dead_letter.topic);
    if let Some(retry) = &job.retry {
        let _ = writeln!(
            out,
            "  retries: {} (every {} ms, {} attempts in all)",
            retry.topic, retry.delay_ms, retry.max_attempts
        );
    }
}
