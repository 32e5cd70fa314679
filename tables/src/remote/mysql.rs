//! The MySQL/MariaDB backend: `SELECT cols FROM t WHERE key IN (...)` over a
//! connection pool, one statement per batch.
//!
//! Column values become JSON by their MySQL type: integers and floating-point
//! numbers as numbers, DECIMAL and temporal values as strings (`2026-11-30`,
//! `2026-11-30T12:00:00`, `12:00:00`), text as strings, binary as base64.

use async_trait::async_trait;
use base64::Engine as _;
use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::Queryable;
use mysql_async::{Column, Pool, Row, Value as MyValue};
use serde_json::{Map, Value};

use crate::config::MySqlBackendConfig;
use crate::remote::backend::{Backend, BackendError, Overload};

/// Reads rows of one table.
pub struct MySqlBackend {
    pool: Pool,
    /// `SELECT cols FROM table WHERE `, ready for the key condition.
    select: String,
    key_columns: Vec<String>,
}

impl MySqlBackend {
    /// A backend over `config.url` (the pool connects lazily).
    pub fn new(config: &MySqlBackendConfig) -> Result<Self, BackendError> {
        // The URL may ask for TLS (require_ssl=true), built with the process's provider.
        tributary_proto::crypto_provider::install();
        let opts = mysql_async::Opts::from_url(&config.url)
            .map_err(|e| BackendError::permanent(format!("url: {e}")))?;
        // Always the network path the URL names (the driver would switch a
        // loopback connection to the server's Unix socket).
        let opts: mysql_async::Opts = mysql_async::OptsBuilder::from_opts(opts)
            .prefer_socket(false)
            .into();
        let quote = |name: &str| format!("`{}`", name.replace('`', "``"));
        let columns = match &config.columns {
            Some(columns) => columns
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(", "),
            None => "*".to_owned(),
        };
        let table = config
            .table
            .split('.')
            .map(quote)
            .collect::<Vec<_>>()
            .join(".");
        Ok(MySqlBackend {
            pool: Pool::new(opts),
            select: format!("SELECT {columns} FROM {table} WHERE "),
            key_columns: config.key.clone(),
        })
    }

    /// `(k1, k2) IN ((?, ?), (?, ?))`, or `k IN (?, ?)` for single-column keys.
    fn condition(&self, keys: usize) -> String {
        let quoted: Vec<String> = self
            .key_columns
            .iter()
            .map(|c| format!("`{}`", c.replace('`', "``")))
            .collect();
        let one = if quoted.len() == 1 {
            "?".to_owned()
        } else {
            format!("({})", vec!["?"; quoted.len()].join(", "))
        };
        let lhs = if quoted.len() == 1 {
            quoted[0].clone()
        } else {
            format!("({})", quoted.join(", "))
        };
        format!("{lhs} IN ({})", vec![one; keys].join(", "))
    }
}

fn param(value: &Value) -> MyValue {
    match value {
        Value::Null => MyValue::NULL,
        Value::Bool(b) => MyValue::Int(i64::from(*b)),
        Value::Number(n) => n
            .as_i64()
            .map(MyValue::Int)
            .or_else(|| n.as_u64().map(MyValue::UInt))
            .unwrap_or_else(|| MyValue::Double(n.as_f64().unwrap_or_default())),
        Value::String(s) => MyValue::Bytes(s.clone().into_bytes()),
        other => MyValue::Bytes(other.to_string().into_bytes()),
    }
}

