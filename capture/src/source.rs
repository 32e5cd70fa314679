//! The source database: connecting, checking it can be captured, and asking for positions.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool};
use tracing::{info, warn};

use crate::charset::Collations;
use crate::column_default::DefaultExpr;
use crate::config::SourceConfig;
use crate::error::CaptureError;
use crate::position::BinlogPosition;
use crate::schema::InfoColumn;
use crate::server_rules::ServerRules;
use crate::source_tls::{SourceTls, tls_refusal};

/// What preflight learned about the server.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// `@@version`.
    pub version: String,
    /// MariaDB rather than MySQL.
    pub is_mariadb: bool,
    /// `binlog_row_metadata=FULL`: TABLE_MAP events carry names, signedness, labels, keys.
    pub full_row_metadata: bool,
    /// The server's collation ids and their character sets.
    pub collations: Collations,
    /// MySQL with `gtid_mode=ON`: every transaction has a GTID, so positions
    /// can keep the executed GTID set and resume by it.
    pub gtid_mode_on: bool,
    /// How the server stores table definitions (for DDL replay).
    pub schema_rules: ServerRules,
}

/// Connection options for the source.
pub fn opts(cfg: &SourceConfig) -> Opts {
    OptsBuilder::default()
        .ip_or_hostname(cfg.host.clone())
        .tcp_port(cfg.port())
        .user(Some(cfg.user.clone()))
        .pass(Some(cfg.password.clone()))
        .prefer_socket(false)
        .wait_timeout(Some(28_800))
        .ssl_opts(cfg.tls.as_ref().map(SourceTls::mysql))
        .into()
}

/// Opens one connection, failing after the configured connect timeout.
pub async fn connect(cfg: &SourceConfig) -> Result<Conn, CaptureError> {
    let timeout = Duration::from_secs(cfg.connect_timeout_s.max(1));
    let unreachable = |detail: String| CaptureError::Unreachable {
        endpoint: format!("database {}:{}", cfg.host, cfg.port()),
        detail,
    };
    match tokio::time::timeout(timeout, Conn::new(opts(cfg))).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => match cfg.tls.as_ref().and_then(|_| tls_failure(&e)) {
            Some(detail) => Err(CaptureError::SourceTls { detail }),
            None => match e {
                mysql_async::Error::Io(e) => Err(unreachable(e.to_string())),
                e => Err(e.into()),
            },
        },
        Err(_) => Err(unreachable(format!("no connection within {timeout:?}"))),
    }
}

/// Why a connection under `source.tls` failed, if TLS is the reason: the
/// handshake was refused, or the server offers no TLS.
fn tls_failure(e: &mysql_async::Error) -> Option<String> {
    match e {
        mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer) => {
            Some("the server does not offer TLS (start it with ssl_cert and ssl_key)".to_owned())
        }
        e => tls_refusal(e),
    }
}

