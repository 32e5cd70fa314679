//! A consistent read at an exact place in the change stream, without any
//! lock: a replication session creates a temporary slot that exports its
//! snapshot (`CREATE_REPLICATION_SLOT … TEMPORARY LOGICAL pgoutput
//! (SNAPSHOT 'export')`), and an ordinary session reads in a `REPEATABLE
//! READ` transaction under it (`SET TRANSACTION SNAPSHOT`). The read sees
//! exactly the transactions that commit before the slot's consistent point;
//! a slot streaming from that point sends exactly those that commit after.

use std::sync::atomic::{AtomicU32, Ordering};

use pgwire_replication::ReplicationClient;
use tokio_postgres::Client;

use crate::config::SourceConfig;
use crate::error::CaptureError;
use crate::postgres::lsn::Lsn;
use crate::postgres::server;

/// The longest slot name PostgreSQL accepts (`NAMEDATALEN - 1`).
const MAX_SLOT_NAME: usize = 63;

/// Temporary slots made by this process so far: each gets its own name, as
/// the server releases a dropped session's slot a moment after it ends.
static EXPORTS: AtomicU32 = AtomicU32::new(0);

/// A snapshot exported by a temporary slot, with a transaction reading under it.
pub(crate) struct ExportedSnapshot {
    /// The session whose slot exported the snapshot: the snapshot lives
    /// while it stays idle, and its slot goes with it.
    exporter: ReplicationClient,
    /// The consistent point: what the read sees ends here.
    pub point: Lsn,
}

impl ExportedSnapshot {
    /// Exports a snapshot and starts `reader`'s read-only transaction under it.
    pub(crate) async fn begin(
        source: &SourceConfig,
        reader: &Client,
    ) -> Result<ExportedSnapshot, CaptureError> {
        let mut exporter =
            ReplicationClient::connect_gated(server::replication_config(source, Lsn(0))).await?;
        let slot = temporary_slot_name(source.slot_name(), std::process::id());
        let rows = exporter
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')"
            ))
            .await?;
        let field = |i: usize| {
            rows.first()
                .and_then(|row| row.get(i).cloned().flatten())
                .and_then(|b| String::from_utf8(b.to_vec()).ok())
                .ok_or_else(|| {
                    CaptureError::ServerSetup("CREATE_REPLICATION_SLOT returned no slot".into())
                })
        };
        let point: Lsn = field(1)?
            .parse()
            .map_err(|e| CaptureError::ServerSetup(format!("{e}")))?;
        let snapshot = field(2)?;
        reader
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT '{snapshot}'"
            ))
            .await?;
        Ok(ExportedSnapshot { exporter, point })
    }

    /// Ends `reader`'s transaction, then the exporting session (dropping the
    /// gated session before it streams ends it, and its temporary slot).
    pub(crate) async fn end(self, reader: &Client) -> Result<(), CaptureError> {
        reader.batch_execute("COMMIT").await?;
        drop(self.exporter);
        Ok(())
    }
}

/// A temporary slot's name: capture's slot name, shortened if need be, and
/// what makes it unique (the process and a count).
fn temporary_slot_name(slot: &str, pid: u32) -> String {
    let suffix = format!("_tmp_{pid}_{}", EXPORTS.fetch_add(1, Ordering::Relaxed));
    // Slot names are ASCII (lowercase letters, digits, underscores).
    let prefix = &slot[..slot.len().min(MAX_SLOT_NAME - suffix.len())];
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_slot_names_are_unique_and_fit() {
        let long = "s".repeat(63);
        let a = temporary_slot_name(&long, 4_000_000);
        let b = temporary_slot_name(&long, 4_000_000);
        assert_ne!(a, b);
        assert!(
            a.len() <= MAX_SLOT_NAME && b.len() <= MAX_SLOT_NAME,
            "{a} {b}"
        );
        assert!(temporary_slot_name("debezium", 7).starts_with("debezium_tmp_7_"));
    }
}