fn json_of(column: &Column, value: MyValue) -> Value {
    let binary = column.character_set() == 63
        && !matches!(
            column.column_type(),
            ColumnType::MYSQL_TYPE_DECIMAL | ColumnType::MYSQL_TYPE_NEWDECIMAL
        );
    match value {
        MyValue::NULL => Value::Null,
        MyValue::Int(i) => i.into(),
        MyValue::UInt(u) => u.into(),
        MyValue::Float(f) => f64::from(f).into(),
        MyValue::Double(d) => d.into(),
        MyValue::Bytes(b) if binary && !column.flags().contains(ColumnFlags::NUM_FLAG) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        MyValue::Bytes(b) => Value::String(String::from_utf8_lossy(&b).into_owned()),
        MyValue::Date(y, mo, d, h, mi, s, us) => {
            if column.column_type() == ColumnType::MYSQL_TYPE_DATE {
                Value::String(format!("{y:04}-{mo:02}-{d:02}"))
            } else if us > 0 {
                Value::String(format!(
                    "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}"
                ))
            } else {
                Value::String(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}"))
            }
        }
        MyValue::Time(negative, days, h, mi, s, us) => {
            let hours = u32::from(h) + days * 24;
            let sign = if negative { "-" } else { "" };
            if us > 0 {
                Value::String(format!("{sign}{hours:02}:{mi:02}:{s:02}.{us:06}"))
            } else {
                Value::String(format!("{sign}{hours:02}:{mi:02}:{s:02}"))
            }
        }
    }
}

fn row_json(row: Row) -> Map<String, Value> {
    let columns = row.columns();
    let values = row.unwrap();
    columns
        .iter()
        .zip(values)
        .map(|(c, v)| (c.name_str().into_owned(), json_of(c, v)))
        .collect()
}

/// The server errors that say it is overloaded, by code: retried later, and
/// the rate limit backs off.
fn overload_reason(code: u16) -> Option<&'static str> {
    match code {
        1040 => Some("mysql_too_many_connections"), // ER_CON_COUNT_ERROR
        1203 | 1226 => Some("mysql_user_limit"),    // max_user_connections, a resource limit
        1205 => Some("mysql_lock_wait_timeout"),
        1969 | 3024 => Some("mysql_statement_timeout"), // max_statement_time / max_execution_time
        _ => None,
    }
}

fn error(e: mysql_async::Error) -> BackendError {
    match e {
        mysql_async::Error::Server(e) => match overload_reason(e.code) {
            Some(reason) => BackendError::overloaded(
                format!("server: {e}"),
                Overload {
                    reason,
                    retry_after: None,
                },
            ),
            None => BackendError::permanent(format!("server: {e}")),
        },
        other => BackendError::transient(other.to_string()),
    }
}

#[async_trait]
impl Backend for MySqlBackend {
    async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError> {
        let mut conn = self.pool.get_conn().await.map_err(error)?;
        let sql = format!("{}{}", self.select, self.condition(keys.len()));
        let params: Vec<MyValue> = keys.iter().flatten().map(param).collect();
        let rows: Vec<Row> = conn.exec(sql, params).await.map_err(error)?;
        // Match rows to keys by the JSON of their key columns.
        let mut found = std::collections::HashMap::new();
        for row in rows {
            let row = row_json(row);
            let key: Vec<&Value> = self
                .key_columns
                .iter()
                .map(|c| row.get(c).unwrap_or(&Value::Null))
                .collect();
            found.insert(
                serde_json::to_string(&key).expect("JSON serializes"),
                Value::Object(row),
            );
        }
        Ok(keys
            .iter()
            .map(|k| found.remove(&serde_json::to_string(k).expect("JSON serializes")))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overload_errors_are_retried_and_back_off_others_are_permanent() {
        let server = |code: u16| {
            error(mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: format!("error {code}"),
                state: "HY000".into(),
            }))
        };
        for (code, reason) in [
            (1040, "mysql_too_many_connections"),
            (1203, "mysql_user_limit"),
            (1205, "mysql_lock_wait_timeout"),
            (1969, "mysql_statement_timeout"),
        ] {
            let e = server(code);
            assert!(e.retryable, "{code}");
            assert_eq!(e.overload.map(|o| o.reason), Some(reason));
        }
        let unknown_column = server(1054);
        assert!(!unknown_column.retryable && unknown_column.overload.is_none());
    }
}
