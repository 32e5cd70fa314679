//! The `kafka:` section shared by the capture, tables and job configs.
//!
//! ```yaml
//! kafka:
//!   brokers: kafka-0:9093,kafka-1:9093
//!   client_id: tributary                # each client is <client_id>.<component>
//!   security:
//!     protocol: sasl_ssl
//!     tls: { ca_file: /etc/tributary/kafka/ca.crt }
//!     sasl: { mechanism: SCRAM-SHA-512, username: tributary, password_file: /etc/tributary/kafka/password }
//!   properties: { socket.keepalive.enable: "true" }   # every client
//!   producer: { compression.type: zstd }               # producers only
//!   consumer: { fetch.max.bytes: "52428800" }          # consumers only
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use tributary_config::ConfigError;

use crate::security::SecurityConfig;

/// How to reach the Kafka cluster, and what every Kafka client of a component shares.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    pub brokers: String,
    /// Prefix of each client's `client.id` (`<client_id>.<component>`), as the
    /// broker's logs, quotas and ACLs see it.
    #[serde(default = "default_client_id")]
    pub client_id: String,
    /// TLS and SASL.
    #[serde(default)]
    pub security: SecurityConfig,
    /// Extra librdkafka properties for every client, passed through unchanged.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Extra librdkafka properties for producers (after `properties`).
    #[serde(default)]
    pub producer: BTreeMap<String, String>,
    /// Extra librdkafka properties for consumers (after `properties`).
    #[serde(default)]
    pub consumer: BTreeMap<String, String>,
    /// Replication factor of every topic the component creates (change, side,
    /// positions, routing, output, dead-letter and retry topics).
    #[serde(default = "default_replication")]
    pub replication_factor: i32,
    /// Seconds a starting component waits for the cluster to answer before it
    /// exits naming the broker and the cause. Errors no wait can mend (a refused
    /// certificate or password) end the wait at once.
    #[serde(default = "default_connect_timeout_s")]
    pub connect_timeout_s: u64,
    /// Longest wait on the broker once running, in seconds: for room in a
    /// producer's queue, a delivery report, a stored position. Past it the
    /// component drops its Kafka side and resumes from its last stored position.
    #[serde(default = "default_stall_timeout_s")]
    pub stall_timeout_s: u64,
}

/// Properties the section sets from its own fields: pass-through maps may not set them.
const OWNED: &[(&str, &str)] = &[
    ("bootstrap.servers", "brokers"),
    ("metadata.broker.list", "brokers"),
    ("client.id", "client_id"),
    ("security.protocol", "security.protocol"),
    ("ssl.ca.location", "security.tls.ca_file"),
    ("ssl.certificate.location", "security.tls.cert_file"),
    ("ssl.key.location", "security.tls.key_file"),
    (
        "ssl.endpoint.identification.algorithm",
        "security.tls.verify_hostname",
    ),
    ("sasl.mechanism", "security.sasl.mechanism"),
    ("sasl.mechanisms", "security.sasl.mechanism"),
    ("sasl.username", "security.sasl.username"),
];

impl KafkaConfig {
    /// A plaintext cluster at `brokers` with every other setting at its default
    /// (the bench commands' clients, and `tributary tail --brokers`).
    pub fn plaintext(brokers: &str) -> Self {
        KafkaConfig {
            brokers: brokers.to_owned(),
            client_id: default_client_id(),
            security: SecurityConfig::default(),
            properties: BTreeMap::new(),
            producer: BTreeMap::new(),
            consumer: BTreeMap::new(),
            replication_factor: default_replication(),
            connect_timeout_s: default_connect_timeout_s(),
            stall_timeout_s: default_stall_timeout_s(),
        }
    }

    /// [`KafkaConfig::stall_timeout_s`] as a duration.
    pub fn stall_timeout(&self) -> Duration {
        Duration::from_secs(self.stall_timeout_s)
    }

    /// [`KafkaConfig::connect_timeout_s`] as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_s)
    }

    /// Checks the section offline (files readable, credentials present); `field`
    /// is the section's path in the file, e.g. `kafka`.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(ConfigError::new(
                format!("{field}.brokers"),
                "must list at least one host:port",
            ));
        }
        if self.client_id.trim().is_empty() {
            return Err(ConfigError::new(
                format!("{field}.client_id"),
                "must not be empty",
            ));
        }
        if self.replication_factor < 1 {
            return Err(ConfigError::new(
                format!("{field}.replication_factor"),
                "must be at least 1",
            ));
        }
        for (name, value) in [
            ("connect_timeout_s", self.connect_timeout_s),
            ("stall_timeout_s", self.stall_timeout_s),
        ] {
            if value == 0 {
                return Err(ConfigError::new(
                    format!("{field}.{name}"),
                    "must be at least 1",
                ));
            }
        }
        for (map_name, map) in [
            ("properties", &self.properties),
            ("producer", &self.producer),
            ("consumer", &self.consumer),
        ] {
            for key in map.keys() {
                check_pass_through(&format!("{field}.{map_name}.{key}"), key, field)?;
            }
        }
        self.security.validate(&format!("{field}.security"))
    }
}

/// A pass-through property may not set what the section owns, nor carry a secret.
fn check_pass_through(path: &str, key: &str, section: &str) -> Result<(), ConfigError> {
    if let Some((_, owner)) = OWNED.iter().find(|(k, _)| *k == key) {
        return Err(ConfigError::new(
            path,
            format!("set by `{section}.{owner}`; remove it here"),
        ));
    }
    let lower = key.to_ascii_lowercase();
    if lower.contains("password") || lower.contains("secret") {
        return Err(ConfigError::new(
            path,
            "secrets are not taken inline; use the password_file/password_env fields of `security`",
        ));
    }
    Ok(())
}

fn default_client_id() -> String {
    "tributary".to_owned()
}
fn default_replication() -> i32 {
    1
}
fn default_connect_timeout_s() -> u64 {
    30
}
fn default_stall_timeout_s() -> u64 {
    60
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> KafkaConfig {
        serde_norway::from_str(yaml).expect("parses")
    }

    #[test]
    fn defaults_are_plaintext() {
        let c = parse("brokers: b:9092");
        assert_eq!(c.client_id, "tributary");
        assert_eq!(c.replication_factor, 1);
        assert_eq!(c.connect_timeout_s, 30);
        c.validate("kafka").expect("valid");
    }

    #[test]
    fn a_pass_through_property_may_not_set_what_the_section_owns() {
        let c = parse("brokers: b\nproducer: { security.protocol: ssl }");
        let e = c.validate("kafka").expect_err("owned");
        assert_eq!(e.field, "kafka.producer.security.protocol");
        assert!(e.problem.contains("kafka.security.protocol"), "{e}");
        let c = parse("brokers: b\nproperties: { sasl.password: hunter2 }");
        let e = c.validate("kafka").expect_err("secret");
        assert_eq!(e.field, "kafka.properties.sasl.password");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn numbers_are_checked_by_name() {
        let e = parse("brokers: b\nreplication_factor: 0")
            .validate("kafka")
            .expect_err("zero");
        assert_eq!(e.field, "kafka.replication_factor");
        let e = parse("brokers: ' '").validate("k").expect_err("empty");
        assert_eq!(e.field, "k.brokers");
    }
}
