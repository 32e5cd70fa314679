//! Reading configuration text: `${ENV}` interpolation and YAML with errors that
//! name the offending field (`source.port`, `tables[2].topic`).

use regex::Regex;
use serde::de::DeserializeOwned;

pub mod pem;

/// A configuration problem, located by the path of its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config: {field}: {problem}")]
pub struct ConfigError {
    /// Path of the offending field; empty for the whole file.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl ConfigError {
    /// A problem with `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// Delivery guarantee of what a component writes to Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Idempotent producer; progress (a binlog position, consumed offsets) is
    /// stored once everything before it is acknowledged. A crash may repeat
    /// records, each of which names its source position so consumers can drop them.
    #[default]
    AtLeastOnce,
    /// Records and progress in one Kafka transaction per commit interval; the
    /// transactional id fences a second writer. Needs a broker with transactions;
    /// read with `isolation.level=read_committed`.
    ExactlyOnce,
}

/// The HTTP endpoint of a component (`/metrics`, `/healthz`, `/readyz`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Listen address, e.g. `0.0.0.0:9100`; each component has its own default port.
    #[serde(default)]
    pub listen: Option<std::net::SocketAddr>,
    /// Seconds a datastream, table or job may have work to do without its committed
    /// position moving before `/healthz` and `/readyz` fail (and the pod is restarted).
    #[serde(default = "default_stall_after_s")]
    pub stall_after_s: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: None,
            stall_after_s: default_stall_after_s(),
        }
    }
}

fn default_stall_after_s() -> u64 {
    120
}

/// The shortest `stall_after_s`: components observe themselves every 2 s.
const MIN_STALL_AFTER_S: u64 = 10;

impl HttpConfig {
    /// The listen address, or 127.0.0.1 on `default_port`.
    pub fn listen_or(&self, default_port: u16) -> std::net::SocketAddr {
        self.listen
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], default_port)))
    }

    /// How long an item may have work and no progress before it counts as stuck.
    pub fn stall_after(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.stall_after_s)
    }

    /// Checks the values; `field` is where this section sits (`metrics`).
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        if self.stall_after_s < MIN_STALL_AFTER_S {
            return Err(ConfigError::new(
                format!("{field}.stall_after_s"),
                format!(
                    "{} is too short: at least {MIN_STALL_AFTER_S} s (components observe themselves every 2 s)",
                    self.stall_after_s
                ),
            ));
        }
        Ok(())
    }
}

/// Checks that a name (of a server, table or job) is usable in topic names,
/// metric labels and file names: non-empty, letters, digits, '_' and '-'.
pub fn check_name(field: impl Into<String>, name: &str) -> Result<(), ConfigError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(ConfigError::new(
            field,
            format!("{name:?} must be non-empty and use only letters, digits, '_' and '-'"),
        ));
    }
    Ok(())
}

/// A configuration that checks, after parsing, what serde cannot (ranges, names, patterns).
pub trait Validate: DeserializeOwned {
    /// The first problem found, naming its field.
    fn validate(&self) -> Result<(), ConfigError>;
}

/// Reads, interpolates, parses and validates a configuration file.
pub fn load<T: Validate>(path: &std::path::Path) -> Result<T, ConfigError> {
    let config: T = load_yaml(path)?;
    config.validate()?;
    Ok(config)
}

/// Interpolates, parses and validates configuration text.
pub fn parse<T: Validate>(text: &str) -> Result<T, ConfigError> {
    let config: T = parse_yaml(text)?;
    config.validate()?;
    Ok(config)
}

/// Parses and validates a document built in memory (already interpolated:
/// a `serde_json::Value`, say), naming the bad field on error.
pub fn from_document<'de, T: Validate, D: serde::Deserializer<'de>>(
    document: D,
) -> Result<T, ConfigError>
where
    D::Error: std::fmt::Display,
{
    let config: T = serde_path_to_error::deserialize(document).map_err(|e| ConfigError {
        field: e.path().to_string(),
        problem: e.into_inner().to_string(),
    })?;
    config.validate()?;
    Ok(config)
}

/// Interpolates the environment, then parses YAML into `T`, naming the bad field on error.
pub fn parse_yaml<T: DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    let text = interpolate_env(text)?;
    let de = serde_norway::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| ConfigError {
        field: e.path().to_string(),
        problem: e.into_inner().to_string(),
    })
}

/// Reads a file and parses it with [`parse_yaml`].
pub fn load_yaml<T: DeserializeOwned>(path: &std::path::Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("", format!("cannot read {}: {e}", path.display())))?;
    parse_yaml(&text)
}

/// Replaces `${NAME}` and `${NAME:-default}` with environment variables.
/// A variable that is unset and has no default is an error naming it.
pub fn interpolate_env(text: &str) -> Result<String, ConfigError> {
    let re = Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}").expect("valid regex");
    let mut missing = None;
    let out = re.replace_all(text, |caps: &regex::Captures<'_>| {
        let name = &caps[1];
        match (std::env::var(name), caps.get(2)) {
            (Ok(v), _) => v,
            (Err(_), Some(default)) => default.as_str().to_owned(),
            (Err(_), None) => {
                missing.get_or_insert_with(|| name.to_owned());
                String::new()
            }
        }
    });
    match missing {
        Some(name) => Err(ConfigError::new(
            format!("${{{name}}}"),
            format!(
                "environment variable {name} is not set and has no default (write ${{{name}:-default}})"
            ),
        )),
        None => Ok(out.into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_environment() {
        assert_eq!(
            interpolate_env("a ${TRIBUTARY_SURELY_UNSET:-dflt} b").unwrap(),
            "a dflt b"
        );
        let path = std::env::var("PATH").unwrap();
        assert_eq!(interpolate_env("${PATH}").unwrap(), path);
        let err = interpolate_env("${TRIBUTARY_SURELY_UNSET}").unwrap_err();
        assert!(err.to_string().contains("TRIBUTARY_SURELY_UNSET"), "{err}");
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        inner: Vec<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        port: u16,
    }

    #[test]
    fn errors_carry_the_field_path() {
        let err = parse_yaml::<Outer>("inner: [{port: 1}, {port: x}]").unwrap_err();
        assert_eq!(err.field, "inner[1].port");
    }
}
