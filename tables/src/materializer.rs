//! Follows change topics into the store.
//!
//! One thread per consumer: a consumer for `partitioned` tables and an assigned
//! consumer for `global` tables (every partition). Partitioned tables are split
//! between instances by the tables' consumer group ([`Materializer::start`]), or
//! follow the partitions an owner names through a [`Follower`]
//! ([`Materializer::start_following`]: an enricher job's input partitions). On assignment a partition resumes right after the
//! offset stored in RocksDB, so an instance that keeps its disk re-reads
//! nothing. Records are applied in `WriteBatch`es of up to `batch_max_records`,
//! each carrying the offsets it covers. Record values may be Tributary/Debezium
//! envelopes (`c`/`r`/`u` store `after`, `d` deletes) or plain JSON rows;
//! tombstones delete. A record that cannot be applied is logged, counted and
//! skipped: bad data never stops a table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::BorrowedMessage;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use tributary_kafka::ClientBuilder;
use tributary_proto::debezium_json;
use tributary_proto::gtid::{AppliedGtids, Gtid};

use crate::config::{TableMode, TablesConfig};
use crate::error::TableError;
use crate::follower::Follower;
use crate::key_codec;
use crate::local_table::LocalTable;
use crate::metrics::{PartitionLabel, TableLabel, TablesMetrics};
use crate::progress::Progress;
use crate::store::{ApplyBatch, Store};

/// How often lag, readiness and size metrics are refreshed.
const STATS_INTERVAL: Duration = Duration::from_secs(2);

/// Topic → table name, and back.
#[derive(Debug, Default)]
struct Routes {
    table_of_topic: HashMap<String, String>,
    topic_of_table: HashMap<String, String>,
}

/// Everything a consumer thread shares with lookups.
#[derive(Clone)]
struct Shared {
    store: Arc<Store>,
    progress: Arc<Progress>,
    routes: Arc<Routes>,
    metrics: TablesMetrics,
    /// A client of its own for topic ends: on a consuming client's connection the
    /// request would queue behind a pending fetch (up to `fetch.wait.max.ms`).
    watermarks: Arc<BaseConsumer>,
}

/// The running materialization of every configured table.
pub struct Materializer {
    store: Arc<Store>,
    tables: Vec<Arc<LocalTable>>,
    progress: Arc<Progress>,
    workers: Vec<JoinHandle<Result<(), TableError>>>,
}

impl Materializer {
    /// Opens the store, waits for the topics to exist and starts the consumer
    /// threads; `partitioned` tables join the tables' consumer group.
    pub async fn start(
        config: &TablesConfig,
        metrics: TablesMetrics,
        shutdown: CancellationToken,
    ) -> Result<Self, TableError> {
        Self::start_with(config, metrics, shutdown, None).await
    }

    /// Like [`Materializer::start`], but `partitioned` tables hold exactly the
    /// partitions wanted through `follower` (none until told).
    pub async fn start_following(
        config: &TablesConfig,
        metrics: TablesMetrics,
        shutdown: CancellationToken,
        follower: Follower,
    ) -> Result<Self, TableError> {
        Self::start_with(config, metrics, shutdown, Some(follower)).await
    }

