//! What `tributary validate --connect` checks of a capture's source
//! database, without changing anything on it: that it can be reached with
//! the configured user, that it writes a log capture can read, that the user
//! may read it, and (PostgreSQL) what capture would set up at start.

use crate::config::{CaptureConfig, PublicationAutocreate, SourceKind};
use crate::error::CaptureError;
use crate::postgres::server;
use crate::source;

/// Checks the source of `config`; the lines say what was found.
pub async fn check_source(config: &CaptureConfig) -> Result<Vec<String>, CaptureError> {
    let cfg = &config.source;
    let at = format!("{}:{}", cfg.host, cfg.port());
    match cfg.kind {
        SourceKind::Mysql => {
            let mut conn = source::connect(cfg).await?;
            let info = source::preflight(&mut conn).await?;
            Ok(vec![format!(
                "source {at}: {} ready for capture",
                info.version
            )])
        }
        SourceKind::Postgres => {
            let session = server::connect(cfg).await?;
            server::preflight(&session.client, cfg).await?;
            let name = cfg.publication_name();
            let mode = cfg.publication_autocreate_mode.unwrap_or_default();
            let exists = server::publication_exists(&session.client, name).await?;
            let publication = match (exists, mode) {
                (_, PublicationAutocreate::Filtered) => format!(
                    "publication {name} is kept to the captured tables at start (publication.autocreate.mode: filtered)"
                ),
                (true, _) => format!("publication {name} exists"),
                (false, PublicationAutocreate::Disabled) => {
                    return Err(server::missing_publication(name));
                }
                (false, PublicationAutocreate::AllTables) => format!(
                    "publication {name} is created FOR ALL TABLES at start (publication.autocreate.mode: all_tables)"
                ),
            };
            // A publication capture keeps to the captured tables takes the signal table in at start.
            let kept = mode == PublicationAutocreate::Filtered;
            server::check_signal_table(&session.client, config, exists && !kept).await?;
            let tables = server::captured_tables(&session.client, config).await?;
            Ok(vec![
                format!(
                    "source {at}: PostgreSQL ready for logical replication (wal_level logical, role may replicate)"
                ),
                publication,
                format!("{} tables captured", tables.len()),
            ])
        }
    }
}
