//! Capture: MySQL/MariaDB binlog, or PostgreSQL logical replication
//! ([`postgres`]), → Kafka change topics.
//!
//! The path of a change, in order:
//! [`source`] (connect, preflight) → [`snapshot`] (existing rows, once) → [`binlog_reader`] (replication stream,
//! GTID/file position, TABLE_MAP → [`schema`] shaped by [`event_shape`], rows → [`row_decoder`]) →
//! [`kafka_writer`] (Debezium JSON, murmur2 partition, ordered acknowledgement)
//! → [`position_store`] (compacted `<server_name>.offsets`); the stream is
//! decoded ahead of the writer on a task of its own ([`read_ahead`]). While streaming,
//! [`incremental`] snapshots requested tables chunk by chunk, merged with the stream.
//!
//! The snapshot reads a [`snapshot_source::SnapshotSource`]; the streaming
//! phase reads a [`change_stream::ChangeStream`] and chunks from a
//! [`chunk_source::ChunkSource`]; both write to a [`sink::ChangeSink`]: MySQL,
//! the binlog and Kafka in production, [`memory`]'s doubles in tests.
//!
//! [`run`] ties them together and reconnects with backoff on transient errors,
//! until `recovery_timeout_s` passes without a position stored: then it fails,
//! so the process exits non-zero rather than retrying silently forever.

pub mod binlog_reader;
pub mod change_stream;
pub mod charset;
pub mod charset_map;
mod chunk_reader;
mod chunk_size;
pub mod chunk_source;
pub mod column_default;
pub mod column_rules;
pub mod config;
pub mod connect_schema;
pub mod ddl_replay;
pub mod ddl_statement;
pub mod declared_column;
pub mod default_value;
pub mod error;
pub mod event_decoder;
pub mod event_shape;
mod fast_value;
pub mod filter;
pub mod gtid_state;
pub mod incremental;
pub mod incremental_state;
pub mod kafka_writer;
pub mod memory;
pub mod message_key;
pub mod metrics;
pub mod position;
pub mod position_store;
pub mod postgres;
mod read_ahead;
pub mod record_encoder;
pub mod recorded_schemas;
pub mod restart_skip;
mod row_change;
pub mod row_decoder;
pub mod row_image;
mod row_query;
pub mod schema;
pub mod schema_change_record;
pub mod server_rules;
pub mod signal_request;
pub mod sink;
pub mod snapshot;
mod snapshot_progress;
pub mod snapshot_source;
pub mod source;
pub mod source_check;
pub mod source_position;
pub mod source_tls;
mod streaming;
pub mod table_definition;
pub mod table_model;
mod topic_reader;
mod transaction_topic;
pub mod value_modes;
pub mod value_plan;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use config::CaptureConfig;
pub use error::CaptureError;
pub use metrics::CaptureMetrics;

use binlog_reader::{BinlogReader, ReaderSetup};
use change_stream::ChangeStream;
use chunk_source::ChunkSource;
use config::{SnapshotMode, SourceKind};
use event_shape::EventShape;
use incremental::Incremental;
use incremental::mysql_chunks::MySqlChunks;
use kafka_writer::KafkaWriter;
use metrics::Snapshotting;
use position::{BinlogPosition, StartPosition};
use postgres::pg_chunks::PgChunks;
use postgres::pg_snapshot::PgSnapshot;
use postgres::wal_position::WalPosition;
use postgres::wal_stream::WalStream;
use read_ahead::ReadAhead;
use sink::ChangeSink;
use snapshot::mysql_snapshot::MySqlSnapshot;
use snapshot_source::SnapshotSource;
use source_position::{CapturePosition, SourcePosition};
use streaming::Stream;

/// How long shutdown waits for outstanding deliveries.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs capture until `shutdown` is cancelled or a permanent error occurs.
/// Transient errors (connections lost, broker unreachable) are retried with backoff.
pub async fn run(
    config: CaptureConfig,
    metrics: CaptureMetrics,
    shutdown: CancellationToken,
) -> Result<(), CaptureError> {
    let mut delay = Duration::from_millis(250);
    let mut resnapshot = false;
    let recovery_timeout = Duration::from_secs(config.recovery_timeout_s);
    // Since when capture has been failing without storing a position.
    let mut failing_since: Option<Instant> = None;
    loop {
        let mut progressed = false;
        match run_once(&config, &metrics, &shutdown, resnapshot, &mut progressed).await {
            Ok(()) => return Ok(()),
            Err(e @ CaptureError::PositionLost { .. })
                if config.snapshot.mode == SnapshotMode::WhenNeeded && !resnapshot =>
            {
                metrics.error(error_kind(&e));
                warn!(error = %e, "snapshot.mode is when_needed: taking a new snapshot");
                resnapshot = true;
            }
            Err(e) if e.is_transient() && !shutdown.is_cancelled() => {
                metrics.error(error_kind(&e));
                if progressed {
                    delay = Duration::from_millis(250);
                    resnapshot = false; // the new snapshot's position has been committed since
                    failing_since = None;
                }
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > recovery_timeout {
                    error!(error = %e, failing_for = ?since.elapsed(), "capture did not recover within recovery_timeout_s; exiting");
                    return Err(e);
                }
                warn!(error = %e, retry_in = ?delay, "capture interrupted; reconnecting, to resume from the stored position");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return Ok(()),
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            Err(e) => {
                metrics.error(error_kind(&e));
                return Err(e);
            }
        }
    }
}

fn error_kind(e: &CaptureError) -> &'static str {
    match e {
        CaptureError::Unreachable { .. } => "connection",
        CaptureError::Database(_) | CaptureError::Postgres { .. } => "database",
        CaptureError::Kafka(_) | CaptureError::Stalled { .. } => "kafka",
        CaptureError::Decode { .. } | CaptureError::WalDecode { .. } => "decode",
        _ => "setup",
    }
}

