//! Follows change topics into the store.
//!
//! One thread per consumer: a consumer for `partitioned` tables and an assigned
//! consumer for `global` tables (every partition). Partitioned tables are split
//! between instances by the tables' consumer group ([`Materializer::start`]), or
//! follow the partitions an owner names through a [`Follower`]
//! ([`Materializer::start_following`]: an enricher job's input partitions). On assignment a partition resumes right after the
//! offset stored in RocksDB, so an instance that keeps its disk re-reads
//! nothing. Records are applied in `WriteBatch`es of up to `batch_max_records`
//! and `batch_max_mb` (which also bounds each consumer's prefetch), each
//! carrying the offsets it covers. Record values may be Tributary/Debezium
//! envelopes (`c`/`r`/`u` store `after`, `d` deletes) or plain JSON rows;
//! tombstones delete. A record that cannot be applied is logged, counted and
//! skipped: bad data never stops a table.
//!
//! Records are applied by [`apply`](crate::apply): keys are normalised
//! ([`record_key`](crate::record_key)). A global table's rows go to its one
//! keyspace ([`global_rows`](crate::global_rows)). A partitioned table's topic is
//! sampled before it starts ([`partition_check`]), and every record is checked
//! against the table's partitioner: a misplaced record is counted, logged at
//! ERROR and makes its partition not ready, since lookups would miss it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use tributary_kafka::BaseConsumer;
use tributary_kafka::ClientBuilder;

use crate::applied_log::{LogOfBatch, Mark};
use crate::apply::{Applier, Layout, Record};
use crate::config::{TableMode, TablesConfig};
use crate::error::TableError;
use crate::follower::Follower;
use crate::history::VersionRule;
use crate::local_table::{LocalTable, Partitioning, SharedShape};
use crate::metrics::{PartitionLabel, TableLabel, TablesMetrics};
use crate::partition_check;
use crate::progress::Progress;
use crate::store::{Keyspace, Store};
use crate::unavailable_fill::Filled;

/// How often lag, readiness and size metrics are refreshed.
const STATS_INTERVAL: Duration = Duration::from_secs(2);

/// Topic → table name, and back; how each table keeps its rows.
#[derive(Debug, Default)]
struct Routes {
    table_of_topic: HashMap<String, String>,
    topic_of_table: HashMap<String, String>,
    layout_of_table: HashMap<String, Layout>,
    /// How each table's keys are written, shared with its lookups.
    shape_of_table: HashMap<String, SharedShape>,
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
        // Rows kept encoded for the lookup API and as jobs' joins read them,
        // by the store, which stops serving a row's entries when it writes
        // the row.
        let (encoded, joined) = config.derived_rows_bytes();
        let store = Arc::new(
            Store::open(&config.data_dir, &config.rocksdb)?.with_derived_rows(encoded, joined),
        );
        let progress = Arc::new(Progress::default());
        let watermarks: Arc<BaseConsumer> = Arc::new(consumer_config(config, None).create()?);
        let topics: Vec<String> = config.tables.iter().map(|t| t.topic.clone()).collect();
        let (stop, probe) = (shutdown.clone(), watermarks.clone());
        let counts = tokio::task::spawn_blocking(move || partition_counts(&probe, &topics, &stop))
            .await
            .expect("metadata fetch does not panic")?;
        prepare_layouts(&store, config, &counts)?;
        check_partitioning(config, &counts).await?;
        let mut routes = Routes::default();
        for t in &config.tables {
            routes
                .table_of_topic
                .insert(t.topic.clone(), t.name.clone());
            routes
                .topic_of_table
                .insert(t.name.clone(), t.topic.clone());
            let partitioning = (t.mode == TableMode::Partitioned).then(|| Partitioning::of(t));
            let partitions = counts[&t.topic];
            routes.layout_of_table.insert(
                t.name.clone(),
                Layout {
                    partitioning,
                    partitions,
                    fill_unavailable: t.fill_unavailable_values,
                    versioned: t.versioned.as_ref().map(VersionRule::of),
                    key: t.key.clone(),
                },
            );
            routes
                .shape_of_table
                .insert(t.name.clone(), SharedShape::default());
        }
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
                    t,
                    counts[&t.topic],
                    store.clone(),
                    progress.clone(),
                    metrics.clone(),
                    shared.routes.shape_of_table[&t.name].clone(),
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
                BatchLimits::of(config),
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
                BatchLimits::of(config),
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
                BatchLimits::of(config),
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

/// librdkafka's default `queued.max.messages.kbytes`: `batch_max_mb` lowers it.
const DEFAULT_PREFETCH_KB: u64 = 65_536;

/// A materializer's consumer, in `group` or (assigned, global tables) in none;
/// it prefetches at most `batch_max_mb` (which also bounds each fetch).
fn consumer_config<'a>(config: &'a TablesConfig, group: Option<&str>) -> ClientBuilder<'a> {
    // Assigned (global) consumers never join this group; librdkafka wants an id all the same.
    let group = group.map_or_else(|| format!("{}.assigned", config.group_id), str::to_owned);
    let prefetch_kb = (config.batch_max_mb.saturating_mul(1024)).clamp(1, DEFAULT_PREFETCH_KB);
    let mut c = config.kafka.consumer("tables", &group);
    c.set("queued.max.messages.kbytes", prefetch_kb.to_string())
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        // Faster failure detection than Kafka's 45 s default; with Tansu it also
        // shortens the first group assignment from ~23 s to a few seconds.
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000");
    c
}

