//! Tributary's Kafka clients.
//!
//! - [`config`]: the `kafka:` section every component's config shares.
//! - [`security`]: its TLS and SASL settings and the secrets they read.
//! - [`factory`]: the one place producers, consumers and admin clients are built.
//! - [`logging`]: librdkafka's logs and errors, through `tracing` at levels an
//!   operator can act on, and the client types the factory builds.
//! - [`probe`]: the startup check that the cluster can be reached as configured
//!   (and `tls_check`: why a broker's certificate was refused).
//! - [`tracked`]: a producer whose deliveries are counted by sequence number
//!   (capture's), not awaited one future at a time.
//! - [`error`]: what can go wrong on the way.

pub mod config;
pub mod error;
pub mod factory;
pub mod logging;
pub mod probe;
pub mod security;
mod tls_check;
pub mod tracked;

pub use config::KafkaConfig;
pub use error::ClientError;
pub use factory::ClientBuilder;
pub use logging::{AdminClient, BaseConsumer, FutureProducer, Logged, StreamConsumer};
pub use probe::check_connection;
pub use tracked::TrackedProducer;
