//! Why a broker's certificate was refused. librdkafka reports every refusal as
//! "certificate verify failed: … verify that ssl.ca.location is correctly
//! configured"; a handshake of our own against the same CA file names the real
//! cause (expired, not yet valid, signed by another CA, issued for another host).

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::security::TlsConfig;

/// What verifying `broker`'s certificate against `tls.ca_file` finds wrong, if
/// anything (`None` when it passes, or when there is no CA file to check with).
pub(crate) fn certificate_problem(broker: &str, tls: &TlsConfig) -> Option<String> {
    let ca_file = tls.ca_file.as_ref()?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).ok()? {
        roots.add(cert.ok()?).ok()?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let (host, _) = broker.rsplit_once(':')?;
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).ok()?;
    let mut connection = ClientConnection::new(Arc::new(config), name).ok()?;
    let mut socket = TcpStream::connect(broker).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    while connection.is_handshaking() {
        if let Err(e) = connection.complete_io(&mut socket) {
            let rejected = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .filter(|e| matches!(e, rustls::Error::InvalidCertificate(_)));
            return rejected.map(|e| format!("checked against the CA file: {e}"));
        }
    }
    // Accepted: whatever failed was not the broker's certificate.
    None
}
