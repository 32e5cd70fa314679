//! A compacted topic where the instances of a group announce their state to
//! each other, with no other service.
//!
//! Each instance publishes its state keyed by its own name, at once when it
//! changes in a way the others must hear of ([`Announce::urgent`]) and every
//! interval otherwise, and a tombstone on shutdown. Each reads the whole topic
//! from the beginning and keeps the newest announcement of every other
//! instance, stamped with when it was made: readers ignore announcements older
//! than their staleness limit (an instance that died without a goodbye).
//! Used by lookup routing ([`crate::grpc`]) and the shared rate limits of
//! remote tables ([`crate::remote::budget`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::Consumer;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use tributary_kafka::{AdminClient, FutureProducer, StreamConsumer};

use crate::config::KafkaConfig;
use crate::error::TableError;

/// What an instance announces, read when it is due.
pub(crate) trait Announce: Send + Sync + 'static {
    /// The announced state.
    type State: Serialize + DeserializeOwned + Clone + PartialEq + Send + Sync + 'static;

    /// The state now.
    fn current(&self) -> Self::State;

    /// Whether the others must hear of `now` at once rather than at the next
    /// interval (by default: whenever it differs from what was published).
    fn urgent(&self, published: &Self::State, now: &Self::State) -> bool {
        published != now
    }
}

/// A state as published: with the wall-clock time it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stamped<T> {
    /// The state.
    #[serde(flatten)]
    pub(crate) state: T,
    /// When it was published (milliseconds since the epoch).
    pub(crate) at_ms: i64,
}

/// The announcements of the other instances, as read from the topic.
pub(crate) struct Board<T> {
    me: String,
    others: RwLock<HashMap<String, Stamped<T>>>,
    /// When the state of this instance's last acknowledged announcement was
    /// read: everything the source held then has been published.
    published: Mutex<Option<Instant>>,
    /// Whether this instance's own announcement has been read back: every
    /// announcement made before it has been read too (one partition).
    caught_up: AtomicBool,
}

/// Where and how often to announce.
pub(crate) struct Topic<'a> {
    /// The cluster.
    pub(crate) kafka: &'a KafkaConfig,
    /// The compacted topic (created with one partition when missing).
    pub(crate) name: String,
    /// `client.id` suffix of the clients (`tables.routing`, `tables.budgets`).
    pub(crate) component: &'static str,
    /// The consumer group named in the reader's config (it commits nothing).
    pub(crate) reader_group: String,
    /// Announcements are repeated at least this often.
    pub(crate) interval: Duration,
    /// How often the state is looked at for an urgent change.
    pub(crate) check: Duration,
    /// Announcements older than this are deleted even if never replaced (for
    /// names that are not reused, whose last announcement compaction keeps).
    pub(crate) retention: Option<Duration>,
}

impl<T: Serialize + DeserializeOwned + Clone + PartialEq + Send + Sync + 'static> Board<T> {
    /// Creates the topic if needed, then announces `source`'s state as `me`
    /// and reads the others' until `shutdown`, in two tasks of `tasks`; the
    /// publisher ends with a goodbye tombstone.
    pub(crate) async fn start<A: Announce<State = T>>(
        topic: Topic<'_>,
        me: String,
        source: A,
        shutdown: CancellationToken,
        tasks: &mut JoinSet<Result<(), TableError>>,
    ) -> Result<Arc<Self>, TableError> {
        ensure_topic(&topic).await?;
        let producer: FutureProducer = topic
            .kafka
            .producer(topic.component)
            .set("linger.ms", "0")
            .create()?;
        let reader = reader(
            topic.kafka,
            topic.component,
            &topic.reader_group,
            &topic.name,
        )
        .await?;
        let board = Arc::new(Board {
            me,
            others: RwLock::default(),
            published: Mutex::default(),
            caught_up: AtomicBool::new(false),
        });
        let publisher = Publisher {
            producer,
            topic: topic.name,
            board: board.clone(),
            interval: topic.interval,
            check: topic.check,
        };
        tasks.spawn(publisher.run(source, shutdown.clone()));
        let reading = board.clone();
        tasks.spawn(async move {
            reading.read(reader, shutdown).await;
            Ok(())
        });
        Ok(board)
    }

    /// An empty board (for tests).
    #[cfg(test)]
    pub(crate) fn for_tests(me: &str) -> Self {
        Board {
            me: me.to_owned(),
            others: RwLock::default(),
            published: Mutex::default(),
            caught_up: AtomicBool::new(false),
        }
    }

    /// The newest announcement made within `fresh` of now that `matches`.
    pub(crate) fn newest(&self, fresh: Duration, matches: impl Fn(&T) -> bool) -> Option<T> {
        let since = now_ms() - fresh.as_millis() as i64;
        let others = self.others.read().expect("board lock");
        others
            .values()
            .filter(|a| a.at_ms >= since && matches(&a.state))
            .max_by_key(|a| a.at_ms)
            .map(|a| a.state.clone())
    }

    /// The other instances' announcements made within `fresh` of now.
    pub(crate) fn live(&self, fresh: Duration) -> Vec<T> {
        let since = now_ms() - fresh.as_millis() as i64;
        let others = self.others.read().expect("board lock");
        others
            .values()
            .filter(|a| a.at_ms >= since)
            .map(|a| a.state.clone())
            .collect()
    }

    /// Records another instance's announcement (`None`: its goodbye).
    pub(crate) fn note(&self, name: &str, announcement: Option<Stamped<T>>) {
        let mut others = self.others.write().expect("board lock");
        match announcement {
            Some(a) => others.insert(name.to_owned(), a),
            None => others.remove(name),
        };
    }

    /// When the state of this instance's last acknowledged announcement was
    /// read (a state set before then has been announced).
    pub(crate) fn published_at(&self) -> Option<Instant> {
        *self.published.lock().expect("board lock")
    }

    /// Whether the topic has been read up to this instance's first
    /// announcement: the others' latest announcements are known.
    pub(crate) fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::SeqCst)
    }

    async fn read(self: Arc<Self>, consumer: StreamConsumer, shutdown: CancellationToken) {
        loop {
            let msg = tokio::select! {
                () = shutdown.cancelled() => return,
                received = consumer.recv() => received,
            };
            let msg = match msg {
                Ok(msg) => msg,
                Err(e) => {
                    warn!(error = %e, "announcement topic read failed");
                    continue;
                }
            };
            let Some(name) = msg.key().and_then(|k| std::str::from_utf8(k).ok()) else {
                continue;
            };
            if name == self.me {
                self.caught_up.store(true, Ordering::SeqCst);
                continue;
            }
            match msg.payload().map(serde_json::from_slice::<Stamped<T>>) {
                None => self.note(name, None),
                Some(Ok(announcement)) => self.note(name, Some(announcement)),
                Some(Err(e)) => warn!(%name, error = %e, "ignoring a malformed announcement"),
            }
        }
    }
}

