//! Writes change events to their topics and stores positions once they are safe.
//!
//! Records are keyed by the primary key (Debezium JSON) and sent to the
//! partition Kafka's murmur2 partitioner picks, so Java producers agree. The
//! events of a table without a key ([`crate::message_key`]) have a null key, go
//! to partition 0 (so they keep their order) of a topic that is not compacted
//! (compaction needs keys), and a delete has no tombstone.
//! Every record gets the next sequence number of the [`TrackedProducer`],
//! which counts acknowledgements as they come. Commit positions go, with the
//! sequence number reached, through an ordered queue to the acknowledger task:
//! a position is stored only after every record sent before it was
//! acknowledged (`acks=all`, idempotent producer). A crash therefore may
//! repeat events, never skip one.
//!
//! With `delivery: exactly_once` the events of every binlog transaction read
//! since the last commit, the position they reach and the consumer-group offset
//! that marks it committed (see [`crate::position_store`]) go into one Kafka
//! transaction, committed every `commit_interval_ms` at a binlog transaction
//! boundary, never in the middle of one.
//!
//! Every wait on the broker is bounded by `kafka.stall_timeout_s`; past it the
//! writer fails with [`CaptureError::Stalled`] and capture starts its Kafka side
//! again from the stored position.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};
use tributary_kafka::tracked::{DeliveryError, Tracker};
use tributary_kafka::{AdminClient, TrackedProducer};
use tributary_proto::debezium_json::{EnvelopeOptions, connect_header_text};
use tributary_proto::json_number::DoubleFormat;
use tributary_proto::partition::partition_for_key;
use tributary_proto::{ChangeEvent, Op};

use crate::change_stream::SchemaChange;
use tributary_kafka::{ClientBuilder, KafkaConfig};

use crate::config::{CaptureConfig, Delivery, Events, TopicsConfig};
use crate::connect_schema;
use crate::error::CaptureError;
use crate::metrics::{CaptureMetrics, TableLabel};
use crate::position_store::{PositionStore, offsets_topic};
use crate::record_encoder::{EncodedRecord, RecordEncoder};
use crate::sink::ChangeSink;
use crate::source_position::{CapturePosition, SourcePosition};
use crate::transaction_topic::{TransactionRecord, TransactionTopic};

/// How many positions may wait for their records' acknowledgement (each a
/// few dozen bytes: the records' bytes are in the producer's queue, bounded by
/// `max_pending_mb`).
const PENDING_CAPACITY: usize = 100_000;
/// The largest `queue.buffering.max.kbytes` librdkafka accepts.
const MAX_PRODUCER_QUEUE_KB: u64 = i32::MAX as u64;
/// Timeout of each transactional call (`init`, `send_offsets`, `commit`, `abort`).
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// A position, safe to store once every record below `sent` is acknowledged.
struct Commit<P> {
    position: CapturePosition<P>,
    sent: u64,
}

struct TopicInfo {
    name: String,
    partitions: u32,
    /// Its `events` counter (looked up once, not per event).
    events: prometheus_client::metrics::counter::Counter,
}

