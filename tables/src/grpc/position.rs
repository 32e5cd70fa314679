//! Read-your-position: a request names a source position and waits, up to its
//! deadline, until the partitions it reads have applied it.

use std::collections::BTreeMap;

use tokio::time::Instant;
use tonic::Status;
use tributary_proto::grpc::v1;
use tributary_proto::gtid::Gtid;

use crate::applied_log::WalPosition;
use crate::progress::{PartitionProgress, Progress};

/// A position a read must not be older than.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MinPosition {
    /// A MariaDB or MySQL transaction: reached where a change of its domain
    /// (MySQL: source) at or after its sequence (transaction) number has been applied.
    Gtid(Gtid),
    /// Kafka offsets of the change topic: reached where every record before the
    /// partition's offset has been applied (partitions not listed: at once).
    Offsets(BTreeMap<i32, i64>),
    /// A PostgreSQL transaction: reached where the key's partition has applied
    /// it, or a change written at or after its LSN.
    Wal(WalPosition),
}

impl MinPosition {
    /// The position of a request, if it names one.
    pub(crate) fn from_request(position: Option<&v1::Position>) -> Result<Option<Self>, Status> {
        use v1::position::Kind;
        let Some(position) = position else {
            return Ok(None);
        };
        match &position.kind {
            None => Ok(None),
            Some(Kind::Gtid(text)) => text
                .parse()
                .map(|g| Some(MinPosition::Gtid(g)))
                .map_err(|e| Status::invalid_argument(format!("min_position.gtid: {e}"))),
            Some(Kind::Offsets(offsets)) => Ok(Some(MinPosition::Offsets(
                offsets.next_offsets.iter().map(|(p, o)| (*p, *o)).collect(),
            ))),
            Some(Kind::Wal(wal)) => {
                let lsn = wal
                    .lsn
                    .parse()
                    .map_err(|e| Status::invalid_argument(format!("min_position.wal.lsn: {e}")))?;
                Ok(Some(MinPosition::Wal(WalPosition {
                    lsn,
                    // pgoutput sends the 32 bits below a pg_current_xact_id()'s epoch.
                    xid: wal.xid.map(|xid| xid as u32),
                })))
            }
        }
    }

    /// Whether it names a transaction, so only the keys it wrote are sure to wait
    /// for it (offsets hold for whole partitions).
    pub(crate) fn names_a_transaction(&self) -> bool {
        !matches!(self, MinPosition::Offsets(_))
    }

    fn reached(&self, partition: i32, progress: &PartitionProgress) -> bool {
        match self {
            MinPosition::Gtid(gtid) => progress.log.gtids.reached(gtid),
            MinPosition::Wal(wal) => progress.log.wal.reached(wal),
            MinPosition::Offsets(offsets) => offsets
                .get(&partition)
                .is_none_or(|want| progress.next_offset >= *want),
        }
    }

    fn describe(&self, partition: i32) -> String {
        match self {
            MinPosition::Gtid(gtid) => format!("GTID {gtid}"),
            MinPosition::Offsets(offsets) => {
                format!("offset {}", offsets.get(&partition).copied().unwrap_or(0))
            }
            MinPosition::Wal(WalPosition {
                lsn,
                xid: Some(xid),
            }) => {
                format!("transaction {xid} or a change at LSN {lsn}")
            }
            MinPosition::Wal(WalPosition { lsn, xid: None }) => format!("a change at LSN {lsn}"),
        }
    }
}

