//! Reads the binlog as a replica: one [`BinlogReader`] owns one replication
//! connection, asks the server for the binlog from a position (by MariaDB GTID
//! state, MySQL GTID set, or file and offset), and hands each event to an
//! [`EventDecoder`], which yields the change events and commit positions.

use futures::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Pool};
use mysql_common::packets::{GnoInterval, Sid, Tag};
use prometheus_client::metrics::counter::Counter;
use tracing::info;

use crate::change_stream::ChangeStream;
use crate::change_stream::ReaderItem;
use crate::config::FailureHandling;
use crate::ddl_replay::SchemaModel;
use crate::error::CaptureError;
use crate::event_decoder::{DecoderSetup, EventDecoder};
use crate::event_shape::EventShape;
use crate::filter::TableFilter;
use crate::gtid_state::{GtidSet, GtidState};
use crate::position::BinlogPosition;
use crate::restart_skip::StartSkip;
use crate::row_query;
use crate::source::{self, ServerInfo};

/// A replication connection turned into change events.
pub struct BinlogReader {
    stream: BinlogStream,
    decoder: EventDecoder,
    started_from: BinlogPosition,
    offsets_topic: String,
    is_mariadb: bool,
}

/// Everything needed to open a reader.
pub struct ReaderSetup<'a> {
    /// Source connection settings.
    pub source: &'a crate::config::SourceConfig,
    /// Which tables to capture.
    pub filter: TableFilter,
    /// How their events are shaped.
    pub shape: EventShape,
    /// Result of preflight.
    pub info: ServerInfo,
    /// Pool for `information_schema` look-ups.
    pub pool: Pool,
    /// `events.event.processing.failure.handling.mode`.
    pub failure_handling: FailureHandling,
    /// Counts the rows events it skips.
    pub events_skipped: Counter,
    /// What of the first transaction to skip (`source.start_skip`; only
    /// when starting from `source.start`).
    pub start_skip: Option<StartSkip>,
    /// The tables at the start, for the schema change topic (else read from
    /// the server at the first DDL statement of each).
    pub schemas: Option<SchemaModel>,
}

impl<'a> ReaderSetup<'a> {
    /// The set-up a capture config asks for: its source, table filter and
    /// event shape, with a new look-up pool.
    pub fn of(
        config: &'a crate::config::CaptureConfig,
        info: ServerInfo,
        events_skipped: Counter,
    ) -> Result<Self, CaptureError> {
        Ok(ReaderSetup {
            source: &config.source,
            filter: TableFilter::of(config),
            shape: EventShape::of(config)?,
            info,
            pool: Pool::new(source::opts(&config.source)),
            failure_handling: config.events.event_processing_failure_handling_mode,
            events_skipped,
            start_skip: None,
            schemas: None,
        })
    }
}

