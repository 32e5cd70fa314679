//! A consistent read at an exact place in the change stream, without any
//! lock: a replication session creates a temporary slot that exports its
//! snapshot (`CREATE_REPLICATION_SLOT … TEMPORARY LOGICAL pgoutput
//! (SNAPSHOT 'export')`), and an ordinary session reads in a `REPEATABLE
//! READ` transaction under it (`SET TRANSACTION SNAPSHOT`). The read sees
//! exactly the transactions that commit before the slot's consistent point;
//! a slot streaming from that point sends exactly those that commit after.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use pgwire_replication::ReplicationClient;
use tokio_postgres::Client;
use tracing::warn;
use tributary_proto::lsn::Lsn;

use crate::config::SourceConfig;
use crate::error::CaptureError;
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
    /// Exports a snapshot and starts `reader`'s read-only transaction under
    /// it. (The server exports a snapshot once every transaction running
    /// when the slot is created has ended.)
    pub(crate) async fn begin(
        source: &SourceConfig,
        reader: &Client,
    ) -> Result<ExportedSnapshot, CaptureError> {
        let slot = temporary_slot_name(source.slot_name(), std::process::id());
        let (exporter, point, snapshot) = export(source, &slot).await?;
        Self::read_under(reader, exporter, point, &snapshot).await
    }

    /// [`Self::begin`], or `None` when the server did not export the
    /// snapshot within `wait` (a transaction left open keeps it waiting):
    /// the waiting session is then cancelled, and the open transactions
    /// named.
    pub(crate) async fn begin_within(
        source: &SourceConfig,
        reader: &Client,
        wait: Duration,
    ) -> Result<Option<ExportedSnapshot>, CaptureError> {
        let slot = temporary_slot_name(source.slot_name(), std::process::id());
        let Ok(exported) = tokio::time::timeout(wait, export(source, &slot)).await else {
            let open = open_transactions(reader).await?;
            reader
                .execute(
                    "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                    &[&slot],
                )
                .await?;
            warn!(%slot, waited_s = wait.as_secs_f64(), open_transactions = %open,
                "an on-demand snapshot chunk waits for transactions still open (the server exports its snapshot once they end): streaming goes on, and the chunk is tried again later");
            return Ok(None);
        };
        let (exporter, point, snapshot) = exported?;
        Self::read_under(reader, exporter, point, &snapshot)
            .await
            .map(Some)
    }

    /// Starts `reader`'s read-only transaction under `snapshot`.
    async fn read_under(
        reader: &Client,
        exporter: ReplicationClient,
        point: Lsn,
        snapshot: &str,
    ) -> Result<ExportedSnapshot, CaptureError> {
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

/// Connects to `source` and creates the temporary slot `slot`: the
/// session (named after the slot, so that it can be found to be
/// cancelled), the slot's consistent point and its exported snapshot's name.
async fn export(
    source: &SourceConfig,
    slot: &str,
) -> Result<(ReplicationClient, Lsn, String), CaptureError> {
    let config = server::replication_config(source, Lsn(0)).with_application_name(slot);
    let mut exporter = ReplicationClient::connect_gated(config).await?;
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
                CaptureError::ServerSetup(format!(
                    "CREATE_REPLICATION_SLOT {slot} returned no consistent point and snapshot"
                ))
            })
    };
    let point: Lsn = field(1)?.parse().map_err(|e| {
        CaptureError::ServerSetup(format!("temporary slot {slot}'s consistent point: {e}"))
    })?;
    Ok((exporter, point, field(2)?))
}

/// The sessions with a transaction open that holds a transaction id, and
/// prepared transactions, as `pid (state since …)`, for a message.
async fn open_transactions(reader: &Client) -> Result<String, CaptureError> {
    let row = reader
        .query_one(
            "SELECT concat_ws(', ', \
                (SELECT string_agg(format('pid %s (%s since %s)', pid, \
                    coalesce(state, 'state not visible'), xact_start), ', ') \
                 FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()), \
                (SELECT string_agg(format('prepared transaction %L', gid), ', ') FROM pg_prepared_xacts))",
            &[],
        )
        .await?;
    let open: String = row.get(0);
    Ok(if open.is_empty() {
        "none visible to the capture user".into()
    } else {
        open
    })
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
