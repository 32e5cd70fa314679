//! Capture configuration: YAML with `${ENV}` interpolation, strict fields, validation.
//!
//! ```yaml
//! server_name: shop                 # topic prefix: <server_name>.<db>.<table>
//! source:
//!   host: 127.0.0.1
//!   port: 3307
//!   user: tributary
//!   password: ${TRIBUTARY_MYSQL_PASSWORD}
//!   server_id: 5401                 # replica id; unique among the server's replicas
//!   start: latest                   # where to begin without a stored position
//! include: { databases: ["shop"] }  # regexes; tables match "db.table"
//! message_key_columns: "shop.events:device_id,ts"   # Debezium's message.key.columns (see message_key)
//! kafka:
//!   brokers: 127.0.0.1:19092
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;
use tracing::warn;
pub use tributary_kafka::KafkaConfig;

pub use tributary_config::Delivery;
use tributary_config::{ConfigError, HttpConfig, Validate};
use tributary_proto::json_number::DoubleFormat;

use crate::column_rules::{ColumnRules, ColumnsConfig};
use crate::error::CaptureError;
use crate::message_key::MessageKeyColumns;
use crate::position::StartPosition;
use crate::restart_skip::StartSkip;
use crate::source_tls::SourceTls;
use crate::value_modes::{
    BigIntUnsignedMode, BinaryMode, DecimalMode, GeometryMode, TimePrecisionMode, ValueModes,
};

/// The whole `tributary capture` configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureConfig {
    /// Logical name of the source: the topic prefix and the key of stored positions.
    pub server_name: String,
    /// The MySQL/MariaDB server to read.
    pub source: SourceConfig,
    /// Only databases/tables matching these patterns are captured (all when empty).
    #[serde(default)]
    pub include: Patterns,
    /// Databases/tables matching these patterns are never captured.
    #[serde(default)]
    pub exclude: Patterns,
    /// Key columns of tables, in Debezium's `message.key.columns` syntax
    /// (`db.table:col1,col2;db2.table2:col`, tables as regexes): they key the
    /// tables' events instead of the primary key, or of no key.
    #[serde(default)]
    pub message_key_columns: MessageKeyColumns,
    /// The Kafka cluster that receives change events.
    pub kafka: KafkaConfig,
    /// How change topics are created.
    #[serde(default)]
    pub topics: TopicsConfig,
    /// Whose defaults unset `events` and `values` options take: `tributary`
    /// (the default) or `debezium`.
    #[serde(default)]
    pub compat: Compat,
    /// What capture writes besides each change, under Debezium's property names.
    #[serde(default)]
    pub events: EventsConfig,
    /// How column values are written, under Debezium's property names.
    #[serde(default)]
    pub values: ValuesConfig,
    /// How records are serialised, under the names of Kafka's JsonConverter.
    #[serde(default)]
    pub converter: ConverterConfig,
    /// Debezium's `column.*` properties by name: value columns kept, masked,
    /// hashed, truncated ([`crate::column_rules`]).
    #[serde(default)]
    pub columns: ColumnsConfig,
    /// The initial snapshot of existing rows.
    #[serde(default)]
    pub snapshot: SnapshotConfig,
    /// Delivery guarantee.
    #[serde(default)]
    pub delivery: Delivery,
    /// Minimum interval between position commits (with `exactly_once`, Kafka
    /// transaction commits), in milliseconds; 1000 when not given.
    #[serde(default)]
    commit_interval_ms: Option<u64>,
    /// The name `commit_interval_ms` had before: still read, with a warning at
    /// start ("checkpoint" now means only a RocksDB checkpoint of local tables).
    #[serde(default)]
    checkpoint_interval_ms: Option<u64>,
    /// Seconds capture keeps retrying after an error without storing a position
    /// again before it exits non-zero (so its supervisor restarts it, and says so).
    #[serde(default = "default_recovery_timeout_s")]
    pub recovery_timeout_s: u64,
    /// Megabytes of change events capture may hold waiting for the broker's
    /// acknowledgement (the producer's queue, `queue.buffering.max.kbytes`):
    /// when it is full, reading waits (at most `kafka.stall_timeout_s`).
    #[serde(default = "default_max_pending_mb")]
    pub max_pending_mb: u64,
    /// HTTP endpoint for `/metrics`, `/healthz` and `/readyz`.
    #[serde(default)]
    pub metrics: HttpConfig,
}

/// Which database `source` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// MySQL or MariaDB, read from the binlog.
    #[default]
    Mysql,
    /// PostgreSQL, read over logical replication (`pgoutput`).
    Postgres,
}

impl SourceKind {
    fn default_port(self) -> u16 {
        match self {
            SourceKind::Mysql => 3306,
            SourceKind::Postgres => 5432,
        }
    }
}