/// The Kafka side of capture, for a source with positions `P`.
pub struct KafkaWriter<P> {
    producer: TrackedProducer,
    /// The sequence number the next record gets: every record sent so far is below it.
    sent: u64,
    admin: AdminClient,
    server_name: String,
    topics_cfg: TopicsConfig,
    /// Tombstones, transaction blocks, schema changes (`events`).
    events: Events,
    /// With `events.extended.headers.enabled`.
    context_headers: Option<ContextHeaders>,
    /// With `events.provide.transaction.metadata`.
    transaction_topic: Option<TransactionTopic>,
    /// Records carry Connect schemas (`converter.schemas.enable`).
    schemas: bool,
    /// How doubles are written (`converter.double.format`).
    doubles: DoubleFormat,
    /// How change events become records.
    encoder: RecordEncoder,
    /// `kafka.replication_factor` of every topic capture creates.
    replication_factor: i32,
    /// Change topics by database, then table.
    topics: HashMap<String, HashMap<String, TopicInfo>>,
    pending: mpsc::Sender<Commit<P>>,
    acker: JoinHandle<Result<(), CaptureError>>,
    store: PositionStore,
    metrics: CaptureMetrics,
    /// Bits of the [`SideTopic`]s already created.
    side_topics_ready: u8,
    /// Kafka transactions, with `delivery: exactly_once`.
    transactions: Option<Transactions<P>>,
    /// Longest wait on the broker (`kafka.stall_timeout_s`).
    stall_timeout: Duration,
    /// The source position last stored (durably: acknowledged, or committed
    /// with its Kafka transaction), for sources that confirm it to the server.
    stored: Arc<watch::Sender<Option<P>>>,
}

/// The state of Kafka transactions (`delivery: exactly_once`).
struct Transactions<P> {
    open: bool,
    last_commit: Instant,
    interval: Duration,
    /// The newest position the open transaction's events reach.
    position: Option<CapturePosition<P>>,
    /// Events were sent after `position`: a binlog transaction is half read, and
    /// the Kafka transaction cannot commit until its end.
    past_position: bool,
    /// The consumer group whose offset marks the committed position.
    group: Arc<ConsumerGroupMetadata>,
}

/// Topics capture writes besides the change topics.
#[derive(Clone, Copy)]
enum SideTopic {
    /// Every DDL statement with its position, kept forever.
    SchemaHistory,
    /// Liveness and position while the source is idle; only the latest matters.
    Heartbeat,
    /// Debezium's BEGIN/END records of each transaction (`provide.transaction.metadata`).
    Transaction,
    /// Debezium's schema change topic (`events.schema.changes.format: debezium`).
    SchemaChanges,
}

impl SideTopic {
    fn name(self, server_name: &str) -> String {
        match self {
            SideTopic::SchemaHistory => format!("{server_name}.schema-history"),
            SideTopic::Heartbeat => format!("{server_name}.heartbeat"),
            SideTopic::Transaction => format!("{server_name}.transaction"),
            SideTopic::SchemaChanges => server_name.to_owned(),
        }
    }

