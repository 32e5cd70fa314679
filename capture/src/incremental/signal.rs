//! Signals: a row inserted into `snapshot.signal_table` asks the running capture
//! for on-demand snapshots of some tables. The row reaches capture through the
//! binlog (PostgreSQL: the WAL, through capture's publication), ordered with
//! the changes around it, so no channel to the capture
//! process is needed and whichever instance is active sees it. The table and
//! the row follow Debezium's signalling table: `id`, `type` (`execute-snapshot`),
//! `data` (`{"data-collections": ["db.table", ...]}`). Rows are written by
//! [`crate::signal_request`].

use tributary_proto::{ChangeEvent, Op, Value};

/// The signal type that asks for snapshots.
pub(crate) const EXECUTE_SNAPSHOT: &str = "execute-snapshot";

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
