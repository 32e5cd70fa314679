//! Read-your-position: a request names a source position and waits, up to its
//! deadline, until the partitions it reads have applied it.

use std::collections::BTreeMap;

use tokio::time::Instant;
use tonic::Status;
use tributary_proto::grpc::v1;
use tributary_proto::gtid::Gtid;

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
        }
    }

    fn reached(&self, partition: i32, progress: &PartitionProgress) -> bool {
        match self {
            MinPosition::Gtid(gtid) => progress.gtids.reached(gtid),
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
                    format!(
                        "has applied up to offset {} (GTIDs {:?})",
                        p.next_offset,
                        p.gtids.to_strings()
                    )
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

    use super::*;

    fn gtid_request(text: &str) -> Result<Option<MinPosition>, Status> {
        MinPosition::from_request(Some(&v1::Position {
            kind: Some(v1::position::Kind::Gtid(text.into())),
        }))
    }

    #[tokio::test]
    async fn waits_until_applied_or_the_deadline() {
        let progress = std::sync::Arc::new(Progress::default());
        progress.assign("t", 0, 5, AppliedGtids::default());
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
        progress.applied("t", 0, 6, AppliedGtids::from_strings(&["0-1-41"]).unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "41 is before 42");
        progress.applied("t", 0, 7, AppliedGtids::from_strings(&["0-1-43"]).unwrap());
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
        progress.assign("t", 0, 5, applied(&[format!("{uuid}:9")]));
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
        progress.applied("t", 0, 6, applied(&[other_source]));
        assert!(
            wait_for(&progress, "t", &[0], &want, Instant::now())
                .await
                .is_err()
        );
        progress.applied("t", 0, 7, applied(&[format!("{uuid}:10")]));
        wait_for(&progress, "t", &[0], &want, Instant::now())
            .await
            .unwrap();
    }
}
