//! Runs one job: consume the input, enrich many events at once, write outputs
//! and dead letters in input order, and commit an input offset only after what
//! it produced is acknowledged by the broker (at-least-once), or in the
//! transaction that wrote it (exactly-once).
//!
//! The consumer group splits input partitions between instances; on every
//! assignment the job tells the tables which partitions it owns, so the
//! co-partitioned local tables hold exactly those, and an event waits until its
//! table partitions have caught up. Outputs carry their source topic, partition
//! and offset in headers, so a consumer can drop the duplicates a crash may cause.
//!
//! The parts, each with one job and its own tests:
//! - [`gate`]: which table partitions an event waits for;
//! - [`assignment`]: the partitions held through rebalances, and their generation;
//! - [`batches`]: the batch runner, outcomes in input order, tasks owned;
//! - [`routing`]: which topic and record an outcome becomes (no I/O);
//! - [`writer`]: sending records, counted, within the stall timeout;
//! - [`acks`]: the written events awaiting their records, in input order, and
//!   counting what became of them;
//! - [`in_flight`]: the bytes of input held, against `max_in_flight_mb`;
//! - [`clients`]: the consumer and producer settings.
//!
//! This module's [`Runner`] drives them: read, enrich, write, acknowledge, commit.

mod acks;
mod assignment;
mod batches;
mod clients;
mod gate;
mod in_flight;
mod routing;
mod writer;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt as _;
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, OwnedMessage};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use tributary_kafka::tracked::{self, Refusals};
use tributary_kafka::{BaseConsumer, StreamConsumer, TrackedProducer};

use self::acks::{Ack, Sent, Tally, Unacked, Wait, Written};
use self::assignment::{Assignment, JobContext, partitions_of};
use self::batches::Batches;
pub use self::gate::TableGate;
use self::in_flight::InFlight;
use self::routing::{AckKind, Ownership, Record, Routing};
use self::writer::{Writer, rejected_for_size};
use crate::bounds::{self, Bounds, Tracker};
use crate::config::{Delivery, JobConfig, KafkaConfig};
use crate::error::EnrichError;
use crate::metrics::{EnrichMetrics, JobLabel};
use crate::pipeline::{Outcome, Pipeline};
use crate::retry::{self, Delays};
use crate::transactions::Transactions;
use std::sync::Arc;
use tributary_table_api::HeldPartitions;

/// Most outputs awaiting acknowledgement before the job stops reading.
const MAX_UNACKED: usize = 20_000;

/// Most events one enriching task takes: a task per batch of what the consumer
/// has at hand spreads the JSON work over the cores without a spawn per event.
const MAX_BATCH: usize = 64;

/// What a finished (bounded or stopped) job did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JobSummary {
    /// Job name.
    pub job: String,
    /// Events read.
    pub events_in: u64,
    /// Enriched events written.
    pub events_out: u64,
    /// Events written to the dead-letter topic.
    pub dead_lettered: u64,
    /// Events that produced nothing (deletes, inner-join drops).
    pub skipped: u64,
    /// Events written to the retry topic (an event retried twice counts twice).
    pub retried: u64,
    /// Seconds from the first event read to the last one acknowledged.
    pub seconds: f64,
}

