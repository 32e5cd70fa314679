//! Partition-aware routing between the instances of a tables group.
//!
//! Every instance publishes an announcement to a compacted topic, keyed by its
//! advertised address: the partitions of `partitioned` tables it holds and when
//! it said so. Every instance reads the whole topic, so it knows who holds each
//! partition. An announcement older than ten publish intervals is ignored (its
//! instance died without saying goodbye); when two instances claim a partition
//! (during a hand-over), the newer announcement wins. On shutdown an instance
//! publishes a tombstone. Requests for partitions held elsewhere are forwarded
//! over cached gRPC channels.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};
use tracing::{info, warn};
use tributary_proto::grpc::v1::lookup_client::LookupClient;

use crate::config::KafkaConfig;
use crate::config::grpc::GrpcConfig;
use crate::error::TableError;
use crate::grpc::call::{BearerToken, FORWARDED};
use crate::progress::Progress;

/// What an instance publishes about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Announcement {
    /// Where to reach it.
    address: String,
    /// Table → partitions held.
    tables: BTreeMap<String, Vec<i32>>,
    /// When it was published (milliseconds since the epoch).
    at_ms: i64,
}

/// The routing map of one instance and its channels to the others.
pub(crate) struct Routing {
    me: String,
    forward: bool,
    stale_after: Duration,
    others: RwLock<HashMap<String, Announcement>>,
    clients: Mutex<HashMap<String, LookupClient<Channel>>>,
    client_tls: Option<ClientTlsConfig>,
    token: BearerToken,
}

impl Routing {
    /// Creates the routing topic if needed, then publishes this instance's
    /// `partitioned` tables' partitions and reads the others' until `shutdown`,
    /// in two tasks of `tasks`; the publisher ends with a goodbye tombstone.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        config: &GrpcConfig,
        kafka: &KafkaConfig,
        group_id: &str,
        client_tls: Option<ClientTlsConfig>,
        progress: Arc<Progress>,
        partitioned: Vec<String>,
        shutdown: CancellationToken,
        tasks: &mut JoinSet<Result<(), TableError>>,
    ) -> Result<Arc<Self>, TableError> {
        let topic = config.routing_topic(group_id);
        ensure_topic(kafka, &topic).await?;
        let interval = Duration::from_millis(config.routing.publish_interval_ms);
        let routing = Arc::new(Routing {
            me: config.advertised(),
            forward: config.routing.forward,
            stale_after: (interval * 10).max(Duration::from_secs(10)),
            others: RwLock::default(),
            clients: Mutex::default(),
            client_tls,
            token: BearerToken::new(config.token.as_deref()),
        });
        let producer: FutureProducer = kafka
            .producer("tables.routing")
            .set("linger.ms", "0")
            .create()?;
        let reader = reader(kafka, group_id, &topic).await?;
        info!(%topic, address = %routing.me, "publishing held partitions for routing");
        tasks.spawn(publish(
            Publisher {
                producer,
                topic,
                address: routing.me.clone(),
                progress,
                partitioned,
                interval,
            },
            shutdown.clone(),
        ));
        let reading = routing.clone();
        tasks.spawn(async move {
            reading.read(reader, shutdown).await;
            Ok(())
        });
        Ok(routing)
    }

    /// Whether requests for partitions held elsewhere are forwarded.
    pub(crate) fn forwards(&self) -> bool {
        self.forward
    }

    /// The address of the instance holding `partition` of `table`, per the newest
    /// live announcement.
    pub(crate) fn owner_of(&self, table: &str, partition: i32) -> Option<String> {
        let fresh_since = now_ms() - self.stale_after.as_millis() as i64;
        let others = self.others.read().expect("routing lock");
        others
            .values()
            .filter(|a| a.at_ms >= fresh_since)
            .filter(|a| a.tables.get(table).is_some_and(|p| p.contains(&partition)))
            .max_by_key(|a| a.at_ms)
            .map(|a| a.address.clone())
    }

    /// A client of the instance at `address` (channels are made once, lazily).
    pub(crate) fn client(&self, address: &str) -> Result<LookupClient<Channel>, Status> {
        let mut clients = self.clients.lock().expect("clients lock");
        if let Some(client) = clients.get(address) {
            return Ok(client.clone());
        }
        let scheme = if self.client_tls.is_some() {
            "https"
        } else {
            "http"
        };
        let unavailable = |e: tonic::transport::Error| {
            Status::unavailable(format!("cannot reach {address}: {e}"))
        };
        let mut endpoint =
            Endpoint::from_shared(format!("{scheme}://{address}")).map_err(unavailable)?;
        if let Some(tls) = &self.client_tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(unavailable)?;
        }
        let client = LookupClient::new(endpoint.connect_lazy());
        clients.insert(address.to_owned(), client.clone());
        Ok(client)
    }

    /// `message` as a request to another instance: marked forwarded, with this
    /// instance's token and what is left of the deadline.
    pub(crate) fn request<T>(&self, message: T, deadline: Instant) -> Request<T> {
        let mut request = Request::new(message);
        request
            .metadata_mut()
            .insert(FORWARDED, "1".parse().expect("ASCII"));
        if let Some(token) = self.token.header() {
            request.metadata_mut().insert("authorization", token);
        }
        request.set_timeout(deadline.saturating_duration_since(Instant::now()));
        request
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
                    warn!(error = %e, "routing topic read failed");
                    continue;
                }
            };
            let Some(address) = msg.key().and_then(|k| std::str::from_utf8(k).ok()) else {
                continue;
            };
            if address == self.me {
                continue;
            }
            let mut others = self.others.write().expect("routing lock");
            match msg.payload().map(serde_json::from_slice::<Announcement>) {
                None => {
                    others.remove(address);
                }
                Some(Ok(announcement)) => {
                    others.insert(address.to_owned(), announcement);
                }
                Some(Err(e)) => warn!(%address, error = %e, "ignoring a malformed routing record"),
            }
        }
    }
}