    fn cleanup_policy(self) -> &'static str {
        match self {
            SideTopic::SchemaHistory | SideTopic::Transaction | SideTopic::SchemaChanges => {
                "delete"
            }
            SideTopic::Heartbeat => "compact",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Debezium's context headers (`extended.headers.enabled`): which connector,
/// task and run wrote a record.
struct ContextHeaders {
    /// `__debezium.context.connectorLogicalName`: the server name.
    logical_name: String,
    /// `__debezium.context.runId`: one per capture process.
    run_id: String,
    /// `__debezium.context.connectorName`.
    connector: &'static str,
}

/// The headers of one change record (its tombstone carries the same, as in
/// Debezium): columns written as raw bytes (`source.undecodable_text:
/// base64`), the other key of a key change, the context headers.
fn record_headers(
    event: &ChangeEvent,
    context: Option<&ContextHeaders>,
    doubles: DoubleFormat,
) -> Option<OwnedHeaders> {
    if event.undecodable.is_empty() && event.key_change.is_none() && context.is_none() {
        // Most records: no header list is allocated.
        return None;
    }
    let mut headers = OwnedHeaders::new();
    if !event.undecodable.is_empty() {
        headers = headers
            .insert(Header {
                key: "tributary.undecodable.columns",
                value: Some(event.undecodable.join(",").as_bytes()),
            })
            .insert(Header {
                key: "tributary.undecodable.encoding",
                value: Some("base64"),
            });
    }
    if let Some(change) = &event.key_change {
        let (name, key) = change.header();
        headers = headers.insert(Header {
            key: name,
            value: Some(&connect_header_text(key, doubles)),
        });
    }
    if let Some(context) = context {
        headers = context.add_to(headers);
    }
    Some(headers)
}

impl ContextHeaders {
    /// `headers` with the four context headers added.
    fn add_to(&self, mut headers: OwnedHeaders) -> OwnedHeaders {
        for (key, value) in [
            (
                "__debezium.context.connectorLogicalName",
                self.logical_name.as_str(),
            ),
            ("__debezium.context.taskId", "0"),
            ("__debezium.context.connectorName", self.connector),
            ("__debezium.context.runId", self.run_id.as_str()),
        ] {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        headers
    }
}

/// Capture's producer: idempotent, all acknowledgements, a queue of at most
/// `max_pending_mb` (the user's `kafka.producer` map may tune the rest).
fn producer_config(kafka: &KafkaConfig, max_pending_mb: u64) -> ClientBuilder<'_> {
    let queue_kb = max_pending_mb
        .saturating_mul(1024)
        .clamp(1, MAX_PRODUCER_QUEUE_KB);
    let mut producer = kafka.producer("capture");
    producer
        .set("queue.buffering.max.kbytes", queue_kb.to_string())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", "lz4");
    producer
}

impl<P: SourcePosition> KafkaWriter<P> {
    /// The source position last stored, as it changes: a source that confirms
    /// its progress to the server (PostgreSQL's slot) confirms no further.
    pub fn stored_positions(&self) -> watch::Receiver<Option<P>> {
        self.stored.subscribe()
    }

    /// How this writer encodes its records, for encoding them ahead
    /// ([`ChangeSink::send_encoded`]).
    pub fn record_encoder(&self) -> RecordEncoder {
        self.encoder
    }

    /// Connects to Kafka, creates the positions topic and starts the acknowledger.
    pub async fn connect(
        config: &CaptureConfig,
        metrics: CaptureMetrics,
    ) -> Result<Self, CaptureError> {
        let mut producer_config = producer_config(&config.kafka, config.max_pending_mb);
        let exactly_once = config.delivery == Delivery::ExactlyOnce;
        if exactly_once {
            producer_config.set(
                "transactional.id",
                format!("tributary-capture.{}", config.server_name),
            );
        }
        let producer: TrackedProducer = producer_config.create_with_context(Tracker::default())?;
        let stall_timeout = config.kafka.stall_timeout();
        let store = PositionStore::new(
            producer.clone(),
            &config.kafka,
            &config.server_name,
            stall_timeout,
        )?;
        let transactions = if exactly_once {
            // Fences any earlier producer of this datastream and aborts its open transaction.
            let p = producer.clone();
            blocking(move || p.producer().init_transactions(TRANSACTION_TIMEOUT)).await?;
            Some(Transactions {
                open: false,
                last_commit: Instant::now(),
                interval: config.commit_interval(),
                position: None,
                past_position: false,
                group: Arc::new(store.group_metadata()?),
            })
        } else {
            None
        };
        let admin: AdminClient = config.kafka.admin("capture").create()?;
        let (tx, rx) = mpsc::channel(PENDING_CAPACITY);
        let stored = Arc::new(watch::Sender::new(None));
        let mut writer = KafkaWriter {
            acker: tokio::spawn(acknowledge(
                rx,
                producer.clone(),
                store.clone(),
                config.commit_interval(),
                stall_timeout,
                metrics.clone(),
                stored.clone(),
            )),
            producer,
            sent: 0,
            admin,
            server_name: config.server_name.clone(),
            topics_cfg: config.topics.clone(),
            events: config.events(),
            context_headers: config.events().extended_headers.then(|| ContextHeaders {
                logical_name: config.server_name.clone(),
                run_id: uuid::Uuid::new_v4().to_string(),
                connector: config.events().connector,
            }),
            transaction_topic: config
                .events()
                .transaction_topic
                .then(|| TransactionTopic::new(config.schemas_enabled())),
            schemas: config.schemas_enabled(),
            doubles: config.double_format(),
            encoder: RecordEncoder::new(EnvelopeOptions {
                transaction: config.events().provide_transaction_metadata,
                connector: config.events().connector,
                doubles: config.double_format(),
            }),
            replication_factor: config.kafka.replication_factor,
            topics: HashMap::new(),
            pending: tx,
            store,
            metrics,
            side_topics_ready: 0,
            transactions,
            stall_timeout,
            stored,
        };
        writer
            .ensure_topic(&offsets_topic(&config.server_name), 1, "compact")
            .await?;
        Ok(writer)
    }

    /// Writes `value` to a side topic, keyed by the server name.
    async fn send_to_side_topic(
        &mut self,
        side: SideTopic,
        value: &serde_json::Value,
    ) -> Result<(), CaptureError> {
        let key =
            serde_json::to_vec(&serde_json::json!({ "server": self.server_name })).expect("json");
        let value = serde_json::to_vec(value).expect("json");
        let topic = side.name(&self.server_name);
        self.send_side_record(side, &topic, &key, &value).await
    }

    /// Writes one record to a side topic, `topic` (one partition, created on first use).
    async fn send_side_record(
        &mut self,
        side: SideTopic,
        topic: &str,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), CaptureError> {
        self.send_side_record_with(side, topic, (key, value), None)
            .await
    }

    /// [`Self::send_side_record`] with `headers`.
    async fn send_side_record_with(
        &mut self,
        side: SideTopic,
        topic: &str,
        (key, value): (&[u8], &[u8]),
        headers: Option<OwnedHeaders>,
    ) -> Result<(), CaptureError> {
        self.begin_transaction()?;
        if self.side_topics_ready & side.bit() == 0 {
            self.ensure_topic(topic, 1, side.cleanup_policy()).await?;
            self.side_topics_ready |= side.bit();
        }
        let mut record = BaseRecord::to(topic).key(key).payload(value).partition(0);
        if let Some(headers) = headers {
            record = record.headers(headers);
        }
        self.sent = self.produce(record).await? + 1;
        self.sent_past_position();
        Ok(())
    }

    /// Writes transaction metadata records ([`TransactionTopic`]).
    async fn send_transaction_records(
        &mut self,
        records: Vec<TransactionRecord>,
    ) -> Result<(), CaptureError> {
        let topic = SideTopic::Transaction.name(&self.server_name);
        for record in records {
            self.send_side_record(SideTopic::Transaction, &topic, &record.key, &record.value)
                .await?;
        }
        Ok(())
    }

    fn sent_past_position(&mut self) {
        if let Some(txn) = &mut self.transactions {
            txn.past_position = true;
        }
    }

    fn begin_transaction(&mut self) -> Result<(), CaptureError> {
        if let Some(txn) = &mut self.transactions
            && !txn.open
        {
            self.producer.producer().begin_transaction()?;
            txn.open = true;
        }
        Ok(())
    }

    /// Writes the position and its group offset into the open transaction and commits it.
    async fn commit_transaction(&mut self) -> Result<(), CaptureError> {
        let Some(txn) = &self.transactions else {
            return Ok(());
        };
        if !txn.open {
            return Ok(());
        }
        debug_assert!(!txn.past_position, "a commit inside a binlog transaction");
        let (position, group) = (txn.position.clone(), txn.group.clone());
        if let Some(position) = &position {
            let offset = self.store.save(position).await?;
            let offsets = self.store.group_offsets(offset)?;
            let producer = self.producer.clone();
            blocking(move || {
                producer.producer().send_offsets_to_transaction(
                    &offsets,
                    &group,
                    TRANSACTION_TIMEOUT,
                )
            })
            .await?;
        }
        let producer = self.producer.clone();
        blocking(move || producer.producer().commit_transaction(TRANSACTION_TIMEOUT)).await?;
        let txn = self.transactions.as_mut().expect("checked");
        txn.open = false;
        txn.last_commit = Instant::now();
        txn.position = None;
        if let Some(position) = position {
            self.metrics.committed(&position.source);
            self.stored.send_replace(Some(position.source));
        }
        Ok(())
    }

    /// Aborts the open transaction, if any: what it held is read again from the stored position.
    async fn abort_transaction(&mut self) -> Result<(), CaptureError> {
        let Some(txn) = &mut self.transactions else {
            return Ok(());
        };
        if !txn.open {
            return Ok(());
        }
        txn.open = false;
        txn.position = None;
        txn.past_position = false;
        let producer = self.producer.clone();
        blocking(move || producer.producer().abort_transaction(TRANSACTION_TIMEOUT)).await
    }

    /// Hands a record to the producer, waiting (at most `kafka.stall_timeout_s`)
    /// while its queue is full; returns its sequence number (the caller moves
    /// `sent` past it once it no longer borrows the record's topic).
    async fn produce(&self, record: BaseRecord<'_, [u8], [u8]>) -> Result<u64, CaptureError> {
        self.producer
            .send_counted(record, self.stall_timeout)
            .await
            .map_err(|e| CaptureError::delivery(e, "delivery report"))
    }

    /// Queues a position for the acknowledger, waiting (at most
    /// `kafka.stall_timeout_s`) while its queue is full.
    async fn queue(&self, position: CapturePosition<P>) -> Result<(), CaptureError> {
        let commit = Commit {
            position,
            sent: self.sent,
        };
        match tokio::time::timeout(self.stall_timeout, self.pending.send(commit)).await {
            Ok(Ok(())) => Ok(()),
            // The acknowledger stopped: it failed. Its error is returned by `close`.
            Ok(Err(_)) => Err(CaptureError::Kafka(KafkaError::Canceled)),
            Err(_) => Err(CaptureError::Stalled {
                waiting_for: "room in the acknowledgement queue (deliveries are not being acknowledged)",
                after: self.stall_timeout,
            }),
        }
    }

    /// Creates `name` with `cleanup.policy` = `cleanup` if missing; returns its partition count.
    async fn ensure_topic(
        &mut self,
        name: &str,
        partitions: u32,
        cleanup: &str,
    ) -> Result<u32, CaptureError> {
        let mut topic = NewTopic::new(
            name,
            partitions as i32,
            TopicReplication::Fixed(self.replication_factor),
        )
        .set("cleanup.policy", cleanup);
        if cleanup == "delete" {
            topic = topic.set("retention.ms", "-1");
        }
        for (k, v) in &self.topics_cfg.config {
            topic = topic.set(k, v);
        }
        let opts = AdminOptions::new()
            .operation_timeout(Some(self.stall_timeout))
            .request_timeout(Some(self.stall_timeout));
        for result in self.admin.create_topics([&topic], &opts).await? {
            match result {
                Ok(created) => info!(topic = %created, partitions, "topic created"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => {
                    return Err(CaptureError::Kafka(KafkaError::AdminOp(code))).inspect_err(|e| {
                        warn!(%topic, error = %e, "cannot create topic");
                    });
                }
            }
        }
        self.partition_count(name).await
    }

    async fn partition_count(&self, name: &str) -> Result<u32, CaptureError> {
        let producer = self.producer.clone();
        let topic = name.to_owned();
        tokio::task::spawn_blocking(move || {
            for _ in 0..50 {
                let metadata = producer
                    .producer()
                    .client()
                    .fetch_metadata(Some(&topic), Duration::from_secs(10))?;
                if let Some(t) = metadata.topics().iter().find(|t| t.name() == topic)
                    && !t.partitions().is_empty()
                {
                    return Ok(t.partitions().len() as u32);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(CaptureError::Kafka(KafkaError::MetadataFetch(
                RDKafkaErrorCode::UnknownTopicOrPartition,
            )))
        })
        .await
        .expect("metadata fetch does not panic")
    }

    /// Queues `event` as its record `encoded` (and a tombstone after a
    /// delete, unless `events.tombstones.on.delete` is off).
    async fn send_record(
        &mut self,
        event: &ChangeEvent,
        encoded: EncodedRecord,
    ) -> Result<(), CaptureError> {
        self.begin_transaction()?;
        if let Some(topic) = &mut self.transaction_topic {
            let begin = topic.before_event(event);
            self.send_transaction_records(begin).await?;
        }
        let (db, table) = (event.source.namespace(), &*event.source.table);
        let EncodedRecord { key, value } = encoded;
        let keyed = key.is_some();
        if !self
            .topics
            .get(db)
            .is_some_and(|tables| tables.contains_key(table))
        {
            let name = topic_name(&self.server_name, db, table);
            let cleanup = if keyed { "compact" } else { "delete" };
            let partitions = self
                .ensure_topic(&name, self.topics_cfg.partitions, cleanup)
                .await?;
            let label = TableLabel {
                table: format!("{db}.{table}"),
            };
            let events = self.metrics.events.get_or_create(&label).clone();
            self.topics.entry(db.to_owned()).or_default().insert(
                table.to_owned(),
                TopicInfo {
                    name,
                    partitions,
                    events,
                },
            );
        }
        let topic = &self.topics[db][table];
        let partition = key
            .as_ref()
            .map_or(0, |key| partition_for_key(key, topic.partitions));
        let mut record = BaseRecord::<[u8], [u8]>::to(&topic.name)
            .payload(value.as_slice())
            .partition(partition);
        if let Some(key) = &key {
            record = record.key(key.as_slice());
        }
        let headers = record_headers(event, self.context_headers.as_ref(), self.doubles);
        if let Some(headers) = &headers {
            record = record.headers(headers.clone());
        }
        let mut last = self.produce(record).await?;
        let tombstone_after = event.op == Op::Delete && self.events.tombstones_on_delete;
        if let Some(key) = key.as_ref().filter(|_| tombstone_after) {
            let mut tombstone = BaseRecord::<[u8], [u8]>::to(&topic.name)
                .key(key.as_slice())
                .partition(partition);
            if let Some(headers) = headers {
                tombstone = tombstone.headers(headers);
            }
            last = self.produce(tombstone).await?;
        }
        topic.events.inc();
        self.sent = last + 1;
        self.sent_past_position();
        Ok(())
    }
}

impl<P: SourcePosition> ChangeSink<P> for KafkaWriter<P> {
    /// The stored position, if any.
    async fn stored_position(&self) -> Result<Option<CapturePosition<P>>, CaptureError> {
        self.store.load(self.transactions.is_some()).await
    }

    /// How often the open transaction should be looked at for a due commit
    /// ([`ChangeSink::commit_if_due`]); `None` without transactions.
    fn commit_interval(&self) -> Option<Duration> {
        self.transactions.as_ref().map(|txn| txn.interval)
    }

    /// Queues one change event (and a tombstone after a delete, unless
    /// `events.tombstones.on.delete` is off).
    async fn send(&mut self, event: &ChangeEvent) -> Result<(), CaptureError> {
        let encoded = self.encoder.encode(event);
        self.send_record(event, encoded).await
    }

    /// [`Self::send`], the record having been encoded ahead with
    /// [`KafkaWriter::record_encoder`].
    async fn send_encoded(
        &mut self,
        event: &ChangeEvent,
        encoded: EncodedRecord,
    ) -> Result<(), CaptureError> {
        self.send_record(event, encoded).await
    }

    /// Appends a DDL statement to `<server_name>.schema-history` (kept forever,
    /// one partition), or, described, its records to Debezium's schema change
    /// topic `<server_name>`; nothing when `events.include.schema.changes` is off.
    async fn send_schema_change(&mut self, change: &SchemaChange<P>) -> Result<(), CaptureError> {
        if !self.events.include_schema_changes {
            return Ok(());
        }
        if let Some(described) = &change.described {
            let topic = SideTopic::SchemaChanges.name(&self.server_name);
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            // Debezium's schema change records carry the context headers too.
            let headers = self
                .context_headers
                .as_ref()
                .map(|context| context.add_to(OwnedHeaders::new()));
            for record in described.records(self.events.connector, self.schemas, now_ms) {
                self.send_side_record_with(
                    SideTopic::SchemaChanges,
                    &topic,
                    (&record.key, &record.value),
                    headers.clone(),
                )
                .await?;
            }
            return Ok(());
        }
        let value = serde_json::json!({
            "source": { "server": self.server_name },
            "position": change.position.to_json(),
            "ts_ms": change.position.ts_ms(),
            "databaseName": change.db,
            "ddl": change.ddl,
        });
        self.send_to_side_topic(SideTopic::SchemaHistory, &value)
            .await
    }

    /// Writes a heartbeat and commits its position, so an idle source still
    /// advances the stored position and consumers see capture is alive:
    /// `<server_name>.heartbeat` with the position, or, with
    /// `events.topic.heartbeat.prefix`, Debezium's heartbeat record.
    async fn send_heartbeat(&mut self, position: CapturePosition<P>) -> Result<(), CaptureError> {
        let ts_ms = position.source.ts_ms();
        match &self.events.heartbeat_prefix {
            None => {
                let value = serde_json::json!({
                    "ts_ms": ts_ms,
                    "position": position.source.to_json(),
                });
                self.send_to_side_topic(SideTopic::Heartbeat, &value)
                    .await?;
            }
            Some(prefix) => {
                let topic = format!("{prefix}.{}", self.server_name);
                let (key, value) =
                    connect_schema::heartbeat_record(&self.server_name, ts_ms, self.schemas);
                self.send_side_record(SideTopic::Heartbeat, &topic, &key, &value)
                    .await?;
            }
        }
        self.commit(position).await
    }

    /// Marks a committed transaction: `position` is stored once everything before it is acknowledged.
    async fn commit(&mut self, position: CapturePosition<P>) -> Result<(), CaptureError> {
        if let Some(end) = self
            .transaction_topic
            .as_mut()
            .and_then(TransactionTopic::on_commit)
        {
            self.send_transaction_records(vec![end]).await?;
        }
        let Some(txn) = &mut self.transactions else {
            return self.queue(position).await;
        };
        // Exactly once: the position goes into the same transaction as its events.
        txn.position = Some(position);
        txn.past_position = false;
        self.begin_transaction()?;
        self.commit_if_due().await
    }

    /// Commits the open transaction if it ends at a binlog transaction boundary
    /// and `commit_interval_ms` has passed since the last commit.
    async fn commit_if_due(&mut self) -> Result<(), CaptureError> {
        let due = self.transactions.as_ref().is_some_and(|txn| {
            txn.open
                && txn.position.is_some()
                && !txn.past_position
                && txn.last_commit.elapsed() >= txn.interval
        });
        if due {
            self.commit_transaction().await?;
        }
        Ok(())
    }

    /// Stores `position` right away, before anything else is sent (snapshot start markers).
    async fn store_now(&mut self, position: &CapturePosition<P>) -> Result<(), CaptureError> {
        let Some(txn) = &mut self.transactions else {
            let offset = self.store.save(position).await?;
            self.store.mark_and_wait(offset).await?;
            self.stored.send_replace(Some(position.source.clone()));
            return Ok(());
        };
        txn.position = Some(position.clone());
        txn.past_position = false;
        self.begin_transaction()?;
        self.commit_transaction().await
    }

    /// Waits (up to `timeout`) for the deliveries of the records before the
    /// last position and stores it; records sent after it are not waited for
    /// (the next start sends them again). With transactions, the open one is
    /// committed if it ends at a binlog transaction boundary and `failed` is
    /// false, and aborted otherwise.
    async fn close(mut self, timeout: Duration, failed: bool) -> Result<(), CaptureError> {
        let at_boundary = self
            .transactions
            .as_ref()
            .is_some_and(|txn| txn.position.is_some() && !txn.past_position);
        let committed = if at_boundary && !failed {
            self.commit_transaction().await
        } else {
            self.abort_transaction().await
        };
        drop(self.pending);
        let mut acker = self.acker;
        let acknowledged = match tokio::time::timeout(timeout, &mut acker).await {
            Ok(result) => result.expect("acknowledger does not panic"),
            Err(_) => {
                acker.abort();
                warn!(
                    ?timeout,
                    "deliveries still outstanding at close; the next start re-reads them"
                );
                Ok(())
            }
        };
        committed.and(acknowledged)
    }
}

/// `<server_name>.<db>.<table>`, with characters Kafka does not allow replaced by `_`.
pub fn topic_name(server_name: &str, db: &str, table: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{server_name}.{}.{}", clean(db), clean(table))
}

/// Runs a blocking librdkafka call (transactions, metadata) off the async workers.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, KafkaError> + Send + 'static,
) -> Result<T, CaptureError> {
    Ok(tokio::task::spawn_blocking(call)
        .await
        .expect("a librdkafka call does not panic")?)
}

/// The acknowledger: takes positions in order, waits until the records sent
/// before each are acknowledged, and stores the safe ones (at most one per
/// `interval`). A wait with no delivery report for `stall_timeout` fails it.
async fn acknowledge<P: SourcePosition>(
    mut rx: mpsc::Receiver<Commit<P>>,
    producer: TrackedProducer,
    store: PositionStore,
    interval: Duration,
    stall_timeout: Duration,
    metrics: CaptureMetrics,
    stored: Arc<watch::Sender<Option<P>>>,
) -> Result<(), CaptureError> {
    let mut unsaved: Option<CapturePosition<P>> = None;
    let mut last_save = tokio::time::Instant::now();
    // The offset of the last position stored: marked without waiting while
    // running, and waited for at a clean close.
    let mut last_offset = None;
    let save = |position: CapturePosition<P>| {
        let store = store.clone();
        let metrics = metrics.clone();
        let stored = stored.clone();
        async move {
            let offset = store.save(&position).await?;
            store.mark(offset)?;
            metrics.committed(&position.source);
            stored.send_replace(Some(position.source));
            Ok::<_, CaptureError>(offset)
        }
    };
    loop {
        let next = match &unsaved {
            Some(_) => match tokio::time::timeout_at(last_save + interval, rx.recv()).await {
                Ok(item) => item,
                Err(_) => {
                    last_offset = Some(save(unsaved.take().expect("checked")).await?);
                    last_save = tokio::time::Instant::now();
                    continue;
                }
            },
            None => rx.recv().await,
        };
        let Some(Commit { position, sent }) = next else {
            break;
        };
        producer
            .delivered_below(sent, stall_timeout)
            .await
            .inspect_err(|e| {
                if matches!(e, DeliveryError::Kafka(_)) {
                    metrics.error("kafka");
                }
            })
            .map_err(|e| CaptureError::delivery(e, "delivery report"))?;
        if last_save.elapsed() >= interval {
            last_offset = Some(save(position).await?);
            last_save = tokio::time::Instant::now();
            unsaved = None;
        } else {
            unsaved = Some(position);
        }
    }
    if let Some(position) = unsaved {
        last_offset = Some(save(position).await?);
    }
    if let Some(offset) = last_offset {
        store.mark_and_wait(offset).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_are_kafka_safe() {
        assert_eq!(topic_name("srv", "shop", "users"), "srv.shop.users");
        assert_eq!(topic_name("srv", "my db", "t$1"), "srv.my_db.t_1");
    }
}