    async fn start_with(
        config: &TablesConfig,
        metrics: TablesMetrics,
        shutdown: CancellationToken,
        follower: Option<Follower>,
    ) -> Result<Self, TableError> {
        let store = Arc::new(Store::open(&config.data_dir, &config.rocksdb)?);
        let progress = Arc::new(Progress::default());
        let mut routes = Routes::default();
        for t in &config.tables {
            routes
                .table_of_topic
                .insert(t.topic.clone(), t.name.clone());
            routes
                .topic_of_table
                .insert(t.name.clone(), t.topic.clone());
        }
        let watermarks: Arc<BaseConsumer> = Arc::new(consumer_config(config, None).create()?);
        let topics: Vec<String> = config.tables.iter().map(|t| t.topic.clone()).collect();
        let (stop, probe) = (shutdown.clone(), watermarks.clone());
        let counts = tokio::task::spawn_blocking(move || partition_counts(&probe, &topics, &stop))
            .await
            .expect("metadata fetch does not panic")?;
        let shared = Shared {
            store: store.clone(),
            progress: progress.clone(),
            routes: Arc::new(routes),
            metrics: metrics.clone(),
            watermarks,
        };

        let tables = config
            .tables
            .iter()
            .map(|t| {
                Arc::new(LocalTable::new(
                    &t.name,
                    &t.topic,
                    counts[&t.topic],
                    store.clone(),
                    progress.clone(),
                    metrics.clone(),
                ))
            })
            .collect();

        let mut workers = Vec::new();
        let of_mode = |mode| {
            config
                .tables
                .iter()
                .filter(move |t| t.mode == mode)
                .map(|t| t.topic.as_str())
        };
        let partitioned: Vec<&str> = of_mode(TableMode::Partitioned).collect();
        if !partitioned.is_empty()
            && let Some(follower) = follower
        {
            let consumer: BaseConsumer = consumer_config(config, None).create()?;
            info!(topics = ?partitioned, "partitioned tables follow their owners' partitions");
            let follow = Follow {
                follower,
                topics: partitioned.iter().map(|t| (*t).to_owned()).collect(),
                held: BTreeSet::new(),
            };
            workers.push(spawn_worker(
                "tables-following",
                consumer,
                shared.clone(),
                config.batch_max_records,
                Some(follow),
                shutdown.clone(),
            )?);
        } else if !partitioned.is_empty() {
            let context = GroupContext {
                shared: shared.clone(),
            };
            let consumer: BaseConsumer<GroupContext> =
                consumer_config(config, Some(&config.group_id)).create_with_context(context)?;
            progress.await_group();
            consumer.subscribe(&partitioned)?;
            info!(topics = ?partitioned, group = %config.group_id, "joining the consumer group for partitioned tables");
            workers.push(spawn_worker(
                "tables-partitioned",
                consumer,
                shared.clone(),
                config.batch_max_records,
                None,
                shutdown.clone(),
            )?);
        }
        let global: Vec<&str> = of_mode(TableMode::Global).collect();
        if !global.is_empty() {
            let consumer: BaseConsumer = consumer_config(config, None).create()?;
            let mut all = TopicPartitionList::new();
            for topic in &global {
                for partition in 0..counts[*topic] as i32 {
                    all.add_partition(topic, partition);
                }
            }
            consumer.assign(&resume_positions(&shared, &all)?)?;
            info!(topics = ?global, "materializing every partition of global tables");
            workers.push(spawn_worker(
                "tables-global",
                consumer,
                shared,
                config.batch_max_records,
                None,
                shutdown,
            )?);
        }
        Ok(Materializer {
            store,
            tables,
            progress,
            workers,
        })
    }

    /// The store every table lives in.
    pub fn store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// The tables being materialized.
    pub fn tables(&self) -> &[Arc<LocalTable>] {
        &self.tables
    }

    /// Held partitions and their readiness.
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    /// Waits for the consumer threads to stop (after shutdown), flushes the store so the
    /// next start opens it without replaying its log, and returns the first error.
    pub async fn join(self) -> Result<(), TableError> {
        let store = self.store;
        tokio::task::spawn_blocking(move || {
            let mut result = Ok(());
            for worker in self.workers {
                let outcome = worker.join().expect("materializer thread does not panic");
                if result.is_ok() {
                    result = outcome;
                }
            }
            result.and_then(|()| store.flush())
        })
        .await
        .expect("join does not panic")
    }
}

