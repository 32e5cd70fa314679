//! Which table partitions a job's events wait for: the partition matching the
//! event's of each co-partitioned table, and every partition of each global table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tributary_table_api::HeldPartitions;

/// How often a waiting event looks again.
const POLL: Duration = Duration::from_millis(10);

/// Which local tables a job's events wait for.
#[derive(Clone)]
pub struct TableGate {
    held: Arc<dyn HeldPartitions>,
    copartitioned: Vec<String>,
    global: Vec<(String, u32)>,
    /// Global partitions are never given away, so once all are ready they stay
    /// ready: checked once, not per event.
    globals_ready: Arc<AtomicBool>,
}

impl TableGate {
    /// Events wait for the partition matching theirs of each `copartitioned`
    /// table, and for every partition of each `global` table (name, partition count).
    pub fn new(
        held: Arc<dyn HeldPartitions>,
        copartitioned: Vec<String>,
        global: Vec<(String, u32)>,
    ) -> Self {
        TableGate {
            held,
            copartitioned,
            global,
            globals_ready: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether an event of input `partition` can be enriched now.
    pub(super) fn ready(&self, partition: i32) -> bool {
        self.copartitioned
            .iter()
            .all(|t| self.held.is_ready(t, partition))
            && self.globals_ready()
    }

    fn globals_ready(&self) -> bool {
        if self.globals_ready.load(Ordering::Relaxed) {
            return true;
        }
        let ready = self
            .global
            .iter()
            .all(|(t, count)| self.held.all_ready(t, *count));
        self.globals_ready.store(ready, Ordering::Relaxed);
        ready
    }

    /// Waits until an event of input `partition` can be enriched.
    pub(super) async fn wait(&self, partition: i32) {
        while !self.ready(partition) {
            tokio::time::sleep(POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use tributary_table_api::MemoryPartitions;

    use super::*;

    fn gate(held: &Arc<MemoryPartitions>) -> TableGate {
        TableGate::new(
            held.clone(),
            vec!["customers".into()],
            vec![("products".into(), 2)],
        )
    }

    #[test]
    fn an_event_waits_for_its_own_partition_of_a_copartitioned_table() {
        let held = Arc::new(MemoryPartitions::default());
        held.set_ready("products", 0, true);
        held.set_ready("products", 1, true);
        held.set_ready("customers", 1, true);
        let gate = gate(&held);
        assert!(gate.ready(1));
        assert!(!gate.ready(0), "customers partition 0 is not ready");
        held.set_ready("customers", 0, true);
        assert!(gate.ready(0));
    }

    #[test]
    fn every_partition_of_a_global_table_must_be_ready_and_then_stays_so() {
        let held = Arc::new(MemoryPartitions::default());
        held.set_ready("customers", 0, true);
        held.set_ready("products", 0, true);
        let gate = gate(&held);
        assert!(!gate.ready(0), "products partition 1 is not ready");
        held.set_ready("products", 1, true);
        assert!(gate.ready(0));
        // A global table's partitions are never given away: readiness is not asked again.
        held.set_ready("products", 1, false);
        assert!(gate.ready(0));
    }

    #[tokio::test(start_paused = true)]
    async fn wait_returns_once_the_partition_is_ready() {
        let held = Arc::new(MemoryPartitions::default());
        held.set_ready("products", 0, true);
        held.set_ready("products", 1, true);
        let gate = gate(&held);
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait(3).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished());
        held.set_ready("customers", 3, true);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the wait ends once the partition is ready")
            .unwrap();
    }
}
