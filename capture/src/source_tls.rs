//! `source.tls`: TLS to the source database, one block for MySQL/MariaDB and
//! PostgreSQL alike, and what each client library is given for it
//! (mysql_async's `SslOpts`, pgwire-replication's `TlsConfig` for the
//! replication session, a rustls connector for tokio-postgres sessions).
//! With the block, every connection capture opens is encrypted: a server
//! that does not offer TLS, or whose certificate is refused, stops capture
//! with [`CaptureError::SourceTls`] (never retried, never a fallback to plain
//! text).
//!
//! ```yaml
//! source:
//!   host: db.internal
//!   tls:
//!     ca_file: /etc/tributary/db-ca.pem   # without it: the Mozilla roots (webpki-roots)
//!     cert_file: /etc/tributary/client.pem  # mutual TLS (REQUIRE X509, clientcert=...)
//!     key_file: /etc/tributary/client.key
//!     verify: full                          # full | none
//! ```
//!
//! There is no `ca` (the chain without the name, Debezium's `verify_ca`):
//! the replication clients capture uses (mysql_async 0.37.1, pgwire-replication
//! 0.5) still refuse a name mismatch when told to skip the name check
//! (mysql_async issue 404, fixed upstream after its last release). Set
//! `server_name` to a name the certificate carries instead: the chain and
//! that name are checked.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;
use tributary_config::ConfigError;
use tributary_config::pem::{check_pem, check_tls_files};

use crate::error::CaptureError;

/// `source.tls`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceTls {
    /// What is checked of the server's certificate (default `full`).
    #[serde(default)]
    pub verify: TlsVerify,
    /// PEM file of the CA certificate(s) the server's certificate must chain
    /// to; without it, the Mozilla roots (what public clouds' database
    /// certificates chain to is usually *not* among them: give their CA bundle).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for servers that require one (MySQL `REQUIRE
    /// X509`, PostgreSQL `clientcert=verify-ca|verify-full`), with `key_file`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file` (unencrypted: protect the file instead).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The name the server's certificate must carry, and the name sent to
    /// the server (SNI), when it is not `source.host` (e.g. connecting by
    /// address to a server whose certificate names its DNS name).
    #[serde(default)]
    pub server_name: Option<String>,
}

/// `source.tls.verify`: Debezium's `database.ssl.mode` (MySQL) and
/// `database.sslmode` (PostgreSQL) without their plain-text modes and
/// without `verify_ca` (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsVerify {
    /// The certificate chains to a trusted CA and carries the server's name
    /// (`server_name`, else `host`): `verify_identity` / `verify-full`.
    #[default]
    Full,
    /// Any certificate: the stream is encrypted but whoever sits between
    /// capture and the server can read and change it (`required` / `require`).
    None,
}

impl SourceTls {
    /// Checks the files offline and the settings against each other.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        check_tls_files(
            field,
            self.ca_file.as_ref(),
            self.cert_file.as_ref(),
            self.key_file.as_ref(),
        )?;
        if let Some(key) = &self.key_file
            && check_pem(&format!("{field}.key_file"), key, "ENCRYPTED PRIVATE KEY").is_ok()
        {
            return Err(ConfigError::new(
                format!("{field}.key_file"),
                format!(
                    "{} is encrypted, which the source's clients cannot read; \
                     decrypt it (openssl pkey -in <key> -out <new key>) and protect the file",
                    key.display()
                ),
            ));
        }
        if self.verify == TlsVerify::None && self.ca_file.is_some() {
            return Err(ConfigError::new(
                format!("{field}.ca_file"),
                "is not used with verify: none (nothing is checked); use verify: full",
            ));
        }
        if self
            .server_name
            .as_deref()
            .is_some_and(|n| n.trim().is_empty())
        {
            return Err(ConfigError::new(
                format!("{field}.server_name"),
                "must not be empty",
            ));
        }
        Ok(())
    }

    /// mysql_async's settings for this block.
    pub(crate) fn mysql(&self) -> mysql_async::SslOpts {
        tributary_proto::crypto_provider::install();
        let identity = self
            .cert_file
            .clone()
            .zip(self.key_file.clone())
            .map(|(cert, key)| mysql_async::ClientIdentity::new(cert.into(), key.into()));
        mysql_async::SslOpts::default()
            .with_root_certs(self.ca_file.iter().cloned().map(Into::into).collect())
            // A given CA is the only one trusted.
            .with_disable_built_in_roots(self.ca_file.is_some())
            .with_client_identity(identity)
            .with_danger_accept_invalid_certs(self.verify == TlsVerify::None)
            .with_danger_tls_hostname_override(self.server_name.clone())
    }

    /// pgwire-replication's settings for the replication session to `host`.
    pub(crate) fn pgwire(&self, host: &str) -> pgwire_replication::TlsConfig {
        use pgwire_replication::SslMode;
        pgwire_replication::TlsConfig {
            mode: match self.verify {
                TlsVerify::Full => SslMode::VerifyFull,
                TlsVerify::None => SslMode::Require,
            },
            ca_pem_path: self.ca_file.clone(),
            sni_hostname: Some(self.server_name.clone().unwrap_or_else(|| host.to_owned())),
            client_cert_pem_path: self.cert_file.clone(),
            client_key_pem_path: self.key_file.clone(),
        }
    }

    /// A tokio-postgres connector for ordinary sessions.
    pub(crate) fn postgres(&self) -> Result<PgTlsConnect, CaptureError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let unreadable =
            |what: &str, path: &PathBuf, e: &dyn std::fmt::Display| CaptureError::SourceTls {
                detail: format!("cannot read source.tls.{what} {}: {e}", path.display()),
            };
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for cert in CertificateDer::pem_file_iter(path)
                    .map_err(|e| unreadable("ca_file", path, &e))?
                {
                    let cert = cert.map_err(|e| unreadable("ca_file", path, &e))?;
                    roots
                        .add(cert)
                        .map_err(|e| unreadable("ca_file", path, &e))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| CaptureError::SourceTls {
                detail: format!("source.tls.ca_file: {e}"),
            })?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| CaptureError::SourceTls {
                detail: e.to_string(),
            })?;
        let builder = match self.verify {
            TlsVerify::Full => builder.with_webpki_verifier(webpki),
            TlsVerify::None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate { webpki })),
        };
        let config = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| unreadable("cert_file", cert, &e))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| unreadable("key_file", key, &e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| CaptureError::SourceTls {
                        detail: format!("source.tls.cert_file and key_file: {e}"),
                    })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(PgTlsConnect {
            inner: MakeRustlsConnect::new(config),
            server_name: self.server_name.clone(),
        })
    }
}

