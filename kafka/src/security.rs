//! TLS and SASL settings of the `kafka:` section, and the secrets they read.
//!
//! Secrets (the SASL password, a TLS key's password) are never written in the
//! config: they come from a file (a mounted Kubernetes Secret) or an environment
//! variable, are read when a client is built, and are redacted from `Debug`.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tributary_config::ConfigError;
use tributary_config::pem::check_tls_files;

use crate::error::ClientError;

/// How clients talk to the brokers (librdkafka's `security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// No encryption, no authentication.
    #[default]
    #[serde(alias = "PLAINTEXT")]
    Plaintext,
    /// TLS: the broker's certificate is verified; a client certificate is sent if configured.
    #[serde(alias = "SSL")]
    Ssl,
    /// SASL authentication over a plaintext connection.
    #[serde(alias = "SASL_PLAINTEXT")]
    SaslPlaintext,
    /// SASL authentication over TLS.
    #[serde(alias = "SASL_SSL")]
    SaslSsl,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Plaintext => "plaintext",
            Protocol::Ssl => "ssl",
            Protocol::SaslPlaintext => "sasl_plaintext",
            Protocol::SaslSsl => "sasl_ssl",
        }
    }

    fn tls(self) -> bool {
        matches!(self, Protocol::Ssl | Protocol::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(self, Protocol::SaslPlaintext | Protocol::SaslSsl)
    }
}

/// A SASL mechanism librdkafka speaks with a username and password.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Mechanism {
    /// The password in the clear (use only over TLS).
    #[serde(rename = "PLAIN")]
    Plain,
    /// Salted challenge-response with SHA-256.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// Salted challenge-response with SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl Mechanism {
    fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// `kafka.security`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityConfig {
    /// `plaintext` (default), `ssl`, `sasl_plaintext` or `sasl_ssl`.
    #[serde(default)]
    pub protocol: Protocol,
    /// TLS settings (protocols `ssl` and `sasl_ssl`; without them the system's CAs are trusted).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// SASL settings (protocols `sasl_plaintext` and `sasl_ssl`).
    #[serde(default)]
    pub sasl: Option<SaslConfig>,
}

/// `kafka.security.tls`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CA certificate(s) the brokers' certificates must chain to.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for brokers that require mutual TLS (with `key_file`).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// File holding the password of an encrypted `key_file`.
    #[serde(default)]
    pub key_password_file: Option<PathBuf>,
    /// Environment variable holding the password of an encrypted `key_file`.
    #[serde(default)]
    pub key_password_env: Option<String>,
    /// Whether the broker's certificate must name the host connected to (default true).
    #[serde(default = "yes")]
    pub verify_hostname: bool,
}

/// `kafka.security.sasl`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: Mechanism,
    /// The user name.
    pub username: String,
    /// File holding the password (e.g. a mounted Kubernetes Secret).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
}

/// A secret's value; `Debug` never shows it.
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One librdkafka property the security section sets.
pub(crate) type Property = (&'static str, PropertyValue);

/// A property's value, secret or not.
pub(crate) enum PropertyValue {
    Plain(String),
    Secret(Secret),
}

impl SecurityConfig {
    /// Checks the section offline; `field` is its path, e.g. `kafka.security`.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        let protocol = self.protocol.name();
        match (&self.tls, self.protocol.tls()) {
            (Some(_), false) => {
                return Err(ConfigError::new(
                    format!("{field}.tls"),
                    format!("set, but `{field}.protocol` is {protocol}: use ssl or sasl_ssl"),
                ));
            }
            (Some(tls), true) => tls.validate(&format!("{field}.tls"))?,
            _ => {}
        }
        match (&self.sasl, self.protocol.sasl()) {
            (Some(_), false) => Err(ConfigError::new(
                format!("{field}.sasl"),
                format!(
                    "set, but `{field}.protocol` is {protocol}: use sasl_plaintext or sasl_ssl"
                ),
            )),
            (None, true) => Err(ConfigError::new(
                format!("{field}.sasl"),
                format!("missing: protocol {protocol} needs a mechanism, username and password"),
            )),
            (Some(sasl), true) => sasl.validate(&format!("{field}.sasl")),
            (None, false) => Ok(()),
        }
    }

    /// The librdkafka properties of this section, secrets read now; `field` names
    /// the section in errors. Call [`SecurityConfig::validate`] first.
    pub(crate) fn properties(&self, field: &str) -> Result<Vec<Property>, ClientError> {
        let mut out: Vec<Property> = vec![(
            "security.protocol",
            PropertyValue::Plain(self.protocol.name().to_owned()),
        )];
        if let Some(tls) = self.tls.as_ref().filter(|_| self.protocol.tls()) {
            let files = [
                ("ssl.ca.location", &tls.ca_file),
                ("ssl.certificate.location", &tls.cert_file),
                ("ssl.key.location", &tls.key_file),
            ];
            for (key, path) in files {
                if let Some(path) = path {
                    out.push((key, PropertyValue::Plain(path.display().to_string())));
                }
            }
            let source = secret_source(&tls.key_password_file, &tls.key_password_env);
            if let Some(secret) = source
                .map(|s| s.read(&format!("{field}.tls.key_password")))
                .transpose()?
            {
                out.push(("ssl.key.password", PropertyValue::Secret(secret)));
            }
            let algorithm = if tls.verify_hostname { "https" } else { "none" };
            out.push((
                "ssl.endpoint.identification.algorithm",
                PropertyValue::Plain(algorithm.to_owned()),
            ));
        }
        if let Some(sasl) = self.sasl.as_ref().filter(|_| self.protocol.sasl()) {
            let password = secret_source(&sasl.password_file, &sasl.password_env)
                .ok_or_else(|| ClientError::Secret {
                    field: format!("{field}.sasl.password_file"),
                    problem: "no password_file or password_env".to_owned(),
                })?
                .read(&format!("{field}.sasl.password"))?;
            out.push((
                "sasl.mechanism",
                PropertyValue::Plain(sasl.mechanism.name().to_owned()),
            ));
            out.push(("sasl.username", PropertyValue::Plain(sasl.username.clone())));
            out.push(("sasl.password", PropertyValue::Secret(password)));
        }
        Ok(out)
    }
}