async fn run_once(
    config: &CaptureConfig,
    metrics: &CaptureMetrics,
    shutdown: &CancellationToken,
    resnapshot: bool,
    progressed: &mut bool,
) -> Result<(), CaptureError> {
    match config.source.kind {
        SourceKind::Mysql => run_mysql(config, metrics, shutdown, resnapshot, progressed).await,
        SourceKind::Postgres => {
            run_postgres(config, metrics, shutdown, resnapshot, progressed).await
        }
    }
}

async fn run_mysql(
    config: &CaptureConfig,
    metrics: &CaptureMetrics,
    shutdown: &CancellationToken,
    resnapshot: bool,
    progressed: &mut bool,
) -> Result<(), CaptureError> {
    let mut writer = KafkaWriter::<BinlogPosition>::connect(config, metrics.clone()).await?;
    // A lost position is replaced by a new snapshot's (snapshot.mode: when_needed).
    let stored = if resnapshot {
        None
    } else {
        writer.stored_position().await?
    };
    let mut conn = source::connect(&config.source).await?;
    let info = source::preflight(&mut conn).await?;
    drop(conn);
    let shape = EventShape::of(config)?;
    // `source.start_skip` applies to a start from `source.start` only.
    let mut start_skip = None;
    let from = match Start::of(stored, config.snapshot.mode) {
        Start::Resume(position) => resume(position, metrics),
        Start::Configured => {
            let mut conn = source::connect(&config.source).await?;
            let start = start_position(&config.source.start, &mut conn, info.is_mariadb).await?;
            start_skip = config.source.start_skip;
            CapturePosition::at(start)
        }
        Start::Snapshot { interrupted } => {
            let tables = MySqlSnapshot::new(config, info.is_mariadb, shape.clone());
            match initial_snapshot(config, tables, interrupted, &mut writer, metrics, shutdown)
                .await?
            {
                Some(position) => position,
                None => return writer.close(CLOSE_TIMEOUT, false).await,
            }
        }
    };
    let chunks = MySqlChunks::new(config, info.is_mariadb, shape.clone());
    let incremental = Incremental::new(config, chunks, metrics, from.incremental);
    let schemas = if shape.debezium_schema_changes && config.events().include_schema_changes {
        let (topic, rules) = (&shape.server_name, info.schema_rules);
        Some(recorded_schemas::rebuild(&config.kafka, topic, &from.source, rules).await?)
    } else {
        None
    };
    let mut setup = ReaderSetup::of(config, info, metrics.events_skipped.clone())?;
    setup.start_skip = start_skip;
    setup.schemas = schemas;
    let reader = BinlogReader::open(setup, &from.source).await?;
    stream(
        reader,
        writer,
        incremental,
        metrics,
        from.source,
        shutdown,
        progressed,
    )
    .await
}

async fn run_postgres(
    config: &CaptureConfig,
    metrics: &CaptureMetrics,
    shutdown: &CancellationToken,
    resnapshot: bool,
    progressed: &mut bool,
) -> Result<(), CaptureError> {
    let mut writer = KafkaWriter::<WalPosition>::connect(config, metrics.clone()).await?;
    let stored = if resnapshot {
        None
    } else {
        writer.stored_position().await?
    };
    let session = postgres::server::connect(&config.source).await?;
    postgres::server::preflight(&session.client, &config.source).await?;
    postgres::server::ensure_publication(&session.client, config).await?;
    postgres::server::check_signal_table(&session.client, config, true).await?;
    // The slot exists before a snapshot starts: it keeps the WAL after the snapshot's point.
    postgres::server::ensure_slot(&session.client, &config.source).await?;
    let shape = EventShape::of(config)?;
    let from = match Start::of(stored, config.snapshot.mode) {
        Start::Resume(position) => resume(position, metrics),
        // No stored position and no snapshot: from where the slot is (LSN 0 asks for that).
        Start::Configured => CapturePosition::at(WalPosition::default()),
        Start::Snapshot { interrupted } => {
            let tables = PgSnapshot::new(config, shape.clone());
            match initial_snapshot(config, tables, interrupted, &mut writer, metrics, shutdown)
                .await?
            {
                Some(position) => position,
                None => return writer.close(CLOSE_TIMEOUT, false).await,
            }
        }
    };
    let chunks = PgChunks::new(config, shape.clone());
    let incremental = Incremental::new(config, chunks, metrics, from.incremental);
    let reader = WalStream::open(config, shape, &from.source, writer.stored_positions()).await?;
    let result = stream(
        reader,
        writer,
        incremental,
        metrics,
        from.source,
        shutdown,
        progressed,
    )
    .await;
    if result.is_ok() && config.source.slot_drop_on_stop {
        postgres::server::drop_slot(&session.client, &config.source).await?;
    }
    result
}

