//! The `grpc:` section of a tables file: the lookup API of an instance.
//!
//! ```yaml
//! grpc:
//!   listen: 0.0.0.0:50051
//!   advertise: tables-0.tables:50051   # how other instances reach this one
//!   token: ${TRIBUTARY_GRPC_TOKEN}     # bearer token required from clients
//!   tls: { cert: /tls/tls.crt, key: /tls/tls.key, client_ca: /tls/ca.crt }
//!   routing: { forward: true }         # partition-aware routing between instances
//!   row_cache_mb: 64                   # rows kept encoded, as the API sends them (0: none)
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use tributary_config::ConfigError;

/// The lookup API of an instance.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// `host:port` other instances and clients reach this instance at (forwarding,
    /// owner hints); default: `listen`, which must then not be a wildcard address.
    #[serde(default)]
    pub advertise: Option<String>,
    /// Bearer token every lookup must carry (`authorization: Bearer <token>`).
    /// Write it as `${ENV_VAR}` so it stays out of the file.
    #[serde(default)]
    pub token: Option<String>,
    /// TLS (none: plaintext).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Partition-aware routing between the instances of a tables group.
    #[serde(default)]
    pub routing: RoutingConfig,
    /// Most keys in one `BatchGet`.
    #[serde(default = "default_max_batch_keys")]
    pub max_batch_keys: usize,
    /// Largest request or response message, in bytes.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// Longest a request may take, and the deadline of requests that set none.
    #[serde(default = "default_deadline_ms")]
    pub deadline_ms: u64,
    /// Requests handled at once; more wait for a slot until their deadline.
    #[serde(default = "default_max_concurrent_requests")]
    pub max_concurrent_requests: usize,
    /// Most rows one `Scan` returns.
    #[serde(default = "default_max_scan_rows")]
    pub max_scan_rows: usize,
    /// MiB of local tables' rows kept as the API sends them (encoded), so a
    /// row asked for again is neither read from RocksDB nor converted; 0
    /// keeps none. A write to a row drops it (and stops the few rows that
    /// share its stripe from being served until read again).
    #[serde(default = "default_row_cache_mb")]
    pub row_cache_mb: usize,
}

/// Server TLS, optionally mutual.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain of this instance.
    pub cert: PathBuf,
    /// PEM private key of `cert`.
    pub key: PathBuf,
    /// PEM CA bundle: when set, clients must present a certificate it signed.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// PEM CA bundle that signed the other instances' certificates, trusted when
    /// forwarding to them (default: `client_ca`).
    #[serde(default)]
    pub peer_ca: Option<PathBuf>,
}

impl TlsConfig {
    /// The CA forwarding trusts.
    pub fn peer_ca(&self) -> Option<&PathBuf> {
        self.peer_ca.as_ref().or(self.client_ca.as_ref())
    }
}

/// How instances find the owner of a partition.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingConfig {
    /// Publish this instance's partitions and read the others' (only matters with
    /// `partitioned` tables).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Compacted topic the instances publish to (default `<group_id>.routing`).
    #[serde(default)]
    pub topic: Option<String>,
    /// Forward a request for a partition held elsewhere to its owner; when false,
    /// answer `FAILED_PRECONDITION` naming the owner's address.
    #[serde(default = "yes")]
    pub forward: bool,
    /// How often an instance republishes its partitions.
    #[serde(default = "default_publish_interval_ms")]
    pub publish_interval_ms: u64,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            enabled: true,
            topic: None,
            forward: true,
            publish_interval_ms: default_publish_interval_ms(),
        }
    }
}

impl GrpcConfig {
    /// The address this instance advertises.
    pub fn advertised(&self) -> String {
        self.advertise
            .clone()
            .unwrap_or_else(|| self.listen.to_string())
    }

    /// The routing topic, given the tables' consumer group.
    pub fn routing_topic(&self, group_id: &str) -> String {
        self.routing
            .topic
            .clone()
            .unwrap_or_else(|| format!("{group_id}.routing"))
    }