/// Waits until every partition in `partitions` of `table` has reached `want`, or
/// the deadline passes (`DEADLINE_EXCEEDED`, saying how far the partition got).
pub(crate) async fn wait_for(
    progress: &Progress,
    table: &str,
    partitions: &[i32],
    want: &MinPosition,
    deadline: Instant,
) -> Result<(), Status> {
    loop {
        // Registered before checking, so a batch applied in between still wakes us.
        let next = progress.next_applied();
        let behind = partitions.iter().find_map(|&partition| {
            match progress.of_partition(table, partition) {
                Some(p) if want.reached(partition, &p) => None,
                state => Some((partition, state)),
            }
        });
        let Some((partition, state)) = behind else {
            return Ok(());
        };
        if tokio::time::timeout_at(deadline, next).await.is_err() {
            let at = state.map_or_else(
                || "is not held here".to_owned(),
                |p| {
                    let log = match p.log.wal.lsn() {
                        Some(lsn) => format!("LSN {lsn}"),
                        None => format!("GTIDs {:?}", p.log.gtids.to_strings()),
                    };
                    format!("has applied up to offset {} ({log})", p.next_offset)
                },
            );
            return Err(Status::deadline_exceeded(format!(
                "table {table}: partition {partition} {at}, not yet {}; the deadline passed",
                want.describe(partition)
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tributary_proto::gtid::AppliedGtids;
    use tributary_proto::lsn::Lsn;

    use super::*;
    use crate::applied_log::AppliedLog;

    fn log(gtids: AppliedGtids) -> AppliedLog {
        AppliedLog {
            gtids,
            ..AppliedLog::default()
        }
    }

    fn gtid_request(text: &str) -> Result<Option<MinPosition>, Status> {
        MinPosition::from_request(Some(&v1::Position {
            kind: Some(v1::position::Kind::Gtid(text.into())),
        }))
    }

    #[tokio::test]
    async fn waits_until_applied_or_the_deadline() {
        let progress = std::sync::Arc::new(Progress::default());
        progress.assign("t", 0, 5, AppliedLog::default());
        let want = gtid_request("0-1-42").unwrap().unwrap();
        let soon = Instant::now() + Duration::from_millis(30);
        let err = wait_for(&progress, "t", &[0], &want, soon)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
        assert!(
            err.message().contains("not yet GTID 0-1-42"),
            "{}",
            err.message()
        );

        let waiter = {
            let progress = progress.clone();
            tokio::spawn(async move {
                let later = Instant::now() + Duration::from_secs(10);
                wait_for(&progress, "t", &[0], &want, later).await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        progress.applied(
            "t",
            0,
            6,
            log(AppliedGtids::from_strings(&["0-1-41"]).unwrap()),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "41 is before 42");
        progress.applied(
            "t",
            0,
            7,
            log(AppliedGtids::from_strings(&["0-1-43"]).unwrap()),
        );
        waiter.await.unwrap().unwrap();

        let offsets = MinPosition::Offsets(BTreeMap::from([(0, 7), (3, 100)]));
        wait_for(&progress, "t", &[0], &offsets, Instant::now())
            .await
            .unwrap();
        assert!(
            gtid_request("nope")
                .unwrap_err()
                .message()
                .contains("min_position.gtid")
        );
    }

    #[tokio::test]
    async fn mysql_gtids_are_reached_per_source() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let progress = Progress::default();
        let applied = |texts: &[String]| AppliedGtids::from_strings(texts).unwrap();
        progress.assign("t", 0, 5, log(applied(&[format!("{uuid}:9")])));
        let want = gtid_request(&format!("{}:10", uuid.to_uppercase()))
            .unwrap()
            .unwrap();
        let err = wait_for(&progress, "t", &[0], &want, Instant::now())
            .await
            .unwrap_err();
        assert!(
            err.message().contains(&format!("not yet GTID {uuid}:10")),
            "{}",
            err.message()
        );
        let other_source = "8f5ad0c4-1f6e-11ef-a1c2-0242ac120002:50".to_owned();
        progress.applied("t", 0, 6, log(applied(&[other_source])));
        assert!(
            wait_for(&progress, "t", &[0], &want, Instant::now())
                .await
                .is_err()
        );
        progress.applied("t", 0, 7, log(applied(&[format!("{uuid}:10")])));
        wait_for(&progress, "t", &[0], &want, Instant::now())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_postgresql_transaction_is_reached_by_its_id_or_a_later_change() {
        let progress = Progress::default();
        let applied = AppliedLog {
            wal: serde_json::from_str(r#"{"lsn":256,"xids":[740]}"#).unwrap(),
            ..AppliedLog::default()
        };
        progress.assign("t", 0, 5, applied);
        let want = |lsn: &str, xid: Option<u64>| {
            MinPosition::from_request(Some(&v1::Position {
                kind: Some(v1::position::Kind::Wal(v1::WalPosition {
                    lsn: lsn.into(),
                    xid,
                })),
            }))
        };
        let wait = async |lsn: &str, xid: Option<u64>| {
            let want = want(lsn, xid).unwrap().unwrap();
            wait_for(&progress, "t", &[0], &want, Instant::now()).await
        };
        assert_eq!(Lsn(256).to_string(), "0/100");
        wait("0/100", None).await.unwrap();
        wait("0/101", Some(740)).await.unwrap();
        wait("0/101", Some((7 << 32) + 740)).await.unwrap();
        let err = wait("0/101", Some(741)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
        assert!(
            err.message()
                .contains("(LSN 0/100), not yet transaction 741 or a change at LSN 0/101"),
            "{}",
            err.message()
        );
        let err = wait("0/101", None).await.unwrap_err();
        assert!(err.message().contains("not yet a change at LSN 0/101"));
        let err = want("yesterday", None).unwrap_err();
        assert!(
            err.message().contains("min_position.wal.lsn"),
            "{}",
            err.message()
        );
    }
}