/// A materializer's consumer, in `group` or (assigned, global tables) in none.
fn consumer_config<'a>(config: &'a TablesConfig, group: Option<&str>) -> ClientBuilder<'a> {
    // Assigned (global) consumers never join this group; librdkafka wants an id all the same.
    let group = group.map_or_else(|| format!("{}.assigned", config.group_id), str::to_owned);
    let mut c = config.kafka.consumer("tables", &group);
    c.set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        // Faster failure detection than Kafka's 45 s default; with Tansu it also
        // shortens the first group assignment from ~23 s to a few seconds.
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000");
    c
}

/// Partition counts of `topics`, waiting (and saying so) for topics that do not exist yet.
fn partition_counts(
    consumer: &BaseConsumer,
    topics: &[String],
    shutdown: &CancellationToken,
) -> Result<HashMap<String, u32>, TableError> {
    let mut counts = HashMap::new();
    for topic in topics {
        let mut announced = false;
        loop {
            let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
            let partitions = metadata
                .topics()
                .first()
                .map_or(0, |t| t.partitions().len());
            if partitions > 0 {
                counts.insert(topic.clone(), partitions as u32);
                break;
            }
            if !announced {
                warn!(%topic, "waiting for the topic to exist");
                announced = true;
            }
            if shutdown.is_cancelled() {
                return Err(TableError::Kafka(rdkafka::error::KafkaError::Canceled));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    Ok(counts)
}

/// Where each partition of `tpl` resumes: right after its stored offset, or at the beginning.
fn resume_positions(
    shared: &Shared,
    tpl: &TopicPartitionList,
) -> Result<TopicPartitionList, TableError> {
    let mut positions = TopicPartitionList::new();
    for element in tpl.elements() {
        let (topic, partition) = (element.topic(), element.partition());
        let Some(table) = shared.routes.table_of_topic.get(topic) else {
            continue;
        };
        let stored = shared.store.stored_offset(table, partition)?;
        let next = stored.map_or(0, |o| o + 1);
        let offset = stored.map_or(Offset::Beginning, |o| Offset::Offset(o + 1));
        positions.add_partition_offset(topic, partition, offset)?;
        let gtids = shared.store.stored_gtids(table, partition)?;
        shared.progress.assign(table, partition, next, gtids);
        info!(%table, partition, next_offset = next, "partition assigned; resuming from the stored offset");
    }
    Ok(positions)
}

/// Consumer context of the group consumer: resumes assigned partitions from RocksDB.
struct GroupContext {
    shared: Shared,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                match resume_positions(&self.shared, tpl).map(|p| consumer.assign(&p)) {
                    Ok(Ok(())) => self.shared.progress.group_assigned(),
                    Ok(Err(e)) => error!(error = %e, "cannot assign partitions"),
                    Err(e) => error!(error = %e, "cannot read stored offsets"),
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                for element in tpl.elements() {
                    if let Some(table) = self.shared.routes.table_of_topic.get(element.topic()) {
                        release(&self.shared, table, element.partition());
                    }
                }
                if let Err(e) = consumer.unassign() {
                    error!(error = %e, "cannot unassign partitions");
                }
            }
            other => error!(error = ?other, "rebalance failed"),
        }
    }
}

/// Stops holding a partition (its rows stay on disk for a later hand-back).
fn release(shared: &Shared, table: &str, partition: i32) {
    shared.progress.revoke(table, partition);
    shared
        .metrics
        .ready
        .get_or_create(&PartitionLabel::new(table, partition))
        .set(0);
    info!(%table, partition, "partition released");
}

fn spawn_worker<C: ConsumerContext + 'static>(
    name: &str,
    consumer: BaseConsumer<C>,
    shared: Shared,
    batch_max: usize,
    follow: Option<Follow>,
    shutdown: CancellationToken,
) -> Result<JoinHandle<Result<(), TableError>>, TableError> {
    let worker = Worker {
        consumer,
        shared,
        batch_max,
        follow,
        known_keys: HashMap::new(),
    };
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || worker.run(&shutdown))
        .map_err(|e| TableError::Corrupt {
            table: name.to_owned(),
            problem: format!("cannot start thread: {e}"),
        })
}