impl TlsConfig {
    fn validate(&self, field: &str) -> Result<(), ConfigError> {
        check_tls_files(
            field,
            self.ca_file.as_ref(),
            self.cert_file.as_ref(),
            self.key_file.as_ref(),
        )?;
        check_one_source(
            field,
            "key_password",
            &self.key_password_file,
            &self.key_password_env,
        )?;
        if let Some(source) = secret_source(&self.key_password_file, &self.key_password_env) {
            source
                .read(&format!("{field}.key_password"))
                .map_err(ClientError::into_config)?;
        }
        Ok(())
    }
}

impl SaslConfig {
    fn validate(&self, field: &str) -> Result<(), ConfigError> {
        if self.username.trim().is_empty() {
            return Err(ConfigError::new(
                format!("{field}.username"),
                "must not be empty",
            ));
        }
        check_one_source(field, "password", &self.password_file, &self.password_env)?;
        match secret_source(&self.password_file, &self.password_env) {
            Some(source) => source
                .read(&format!("{field}.password"))
                .map(drop)
                .map_err(ClientError::into_config),
            None => Err(ConfigError::new(
                format!("{field}.password_file"),
                format!(
                    "missing: {} needs a password_file or password_env",
                    self.mechanism.name()
                ),
            )),
        }
    }
}

fn yes() -> bool {
    true
}

/// Where a secret is read from.
enum SecretSource<'a> {
    File(&'a Path),
    Env(&'a str),
}

fn secret_source<'a>(
    file: &'a Option<PathBuf>,
    env: &'a Option<String>,
) -> Option<SecretSource<'a>> {
    match (file, env) {
        (Some(file), _) => Some(SecretSource::File(file)),
        (None, Some(env)) => Some(SecretSource::Env(env)),
        (None, None) => None,
    }
}

fn check_one_source(
    field: &str,
    name: &str,
    file: &Option<PathBuf>,
    env: &Option<String>,
) -> Result<(), ConfigError> {
    if file.is_some() && env.is_some() {
        return Err(ConfigError::new(
            format!("{field}.{name}_env"),
            format!("give either {name}_file or {name}_env, not both"),
        ));
    }
    Ok(())
}