/// Everything a job needs to run.
#[derive(Clone)]
pub struct JobSetup {
    /// The job's config.
    pub config: JobConfig,
    /// Kafka settings.
    pub kafka: KafkaConfig,
    /// Input topics with their partition counts.
    pub inputs: Vec<(String, u32)>,
    /// The enrichment steps.
    pub pipeline: Arc<Pipeline>,
    /// Events being enriched at once.
    pub concurrency: usize,
    /// Bytes of input events held at once (read, not yet acknowledged).
    pub max_in_flight_bytes: u64,
    /// Time to finish in-flight events after shutdown.
    pub grace: Duration,
    /// Delivery guarantee (bounded runs commit nothing and ignore it).
    pub delivery: Delivery,
    /// Time between transaction commits (exactly-once).
    pub commit_interval: Duration,
    /// Tables to wait for, when the job joins local tables.
    pub gate: Option<TableGate>,
    /// Where the job names its partitions for co-partitioned tables.
    pub follower: Option<Arc<dyn HeldPartitions>>,
    /// Metrics.
    pub metrics: EnrichMetrics,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Runs a job until `shutdown` (then drains within the grace period) or, when
/// bounded, until every partition reaches its end.
pub async fn run(
    setup: JobSetup,
    bounds: Option<Bounds>,
    shutdown: CancellationToken,
) -> Result<JobSummary, EnrichError> {
    let job = setup.config.name.clone();
    let input_partitions = setup.inputs.iter().map(|(_, n)| *n).max().unwrap_or(1);
    let assignment = Assignment::new(&job, input_partitions, setup.follower.clone());
    let job_lag = setup
        .metrics
        .job_lag_records
        .get_or_create(&JobLabel { job: job.clone() })
        .clone();
    let context = JobContext {
        assignment: assignment.clone(),
        lag: setup.metrics.lag_records.clone(),
        job_lag,
    };
    let consumer: StreamConsumer<JobContext> = clients::consumer_config(
        &setup.kafka,
        &job,
        &setup.config.group_id(),
        bounds.is_some(),
        setup.max_in_flight_bytes,
    )
    .create_with_context(context)?;
    let bounded = match bounds {
        None => {
            let topics: Vec<&str> = setup.inputs.iter().map(|(t, _)| t.as_str()).collect();
            consumer.subscribe(&topics)?;
            info!(%job, group = %setup.config.group_id(), ?topics, "joining the consumer group");
            None
        }
        Some(bounds) => {
            let (plan, tracker) = tokio::task::block_in_place(|| {
                let probe: BaseConsumer = setup
                    .kafka
                    .consumer(&format!("enrich.{job}"), &setup.config.group_id())
                    .set("enable.auto.commit", "false")
                    .set("enable.partition.eof", "true")
                    .create()?;
                bounds::plan(&consumer, &probe, &setup.inputs, bounds)
            })?;
            consumer.assign(&plan)?;
            assignment.assign(partitions_of(&plan));
            info!(%job, ?bounds, "bounded run over every input partition");
            Some(tracker)
        }
    };
    let exactly_once = setup.delivery == Delivery::ExactlyOnce && bounded.is_none();
    let transactional_id =
        exactly_once.then(|| clients::transactional_id(&setup.config.group_id()));
    let producer: TrackedProducer = clients::producer_config(
        &setup.kafka,
        &job,
        transactional_id.as_deref(),
        setup.max_in_flight_bytes,
    )
    .create_with_context(tracked::Tracker::new(Refusals::Kept))?;
    let eos = match transactional_id {
        Some(id) => {
            info!(%job, transactional_id = %id, "exactly-once: outputs and offsets in Kafka transactions");
            Some(tokio::task::block_in_place(|| {
                Transactions::start(&job, producer.producer())
            })?)
        }
        None => None,
    };
    let mut runner = Runner {
        in_flight: InFlight::new(
            setup.max_in_flight_bytes,
            setup.metrics.of_job(&job).in_flight_bytes,
        ),
        tally: Tally::new(&job, setup.metrics.of_job(&job)),
        unacked: Unacked::default(),
        routing: Routing::new(&setup.config),
        writer: Writer::new(producer, Duration::from_secs(setup.kafka.stall_timeout_s)),
        batches: Batches::new(setup.pipeline.clone(), setup.gate.clone()),
        setup,
        assignment,
        bounded,
        eos,
    };
    runner.consume(&consumer, &shutdown).await?;
    if runner.bounded.is_none() && runner.eos.is_none() {
        match consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => {
                warn!(%job, error = %e, "final offset commit failed; the last events will be read again")
            }
        }
    }
    info!(summary = ?runner.tally.summary, "job stopped");
    Ok(runner.tally.summary)
}

