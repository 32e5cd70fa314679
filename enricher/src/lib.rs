//! Tributary enricher: jobs, declared in config files, that join event streams
//! against tables and write enriched events.
//!
//! - [`config`]: the job file (validated; errors name the field).
//! - [`field_path`]: field paths into events and the keys they make.
//! - [`event`]: an input event as indexed text, and the fields joins add to it.
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
//! [`run`] starts the local tables the jobs join (partitioned tables follow the
//! jobs' input partitions) and, when the tables file has a `grpc:` section, the
//! lookup API over them; checks co-partitioning, and runs every job.

pub mod bounds;
pub mod config;
pub mod error;
pub mod event;
pub mod field_path;
pub mod headers;
pub mod job;
pub mod metrics;
pub mod pipeline;
pub mod recovery;
pub mod retry;
pub mod skip;
pub mod transactions;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tributary_tables::config::TableMode;
use tributary_tables::grpc::ServedTables;
use tributary_tables::materializer::Materializer;
use tributary_tables::progress::Progress;
use tributary_tables::remote::{RemoteTable, RemoteTables};
use tributary_tables::{Follower, Table, TablesMetrics};

pub use bounds::Bounds;
pub use config::{EnrichConfig, Loaded};
pub use error::EnrichError;
pub use job::JobSummary;
pub use metrics::EnrichMetrics;

use crate::job::{JobSetup, TableGate};
use crate::pipeline::Pipeline;

/// What the HTTP endpoint's readiness looks at.
#[derive(Clone, Default)]
pub struct Readiness {
    progress: Option<Arc<Progress>>,
}

impl Readiness {
    /// Every held table partition has caught up.
    pub fn ready(&self) -> bool {
        self.progress.as_ref().is_none_or(|p| p.serving())
    }

    /// The local tables' partitions and offsets (none without local tables).
    pub fn progress(&self) -> Option<&Arc<Progress>> {
        self.progress.as_ref()
    }
}

/// Runs every job of `loaded` until `shutdown` (or, bounded, until each reaches
/// its end); `started` receives the readiness probe once tables are open.
pub async fn run(
    loaded: Loaded,
    bounds: Option<Bounds>,
    metrics: EnrichMetrics,
    table_metrics: TablesMetrics,
    started: impl FnOnce(Readiness),
    shutdown: CancellationToken,
) -> Result<Vec<JobSummary>, EnrichError> {
    let Loaded { config, tables } = loaded;
    let follower = Follower::default();
    // Tables stop after the jobs have drained.
    let tables_stop = CancellationToken::new();
    let materializer = match &tables {
        Some(tables) => Some(
            Materializer::start_following(
                tables,
                table_metrics.clone(),
                tables_stop.clone(),
                follower.clone(),
            )
            .await?,
        ),
        None => None,
    };
    let remote = match &tables {
        Some(tables) => {
            tributary_tables::remote::start_all(tables, &table_metrics, &tables_stop).await?
        }
        None => RemoteTables::default(),
    };
    // The lookup API over the same tables, when the tables file configures one.
    let api = match (&tables, tables.as_ref().and_then(|t| t.grpc.as_ref())) {
        (Some(config), Some(grpc)) => {
            let served = ServedTables {
                local: materializer
                    .as_ref()
                    .map(|m| m.tables().to_vec())
                    .unwrap_or_default(),
                progress: materializer.as_ref().map(Materializer::progress),
                remote: remote.tables.clone(),
            };
            let api = tributary_tables::grpc::start(
                config,
                grpc,
                served,
                table_metrics.clone(),
                tables_stop.clone(),
            )
            .await?;
            Some(api)
        }
        _ => None,
    };
    started(Readiness {
        progress: materializer.as_ref().map(Materializer::progress),
    });
    let running = RunningTables {
        config: tables.as_ref(),
        materializer: materializer.as_ref(),
        remote: &remote.tables,
        follower: &follower,
    };
    let result = run_jobs(&config, &running, bounds, &metrics, shutdown).await;
    tables_stop.cancel();
    // Every table task is waited for, whichever failed.
    let materialized = match materializer {
        Some(materializer) => materializer.join().await,
        None => Ok(()),
    };
    let served = match api {
        Some(api) => api.join().await,
        None => Ok(()),
    };
    remote.close().await;
    materialized?;
    served?;
    result
}

/// The tables jobs join, once started.
struct RunningTables<'a> {
    config: Option<&'a tributary_tables::TablesConfig>,
    materializer: Option<&'a Materializer>,
    remote: &'a [Arc<RemoteTable>],
    follower: &'a Follower,
}

async fn run_jobs(
    config: &EnrichConfig,
    tables: &RunningTables<'_>,
    bounds: Option<Bounds>,
    metrics: &EnrichMetrics,
    shutdown: CancellationToken,
) -> Result<Vec<JobSummary>, EnrichError> {
    let RunningTables {
        config: tables,
        materializer,
        remote,
        follower,
    } = *tables;
    let local: Vec<Arc<dyn Table>> = materializer
        .map(|m| {
            m.tables()
                .iter()
                .map(|t| t.clone() as Arc<dyn Table>)
                .collect()
        })
        .unwrap_or_default();
    let mut table_partitions = HashMap::new();
    for table in &local {
        table_partitions.insert(
            table.name().to_owned(),
            table.describe().await.partition_count,
        );
    }
    create_outputs(config, &input_partitions(config).await?).await?;
    // Again, with the retry topics just created.
    let counts = input_partitions(config).await?;
    let all_tables: Vec<Arc<dyn Table>> = local
        .iter()
        .cloned()
        .chain(remote.iter().map(|t| t.clone() as Arc<dyn Table>))
        .collect();
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
            let Some(&count) = table_partitions.get(&join.table) else {
                continue; // a remote table: no partitions to wait for
            };
            match EnrichConfig::table_mode(tables, &join.table) {
                TableMode::Global => global.push((join.table.clone(), count)),
                TableMode::Partitioned => {
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
            }
        }
        let gate =
            materializer.map(|m| TableGate::new(m.progress(), copartitioned.clone(), global));
        let setup = JobSetup {
            pipeline: Arc::new(Pipeline::new(
                job,
                &all_tables,
                config.max_event_bytes,
                metrics,
            )),
            config: job.clone(),
            kafka: config.kafka.clone(),
            inputs,
            concurrency: config.concurrency,
            grace: Duration::from_secs(config.shutdown_grace_s),
            delivery: config.delivery,
            commit_interval: Duration::from_millis(config.commit_interval_ms),
            gate,
            follower: (!copartitioned.is_empty()).then(|| follower.clone()),
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
    let admin: AdminClient<DefaultClientContext> = config.kafka.admin("enrich").create()?;
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