impl BinlogReader {
    /// Connects as a replica and requests the binlog from `from`.
    pub async fn open(setup: ReaderSetup<'_>, from: &BinlogPosition) -> Result<Self, CaptureError> {
        let mut conn = source::connect(setup.source).await?;
        let is_mariadb = setup.info.is_mariadb;
        if is_mariadb && setup.shape.include_query {
            row_query::check_annotations(&mut conn).await?;
        }
        if is_mariadb {
            // Without this MariaDB replaces GTID events with BEGIN queries and dummies.
            conn.query_drop("SET @mariadb_slave_capability=4").await?;
        }
        if setup.source.heartbeat_s > 0 {
            let ns = setup.source.heartbeat_s * 1_000_000_000;
            conn.query_drop(format!("SET @master_heartbeat_period={ns}"))
                .await?;
        }
        let state = from
            .gtid
            .as_deref()
            .map(GtidState::parse)
            .transpose()
            .map_err(|e| CaptureError::ServerSetup(e.to_string()))?;
        let request = BinlogStreamRequest::new(setup.source.server_id);
        let (request, by_gtid) = match (&from.gtid, state) {
            (Some(text), Some(_)) if is_mariadb => {
                conn.exec_drop("SET @slave_connect_state=?", (text.as_str(),))
                    .await?;
                conn.query_drop("SET @slave_gtid_strict_mode=0").await?;
                (request, true)
            }
            // MySQL: COM_BINLOG_DUMP_GTID with the executed set; the server
            // sends every transaction not in it (only with gtid_mode=ON: in
            // other modes it refuses, so the stored file and offset are used).
            (_, Some(GtidState::MySql(set))) if setup.info.gtid_mode_on && !set.is_empty() => {
                (request.with_gtid().with_gtid_set(dump_sids(&set)), true)
            }
            _ => (
                request
                    .with_filename(from.file.as_bytes())
                    .with_pos(from.pos),
                false,
            ),
        };
        let offsets_topic = format!("{}.offsets", setup.shape.server_name);
        let stream = conn
            .get_binlog_stream(request)
            .await
            .map_err(|e| position_error(e, from, &offsets_topic, is_mariadb))?;
        info!(position = %from, by_gtid, "binlog stream opened");
        let decoder = EventDecoder::new(
            DecoderSetup {
                filter: setup.filter,
                shape: setup.shape,
                info: setup.info,
                pool: setup.pool,
                failure_handling: setup.failure_handling,
                events_skipped: setup.events_skipped,
                start_skip: setup.start_skip,
                schemas: setup.schemas,
            },
            from,
        )?;
        Ok(BinlogReader {
            stream,
            decoder,
            started_from: from.clone(),
            offsets_topic,
            is_mariadb,
        })
    }
}

impl ChangeStream for BinlogReader {
    type Position = BinlogPosition;

    /// What the last event read decoded to and was not taken yet.
    fn ready(&mut self) -> Option<ReaderItem<BinlogPosition>> {
        self.decoder.pop()
    }

    /// Ends the replication connection and the look-up pool.
    async fn close(self) {
        drop(self.stream);
        self.decoder.close().await;
    }

    /// The next change or commit; `None` when the server ends the stream.
    async fn next(&mut self) -> Result<Option<ReaderItem<BinlogPosition>>, CaptureError> {
        loop {
            if let Some(item) = self.ready() {
                return Ok(Some(item));
            }
            let event = match self.stream.next().await {
                None => return Ok(None),
                Some(Ok(event)) => event,
                Some(Err(e)) => {
                    return Err(position_error(
                        e,
                        &self.started_from,
                        &self.offsets_topic,
                        self.is_mariadb,
                    ));
                }
            };
            self.decoder.handle(event, &self.stream).await?;
        }
    }
}

/// A MySQL GTID set as COM_BINLOG_DUMP_GTID takes it.
fn dump_sids(set: &GtidSet) -> Vec<Sid<'static>> {
    set.sources()
        .map(|(source, intervals)| {
            let sid = Sid::new(*source.uuid.as_bytes()).with_intervals(
                intervals
                    .iter()
                    .map(|&(start, end)| GnoInterval::new(start, end + 1))
                    .collect(),
            );
            match &source.tag {
                // Tags were checked when the set was parsed.
                Some(tag) => sid.with_tag(Tag::new(tag.to_string()).expect("a valid tag")),
                None => sid,
            }
        })
        .collect()
}

/// Error 1236 (the server no longer has the position) says how to recover;
/// others say which grant is missing, if that is the cause.
fn position_error(
    err: mysql_async::Error,
    from: &BinlogPosition,
    offsets_topic: &str,
    is_mariadb: bool,
) -> CaptureError {
    match err {
        mysql_async::Error::Server(ref s) if s.code == 1236 => CaptureError::PositionLost {
            position: from.to_string(),
            offsets_topic: offsets_topic.to_owned(),
            detail: s.message.clone(),
        },
        other => source::explain_privilege_error(other, is_mariadb, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mysql_gtid_set_becomes_the_sids_of_a_dump_request() {
        let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let set = GtidSet::parse(&format!("{a}:1-5:7,{a}:batch:2")).unwrap();
        let sids: Vec<String> = dump_sids(&set).iter().map(Sid::to_string).collect();
        assert_eq!(sids, [format!("{a}:1-5:7"), format!("{a}:batch:2")]);
    }
}