/// The partitioned topics of a following worker and the partitions it holds.
struct Follow {
    follower: Follower,
    topics: Vec<String>,
    held: BTreeSet<i32>,
}

struct Worker<C: ConsumerContext + 'static> {
    consumer: BaseConsumer<C>,
    shared: Shared,
    batch_max: usize,
    follow: Option<Follow>,
    /// Key columns already recorded per table and partition.
    known_keys: HashMap<String, HashMap<i32, Vec<String>>>,
}

impl<C: ConsumerContext + 'static> Worker<C> {
    fn run(mut self, shutdown: &CancellationToken) -> Result<(), TableError> {
        let mut last_stats = Instant::now() - STATS_INTERVAL;
        while !shutdown.is_cancelled() {
            self.follow_owners()?;
            self.observe_ends();
            self.apply_batch()?;
            if last_stats.elapsed() >= STATS_INTERVAL {
                self.refresh_stats();
                last_stats = Instant::now();
            }
        }
        info!("materializer stopped");
        Ok(())
    }

    /// Takes on the partitions owners newly want and lets go of those they no longer do.
    fn follow_owners(&mut self) -> Result<(), TableError> {
        let Some(follow) = &mut self.follow else {
            return Ok(());
        };
        let Some(wanted) = follow.follower.take_change() else {
            return Ok(());
        };
        let of = |partitions: &mut dyn Iterator<Item = &i32>| {
            let mut tpl = TopicPartitionList::new();
            for partition in partitions {
                for topic in &follow.topics {
                    tpl.add_partition(topic, *partition);
                }
            }
            tpl
        };
        let released = of(&mut follow.held.difference(&wanted));
        if released.count() > 0 {
            self.consumer.incremental_unassign(&released)?;
            for element in released.elements() {
                let table = &self.shared.routes.table_of_topic[element.topic()];
                release(&self.shared, table, element.partition());
            }
        }
        let taken = of(&mut wanted.difference(&follow.held));
        if taken.count() > 0 {
            self.consumer
                .incremental_assign(&resume_positions(&self.shared, &taken)?)?;
        }
        follow.held = wanted;
        Ok(())
    }

    /// Records the topic end of newly assigned partitions (the readiness target).
    fn observe_ends(&self) {
        for (table, partition) in self.shared.progress.missing_ends() {
            let topic = &self.shared.routes.topic_of_table[&table];
            match self
                .shared
                .watermarks
                .fetch_watermarks(topic, partition, Duration::from_secs(5))
            {
                Ok((_, high)) => self.shared.progress.set_end(&table, partition, high),
                Err(e) => warn!(%table, partition, error = %e, "cannot read the topic end yet"),
            }
        }
    }

    /// Polls up to one batch of records and applies them atomically with their offsets.
    fn apply_batch(&mut self) -> Result<(), TableError> {
        let (store, routes) = (self.shared.store.clone(), self.shared.routes.clone());
        let mut batch = store.batch();
        // (table, partition) → what the batch applies to it; table names borrowed from the routes.
        let mut last: BTreeMap<(&str, i32), BatchOfPartition> = BTreeMap::new();
        let mut timeout = Duration::from_millis(100);
        for _ in 0..self.batch_max {
            let msg = match self.consumer.poll(timeout) {
                None => break,
                Some(Err(e)) => {
                    warn!(error = %e, "consumer error");
                    break;
                }
                Some(Ok(msg)) => msg,
            };
            timeout = Duration::ZERO;
            let Some(table) = routes.table_of_topic.get(msg.topic()) else {
                continue;
            };
            let applied = apply_record(&mut self.known_keys, &mut batch, table, &msg)?;
            let entry = last.entry((table.as_str(), msg.partition())).or_default();
            entry.last_offset = msg.offset();
            entry.records += 1;
            match applied {
                Ok(Some(gtid)) => entry.gtids.apply(gtid),
                Ok(None) => {}
                Err(reason) => {
                    self.shared
                        .metrics
                        .bad_records
                        .get_or_create(&TableLabel {
                            table: table.clone(),
                        })
                        .inc();
                    warn!(%table, topic = msg.topic(), partition = msg.partition(), offset = msg.offset(), %reason, "skipping a record that cannot be applied");
                }
            }
        }
        if last.is_empty() {
            return Ok(());
        }
        for ((table, partition), applied) in &mut last {
            batch.offset(table, *partition, applied.last_offset)?;
            if !applied.gtids.is_empty() {
                // Domains this batch did not touch keep their newest GTID.
                let mut all = self
                    .shared
                    .progress
                    .of_partition(table, *partition)
                    .map(|p| p.gtids)
                    .unwrap_or_default();
                all.merge(&applied.gtids);
                batch.gtids(table, *partition, &all)?;
                applied.gtids = all;
            }
        }
        batch.commit()?;
        for ((table, partition), applied) in last {
            // A batch without GTIDs (plain rows, snapshots) keeps the partition's.
            let gtids = if applied.gtids.is_empty() {
                self.shared
                    .progress
                    .of_partition(table, partition)
                    .map(|p| p.gtids)
                    .unwrap_or_default()
            } else {
                applied.gtids
            };
            self.shared
                .progress
                .applied(table, partition, applied.last_offset + 1, gtids);
            self.shared
                .metrics
                .applied
                .get_or_create(&PartitionLabel::new(table, partition))
                .inc_by(applied.records);
        }
        Ok(())
    }

    fn refresh_stats(&self) {
        let metrics = &self.shared.metrics;
        for (table, topic) in &self.shared.routes.topic_of_table {
            for (partition, progress) in self.shared.progress.of_table(table) {
                let label = PartitionLabel::new(table, partition);
                metrics
                    .ready
                    .get_or_create(&label)
                    .set(i64::from(progress.ready));
                if let Ok((_, high)) = self.shared.watermarks.fetch_watermarks(
                    topic,
                    partition,
                    Duration::from_secs(1),
                ) {
                    self.shared.progress.set_latest_end(table, partition, high);
                    metrics
                        .lag_records
                        .get_or_create(&label)
                        .set((high - progress.next_offset).max(0));
                }
            }
        }
        let (disk, memory) = self.shared.store.size_and_memory();
        metrics.disk_bytes.set(disk);
        metrics.memory_bytes.set(memory);
    }
}

