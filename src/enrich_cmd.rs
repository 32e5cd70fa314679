//! `tributary enrich`: run the jobs of a job file, live or bounded.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::{Context as _, bail};
use clap::Args;
use prometheus_client::registry::Registry;
use tributary_enricher::bounds::{StartAt, StopAt};
use tributary_enricher::sql::{DeclaredTable, JobFile as Text};
use tributary_enricher::{Bounds, EnrichConfig, EnrichMetrics, JobSummary};
use tributary_tables::progress::Progress;
use tributary_tables::{JobTables, TablesConfig, TablesMetrics};

use crate::{http, kafka_check, shutdown_on_signal, status};

/// Arguments of `tributary enrich`.
#[derive(Args)]
pub(crate) struct EnrichArgs {
    /// Job file: YAML (`jobs:` or `sql:`), or SQL (`.sql`).
    #[arg(long, short)]
    config: PathBuf,
    /// Bounded run: start at `committed`, `beginning`, an offset or an RFC 3339 time.
    #[arg(long, requires = "until")]
    from: Option<StartAt>,
    /// Bounded run: stop at `end` (as of the start), an offset or an RFC 3339 time
    /// (exclusive), print a summary and exit.
    #[arg(long)]
    until: Option<StopAt>,
}

/// A job file and the tables config it names, checked against each other.
pub(crate) struct JobFile {
    pub(crate) config: EnrichConfig,
    pub(crate) tables: Option<TablesConfig>,
}

impl JobFile {
    /// Reads a job file (YAML or SQL) and the tables config it names; SQL jobs
    /// are compiled with the keys of their tables, and the keys they declare
    /// are given to the local tables to check against their data.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        let (config, tables) = Text::load(
            path,
            |file| TablesConfig::load_referenced(path, file),
            |tables, declared| tables.declare_tables(declared.iter().map(DeclaredTable::parts)),
        )?;
        let names = tables.as_ref().map(TablesConfig::names).unwrap_or_default();
        config.check_tables(&names)?;
        let versioned = tables.as_ref().map(TablesConfig::versioned_names);
        config.check_as_of(&versioned.unwrap_or_default())?;
        Ok(JobFile { config, tables })
    }
}

/// Whether every held table partition has caught up (`None` until the tables
/// are open; no progress without local tables).
type Readiness = Arc<OnceLock<Option<Arc<Progress>>>>;

fn is_ready(readiness: &Readiness) -> bool {
    readiness
        .get()
        .is_some_and(|progress| progress.as_ref().is_none_or(|p| p.serving()))
}

pub(crate) async fn run(args: EnrichArgs) -> anyhow::Result<()> {
    let JobFile { config, tables } = JobFile::load(&args.config)
        .with_context(|| format!("loading {}", args.config.display()))?;
    kafka_check::reach(&config.kafka, "enrich").await?;
    if let Some(tables) = tables.as_ref().filter(|t| t.uses_kafka()) {
        kafka_check::reach(&tables.kafka, "tables").await?;
    }
    let bounds = args.until.map(|until| Bounds {
        from: args.from.unwrap_or(StartAt::Committed),
        until,
    });
    let mut registry = Registry::default();
    let metrics = EnrichMetrics::register(&mut registry);
    let table_metrics = TablesMetrics::register(&mut registry);
    let shutdown = shutdown_on_signal();
    let readiness = Readiness::default();
    let ready = {
        let readiness = readiness.clone();
        move || is_ready(&readiness)
    };
    let listen = config
        .metrics
        .listen_or(tributary_enricher::config::DEFAULT_HTTP_PORT);
    let board =
        status::StatusBoard::register("enrich", config.metrics.stall_after(), &mut registry);
    let sampler = status::spawn_sampler(
        board.clone(),
        {
            let (readiness, metrics) = (readiness.clone(), metrics.clone());
            let jobs: Vec<String> = config.jobs.iter().map(|j| j.name.clone()).collect();
            move || {
                let loading = !is_ready(&readiness);
                let mut samples = status::job_samples(&jobs, &metrics, loading);
                if let Some(progress) = readiness.get().and_then(Option::as_ref) {
                    samples.extend(status::table_samples(progress));
                }
                samples
            }
        },
        shutdown.clone(),
    );
    let server = http::serve(listen, registry, ready, board, shutdown.clone()).await?;
    let result = run_jobs(
        &config,
        tables.as_ref(),
        bounds,
        &metrics,
        &table_metrics,
        |p| {
            readiness.set(p).ok();
        },
        shutdown.clone(),
    )
    .await;
    shutdown.cancel();
    server.await.ok();
    sampler.await.ok();
    let summaries = result.context("enricher stopped")?;
    if bounds.is_some() {
        print_summary(&summaries);
        if summaries.is_empty() {
            bail!("no job ran");
        }
    }
    Ok(())
}

/// Starts the tables, runs the jobs over them, and stops the tables once the
/// jobs have drained; `started` receives the tables' progress once they are open.
async fn run_jobs(
    config: &EnrichConfig,
    tables: Option<&TablesConfig>,
    bounds: Option<Bounds>,
    metrics: &EnrichMetrics,
    table_metrics: &TablesMetrics,
    started: impl FnOnce(Option<Arc<Progress>>),
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<Vec<JobSummary>> {
    let running = JobTables::start(tables, table_metrics).await?;
    started(running.progress());
    let result =
        tributary_enricher::run(config, &running.for_jobs(), bounds, metrics, shutdown).await;
    // The tables are stopped and waited for, whichever failed.
    let closed = running.close().await;
    let summaries = result?;
    closed?;
    Ok(summaries)
}

fn print_summary(summaries: &[JobSummary]) {
    println!(
        "| job | events in | out | dead-lettered | skipped | retried | seconds (first event to last ack) | events/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in summaries {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.0} |",
            s.job,
            s.events_in,
            s.events_out,
            s.dead_lettered,
            s.skipped,
            s.retried,
            s.seconds,
            s.events_in as f64 / s.seconds.max(1e-9)
        );
    }
}