/// Stops fetching a partition a bounded run is done with.
fn pause(consumer: &StreamConsumer<JobContext>, msg: &OwnedMessage) {
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition(msg.topic(), msg.partition());
    if let Err(e) = consumer.pause(&tpl) {
        warn!(error = %e, "cannot pause a finished partition");
    }
}

/// A running job.
struct Runner {
    setup: JobSetup,
    assignment: Assignment,
    batches: Batches,
    in_flight: InFlight,
    routing: Routing,
    writer: Writer,
    bounded: Option<Tracker>,
    /// The open transaction (exactly-once, unbounded).
    eos: Option<Transactions>,
    tally: Tally,
    unacked: Unacked,
}

impl Runner {
    async fn consume(
        &mut self,
        consumer: &StreamConsumer<JobContext>,
        shutdown: &CancellationToken,
    ) -> Result<(), EnrichError> {
        let grace = self.setup.grace;
        let grace_over = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        tokio::pin!(grace_over);
        let (mut reading, mut drained) = (true, false);
        let mut first_event = None;
        let mut commit_tick = tokio::time::interval(self.setup.commit_interval);
        let mut delays = Delays::default();
        loop {
            self.abort_if_revoked()?;
            delays.follow(self.assignment.generation());
            let wake = delays.next_due_ms().map(|due| {
                tokio::time::Instant::now() + Duration::from_millis((due - now_ms()).max(0) as u64)
            });
            let idle = self.batches.is_empty() && self.unacked.is_empty();
            let waits_for = self.unacked.waits_for();
            if idle && (!reading || self.bounded.as_ref().is_some_and(Tracker::all_done)) {
                drained = true;
                break;
            }
            tokio::select! {
                biased;
                low = done(&self.writer, waits_for), if waits_for.is_some() => {
                    let low = low.map_err(|(kind, e)| self.produce_error(kind, e))?;
                    self.acknowledge(consumer, low).await?;
                }
                Some((generation, batch)) = self.batches.next(), if !self.batches.is_empty() && self.unacked.len() < MAX_UNACKED => {
                    // One clock read for the batch: its events are routed within microseconds.
                    let now = now_ms();
                    for (msg, outcome) in batch {
                        let written = self.write(generation, msg, outcome, now).await;
                        self.unacked.push(written);
                    }
                }
                _ = commit_tick.tick(), if self.eos.is_some() => self.commit(consumer)?,
                received = consumer.recv(), if reading && self.has_room() => {
                    // This message and whatever else the consumer already holds, in
                    // batches of one assignment generation each.
                    // (rdkafka ends a drain at a rebalance event; checking each message keeps
                    // that true whatever the client does.)
                    let mut generation = self.assignment.generation();
                    let (mut batch, mut taken) = (Vec::new(), 0);
                    let mut next = Some(received);
                    while let Some(received) = next {
                        let now = self.assignment.generation();
                        if now != generation {
                            self.start(std::mem::take(&mut batch), generation);
                            generation = now;
                        }
                        // A rebalance inside `recv` starts the new assignment unpaused.
                        delays.follow(now);
                        if let Some(msg) = self.admit(consumer, &mut delays, received)? {
                            self.in_flight.took(&msg);
                            batch.push(msg);
                        }
                        // Counting what was taken, not what was kept, bounds the time spent here.
                        taken += 1;
                        let room = taken < MAX_BATCH
                            && self.batches.events() + batch.len() < self.setup.concurrency
                            && self.in_flight.has_room();
                        next = if room { consumer.recv().now_or_never() } else { None };
                    }
                    self.start(batch, generation);
                    if !self.batches.is_empty() {
                        first_event.get_or_insert_with(Instant::now);
                    }
                }
                () = tokio::time::sleep_until(wake.unwrap_or_else(tokio::time::Instant::now)), if wake.is_some() => {
                    delays.release(consumer, now_ms())?;
                }
                () = shutdown.cancelled(), if reading => reading = false,
                () = &mut grace_over => {
                    let unacknowledged = self.batches.events() + self.unacked.len();
                    warn!(job = %self.setup.config.name, unacknowledged, "grace period over; unacknowledged events will be read again");
                    break;
                }
            }
        }
        if drained {
            self.commit(consumer)?; // a transaction cut short by the grace period is left to abort
        }
        self.tally.summary.seconds =
            first_event.map_or(0.0, |t: Instant| t.elapsed().as_secs_f64());
        Ok(())
    }