/// Rebuilds a table from its topic when its rows are not laid out as its mode
/// wants (a global table stored per partition, by an earlier version or while
/// it was partitioned, or a partitioned table that was global), or when it
/// becomes versioned or dates its versions otherwise (its history is built
/// from the topic). A table no longer versioned loses its history.
fn prepare_layouts(
    store: &Store,
    config: &TablesConfig,
    counts: &HashMap<String, u32>,
) -> Result<(), TableError> {
    let holds_rows = |table: &str| {
        store
            .partitions(table)
            .into_iter()
            .try_fold(false, |found, p| {
                Ok::<_, TableError>(found || store.has_rows(table, Keyspace::Partition(p))?)
            })
    };
    for t in &config.tables {
        let stale = match t.mode {
            TableMode::Global if store.has_global(&t.name) => false,
            TableMode::Global => holds_rows(&t.name)?,
            TableMode::Partitioned => store.has_global(&t.name),
        };
        if stale {
            warn!(table = %t.name, mode = ?t.mode, "the stored rows are laid out for the other mode (or by an earlier version): rebuilding the table from its topic");
            store.drop_table(&t.name)?;
        }
        let dating = t.versioned.as_ref().map(|v| VersionRule::of(v).dating());
        if store.dating(&t.name)? != dating {
            match &dating {
                Some(dating) => {
                    if holds_rows(&t.name)? {
                        warn!(table = %t.name, %dating, "the table is now versioned (or dates its versions otherwise): rebuilding it and its history from its topic");
                        store.drop_table(&t.name)?;
                    }
                    store.record_dating(&t.name, dating)?;
                }
                None => {
                    info!(table = %t.name, "the table is no longer versioned: removing its history");
                    store.drop_history(&t.name)?;
                }
            }
        }
        if t.mode == TableMode::Global {
            store.ensure_global(&t.name, counts[&t.topic])?;
        }
    }
    Ok(())
}

/// Refuses to start a table whose topic's first records have no keys, or (a
/// partitioned table) disagree with its partitioner and key format ([`partition_check`]).
async fn check_partitioning(
    config: &TablesConfig,
    counts: &HashMap<String, u32>,
) -> Result<(), TableError> {
    if config.tables.is_empty() {
        return Ok(());
    }
    let (config, counts) = (config.clone(), counts.clone());
    tokio::task::spawn_blocking(move || {
        for line in partition_check::check_tables(&config, &counts)? {
            info!("{line}");
        }
        Ok(())
    })
    .await
    .expect("the partitioning check does not panic")
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
                return Err(TableError::Kafka(KafkaError::Canceled));
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
        let log = shared.store.stored_log(table, partition)?;
        shared.progress.assign(table, partition, next, log);
        if let Some(t) = shared.store.stored_stream_time(table, partition)? {
            shared.progress.set_stream_time(table, partition, t);
        }
        info!(%table, partition, next_offset = next, "partition assigned; resuming from the stored offset");
    }
    Ok(positions)
}

