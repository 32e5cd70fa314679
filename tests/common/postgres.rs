//! The stack's private PostgreSQL (`deploy/local/up.sh`: port 5433,
//! `wal_level=logical`): its address, a superuser session, and a table
//! with what capturing it takes ([`PgCapture`]).

use anyhow::{Context, Result};
use tokio_postgres::{Client, NoTls};
use tributary_capture::postgres::lsn::Lsn;

use super::{brokers, free_port, unique};

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

/// A table, its publication and the names of one capture of it.
pub struct PgCapture {
    pub client: Client,
    pub server_name: String,
    pub table: String,
    pub slot: String,
    pub publication: String,
    pub metrics_port: u16,
    /// The `snapshot:` block's fields.
    pub snapshot: String,
    /// Appended to the configuration.
    pub extra: String,
}

impl PgCapture {
    /// Creates `table` with `columns`, readable by the capture role, and a
    /// publication of it.
    pub async fn new(columns: &str) -> Result<Self> {
        let client = pg_connect().await?;
        let table = unique("pgc_t");
        let publication = unique("pgc_p");
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} ({columns}); GRANT SELECT ON {table} TO tributary; \
                 CREATE PUBLICATION {publication} FOR TABLE {table};"
            ))
            .await?;
        Ok(PgCapture {
            client,
            server_name: unique("pgsrv"),
            table,
            slot: unique("pgc_s"),
            publication,
            metrics_port: free_port(),
            snapshot: "mode: initial, chunk_rows: 3".into(),
            extra: String::new(),
        })
    }

    pub fn yaml(&self) -> String {
        format!(
            "server_name: {}\n\
             source: {{ kind: postgres, host: 127.0.0.1, port: {}, user: tributary, password: tributary, \
               database: postgres, slot.name: {}, publication.name: {}, \
               publication.autocreate.mode: disabled, slot.drop.on.stop: true, heartbeat_s: 1 }}\n\
             include: {{ tables: ['public\\.{}'] }}\n\
             snapshot: {{ {} }}\n\
             kafka: {{ brokers: '{}' }}\n\
             commit_interval_ms: 200\n\
             metrics: {{ listen: '127.0.0.1:{}' }}\n{}",
            self.server_name,
            pg_port(),
            self.slot,
            self.publication,
            self.table,
            self.snapshot,
            brokers(),
            self.metrics_port,
            self.extra
        )
    }

    /// Creates `snapshot.signal_table` (`public.<table>_signals`), which the
    /// capture role may write, in the publication; returns its name.
    pub async fn add_signal_table(&mut self) -> Result<String> {
        let signals = format!("{}_signals", self.table);
        self.client
            .batch_execute(&format!(
                "CREATE TABLE {signals} (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, data text); \
                 GRANT SELECT, INSERT ON {signals} TO tributary; \
                 ALTER PUBLICATION {} ADD TABLE {signals};",
                self.publication
            ))
            .await?;
        self.snapshot
            .push_str(&format!(", signal_table: public.{signals}"));
        Ok(signals)
    }

    pub fn topic(&self) -> String {
        format!("{}.public.{}", self.server_name, self.table)
    }

    /// The slot's confirmed position, if the slot exists.
    pub async fn confirmed(&self) -> Result<Option<Lsn>> {
        let row = self
            .client
            .query_opt(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await?;
        Ok(row
            .and_then(|r| r.get::<_, Option<String>>(0))
            .map(|l| l.parse())
            .transpose()?)
    }

    pub async fn drop(self) -> Result<()> {
        self.client
            .batch_execute(&format!(
                "DROP PUBLICATION {}; DROP TABLE {}; DROP TABLE IF EXISTS {}_signals;",
                self.publication, self.table, self.table
            ))
            .await?;
        Ok(())
    }
}