struct Publisher {
    producer: FutureProducer,
    topic: String,
    address: String,
    progress: Arc<Progress>,
    partitioned: Vec<String>,
    interval: Duration,
}

impl Publisher {
    fn held(&self) -> BTreeMap<String, Vec<i32>> {
        self.partitioned
            .iter()
            .map(|t| {
                let held = self.progress.of_table(t).into_iter().map(|(p, _)| p);
                (t.clone(), held.collect())
            })
            .collect()
    }

    async fn send(&self, payload: Option<&[u8]>) {
        let mut record = FutureRecord::<str, [u8]>::to(&self.topic).key(&self.address);
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        if let Err((e, _)) = self.producer.send(record, Duration::from_secs(5)).await {
            warn!(topic = %self.topic, error = %e, "cannot publish routing");
        }
    }
}

/// Publishes the held partitions every interval, and at once when they change;
/// a tombstone on shutdown.
async fn publish(publisher: Publisher, shutdown: CancellationToken) -> Result<(), TableError> {
    let mut published: Option<(BTreeMap<String, Vec<i32>>, std::time::Instant)> = None;
    loop {
        let held = publisher.held();
        let due = published
            .as_ref()
            .is_none_or(|(was, at)| *was != held || at.elapsed() >= publisher.interval);
        if due {
            let announcement = Announcement {
                address: publisher.address.clone(),
                tables: held.clone(),
                at_ms: now_ms(),
            };
            let payload = serde_json::to_vec(&announcement).expect("announcement serializes");
            publisher.send(Some(&payload)).await;
            published = Some((held, std::time::Instant::now()));
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    publisher.send(None).await;
    Ok(())
}

async fn ensure_topic(kafka: &KafkaConfig, topic: &str) -> Result<(), TableError> {
    let admin: AdminClient<DefaultClientContext> = kafka.admin("tables.routing").create()?;
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(kafka.replication_factor))
        .set("cleanup.policy", "compact");
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

/// A consumer of every partition of the routing topic, from the beginning.
async fn reader(
    kafka: &KafkaConfig,
    group: &str,
    topic: &str,
) -> Result<StreamConsumer, TableError> {
    let consumer: StreamConsumer = kafka
        .consumer("tables.routing", &format!("{group}.routing-reader"))
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

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routing() -> Routing {
        Routing {
            me: "me:1".into(),
            forward: true,
            stale_after: Duration::from_secs(20),
            others: RwLock::default(),
            clients: Mutex::default(),
            client_tls: None,
            token: BearerToken::new(None),
        }
    }

    fn announce(routing: &Routing, address: &str, partitions: &[i32], age_ms: i64) {
        routing.others.write().unwrap().insert(
            address.into(),
            Announcement {
                address: address.into(),
                tables: BTreeMap::from([("users".into(), partitions.to_vec())]),
                at_ms: now_ms() - age_ms,
            },
        );
    }

    #[test]
    fn the_newest_live_announcement_owns_a_partition() {
        let r = routing();
        assert_eq!(r.owner_of("users", 0), None);
        announce(&r, "a:1", &[0, 1], 5_000);
        announce(&r, "b:1", &[1, 2], 1_000);
        announce(&r, "dead:1", &[3], 60_000);
        assert_eq!(r.owner_of("users", 0).as_deref(), Some("a:1"));
        assert_eq!(
            r.owner_of("users", 1).as_deref(),
            Some("b:1"),
            "newer claim wins"
        );
        assert_eq!(
            r.owner_of("users", 3),
            None,
            "stale announcements are ignored"
        );
        assert_eq!(r.owner_of("orders", 0), None);
    }

    #[tokio::test]
    async fn forwarded_requests_carry_the_mark_token_and_deadline() {
        let mut r = routing();
        r.token = BearerToken::new(Some("t"));
        let request = r.request((), Instant::now() + Duration::from_secs(3));
        assert_eq!(request.metadata().get(FORWARDED).unwrap(), "1");
        assert_eq!(request.metadata().get("authorization").unwrap(), "Bearer t");
        let timeout = crate::grpc::call::client_timeout(request.metadata()).unwrap();
        assert!(timeout <= Duration::from_secs(3) && timeout > Duration::from_secs(2));
        assert!(r.client("127.0.0.1:1").is_ok(), "channels connect lazily");
    }
}