/// Resumes from the stored `position`.
fn resume<P: SourcePosition>(
    position: CapturePosition<P>,
    metrics: &CaptureMetrics,
) -> CapturePosition<P> {
    info!(%position, "resuming from the stored position");
    metrics.resumed_at(&position.source);
    position
}

/// Takes the initial snapshot from `tables` and stores its position: where
/// streaming starts, or `None` when capture is to stop (a shutdown during
/// the snapshot, or `snapshot.mode: initial_only`).
async fn initial_snapshot<S: SnapshotSource>(
    config: &CaptureConfig,
    mut tables: S,
    interrupted: Option<S::Position>,
    writer: &mut KafkaWriter<S::Position>,
    metrics: &CaptureMetrics,
    shutdown: &CancellationToken,
) -> Result<Option<CapturePosition<S::Position>>, CaptureError> {
    let snapshotting = Snapshotting::start(metrics);
    let snapshot = snapshot::run(
        &config.server_name,
        &mut tables,
        writer,
        metrics,
        shutdown,
        interrupted,
    )
    .await?;
    drop(snapshotting);
    let Some(position) = snapshot else {
        return Ok(None); // interrupted by shutdown
    };
    let position = CapturePosition::at(position);
    writer.commit(position.clone()).await?;
    if config.snapshot.mode == SnapshotMode::InitialOnly {
        info!("snapshot.mode is initial_only: stopping after the snapshot");
        return Ok(None);
    }
    Ok(Some(position))
}

/// The streaming phase, until `shutdown` or an error; then the writer and
/// the reader are closed. The reader is read ahead on a task of its own
/// ([`read_ahead`]).
async fn stream<R, C>(
    reader: R,
    mut writer: KafkaWriter<R::Position>,
    mut incremental: Incremental<C>,
    metrics: &CaptureMetrics,
    from: R::Position,
    shutdown: &CancellationToken,
    progressed: &mut bool,
) -> Result<(), CaptureError>
where
    R: ChangeStream + 'static,
    C: ChunkSource<Position = R::Position>,
{
    metrics.streaming.set(1);
    // Records are encoded on the reading task, so the writer only hands them to the producer.
    let mut reader = ReadAhead::start(reader, Some(writer.record_encoder()));
    let mut stream = Stream {
        reader: &mut reader,
        writer: &mut writer,
        incremental: &mut incremental,
        metrics,
        at: from,
        in_transaction: false,
    };
    let result = stream.run(shutdown, progressed).await;
    metrics.streaming.set(0);
    let closed = writer.close(CLOSE_TIMEOUT, result.is_err()).await;
    reader.close().await;
    // A failed acknowledger makes `stream` fail with a bare cancellation; its own error says why.
    closed.and(result)
}

/// Where a run of capture starts, `P` being the source's positions.
#[derive(Debug, PartialEq)]
pub(crate) enum Start<P> {
    /// From the stored position.
    Resume(CapturePosition<P>),
    /// From `source.start` (no position stored, `snapshot.mode: never`).
    Configured,
    /// With a snapshot; `interrupted` is the start of an earlier one that did
    /// not complete.
    Snapshot { interrupted: Option<P> },
}

impl<P> Start<P> {
    /// Where a run starts, given the stored position and `snapshot.mode`.
    pub(crate) fn of(stored: Option<CapturePosition<P>>, mode: SnapshotMode) -> Start<P> {
        match (stored, mode) {
            (Some(position), SnapshotMode::Never) if position.snapshot_incomplete => {
                warn!(
                    "the last snapshot did not complete and snapshot.mode is never: tables may lack rows"
                );
                Start::Resume(position)
            }
            (Some(position), _) if !position.snapshot_incomplete => Start::Resume(position),
            (None, SnapshotMode::Never) => Start::Configured,
            (interrupted, _) => Start::Snapshot {
                interrupted: interrupted.map(|position| position.source),
            },
        }
    }
}

async fn start_position(
    start: &StartPosition,
    conn: &mut mysql_async::Conn,
    is_mariadb: bool,
) -> Result<BinlogPosition, CaptureError> {
    let position = match start {
        StartPosition::Latest => source::current_position(conn, is_mariadb).await?,
        StartPosition::Earliest => source::earliest_position(conn, is_mariadb).await?,
        StartPosition::Gtid(gtid) => BinlogPosition {
            file: String::new(),
            pos: 4,
            gtid: Some(gtid.clone()),
            ts_ms: 0,
        },
        StartPosition::Binlog { file, pos } => BinlogPosition {
            file: file.clone(),
            pos: *pos,
            gtid: None,
            ts_ms: 0,
        },
    };
    info!(%position, ?start, "no stored position; starting from the configured start");
    Ok(position)
}