/// What one batch applies to one partition.
#[derive(Default)]
struct BatchOfPartition {
    last_offset: i64,
    records: u64,
    gtids: AppliedGtids,
}

/// Adds one record to the batch, returning the source GTID of its change if it
/// names one. The outer error is a storage failure (fatal); the inner one a
/// record that cannot be applied (skipped).
fn apply_record(
    known_keys: &mut HashMap<String, HashMap<i32, Vec<String>>>,
    batch: &mut ApplyBatch<'_>,
    table: &str,
    msg: &BorrowedMessage<'_>,
) -> Result<Result<Option<Gtid>, String>, TableError> {
    let partition = msg.partition();
    let Some(raw_key) = msg.key() else {
        return Ok(Err("record has no key".into()));
    };
    let key: Value = match serde_json::from_slice(raw_key) {
        Ok(key) => key,
        Err(e) => return Ok(Err(format!("key is not JSON: {e}"))),
    };
    let (columns, values): (Vec<String>, Vec<Value>) = match key {
        Value::Object(map) => map.into_iter().unzip(),
        scalar => (vec!["key".to_owned()], vec![scalar]),
    };
    let encoded = match key_codec::encode(&values) {
        Ok(encoded) => encoded,
        Err(e) => return Ok(Err(format!("key: {e}"))),
    };
    if known_keys.get(table).and_then(|t| t.get(&partition)) != Some(&columns) {
        batch.key_columns(table, partition, &columns)?;
        known_keys
            .entry(table.to_owned())
            .or_default()
            .insert(partition, columns);
    }
    let Some(payload) = msg.payload() else {
        batch.delete(table, partition, &encoded)?;
        return Ok(Ok(None));
    };
    let change = match row_of(payload) {
        Ok(change) => change,
        Err(reason) => return Ok(Err(reason)),
    };
    match change.row {
        Some(row) => batch.upsert(table, partition, &encoded, &row)?,
        None => batch.delete(table, partition, &encoded)?,
    }
    Ok(Ok(change.gtid))
}

