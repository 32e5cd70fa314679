//! Capture's Prometheus metrics: names and labels in one place.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::source_position::SourcePosition;

/// Label: a captured table, as `db.table`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabel {
    /// `db.table`.
    pub table: String,
}

/// Label: the kind of error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    /// `connection`, `database`, `kafka`, `decode`, `setup`.
    pub kind: String,
}

/// Every capture metric.
#[derive(Clone, Default)]
pub struct CaptureMetrics {
    /// Change events written, per table.
    pub events: Family<TableLabel, Counter>,
    /// Errors, per kind (transient ones are retried).
    pub errors: Family<ErrorLabel, Counter>,
    /// Rows events skipped because they could not be decoded
    /// (`event.processing.failure.handling.mode` warn or skip).
    pub events_skipped: Counter,
    /// Seconds between the last event's commit on the source and its capture.
    pub last_event_lag_seconds: Gauge<f64, AtomicU64>,
    /// Source commit time (epoch seconds) of the last stored position.
    pub committed_source_time_seconds: Gauge<f64, AtomicU64>,
    /// Source commit time (epoch seconds) of the last transaction or heartbeat read
    /// from the binlog: the position capture has to store next.
    pub read_source_time_seconds: Gauge<f64, AtomicU64>,
    /// 1 while a snapshot (initial, or a chunk of an on-demand one) is being read.
    pub snapshotting: Gauge,
    /// 1 while the binlog stream is open.
    pub streaming: Gauge,
    /// Rows read so far by the snapshot, per table.
    pub snapshot_rows_done: Family<TableLabel, Gauge>,
    /// The server's row estimate of each table being snapshotted.
    pub snapshot_rows_estimated: Family<TableLabel, Gauge>,
}

impl CaptureMetrics {
    /// Creates the metrics and registers them under `tributary_capture_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = CaptureMetrics::default();
        let r = registry.sub_registry_with_prefix("tributary_capture");
        r.register("events", "Change events written to Kafka", m.events.clone());
        r.register("errors", "Capture errors by kind", m.errors.clone());
        r.register(
            "events_skipped",
            "Binlog rows events skipped as undecodable (event.processing.failure.handling.mode warn or skip)",
            m.events_skipped.clone(),
        );
        r.register(
            "last_event_lag_seconds",
            "Seconds from the source commit of the last event to its capture",
            m.last_event_lag_seconds.clone(),
        );
        r.register(
            "committed_source_time_seconds",
            "Source commit time of the last stored position (epoch seconds)",
            m.committed_source_time_seconds.clone(),
        );
        r.register(
            "read_source_time_seconds",
            "Source commit time of the last transaction or heartbeat read from the binlog (epoch seconds)",
            m.read_source_time_seconds.clone(),
        );
        r.register(
            "snapshotting",
            "1 while a snapshot, or a chunk of an on-demand snapshot, is being read",
            m.snapshotting.clone(),
        );
        r.register(
            "streaming",
            "1 while the binlog stream is open",
            m.streaming.clone(),
        );
        r.register(
            "snapshot_rows_done",
            "Rows read so far by the snapshot, per table",
            m.snapshot_rows_done.clone(),
        );
        r.register(
            "snapshot_rows_estimated",
            "The server's row estimate of each table being snapshotted",
            m.snapshot_rows_estimated.clone(),
        );
        m
    }

    /// Capture resumes from `position`, stored before: it is both committed and read.
    pub fn resumed_at(&self, position: &impl SourcePosition) {
        self.committed(position);
        self.read_up_to(position);
    }

    /// `position` has been stored.
    pub fn committed(&self, position: &impl SourcePosition) {
        self.committed_source_time_seconds
            .set(position.ts_ms() as f64 / 1000.0);
    }

    /// `position` has been read from the binlog and is to be stored.
    pub fn read_up_to(&self, position: &impl SourcePosition) {
        self.read_source_time_seconds
            .set(position.ts_ms() as f64 / 1000.0);
    }

    /// Counts an error by kind.
    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&ErrorLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }
}

/// Marks a snapshot being read (the watchdog does not judge capture meanwhile).
pub(crate) struct Snapshotting<'a>(&'a CaptureMetrics);

impl<'a> Snapshotting<'a> {
    pub(crate) fn start(metrics: &'a CaptureMetrics) -> Self {
        metrics.snapshotting.set(1);
        Snapshotting(metrics)
    }
}

impl Drop for Snapshotting<'_> {
    fn drop(&mut self) {
        self.0.snapshotting.set(0);
    }
}
