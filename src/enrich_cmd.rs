//! `tributary enrich`: run the jobs of a job file, live or bounded.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::{Context as _, bail};
use clap::Args;
use prometheus_client::registry::Registry;
use tributary_enricher::bounds::{StartAt, StopAt};
use tributary_enricher::{Bounds, EnrichConfig, EnrichMetrics, JobSummary, Readiness};
use tributary_tables::TablesMetrics;

use crate::{http, kafka_check, shutdown_on_signal, status};

/// Arguments of `tributary enrich`.
#[derive(Args)]
pub(crate) struct EnrichArgs {
    /// Job file (YAML).
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

pub(crate) async fn run(args: EnrichArgs) -> anyhow::Result<()> {
    let loaded = EnrichConfig::load(&args.config)
        .with_context(|| format!("loading {}", args.config.display()))?;
    kafka_check::reach(&loaded.config.kafka, "enrich").await?;
    if let Some(tables) = loaded.tables.as_ref().filter(|t| t.uses_kafka()) {
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
    let readiness: Arc<OnceLock<Readiness>> = Arc::default();
    let ready = {
        let readiness = readiness.clone();
        move || readiness.get().is_some_and(Readiness::ready)
    };
    let listen = loaded
        .config
        .metrics
        .listen_or(tributary_enricher::config::DEFAULT_HTTP_PORT);
    let board =
        status::StatusBoard::register("enrich", loaded.config.metrics.stall_after(), &mut registry);
    let sampler = status::spawn_sampler(
        board.clone(),
        {
            let (readiness, metrics) = (readiness.clone(), metrics.clone());
            let jobs: Vec<String> = loaded.config.jobs.iter().map(|j| j.name.clone()).collect();
            move || {
                let loading = !readiness.get().is_some_and(Readiness::ready);
                let mut samples = status::job_samples(&jobs, &metrics, loading);
                if let Some(progress) = readiness.get().and_then(Readiness::progress) {
                    samples.extend(status::table_samples(progress));
                }
                samples
            }
        },
        shutdown.clone(),
    );
    let server = http::serve(listen, registry, ready, board, shutdown.clone()).await?;
    let result = tributary_enricher::run(
        loaded,
        bounds,
        metrics,
        table_metrics,
        |r| {
            readiness.set(r).ok();
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
