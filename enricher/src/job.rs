//! Runs one job: consume the input, enrich many events at once, write outputs
//! and dead letters in input order, and commit an input offset only after what
//! it produced is acknowledged by the broker (at-least-once).
//!
//! The consumer group splits input partitions between instances; on every
//! assignment the job tells the tables ([`HeldPartitions`]) which partitions it owns, so the
//! co-partitioned local tables hold exactly those, and an event waits until its
//! table partitions have caught up. Outputs carry their source topic, partition
//! and offset in headers, so a consumer can drop the duplicates a crash may cause.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt as _;
use futures::stream::{FuturesOrdered, StreamExt as _};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Message};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use tributary_kafka::ClientBuilder;
use tributary_table_api::HeldPartitions;

use crate::bounds::{self, Bounds, Tracker};
use crate::config::{Delivery, JobConfig, KafkaConfig};
use crate::error::EnrichError;
use crate::headers;
use crate::metrics::{EnrichMetrics, InputLabel, JobLabel, JobMetrics};
use crate::pipeline::{Outcome, Pipeline};
use crate::retry::{self, Delays};
use crate::skip::Skip;
use crate::transactions::Transactions;

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

    fn ready(&self, partition: i32) -> bool {
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

    async fn wait(&self, partition: i32) {
        while !self.ready(partition) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
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
    /// Events in flight.
    pub concurrency: usize,
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

/// Input partitions currently assigned to the job.
type Assigned = Arc<Mutex<BTreeSet<(String, i32)>>>;

/// Consumer context: follows assignments, counts revocations, exports lag from
/// client statistics.
struct JobContext {
    job: String,
    follower: Option<Arc<dyn HeldPartitions>>,
    assigned: Assigned,
    /// Incremented on every revocation: work read before it belongs to an
    /// older generation (an exactly-once job aborts it).
    generation: Arc<AtomicU64>,
    lag: Family<InputLabel, Gauge>,
    job_lag: Gauge,
}

impl JobContext {
    fn owns(&self, tpl: &rdkafka::TopicPartitionList) {
        let partitions: BTreeSet<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect();
        if let Some(follower) = &self.follower {
            follower.follow(&self.job, partitions.iter().map(|(_, p)| *p).collect());
        }
        info!(job = %self.job, partitions = ?partitions, "input partitions assigned");
        *self.assigned.lock().expect("assignment lock") = partitions;
    }
}

impl ClientContext for JobContext {
    fn stats(&self, statistics: Statistics) {
        let mut total = 0;
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                if partition >= 0 && p.consumer_lag >= 0 {
                    let label = InputLabel {
                        job: self.job.clone(),
                        topic: topic.clone(),
                        partition: partition.to_string(),
                    };
                    self.lag.get_or_create(&label).set(p.consumer_lag);
                    total += p.consumer_lag;
                }
            }
        }
        self.job_lag.set(total);
    }
}

impl ConsumerContext for JobContext {
    fn post_rebalance(
        &self,
        _consumer: &rdkafka::consumer::BaseConsumer<Self>,
        rebalance: &Rebalance<'_>,
    ) {
        match rebalance {
            Rebalance::Assign(tpl) => self.owns(tpl),
            Rebalance::Revoke(_) => {
                self.generation.fetch_add(1, Ordering::SeqCst);
                self.assigned.lock().expect("assignment lock").clear();
            }
            Rebalance::Error(e) => error!(job = %self.job, error = %e, "rebalance failed"),
        }
    }
}

/// A record to write for an input record.
struct Record {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    /// Why it is a dead letter or a retry.
    error: Option<String>,
    /// Retry: the attempt it will be, and when it is due (ms since the epoch).
    retry: Option<(u32, i64)>,
}

