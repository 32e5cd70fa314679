//! The one place Kafka clients are built: every producer, consumer and admin
//! client of every component starts from its `kafka:` section here, so security
//! settings and pass-through properties reach all of them alike.
//!
//! Layers, later ones winning: `bootstrap.servers` and `client.id`; the role's
//! settings from the caller ([`ClientBuilder::set`]: idempotence, group,
//! isolation level); `kafka.properties`; `kafka.producer` or `kafka.consumer`;
//! last `kafka.security`, which pass-through maps may not touch.

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::KafkaError;

use crate::config::KafkaConfig;
use crate::error::ClientError;
use crate::logging::Logged;
use crate::security::PropertyValue;

/// Properties whose values are secrets: never quoted in errors.
const SECRET_KEYS: &[&str] = &["sasl.password", "ssl.key.password"];

/// What a client does, which picks its pass-through map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Producer,
    Consumer,
    Admin,
}

/// A client being configured; [`ClientBuilder::create`] builds it.
#[derive(Debug)]
pub struct ClientBuilder<'a> {
    kafka: &'a KafkaConfig,
    client_id: String,
    role: Role,
    settings: Vec<(String, String)>,
}

impl KafkaConfig {
    /// A producer of `component` (e.g. `capture`, `enrich.orders`).
    pub fn producer(&self, component: &str) -> ClientBuilder<'_> {
        self.builder(component, Role::Producer)
    }

    /// A consumer of `component` in consumer group `group` (every librdkafka
    /// consumer has one, even one that only reads metadata or assigns partitions).
    pub fn consumer(&self, component: &str, group: &str) -> ClientBuilder<'_> {
        let mut b = self.builder(component, Role::Consumer);
        b.set("group.id", group);
        b
    }

    /// An admin client of `component` (topic creation).
    pub fn admin(&self, component: &str) -> ClientBuilder<'_> {
        self.builder(component, Role::Admin)
    }

    fn builder(&self, component: &str, role: Role) -> ClientBuilder<'_> {
        ClientBuilder {
            kafka: self,
            client_id: format!("{}.{component}", self.client_id),
            role,
            settings: Vec::new(),
        }
    }
}

