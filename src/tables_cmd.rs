//! `tributary tables …`: materialize local tables; checkpoint and restore their store.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tributary_tables::checkpoint;
use tributary_tables::config::CheckpointConfig;
use tributary_tables::grpc::ServedTables;
use tributary_tables::materializer::Materializer;
use tributary_tables::remote;
use tributary_tables::store::Store;
use tributary_tables::{TablesConfig, TablesMetrics};

use crate::{http, kafka_check, shutdown_on_signal, status};

/// Subcommands of `tributary tables`.
#[derive(Subcommand)]
pub(crate) enum TablesCommand {
    /// Materialize the configured tables and keep them up to date until SIGTERM
    /// (serving lookups too when the config has a `grpc:` section).
    Run {
        /// Tables configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Checkpoint the store of a stopped instance (a running one checkpoints itself).
    Checkpoint {
        /// Tables configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Destination (default: `checkpoints.dir` of the config).
        #[arg(long)]
        to: Option<PathBuf>,
    },
    /// Fill an empty data directory from a checkpoint; `run` then replays only the tail.
    Restore {
        /// Tables configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Where checkpoints are (default: `checkpoints.dir` of the config).
        #[arg(long)]
        from: Option<PathBuf>,
        /// Checkpoint name (default: the newest).
        #[arg(long)]
        checkpoint: Option<String>,
    },
}

pub(crate) async fn run(command: TablesCommand) -> anyhow::Result<()> {
    match command {
        TablesCommand::Run { config } => materialize(config, false).await,
        TablesCommand::Checkpoint { config, to } => {
            let config = load(&config)?;
            let dest = destination(&config, to)?;
            let store = Store::open(&config.data_dir, &config.rocksdb).with_context(|| {
                format!(
                    "opening {} (is `tributary tables run` using it?)",
                    config.data_dir.display()
                )
            })?;
            let keep = config.checkpoints.as_ref().map_or(3, |c| c.keep);
            let stats = checkpoint::create(&store, &config.data_dir, &dest, keep)?;
            println!(
                "{}: {} files copied ({} bytes), {} table files reused",
                dest.join(&stats.name).display(),
                stats.files_copied,
                stats.bytes_copied,
                stats.files_reused
            );
            Ok(())
        }
        TablesCommand::Restore {
            config,
            from,
            checkpoint,
        } => {
            let config = load(&config)?;
            let source = destination(&config, from)?;
            let name = checkpoint::restore(&source, checkpoint.as_deref(), &config.data_dir)?;
            println!("restored {name} into {}", config.data_dir.display());
            Ok(())
        }
    }
}

fn load(path: &std::path::Path) -> anyhow::Result<TablesConfig> {
    TablesConfig::load(path).with_context(|| format!("loading {}", path.display()))
}

fn destination(config: &TablesConfig, explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match explicit.or_else(|| config.checkpoints.as_ref().map(|c| c.dir.clone())) {
        Some(dir) => Ok(dir),
        None => {
            bail!("no checkpoint directory: pass --to/--from or set checkpoints.dir in the config")
        }
    }
}

/// Materializes the tables of `path` until SIGTERM, serving them over gRPC when the
/// config has a `grpc:` section (required when `require_api`: `tributary serve`).
pub(crate) async fn materialize(path: PathBuf, require_api: bool) -> anyhow::Result<()> {
    let config = load(&path)?;
    if config.uses_kafka() {
        kafka_check::reach(&config.kafka, "tables").await?;
    }
    if require_api && config.grpc.is_none() {
        bail!(
            "{}: no `grpc:` section; add one (at least grpc.listen) to serve lookups",
            path.display()
        );
    }
    let mut registry = Registry::default();
    let metrics = TablesMetrics::register(&mut registry);
    let shutdown = shutdown_on_signal();
    let materializer = Materializer::start(&config, metrics.clone(), shutdown.clone()).await?;
    let progress = materializer.progress();
    let api = match &config.grpc {
        Some(grpc) => {
            let remote = remote::start_all(&config, false, &metrics, &shutdown).await?;
            let tables = ServedTables {
                local: materializer.tables().to_vec(),
                progress: Some(progress.clone()),
                remote: remote.tables.clone(),
            };
            let api =
                tributary_tables::grpc::start(&config, grpc, tables, metrics, shutdown.clone())
                    .await?;
            Some((api, remote))
        }
        None => None,
    };
    let listen = config
        .metrics
        .listen_or(tributary_tables::config::DEFAULT_HTTP_PORT);
    let has_local = !config.tables.is_empty();
    let board =
        status::StatusBoard::register("tables", config.metrics.stall_after(), &mut registry);
    let sampler = status::spawn_sampler(
        board.clone(),
        {
            let progress = progress.clone();
            move || status::table_samples(&progress)
        },
        shutdown.clone(),
    );
    let server = http::serve(
        listen,
        registry,
        move || !has_local || progress.serving(),
        board,
        shutdown.clone(),
    )
    .await?;
    info!(tables = config.tables.len(), "materializing");
    let checkpoints = config.checkpoints.clone().map(|c| {
        tokio::spawn(checkpoint_periodically(
            materializer.store(),
            config.data_dir.clone(),
            c,
            shutdown.clone(),
        ))
    });
    let result = materializer.join().await;
    shutdown.cancel();
    server.await.ok();
    sampler.await.ok();
    if let Some((api, remote)) = api {
        api.join().await.context("lookup API")?;
        remote.close().await;
    }
    if let Some(task) = checkpoints {
        task.await.ok();
    }
    result.context("materializer stopped")
}

async fn checkpoint_periodically(
    store: Arc<Store>,
    data_dir: PathBuf,
    config: CheckpointConfig,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(Duration::from_secs(config.interval_s));
    ticks.tick().await; // the first tick is immediate
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let (store, data_dir, dest) = (store.clone(), data_dir.clone(), config.dir.clone());
        let keep = config.keep;
        let outcome =
            tokio::task::spawn_blocking(move || checkpoint::create(&store, &data_dir, &dest, keep))
                .await;
        match outcome {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => error!(error = %e, "checkpoint failed; retrying at the next interval"),
            Err(e) => error!(error = %e, "checkpoint task failed"),
        }
    }
}