struct Publisher<T> {
    producer: FutureProducer,
    topic: String,
    board: Arc<Board<T>>,
    interval: Duration,
    check: Duration,
}

impl<T: Serialize + DeserializeOwned + Clone + PartialEq + Send + Sync + 'static> Publisher<T> {
    async fn send(&self, payload: Option<&[u8]>) -> bool {
        let mut record = FutureRecord::<str, [u8]>::to(&self.topic).key(&self.board.me);
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        match self.producer.send(record, Duration::from_secs(5)).await {
            Ok(_) => true,
            Err((e, _)) => {
                warn!(topic = %self.topic, error = %e, "cannot publish an announcement");
                false
            }
        }
    }

    /// Announces the state every interval, and at once on an urgent change; a
    /// tombstone on shutdown.
    async fn run<A: Announce<State = T>>(
        self,
        source: A,
        shutdown: CancellationToken,
    ) -> Result<(), TableError> {
        let mut published: Option<(T, Instant)> = None;
        loop {
            let read_at = Instant::now();
            let state = source.current();
            let due = published.as_ref().is_none_or(|(was, at)| {
                source.urgent(was, &state) || at.elapsed() >= self.interval
            });
            if due {
                let stamped = Stamped {
                    state: state.clone(),
                    at_ms: now_ms(),
                };
                let payload = serde_json::to_vec(&stamped).expect("announcement serializes");
                if self.send(Some(&payload)).await {
                    *self.board.published.lock().expect("board lock") = Some(read_at);
                }
                published = Some((state, read_at));
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.check) => {}
            }
        }
        self.send(None).await;
        Ok(())
    }
}

/// Creates `topic` with one partition (a reader's own announcement read back
/// then follows every earlier one), compacted.
async fn ensure_topic(topic: &Topic<'_>) -> Result<(), TableError> {
    let kafka = topic.kafka;
    let admin: AdminClient = kafka.admin(topic.component).create()?;
    let retention = topic.retention.map(|r| r.as_millis().to_string());
    let new = NewTopic::new(
        &topic.name,
        1,
        TopicReplication::Fixed(kafka.replication_factor),
    );
    let new = match &retention {
        None => new.set("cleanup.policy", "compact"),
        Some(ms) => new
            .set("cleanup.policy", "compact,delete")
            .set("retention.ms", ms),
    };
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics([&new], &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(TableError::Kafka(rdkafka::error::KafkaError::AdminOp(code)));
            }
        }
    }
    Ok(())
}

/// A consumer of every partition of `topic`, from the beginning.
async fn reader(
    kafka: &KafkaConfig,
    component: &str,
    group: &str,
    topic: &str,
) -> Result<StreamConsumer, TableError> {
    let consumer: StreamConsumer = kafka
        .consumer(component, group)
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()?;
    let name = topic.to_owned();
    let consumer = tokio::task::spawn_blocking(move || -> Result<StreamConsumer, TableError> {
        let mut partitions = 0;
        for _ in 0..50 {
            let metadata = consumer.fetch_metadata(Some(&name), Duration::from_secs(10))?;
            partitions = metadata
                .topics()
                .first()
                .map_or(0, |t| t.partitions().len());
            if partitions > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut all = TopicPartitionList::new();
        for p in 0..partitions as i32 {
            all.add_partition_offset(&name, p, Offset::Beginning)?;
        }
        consumer.assign(&all)?;
        Ok(consumer)
    })
    .await
    .expect("metadata fetch does not panic")?;
    Ok(consumer)
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
