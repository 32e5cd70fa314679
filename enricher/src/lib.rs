//! Tributary enricher: jobs, declared in config files, that join event streams
//! against tables and write enriched events.
//!
//! - [`config`]: the job file (validated; errors name the field).
//! - [`field_path`]: field paths into events and the keys they make.
//! - [`event`]: an input event as indexed text, and the fields joins add to it.
//! - [`dialect`], [`expr`]: SQL expressions (filters, computed fields), compiled
//!   once and evaluated per event; [`job_names`]: the names they may use;
//!   [`stages`]: a job's filter and output fields.
//! - [`pipeline`]: what a job does to one record (joins, projection, dead letters).
//! - [`job`]: the consume → enrich → produce loop of one job, at-least-once.
//! - [`retry`]: the retry topic of `on_miss: retry`.
//! - [`headers`]: the headers of outputs, dead letters and retries; [`skip`]: why
//!   an event produced nothing.
//! - [`transactions`]: exactly-once delivery through Kafka transactions.
//! - [`bounds`]: bounded runs (`--from` / `--until`) that stop by themselves.
//! - [`recovery`]: a job started again after broker errors, from its committed offsets.
//! - [`error`], [`metrics`].
//!
//! [`run`] runs every job of a job file over the tables it is given, through
//! the seams of `tributary-table-api` ([`Table`], [`HeldPartitions`]): this
//! crate does not know how tables are stored (no RocksDB here); the caller
//! starts them (`tributary_tables::JobTables`). It checks co-partitioning
//! and creates missing output topics first.

pub mod bounds;
pub mod config;
pub mod dialect;
pub mod error;
pub mod event;
pub mod explain;
pub mod expr;
pub mod field_path;
pub mod headers;
pub mod job;
pub mod job_names;
pub mod metrics;
pub mod pipeline;
pub mod recovery;
pub mod retry;
pub mod skip;
pub mod sql;
pub mod stages;
pub mod transactions;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tributary_kafka::{AdminClient, BaseConsumer};
pub use tributary_table_api::JoinTables;

pub use bounds::Bounds;
pub use config::EnrichConfig;
pub use error::EnrichError;
pub use job::JobSummary;
pub use metrics::EnrichMetrics;

use crate::job::{JobSetup, TableGate};
use crate::pipeline::Pipeline;