/// Connection to the source database. Fields marked *PostgreSQL* apply to
/// `kind: postgres` only, *MySQL* to `kind: mysql` only (the default):
/// [`CaptureConfig::validate`] refuses the other kind's.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `mysql` (MySQL and MariaDB, the default) or `postgres`.
    #[serde(default)]
    pub kind: SourceKind,
    /// Host name or address.
    pub host: String,
    /// TCP port; 3306 for MySQL, 5432 for PostgreSQL when not given.
    #[serde(default)]
    port: Option<u16>,
    /// MySQL: a user with `SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR`
    /// (MariaDB) or `SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT`
    /// (MySQL). PostgreSQL: a role with `REPLICATION` and `SELECT` on the
    /// captured tables (and `CREATE` on the database when capture creates
    /// the publication).
    pub user: String,
    /// Password (use `${ENV_VAR}` to keep it out of the file).
    #[serde(default)]
    pub password: String,
    /// PostgreSQL: the database to capture (a slot belongs to one database).
    #[serde(default)]
    pub database: Option<String>,
    /// MySQL: the server id this replica registers with; must be unique
    /// among the server's replicas.
    #[serde(default)]
    pub server_id: u32,
    /// Where to begin when no position is stored yet (PostgreSQL: only
    /// `latest`, the replication slot's position).
    #[serde(default)]
    pub start: StartPosition,
    /// MySQL: with `start` at a Debezium offset stored inside a transaction
    /// (`import-debezium --offset` writes it): the offset's `event` and `row`,
    /// what of that transaction the connector had sent, skipped once.
    #[serde(default)]
    pub start_skip: Option<StartSkip>,
    /// Seconds to wait for a TCP connection.
    #[serde(default = "default_connect_timeout_s")]
    pub connect_timeout_s: u64,
    /// TLS to the server (see [`SourceTls`]); without it, plain TCP.
    #[serde(default)]
    pub tls: Option<SourceTls>,
    /// Heartbeat interval while idle, in seconds (0 disables): MySQL's server
    /// sends them; with PostgreSQL, capture writes them itself.
    #[serde(default = "default_heartbeat_s")]
    pub heartbeat_s: u64,
    /// MySQL: what a streamed text value that is not valid in its column's
    /// character set does: stop capture (the default), or go out as its raw
    /// bytes. (PostgreSQL converts text to UTF-8 itself and refuses what it
    /// cannot convert.)
    #[serde(default)]
    pub undecodable_text: UndecodableText,
    /// PostgreSQL: the replication slot capture reads and advances
    /// (Debezium's `slot.name`, default `debezium`).
    #[serde(rename = "slot.name", default)]
    slot_name: Option<String>,
    /// PostgreSQL: the slot is dropped when capture stops cleanly (Debezium's
    /// `slot.drop.on.stop`; for tests and one-off runs: WAL is then no
    /// longer kept for capture, and the next start needs a new snapshot).
    #[serde(rename = "slot.drop.on.stop", default)]
    pub slot_drop_on_stop: bool,
    /// PostgreSQL: the publication naming the captured tables (Debezium's
    /// `publication.name`, default `dbz_publication`).
    #[serde(rename = "publication.name", default)]
    publication_name: Option<String>,
    /// PostgreSQL: whether capture creates the publication when it is
    /// missing (Debezium's `publication.autocreate.mode`).
    #[serde(rename = "publication.autocreate.mode", default)]
    pub publication_autocreate_mode: Option<PublicationAutocreate>,
    /// PostgreSQL: a statement run on the source database at every
    /// heartbeat (Debezium's `heartbeat.action.query`), typically an update of
    /// a one-row table in the publication: it gives the slot something to
    /// confirm while the captured tables are idle, so the server can recycle
    /// WAL that other databases write.
    #[serde(rename = "heartbeat.action.query", default)]
    pub heartbeat_action_query: Option<String>,
}

/// `source.publication.autocreate.mode`, as Debezium's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicationAutocreate {
    /// The publication must exist: capture fails at start, naming it, when it does not.
    Disabled,
    /// Created `FOR ALL TABLES` when missing (needs superuser).
    #[default]
    AllTables,
    /// Created for the tables `include`/`exclude` select when missing, and
    /// kept to them at every start (needs ownership of those tables).
    Filtered,
}

/// Debezium's default slot name.
const DEFAULT_SLOT_NAME: &str = "debezium";
/// Debezium's default publication name.
const DEFAULT_PUBLICATION_NAME: &str = "dbz_publication";

impl SourceConfig {
    /// The TCP port, the kind's default when not given.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(self.kind.default_port())
    }

    /// PostgreSQL: the replication slot's name.
    pub fn slot_name(&self) -> &str {
        self.slot_name.as_deref().unwrap_or(DEFAULT_SLOT_NAME)
    }

    /// PostgreSQL: the publication's name.
    pub fn publication_name(&self) -> &str {
        self.publication_name
            .as_deref()
            .unwrap_or(DEFAULT_PUBLICATION_NAME)
    }

    /// Checks what serde cannot: the fields of the kind, and names the
    /// replication protocol takes unquoted.
    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, problem: &str| Err(ConfigError::new(field, problem));
        if self.host.is_empty() {
            return bad("source.host", "must not be empty");
        }
        if let Some(tls) = &self.tls {
            tls.validate("source.tls")?;
        }
        match self.kind {
            SourceKind::Mysql => {
                if self.server_id == 0 {
                    return bad(
                        "source.server_id",
                        "must be > 0 (0 is not a valid replica id)",
                    );
                }
                let postgres_only = [
                    ("database", self.database.is_some()),
                    ("slot.name", self.slot_name.is_some()),
                    ("slot.drop.on.stop", self.slot_drop_on_stop),
                    ("publication.name", self.publication_name.is_some()),
                    (
                        "publication.autocreate.mode",
                        self.publication_autocreate_mode.is_some(),
                    ),
                    (
                        "heartbeat.action.query",
                        self.heartbeat_action_query.is_some(),
                    ),
                ];
                if let Some((field, _)) = postgres_only.iter().find(|(_, set)| *set) {
                    return bad(
                        &format!("source.{field}"),
                        "applies to source.kind: postgres only (a MySQL source captures \
                         the databases include/exclude select)",
                    );
                }
            }
            SourceKind::Postgres => {
                let mysql_only = [
                    ("server_id", self.server_id != 0),
                    ("start_skip", self.start_skip.is_some()),
                    (
                        "undecodable_text",
                        self.undecodable_text != UndecodableText::Stop,
                    ),
                ];
                if let Some((field, _)) = mysql_only.iter().find(|(_, set)| *set) {
                    return bad(
                        &format!("source.{field}"),
                        "applies to source.kind: mysql only",
                    );
                }
                if self.start != StartPosition::Latest {
                    return bad(
                        "source.start",
                        "a PostgreSQL source starts at its replication slot's position: leave it at latest",
                    );
                }
                match self.database.as_deref() {
                    None | Some("") => {
                        return bad(
                            "source.database",
                            "is required with source.kind: postgres (the database whose tables are captured)",
                        );
                    }
                    Some(_) => {}
                }
                check_identifier("source.slot.name", self.slot_name())?;
                check_identifier("source.publication.name", self.publication_name())?;
                if self
                    .heartbeat_action_query
                    .as_deref()
                    .is_some_and(|q| q.trim().is_empty())
                {
                    return bad(
                        "source.heartbeat.action.query",
                        "is empty: remove it or give a statement",
                    );
                }
            }
        }
        Ok(())
    }
}

