//! `tributary import-debezium`: a Debezium MySQL (or MariaDB) connector's
//! Kafka Connect configuration, as JSON (`{"name", "config": {…}}` or the bare
//! map) or `.properties`, turned into the equivalent capture configuration.
//!
//! Every property is accounted for: mapped onto a capture setting, not
//! needed (Tributary does the same without it), or not reproduced, with the
//! reason. Debezium defaults that Tributary does not reproduce are listed too,
//! set or not, since a consumer built on them would see the difference. The
//! password is never copied: the output reads it from an environment variable.
//! A Debezium offset (`{"file", "pos", "gtids", …}` from the Connect offsets
//! topic) becomes the start position, so capture continues where the
//! connector stopped instead of taking a snapshot.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde_json::Value as Json;
use tributary_capture::CaptureConfig;
use tributary_capture::column_rules::ColumnRules;

/// The environment variable the imported configuration reads the password from.
pub(crate) const PASSWORD_VARIABLE: &str = "TRIBUTARY_MYSQL_PASSWORD";
/// The variables the salts of `column.mask.hash` properties are read from (`_1`, `_2`, …).
const SALT_VARIABLE: &str = "TRIBUTARY_COLUMN_SALT";

/// What became of a connector configuration.
#[derive(Debug)]
pub(crate) struct Imported {
    /// The capture configuration (YAML, checked by the capture config's own
    /// validation), with the notes below as comments at its end.
    pub(crate) yaml: String,
    /// Properties with no counterpart needed, and why.
    pub(crate) not_needed: Vec<Note>,
    /// Properties (or Debezium defaults) whose behaviour Tributary does not
    /// reproduce, and how its output differs.
    pub(crate) not_reproduced: Vec<Note>,
}

/// One property and what is said of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Note {
    /// The property, with its value where it matters (`decimal.handling.mode=precise`).
    pub(crate) property: String,
    /// Why.
    pub(crate) reason: String,
}

/// Reads a connector configuration: JSON (`{"name", "config"}` or the bare
/// map; values may be strings, numbers or booleans) or Java properties.
pub(crate) fn parse_connector(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    if text.trim_start().starts_with('{') {
        let json: Json =
            serde_json::from_str(text).context("the connector config is not valid JSON")?;
        let mut map = match json {
            Json::Object(mut top) => match top.remove("config") {
                Some(Json::Object(config)) => {
                    let mut config = config;
                    if let Some(name) = top.remove("name") {
                        config.entry("name").or_insert(name);
                    }
                    config
                }
                Some(_) => bail!("`config` is not a JSON object"),
                None => top,
            },
            _ => bail!("the connector config is not a JSON object"),
        };
        map.iter_mut()
            .map(|(key, value)| {
                let text = match std::mem::take(value) {
                    Json::String(s) => s,
                    scalar @ (Json::Number(_) | Json::Bool(_)) => scalar.to_string(),
                    other => bail!("`{key}` is {other}, not a string, number or boolean"),
                };
                Ok((key.clone(), text))
            })
            .collect()
    } else {
        let map = java_properties::read(text.as_bytes())
            .context("the connector config is neither JSON nor a valid .properties file")?;
        Ok(map.into_iter().collect())
    }
}

/// A Debezium MySQL offset, as stored in the Connect offsets topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DebeziumOffset {
    /// The binlog file.
    pub(crate) file: String,
    /// The position in it.
    pub(crate) pos: u64,
    /// The GTID set of completed transactions, when the server has GTIDs.
    pub(crate) gtids: Option<String>,
    /// Events of the transaction at `pos` already sent (0 at a transaction boundary).
    pub(crate) event: u64,
    /// Rows of the next event already sent.
    pub(crate) row: u32,
}

impl DebeziumOffset {
    /// Reads an offset value (`{"ts_sec", "file", "pos", "gtids", "row", "event", "server_id"}`).
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let json: Json = serde_json::from_str(text).context("the offset is not valid JSON")?;
        let file = json["file"]
            .as_str()
            .context("the offset has no `file` (a Debezium MySQL offset has file, pos and, with GTIDs, gtids)")?;
        let pos = json["pos"]
            .as_u64()
            .context("the offset has no numeric `pos`")?;
        Ok(DebeziumOffset {
            file: file.to_owned(),
            pos,
            gtids: json["gtids"]
                .as_str()
                .filter(|g| !g.is_empty())
                .map(str::to_owned),
            event: json["event"].as_u64().unwrap_or(0),
            row: json["row"]
                .as_u64()
                .map_or(Ok(0), u32::try_from)
                .context("the offset's `row` is out of range")?,
        })
    }
}

/// The capture configuration equivalent to `props`; `brokers` is the Kafka
/// cluster when the connector config does not name it (a connector's cluster
/// is the Connect worker's); `offset` is where the connector stopped.
pub(crate) fn import(
    props: &BTreeMap<String, String>,
    brokers: Option<&str>,
    offset: Option<&DebeziumOffset>,
) -> anyhow::Result<Imported> {
    let mut out = Builder::default();
    check_class(props)?;
    for (key, value) in props {
        out.property(key, value)?;
    }
    out.defaults(props);
    out.brokers = brokers.map(str::to_owned).or(out.brokers.take());
    if let Some(offset) = offset {
        out.start_at(offset);
    }
    out.finish()
}

fn check_class(props: &BTreeMap<String, String>) -> anyhow::Result<()> {
    match props.get("connector.class").map(String::as_str) {
        Some(
            "io.debezium.connector.mysql.MySqlConnector"
            | "io.debezium.connector.mariadb.MariaDbConnector"
            | "MySqlConnector"
            | "MariaDbConnector",
        ) => Ok(()),
        Some(other) => bail!(
            "connector.class is {other}: only Debezium's MySQL and MariaDB connectors can be imported"
        ),
        None => bail!("connector.class is missing: is this a Kafka Connect connector config?"),
    }
}