/// Runs every job of `config` over `tables` until `shutdown` (or, bounded,
/// until each reaches its end).
pub async fn run(
    config: &EnrichConfig,
    tables: &JoinTables,
    bounds: Option<Bounds>,
    metrics: &EnrichMetrics,
    shutdown: CancellationToken,
) -> Result<Vec<JobSummary>, EnrichError> {
    // A table's partition count and layout, once per table.
    let mut layouts = HashMap::new();
    for table in &tables.tables {
        let description = table.describe().await;
        if description.partition_count > 0 {
            layouts.insert(
                description.name.clone(),
                (description.partition_count, description.global),
            );
        }
    }
    create_outputs(config, &input_partitions(config).await?).await?;
    // Again, with the retry topics just created.
    let counts = input_partitions(config).await?;
    let mut handles = Vec::new();
    let jobs_stop = shutdown.child_token();
    for job in &config.jobs {
        let inputs: Vec<(String, u32)> = job
            .input
            .topics
            .iter()
            .chain(job.retry.as_ref().map(|r| &r.topic))
            .map(|t| {
                counts
                    .get(t)
                    .map(|c| (t.clone(), *c))
                    .ok_or_else(|| EnrichError::NoSuchTopic {
                        job: job.name.clone(),
                        topic: t.clone(),
                    })
            })
            .collect::<Result<_, _>>()?;
        let (mut copartitioned, mut global) = (Vec::new(), Vec::new());
        for join in &job.joins {
            let Some(&(count, is_global)) = layouts.get(&join.table) else {
                continue; // a remote table: no partitions to wait for
            };
            if is_global {
                global.push((join.table.clone(), count));
                continue;
            }
            if let Some((topic, n)) = inputs.iter().find(|(_, n)| *n != count) {
                return Err(EnrichError::NotCoPartitioned {
                    job: job.name.clone(),
                    topic: topic.clone(),
                    topic_partitions: *n,
                    table: join.table.clone(),
                    table_partitions: count,
                });
            }
            copartitioned.push(join.table.clone());
        }
        let held = tables.held.clone();
        let setup = JobSetup {
            pipeline: Arc::new(Pipeline::new(
                job,
                &tables.tables,
                config.max_event_bytes,
                metrics,
            )),
            config: job.clone(),
            kafka: config.kafka.clone(),
            inputs,
            concurrency: config.concurrency,
            max_in_flight_bytes: config.max_in_flight_mb.saturating_mul(1 << 20),
            grace: Duration::from_secs(config.shutdown_grace_s),
            delivery: config.delivery,
            commit_interval: Duration::from_millis(config.commit_interval_ms),
            gate: held
                .clone()
                .map(|h| TableGate::new(h, copartitioned.clone(), global)),
            follower: held.filter(|_| !copartitioned.is_empty()),
            metrics: metrics.clone(),
        };
        let stop = jobs_stop.clone();
        let recovery_timeout = Duration::from_secs(config.recovery_timeout_s);
        handles.push(tokio::spawn(async move {
            let result = match bounds {
                Some(_) => job::run(setup, bounds, stop.clone()).await,
                None => recovery::run_resuming(setup, stop.clone(), recovery_timeout).await,
            };
            if result.is_err() {
                stop.cancel(); // one failed job stops the others
            }
            result
        }));
    }
    let mut summaries = Vec::new();
    let mut first_error = None;
    for handle in handles {
        match handle.await.expect("job tasks do not panic") {
            Ok(summary) => summaries.push(summary),
            Err(e) => {
                error!(error = %e, "job failed");
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(summaries), Err)
}

/// Creates the output and dead-letter topics that do not exist yet, with as many
/// partitions as the job's input.
async fn create_outputs(
    config: &EnrichConfig,
    counts: &HashMap<String, u32>,
) -> Result<(), EnrichError> {
    let admin: AdminClient = config.kafka.admin("enrich").create()?;
    let mut wanted = Vec::new();
    for job in &config.jobs {
        let partitions = job
            .input
            .topics
            .iter()
            .filter_map(|t| counts.get(t))
            .max()
            .copied()
            .unwrap_or(1);
        let retry = job.retry.as_ref().map(|r| &r.topic);
        for topic in [&job.output.topic, &job.dead_letter.topic]
            .into_iter()
            .chain(retry)
        {
            wanted.push(NewTopic::new(
                topic,
                partitions as i32,
                TopicReplication::Fixed(config.kafka.replication_factor),
            ));
        }
    }
    for result in admin.create_topics(&wanted, &AdminOptions::new()).await? {
        match result {
            Ok(topic) => info!(%topic, "created"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, e)) => {
                error!(%topic, error = %e, "cannot create the topic");
                return Err(KafkaError::AdminOp(e).into());
            }
        }
    }
    Ok(())
}

/// Partition counts of every input and retry topic (absent topics are left out).
async fn input_partitions(config: &EnrichConfig) -> Result<HashMap<String, u32>, EnrichError> {
    let client: BaseConsumer = config
        .kafka
        .consumer("enrich", "tributary-enrich.metadata")
        .create()?;
    let topics: Vec<String> = config
        .jobs
        .iter()
        .flat_map(|j| {
            j.input
                .topics
                .iter()
                .chain(j.retry.as_ref().map(|r| &r.topic))
        })
        .cloned()
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut counts = HashMap::new();
        for topic in topics {
            let metadata = client.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
            if let Some(t) = metadata.topics().first()
                && t.error().is_none()
                && !t.partitions().is_empty()
            {
                counts.insert(topic, t.partitions().len() as u32);
            }
        }
        Ok(counts)
    })
    .await
    .expect("metadata fetch does not panic")
}
