//! Kafka-protocol brokers that refuse what is not secured: a private Tansu on a
//! loopback port only this helper knows, behind socat terminating TLS, and
//! advertising the proxy's address. Clients authenticate with a client
//! certificate (mutual TLS) or with SCRAM over TLS (a Tansu built with sqlite
//! storage, which keeps SCRAM users: `deploy/local/build-tansu-sasl.sh`). A
//! client that ignores its `kafka.security` settings cannot talk to either
//! (STACK.md: Tansu's own TLS does not work).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tributary_kafka::KafkaConfig;

use super::{PrivateBroker, free_port, pki::Pki, unique};

/// The SCRAM user every [`SecuredBroker::scram`] broker knows.
pub const SCRAM_USER: &str = "tributary";

/// How clients prove who they are.
enum Auth {
    /// A certificate signed by the test CA (socat requires one).
    ClientCertificate,
    /// SCRAM-SHA-512 or -256 as [`SCRAM_USER`], the password in `password_file`.
    Scram { password_file: PathBuf },
}

/// The broker, its certificates and the TLS proxy; all stopped on drop.
pub struct SecuredBroker {
    pub pki: Pki,
    /// The TLS port: the only address clients are given.
    pub port: u16,
    auth: Auth,
    proxy: Child,
    _tansu: PrivateBroker,
    _files: tempfile::TempDir,
}

/// The SASL tests' broker binary.
pub fn tansu_sasl_bin() -> PathBuf {
    std::env::var_os("TANSU_SASL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap())
                .join(".cache/tributary/tansu-sasl-sqlite/bin/tansu")
        })
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} did not open");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl SecuredBroker {
    /// Mutual TLS: a valid server certificate, and a client certificate required.
    pub fn mutual_tls() -> Self {
        Self::presenting("server")
    }

    /// Mutual TLS, the server presenting the test PKI's certificate `server`
    /// (`server`, `server-untrusted` or `server-expired`).
    pub fn presenting(server: &str) -> Self {
        let (pki, files) = (Pki::new(), tempfile::tempdir().unwrap());
        let (port, private) = (free_port(), free_port());
        let tansu = PrivateBroker::start_advertising(private, port);
        let proxy = tls_proxy(&pki, server, port, private, true);
        SecuredBroker {
            pki,
            port,
            auth: Auth::ClientCertificate,
            proxy,
            _tansu: tansu,
            _files: files,
        }
    }

    /// SCRAM over TLS: [`SCRAM_USER`] with a password of its own, for both
    /// SCRAM-SHA-512 and SCRAM-SHA-256; no client certificate.
    pub fn scram() -> Self {
        let (pki, files) = (Pki::new(), tempfile::tempdir().unwrap());
        let password = unique("pw");
        let password_file = files.path().join("password");
        std::fs::write(&password_file, format!("{password}\n")).unwrap();
        let storage = format!("sqlite:///{}", files.path().join("cluster.db").display());
        // Users are written through a broker without authentication (Tansu
        // refuses every request of an unauthenticated client otherwise).
        let setup_port = free_port();
        let setup =
            PrivateBroker::start_with(&tansu_sasl_bin(), setup_port, setup_port, &storage, &[]);
        wait_for_port(setup_port);
        for mechanism in ["scram512", "scram256"] {
            let status = Command::new(tansu_sasl_bin())
                .args(["user", "create", "--broker"])
                .arg(format!("tcp://127.0.0.1:{setup_port}"))
                .args(["--mechanism", mechanism, SCRAM_USER, &password])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(
                status.success(),
                "tansu user create --mechanism {mechanism}"
            );
        }
        drop(setup);
        let (port, private) = (free_port(), free_port());
        let tansu = PrivateBroker::start_with(
            &tansu_sasl_bin(),
            private,
            port,
            &storage,
            &["--authentication"],
        );
        let proxy = tls_proxy(&pki, "server", port, private, false);
        SecuredBroker {
            pki,
            port,
            auth: Auth::Scram { password_file },
            proxy,
            _tansu: tansu,
            _files: files,
        }
    }

    /// `127.0.0.1:<TLS port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The `kafka:` section of a config file (one line of YAML flow style) that
    /// connects as this broker wants; `extra` adds fields (`, connect_timeout_s: 5`).
    pub fn section(&self, extra: &str) -> String {
        match &self.auth {
            Auth::ClientCertificate => format!(
                "kafka: {{ brokers: '{}', security: {{ protocol: ssl, tls: {{ ca_file: '{}', cert_file: '{}', key_file: '{}' }} }}{extra} }}",
                self.address(),
                self.pki.path("ca.pem"),
                self.pki.path("client.pem"),
                self.pki.path("client.key"),
            ),
            Auth::Scram { password_file } => {
                self.scram_section("SCRAM-SHA-512", SCRAM_USER, password_file, extra)
            }
        }
    }

    /// A SCRAM `kafka:` section with the given mechanism, user and password file.
    pub fn scram_section(
        &self,
        mechanism: &str,
        user: &str,
        password_file: &Path,
        extra: &str,
    ) -> String {
        format!(
            "kafka: {{ brokers: '{}', security: {{ protocol: sasl_ssl, tls: {{ ca_file: '{}' }}, sasl: {{ mechanism: {mechanism}, username: {user}, password_file: '{}' }} }}{extra} }}",
            self.address(),
            self.pki.path("ca.pem"),
            password_file.display(),
        )
    }

    /// [`SecuredBroker::section`], parsed, for the tests' own clients.
    pub fn kafka(&self) -> KafkaConfig {
        #[derive(serde::Deserialize)]
        struct Section {
            kafka: KafkaConfig,
        }
        let section: Section = serde_norway::from_str(&self.section("")).unwrap();
        section.kafka.validate("kafka").unwrap();
        section.kafka
    }
}

/// socat on `port` terminating TLS with the PKI's certificate `server` (and
/// requiring a client certificate when `mutual`), relaying to `private`.
fn tls_proxy(pki: &Pki, server: &str, port: u16, private: u16, mutual: bool) -> Child {
    let listen = format!(
        "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},cafile={},verify={}",
        pki.path(&format!("{server}.pem")),
        pki.path(&format!("{server}.key")),
        pki.path("ca.pem"),
        u8::from(mutual),
    );
    let proxy = Command::new("socat")
        .args([listen, format!("TCP:127.0.0.1:{private}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("socat is installed (deploy/local/up.sh)");
    wait_for_port(private);
    wait_for_port(port);
    proxy
}

impl Drop for SecuredBroker {
    fn drop(&mut self) {
        self.proxy.kill().ok();
        self.proxy.wait().ok();
    }
}
