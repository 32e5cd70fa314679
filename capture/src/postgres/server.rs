//! The PostgreSQL server capture reads: sessions (ordinary ones for the
//! catalog and the snapshot, replication ones for the stream), both with the
//! settings the values' text forms depend on ([`SESSION_SETTINGS`]); the
//! checks that it can be captured (`wal_level`, the role's `REPLICATION`),
//! and the publication capture reads through.

use std::time::Duration;

use pgwire_replication::ReplicationConfig;
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};
use tracing::{info, warn};
use tributary_proto::lsn::Lsn;

use crate::config::{CaptureConfig, PublicationAutocreate, SourceConfig};
use crate::error::CaptureError;
use crate::filter::TableFilter;
use crate::incremental::signal;
use crate::postgres::catalog;
use crate::postgres::text_value::SESSION_SETTINGS;
use crate::source_tls::tls_refusal;

/// How long `slot.drop.on.stop` waits for the server to release the slot.
const SLOT_RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// An ordinary session; its connection task ends when it is dropped.
pub struct Session {
    /// The client.
    pub client: Client,
    connection: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// The `options` startup parameter that sets [`SESSION_SETTINGS`].
fn options() -> String {
    SESSION_SETTINGS
        .iter()
        .map(|(name, value)| format!("-c {name}={}", value.replace(' ', "\\ ")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Opens an ordinary session on `cfg`'s database.
pub async fn connect(cfg: &SourceConfig) -> Result<Session, CaptureError> {
    let mut pg = tokio_postgres::Config::new();
    pg.host(&cfg.host)
        .port(cfg.port())
        .user(&cfg.user)
        .password(&cfg.password)
        .dbname(cfg.database.as_deref().unwrap_or_default())
        .application_name("tributary")
        .options(options())
        .connect_timeout(Duration::from_secs(cfg.connect_timeout_s.max(1)));
    let connected = match &cfg.tls {
        Some(tls) => {
            pg.ssl_mode(SslMode::Require);
            pg.connect(tls.postgres()?)
                .await
                .map(|(client, connection)| (client, tokio::spawn(run_connection(connection))))
        }
        None => pg
            .connect(NoTls)
            .await
            .map(|(client, connection)| (client, tokio::spawn(run_connection(connection)))),
    };
    let (client, connection) = connected.map_err(|e| {
        if cfg.tls.is_some()
            && let Some(detail) = tls_failure(&e)
        {
            return CaptureError::SourceTls { detail };
        }
        if e.as_db_error().is_none() {
            CaptureError::Unreachable {
                endpoint: format!("database {}:{}", cfg.host, cfg.port()),
                detail: e.to_string(),
            }
        } else {
            e.into()
        }
    })?;
    Ok(Session { client, connection })
}

/// Runs a session's connection until it ends, logging how it ended.
async fn run_connection<F>(connection: F)
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
{
    if let Err(e) = connection.await {
        warn!(error = %e, "PostgreSQL session ended");
    }
}

/// Why a session under `source.tls` could not open, if TLS is the reason:
/// the handshake was refused, or the server offers no TLS.
fn tls_failure(e: &tokio_postgres::Error) -> Option<String> {
    tls_refusal(e).or_else(|| {
        // tokio-postgres's own words (the error's cause, not in its text) for
        // a server that answers SSLRequest with 'N'.
        std::error::Error::source(e)
            .is_some_and(|cause| cause.to_string() == "server does not support TLS")
            .then(|| "the server does not offer TLS (start it with ssl=on)".to_owned())
    })
}

/// The replication session's settings, streaming from `start` (0: the
/// slot's confirmed position).
pub fn replication_config(cfg: &SourceConfig, start: Lsn) -> ReplicationConfig {
    ReplicationConfig::new(
        cfg.host.clone(),
        cfg.user.clone(),
        cfg.password.clone(),
        cfg.database.clone().unwrap_or_default(),
        cfg.slot_name(),
        cfg.publication_name(),
    )
    .with_port(cfg.port())
    .with_start_lsn(pgwire_replication::Lsn::from_u64(start.0))
    .with_options(options())
    .with_application_name("tributary")
    .with_tls(
        cfg.tls
            .as_ref()
            .map(|tls| tls.pgwire(&cfg.host))
            .unwrap_or_else(pgwire_replication::TlsConfig::disabled),
    )
}

/// Checks that the server writes logical WAL and that the role may read it.
pub async fn preflight(client: &Client, cfg: &SourceConfig) -> Result<(), CaptureError> {
    let row = client
        .query_one(
            "SELECT current_setting('wal_level'), r.rolreplication OR r.rolsuper, version() \
             FROM pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await?;
    let wal_level: String = row.get(0);
    if wal_level != "logical" {
        return Err(CaptureError::ServerSetup(format!(
            "Postgres server wal_level property must be 'logical' but is: '{wal_level}'; \
             run ALTER SYSTEM SET wal_level = logical and restart the server"
        )));
    }
    if !row.get::<_, bool>(1) {
        return Err(CaptureError::ServerSetup(format!(
            "the role {:?} lacks the REPLICATION attribute; run: ALTER ROLE {} REPLICATION",
            cfg.user, cfg.user
        )));
    }
    let version: String = row.get(2);
    info!(%version, "source database ready for capture");
    Ok(())
}

/// Makes sure the publication exists, creating it as
/// `source.publication.autocreate.mode` says (and, `filtered`, keeping it
/// to the tables `include`/`exclude` select).
pub async fn ensure_publication(
    client: &Client,
    config: &CaptureConfig,
) -> Result<(), CaptureError> {
    let source = &config.source;
    let name = source.publication_name();
    let exists = publication_exists(client, name).await?;
    let mode = source.publication_autocreate_mode.unwrap_or_default();
    match (exists, mode) {
        (true, PublicationAutocreate::Disabled | PublicationAutocreate::AllTables) => Ok(()),
        (false, PublicationAutocreate::Disabled) => Err(missing_publication(name)),
        (false, PublicationAutocreate::AllTables) => {
            info!(
                publication = name,
                "creating the publication FOR ALL TABLES"
            );
            client
                .batch_execute(&format!("CREATE PUBLICATION {name} FOR ALL TABLES"))
                .await?;
            Ok(())
        }
        (exists, PublicationAutocreate::Filtered) => {
            let mut tables = captured_tables(client, config).await?;
            if tables.is_empty() {
                return Err(CaptureError::ServerSetup(format!(
                    "no table matches include/exclude in database {:?}: publication {name} would be empty",
                    source.database.as_deref().unwrap_or_default()
                )));
            }
            if let Some((schema, table)) = config.snapshot.signal_table_name()
                && table_exists(client, &schema, &table).await?
            {
                // Its rows are how on-demand snapshots are asked for.
                tables.push(CapturedTable {
                    schema,
                    table,
                    estimate: 0,
                });
            }
            let list = tables
                .iter()
                .map(|t| format!("{}.{}", quote(&t.schema), quote(&t.table)))
                .collect::<Vec<_>>()
                .join(", ");
            let verb = if exists {
                "ALTER PUBLICATION"
            } else {
                "CREATE PUBLICATION"
            };
            let how = if exists { "SET TABLE" } else { "FOR TABLE" };
            info!(
                publication = name,
                tables = tables.len(),
                "keeping the publication to the captured tables"
            );
            client
                .batch_execute(&format!("{verb} {name} {how} {list}"))
                .await?;
            Ok(())
        }
    }
}

/// Whether the ordinary table `schema.table` exists.
pub async fn table_exists(
    client: &Client,
    schema: &str,
    table: &str,
) -> Result<bool, CaptureError> {
    Ok(catalog::table_oid(client, schema, table).await?.is_some())
}

/// Checks that `snapshot.signal_table`, when set, exists and (with
/// `published`) is in the publication: its rows ask for on-demand
/// snapshots, and reach capture only through the publication.
pub async fn check_signal_table(
    client: &Client,
    config: &CaptureConfig,
    published: bool,
) -> Result<(), CaptureError> {
    let Some((schema, table)) = config.snapshot.signal_table_name() else {
        return Ok(());
    };
    let name = format!("{}.{}", quote(&schema), quote(&table));
    if !table_exists(client, &schema, &table).await? {
        return Err(CaptureError::ServerSetup(format!(
            "snapshot.signal_table {schema}.{table} does not exist: create it with {}",
            signal::create_statement(&name)
        )));
    }
    if !published {
        return Ok(());
    }
    let publication = config.source.publication_name();
    let published = client
        .query_opt(
            "SELECT 1 FROM pg_publication_tables \
             WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
            &[&publication, &schema, &table],
        )
        .await?
        .is_some();
    if !published {
        return Err(CaptureError::ServerSetup(format!(
            "snapshot.signal_table {schema}.{table} is not in publication {publication}, \
             so its rows never reach capture: ALTER PUBLICATION {publication} ADD TABLE {name}"
        )));
    }
    Ok(())
}

/// Whether the publication `name` exists.
pub async fn publication_exists(client: &Client, name: &str) -> Result<bool, CaptureError> {
    Ok(client
        .query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&name])
        .await?
        .is_some())
}

/// The publication is missing and capture may not create it.
pub fn missing_publication(name: &str) -> CaptureError {
    CaptureError::ServerSetup(format!(
        "publication {name} does not exist and source.publication.autocreate.mode is disabled: \
         create it (CREATE PUBLICATION {name} FOR TABLE …) or set the mode to all_tables or filtered"
    ))
}

/// A table `include`/`exclude` select.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedTable {
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub table: String,
    /// The planner's estimate of its rows.
    pub estimate: u64,
}

/// The ordinary tables of the database that `include`/`exclude` select
/// (their names matched as `schema.table`).
pub async fn captured_tables(
    client: &Client,
    config: &CaptureConfig,
) -> Result<Vec<CapturedTable>, CaptureError> {
    let filter = TableFilter::of(config);
    let rows = client
        .query(
            "SELECT n.nspname::text, c.relname::text, greatest(c.reltuples, 0)::int8 FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition \
               AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
               AND n.nspname NOT LIKE 'pg_toast%' \
             ORDER BY 1, 2",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| CapturedTable {
            schema: row.get(0),
            table: row.get(1),
            estimate: row.get::<_, i64>(2).unsigned_abs(),
        })
        .filter(|t| filter.captures(&t.schema, &t.table))
        .collect())
}

