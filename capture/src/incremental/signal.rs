//! Signals: a row inserted into `snapshot.signal_table` asks the running capture
//! for on-demand snapshots of some tables. The row reaches capture through the
//! binlog (PostgreSQL: the WAL, through capture's publication), ordered with
//! the changes around it, so no channel to the capture
//! process is needed and whichever instance is active sees it. The table and
//! the row follow Debezium's signalling table: `id`, `type` (`execute-snapshot`),
//! `data` (`{"data-collections": ["db.table", ...]}`).

use mysql_async::prelude::Queryable;
use tributary_proto::{ChangeEvent, Op, Value};

use crate::config::{CaptureConfig, SourceKind};
use crate::error::CaptureError;
use crate::filter::TableFilter;
use crate::{postgres, source};

/// The signal type that asks for snapshots.
const EXECUTE_SNAPSHOT: &str = "execute-snapshot";

/// Why a signal row is not a request capture can act on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadSignal {
    /// A column the signal table must have, as text.
    #[error("the signal row has no text column `{0}`")]
    NoColumn(&'static str),
    /// A `type` other than `execute-snapshot`.
    #[error("unknown signal type {0:?} (expected {EXECUTE_SNAPSHOT:?})")]
    Type(String),
    /// A `data` column that is not JSON.
    #[error("`data` is not JSON: {0}")]
    Data(#[from] serde_json::Error),
    /// A snapshot type other than incremental.
    #[error("snapshot type {0:?} is not supported (only \"incremental\")")]
    SnapshotType(String),
    /// No tables to snapshot.
    #[error("`data` has no \"data-collections\" list of tables")]
    NoTables,
}

/// The tables a signal row asks to snapshot (`Ok(empty)` for changes that are
/// not new signals); `Err` says why a row is not a valid request.
pub(crate) fn requested_tables(event: &ChangeEvent) -> Result<Vec<String>, BadSignal> {
    let (Op::Create, Some(row)) = (event.op, &event.after) else {
        return Ok(Vec::new());
    };
    let text = |name: &'static str| {
        row.columns
            .iter()
            .position(|c| c == name)
            .and_then(|i| match &row.values[i] {
                Value::String(s) => Some(s.as_str()),
                _ => None,
            })
            .ok_or(BadSignal::NoColumn(name))
    };
    let kind = text("type")?;
    if kind != EXECUTE_SNAPSHOT {
        return Err(BadSignal::Type(kind.to_owned()));
    }
    let data: serde_json::Value = serde_json::from_str(text("data")?)?;
    if let Some(kind) = data.get("type").and_then(|t| t.as_str())
        && !kind.eq_ignore_ascii_case("incremental")
    {
        return Err(BadSignal::SnapshotType(kind.to_owned()));
    }
    data.get("data-collections")
        .and_then(|c| c.as_array())
        .map(|tables| {
            tables
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .filter(|tables: &Vec<String>| !tables.is_empty())
        .ok_or(BadSignal::NoTables)
}

/// The statement that creates a signal table named `name` (quoted).
pub(crate) fn create_statement(name: &str) -> String {
    format!(
        "CREATE TABLE {name} (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT)"
    )
}

/// Inserts a signal row asking for snapshots of `tables` (`db.table`; for
/// PostgreSQL `schema.table`) as the capture's user, creating the signal
/// table if it does not exist; returns the signal's id.
pub async fn request(config: &CaptureConfig, tables: &[String]) -> Result<String, CaptureError> {
    let Some((db, table)) = config.snapshot.signal_table_name() else {
        return Err(CaptureError::SnapshotRequest(
            "snapshot.signal_table is not set in the capture config".into(),
        ));
    };
    let filter = TableFilter::of(config);
    for name in tables {
        let captured = name
            .split_once('.')
            .is_some_and(|(d, t)| filter.captures(d, t));
        if !captured {
            return Err(CaptureError::SnapshotRequest(format!(
                "{name:?} is not a `database.table` this capture's include/exclude patterns capture"
            )));
        }
    }
    let data = serde_json::json!({ "data-collections": tables, "type": "incremental" }).to_string();
    match config.source.kind {
        SourceKind::Mysql => insert_mysql(config, &db, &table, &data).await,
        SourceKind::Postgres => insert_postgres(config, &db, &table, &data).await,
    }
}

async fn insert_mysql(
    config: &CaptureConfig,
    db: &str,
    table: &str,
    data: &str,
) -> Result<String, CaptureError> {
    let mut conn = source::connect(&config.source).await?;
    let signals = format!("`{}`.`{}`", db.replace('`', "``"), table.replace('`', "``"));
    let exists: Option<u8> = conn
        .exec_first(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (db, table),
        )
        .await?;
    if exists.is_none() {
        let create = create_statement(&signals);
        conn.query_drop(&create)
            .await
            .map_err(|e| cannot_create(&e, &create))?;
    }
    let id: String = conn.query_first("SELECT UUID()").await?.unwrap_or_default();
    conn.exec_drop(
        format!("INSERT INTO {signals} (id, type, data) VALUES (?, ?, ?)"),
        (id.as_str(), EXECUTE_SNAPSHOT, data),
    )
    .await
    .map_err(|e| {
        cannot_insert(
            &e,
            &format!("GRANT INSERT ON {signals} TO '{}'", config.source.user),
        )
    })?;
    conn.disconnect().await?;
    Ok(id)
}

/// PostgreSQL: the table must also be in capture's publication, or the
/// row would never reach capture.
async fn insert_postgres(
    config: &CaptureConfig,
    schema: &str,
    table: &str,
    data: &str,
) -> Result<String, CaptureError> {
    let session = postgres::server::connect(&config.source).await?;
    let client = &session.client;
    let signals = format!(
        "{}.{}",
        postgres::server::quote(schema),
        postgres::server::quote(table)
    );
    if !postgres::server::table_exists(client, schema, table).await? {
        let create = create_statement(&signals);
        client
            .batch_execute(&create)
            .await
            .map_err(|e| cannot_create(&e, &create))?;
    }
    postgres::server::check_signal_table(client, config, true).await?;
    let row = client
        .query_one(
            &format!(
                "INSERT INTO {signals} (id, type, data) VALUES (gen_random_uuid()::text, $1, $2) RETURNING id"
            ),
            &[&EXECUTE_SNAPSHOT, &data],
        )
        .await
        .map_err(|e| cannot_insert(&e, &format!("GRANT INSERT ON {signals} TO {}", config.source.user)))?;
    Ok(row.get(0))
}

fn cannot_create(e: &dyn std::fmt::Display, create: &str) -> CaptureError {
    CaptureError::SnapshotRequest(format!(
        "the signal table does not exist and cannot be created ({e}); create it as a user who may: {create}"
    ))
}

fn cannot_insert(e: &dyn std::fmt::Display, grant: &str) -> CaptureError {
    CaptureError::SnapshotRequest(format!(
        "cannot insert the signal row ({e}); the capture user needs: {grant}"
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tributary_proto::{Row, SourceInfo};

    use super::*;

    fn signal(op: Op, kind: &str, data: &str) -> ChangeEvent {
        let columns: Arc<[String]> = ["id", "type", "data"].map(String::from).into();
        ChangeEvent {
            op,
            key: Row {
                columns: columns[..1].into(),
                values: vec![Value::String("1".into())],
            },
            before: None,
            after: Some(Row {
                columns,
                values: ["1", kind, data].map(|v| Value::String(v.into())).into(),
            }),
            source: SourceInfo::default(),
            ts_ms: 0,
            transaction: None,
            undecodable: Vec::new(),
            schemas: None,
            key_change: None,
        }
    }

    #[test]
    fn reads_debezium_style_snapshot_signals() {
        let ok = signal(
            Op::Create,
            "execute-snapshot",
            r#"{"data-collections": ["shop.users", "shop.orders"], "type": "INCREMENTAL"}"#,
        );
        assert_eq!(
            requested_tables(&ok).unwrap(),
            ["shop.users", "shop.orders"]
        );
        let untyped = signal(
            Op::Create,
            "execute-snapshot",
            r#"{"data-collections": ["a.b"]}"#,
        );
        assert_eq!(requested_tables(&untyped).unwrap(), ["a.b"]);
        let deleted = signal(Op::Delete, "execute-snapshot", "not json");
        assert!(requested_tables(&deleted).unwrap().is_empty());
    }

    #[test]
    fn bad_signals_say_why() {
        let cases = [
            (
                "stop-snapshot",
                r#"{"data-collections": ["a.b"]}"#,
                "unknown signal type",
            ),
            ("execute-snapshot", "{", "not JSON"),
            (
                "execute-snapshot",
                r#"{"data-collections": []}"#,
                "no \"data-collections\"",
            ),
            (
                "execute-snapshot",
                r#"{"data-collections": ["a.b"], "type": "blocking"}"#,
                "not supported",
            ),
        ];
        for (kind, data, reason) in cases {
            let err = requested_tables(&signal(Op::Create, kind, data))
                .unwrap_err()
                .to_string();
            assert!(err.contains(reason), "{kind} {data}: {err}");
        }
    }
}
