//! `tributary tables …`: run the materialization of local tables.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Subcommand;
use prometheus_client::registry::Registry;
use tracing::info;
use tributary_tables::materializer::Materializer;
use tributary_tables::{TablesConfig, TablesMetrics};

use crate::{http, shutdown_on_signal};

/// Subcommands of `tributary tables`.
#[derive(Subcommand)]
pub(crate) enum TablesCommand {
    /// Materialize the configured tables and keep them up to date until SIGTERM.
    Run {
        /// Tables configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
    },
}

pub(crate) async fn run(command: TablesCommand) -> anyhow::Result<()> {
    match command {
        TablesCommand::Run { config } => materialize(config).await,
    }
}

async fn materialize(path: PathBuf) -> anyhow::Result<()> {
    let config =
        TablesConfig::load(&path).with_context(|| format!("loading {}", path.display()))?;
    let mut registry = Registry::default();
    let metrics = TablesMetrics::register(&mut registry);
    let shutdown = shutdown_on_signal();
    let materializer = Materializer::start(&config, metrics, shutdown.clone()).await?;
    let progress = materializer.progress();
    let server = http::serve(
        config.metrics.listen,
        registry,
        move || progress.serving(),
        shutdown.clone(),
    )
    .await?;
    info!(listen = %config.metrics.listen, tables = config.tables.len(), "materializing; metrics and health endpoints up");
    let result = materializer.join().await;
    shutdown.cancel();
    server.await.ok();
    result.context("materializer stopped")
}
