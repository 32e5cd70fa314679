//! `tributary`: the command line. It loads config, builds components and runs them;
//! the work itself lives in the library crates.

mod enrich_cmd;
mod http;
mod import_debezium;
mod kafka_check;
mod lookup_cmd;
mod status;
mod status_cmd;
mod tables_cmd;
mod tail;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use tributary_capture::{CaptureConfig, CaptureMetrics};
use tributary_tables::TablesConfig;

/// Change-data capture from MySQL/MariaDB binlogs into Kafka.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Stream binlog changes of the configured tables into Kafka topics.
    Capture {
        /// Capture configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Ask the running capture to snapshot tables again while it streams: inserts a
    /// row into the config's `snapshot.signal_table`, which capture reads from the binlog or WAL.
    Snapshot {
        /// Capture configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Tables to snapshot, as `database.table`.
        #[arg(required = true)]
        tables: Vec<String>,
    },
    /// Run enrichment jobs: join event streams against tables into enriched topics.
    Enrich(enrich_cmd::EnrichArgs),
    /// Materialize tables and serve them over the gRPC lookup API (the `grpc:` section).
    Serve {
        /// Tables configuration file (YAML) with a `grpc:` section.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Query a lookup server: get, batch get, scan, describe, list (prints JSON).
    Lookup(Box<lookup_cmd::LookupArgs>),
    /// Local tables materialized from change topics.
    Tables {
        #[command(subcommand)]
        command: tables_cmd::TablesCommand,
    },
    /// Check a configuration file (capture, tables or jobs, YAML or SQL) and
    /// name the first bad field (or the line and column of SQL).
    Validate {
        /// Configuration file (YAML, or a job file in SQL: `.sql`).
        file: PathBuf,
        /// Also reach the Kafka cluster and a capture's source database (can it
        /// be captured, by this user?), and check that the topic of every
        /// partitioned table was written with its partitioner and key format.
        #[arg(long)]
        connect: bool,
    },
    /// Print the plan of a job file's jobs (YAML or SQL): input, filters,
    /// joins with their tables, keys and fetched columns, output fields and
    /// topics, delivery.
    Explain {
        /// Job file (YAML or `.sql`).
        file: PathBuf,
    },
    /// Print the records of a topic as JSON lines (key, value, partition, offset).
    Tail(tail::TailArgs),
    /// Print the health of running components: position, lag, throughput, and an
    /// OK / WARN / STALLED / STOPPED evaluation over the last minute.
    Status(status_cmd::StatusArgs),
    /// Print the capture configuration equivalent to a Debezium MySQL connector's
    /// (Kafka Connect JSON or .properties), with what it does not reproduce.
    ImportDebezium {
        /// The connector configuration: `{"name", "config"}`, its `config` map, or .properties.
        file: PathBuf,
        /// The Kafka cluster, when the connector config does not name one
        /// (in `schema.history.internal.kafka.bootstrap.servers`).
        #[arg(long)]
        brokers: Option<String>,
        /// Continue where the connector stopped: the value of its record in the
        /// Connect offsets topic (`{"file", "pos", "gtids", …}`), instead of a snapshot.
        #[arg(long)]
        offset: Option<String>,
    },
}

fn main() -> anyhow::Result<()> {
    // Before any thread starts: this may run the program again with the allocator tuned.
    let untuned = tributary_allocator::tune().err();
    run(untuned)
}

#[tokio::main]
async fn run(untuned: Option<std::io::Error>) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TRIBUTARY_LOG").unwrap_or_else(|_| {
                // pgwire-replication's worker logs every ended session as an ERROR;
                // capture gets the same error from the stream and says what it does about it.
                tracing_subscriber::EnvFilter::new(
                    "info,librdkafka=warn,rdkafka=warn,pgwire_replication::client::tokio_client=off",
                )
            }),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: log files and collectors get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Some(e) = untuned {
        warn!(error = %e, "cannot set the allocator's purge delay: running with mimalloc's default, which costs more CPU");
    }
    tributary_proto::crypto_provider::install();
    match Cli::parse().command {
        Command::Capture { config } => capture(config).await,
        Command::Snapshot { config, tables } => request_snapshot(config, &tables).await,
        Command::Tables { command } => tables_cmd::run(command).await,
        Command::Serve { config } => tables_cmd::materialize(config, true).await,
        Command::Lookup(args) => lookup_cmd::run(*args).await,
        Command::Enrich(args) => enrich_cmd::run(args).await,
        Command::Validate { file, connect } => validate(&file, connect).await,
        Command::Explain { file } => {
            let job = enrich_cmd::JobFile::load(&file)
                .with_context(|| format!("{} is not a valid job file", file.display()))?;
            print!("{}", tributary_enricher::explain::explain(&job.config));
            Ok(())
        }
        Command::Tail(args) => tail::run(args).await,
        Command::Status(args) => status_cmd::run(args).await,
        Command::ImportDebezium {
            file,
            brokers,
            offset,
        } => import_debezium(&file, brokers.as_deref(), offset.as_deref()),
    }
}