/// What became of one input record, once its write (if any) is acknowledged.
struct Ack {
    msg: OwnedMessage,
    kind: AckKind,
    generation: u64,
    result: Result<(), KafkaError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckKind {
    Out,
    Dead,
    Skipped(Skip),
    /// Written to the retry topic, for a later attempt.
    Retried,
    /// Its partition moved to another instance mid-flight: neither written nor committed.
    Abandoned,
}

type AckFuture = Pin<Box<dyn Future<Output = Ack> + Send>>;
/// Events being enriched, in input order, with the generation they were read in.
type BatchFuture = Pin<Box<dyn Future<Output = (u64, Vec<Enriched>)> + Send>>;
/// An event and what to write for it.
type Enriched = (OwnedMessage, Outcome);

/// Enriches a batch of events, all at once (lookups overlap), each once the
/// tables it needs are ready for its partition; outcomes keep the input order.
async fn process(
    batch: Vec<OwnedMessage>,
    pipeline: Arc<Pipeline>,
    gate: Option<TableGate>,
) -> Vec<Enriched> {
    let (pipeline, gate) = (&pipeline, &gate);
    futures::future::join_all(batch.into_iter().map(|msg| async move {
        if let Some(gate) = gate {
            gate.wait(msg.partition()).await;
        }
        let outcome = pipeline.process(msg.key(), msg.payload()).await;
        (msg, outcome)
    }))
    .await
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
    producer: FutureProducer,
    assigned: Assigned,
    bounded: Option<Tracker>,
    /// The open transaction (exactly-once, unbounded).
    eos: Option<Transactions>,
    generation: Arc<AtomicU64>,
    summary: JobSummary,
    metrics: JobMetrics,
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
    let assigned = Assigned::default();
    let generation = Arc::new(AtomicU64::new(0));
    let job_lag = setup
        .metrics
        .job_lag_records
        .get_or_create(&JobLabel { job: job.clone() })
        .clone();
    let context = JobContext {
        job: job.clone(),
        follower: setup.follower.clone(),
        assigned: assigned.clone(),
        generation: generation.clone(),
        lag: setup.metrics.lag_records.clone(),
        job_lag,
    };
    let consumer: StreamConsumer<JobContext> = consumer_config(
        &setup.kafka,
        &job,
        &setup.config.group_id(),
        bounds.is_some(),
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
            let (assignment, tracker) = tokio::task::block_in_place(|| {
                let probe: BaseConsumer = setup
                    .kafka
                    .consumer(&format!("enrich.{job}"), &setup.config.group_id())
                    .set("enable.auto.commit", "false")
                    .set("enable.partition.eof", "true")
                    .create()?;
                bounds::plan(&consumer, &probe, &setup.inputs, bounds)
            })?;
            consumer.assign(&assignment)?;
            consumer.context().owns(&assignment);
            info!(%job, ?bounds, "bounded run over every input partition");
            Some(tracker)
        }
    };
    let exactly_once = setup.delivery == Delivery::ExactlyOnce && bounded.is_none();
    let transactional_id = exactly_once.then(|| transactional_id(&setup.config.group_id()));
    let producer: FutureProducer =
        producer_config(&setup.kafka, &job, transactional_id.as_deref()).create()?;
    let eos = match transactional_id {
        Some(id) => {
            info!(%job, transactional_id = %id, "exactly-once: outputs and offsets in Kafka transactions");
            Some(tokio::task::block_in_place(|| {
                Transactions::start(&job, &producer)
            })?)
        }
        None => None,
    };
    let mut runner = Runner {
        metrics: setup.metrics.of_job(&job),
        summary: JobSummary {
            job,
            events_in: 0,
            events_out: 0,
            dead_lettered: 0,
            skipped: 0,
            retried: 0,
            seconds: 0.0,
        },
        setup,
        producer,
        assigned,
        bounded,
        eos,
        generation,
    };
    runner.consume(&consumer, &shutdown).await?;
    if runner.bounded.is_none() && runner.eos.is_none() {
        match consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => {
                warn!(job = %runner.summary.job, error = %e, "final offset commit failed; the last events will be read again")
            }
        }
    }
    info!(summary = ?runner.summary, "job stopped");
    Ok(runner.summary)
}