    /// Checks what serde cannot; fields are named under `grpc.`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("grpc.max_batch_keys", self.max_batch_keys as u64),
            ("grpc.max_message_bytes", self.max_message_bytes as u64),
            ("grpc.deadline_ms", self.deadline_ms),
            (
                "grpc.max_concurrent_requests",
                self.max_concurrent_requests as u64,
            ),
            ("grpc.max_scan_rows", self.max_scan_rows as u64),
            (
                "grpc.routing.publish_interval_ms",
                self.routing.publish_interval_ms,
            ),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::new(*field, "must be at least 1"));
        }
        if self.row_cache_mb > super::MAX_MIB {
            return Err(ConfigError::new(
                "grpc.row_cache_mb",
                format!(
                    "must be at most {} (MiB), not {}",
                    super::MAX_MIB,
                    self.row_cache_mb
                ),
            ));
        }
        if self.token.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::new(
                "grpc.token",
                "is empty (is its environment variable set?)",
            ));
        }
        if self.advertise.is_none() && self.listen.ip().is_unspecified() && self.routing.enabled {
            return Err(ConfigError::new(
                "grpc.advertise",
                format!(
                    "set the address other instances reach this one at: listen {} is a wildcard",
                    self.listen
                ),
            ));
        }
        if let Some(advertise) = &self.advertise
            && advertise
                .rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        {
            return Err(ConfigError::new(
                "grpc.advertise",
                format!("{advertise:?} must be host:port"),
            ));
        }
        if let Some(tls) = &self.tls
            && self.routing.enabled
            && self.routing.forward
            && tls.peer_ca().is_none()
        {
            return Err(ConfigError::new(
                "grpc.tls.peer_ca",
                "forwarding over TLS needs the CA of the other instances (or set client_ca)",
            ));
        }
        Ok(())
    }
}

fn yes() -> bool {
    true
}
fn default_max_batch_keys() -> usize {
    1000
}
fn default_max_message_bytes() -> usize {
    4 * 1024 * 1024
}
fn default_deadline_ms() -> u64 {
    5000
}
fn default_max_concurrent_requests() -> usize {
    1024
}
fn default_max_scan_rows() -> usize {
    10_000
}
fn default_row_cache_mb() -> usize {
    64
}
fn default_publish_interval_ms() -> u64 {
    2000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<GrpcConfig, ConfigError> {
        let config: GrpcConfig = tributary_config::parse_yaml(text)?;
        config.validate().map(|()| config)
    }

    #[test]
    fn defaults_and_field_named_errors() {
        let c = parse("listen: 127.0.0.1:50051").unwrap();
        assert_eq!(c.advertised(), "127.0.0.1:50051");
        assert_eq!(c.routing_topic("g"), "g.routing");
        assert!(c.routing.forward && c.routing.enabled);
        assert_eq!(c.row_cache_mb, 64);
        let field = |text: &str| parse(text).unwrap_err().field;
        assert_eq!(
            field("{listen: 127.0.0.1:1, row_cache_mb: 99999999999}"),
            "grpc.row_cache_mb"
        );
        assert_eq!(
            parse("{listen: 127.0.0.1:1, row_cache_mb: 0}")
                .unwrap()
                .row_cache_mb,
            0
        );
        assert_eq!(field("listen: 0.0.0.0:1"), "grpc.advertise");
        assert_eq!(
            field("{listen: 0.0.0.0:1, advertise: nope}"),
            "grpc.advertise"
        );
        assert_eq!(
            field("{listen: 127.0.0.1:1, max_batch_keys: 0}"),
            "grpc.max_batch_keys"
        );
        assert_eq!(field("{listen: 127.0.0.1:1, token: ''}"), "grpc.token");
        assert_eq!(
            field("{listen: 127.0.0.1:1, tls: {cert: c, key: k}}"),
            "grpc.tls.peer_ca"
        );
        let unknown = parse("{listen: 127.0.0.1:1, colour: red}").unwrap_err();
        assert!(unknown.problem.contains("colour"), "{unknown}");
        parse("{listen: 0.0.0.0:1, routing: {enabled: false}}").unwrap();
        parse("{listen: 127.0.0.1:1, tls: {cert: c, key: k}, routing: {forward: false}}").unwrap();
    }
}