/// The refusal of a TLS handshake in `err`'s chain (rustls's reason, and
/// what to check), if there is one: a certificate problem does not go away
/// by retrying.
pub(crate) fn tls_refusal(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(err);
    while let Some(e) = next {
        let refusal = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(refusal) = refusal {
            return Some(format!(
                "{refusal} (check source.tls: ca_file must hold the CA that signed the server's \
                 certificate, server_name a name it carries, cert_file a certificate the server accepts)"
            ));
        }
        next = e.source();
    }
    None
}

/// tokio-postgres's TLS connector for `source.tls`: rustls, checking the
/// certificate against `server_name` when one is given.
#[derive(Clone)]
pub(crate) struct PgTlsConnect {
    inner: MakeRustlsConnect,
    server_name: Option<String>,
}

impl<S> MakeTlsConnect<S> for PgTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, host: &str) -> Result<Self::TlsConnect, Self::Error> {
        let name = self.server_name.as_deref().unwrap_or(host);
        <MakeRustlsConnect as MakeTlsConnect<S>>::make_tls_connect(&mut self.inner, name)
    }
}

/// `verify: none`: any certificate, the handshake's signatures still
/// checked (WebPKI's).
#[derive(Debug)]
struct AnyCertificate {
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> SourceTls {
        tributary_config::parse_yaml(yaml).expect("parses")
    }

    #[test]
    fn settings_are_checked_against_each_other_naming_the_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("client.key");
        std::fs::write(
            &key,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .expect("writes");
        let cert = dir.path().join("client.pem");
        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
        )
        .expect("writes");
        let tls = parse(&format!(
            "{{ cert_file: '{}', key_file: '{}' }}",
            cert.display(),
            key.display()
        ));
        let e = tls.validate("source.tls").expect_err("encrypted key");
        assert_eq!(e.field, "source.tls.key_file");
        assert!(e.problem.contains("encrypted"), "{e}");

        let tls = parse(&format!(
            "{{ verify: none, ca_file: '{}' }}",
            cert.display()
        ));
        let e = tls.validate("source.tls").expect_err("unused CA");
        assert_eq!(e.field, "source.tls.ca_file");

        let e = parse("{ server_name: ' ' }")
            .validate("source.tls")
            .expect_err("empty name");
        assert_eq!(e.field, "source.tls.server_name");

        let e = parse(&format!("{{ cert_file: '{}' }}", cert.display()))
            .validate("source.tls")
            .expect_err("no key");
        assert_eq!(e.field, "source.tls.key_file");
        assert!(parse("{ verify: none }").validate("source.tls").is_ok());
        for refused in ["prefer", "ca"] {
            let e = tributary_config::parse_yaml::<SourceTls>(&format!("{{ verify: {refused} }}"))
                .expect_err(refused);
            assert_eq!(e.field, "verify", "{e}");
        }
    }

    #[test]
    fn each_mode_maps_to_the_clients_own_settings() {
        let tls = parse("{ server_name: db.internal }");
        let pg = tls.pgwire("10.0.0.5");
        assert_eq!(pg.mode, pgwire_replication::SslMode::VerifyFull);
        assert_eq!(pg.sni_hostname.as_deref(), Some("db.internal"));
        let my = tls.mysql();
        assert!(!my.skip_domain_validation());
        assert!(!my.accept_invalid_certs());
        assert_eq!(my.tls_hostname_override(), Some("db.internal"));
        assert!(!my.disable_built_in_roots());

        let tls = parse("{ verify: none }");
        assert_eq!(tls.pgwire("h").mode, pgwire_replication::SslMode::Require);
        assert_eq!(tls.pgwire("h").sni_hostname.as_deref(), Some("h"));
        assert!(tls.mysql().accept_invalid_certs());
    }
}