/// Checks that the server writes a binlog capture can read, and that the user may read it.
pub async fn preflight(conn: &mut Conn) -> Result<ServerInfo, CaptureError> {
    let (version, log_bin, format, image): (String, i64, String, String) = conn
        .query_first("SELECT @@version, @@log_bin, @@binlog_format, @@binlog_row_image")
        .await?
        .ok_or_else(|| CaptureError::ServerSetup("server returned no variables".into()))?;
    let is_mariadb = version.to_ascii_lowercase().contains("mariadb");
    if log_bin == 0 {
        return Err(CaptureError::ServerSetup(
            "the binary log is disabled (log_bin=OFF); start the server with --log-bin --binlog-format=ROW \
             --binlog-row-image=FULL --binlog-row-metadata=FULL"
                .into(),
        ));
    }
    if !format.eq_ignore_ascii_case("ROW") {
        return Err(CaptureError::ServerSetup(format!(
            "binlog_format is {format}, capture needs ROW; run SET GLOBAL binlog_format=ROW (and set it in the server config)"
        )));
    }
    if !image.eq_ignore_ascii_case("FULL") {
        return Err(CaptureError::ServerSetup(format!(
            "binlog_row_image is {image}, capture needs FULL (complete before/after images); run SET GLOBAL binlog_row_image=FULL"
        )));
    }
    let compressed: Option<i64> = conn
        .query_first("SELECT @@log_bin_compress")
        .await
        .unwrap_or(None);
    if compressed == Some(1) {
        return Err(CaptureError::ServerSetup(
            "log_bin_compress=ON: compressed binlog events cannot be decoded; run SET GLOBAL log_bin_compress=OFF".into(),
        ));
    }
    let row_metadata: Option<String> = conn
        .query_first("SELECT @@binlog_row_metadata")
        .await
        .unwrap_or(None);
    let full_row_metadata = row_metadata
        .as_deref()
        .is_some_and(|m| m.eq_ignore_ascii_case("FULL"));
    if !full_row_metadata {
        warn!(
            binlog_row_metadata = row_metadata.as_deref().unwrap_or("(unsupported)"),
            "column names and types will come from information_schema, which reflects the current table, \
             not the one at the binlog position; set binlog_row_metadata=FULL"
        );
    }
    // SHOW MASTER STATUS needs BINLOG MONITOR (MariaDB) / REPLICATION CLIENT (MySQL).
    current_position(conn, is_mariadb).await?;
    // Every id a TABLE_MAP can name, from the server itself (MariaDB 10.10+ also
    // lists collations without an id or character set: no column refers to them).
    let collations: Vec<(Option<u16>, Option<String>)> = conn
        .query("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS")
        .await?;
    let collations = Collations::new(
        collations
            .into_iter()
            .filter_map(|(id, charset)| Some((id?, charset?))),
    );
    let gtid_mode_on = !is_mariadb && mysql_gtid_mode_on(conn).await?;
    let schema_rules = ServerRules::read(conn, &version).await?;
    info!(%version, "source database ready for capture");
    Ok(ServerInfo {
        schema_rules,
        version,
        is_mariadb,
        full_row_metadata,
        collations,
        gtid_mode_on,
    })
}

/// Maps privilege errors onto the grant that is missing: REPLICATION SLAVE for the
/// binlog dump (`dump`), BINLOG MONITOR / REPLICATION CLIENT for binlog status.
pub fn explain_privilege_error(
    err: mysql_async::Error,
    is_mariadb: bool,
    dump: bool,
) -> CaptureError {
    let grant = if dump {
        "REPLICATION SLAVE"
    } else if is_mariadb {
        "BINLOG MONITOR"
    } else {
        "REPLICATION CLIENT"
    };
    missing_grant(err, grant)
}

/// `err` as [`CaptureError::MissingGrant`] naming `grant` when it is a privilege error.
pub fn missing_grant(err: mysql_async::Error, grant: &'static str) -> CaptureError {
    if let mysql_async::Error::Server(ref s) = err
        && matches!(s.code, 1227 | 1045 | 1044 | 1142 | 1143)
    {
        return CaptureError::MissingGrant {
            grant,
            detail: s.message.clone(),
        };
    }
    CaptureError::Database(err)
}

/// The server's current end of binlog, with the GTID state there: MariaDB's
/// `@@gtid_binlog_pos`, or MySQL's executed GTID set when `gtid_mode` is ON.
pub async fn current_position(
    conn: &mut Conn,
    is_mariadb: bool,
) -> Result<BinlogPosition, CaptureError> {
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW MASTER STATUS").await {
        // MySQL 8.4 renamed the statement.
        Err(mysql_async::Error::Server(e)) if !is_mariadb && e.code == 1064 => {
            conn.query_first("SHOW BINARY LOG STATUS").await
        }
        other => other,
    }
    .map_err(|e| explain_privilege_error(e, is_mariadb, false))?;
    let row = row.ok_or_else(|| {
        CaptureError::ServerSetup("SHOW MASTER STATUS is empty: the binary log is disabled".into())
    })?;
    let file: String = row.get(0).unwrap_or_default();
    let pos: u64 = row.get(1).unwrap_or_default();
    let gtid = if is_mariadb {
        conn.query_first::<String, _>("SELECT @@gtid_binlog_pos")
            .await?
            .filter(|g| !g.is_empty())
    } else if mysql_gtid_mode_on(conn).await? {
        // Empty when no GTID transaction has run yet: a complete, empty set.
        Some(row.get("Executed_Gtid_Set").unwrap_or_default())
    } else {
        // OFF or one of the permissive modes: some transactions are anonymous,
        // so no GTID set can say where capture is.
        None
    };
    Ok(BinlogPosition {
        file,
        pos,
        gtid,
        ts_ms: 0,
    })
}

