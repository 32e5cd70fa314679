//! The stack's private PostgreSQL (`deploy/local/up.sh`: port 5433,
//! `wal_level=logical`): its address and a superuser session.

use anyhow::{Context, Result};
use tokio_postgres::{Client, NoTls};

/// The stack's PostgreSQL, as its superuser.
pub fn pg_url() -> String {
    std::env::var("TRIBUTARY_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5433/postgres".into())
}

/// The port of the stack's PostgreSQL.
pub fn pg_port() -> u16 {
    std::env::var("TRIBUTARY_PG_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5433)
}

/// A superuser session on the stack's PostgreSQL.
pub async fn pg_connect() -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(&pg_url(), NoTls)
        .await
        .context("connect to the stack's PostgreSQL (deploy/local/up.sh)")?;
    tokio::spawn(connection);
    Ok(client)
}
