//! The batch runner: events are enriched a batch per task, so the JSON work
//! spreads over the runtime's threads without a spawn per event; within a
//! batch every event waits only for its own tables (lookups overlap); batches
//! come back in the order they were started, so outcomes keep the input order
//! of every partition. The tasks are owned: dropping the runner aborts them.

use std::sync::Arc;

use rdkafka::Message;
use rdkafka::message::OwnedMessage;
use tokio_util::task::JoinQueue;

use super::gate::TableGate;
use crate::pipeline::{Outcome, Pipeline};

/// An event and what to write for it.
pub(super) type Enriched = (OwnedMessage, Outcome);

/// Batches being enriched, in the order they were read.
pub(super) struct Batches {
    pipeline: Arc<Pipeline>,
    gate: Option<TableGate>,
    /// Each batch with the assignment generation it was read in.
    running: JoinQueue<(u64, Vec<Enriched>)>,
    /// Events in `running`.
    events: usize,
}

impl Batches {
    /// Enriches with `pipeline`, each event once `gate` lets it.
    pub(super) fn new(pipeline: Arc<Pipeline>, gate: Option<TableGate>) -> Self {
        Batches {
            pipeline,
            gate,
            running: JoinQueue::new(),
            events: 0,
        }
    }

    /// Starts enriching `batch`, read in assignment `generation` (an empty
    /// batch starts nothing).
    pub(super) fn start(&mut self, batch: Vec<OwnedMessage>, generation: u64) {
        if batch.is_empty() {
            return;
        }
        self.events += batch.len();
        let (pipeline, gate) = (self.pipeline.clone(), self.gate.clone());
        self.running
            .spawn(async move { (generation, enrich(batch, &pipeline, gate.as_ref()).await) });
    }

    /// Events being enriched.
    pub(super) fn events(&self) -> usize {
        self.events
    }

    /// Whether nothing is being enriched.
    pub(super) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// The oldest batch, once enriched, with its generation. Cancel safe.
    pub(super) async fn next(&mut self) -> Option<(u64, Vec<Enriched>)> {
        let done = match self.running.join_next().await? {
            Ok(done) => done,
            // Never cancelled while owned: a panic in the pipeline is a bug, raised here.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        self.events -= done.1.len();
        Some(done)
    }
}

/// Enriches a batch, all at once, each event once the tables it needs are
/// ready for its partition; outcomes keep the batch's order.
async fn enrich(
    batch: Vec<OwnedMessage>,
    pipeline: &Pipeline,
    gate: Option<&TableGate>,
) -> Vec<Enriched> {
    futures::future::join_all(batch.into_iter().map(|msg| async move {
        if let Some(gate) = gate {
            gate.wait(msg.partition()).await;
        }
        let timestamp_ms = msg.timestamp().to_millis();
        let outcome = pipeline
            .process(msg.key(), msg.payload(), timestamp_ms)
            .await;
        (msg, outcome)
    }))
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rdkafka::Timestamp;
    use tributary_table_api::MemoryPartitions;

    use super::*;
    use crate::config::EnrichConfig;
    use crate::metrics::EnrichMetrics;

    fn pipeline() -> Arc<Pipeline> {
        let text = "kafka: { brokers: b }\njobs:\n  - name: j\n    input: { topics: [in] }\n    output: { topic: out }\n    dead_letter: { topic: dlq }\n";
        let config = EnrichConfig::parse(text, &[]).unwrap();
        Arc::new(Pipeline::new(
            &config.jobs[0],
            &[],
            1 << 20,
            &EnrichMetrics::default(),
        ))
    }

    fn event(partition: i32, offset: i64) -> OwnedMessage {
        let value = format!("{{\"partition\":{partition},\"offset\":{offset}}}");
        OwnedMessage::new(
            Some(value.into_bytes()),
            None,
            "in".into(),
            Timestamp::NotAvailable,
            partition,
            offset,
            None,
        )
    }

    /// (partition, offset) of each enriched event, and the offsets its output carries.
    fn coordinates(batch: &[Enriched]) -> Vec<(i32, i64)> {
        batch
            .iter()
            .map(|(msg, outcome)| {
                let Outcome::Emit { value, .. } = outcome else {
                    panic!("not enriched: {outcome:?}")
                };
                let value: serde_json::Value = serde_json::from_slice(value).unwrap();
                assert_eq!(value["offset"], msg.offset(), "outcome of another event");
                (msg.partition(), msg.offset())
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn batches_come_back_in_input_order_even_when_a_later_one_is_ready_first() {
        let held = Arc::new(MemoryPartitions::default());
        held.set_ready("customers", 1, true);
        let gate = TableGate::new(held.clone(), vec!["customers".into()], vec![]);
        let mut batches = Batches::new(pipeline(), Some(gate));
        // Partition 0's table is not ready: its events wait; partition 1's do not.
        batches.start(vec![event(0, 10), event(1, 20), event(0, 11)], 1);
        batches.start(vec![event(1, 21)], 1);
        batches.start(vec![], 1);
        assert_eq!(batches.events(), 4);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let waiting = tokio::time::timeout(Duration::from_secs(1), batches.next()).await;
        assert!(waiting.is_err(), "the first batch waits for partition 0");
        held.set_ready("customers", 0, true);
        let (generation, first) = batches.next().await.unwrap();
        assert_eq!(generation, 1);
        assert_eq!(coordinates(&first), [(0, 10), (1, 20), (0, 11)]);
        assert_eq!(batches.events(), 1);
        let (_, second) = batches.next().await.unwrap();
        assert_eq!(coordinates(&second), [(1, 21)]);
        assert!(batches.is_empty());
        assert!(batches.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn each_batch_keeps_the_generation_it_was_read_in() {
        let mut batches = Batches::new(pipeline(), None);
        batches.start(vec![event(0, 1)], 3);
        batches.start(vec![event(0, 2)], 4);
        assert_eq!(batches.next().await.unwrap().0, 3);
        assert_eq!(batches.next().await.unwrap().0, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_runner_stops_its_tasks() {
        let held = Arc::new(MemoryPartitions::default());
        let gate = TableGate::new(held.clone(), vec!["customers".into()], vec![]);
        let pipeline = pipeline();
        let mut batches = Batches::new(pipeline.clone(), Some(gate));
        batches.start(vec![event(0, 1)], 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The waiting task holds a reference to the pipeline until it ends.
        assert_eq!(Arc::strong_count(&pipeline), 3);
        drop(batches);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(Arc::strong_count(&pipeline), 1, "the task was aborted");
    }
}
