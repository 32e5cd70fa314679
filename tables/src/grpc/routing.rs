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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};
use tracing::info;
use tributary_proto::grpc::v1::lookup_client::LookupClient;

use crate::announce::{Announce, Board, Topic};
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
}

/// The routing map of one instance and its channels to the others.
pub(crate) struct Routing {
    forward: bool,
    stale_after: Duration,
    board: Arc<Board<Announcement>>,
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
        let interval = Duration::from_millis(config.routing.publish_interval_ms);
        let topic = Topic {
            kafka,
            name: config.routing_topic(group_id),
            component: "tables.routing",
            reader_group: format!("{group_id}.routing-reader"),
            interval,
            check: Duration::from_millis(200),
            retention: None,
        };
        info!(topic = %topic.name, address = %config.advertised(), "publishing held partitions for routing");
        let held = Held {
            address: config.advertised(),
            progress,
            partitioned,
        };
        let board = Board::start(topic, config.advertised(), held, shutdown, tasks).await?;
        Ok(Arc::new(Routing {
            forward: config.routing.forward,
            stale_after: (interval * 10).max(Duration::from_secs(10)),
            board,
            clients: Mutex::default(),
            client_tls,
            token: BearerToken::new(config.token.as_deref()),
        }))
    }

    /// Whether requests for partitions held elsewhere are forwarded.
    pub(crate) fn forwards(&self) -> bool {
        self.forward
    }

    /// The address of the instance holding `partition` of `table`, per the newest
    /// live announcement.
    pub(crate) fn owner_of(&self, table: &str, partition: i32) -> Option<String> {
        self.board
            .newest(self.stale_after, |a| {
                a.tables.get(table).is_some_and(|p| p.contains(&partition))
            })
            .map(|a| a.address)
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
}

/// What this instance announces: the partitions of its `partitioned` tables.
struct Held {
    address: String,
    progress: Arc<Progress>,
    partitioned: Vec<String>,
}

impl Announce for Held {
    type State = Announcement;

    fn current(&self) -> Announcement {
        let tables = self
            .partitioned
            .iter()
            .map(|t| {
                let held = self.progress.of_table(t).into_iter().map(|(p, _)| p);
                (t.clone(), held.collect())
            })
            .collect();
        Announcement {
            address: self.address.clone(),
            tables,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::announce::Stamped;

    fn routing() -> Routing {
        Routing {
            forward: true,
            stale_after: Duration::from_secs(20),
            board: Arc::new(Board::for_tests("me:1")),
            clients: Mutex::default(),
            client_tls: None,
            token: BearerToken::new(None),
        }
    }

    fn announce(routing: &Routing, address: &str, partitions: &[i32], age_ms: i64) {
        let state = Announcement {
            address: address.into(),
            tables: BTreeMap::from([("users".into(), partitions.to_vec())]),
        };
        let at_ms = crate::announce::now_ms() - age_ms;
        routing.board.note(address, Some(Stamped { state, at_ms }));
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