impl ClientBuilder<'_> {
    /// A setting of this client's role; the user's pass-through maps may override it.
    pub fn set(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        self.settings.push((key.to_owned(), value.into()));
        self
    }

    /// Builds the client, its librdkafka logs and errors going to `tracing`
    /// ([`Logged`]).
    pub fn create<T: FromClientConfigAndContext<Logged>>(&self) -> Result<T, ClientError> {
        self.create_with_context(Logged)
    }

    /// Builds the client with its own callbacks (which should log through
    /// [`crate::logging`]).
    pub fn create_with_context<C, T>(&self, context: C) -> Result<T, ClientError>
    where
        C: ClientContext,
        T: FromClientConfigAndContext<C>,
    {
        let config = self.config()?;
        config
            .create_with_context(context)
            .map_err(|e| self.error(e))
    }

    fn config(&self) -> Result<ClientConfig, ClientError> {
        let kafka = self.kafka;
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &kafka.brokers)
            .set("client.id", &self.client_id);
        for (k, v) in &self.settings {
            c.set(k, v);
        }
        let role_map = match self.role {
            Role::Producer => Some(&kafka.producer),
            Role::Consumer => Some(&kafka.consumer),
            Role::Admin => None,
        };
        for (k, v) in kafka
            .properties
            .iter()
            .chain(role_map.into_iter().flatten())
        {
            c.set(k, v);
        }
        for (k, v) in kafka.security.properties("kafka.security")? {
            match v {
                PropertyValue::Plain(v) => c.set(k, v),
                PropertyValue::Secret(v) => c.set(k, v.expose()),
            };
        }
        Ok(c)
    }

    /// librdkafka's error, with a secret property's value blanked.
    fn error(&self, e: KafkaError) -> ClientError {
        let source = match e {
            KafkaError::ClientConfig(code, desc, key, _) if SECRET_KEYS.contains(&key.as_str()) => {
                KafkaError::ClientConfig(code, desc, key, "<redacted>".to_owned())
            }
            other => other,
        };
        ClientError::Create {
            client: self.client_id.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(yaml: &str) -> KafkaConfig {
        serde_norway::from_str(yaml).expect("parses")
    }

    #[test]
    fn layers_apply_in_order_and_security_comes_last() {
        let k = kafka(
            "brokers: b:1\nclient_id: shop\nproperties: { linger.ms: '7', socket.timeout.ms: '9000' }\nproducer: { linger.ms: '9' }\nconsumer: { fetch.wait.max.ms: '11' }",
        );
        let mut p = k.producer("capture");
        p.set("linger.ms", "5").set("acks", "all");
        let c = p.config().expect("config");
        assert_eq!(c.get("bootstrap.servers"), Some("b:1"));
        assert_eq!(c.get("client.id"), Some("shop.capture"));
        assert_eq!(c.get("linger.ms"), Some("9"), "producer map wins");
        assert_eq!(c.get("acks"), Some("all"));
        assert_eq!(c.get("socket.timeout.ms"), Some("9000"));
        assert_eq!(
            c.get("fetch.wait.max.ms"),
            None,
            "consumer map is not a producer's"
        );
        assert_eq!(c.get("security.protocol"), Some("plaintext"));
        let c = k.consumer("tables", "g").config().expect("config");
        assert_eq!(c.get("group.id"), Some("g"));
        assert_eq!(c.get("fetch.wait.max.ms"), Some("11"));
        assert_eq!(c.get("linger.ms"), Some("7"));
        let c = k.admin("enrich").config().expect("config");
        assert_eq!(c.get("linger.ms"), Some("7"));
        assert_eq!(c.get("fetch.wait.max.ms"), None);
    }

    /// Every Rust file of the workspace but this one, outside build outputs.
    /// The crate is found where cargo runs the test (a binary built from
    /// another checkout sharing the target directory names that checkout).
    fn workspace_sources() -> Vec<std::path::PathBuf> {
        let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
            || env!("CARGO_MANIFEST_DIR").into(),
            std::path::PathBuf::from,
        );
        let root = manifest_dir
            .parent()
            .expect("the workspace holds this crate");
        // `file!()` is relative to the workspace root, where cargo runs rustc.
        let this = root.join(file!());
        let mut stack = vec![root.to_path_buf()];
        let mut files = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("readable") {
                let path = entry.expect("entry").path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if path.is_dir() && !name.starts_with('.') && name != "target" {
                    stack.push(path);
                } else if name.ends_with(".rs") && path != this {
                    files.push(path);
                }
            }
        }
        files
    }

    #[test]
    fn no_client_is_built_outside_the_factory() {
        let sources = workspace_sources();
        assert!(sources.len() > 50, "found the workspace: {}", sources.len());
        let offenders: Vec<_> = sources
            .iter()
            .filter(|p| {
                let text = std::fs::read_to_string(p).expect("readable");
                text.contains("ClientConfig::new") || text.contains("ClientConfig::default")
            })
            .collect();
        assert!(
            offenders.is_empty(),
            "build Kafka clients with KafkaConfig::producer/consumer/admin: {offenders:?}"
        );
    }

    #[test]
    fn an_unreadable_secret_fails_the_build_naming_the_field() {
        let k = kafka(
            "brokers: b\nsecurity: { protocol: sasl_plaintext, sasl: { mechanism: PLAIN, username: u, password_file: /nonexistent/password } }",
        );
        let Err(e) = k.producer("capture").create::<crate::FutureProducer>() else {
            panic!("built a client without its password")
        };
        assert!(
            e.to_string().starts_with(
                "config: kafka.security.sasl.password_file: cannot read /nonexistent/password"
            ),
            "{e}"
        );
    }
}