/// Whether a MySQL server has `gtid_mode=ON` (not OFF or a permissive mode).
async fn mysql_gtid_mode_on(conn: &mut Conn) -> Result<bool, CaptureError> {
    let mode: Option<String> = conn.query_first("SELECT @@GLOBAL.gtid_mode").await?;
    Ok(mode.is_some_and(|m| m.eq_ignore_ascii_case("ON")))
}

/// The start of the oldest binlog the server still has.
pub async fn earliest_position(
    conn: &mut Conn,
    is_mariadb: bool,
) -> Result<BinlogPosition, CaptureError> {
    let logs: Vec<mysql_async::Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| explain_privilege_error(e, is_mariadb, false))?;
    let file: String = logs
        .first()
        .and_then(|r| r.get(0))
        .ok_or_else(|| CaptureError::ServerSetup("SHOW BINARY LOGS is empty".into()))?;
    Ok(BinlogPosition {
        file,
        pos: 4,
        gtid: None,
        ts_ms: 0,
    })
}

/// Columns of a table from `information_schema` (fallback when TABLE_MAP lacks metadata).
pub async fn info_columns(
    pool: &Pool,
    db: &str,
    table: &str,
) -> Result<Vec<InfoColumn>, CaptureError> {
    info_columns_on(&mut pool.get_conn().await?, db, table).await
}

/// `COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_KEY,
/// IS_NULLABLE, CHARACTER_MAXIMUM_LENGTH, COLUMN_DEFAULT, EXTRA`, and whether
/// the server is MariaDB (its `COLUMN_DEFAULT`s are quoted).
type InfoColumnRow = (
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    String,
    Option<u64>,
    Option<String>,
    String,
    bool,
);

/// Columns of a table from `information_schema`, on a given connection. Key
/// positions follow the primary key's index, or, without one, the unique index
/// whose columns the server reports as the primary key (`COLUMN_KEY = 'PRI'`:
/// the first unique index with only NOT NULL columns, as Debezium picks it).
/// The session's time zone is set to UTC first: the server shows a TIMESTAMP
/// column's default in it.
pub async fn info_columns_on(
    conn: &mut Conn,
    db: &str,
    table: &str,
) -> Result<Vec<InfoColumn>, CaptureError> {
    conn.query_drop("SET time_zone = '+00:00'").await?;
    let rows: Vec<InfoColumnRow> = conn
        .exec(
            "SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_KEY, \
             IS_NULLABLE, CHARACTER_MAXIMUM_LENGTH, COLUMN_DEFAULT, EXTRA, \
             VERSION() LIKE '%MariaDB%' \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        .await?;
    let unique: Vec<(String, String, u32)> = conn
        .exec(
            "SELECT INDEX_NAME, COLUMN_NAME, SEQ_IN_INDEX FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0",
            (db, table),
        )
        .await?;
    let primary: std::collections::BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.4 == "PRI")
        .map(|r| r.0.as_str())
        .collect();
    let key_index = key_index(&unique, &primary);
    let position = |column: &str| {
        unique
            .iter()
            .find(|(index, c, _)| Some(index.as_str()) == key_index && c == column)
            .map(|(_, _, seq)| *seq)
    };
    Ok(rows
        .iter()
        .map(
            |(
                name,
                column_type,
                charset,
                collation,
                _,
                nullable,
                length,
                default,
                extra,
                mariadb,
            )| InfoColumn {
                key_position: position(name),
                nullable: nullable == "YES",
                default: DefaultExpr::parse(default.as_deref(), extra, *mariadb),
                char_length: length.and_then(|l| usize::try_from(l).ok()),
                name: name.clone(),
                column_type: column_type.clone(),
                charset: charset.clone(),
                collation: collation.clone(),
            },
        )
        .collect())
}

/// The index keying the table: `PRIMARY`, or the unique index made of exactly
/// the columns the server reports as the primary key.
fn key_index<'a>(
    unique: &'a [(String, String, u32)],
    primary: &std::collections::BTreeSet<&str>,
) -> Option<&'a str> {
    if unique.iter().any(|(index, _, _)| index == "PRIMARY") {
        return Some("PRIMARY");
    }
    let mut indexes: Vec<&str> = unique.iter().map(|(index, _, _)| index.as_str()).collect();
    indexes.dedup();
    indexes.into_iter().find(|index| {
        let columns: std::collections::BTreeSet<&str> = unique
            .iter()
            .filter(|(i, _, _)| i == index)
            .map(|(_, c, _)| c.as_str())
            .collect();
        !columns.is_empty() && columns == *primary
    })
}
