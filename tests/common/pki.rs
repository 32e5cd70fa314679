//! Certificates made on the fly for the TLS tests: a CA, a server certificate for
//! 127.0.0.1 and a client certificate, as PEM files; plus the bad ones the
//! failure tests need (a certificate from a CA nobody trusts, an expired one).

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    date_time_ymd,
};

/// A directory of PEM files: `ca.pem`; `server.pem`/`server.key` (127.0.0.1 and
/// localhost); `client.pem`/`client.key`; `server-untrusted.*` (signed by
/// another CA); `server-expired.*` (valid in 2020 only).
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki { dir };
        let trusted = pki.ca("ca");
        let untrusted = pki.ca("other-ca");
        let server = ["127.0.0.1".to_owned(), "localhost".to_owned()];
        pki.leaf(
            "server",
            &server,
            ExtendedKeyUsagePurpose::ServerAuth,
            &trusted,
            false,
        );
        pki.leaf(
            "client",
            &["client".to_owned()],
            ExtendedKeyUsagePurpose::ClientAuth,
            &trusted,
            false,
        );
        pki.leaf(
            "server-untrusted",
            &server,
            ExtendedKeyUsagePurpose::ServerAuth,
            &untrusted,
            false,
        );
        pki.leaf(
            "server-expired",
            &server,
            ExtendedKeyUsagePurpose::ServerAuth,
            &trusted,
            true,
        );
        pki
    }

    /// The file `name` of this PKI.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// [`Pki::file`] as text, for YAML.
    pub fn path(&self, name: &str) -> String {
        self.file(name).display().to_string()
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.file(name)).unwrap()
    }

    fn write(&self, name: &str, text: String) {
        std::fs::write(self.file(name), text).unwrap();
    }

    fn ca(&self, name: &str) -> Issuer<'static, KeyPair> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("tributary test {name}"));
        self.write(
            &format!("{name}.pem"),
            params.self_signed(&key).unwrap().pem(),
        );
        Issuer::new(params, key)
    }

    fn leaf(
        &self,
        name: &str,
        names: &[String],
        usage: ExtendedKeyUsagePurpose,
        issuer: &Issuer<'static, KeyPair>,
        expired: bool,
    ) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names.to_vec()).unwrap();
        params.extended_key_usages = vec![usage];
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2020, 1, 2);
        }
        let cert = params.signed_by(&key, issuer).unwrap();
        self.write(&format!("{name}.pem"), cert.pem());
        self.write(&format!("{name}.key"), key.serialize_pem());
    }
}