/// The capture configuration as it is built.
#[derive(Default)]
struct Builder {
    name: Option<String>,
    server_name: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    user: Option<String>,
    password_given: bool,
    server_id: Option<u32>,
    connect_timeout_s: Option<u64>,
    heartbeat_s: Option<u64>,
    include_databases: Vec<String>,
    include_tables: Vec<String>,
    exclude_databases: Vec<String>,
    exclude_tables: Vec<String>,
    message_key_columns: Option<String>,
    snapshot_mode: Option<&'static str>,
    start: Option<String>,
    /// `source.start_skip`: the offset's `event` and `row`.
    start_skip: Option<(u64, u32)>,
    signal_table: Option<String>,
    incremental_chunk_rows: Option<u64>,
    brokers: Option<String>,
    max_pending_mb: Option<u64>,
    /// `events:`, Debezium's names and values (`tombstones.on.delete`, …).
    events: BTreeMap<&'static str, bool>,
    /// `values:`, Debezium's names and values (`decimal.handling.mode`, …).
    values: BTreeMap<&'static str, String>,
    /// `converter.schemas.enable`, and whether the connector config set it.
    schemas_enable: (bool, bool),
    /// `converter.replace.null.with.default`, and whether the connector config set it.
    replace_null_with_default: (bool, bool),
    /// `events.topic.heartbeat.prefix`.
    heartbeat_prefix: Option<String>,
    /// `events.event.processing.failure.handling.mode`.
    failure_handling: Option<&'static str>,
    /// `source.tls.verify`, from `database.ssl.mode`.
    tls_verify: Option<&'static str>,
    /// Debezium's MariaDB connector: events say `source.connector: mariadb`.
    mariadb: bool,
    /// `columns:`, Debezium's `column.*` properties; a hash's salt is an
    /// environment variable (`TRIBUTARY_COLUMN_SALT_<n>`), never copied.
    columns: BTreeMap<String, String>,
    /// Salts taken out of hash properties, by variable: the property they came from.
    salts: Vec<String>,
    not_needed: Vec<Note>,
    not_reproduced: Vec<Note>,
}