    /// Whether another event may be read: fewer than `concurrency` being
    /// enriched, and less than `max_in_flight_mb` held.
    fn has_room(&self) -> bool {
        self.batches.events() < self.setup.concurrency && self.in_flight.has_room()
    }

    /// Starts enriching `batch`, read in assignment `generation`.
    fn start(&mut self, batch: Vec<OwnedMessage>, generation: u64) {
        self.tally.read(batch.len());
        self.batches.start(batch, generation);
    }

    /// The event to enrich in a received message, if any: consumer errors are
    /// logged, a message past the end of a bounded run pauses its partition, and
    /// a retry that is not due yet is held back.
    fn admit(
        &self,
        consumer: &StreamConsumer<JobContext>,
        delays: &mut Delays,
        received: KafkaResult<BorrowedMessage<'_>>,
    ) -> Result<Option<OwnedMessage>, EnrichError> {
        let msg = match received {
            Ok(msg) => msg.detach(),
            Err(e) => {
                warn!(job = %self.setup.config.name, error = %e, "consumer error");
                return Ok(None);
            }
        };
        if self
            .bounded
            .as_ref()
            .is_some_and(|t| t.is_beyond(msg.topic(), msg.partition(), msg.offset()))
        {
            pause(consumer, &msg); // past the end of a bounded run
            return Ok(None);
        }
        if self
            .setup
            .config
            .retry
            .as_ref()
            .is_some_and(|r| r.topic == msg.topic())
        {
            if delays.holds(&msg) {
                return Ok(None);
            }
            if let Some(due) = retry::due_ms(&msg).filter(|due| *due > now_ms()) {
                delays.hold(consumer, &msg, due)?;
                return Ok(None);
            }
        }
        Ok(Some(msg))
    }

    /// Commits the open transaction, if any.
    fn commit(&mut self, consumer: &StreamConsumer<JobContext>) -> Result<(), EnrichError> {
        match &mut self.eos {
            Some(txn) => {
                tokio::task::block_in_place(|| txn.commit(self.writer.producer(), consumer))
            }
            None => Ok(()),
        }
    }

    /// After a revocation, aborts the open transaction: everything in it is read
    /// again, by this instance or the partitions' new owner.
    fn abort_if_revoked(&mut self) -> Result<(), EnrichError> {
        let generation = self.assignment.generation();
        match &mut self.eos {
            Some(txn) if txn.generation() != generation => {
                info!(job = %self.setup.config.name, "partitions revoked: aborting the open transaction");
                tokio::task::block_in_place(|| txn.abort(self.writer.producer(), generation))
            }
            _ => Ok(()),
        }
    }

    /// Whether work read in `generation` belongs to an aborted transaction.
    fn stale(&self, generation: u64) -> bool {
        self.eos
            .as_ref()
            .is_some_and(|txn| txn.generation() != generation)
    }

    /// Writes what `outcome` calls for at `now_ms` (the record is queued, not
    /// yet acknowledged).
    async fn write(
        &mut self,
        generation: u64,
        msg: OwnedMessage,
        outcome: Outcome,
        now_ms: i64,
    ) -> Written {
        let ownership = if self.stale(generation) {
            Ownership::Stale
        } else {
            Ownership::Current
        };
        let holds = || self.assignment.holds(msg.topic(), msg.partition());
        let (kind, record) = self.routing.route(&msg, outcome, ownership, holds, now_ms);
        if let Some(txn) = &mut self.eos
            && kind != AckKind::Abandoned
        {
            txn.written(msg.topic(), msg.partition(), msg.offset());
        }
        let sent = match record {
            Some(record) => match self.send(kind, &record, &msg).await {
                Ok(seq) => Sent::Counted(seq),
                Err(e) => Sent::Refused(e),
            },
            None => Sent::Nothing,
        };
        Written {
            msg,
            kind,
            generation,
            sent,
        }
    }