/// What a record value does to its row.
#[derive(Debug, PartialEq)]
struct RowChange {
    /// The row JSON to store; `None` deletes.
    row: Option<Vec<u8>>,
    /// The GTID of the source transaction (change events of MariaDB sources).
    gtid: Option<Gtid>,
}

/// The row a record value stores and the GTID it comes from.
fn row_of(payload: &[u8]) -> Result<RowChange, String> {
    let value: Value =
        serde_json::from_slice(payload).map_err(|e| format!("value is not JSON: {e}"))?;
    // Neither a change event nor one wrapped with its schema.
    let plain = value.as_object().is_some_and(|m| {
        let wrapped = m.contains_key("schema") && m.contains_key("payload");
        !(m.contains_key("op") || wrapped)
    });
    let gtid = if plain {
        None
    } else {
        let event = value.get("payload").unwrap_or(&value);
        event
            .pointer("/source/gtid")
            .and_then(Value::as_str)
            .and_then(|g| g.parse().ok())
    };
    let row = match debezium_json::row_after(value)? {
        // A plain row is stored as it came.
        Some(_) if plain => Some(payload.to_vec()),
        Some(row) => Some(serde_json::to_vec(&row).expect("JSON serializes")),
        None => None,
    };
    Ok(RowChange { row, gtid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_from_envelopes_plain_rows_and_bad_values() {
        let row = |s: &str| row_of(s.as_bytes()).map(|c| c.row);
        assert_eq!(
            row(r#"{"op":"c","after":{"id":1},"before":null}"#)
                .unwrap()
                .unwrap(),
            br#"{"id":1}"#
        );
        assert_eq!(
            row(r#"{"op":"u","before":{"id":1},"after":{"id":1,"x":2}}"#)
                .unwrap()
                .unwrap(),
            br#"{"id":1,"x":2}"#
        );
        assert_eq!(
            row(r#"{"op":"d","before":{"id":1},"after":null}"#).unwrap(),
            None
        );
        assert_eq!(
            row(r#"{"schema":{},"payload":{"op":"r","after":{"id":3}}}"#)
                .unwrap()
                .unwrap(),
            br#"{"id":3}"#
        );
        assert_eq!(
            row(r#"{"id":5,"name":"plain"}"#).unwrap().unwrap(),
            br#"{"id":5,"name":"plain"}"#
        );
        assert_eq!(row("null").unwrap(), None);
        assert!(row(r#"{"op":"x"}"#).unwrap_err().contains("unknown op"));
        assert!(row(r#"{"op":"c","after":null}"#).is_err());
        assert!(row("[1]").is_err());
        assert!(row("{oops").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn change_events_carry_their_source_gtid() {
        let gtid = |s: &str| row_of(s.as_bytes()).unwrap().gtid.map(|g| g.to_string());
        assert_eq!(
            gtid(r#"{"op":"c","after":{"id":1},"source":{"gtid":"0-1-42"}}"#).as_deref(),
            Some("0-1-42")
        );
        assert_eq!(
            gtid(
                r#"{"schema":{},"payload":{"op":"d","before":{"id":1},"source":{"gtid":"2-3-4"}}}"#
            )
            .as_deref(),
            Some("2-3-4")
        );
        assert_eq!(gtid(r#"{"op":"r","after":{"id":1},"source":{}}"#), None);
        assert_eq!(
            gtid(r#"{"id":1,"source":{"gtid":"0-1-1"}}"#),
            None,
            "a plain row"
        );
    }
}