/// The job's input consumer.
fn consumer_config<'a>(
    kafka: &'a KafkaConfig,
    job: &str,
    group: &str,
    bounded: bool,
) -> ClientBuilder<'a> {
    let mut c = kafka.consumer(&format!("enrich.{job}"), group);
    // Offsets are stored once outputs are acknowledged, and committed in the background.
    c.set("enable.auto.commit", if bounded { "false" } else { "true" })
        .set("enable.auto.offset.store", "false")
        .set("auto.commit.interval.ms", "1000")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("statistics.interval.ms", "5000");
    c
}

/// `<group>.<instance>`: stable across restarts of one instance, so a restarted
/// instance aborts what its previous run left open. The instance is
/// `TRIBUTARY_INSTANCE`, else `HOSTNAME` (a StatefulSet pod's name).
fn transactional_id(group: &str) -> String {
    let instance = std::env::var("TRIBUTARY_INSTANCE")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "0".to_owned());
    format!("{group}.{instance}")
}

/// The job's producer of outputs, dead letters and retries.
fn producer_config<'a>(
    kafka: &'a KafkaConfig,
    job: &str,
    transactional_id: Option<&str>,
) -> ClientBuilder<'a> {
    let mut c = kafka.producer(&format!("enrich.{job}"));
    if let Some(id) = transactional_id {
        c.set("transactional.id", id);
    }
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        // The Java client's partitioner, so keys land where Kafka Streams/Connect expect them.
        .set("partitioner", "murmur2_random");
    c
}