/// A name capture writes into replication commands and SQL unquoted (what
/// PostgreSQL allows in a slot's name): 1 to 63 lowercase letters, digits
/// and '_', not starting with a digit.
fn check_identifier(field: &str, name: &str) -> Result<(), ConfigError> {
    let ok = (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            field,
            format!(
                "{name:?} must be 1 to 63 lowercase letters, digits and '_', not starting with a digit"
            ),
        ))
    }
}

/// What capture does with text bytes that are not valid in their column's
/// character set (or that the server has no Unicode character for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UndecodableText {
    /// Stop, naming database, table, column and binlog position: nothing wrong
    /// is published, and capture resumes there once the data or config is fixed.
    #[default]
    Stop,
    /// Publish the column as its raw bytes (base64 in JSON), with the record
    /// headers `tributary.undecodable.columns` (the columns, comma-separated) and
    /// `tributary.undecodable.encoding: base64`.
    Base64,
}

/// When capture reads the tables' existing rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// Snapshot when no position is stored, then stream.
    #[default]
    Initial,
    /// Never snapshot: stream from the stored position or `source.start`.
    Never,
    /// Snapshot when no position is stored, then stop.
    InitialOnly,
    /// Like `initial`, and snapshot again when the stored position is no longer in the binlog.
    WhenNeeded,
}

/// The initial snapshot.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotConfig {
    /// When to snapshot.
    #[serde(default)]
    pub mode: SnapshotMode,
    /// Rows read per query (primary-key order).
    #[serde(default = "default_chunk_rows")]
    pub chunk_rows: usize,
    /// `db.table` (PostgreSQL: `schema.table`) whose inserted rows ask for on-demand snapshots while streaming
    /// (`tributary snapshot`); unset, there are none.
    #[serde(default)]
    pub signal_table: Option<String>,
    /// Rows per chunk of an on-demand snapshot, each merged with the binlog between two positions.
    #[serde(default = "default_incremental_chunk_rows")]
    pub incremental_chunk_rows: usize,
    /// Megabytes of rows a chunk (of the initial or an on-demand snapshot) may
    /// hold: a chunk ends at the row that reaches it, whatever its row count,
    /// and the next chunks ask for as many rows as fit.
    #[serde(default = "default_chunk_max_mb")]
    pub chunk_max_mb: u64,
}

impl SnapshotConfig {
    /// `snapshot.signal_table` split into database and table.
    pub fn signal_table_name(&self) -> Option<(String, String)> {
        let (db, table) = self.signal_table.as_deref()?.split_once('.')?;
        Some((db.to_owned(), table.to_owned()))
    }
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            mode: SnapshotMode::default(),
            chunk_rows: default_chunk_rows(),
            signal_table: None,
            incremental_chunk_rows: default_incremental_chunk_rows(),
            chunk_max_mb: default_chunk_max_mb(),
        }
    }
}

fn default_chunk_rows() -> usize {
    10_000
}

fn default_incremental_chunk_rows() -> usize {
    1024
}

fn default_chunk_max_mb() -> u64 {
    64
}

/// Include or exclude patterns (regular expressions matched against the whole name).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Patterns {
    /// Database names.
    #[serde(default)]
    pub databases: Vec<String>,
    /// Table names qualified by database: `db.table`.
    #[serde(default)]
    pub tables: Vec<String>,
}

/// Whose defaults the options left unset take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compat {
    /// Tributary's: what capture has always written (existing topics keep
    /// their bytes, so their keys keep their partitions).
    #[default]
    Tributary,
    /// Debezium's MySQL connector's, for every option of `events` and
    /// `values` that is not set (each can still be set on its own).
    Debezium,
}