impl SecretSource<'_> {
    /// Reads the secret; a file's trailing line break is not part of it. Errors
    /// name `field` and the file or variable, never the value.
    fn read(&self, field: &str) -> Result<Secret, ClientError> {
        let (value, origin) = match self {
            SecretSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ClientError::Secret {
                    field: format!("{field}_file"),
                    problem: format!("cannot read {}: {e}", path.display()),
                })?;
                (
                    text.trim_end_matches(['\n', '\r']).to_owned(),
                    format!("{field}_file"),
                )
            }
            SecretSource::Env(var) => {
                let value = std::env::var(var).map_err(|_| ClientError::Secret {
                    field: format!("{field}_env"),
                    problem: format!("environment variable {var} is not set"),
                })?;
                (value, format!("{field}_env"))
            }
        };
        if value.is_empty() {
            return Err(ClientError::Secret {
                field: origin,
                problem: "the secret is empty".to_owned(),
            });
        }
        Ok(Secret(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> SecurityConfig {
        serde_norway::from_str(yaml).expect("parses")
    }

    fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("writes");
        path.display().to_string()
    }

    fn value<'a>(props: &'a [Property], key: &str) -> Option<&'a str> {
        props.iter().find(|(k, _)| *k == key).map(|(_, v)| match v {
            PropertyValue::Plain(s) => s.as_str(),
            PropertyValue::Secret(s) => s.expose(),
        })
    }

    #[test]
    fn sasl_password_comes_from_a_file_without_its_line_break() {
        let dir = tempfile::tempdir().expect("tempdir");
        let password = file(&dir, "password", "s3cr3t\n");
        let c = parse(&format!(
            "protocol: sasl_plaintext\nsasl: {{ mechanism: SCRAM-SHA-512, username: u, password_file: '{password}' }}"
        ));
        c.validate("kafka.security").expect("valid");
        let props = c.properties("kafka.security").expect("props");
        assert_eq!(value(&props, "sasl.password"), Some("s3cr3t"));
        assert_eq!(value(&props, "sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(value(&props, "security.protocol"), Some("sasl_plaintext"));
        let debug = format!("{:?}", props.iter().map(|(k, _)| k).collect::<Vec<_>>());
        assert!(!debug.contains("s3cr3t"));
        assert_eq!(
            format!("{:?}", Secret("s3cr3t".into())),
            "<redacted>",
            "Debug hides the value"
        );
    }

    #[test]
    fn a_missing_secret_names_its_field_and_source_not_a_value() {
        let c = parse(
            "protocol: sasl_ssl\nsasl: { mechanism: PLAIN, username: u, password_env: TRIBUTARY_TEST_UNSET_PASSWORD }",
        );
        let e = c.validate("kafka.security").expect_err("unset");
        assert_eq!(e.field, "kafka.security.sasl.password_env");
        assert!(e.problem.contains("TRIBUTARY_TEST_UNSET_PASSWORD"), "{e}");
        let c = parse("protocol: sasl_ssl\nsasl: { mechanism: PLAIN, username: u }");
        let e = c.validate("kafka.security").expect_err("no source");
        assert_eq!(e.field, "kafka.security.sasl.password_file");
        let e = parse("protocol: sasl_ssl")
            .validate("kafka.security")
            .expect_err("no sasl");
        assert_eq!(e.field, "kafka.security.sasl");
    }

    #[test]
    fn tls_files_are_checked_offline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.pem").display().to_string();
        let e = parse(&format!("protocol: ssl\ntls: {{ ca_file: '{missing}' }}"))
            .validate("kafka.security")
            .expect_err("missing");
        assert_eq!(e.field, "kafka.security.tls.ca_file");
        let not_pem = file(&dir, "ca.pem", "hello");
        let e = parse(&format!("protocol: ssl\ntls: {{ ca_file: '{not_pem}' }}"))
            .validate("kafka.security")
            .expect_err("not pem");
        assert!(e.problem.contains("no PEM CERTIFICATE"), "{e}");
        let cert = file(
            &dir,
            "c.pem",
            "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
        );
        let e = parse(&format!("protocol: ssl\ntls: {{ cert_file: '{cert}' }}"))
            .validate("kafka.security")
            .expect_err("no key");
        assert_eq!(e.field, "kafka.security.tls.key_file");
        let e = parse(&format!(
            "protocol: plaintext\ntls: {{ ca_file: '{cert}' }}"
        ))
        .validate("kafka.security")
        .expect_err("tls on plaintext");
        assert_eq!(e.field, "kafka.security.tls");
    }

    #[test]
    fn unknown_protocols_and_mechanisms_are_refused_by_name() {
        let e = serde_norway::from_str::<SecurityConfig>("protocol: tls")
            .expect_err("unknown protocol")
            .to_string();
        assert!(e.contains("protocol") && e.contains("sasl_ssl"), "{e}");
        let e = serde_norway::from_str::<SecurityConfig>(
            "protocol: sasl_ssl\nsasl: { mechanism: GSSAPI, username: u, password_env: X }",
        )
        .expect_err("unknown mechanism")
        .to_string();
        assert!(e.contains("SCRAM-SHA-512"), "{e}");
        assert_eq!(parse("protocol: SASL_SSL").protocol, Protocol::SaslSsl);
    }
}