/// An identifier quoted for SQL.
pub fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// Makes sure the replication slot exists (created with `pgoutput` when it
/// does not), so that the server keeps WAL for capture from now on.
pub async fn ensure_slot(client: &Client, cfg: &SourceConfig) -> Result<(), CaptureError> {
    let slot = cfg.slot_name();
    let existing = client
        .query_opt(
            "SELECT plugin::text, database::text = current_database() FROM pg_replication_slots \
             WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    match existing {
        Some(row) => {
            let (plugin, here): (Option<String>, Option<bool>) = (row.get(0), row.get(1));
            if plugin.as_deref() != Some("pgoutput") || here != Some(true) {
                return Err(CaptureError::ServerSetup(format!(
                    "replication slot {slot} exists but is not a pgoutput slot of database {:?} \
                     (plugin {plugin:?}): set source.slot.name to another name, or drop it",
                    cfg.database.as_deref().unwrap_or_default()
                )));
            }
        }
        None => {
            info!(slot, "creating the replication slot");
            client
                .execute(
                    "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&slot],
                )
                .await?;
        }
    }
    Ok(())
}

/// Drops the replication slot (`source.slot.drop.on.stop`).
pub async fn drop_slot(client: &Client, cfg: &SourceConfig) -> Result<(), CaptureError> {
    info!(
        slot = cfg.slot_name(),
        "dropping the replication slot (slot.drop.on.stop)"
    );
    // The server's walsender lets go of the slot a moment after the stream ends.
    let deadline = tokio::time::Instant::now() + SLOT_RELEASE_TIMEOUT;
    loop {
        client
            .execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                 WHERE slot_name = $1 AND NOT active",
                &[&cfg.slot_name()],
            )
            .await?;
        let holder = client
            .query_opt(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[&cfg.slot_name()],
            )
            .await?;
        let Some(holder) = holder else {
            return Ok(());
        };
        if tokio::time::Instant::now() >= deadline {
            let pid: Option<i32> = holder.get(0);
            return Err(CaptureError::Postgres {
                detail: format!(
                    "replication slot {slot} is still held by server process {pid:?}; \
                     drop it with SELECT pg_drop_replication_slot('{slot}')",
                    slot = cfg.slot_name(),
                ),
                transient: false,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