/// What capture writes besides each change's record, under the names of
/// Debezium's properties of the same meaning. Unset, an option takes the
/// default of `compat` ([`CaptureConfig::events`] resolves them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsConfig {
    /// A delete is followed by a tombstone (its key, no value), so that
    /// compaction can drop the key. Default true (Debezium's too).
    #[serde(rename = "tombstones.on.delete", default)]
    pub tombstones_on_delete: Option<bool>,
    /// Each event carries its `transaction` block (id, total order, order in
    /// its table), and `<server_name>.transaction` gets a BEGIN and an END
    /// record per transaction (Debezium's transaction metadata topic).
    /// Debezium's default is false (`null` blocks, no topic); unset,
    /// Tributary's writes the blocks but not the topic.
    #[serde(rename = "provide.transaction.metadata", default)]
    pub provide_transaction_metadata: Option<bool>,
    /// DDL statements are recorded (where: `schema.changes.format`). Default
    /// true (Debezium's too).
    #[serde(rename = "include.schema.changes", default)]
    pub include_schema_changes: Option<bool>,
    /// How and where DDL is recorded: `tributary` (the default), each
    /// statement with its position on `<server_name>.schema-history`;
    /// `debezium` (`compat: debezium`), Debezium's schema change topic
    /// `<server_name>`, one record per table a statement changes, with the
    /// table's definition (`tableChanges`).
    #[serde(rename = "schema.changes.format", default)]
    pub schema_changes_format: Option<SchemaChangesFormat>,
    /// `source.connector` of every event, the name of the `Source` schema
    /// and the `connectorName` header: `mysql` (the default: Debezium's MySQL
    /// connector) or `mariadb` (Debezium 3's MariaDB connector).
    #[serde(rename = "source.connector", default)]
    pub source_connector: SourceConnector,
    /// Heartbeats as Debezium writes them, to `<prefix>.<server_name>` with
    /// key `{"serverName"}` and value `{"ts_ms"}` (Debezium's
    /// `topic.heartbeat.prefix`; `compat: debezium` takes its default,
    /// `__debezium-heartbeat`). Unset under Tributary's defaults: heartbeats go
    /// to `<server_name>.heartbeat` as `{ts_ms, position}`.
    #[serde(rename = "topic.heartbeat.prefix", default)]
    pub topic_heartbeat_prefix: Option<String>,
    /// Every change record carries Debezium's context headers
    /// (`__debezium.context.connectorLogicalName`, `taskId`, `connectorName`,
    /// `runId`). Tributary's default is false, Debezium's true.
    #[serde(rename = "extended.headers.enabled", default)]
    pub extended_headers_enabled: Option<bool>,
    /// A binlog rows event capture cannot decode (a value not valid in its
    /// character set, a rows event whose TABLE_MAP was not read): `fail`
    /// (the default, Debezium's too) stops capture naming it; `warn` skips
    /// the event with a WARN log naming it; `skip` skips it with a DEBUG log.
    /// Both count it in `capture_events_skipped_total`. A skipped event's rows
    /// are lost to consumers.
    #[serde(rename = "event.processing.failure.handling.mode", default)]
    pub event_processing_failure_handling_mode: FailureHandling,
    /// Each binlog change carries, in `source.query`, the statement that
    /// made it (Debezium's `include.query`; default false, Debezium's too):
    /// MariaDB's ANNOTATE_ROWS events (`binlog_annotate_row_events=ON`, its
    /// default), MySQL's ROWS_QUERY events (`binlog_rows_query_log_events=ON`).
    /// A MySQL source only; the text may hold values a column rule masks.
    #[serde(rename = "include.query", default)]
    pub include_query: bool,
}

/// `events.event.processing.failure.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureHandling {
    /// Stop capture, naming the event.
    #[default]
    Fail,
    /// Skip the event, logging it at WARN.
    Warn,
    /// Skip the event, logging it at DEBUG (Debezium's deprecated `ignore`
    /// is read as `skip`).
    #[serde(alias = "ignore")]
    Skip,
}

/// How DDL is recorded (`events.schema.changes.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaChangesFormat {
    /// `<server_name>.schema-history`: `{source, position, ts_ms, databaseName, ddl}`.
    Tributary,
    /// Debezium's schema change topic, `<server_name>`.
    Debezium,
}

/// Which of Debezium's connectors events name (`events.source.connector`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceConnector {
    /// `io.debezium.connector.mysql.MySqlConnector`.
    #[default]
    Mysql,
    /// `io.debezium.connector.mariadb.MariaDbConnector`.
    Mariadb,
}

impl SourceConnector {
    /// The name events carry.
    pub fn name(self) -> &'static str {
        match self {
            SourceConnector::Mysql => "mysql",
            SourceConnector::Mariadb => "mariadb",
        }
    }
}

/// [`EventsConfig`] with every option resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Events {
    /// `tombstones.on.delete`.
    pub tombstones_on_delete: bool,
    /// `provide.transaction.metadata`: the events' `transaction` blocks.
    pub provide_transaction_metadata: bool,
    /// `provide.transaction.metadata` set to true: the BEGIN/END topic too.
    pub transaction_topic: bool,
    /// `include.schema.changes`.
    pub include_schema_changes: bool,
    /// `schema.changes.format`.
    pub schema_changes_format: SchemaChangesFormat,
    /// `extended.headers.enabled`.
    pub extended_headers: bool,
    /// `topic.heartbeat.prefix`: heartbeats in Debezium's shape and topic.
    pub heartbeat_prefix: Option<String>,
    /// `source.connector`.
    pub connector: &'static str,
    /// `include.query`.
    pub include_query: bool,
}

/// How column values are written, under Debezium's property names and values
/// (see [`crate::value_modes`]). Unset, a mode takes the default of `compat`
/// ([`CaptureConfig::value_modes`] resolves them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValuesConfig {
    /// DECIMAL/NUMERIC: `string` (Tributary's default), `precise` (Debezium's) or `double`.
    #[serde(rename = "decimal.handling.mode", default)]
    pub decimal_handling_mode: Option<DecimalMode>,
    /// BIGINT UNSIGNED: `number` (Tributary's default), `long` (Debezium's) or `precise`.
    #[serde(rename = "bigint.unsigned.handling.mode", default)]
    pub bigint_unsigned_handling_mode: Option<BigIntUnsignedMode>,
    /// TIME and DATETIME: `adaptive_time_microseconds` (both defaults) or `connect`.
    #[serde(rename = "time.precision.mode", default)]
    pub time_precision_mode: Option<TimePrecisionMode>,
    /// BINARY/VARBINARY/BLOB: `bytes` (both defaults), `base64`, `base64-url-safe` or `hex`.
    #[serde(rename = "binary.handling.mode", default)]
    pub binary_handling_mode: Option<BinaryMode>,
    /// GEOMETRY: `bytes` (Tributary's default: MySQL's internal form) or
    /// `struct` (Debezium's `Geometry`/`Point`). Not a Debezium property:
    /// Debezium always writes structs.
    #[serde(rename = "geometry.handling.mode", default)]
    pub geometry_handling_mode: Option<GeometryMode>,
}

