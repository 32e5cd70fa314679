//! The startup check each command runs before it starts work: the cluster is
//! reached once as configured, or the command exits with one line naming the
//! broker and the cause (see `tributary_kafka::probe`).

use anyhow::Context as _;
use tributary_kafka::KafkaConfig;

/// Reaches `kafka` (blocking work off the async workers); `component` names the client.
pub(crate) async fn reach(kafka: &KafkaConfig, component: &'static str) -> anyhow::Result<()> {
    let kafka = kafka.clone();
    tokio::task::spawn_blocking(move || tributary_kafka::check_connection(&kafka, component))
        .await
        .context("the Kafka check panicked")?
        .map_err(anyhow::Error::from)
}

/// The `kafka:` section of any component's config file (capture, tables or jobs).
#[derive(serde::Deserialize)]
struct KafkaSection {
    kafka: KafkaConfig,
}

/// Reads and validates the `kafka:` section of `path`.
pub(crate) fn section_of(path: &std::path::Path) -> anyhow::Result<KafkaConfig> {
    let section: KafkaSection = tributary_config::load_yaml(path)
        .with_context(|| format!("reading the kafka section of {}", path.display()))?;
    section
        .kafka
        .validate("kafka")
        .with_context(|| format!("{} has an invalid kafka section", path.display()))?;
    Ok(section.kafka)
}