/// Consumer context of the group consumer: resumes assigned partitions from RocksDB.
struct GroupContext {
    shared: Shared,
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        tributary_kafka::logging::log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tributary_kafka::logging::error(&error, reason);
    }
}

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
    limits: BatchLimits,
    follow: Option<Follow>,
    shutdown: CancellationToken,
) -> Result<JoinHandle<Result<(), TableError>>, TableError> {
    let worker = Worker {
        consumer,
        shared,
        limits,
        follow,
        applier: Applier::default(),
        open_transactions: HashMap::new(),
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
    limits: BatchLimits,
    follow: Option<Follow>,
    /// Key shapes already recorded per table and partition.
    applier: Applier,
    /// The transaction a batch cut by its limits ended inside, per table and
    /// partition: not yet whole for reads that wait for it.
    open_transactions: HashMap<(String, i32), Mark>,
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
        let (mut records, mut bytes) = (0, 0);
        // Whether the batch took everything the consumer had fetched.
        let mut drained = false;
        while !self.limits.full(records, bytes) {
            let msg = match self.consumer.poll(timeout) {
                None => {
                    drained = true;
                    break;
                }
                Some(Err(e)) => {
                    warn!(error = %e, "consumer error");
                    break;
                }
                Some(Ok(msg)) => msg,
            };
            timeout = Duration::ZERO;
            records += 1;
            bytes += (msg.key_len() + msg.payload_len()) as u64;
            let Some(table) = routes.table_of_topic.get(msg.topic()) else {
                continue;
            };
            let layout = &routes.layout_of_table[table];
            let shape = &routes.shape_of_table[table];
            let record = Record {
                partition: msg.partition(),
                key: msg.key(),
                payload: msg.payload(),
                timestamp_ms: msg.timestamp().to_millis().unwrap_or(0),
                offset: msg.offset(),
            };
            let entry = last
                .entry((table.as_str(), msg.partition()))
                .or_insert_with(|| {
                    // Usually none is open: no key to build then.
                    let open = (!self.open_transactions.is_empty())
                        .then(|| {
                            self.open_transactions
                                .remove(&(table.clone(), msg.partition()))
                        })
                        .flatten();
                    let mut entry = BatchOfPartition::continuing(open);
                    if layout.versioned.is_some() {
                        entry.stream_time =
                            self.shared.progress.stream_time(table, msg.partition());
                    }
                    entry
                });
            let applied = self.applier.apply(
                shape,
                &mut batch,
                table,
                layout,
                record,
                &mut entry.stream_time,
            )?;
            entry.last_offset = msg.offset();
            entry.records += 1;
            match applied {
                Ok(applied) => {
                    if let Some(mark) = applied.mark {
                        entry.log.record(mark);
                    }
                    entry.versions_removed += applied.versions_removed as u64;
                    if applied.superseded {
                        self.shared
                            .metrics
                            .superseded_records
                            .get_or_create(&TableLabel {
                                table: table.clone(),
                            })
                            .inc();
                    }
                    if let Some(expected) = applied.misplaced {
                        entry.misplaced += 1;
                        self.misplaced(table, layout, &msg, expected);
                    }
                    self.count_unavailable(table, &msg, &applied.unavailable);
                }
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
        if drained {
            // Transactions left open in partitions this batch did not touch are whole.
            for ((table, partition), open) in self.open_transactions.drain() {
                let held = routes
                    .topic_of_table
                    .get_key_value(&table)
                    .and_then(|(name, _)| {
                        let progress = self.shared.progress.of_partition(name, partition)?;
                        Some((name.as_str(), progress.next_offset))
                    });
                if let Some((name, next_offset)) = held {
                    last.insert(
                        (name, partition),
                        BatchOfPartition {
                            last_offset: next_offset - 1,
                            ..BatchOfPartition::continuing(Some(open))
                        },
                    );
                }
            }
        }
        if last.is_empty() {
            return Ok(());
        }
        for ((table, partition), applied) in &mut last {
            batch.offset(table, *partition, applied.last_offset)?;
            if let Some(t) = applied.stream_time {
                batch.stream_time(table, *partition, t)?;
            }
            if let Some(open) = applied.log.finish(drained) {
                self.open_transactions
                    .insert(((*table).to_owned(), *partition), open);
            }
            if !applied.log.applied.is_empty() {
                // Domains and transactions this batch did not touch are kept.
                let mut all = self
                    .shared
                    .progress
                    .of_partition(table, *partition)
                    .map(|p| p.log)
                    .unwrap_or_default();
                all.merge(&applied.log.applied);
                batch.log(table, *partition, &all)?;
                applied.log.applied = all;
            }
        }
        batch.commit()?;
        for ((table, partition), applied) in last {
            if applied.misplaced > 0 {
                self.shared
                    .progress
                    .misplaced(table, partition, applied.misplaced);
            }
            if let Some(t) = applied.stream_time {
                self.shared.progress.set_stream_time(table, partition, t);
            }
            if applied.versions_removed > 0 {
                self.shared
                    .metrics
                    .versions_removed
                    .get_or_create(&TableLabel {
                        table: table.to_owned(),
                    })
                    .inc_by(applied.versions_removed);
            }
            // A batch that names no position (plain rows, snapshots) keeps the partition's.
            let log = if applied.log.applied.is_empty() {
                self.shared
                    .progress
                    .of_partition(table, partition)
                    .map(|p| p.log)
                    .unwrap_or_default()
            } else {
                applied.log.applied
            };
            self.shared
                .progress
                .applied(table, partition, applied.last_offset + 1, log);
            self.shared
                .metrics
                .applied
                .get_or_create(&PartitionLabel::new(table, partition))
                .inc_by(applied.records);
        }
        Ok(())
    }

    /// Counts the placeholders a record's row held; one left unfilled is a
    /// row not whole in the table, said with where it came from.
    fn count_unavailable(&self, table: &str, msg: &BorrowedMessage<'_>, counts: &Filled) {
        let label = TableLabel {
            table: table.to_owned(),
        };
        let metrics = &self.shared.metrics;
        if counts.filled > 0 {
            metrics
                .unavailable_values_filled
                .get_or_create(&label)
                .inc_by(counts.filled.into());
        }
        if counts.unfilled > 0 {
            metrics
                .unavailable_values_unfilled
                .get_or_create(&label)
                .inc_by(counts.unfilled.into());
            warn!(%table, topic = msg.topic(), partition = msg.partition(), offset = msg.offset(), values = counts.unfilled,
                "a row keeps the placeholder of values the source did not send: the table holds no earlier value of the key to fill them from (its earlier changes were never applied here, or the update changed the key)");
        }
    }

    /// Counts a record of a partitioned table that is not on the partition its
    /// partitioner gives its key, and says so (at ERROR: lookups miss it).
    fn misplaced(&self, table: &str, layout: &Layout, msg: &BorrowedMessage<'_>, expected: i32) {
        let counter = self
            .shared
            .metrics
            .misplaced_records
            .get_or_create(&PartitionLabel::new(table, msg.partition()));
        counter.inc();
        let count = counter.get();
        // Every one is counted; the first ones and then one in 10,000 are logged.
        if count <= 5 || count.is_multiple_of(10_000) {
            let partitioning = layout
                .partitioning
                .map(Partitioning::describe)
                .unwrap_or_default();
            error!(
                %table,
                topic = msg.topic(),
                partition = msg.partition(),
                offset = msg.offset(),
                key = %String::from_utf8_lossy(msg.key().unwrap_or_default()),
                expected_partition = expected,
                misplaced_so_far = count,
                "a record is not on the partition `{partitioning}` gives its key: lookups would miss it, so the partition is not ready; set the table's partitioner and key_format to the producer's, or declare it `mode: global`"
            );
        }
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
        for (table, layout) in &self.shared.routes.layout_of_table {
            if layout.versioned.is_some() {
                let label = TableLabel {
                    table: table.clone(),
                };
                let bytes = self.shared.store.history_bytes(table);
                metrics
                    .history_bytes
                    .get_or_create(&label)
                    .set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
        }
        let (disk, memory) = self.shared.store.size_and_memory();
        metrics.disk_bytes.set(disk);
        metrics.memory_bytes.set(memory);
    }
}

/// How much one write batch takes.
#[derive(Debug, Clone, Copy)]
struct BatchLimits {
    records: usize,
    bytes: u64,
}

impl BatchLimits {
    /// `batch_max_records` and `batch_max_mb`.
    fn of(config: &TablesConfig) -> Self {
        BatchLimits {
            records: config.batch_max_records,
            bytes: config.batch_max_mb.saturating_mul(1 << 20),
        }
    }

    /// Whether a batch of `records` records holding `bytes` bytes of keys and
    /// values takes no more (one record larger than the limit fills a batch alone).
    fn full(&self, records: usize, bytes: u64) -> bool {
        records >= self.records || bytes >= self.bytes
    }
}

/// What one batch applies to one partition.
struct BatchOfPartition {
    last_offset: i64,
    records: u64,
    misplaced: u64,
    log: LogOfBatch,
    /// A versioned table's stream time, as of this batch.
    stream_time: Option<i64>,
    /// Versions retention removed.
    versions_removed: u64,
}

impl BatchOfPartition {
    /// Continues the transaction a previous batch left `open`, if any.
    fn continuing(open: Option<Mark>) -> Self {
        BatchOfPartition {
            last_offset: 0,
            records: 0,
            misplaced: 0,
            log: LogOfBatch::continuing(open),
            stream_time: None,
            versions_removed: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_full_at_either_limit() {
        let limits = BatchLimits {
            records: 1000,
            bytes: 8 << 20,
        };
        assert!(!limits.full(0, 0));
        assert!(!limits.full(999, (8 << 20) - 1));
        assert!(limits.full(1000, 0));
        assert!(limits.full(3, 9 << 20), "three rows of 3 MiB fill it");
        assert!(limits.full(1, 20 << 20), "one larger row fills it alone");
    }
}