/// How records are serialised: JSON, with or without the Kafka Connect
/// schemas of Kafka's `JsonConverter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConverterConfig {
    /// Keys and values are `{"schema": …, "payload": …}` with Debezium's
    /// Connect schemas (the JsonConverter's `schemas.enable`). Default false
    /// (`compat: debezium`: true, the JsonConverter's default).
    #[serde(rename = "schemas.enable", default)]
    pub schemas_enable: Option<bool>,
    /// A NULL in a column that has a default is written as the default, as
    /// Kafka's `JsonConverter` (3.5+) does by default: a consumer can no longer
    /// tell NULL from the default. Default false (`compat: debezium`: true).
    #[serde(rename = "replace.null.with.default", default)]
    pub replace_null_with_default: Option<bool>,
    /// Doubles in keys, values, schema defaults and key headers: `compact`
    /// (`1e+20`, Tributary's default) or `java` (`1.0E20`, as Java's
    /// `Double.toString` and so Kafka's `JsonConverter` write them;
    /// `compat: debezium`). Not a Kafka property: the same number either way.
    #[serde(rename = "double.format", default)]
    pub double_format: Option<DoubleFormat>,
}

/// Creation of change topics.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicsConfig {
    /// Partitions of each new change topic.
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    /// Extra topic configs (`cleanup.policy=compact` is always set).
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

impl Default for TopicsConfig {
    fn default() -> Self {
        TopicsConfig {
            partitions: default_partitions(),
            config: BTreeMap::new(),
        }
    }
}

/// Position commits without a `commit_interval_ms`.
const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_millis(1000);
fn default_recovery_timeout_s() -> u64 {
    300
}
fn default_max_pending_mb() -> u64 {
    256
}
fn default_connect_timeout_s() -> u64 {
    10
}
fn default_heartbeat_s() -> u64 {
    5
}
fn default_partitions() -> u32 {
    3
}

/// Default port of the HTTP endpoint.
pub const DEFAULT_HTTP_PORT: u16 = 9100;

impl CaptureConfig {
    /// Reads, interpolates, parses and validates a configuration file.
    pub fn load(path: &std::path::Path) -> Result<Self, CaptureError> {
        Ok(tributary_config::load::<Self>(path)?.warn_deprecated())
    }

    /// Parses and validates configuration text.
    pub fn parse(text: &str) -> Result<Self, CaptureError> {
        Ok(tributary_config::parse::<Self>(text)?.warn_deprecated())
    }

    /// Minimum interval between position commits (`commit_interval_ms`).
    pub fn commit_interval(&self) -> Duration {
        self.commit_interval_ms
            .or(self.checkpoint_interval_ms)
            .map_or(DEFAULT_COMMIT_INTERVAL, Duration::from_millis)
    }

    /// The `events` options, unset ones at `compat`'s defaults.
    pub fn events(&self) -> Events {
        let e = &self.events;
        Events {
            tombstones_on_delete: e.tombstones_on_delete.unwrap_or(true),
            provide_transaction_metadata: e
                .provide_transaction_metadata
                .unwrap_or(self.compat == Compat::Tributary),
            transaction_topic: e.provide_transaction_metadata == Some(true),
            include_schema_changes: e.include_schema_changes.unwrap_or(true),
            schema_changes_format: e.schema_changes_format.unwrap_or(match self.compat {
                Compat::Tributary => SchemaChangesFormat::Tributary,
                Compat::Debezium => SchemaChangesFormat::Debezium,
            }),
            extended_headers: e
                .extended_headers_enabled
                .unwrap_or(self.compat == Compat::Debezium),
            heartbeat_prefix: e.topic_heartbeat_prefix.clone().or_else(|| {
                (self.compat == Compat::Debezium).then(|| "__debezium-heartbeat".to_owned())
            }),
            connector: match self.source.kind {
                SourceKind::Mysql => e.source_connector.name(),
                SourceKind::Postgres => tributary_proto::debezium_json::POSTGRES_CONNECTOR,
            },
            include_query: e.include_query,
        }
    }

    /// The `values` modes, unset ones at `compat`'s defaults.
    pub fn value_modes(&self) -> ValueModes {
        let defaults = match self.compat {
            Compat::Tributary => ValueModes::TRIBUTARY,
            Compat::Debezium => ValueModes::DEBEZIUM,
        };
        let v = &self.values;
        ValueModes {
            decimal: v.decimal_handling_mode.unwrap_or(defaults.decimal),
            bigint_unsigned: v
                .bigint_unsigned_handling_mode
                .unwrap_or(defaults.bigint_unsigned),
            time_precision: v.time_precision_mode.unwrap_or(defaults.time_precision),
            binary: v.binary_handling_mode.unwrap_or(defaults.binary),
            geometry: v.geometry_handling_mode.unwrap_or(defaults.geometry),
        }
    }

    /// Whether records carry their Connect schemas (`converter.schemas.enable`,
    /// unset at `compat`'s default).
    pub fn schemas_enabled(&self) -> bool {
        self.converter
            .schemas_enable
            .unwrap_or(self.compat == Compat::Debezium)
    }

    /// Whether NULLs are written as their column's default
    /// (`converter.replace.null.with.default`, unset at `compat`'s default).
    pub fn replaces_null_with_default(&self) -> bool {
        self.converter
            .replace_null_with_default
            .unwrap_or(self.compat == Compat::Debezium)
    }