    /// Enqueues `record`, written for `source`, to the topic of `kind`; its
    /// sequence number. A retry goes to the partition its event came from: the
    /// instance holding that partition retries it.
    async fn send(
        &self,
        kind: AckKind,
        record: &Record,
        source: &OwnedMessage,
    ) -> Result<u64, KafkaError> {
        let headers = self.routing.headers(record, source);
        let partition = record.retry.map(|_| source.partition());
        self.writer
            .send(self.routing.topic_of(kind), record, headers, partition)
            .await
    }

    /// Acknowledges, in input order, every event done now that the
    /// producer's watermark is `low`.
    async fn acknowledge(
        &mut self,
        consumer: &StreamConsumer<JobContext>,
        low: u64,
    ) -> Result<(), EnrichError> {
        let mut refused = self.writer.take_refused(low);
        let now = now_ms();
        while let Some(ack) = self.unacked.next_done(low, &mut refused) {
            self.on_ack(consumer, ack, now).await?;
        }
        Ok(())
    }

    /// Counts an event acknowledged at `now_ms` and lets its input offset be committed.
    async fn on_ack(
        &mut self,
        consumer: &StreamConsumer<JobContext>,
        ack: Ack,
        now_ms: i64,
    ) -> Result<(), EnrichError> {
        let Ack {
            msg,
            mut kind,
            generation,
            result,
        } = ack;
        self.in_flight.released(&msg);
        if self.stale(generation) {
            return Ok(()); // written in an aborted transaction: read again
        }
        if let Err(e) = result {
            if kind != AckKind::Out || !rejected_for_size(&e) {
                return Err(self.produce_error(kind, e));
            }
            // The enriched event is too big for the broker: keep the original instead.
            let reason = format!("the enriched event was rejected by the broker: {e}");
            let record = routing::dead_letter(&msg, reason);
            let headers = self.routing.headers(&record, &msg);
            self.writer
                .send_awaited(self.routing.topic_of(AckKind::Dead), &record, headers)
                .await
                .map_err(|e| self.produce_error(AckKind::Dead, e))?;
            kind = AckKind::Dead;
        }
        if !self.tally.acknowledged(kind, &msg, now_ms) {
            return Ok(());
        }
        match (&mut self.bounded, &self.eos) {
            (Some(tracker), _) => tracker.acked(msg.topic(), msg.partition(), msg.offset()),
            (None, Some(_)) => {} // the offset is committed with the transaction
            (None, None) => {
                if let Err(e) = consumer.store_offset(msg.topic(), msg.partition(), msg.offset()) {
                    // The partition was revoked meanwhile: its new owner reads the event again.
                    info!(job = %self.setup.config.name, error = %e, "offset not stored");
                }
            }
        }
        Ok(())
    }

    /// The job's error for a record of `kind` the broker did not take.
    fn produce_error(&self, kind: AckKind, source: KafkaError) -> EnrichError {
        EnrichError::Produce {
            job: self.setup.config.name.clone(),
            topic: self.routing.topic_of(kind).to_owned(),
            source: Box::new(source),
        }
    }
}

/// The producer's watermark once the oldest unacknowledged event is done (at
/// once when it waits for no record); an error, with the kind of record
/// waited for, when the watermark has not moved for the stall timeout.
/// Cancel safe.
async fn done(writer: &Writer, wait: Option<Wait>) -> Result<u64, (AckKind, KafkaError)> {
    match wait {
        // The runner's branch is disabled when no event waits.
        None => std::future::pending().await,
        Some(Wait::Ready(low)) => Ok(low),
        Some(Wait::Record { seq, kind, since }) => {
            tokio::time::timeout_at(since + writer.stall_timeout(), writer.done_past(seq))
                .await
                .unwrap_or(Err(KafkaError::MessageProduction(
                    RDKafkaErrorCode::MessageTimedOut,
                )))
                .map_err(|e| (kind, e))
        }
    }
}