impl Runner {
    async fn consume(
        &mut self,
        consumer: &StreamConsumer<JobContext>,
        shutdown: &CancellationToken,
    ) -> Result<(), EnrichError> {
        let mut in_flight: FuturesOrdered<BatchFuture> = FuturesOrdered::new();
        // Events in `in_flight`.
        let mut enriching = 0;
        let mut acks: FuturesOrdered<AckFuture> = FuturesOrdered::new();
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
            delays.follow(self.generation.load(Ordering::SeqCst));
            let wake = delays.next_due_ms().map(|due| {
                tokio::time::Instant::now() + Duration::from_millis((due - now_ms()).max(0) as u64)
            });
            let idle = in_flight.is_empty() && acks.is_empty();
            if idle && (!reading || self.bounded.as_ref().is_some_and(Tracker::all_done)) {
                drained = true;
                break;
            }
            tokio::select! {
                biased;
                Some(ack) = acks.next(), if !acks.is_empty() => self.on_ack(consumer, ack).await?,
                Some((generation, batch)) = in_flight.next(), if !in_flight.is_empty() && acks.len() < MAX_UNACKED => {
                    enriching -= batch.len();
                    for (msg, outcome) in batch {
                        acks.push_back(self.write(generation, msg, outcome).await);
                    }
                }
                _ = commit_tick.tick(), if self.eos.is_some() => self.commit(consumer)?,
                received = consumer.recv(), if reading && enriching < self.setup.concurrency => {
                    // This message and whatever else the consumer already holds, in
                    // batches of one assignment generation each.
                    // (rdkafka ends a drain at a rebalance event; checking each message keeps
                    // that true whatever the client does.)
                    let mut generation = self.generation.load(Ordering::SeqCst);
                    let (mut batch, mut taken) = (Vec::new(), 0);
                    let mut next = Some(received);
                    while let Some(received) = next {
                        let now = self.generation.load(Ordering::SeqCst);
                        if now != generation {
                            enriching += batch.len();
                            in_flight.extend(self.start(std::mem::take(&mut batch), generation));
                            generation = now;
                        }
                        // A rebalance inside `recv` starts the new assignment unpaused.
                        delays.follow(now);
                        batch.extend(self.admit(consumer, &mut delays, received)?);
                        // Counting what was taken, not what was kept, bounds the time spent here.
                        taken += 1;
                        let room = taken < MAX_BATCH && enriching + batch.len() < self.setup.concurrency;
                        next = if room { consumer.recv().now_or_never() } else { None };
                    }
                    enriching += batch.len();
                    in_flight.extend(self.start(batch, generation));
                    if !in_flight.is_empty() {
                        first_event.get_or_insert_with(Instant::now);
                    }
                }
                () = tokio::time::sleep_until(wake.unwrap_or_else(tokio::time::Instant::now)), if wake.is_some() => {
                    delays.release(consumer, now_ms())?;
                }
                () = shutdown.cancelled(), if reading => reading = false,
                () = &mut grace_over => {
                    warn!(job = %self.summary.job, unacknowledged = enriching + acks.len(), "grace period over; unacknowledged events will be read again");
                    break;
                }
            }
        }
        if drained {
            self.commit(consumer)?; // a transaction cut short by the grace period is left to abort
        }
        self.summary.seconds = first_event.map_or(0.0, |t: Instant| t.elapsed().as_secs_f64());
        Ok(())
    }

    /// Starts enriching `batch`, read in assignment `generation` (nothing to start when empty).
    fn start(&mut self, batch: Vec<OwnedMessage>, generation: u64) -> Option<BatchFuture> {
        if batch.is_empty() {
            return None;
        }
        self.summary.events_in += batch.len() as u64;
        self.metrics.events_in.inc_by(batch.len() as u64);
        let task = tokio::spawn(process(
            batch,
            self.setup.pipeline.clone(),
            self.setup.gate.clone(),
        ));
        Some(Box::pin(async move {
            let enriched = task.await.expect("enriching an event does not panic");
            (generation, enriched)
        }))
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
                warn!(job = %self.summary.job, error = %e, "consumer error");
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
            Some(txn) => tokio::task::block_in_place(|| txn.commit(&self.producer, consumer)),
            None => Ok(()),
        }
    }

    /// After a revocation, aborts the open transaction: everything in it is read
    /// again, by this instance or the partitions' new owner.
    fn abort_if_revoked(&mut self) -> Result<(), EnrichError> {
        let generation = self.generation.load(Ordering::SeqCst);
        match &mut self.eos {
            Some(txn) if txn.generation() != generation => {
                info!(job = %self.summary.job, "partitions revoked: aborting the open transaction");
                tokio::task::block_in_place(|| txn.abort(&self.producer, generation))
            }
            _ => Ok(()),
        }
    }

    /// Starts writing what `outcome` calls for; the returned future resolves when it is acknowledged.
    async fn write(&mut self, generation: u64, msg: OwnedMessage, outcome: Outcome) -> AckFuture {
        let stale = self
            .eos
            .as_ref()
            .is_some_and(|txn| txn.generation() != generation);
        let (kind, record) = match outcome {
            // Read before a revocation: its transaction was aborted, it is read again.
            _ if stale => (AckKind::Abandoned, None),
            Outcome::Emit { key, value } => (
                AckKind::Out,
                Some(Record {
                    key,
                    value,
                    error: None,
                    retry: None,
                }),
            ),
            Outcome::Skip(skip) => (AckKind::Skipped(skip), None),
            Outcome::Dead(reason) => (AckKind::Dead, Some(self.dead_letter(&msg, reason))),
            Outcome::Retry(reason) => self.retry(&msg, reason),
            Outcome::NotHeld { table, partition } => {
                let still_ours = self
                    .assigned
                    .lock()
                    .expect("assignment lock")
                    .contains(&(msg.topic().to_owned(), msg.partition()));
                if still_ours {
                    let reason = format!(
                        "join `{table}`: the key is in table partition {partition}, but the event came from input partition {}: the input must be keyed by the join key and partitioned like the table (or declare the table `mode: global`)",
                        msg.partition()
                    );
                    (AckKind::Dead, Some(self.dead_letter(&msg, reason)))
                } else {
                    (AckKind::Abandoned, None)
                }
            }
        };
        if let Some(txn) = &mut self.eos
            && kind != AckKind::Abandoned
        {
            txn.written(msg.topic(), msg.partition(), msg.offset());
        }
        let Some(record) = record else {
            return Box::pin(std::future::ready(Ack {
                msg,
                kind,
                generation,
                result: Ok(()),
            }));
        };
        let delivery = self.send(self.topic_of(kind), &record, &msg).await;
        let stall_timeout = self.stall_timeout();
        Box::pin(async move {
            let result = match delivery {
                // A report that does not come within the stall timeout fails the job.
                Ok(delivery) => match tokio::time::timeout(stall_timeout, delivery).await {
                    Ok(Ok(Ok(_))) => Ok(()),
                    Ok(Ok(Err((e, _)))) => Err(e),
                    Ok(Err(_)) => Err(KafkaError::Canceled),
                    Err(_) => Err(KafkaError::MessageProduction(
                        RDKafkaErrorCode::MessageTimedOut,
                    )),
                },
                Err(e) => Err(e),
            };
            Ack {
                msg,
                kind,
                generation,
                result,
            }
        })
    }

    /// The dead letter of `msg`: its original key and bytes, with the reason.
    fn dead_letter(&self, msg: &OwnedMessage, reason: String) -> Record {
        Record {
            key: msg.key().map(<[u8]>::to_vec),
            value: msg.payload().unwrap_or_default().to_vec(),
            error: Some(reason),
            retry: None,
        }
    }

    /// A missed event goes to the retry topic, or to the dead-letter topic once
    /// its attempts are used up.
    fn retry(&self, msg: &OwnedMessage, reason: String) -> (AckKind, Option<Record>) {
        let config = self
            .setup
            .config
            .retry
            .as_ref()
            .expect("on_miss: retry is validated to come with a retry topic");
        let made = retry::attempts_made(msg);
        if made >= config.max_attempts {
            let reason = format!("{reason} (after {made} attempts)");
            return (AckKind::Dead, Some(self.dead_letter(msg, reason)));
        }
        let mut record = self.dead_letter(msg, reason);
        record.retry = Some((made + 1, now_ms() + config.delay_ms as i64));
        (AckKind::Retried, Some(record))
    }

    /// Where records of `kind` are written.
    fn topic_of(&self, kind: AckKind) -> &str {
        let config = &self.setup.config;
        match (kind, &config.retry) {
            (AckKind::Out, _) => &config.output.topic,
            (AckKind::Retried, Some(retry)) => &retry.topic,
            _ => &config.dead_letter.topic,
        }
    }

    /// `kafka.stall_timeout_s`: the longest wait on the broker.
    fn stall_timeout(&self) -> Duration {
        Duration::from_secs(self.setup.kafka.stall_timeout_s)
    }

    /// Enqueues a record (waiting while the client's queue is full, at most
    /// `kafka.stall_timeout_s`: then the queue-full error is returned).
    async fn send(
        &self,
        topic: &str,
        record: &Record,
        source: &OwnedMessage,
    ) -> Result<rdkafka::producer::DeliveryFuture, KafkaError> {
        let origin = retry::origin(source);
        let mut headers = OwnedHeaders::new()
            .insert(Header {
                key: headers::SOURCE_TOPIC,
                value: Some(&origin.topic),
            })
            .insert(Header {
                key: headers::SOURCE_PARTITION,
                value: Some(&origin.partition),
            })
            .insert(Header {
                key: headers::SOURCE_OFFSET,
                value: Some(&origin.offset),
            })
            .insert(Header {
                key: headers::JOB,
                value: Some(&self.setup.config.name),
            });
        if let Some(error) = &record.error {
            headers = headers.insert(Header {
                key: headers::ERROR,
                value: Some(error),
            });
        }
        let mut out = FutureRecord::to(topic).payload(&record.value);
        if let Some((attempt, due_ms)) = record.retry {
            let (attempt, due_ms) = (attempt.to_string(), due_ms.to_string());
            headers = headers
                .insert(Header {
                    key: retry::ATTEMPT,
                    value: Some(&attempt),
                })
                .insert(Header {
                    key: retry::NOT_BEFORE,
                    value: Some(&due_ms),
                });
            // The partition it came from: the instance holding that partition retries it.
            out = out.partition(source.partition());
        }
        let mut record_out = out.headers(headers);
        if let Some(key) = &record.key {
            record_out = record_out.key(key);
        }
        let mut record = record_out;
        let deadline = tokio::time::Instant::now() + self.stall_timeout();
        loop {
            match self.producer.send_result(record) {
                Ok(delivery) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if tokio::time::Instant::now() < deadline =>
                {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Counts an acknowledged record and lets its input offset be committed.
    async fn on_ack(
        &mut self,
        consumer: &StreamConsumer<JobContext>,
        ack: Ack,
    ) -> Result<(), EnrichError> {
        let Ack {
            msg,
            mut kind,
            generation,
            result,
        } = ack;
        if self
            .eos
            .as_ref()
            .is_some_and(|txn| txn.generation() != generation)
        {
            return Ok(()); // written in an aborted transaction: read again
        }
        if let Err(e) = result {
            let topic = self.topic_of(kind).to_owned();
            if kind == AckKind::Out && rejected_for_size(&e) {
                // The enriched event is too big for the broker: keep the original instead.
                let record = self.dead_letter(
                    &msg,
                    format!("the enriched event was rejected by the broker: {e}"),
                );
                let delivery = self.send(self.topic_of(AckKind::Dead), &record, &msg).await;
                let written = match delivery {
                    Ok(d) => d
                        .await
                        .map_err(|_| KafkaError::Canceled)
                        .and_then(|r| r.map(|_| ()).map_err(|(e, _)| e)),
                    Err(e) => Err(e),
                };
                written.map_err(|source| EnrichError::Produce {
                    job: self.summary.job.clone(),
                    topic: self.setup.config.dead_letter.topic.clone(),
                    source: Box::new(source),
                })?;
                kind = AckKind::Dead;
            } else {
                return Err(EnrichError::Produce {
                    job: self.summary.job.clone(),
                    topic: topic.clone(),
                    source: Box::new(e),
                });
            }
        }
        let metrics = &self.metrics;
        match kind {
            AckKind::Out => {
                self.summary.events_out += 1;
                metrics.events_out.inc();
                if let Some(ts) = msg.timestamp().to_millis() {
                    let seconds = (now_ms() - ts).max(0) as f64 / 1000.0;
                    metrics.latency_seconds.observe(seconds);
                }
            }
            AckKind::Dead => {
                self.summary.dead_lettered += 1;
                metrics.dead_lettered.inc();
            }
            AckKind::Skipped(skip) => {
                self.summary.skipped += 1;
                metrics.skipped(skip).inc();
            }
            AckKind::Retried => {
                self.summary.retried += 1;
                metrics.retried.inc();
            }
            AckKind::Abandoned => return Ok(()),
        }
        match (&mut self.bounded, &self.eos) {
            (Some(tracker), _) => tracker.acked(msg.topic(), msg.partition(), msg.offset()),
            (None, Some(_)) => {} // the offset is committed with the transaction
            (None, None) => {
                if let Err(e) = consumer.store_offset(msg.topic(), msg.partition(), msg.offset()) {
                    // The partition was revoked meanwhile: its new owner reads the event again.
                    info!(job = %self.summary.job, error = %e, "offset not stored");
                }
            }
        }
        Ok(())
    }
}

/// The broker refused the record for its size: retrying cannot help.
fn rejected_for_size(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidRecord
        )
    )
}