/// A comma-separated list of regular expressions, as Debezium's list properties hold them.
fn patterns(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> anyhow::Result<T> {
    value
        .trim()
        .parse()
        .ok()
        .with_context(|| format!("`{key}` is {value:?}, not a number"))
}

/// Debezium's value converter properties, which `values:` takes by name.
const VALUE_MODES: [&str; 4] = [
    "decimal.handling.mode",
    "bigint.unsigned.handling.mode",
    "time.precision.mode",
    "binary.handling.mode",
];

/// Where Tributary's schema change topic differs from Debezium's.
const SCHEMA_CHANGES: &str = "Debezium's schema change topic is written (events.schema.changes.format: \
     debezium), its tableChanges read from information_schema when capture reads each statement: a \
     capture catching up across several ALTERs of one table describes each with the newest \
     definition, and a snapshot records the captured tables only (Debezium: every table of the \
     captured databases)";

impl Builder {
    fn note_not_needed(&mut self, property: &str, reason: &str) {
        self.not_needed.push(Note {
            property: property.to_owned(),
            reason: reason.to_owned(),
        });
    }

    fn note_not_reproduced(&mut self, property: String, reason: &str) {
        self.not_reproduced.push(Note {
            property,
            reason: reason.to_owned(),
        });
    }

    /// Maps, or notes, one property.
    fn property(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        match key {
            "name" => self.name = Some(value.to_owned()),
            "connector.class" => self.mariadb = value.ends_with("MariaDbConnector"),
            "tasks.max" => {}
            "topic.prefix" | "database.server.name" => self.server_name = Some(value.to_owned()),
            "database.hostname" => self.host = Some(value.to_owned()),
            "database.port" => self.port = Some(number(key, value)?),
            "database.user" => self.user = Some(value.to_owned()),
            "database.password" => self.password_given = true,
            "database.server.id" => self.server_id = Some(number(key, value)?),
            "connect.timeout.ms" => {
                let ms: u64 = number(key, value)?;
                self.connect_timeout_s = Some(ms.div_ceil(1000).max(1));
            }
            "heartbeat.interval.ms" => {
                let ms: u64 = number(key, value)?;
                self.heartbeat_s = Some(ms.div_ceil(1000));
            }
            "topic.heartbeat.prefix" => self.heartbeat_prefix = Some(value.to_owned()),
            "database.include.list" | "database.whitelist" => {
                self.include_databases = patterns(value)
            }
            "database.exclude.list" | "database.blacklist" => {
                self.exclude_databases = patterns(value)
            }
            "table.include.list" | "table.whitelist" => self.include_tables = patterns(value),
            "table.exclude.list" | "table.blacklist" => self.exclude_tables = patterns(value),
            "message.key.columns" => self.message_key_columns = Some(value.to_owned()),
            "snapshot.mode" => self.snapshot_mode(value)?,
            "signal.data.collection" => self.signal_table = Some(value.to_owned()),
            "incremental.snapshot.chunk.size" => {
                self.incremental_chunk_rows = Some(number(key, value)?)
            }
            "max.queue.size.in.bytes" => {
                let bytes: u64 = number(key, value)?;
                if bytes > 0 {
                    self.max_pending_mb = Some(bytes.div_ceil(1 << 20).max(1));
                }
            }
            "tombstones.on.delete"
            | "provide.transaction.metadata"
            | "include.schema.changes"
            | "extended.headers.enabled"
            | "include.query" => self.event_option(key, value)?,
            "database.ssl.mode" => self.ssl_mode(value)?,
            "event.processing.failure.handling.mode" => {
                self.failure_handling = Some(match value.trim() {
                    "fail" => "fail",
                    "warn" => "warn",
                    "skip" | "ignore" => "skip",
                    other => bail!("`{key}` is {other:?}, not fail, warn, skip or ignore"),
                });
            }
            k if k.starts_with("column.") => self.column_rule(key, value),
            "decimal.handling.mode"
            | "bigint.unsigned.handling.mode"
            | "time.precision.mode"
            | "binary.handling.mode" => self.value_mode(key, value)?,
            "schema.history.internal.kafka.bootstrap.servers"
            | "database.history.kafka.bootstrap.servers" => {
                self.brokers = Some(value.to_owned());
                self.note_not_needed(
                    key,
                    "taken as kafka.brokers; Tributary keeps no separate schema history (row \
                     events take their columns from binlog TABLE_MAP events; the schema change \
                     topic is read back to replay DDL)",
                );
            }
            _ => self.other(key, value)?,
        }
        Ok(())
    }

    /// One of Debezium's options that `events:` takes under its own name.
    fn event_option(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let on = match value.trim() {
            "true" => true,
            "false" => false,
            other => bail!("`{key}` is {other:?}, not true or false"),
        };
        let name = [
            "tombstones.on.delete",
            "provide.transaction.metadata",
            "include.schema.changes",
            "extended.headers.enabled",
            "include.query",
        ]
        .into_iter()
        .find(|name| *name == key)
        .expect("called for these names");
        self.events.insert(name, on);
        Ok(())
    }

    /// One of Debezium's value converter modes, which `values:` takes under
    /// its own name; a mode Tributary does not have is noted.
    fn value_mode(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let value = value.trim();
        let supported: &[&str] = match key {
            "decimal.handling.mode" => &["precise", "string", "double"],
            "bigint.unsigned.handling.mode" => &["long", "precise"],
            "time.precision.mode" => &["adaptive_time_microseconds", "connect"],
            _ => &["bytes", "base64", "base64-url-safe", "hex"],
        };
        if supported.contains(&value) {
            let name = VALUE_MODES
                .into_iter()
                .find(|name| *name == key)
                .expect("called for these names");
            self.values.insert(name, value.to_owned());
        } else {
            self.note_not_reproduced(
                format!("{key}={value}"),
                &format!(
                    "not a mode Tributary has (it has {}): Debezium's default is written",
                    supported.join(", ")
                ),
            );
        }
        Ok(())
    }

    /// One of Debezium's `column.*` properties, which `columns:` takes under
    /// its own name; one Tributary does not have is noted.
    fn column_rule(&mut self, key: &str, value: &str) {
        let checked = ColumnRules::parse(&BTreeMap::from([(key.to_owned(), value.to_owned())]));
        if let Err(e) = checked {
            let named = match key.split_once(".with.salt.") {
                Some((hash, _)) => format!("{hash}.with.salt.<not shown>={value}"),
                None => shown(key, value),
            };
            self.note_not_reproduced(named, &e.problem);
            return;
        }
        let key = match key.split_once(".with.salt.") {
            Some((hash, _)) => {
                self.salts.push(hash.to_owned());
                format!("{hash}.with.salt.${{{SALT_VARIABLE}_{}}}", self.salts.len())
            }
            None => key.to_owned(),
        };
        self.columns.insert(key, value.to_owned());
    }

    fn snapshot_mode(&mut self, mode: &str) -> anyhow::Result<()> {
        let (ours, note) = match mode {
            "initial" => ("initial", None),
            "initial_only" => ("initial_only", None),
            "when_needed" => ("when_needed", None),
            // Debezium's `never` reads the binlog from its start; `no_data`
            // (formerly `schema_only`) from now.
            "never" => {
                self.start = Some("earliest".into());
                ("never", None)
            }
            "no_data" | "schema_only" => ("never", None),
            "always" => (
                "initial",
                Some(
                    "Tributary snapshots only without a stored position (initial), not at every start",
                ),
            ),
            "recovery" | "schema_only_recovery" => (
                "initial",
                Some(
                    "there is no separate schema history to recover: Tributary rebuilds its \
                     tables from the schema change topic at every start",
                ),
            ),
            "configuration_based" | "custom" => (
                "initial",
                Some("snapshot modes built from other properties or plugins are not supported"),
            ),
            other => bail!("snapshot.mode is {other:?}, which Debezium does not define"),
        };
        self.snapshot_mode = Some(ours);
        if let Some(note) = note {
            self.note_not_reproduced(format!("snapshot.mode={mode}"), note);
        }
        Ok(())
    }

    /// `database.ssl.mode`: TLS to the database, as `source.tls.verify`.
    fn ssl_mode(&mut self, mode: &str) -> anyhow::Result<()> {
        self.tls_verify = match mode.trim() {
            "disabled" => None,
            "preferred" => {
                self.note_not_reproduced(
                    format!("database.ssl.mode={mode}"),
                    "capture does not fall back between TLS and plain text: without source.tls it \
                     connects in plain text; add source.tls (verify: none is what preferred checks) \
                     if the server offers TLS",
                );
                None
            }
            "required" => Some("none"),
            "verify_ca" => {
                self.note_not_reproduced(
                    format!("database.ssl.mode={mode}"),
                    "the chain without the name is not offered (the replication clients refuse a \
                     name mismatch): verify: full is written, checking the name too; set \
                     source.tls.server_name to a name the server's certificate carries",
                );
                Some("full")
            }
            "verify_identity" => Some("full"),
            other => bail!(
                "`database.ssl.mode` is {other:?}, not disabled, preferred, required, verify_ca or verify_identity"
            ),
        };
        Ok(())
    }

    /// Properties with no mapping: not needed, or not reproduced.
    fn other(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let with_value = shown(key, value);
        let not_reproduced = |reason: &str| Some((true, reason.to_owned()));
        let not_needed = |reason: &str| Some((false, reason.to_owned()));
        let verdict = match (key, value) {
            ("snapshot.locking.mode", "minimal" | "none") => not_needed(
                "MariaDB snapshots take no lock; on MySQL a global read lock is held only while \
                 the snapshot's transaction starts (Debezium's `minimal`)",
            ),
            ("signal.enabled.channels", "source") => None,
            ("skipped.operations", "t" | "none") => None,
            ("table.ignore.builtin", "true") => None,
            ("snapshot.fetch.size", _) => not_needed(
                "snapshots read in key-ordered chunks of snapshot.chunk_rows rows and \
                 snapshot.chunk_max_mb, each streamed from the server",
            ),
            (
                "max.batch.size"
                | "max.queue.size"
                | "poll.interval.ms"
                | "binlog.buffer.size"
                | "snapshot.delay.ms"
                | "streaming.delay.ms"
                | "snapshot.max.threads"
                | "min.row.count.to.stream.results"
                | "topic.cache.size"
                | "statistics.metrics.enabled"
                | "custom.metric.tags"
                | "connect.keep.alive"
                | "connect.keep.alive.interval.ms"
                | "database.query.timeout.ms"
                | "errors.max.retries"
                | "database.jdbc.driver"
                | "database.protocol"
                | "enable.time.adjuster"
                | "inconsistent.schema.handling.mode"
                | "ddl.parser.type",
                _,
            ) => not_needed(
                "a Debezium or JDBC tuning knob: Tributary's queues are bounded by max_pending_mb, \
                 and it reads DDL with its own parser",
            ),
            ("schema.history.internal.store.only.captured.tables.ddl", "true") => not_reproduced(
                "the schema change topic describes every table of the captured databases \
                 (Debezium's default, false)",
            ),
            (k, _)
                if k.starts_with("schema.history.internal.")
                    || k.starts_with("database.history.") =>
            {
                not_needed(
                    "Tributary keeps no separate schema history: it rebuilds its tables from \
                     the schema change topic",
                )
            }
            (k, _) if k.starts_with("errors.") => {
                not_needed("Kafka Connect's error handling: capture stops on an error, naming it")
            }
            (k, _)
                if k.starts_with("key.converter")
                    || k.starts_with("value.converter")
                    || k.starts_with("header.converter") =>
            {
                None // judged with the defaults
            }
            (k, _) if k.starts_with("transforms") || k.starts_with("predicates") => {
                not_reproduced("Kafka Connect's single message transforms do not run in Tributary")
            }
            (k, _) if k.starts_with("topic.") => {
                not_reproduced("topics are named <server_name>.<db>.<table>")
            }
            (k, _) if k.starts_with("gtid.") => {
                not_reproduced("transactions of every GTID source are captured")
            }
            (k, _) if k.starts_with("database.ssl.") => not_reproduced(
                "Java key stores are not read: export them to PEM (keytool -exportcert -rfc for the \
                 trust store's CA, openssl pkcs12 -nodes for the key store) and set source.tls's \
                 ca_file, cert_file and key_file",
            ),
            _ => not_reproduced("not supported"),
        };
        match verdict {
            Some((true, reason)) => self.note_not_reproduced(with_value, &reason),
            Some((false, reason)) => self.note_not_needed(key, &reason),
            None => {}
        }
        Ok(())
    }

    /// Debezium's defaults whose output Tributary does not reproduce, when
    /// the connector left them unset.
    fn defaults(&mut self, props: &BTreeMap<String, String>) {
        let unset = |key: &str| !props.contains_key(key);
        if self.events.get("include.schema.changes") != Some(&false) {
            self.note_not_reproduced(
                "include.schema.changes=true (Debezium's default)".into(),
                SCHEMA_CHANGES,
            );
        }
        for side in ["key", "value"] {
            let key = format!("{side}.converter");
            if let Some(class) = props.get(&key).filter(|c| !c.ends_with("JsonConverter")) {
                self.note_not_reproduced(
                    format!("{key}={class}"),
                    "Tributary writes JSON, as Kafka's JsonConverter does",
                );
            }
        }
        let schemas = |side: &str| {
            props
                .get(&format!("{side}.converter.schemas.enable"))
                .map(|v| v.trim() != "false")
        };
        let (key_schemas, value_schemas) = (schemas("key"), schemas("value"));
        // Unset, the JsonConverter's default (true), unless the Connect worker's config says otherwise.
        self.schemas_enable = (value_schemas.unwrap_or(true), value_schemas.is_some());
        let replace = props
            .get("value.converter.replace.null.with.default")
            .map(|v| v.trim() != "false");
        self.replace_null_with_default = (replace.unwrap_or(true), replace.is_some());
        if key_schemas.unwrap_or(true) != self.schemas_enable.0 {
            self.note_not_reproduced(
                format!(
                    "key.converter.schemas.enable={}",
                    key_schemas.unwrap_or(true)
                ),
                "one switch, converter.schemas.enable, serves keys and values: keys follow \
                 value.converter.schemas.enable",
            );
        }
        if unset("heartbeat.interval.ms") {
            self.note_not_needed(
                "heartbeat.interval.ms",
                "unset, Debezium writes no heartbeats; Tributary writes one (in Debezium's shape, \
                 to __debezium-heartbeat.<server_name>) every 5 s while the source is idle, so its \
                 stored position keeps up (source.heartbeat_s: 0 turns them off)",
            );
        }
    }

    /// Continues from a Debezium offset instead of snapshotting.
    fn start_at(&mut self, offset: &DebeziumOffset) {
        self.snapshot_mode = Some("never");
        self.start = Some(match &offset.gtids {
            Some(gtids) => format!("{{gtid: {}}}", json_string(gtids)),
            None => format!(
                "{{binlog: {{file: {}, pos: {}}}}}",
                json_string(&offset.file),
                offset.pos
            ),
        });
        if offset.event > 0 || offset.row > 0 {
            // Inside a transaction: skip what the connector sent of it.
            self.start_skip = Some((offset.event, offset.row));
        }
    }

    fn finish(self) -> anyhow::Result<Imported> {
        let server_name = self
            .server_name
            .context("topic.prefix (database.server.name before Debezium 2) is missing")?;
        let host = self.host.context("database.hostname is missing")?;
        let user = self.user.context("database.user is missing")?;
        let brokers = self.brokers.context(
            "the connector config names no Kafka cluster (schema.history.internal.kafka.bootstrap.servers): \
             pass --brokers",
        )?;
        let server_id = self.server_id.context(
            "database.server.id is missing (Debezium picks a random one): set a replica id unique \
             among the server's replicas",
        )?;
        let mut yaml = String::new();
        let mut line = |text: String| {
            yaml.push_str(&text);
            yaml.push('\n');
        };
        line(match &self.name {
            Some(name) => format!(
                "# Imported from the Debezium connector {} by `tributary import-debezium`.",
                json_string(name)
            ),
            None => "# Imported from a Debezium connector by `tributary import-debezium`.".into(),
        });
        line(format!("server_name: {}", json_string(&server_name)));
        line("source:".into());
        line(format!("  host: {}", json_string(&host)));
        line(format!("  port: {}", self.port.unwrap_or(3306)));
        line(format!("  user: {}", json_string(&user)));
        let password_note = if self.password_given {
            "not copied from the connector config: set the variable"
        } else {
            "the connector config had none: set the variable (empty for no password)"
        };
        line(format!(
            "  password: ${{{PASSWORD_VARIABLE}}}   # {password_note}"
        ));
        line(format!("  server_id: {server_id}"));
        if let Some(start) = &self.start {
            line(format!("  start: {start}"));
        }
        if let Some((events, rows)) = self.start_skip {
            line(format!(
                "  start_skip: {{ events: {events}, rows: {rows} }}   # the offset's event and row: what the connector sent of this transaction"
            ));
        }
        if let Some(s) = self.connect_timeout_s {
            line(format!("  connect_timeout_s: {s}"));
        }
        if let Some(s) = self.heartbeat_s {
            line(format!("  heartbeat_s: {s}"));
        }
        if let Some(verify) = self.tls_verify {
            line(format!(
                "  tls: {{ verify: {verify} }}   # database.ssl.mode; add ca_file (PEM) unless the server's CA is a public one"
            ));
        }
        for (section, databases, tables) in [
            ("include", &self.include_databases, &self.include_tables),
            ("exclude", &self.exclude_databases, &self.exclude_tables),
        ] {
            if databases.is_empty() && tables.is_empty() {
                continue;
            }
            line(format!("{section}:"));
            for (key, list) in [("databases", databases), ("tables", tables)] {
                if !list.is_empty() {
                    let items: Vec<String> = list.iter().map(|p| json_string(p)).collect();
                    line(format!("  {key}: [{}]", items.join(", ")));
                }
            }
        }
        if let Some(keys) = &self.message_key_columns {
            line(format!("message_key_columns: {}", json_string(keys)));
        }
        line("compat: debezium   # every option below left unset takes Debezium's default".into());
        line("snapshot:".into());
        line(format!(
            "  mode: {}",
            self.snapshot_mode.unwrap_or("initial")
        ));
        if let Some(table) = &self.signal_table {
            line(format!("  signal_table: {}", json_string(table)));
        }
        if let Some(rows) = self.incremental_chunk_rows {
            line(format!("  incremental_chunk_rows: {rows}"));
        }
        if !self.events.is_empty()
            || self.heartbeat_prefix.is_some()
            || self.mariadb
            || self.failure_handling.is_some()
        {
            line("events:".into());
            for (name, on) in &self.events {
                line(format!("  {name}: {on}"));
            }
            if let Some(mode) = self.failure_handling {
                line(format!("  event.processing.failure.handling.mode: {mode}"));
            }
            if let Some(prefix) = &self.heartbeat_prefix {
                line(format!("  topic.heartbeat.prefix: {}", json_string(prefix)));
            }
            if self.mariadb {
                line("  source.connector: mariadb   # Debezium's MariaDB connector".into());
            }
        }
        if !self.values.is_empty() {
            line("values:".into());
            for (name, mode) in &self.values {
                line(format!("  {name}: {mode}"));
            }
        }
        if !self.columns.is_empty() {
            line("columns:".into());
            for (key, list) in &self.columns {
                line(format!("  {}: {}", json_string(key), json_string(list)));
            }
            for (n, hash) in self.salts.iter().enumerate() {
                line(format!(
                    "  # set {SALT_VARIABLE}_{} to the salt of the connector's {hash}.with.salt.<salt> (not copied)",
                    n + 1
                ));
            }
        }
        line("converter:".into());
        for (name, (on, set)) in [
            ("schemas.enable", self.schemas_enable),
            ("replace.null.with.default", self.replace_null_with_default),
        ] {
            line(format!(
                "  {name}: {on}   # {}",
                if set {
                    format!("value.converter.{name}")
                } else {
                    "unset in the connector: the JsonConverter's default; set false if your Connect worker does".into()
                }
            ));
        }
        line("kafka:".into());
        line(format!("  brokers: {}", json_string(&brokers)));
        if let Some(mb) = self.max_pending_mb {
            line(format!("max_pending_mb: {mb}"));
        }
        for (title, notes) in [
            (
                "Not reproduced (consumers see a difference)",
                &self.not_reproduced,
            ),
            ("Not needed", &self.not_needed),
        ] {
            if notes.is_empty() {
                continue;
            }
            line(format!("#\n# {title}:"));
            for note in notes {
                line(format!("#   {}: {}", note.property, note.reason));
            }
        }
        check(&yaml, self.salts.len())?;
        Ok(Imported {
            yaml,
            not_needed: self.not_needed,
            not_reproduced: self.not_reproduced,
        })
    }
}

/// `key=value` as the notes show it; the value of a property that may hold a
/// secret (a password, a JAAS config, a key, a token) is never shown.
fn shown(key: &str, value: &str) -> String {
    let lower = key.to_ascii_lowercase();
    let secret = ["password", "jaas", "secret", "token", "credential"]
        .iter()
        .any(|word| lower.contains(word))
        || lower.ends_with(".key");
    if secret {
        format!("{key}=<not shown>")
    } else {
        format!("{key}={value}")
    }
}

/// A string as a YAML scalar (JSON's quoting is valid YAML).
fn json_string(text: &str) -> String {
    Json::String(text.to_owned()).to_string()
}

/// Checks the output as `tributary capture` would read it, the password
/// variable standing in for itself; an error names the setting and the
/// Debezium property it came from.
fn check(yaml: &str, salts: usize) -> anyhow::Result<()> {
    let mut text = yaml.replace(&format!("${{{PASSWORD_VARIABLE}}}"), "checked");
    for n in 1..=salts {
        text = text.replace(&format!("${{{SALT_VARIABLE}_{n}}}"), "checked");
    }
    CaptureConfig::parse(&text)
        .map(drop)
        .context("the imported configuration is not valid (the setting named comes from the Debezium property of the same meaning)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tributary_capture::config::Compat;
    use tributary_capture::value_modes::{
        BigIntUnsignedMode, BinaryMode, DecimalMode, GeometryMode, TimePrecisionMode, ValueModes,
    };

    /// Debezium's tutorial connector (`inventory-connector`), as its docs register it.
    const TUTORIAL: &str = r#"{
      "name": "inventory-connector",
      "config": {
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "tasks.max": "1",
        "database.hostname": "mysql",
        "database.port": "3306",
        "database.user": "debezium",
        "database.password": "dbz",
        "database.server.id": "184054",
        "topic.prefix": "dbserver1",
        "database.include.list": "inventory",
        "schema.history.internal.kafka.bootstrap.servers": "kafka:9092",
        "schema.history.internal.kafka.topic": "schemahistory.inventory"
      }
    }"#;

    fn imported(text: &str) -> Imported {
        import(&parse_connector(text).unwrap(), None, None).unwrap()
    }

    fn properties(notes: &[Note]) -> Vec<&str> {
        notes.iter().map(|n| n.property.as_str()).collect()
    }

    #[test]
    fn the_tutorial_connector_becomes_a_capture_config() {
        let out = imported(TUTORIAL);
        let config =
            CaptureConfig::parse(&out.yaml.replace("${TRIBUTARY_MYSQL_PASSWORD}", "x")).unwrap();
        assert_eq!(config.server_name, "dbserver1");
        assert_eq!(config.source.host, "mysql");
        assert_eq!(config.source.port(), 3306);
        assert_eq!(config.source.user, "debezium");
        assert_eq!(config.source.server_id, 184054);
        assert_eq!(config.include.databases, ["inventory"]);
        assert_eq!(config.kafka.brokers, "kafka:9092");
        assert!(
            !out.yaml.contains("dbz"),
            "the password is never copied:\n{}",
            out.yaml
        );
        assert!(out.yaml.contains("${TRIBUTARY_MYSQL_PASSWORD}"));
        // Debezium's defaults that differ are said, though the connector left them unset.
        let differ = properties(&out.not_reproduced);
        assert!(
            differ
                .iter()
                .any(|p| p.starts_with("include.schema.changes=true")),
            "{differ:?}"
        );
        // Debezium's defaults where they are not Tributary's, through `compat`.
        assert_eq!(config.compat, Compat::Debezium, "{}", out.yaml);
        assert!(!config.events().provide_transaction_metadata);
        assert!(config.events().tombstones_on_delete);
        assert_eq!(config.value_modes(), ValueModes::DEBEZIUM);
        // The JsonConverter's default, written out with where it comes from.
        assert!(config.schemas_enabled());
        assert!(
            config.replaces_null_with_default(),
            "the JsonConverter's default"
        );
        assert!(
            out.yaml
                .contains("schemas.enable: true   # unset in the connector"),
            "{}",
            out.yaml
        );
        assert!(properties(&out.not_needed).contains(&"schema.history.internal.kafka.topic"));
        // And the differences written into the file, as comments.
        assert!(
            out.yaml.contains("#   include.schema.changes=true"),
            "{}",
            out.yaml
        );
    }

    #[test]
    fn a_mariadb_connector_names_itself_in_events() {
        let out = imported(&TUTORIAL.replace(
            "io.debezium.connector.mysql.MySqlConnector",
            "io.debezium.connector.mariadb.MariaDbConnector",
        ));
        let config =
            CaptureConfig::parse(&out.yaml.replace("${TRIBUTARY_MYSQL_PASSWORD}", "x")).unwrap();
        assert_eq!(config.events().connector, "mariadb", "{}", out.yaml);
        assert!(!imported(TUTORIAL).yaml.contains("source.connector"));
    }

    #[test]
    fn a_mode_tributary_lacks_is_noted_and_debeziums_default_written() {
        let text = TUTORIAL.replace(
            r#""tasks.max": "1","#,
            r#""tasks.max": "1", "time.precision.mode": "isostring","#,
        );
        let out = imported(&text);
        let config =
            CaptureConfig::parse(&out.yaml.replace("${TRIBUTARY_MYSQL_PASSWORD}", "x")).unwrap();
        assert_eq!(
            config.value_modes().time_precision,
            TimePrecisionMode::AdaptiveTimeMicroseconds
        );
        let note = out
            .not_reproduced
            .iter()
            .find(|n| n.property == "time.precision.mode=isostring")
            .expect("noted");
        assert!(note.reason.contains("connect"), "{}", note.reason);
    }

    #[test]
    fn database_ssl_mode_becomes_source_tls() {
        use tributary_capture::source_tls::TlsVerify;
        let with_mode = |mode: &str| {
            imported(&TUTORIAL.replace(
                r#""tasks.max": "1","#,
                &format!(r#""tasks.max": "1", "database.ssl.mode": "{mode}","#),
            ))
        };
        for (mode, verify) in [
            ("required", Some(TlsVerify::None)),
            ("verify_ca", Some(TlsVerify::Full)),
            ("verify_identity", Some(TlsVerify::Full)),
            ("disabled", None),
            ("preferred", None),
        ] {
            let out = with_mode(mode);
            let config =
                CaptureConfig::parse(&out.yaml.replace("${TRIBUTARY_MYSQL_PASSWORD}", "x"))
                    .unwrap();
            assert_eq!(
                config.source.tls.as_ref().map(|t| t.verify),
                verify,
                "{mode}: {}",
                out.yaml
            );
            let noted = properties(&out.not_reproduced)
                .contains(&format!("database.ssl.mode={mode}").as_str());
            assert_eq!(
                noted,
                ["preferred", "verify_ca"].contains(&mode),
                "{mode}: {:?}",
                out.not_reproduced
            );
        }
        let text = TUTORIAL.replace(
            r#""tasks.max": "1","#,
            r#""tasks.max": "1", "database.ssl.mode": "sometimes","#,
        );
        let e = import(&parse_connector(&text).unwrap(), None, None).expect_err("unknown mode");
        assert!(format!("{e:#}").contains("database.ssl.mode"), "{e:#}");
    }

    #[test]
    fn properties_files_and_every_mapped_property() {
        let text = "\
connector.class=io.debezium.connector.mysql.MySqlConnector
# a comment
database.hostname=db.internal
database.port=3307
database.user=cdc
database.server.id=5500
topic.prefix=shop
table.include.list=shop\\\\.orders, shop\\\\.users
table.exclude.list=shop\\\\.audit_.*
database.exclude.list=tmp
message.key.columns=shop.orders:customer_id,id
snapshot.mode=when_needed
signal.data.collection=shop.debezium_signal
incremental.snapshot.chunk.size=2048
heartbeat.interval.ms=10000
topic.heartbeat.prefix=hb
connect.timeout.ms=30000
max.queue.size.in.bytes=104857600
decimal.handling.mode=string
bigint.unsigned.handling.mode=precise
time.precision.mode=connect
binary.handling.mode=hex
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
value.converter.replace.null.with.default=false
key.converter.schemas.enable=true
provide.transaction.metadata=true
tombstones.on.delete=false
include.schema.changes=false
include.query=true
event.processing.failure.handling.mode=ignore
column.mask.with.4.chars=shop.users.ssn
";
        let props = parse_connector(text).unwrap();
        let out = import(&props, Some("broker:9092"), None).unwrap();
        let config =
            CaptureConfig::parse(&out.yaml.replace("${TRIBUTARY_MYSQL_PASSWORD}", "x")).unwrap();
        assert_eq!(config.source.port(), 3307);
        assert_eq!(config.include.tables, ["shop\\.orders", "shop\\.users"]);
        assert_eq!(config.exclude.tables, ["shop\\.audit_.*"]);
        assert_eq!(config.exclude.databases, ["tmp"]);
        assert_eq!(
            config.snapshot.mode,
            tributary_capture::config::SnapshotMode::WhenNeeded
        );
        assert_eq!(
            config.snapshot.signal_table.as_deref(),
            Some("shop.debezium_signal")
        );
        assert_eq!(config.snapshot.incremental_chunk_rows, 2048);
        assert_eq!(config.source.heartbeat_s, 10);
        assert_eq!(config.source.connect_timeout_s, 30);
        assert_eq!(config.max_pending_mb, 100);
        assert_eq!(config.kafka.brokers, "broker:9092");
        let differ = properties(&out.not_reproduced);
        assert!(
            !differ
                .iter()
                .any(|p| p.starts_with("decimal.handling.mode")),
            "{differ:?}"
        );
        assert!(
            !differ.iter().any(|p| p.starts_with("value.converter")),
            "{differ:?}"
        );
        assert!(
            !differ
                .iter()
                .any(|p| p.starts_with("provide.transaction.metadata")),
            "{differ:?}"
        );
        assert!(!config.schemas_enabled());
        assert!(!config.replaces_null_with_default());
        assert!(
            differ.contains(&"key.converter.schemas.enable=true"),
            "{differ:?}"
        );
        assert!(config.events().provide_transaction_metadata);
        assert!(config.events().transaction_topic);
        assert!(!config.events().tombstones_on_delete);
        assert!(!config.events().include_schema_changes);
        assert!(config.events().include_query);
        assert_eq!(
            config.events.event_processing_failure_handling_mode,
            tributary_capture::config::FailureHandling::Skip,
            "Debezium's deprecated ignore is skip"
        );
        assert_eq!(
            config.value_modes(),
            ValueModes {
                decimal: DecimalMode::String,
                bigint_unsigned: BigIntUnsignedMode::Precise,
                time_precision: TimePrecisionMode::Connect,
                binary: BinaryMode::Hex,
                geometry: GeometryMode::Struct,
            }
        );
        assert!(
            !differ
                .iter()
                .any(|p| p.starts_with("include.schema.changes")),
            "{differ:?}"
        );
        assert_eq!(config.columns["column.mask.with.4.chars"], "shop.users.ssn");
        assert!(
            !differ.iter().any(|p| p.starts_with("heartbeat")),
            "{differ:?}"
        );
        assert_eq!(
            config.events().heartbeat_prefix.as_deref(),
            Some("hb"),
            "{}",
            out.yaml
        );
    }

    #[test]
    fn a_debezium_offset_becomes_the_start() {
        let props = parse_connector(TUTORIAL).unwrap();
        let gtids = DebeziumOffset::parse(
            r#"{"ts_sec":1700000000,"file":"mysql-bin.000003","pos":1516,"gtids":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42","row":0,"server_id":223344,"event":0}"#,
        )
        .unwrap();
        let out = import(&props, None, Some(&gtids)).unwrap();
        let config =
            CaptureConfig::parse(&out.yaml.replace("${TRIBUTARY_MYSQL_PASSWORD}", "x")).unwrap();
        assert_eq!(
            config.snapshot.mode,
            tributary_capture::config::SnapshotMode::Never
        );
        assert_eq!(
            config.source.start,
            tributary_capture::position::StartPosition::Gtid(
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42".into()
            )
        );
        assert!(
            !properties(&out.not_reproduced)
                .iter()
                .any(|p| p.starts_with("offset"))
        );

        let mid_transaction =
            DebeziumOffset::parse(r#"{"file":"mysql-bin.000003","pos":1516,"row":1,"event":2}"#)
                .unwrap();
        let out = import(&props, None, Some(&mid_transaction)).unwrap();
        let config =
            CaptureConfig::parse(&out.yaml.replace("${TRIBUTARY_MYSQL_PASSWORD}", "x")).unwrap();
        assert_eq!(
            config.source.start,
            tributary_capture::position::StartPosition::Binlog {
                file: "mysql-bin.000003".into(),
                pos: 1516
            }
        );
        assert_eq!(
            config.source.start_skip,
            Some(tributary_capture::restart_skip::StartSkip { events: 2, rows: 1 })
        );
        assert!(
            !properties(&out.not_reproduced)
                .iter()
                .any(|p| p.starts_with("offset")),
            "nothing is sent twice"
        );
    }

    #[test]
    fn debeziums_snapshot_modes() {
        let mode = |value: &str| {
            let text = TUTORIAL.replace(
                r#""tasks.max": "1","#,
                &format!(r#""tasks.max": "1", "snapshot.mode": "{value}","#),
            );
            let out = imported(&text);
            let config =
                CaptureConfig::parse(&out.yaml.replace("${TRIBUTARY_MYSQL_PASSWORD}", "x"))
                    .unwrap();
            (format!("{:?}", config.snapshot.mode), config.source.start)
        };
        use tributary_capture::position::StartPosition;
        assert_eq!(mode("initial"), ("Initial".into(), StartPosition::Latest));
        assert_eq!(mode("no_data"), ("Never".into(), StartPosition::Latest));
        assert_eq!(mode("schema_only"), ("Never".into(), StartPosition::Latest));
        assert_eq!(mode("never"), ("Never".into(), StartPosition::Earliest));
        assert_eq!(
            mode("initial_only"),
            ("InitialOnly".into(), StartPosition::Latest)
        );
    }

    #[test]
    fn secrets_in_other_properties_are_never_shown() {
        let text = TUTORIAL.replace(
            r#""tasks.max": "1","#,
            r#""tasks.max": "1", "database.ssl.keystore.password": "hunter2",
               "schema.history.internal.producer.sasl.jaas.config": "user='u' password='hunter3'",
               "transforms.x.secret": "hunter4",
               "column.mask.hash.SHA-256.with.salt.hunter5": "inventory.customers.email",
               "column.mask.hash.MD5.with.salt.hunter6": "inventory.customers.first_name","#,
        );
        let out = imported(&text);
        for secret in ["hunter2", "hunter3", "hunter4", "hunter5", "hunter6", "dbz"] {
            assert!(!out.yaml.contains(secret), "{secret} in:\n{}", out.yaml);
            assert!(
                !format!("{:?}", out.not_reproduced).contains(secret),
                "{secret} in {:?}",
                out.not_reproduced
            );
        }
        // The salt is read from a variable the output names.
        assert!(
            out.yaml.contains(
                "\"column.mask.hash.SHA-256.with.salt.${TRIBUTARY_COLUMN_SALT_1}\": \"inventory.customers.email\""
            ),
            "{}",
            out.yaml
        );
        assert!(
            properties(&out.not_reproduced).contains(
                &"column.mask.hash.MD5.with.salt.<not shown>=inventory.customers.first_name"
            ),
            "{:?}",
            out.not_reproduced
        );
        assert!(
            properties(&out.not_reproduced).contains(&"database.ssl.keystore.password=<not shown>"),
            "{:?}",
            out.not_reproduced
        );
    }

    #[test]
    fn errors_name_the_property() {
        let err = |text: String| {
            let props = parse_connector(&text).unwrap();
            format!("{:#}", import(&props, None, None).unwrap_err())
        };
        assert!(
            err(TUTORIAL.replace("MySqlConnector", "PostgresConnector"))
                .contains("connector.class")
        );
        assert!(
            err(TUTORIAL.replace(r#""database.server.id": "184054","#, ""))
                .contains("database.server.id")
        );
        assert!(
            err(TUTORIAL.replace(r#""database.port": "3306""#, r#""database.port": "lots""#))
                .contains("database.port")
        );
        assert!(err(TUTORIAL.replace("kafka:9092", "")).contains("kafka.brokers"));
        assert!(err(TUTORIAL.replace(r#""inventory""#, r#""(""#)).contains("include.databases[0]"));
        assert!(
            err(TUTORIAL.replace("dbserver1", "")).contains("topic.prefix")
                || err(TUTORIAL.replace("dbserver1", "")).contains("server_name")
        );
        let secret = err(TUTORIAL.replace(r#""database.port": "3306""#, r#""database.port": "x""#));
        assert!(!secret.contains("dbz"), "{secret}");
    }
}
