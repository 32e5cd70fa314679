//! The process's rustls crypto provider. Two are compiled in (ring, which
//! Tributary uses, and aws-lc-rs, turned on by pgwire-replication's rustls
//! defaults), so rustls cannot pick one itself and the clients and servers
//! that take the process default (tonic's TLS, the MySQL client's) would
//! panic. Every place that builds one of them calls [`install`] first.

/// Makes ring the process's default provider (nothing if one is set already).
pub fn install() {
    // An error means a provider is installed already: that one stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