    /// How doubles are written (`converter.double.format`, unset at
    /// `compat`'s default).
    pub fn double_format(&self) -> DoubleFormat {
        self.converter.double_format.unwrap_or(match self.compat {
            Compat::Tributary => DoubleFormat::Compact,
            Compat::Debezium => DoubleFormat::Java,
        })
    }

    fn warn_deprecated(self) -> Self {
        if self.checkpoint_interval_ms.is_some() {
            warn!(
                "checkpoint_interval_ms is the old name of commit_interval_ms: rename it (it is read as commit_interval_ms)"
            );
        }
        self
    }
}

impl Validate for CaptureConfig {
    /// Checks values serde cannot: names, ranges and patterns.
    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, problem: String| Err(ConfigError::new(field, problem));
        tributary_config::check_name("server_name", &self.server_name)?;
        self.metrics.validate("metrics")?;
        self.source.validate()?;
        self.kafka.validate("kafka")?;
        if self.topics.partitions == 0 {
            return bad("topics.partitions", "must be at least 1".into());
        }
        if self.snapshot.chunk_rows == 0 {
            return bad("snapshot.chunk_rows", "must be at least 1".into());
        }
        if self.snapshot.incremental_chunk_rows == 0 {
            return bad(
                "snapshot.incremental_chunk_rows",
                "must be at least 1".into(),
            );
        }
        if self.snapshot.chunk_max_mb == 0 {
            return bad("snapshot.chunk_max_mb", "must be at least 1".into());
        }
        if self.max_pending_mb == 0 {
            return bad("max_pending_mb", "must be at least 1".into());
        }
        if self.events.include_query && self.source.kind == SourceKind::Postgres {
            return bad(
                "events.include.query",
                "applies to source.kind: mysql only (PostgreSQL's logical decoding does \
                 not carry statements)"
                    .into(),
            );
        }
        if let Some(name) = &self.snapshot.signal_table {
            let parts: Vec<&str> = name.split('.').collect();
            if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
                return bad(
                    "snapshot.signal_table",
                    format!("{name:?} must be `database.table`"),
                );
            }
        }
        if self.source.start_skip.is_some()
            && !matches!(
                self.source.start,
                StartPosition::Gtid(_) | StartPosition::Binlog { .. }
            )
        {
            return bad(
                "source.start_skip",
                "skips events of the transaction `source.start` names: set start to the \
                 offset's {gtid: …} or {binlog: {file, pos}}"
                    .into(),
            );
        }
        if self.snapshot.mode != SnapshotMode::Never && self.source.start != StartPosition::Latest {
            return bad(
                "source.start",
                "applies only with snapshot.mode: never (a snapshot starts streaming at its own position)".into(),
            );
        }
        match (self.commit_interval_ms, self.checkpoint_interval_ms) {
            (Some(_), Some(_)) => {
                return bad(
                    "checkpoint_interval_ms",
                    "is the old name of commit_interval_ms: set only commit_interval_ms".into(),
                );
            }
            (Some(0), None) => return bad("commit_interval_ms", "must be > 0".into()),
            (None, Some(0)) => return bad("checkpoint_interval_ms", "must be > 0".into()),
            _ => {}
        }
        if self.recovery_timeout_s < self.kafka.stall_timeout_s {
            return bad(
                "recovery_timeout_s",
                format!(
                    "{} is shorter than kafka.stall_timeout_s ({}): one stalled wait would stop capture",
                    self.recovery_timeout_s, self.kafka.stall_timeout_s
                ),
            );
        }
        for (field, patterns) in [
            ("include.databases", &self.include.databases),
            ("include.tables", &self.include.tables),
            ("exclude.databases", &self.exclude.databases),
            ("exclude.tables", &self.exclude.tables),
        ] {
            for (i, p) in patterns.iter().enumerate() {
                if let Err(e) = Regex::new(p) {
                    return bad(
                        &format!("{field}[{i}]"),
                        format!("invalid pattern {p:?}: {e}"),
                    );
                }
            }
        }
        ColumnRules::parse(&self.columns)?;
        if self.schemas_enabled()
            && self.value_modes().bigint_unsigned == BigIntUnsignedMode::Number
        {
            return bad(
                "values.bigint.unsigned.handling.mode",
                "`number` has no Kafka Connect type (a BIGINT UNSIGNED can exceed int64) and \
                 converter.schemas.enable is on: choose long or precise"
                    .into(),
            );
        }
        for key in ["enable.idempotence", "acks"] {
            if self.kafka.producer.contains_key(key) {
                return bad(
                    &format!("kafka.producer.{key}"),
                    "is set by Tributary and cannot be overridden".into(),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "
server_name: shop
source: { host: 127.0.0.1, port: 3307, user: tributary, password: x, server_id: 7 }
include: { databases: [shop] }
kafka: { brokers: '127.0.0.1:19092', producer: { linger.ms: '5' } }
";

    #[test]
    fn parses_a_good_file() {
        let c = CaptureConfig::parse(GOOD).unwrap();
        assert_eq!(c.server_name, "shop");
        assert_eq!(c.source.port(), 3307);
        assert_eq!(c.topics.partitions, 3);
        assert_eq!(c.kafka.producer["linger.ms"], "5");
        assert_eq!(c.source.start, StartPosition::Latest);
    }

    #[test]
    fn event_options_have_debeziums_names() {
        let c = CaptureConfig::parse(GOOD).unwrap();
        assert_eq!(
            c.events(),
            Events {
                tombstones_on_delete: true,
                provide_transaction_metadata: true,
                transaction_topic: false,
                include_schema_changes: true,
                schema_changes_format: SchemaChangesFormat::Tributary,
                extended_headers: false,
                heartbeat_prefix: None,
                connector: "mysql",
                include_query: false,
            }
        );
        let text = format!(
            "{GOOD}events: {{ tombstones.on.delete: false, provide.transaction.metadata: false, include.schema.changes: false, include.query: true }}\n"
        );
        let c = CaptureConfig::parse(&text).unwrap();
        assert!(c.events().include_query);
        assert!(!c.events().tombstones_on_delete);
        assert!(!c.events().provide_transaction_metadata);
        assert!(!c.events().include_schema_changes);
        assert_eq!(
            field_of(&format!(
                "{GOOD}events: {{ decimal.handling.mode: precise }}\n"
            )),
            "events.decimal.handling.mode"
        );
    }

    #[test]
    fn value_modes_have_debeziums_names_and_values() {
        let c = CaptureConfig::parse(GOOD).unwrap();
        assert_eq!(c.value_modes(), ValueModes::TRIBUTARY);
        let text = format!(
            "{GOOD}values: {{ decimal.handling.mode: double, bigint.unsigned.handling.mode: precise, \
             time.precision.mode: connect, binary.handling.mode: base64-url-safe, \
             geometry.handling.mode: struct }}\n"
        );
        let c = CaptureConfig::parse(&text).unwrap();
        assert_eq!(
            c.value_modes(),
            ValueModes {
                decimal: DecimalMode::Double,
                bigint_unsigned: BigIntUnsignedMode::Precise,
                time_precision: TimePrecisionMode::Connect,
                binary: BinaryMode::Base64UrlSafe,
                geometry: GeometryMode::Struct,
            }
        );
        assert_eq!(
            field_of(&format!(
                "{GOOD}values: {{ time.precision.mode: isostring }}\n"
            )),
            "values.time.precision.mode"
        );
    }

    #[test]
    fn compat_debezium_takes_debeziums_defaults_for_what_is_unset() {
        let c = CaptureConfig::parse(&format!("{GOOD}compat: debezium\n")).unwrap();
        assert_eq!(c.value_modes(), ValueModes::DEBEZIUM);
        assert!(!c.events().provide_transaction_metadata);
        assert!(c.events().tombstones_on_delete);
        assert!(c.events().extended_headers);
        assert_eq!(
            c.events().heartbeat_prefix.as_deref(),
            Some("__debezium-heartbeat")
        );
        let c = CaptureConfig::parse(&format!(
            "{GOOD}compat: debezium\nvalues: {{ decimal.handling.mode: string }}\n\
             events: {{ provide.transaction.metadata: true }}\n"
        ))
        .unwrap();
        assert_eq!(c.value_modes().decimal, DecimalMode::String);
        assert_eq!(c.value_modes().bigint_unsigned, BigIntUnsignedMode::Long);
        assert!(c.events().provide_transaction_metadata);
        assert_eq!(field_of(&format!("{GOOD}compat: flink\n")), "compat");
        assert!(c.schemas_enabled(), "the JsonConverter's default");
        assert!(
            c.replaces_null_with_default(),
            "the JsonConverter's default"
        );
        assert_eq!(
            c.events().schema_changes_format,
            SchemaChangesFormat::Debezium
        );
        assert!(
            !CaptureConfig::parse(GOOD)
                .unwrap()
                .replaces_null_with_default()
        );
        let c = CaptureConfig::parse(&format!(
            "{GOOD}compat: debezium\nconverter: {{ replace.null.with.default: false }}\n"
        ))
        .unwrap();
        assert!(!c.replaces_null_with_default());
        assert_eq!(c.double_format(), DoubleFormat::Java, "compat debezium");
        let default = CaptureConfig::parse(GOOD).unwrap();
        assert_eq!(default.double_format(), DoubleFormat::Compact);
        let c = CaptureConfig::parse(&format!(
            "{GOOD}compat: debezium\nconverter: {{ double.format: compact }}\n"
        ))
        .unwrap();
        assert_eq!(c.double_format(), DoubleFormat::Compact);
        assert_eq!(
            field_of(&format!(
                "{GOOD}converter: {{ double.format: scientific }}\n"
            )),
            "converter.double.format"
        );
    }

    #[test]
    fn schemas_need_a_bigint_mode_with_a_connect_type() {
        let c = CaptureConfig::parse(GOOD).unwrap();
        assert!(!c.schemas_enabled());
        let text = format!("{GOOD}converter: {{ schemas.enable: true }}\n");
        assert_eq!(field_of(&text), "values.bigint.unsigned.handling.mode");
        let c = CaptureConfig::parse(&format!(
            "{text}values: {{ bigint.unsigned.handling.mode: precise }}\n"
        ))
        .unwrap();
        assert!(c.schemas_enabled());
        let c = CaptureConfig::parse(&format!(
            "{GOOD}compat: debezium\nconverter: {{ schemas.enable: false }}\n"
        ))
        .unwrap();
        assert!(!c.schemas_enabled());
    }

    #[test]
    fn the_commit_interval_is_read_under_its_old_name_too() {
        let interval = |text: &str| CaptureConfig::parse(text).unwrap().commit_interval();
        assert_eq!(interval(GOOD), Duration::from_secs(1));
        let new = format!("{GOOD}commit_interval_ms: 250\n");
        assert_eq!(interval(&new), Duration::from_millis(250));
        let old = format!("{GOOD}checkpoint_interval_ms: 300\n");
        assert_eq!(interval(&old), Duration::from_millis(300));
        assert_eq!(
            field_of(&format!("{new}checkpoint_interval_ms: 300\n")),
            "checkpoint_interval_ms",
            "both names at once"
        );
        assert_eq!(
            field_of(&format!("{GOOD}commit_interval_ms: 0\n")),
            "commit_interval_ms"
        );
    }

    fn field_of(text: &str) -> String {
        match CaptureConfig::parse(text).unwrap_err() {
            CaptureError::Config { field, .. } => field,
            other => panic!("expected a config error, got {other}"),
        }
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            field_of(&GOOD.replace("port: 3307", "port: lots")),
            "source.port"
        );
        assert_eq!(
            field_of(&GOOD.replace("server_id: 7", "server_id: 7, colour: red")),
            "source.colour"
        );
        assert_eq!(
            field_of(&GOOD.replace("server_id: 7", "server_id: 0")),
            "source.server_id"
        );
        assert_eq!(
            field_of(&GOOD.replace("[shop]", "['(']")),
            "include.databases[0]"
        );
        assert_eq!(
            field_of(&GOOD.replace("server_name: shop", "server_name: 'a b'")),
            "server_name"
        );
        assert_eq!(
            field_of(&GOOD.replace("linger.ms", "acks")),
            "kafka.producer.acks"
        );
        assert_eq!(
            field_of(&format!("{GOOD}snapshot: {{ signal_table: signals }}")),
            "snapshot.signal_table"
        );
        assert_eq!(
            field_of(&format!("{GOOD}snapshot: {{ chunk_max_mb: 0 }}")),
            "snapshot.chunk_max_mb"
        );
        assert_eq!(
            field_of(&format!("{GOOD}max_pending_mb: 0")),
            "max_pending_mb"
        );
        assert_eq!(
            field_of(&format!("{GOOD}metrics: {{ stall_after_s: 3 }}")),
            "metrics.stall_after_s"
        );
    }

    const POSTGRES: &str = "
server_name: shop
source: { kind: postgres, host: 127.0.0.1, user: tributary, password: x, database: shop }
kafka: { brokers: '127.0.0.1:19092' }
";

    #[test]
    fn a_postgres_source_takes_debeziums_names_and_defaults() {
        let c = CaptureConfig::parse(POSTGRES).unwrap();
        assert_eq!(c.source.kind, SourceKind::Postgres);
        assert_eq!(c.source.port(), 5432);
        assert_eq!(c.source.slot_name(), "debezium");
        assert_eq!(c.source.publication_name(), "dbz_publication");
        assert_eq!(c.source.publication_autocreate_mode, None);
        assert!(!c.source.slot_drop_on_stop);
        let c = CaptureConfig::parse(&POSTGRES.replace(
            "database: shop",
            "database: shop, port: 5433, slot.name: shop_slot, publication.name: shop_pub, \
             publication.autocreate.mode: filtered, slot.drop.on.stop: true, \
             heartbeat.action.query: 'UPDATE beat SET ts = now()'",
        ))
        .unwrap();
        assert_eq!(c.source.port(), 5433);
        assert_eq!(c.source.slot_name(), "shop_slot");
        assert_eq!(c.source.publication_name(), "shop_pub");
        assert_eq!(
            c.source.publication_autocreate_mode,
            Some(PublicationAutocreate::Filtered)
        );
        assert!(c.source.slot_drop_on_stop);
        assert_eq!(
            CaptureConfig::parse(GOOD).unwrap().source.kind,
            SourceKind::Mysql
        );
    }

    #[test]
    fn each_kind_refuses_the_other_kinds_fields() {
        let pg =
            |extra: &str| POSTGRES.replace("database: shop", &format!("database: shop, {extra}"));
        assert_eq!(field_of(&pg("server_id: 3")), "source.server_id");
        assert_eq!(
            field_of(&pg("undecodable_text: base64")),
            "source.undecodable_text"
        );
        assert_eq!(field_of(&pg("start: earliest")), "source.start");
        assert_eq!(field_of(&pg("slot.name: Shop")), "source.slot.name");
        assert_eq!(field_of(&pg("slot.name: 1shop")), "source.slot.name");
        assert_eq!(
            field_of(&pg("publication.name: 'a;b'")),
            "source.publication.name"
        );
        assert_eq!(
            field_of(&pg("publication.autocreate.mode: some")),
            "source.publication.autocreate.mode"
        );
        assert_eq!(
            field_of(&pg("heartbeat.action.query: ' '")),
            "source.heartbeat.action.query"
        );
        assert_eq!(
            field_of(&POSTGRES.replace(", database: shop", "")),
            "source.database"
        );
        assert_eq!(
            field_of(&format!("{POSTGRES}events: {{ include.query: true }}\n")),
            "events.include.query"
        );
        let my = |extra: &str| GOOD.replace("server_id: 7", &format!("server_id: 7, {extra}"));
        assert_eq!(field_of(&my("database: shop")), "source.database");
        assert_eq!(field_of(&my("slot.name: s")), "source.slot.name");
        assert_eq!(
            field_of(&my("slot.drop.on.stop: true")),
            "source.slot.drop.on.stop"
        );
        assert_eq!(
            field_of(&GOOD.replace(", server_id: 7", "")),
            "source.server_id"
        );
        assert_eq!(field_of(&my("kind: oracle")), "source.kind");
    }

    #[test]
    fn a_start_skip_needs_a_start_at_a_transaction() {
        let with = |start: &str| {
            let source =
                format!("server_id: 7, start: {start}, start_skip: {{ events: 2, rows: 1 }}");
            format!(
                "{}snapshot: {{ mode: never }}\n",
                GOOD.replace("server_id: 7", &source)
            )
        };
        assert_eq!(field_of(&with("latest")), "source.start_skip");
        let c = CaptureConfig::parse(&with("{ gtid: 0-1-9 }")).unwrap();
        assert_eq!(c.source.start_skip, Some(StartSkip { events: 2, rows: 1 }));
    }
}