/// Validates a capture, tables or job configuration, told apart by their
/// top-level keys; with `connect`, reaches its Kafka cluster, a capture's
/// source database, and samples the topics of partitioned tables.
async fn validate(file: &std::path::Path, connect: bool) -> anyhow::Result<()> {
    let is_sql = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("sql"));
    let doc: serde_json::Value = if is_sql {
        serde_json::json!({ "sql": true })
    } else {
        tributary_config::load_yaml(file)?
    };
    let mut kafka = None;
    let tables = if doc.get("jobs").is_some() || doc.get("sql").is_some() {
        let job = enrich_cmd::JobFile::load(file)
            .with_context(|| format!("{} is not a valid job file", file.display()))?;
        kafka = Some(job.config.kafka);
        job.tables
    } else if doc.get("tables").is_some() {
        let config = TablesConfig::load(file)
            .with_context(|| format!("{} is not a valid tables config", file.display()))?;
        Some(config)
    } else {
        let config = CaptureConfig::load(file)
            .with_context(|| format!("{} is not a valid capture config", file.display()))?;
        if connect {
            let lines = tributary_capture::source_check::check_source(&config)
                .await
                .with_context(|| format!("{}: the source database", file.display()))?;
            for line in lines {
                println!("{line}");
            }
        }
        None
    };
    if connect {
        let kafka = match kafka {
            Some(kafka) => kafka,
            None => kafka_check::section_of(file)?,
        };
        kafka_check::reach(&kafka, "validate").await?;
        if let Some(tables) = tables.filter(|t| !t.tables.is_empty()) {
            kafka_check::reach(&tables.kafka, "validate").await?;
            let lines = tokio::task::spawn_blocking(move || {
                tributary_tables::partition_check::check_config(&tables)
            })
            .await
            .context("the partitioning check panicked")?
            .with_context(|| format!("{}: a table's topic does not fit it", file.display()))?;
            for line in lines {
                println!("{line}");
            }
        }
    }
    println!("{}: ok", file.display());
    Ok(())
}

async fn capture(path: PathBuf) -> anyhow::Result<()> {
    let config =
        CaptureConfig::load(&path).with_context(|| format!("loading {}", path.display()))?;
    let mut registry = Registry::default();
    let metrics = CaptureMetrics::register(&mut registry);
    let board =
        status::StatusBoard::register("capture", config.metrics.stall_after(), &mut registry);
    let shutdown = shutdown_on_signal();
    let ready = {
        let metrics = metrics.clone();
        move || metrics.streaming.get() == 1
    };
    let sampler = status::spawn_sampler(
        board.clone(),
        {
            let (metrics, name) = (metrics.clone(), config.server_name.clone());
            move || {
                status::datastream_sample(&name, &metrics)
                    .into_iter()
                    .collect()
            }
        },
        shutdown.clone(),
    );
    let listen = config
        .metrics
        .listen_or(tributary_capture::config::DEFAULT_HTTP_PORT);
    let server = http::serve(listen, registry, ready, board, shutdown.clone()).await?;
    // Alive (not ready) while a broker that is still starting is waited for.
    let result = match kafka_check::reach(&config.kafka, "capture").await {
        Ok(()) => tributary_capture::run(config, metrics, shutdown.clone())
            .await
            .context("capture stopped"),
        Err(e) => Err(e),
    };
    shutdown.cancel();
    server.await.ok();
    sampler.await.ok();
    result
}

fn import_debezium(
    file: &std::path::Path,
    brokers: Option<&str>,
    offset: Option<&str>,
) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let props = import_debezium::parse_connector(&text)
        .with_context(|| format!("reading {}", file.display()))?;
    let offset = offset
        .map(import_debezium::DebeziumOffset::parse)
        .transpose()
        .context("reading --offset")?;
    let imported = import_debezium::import(&props, brokers, offset.as_ref())?;
    print!("{}", imported.yaml);
    eprintln!(
        "{} properties or Debezium defaults are not reproduced and {} are not needed: see the comments \
         at the end of the output. Set {} to the database password before starting capture.",
        imported.not_reproduced.len(),
        imported.not_needed.len(),
        import_debezium::PASSWORD_VARIABLE
    );
    Ok(())
}

async fn request_snapshot(path: PathBuf, tables: &[String]) -> anyhow::Result<()> {
    let config =
        CaptureConfig::load(&path).with_context(|| format!("loading {}", path.display()))?;
    let id = tributary_capture::signal_request::request(&config, tables).await?;
    println!(
        "snapshot of {} requested (signal {id}); capture sends the rows as op \"r\" with source.snapshot \"incremental\"",
        tables.join(", ")
    );
    Ok(())
}

/// A token cancelled on SIGTERM or Ctrl-C.
pub(crate) fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler installs");
        tokio::select! {
            _ = term.recv() => info!("SIGTERM: draining"),
            _ = tokio::signal::ctrl_c() => info!("interrupt: draining"),
        }
        trigger.cancel();
    });
    token
}
