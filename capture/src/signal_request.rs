//! `tributary snapshot`: asks a running capture for on-demand snapshots by
//! inserting a signal row ([`crate::incremental::signal`]) into
//! `snapshot.signal_table` as the capture's user, on MySQL/MariaDB or
//! PostgreSQL, creating the table if it does not exist.

use mysql_async::prelude::Queryable;

use crate::config::{CaptureConfig, SourceKind};
use crate::error::CaptureError;
use crate::filter::TableFilter;
use crate::incremental::signal::{EXECUTE_SNAPSHOT, create_statement};
use crate::{postgres, source};

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
    let form = match config.source.kind {
        SourceKind::Mysql => "database.table",
        SourceKind::Postgres => "schema.table",
    };
    for name in tables {
        let captured = name
            .split_once('.')
            .is_some_and(|(d, t)| filter.captures(d, t));
        if !captured {
            return Err(CaptureError::SnapshotRequest(format!(
                "{name:?} is not a `{form}` this capture's include/exclude patterns capture"
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
        .map_err(|e| cannot_insert(&e, &format!("GRANT INSERT ON {signals} TO {}", postgres::server::quote(&config.source.user))))?;
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
