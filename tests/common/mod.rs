//! Shared helpers of the end-to-end tests: endpoints of the local stack
//! (`deploy/local/up.sh`), unique names, a capture process, and a topic reader.

#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset
#![allow(clippy::unwrap_used)] // test helpers fail loudly

pub mod committed;
pub mod counted;
pub mod pki;
pub mod postgres;
pub mod secured;
pub mod timed_changes;

#[allow(unused_imports)] // not every test binary makes certificates
pub use pki::Pki;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use rdkafka::consumer::Consumer;
use rdkafka::{Message, Offset, TopicPartitionList};
use tributary_kafka::BaseConsumer;
use tributary_kafka::KafkaConfig;

/// A cluster the helpers connect to: a plaintext `host:port` list, or a whole
/// `kafka:` section (TLS, SASL) for the secured broker's tests.
pub trait Cluster {
    /// The section the helpers' clients are built from.
    fn kafka(&self) -> KafkaConfig;
}

impl Cluster for str {
    fn kafka(&self) -> KafkaConfig {
        KafkaConfig::plaintext(self)
    }
}

impl Cluster for String {
    fn kafka(&self) -> KafkaConfig {
        KafkaConfig::plaintext(self)
    }
}

impl Cluster for KafkaConfig {
    fn kafka(&self) -> KafkaConfig {
        self.clone()
    }
}

/// The stack's MariaDB, as root (tests create their own databases).
pub fn mysql_url() -> String {
    std::env::var("TRIBUTARY_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3307".into())
}

/// The stack's broker.
pub fn brokers() -> String {
    std::env::var("TRIBUTARY_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// Host and port of the stack's MariaDB.
pub fn mysql_host_port() -> (String, u16) {
    let opts =
        mysql_async::Opts::from_url(&mysql_url()).expect("TRIBUTARY_MYSQL_URL is a mysql:// URL");
    (opts.ip_or_hostname().to_owned(), opts.tcp_port())
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

/// A replica server id no other running test uses.
pub fn unique_server_id() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    10_000 + (std::process::id() % 100_000) * 100 + COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// A root connection to the stack's MariaDB, session time zone UTC.
pub async fn root_conn() -> mysql_async::Conn {
    let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&mysql_url()).unwrap())
        .await
        .expect("the stack's MariaDB is up (run deploy/local/up.sh)");
    conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
    conn
}

/// Creates a fresh database and returns its name.
pub async fn create_db(conn: &mut mysql_async::Conn, prefix: &str) -> String {
    let db = unique(prefix);
    conn.query_drop(format!("CREATE DATABASE `{db}`"))
        .await
        .unwrap();
    db
}

/// The server's current GTID state: capture started from it sees only later changes.
pub async fn gtid_now(conn: &mut mysql_async::Conn) -> String {
    conn.query_first("SELECT @@gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap_or_default()
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A capture configuration for one test database, starting at `gtid`.
pub struct CaptureSetup {
    pub server_name: String,
    pub db: String,
    pub gtid: String,
    pub metrics_port: u16,
    pub server_id: u32,
    pub extra: String,
    pub snapshot_chunk: Option<usize>,
}

impl CaptureSetup {
    pub fn new(db: &str, gtid: &str) -> Self {
        CaptureSetup {
            server_name: unique("srv"),
            db: db.to_owned(),
            gtid: gtid.to_owned(),
            metrics_port: free_port(),
            server_id: unique_server_id(),
            extra: String::new(),
            snapshot_chunk: None,
        }
    }

    /// Snapshot the existing rows first (in chunks of `chunk_rows`) instead of
    /// streaming from `gtid`.
    pub fn with_snapshot(mut self, chunk_rows: usize) -> Self {
        self.snapshot_chunk = Some(chunk_rows);
        self
    }

    pub fn yaml(&self) -> String {
        let (host, port) = mysql_host_port();
        let (start, snapshot) = match self.snapshot_chunk {
            Some(chunk) => (
                String::new(),
                format!("snapshot: {{ mode: initial, chunk_rows: {chunk} }}"),
            ),
            None => (
                format!(", start: {{ gtid: '{}' }}", self.gtid),
                "snapshot: { mode: never }".to_owned(),
            ),
        };
        format!(
            "server_name: {}\n\
             source: {{ host: '{host}', port: {port}, user: tributary, password: tributary, server_id: {}{start} }}\n\
             {snapshot}\n\
             include: {{ databases: ['{}'] }}\n\
             kafka: {{ brokers: '{}' }}\n\
             topics: {{ partitions: 3 }}\n\
             commit_interval_ms: 200\n\
             metrics: {{ listen: '127.0.0.1:{}' }}\n{}",
            self.server_name,
            self.server_id,
            self.db,
            brokers(),
            self.metrics_port,
            self.extra
        )
    }

    /// [`Self::yaml`] pointing at another MariaDB on 127.0.0.1 (a [`PrivateMariaDb`]).
    pub fn yaml_on(&self, port: u16) -> String {
        self.yaml().replace(
            &format!("port: {}", mysql_host_port().1),
            &format!("port: {port}"),
        )
    }

    /// [`Self::yaml`] pointing at another broker on 127.0.0.1 (a [`PrivateBroker`], or none).
    pub fn yaml_on_broker(&self, port: u16) -> String {
        self.yaml()
            .replace(&brokers(), &format!("127.0.0.1:{port}"))
    }

    pub fn topic(&self, table: &str) -> String {
        format!("{}.{}.{}", self.server_name, self.db, table)
    }
}

/// `tributary validate --connect` on a config: success, and the lines it
/// printed, or failure and its error.
pub fn validate_connect(yaml: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .arg("validate")
        .arg("--connect")
        .arg(write_config(yaml))
        .output()
        .expect("tributary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Writes `text` to a fresh file and returns its path.
pub fn write_config(text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("tributary-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.yaml", unique("cfg")));
    std::fs::write(&path, text).unwrap();
    path
}

/// A `tributary` child process; killed when dropped.
pub struct TributaryProcess {
    child: Child,
    log: PathBuf,
    stdout: PathBuf,
}

impl TributaryProcess {
    /// `tributary capture` with this config.
    pub fn capture(config_yaml: &str) -> Self {
        Self::start(&["capture"], &write_config(config_yaml), &[])
    }

    /// `tributary <command> --config <config> <extra…>`; stdout and stderr go to files.
    pub fn start(command: &[&str], config: &std::path::Path, extra: &[&str]) -> Self {
        Self::start_with_env(command, config, extra, &[])
    }

    /// [`Self::start`] for a test of how much memory the process holds: it
    /// gives freed memory back to the OS at once (`MIMALLOC_PURGE_DELAY=0`),
    /// so its resident memory is what it holds, not also what the allocator
    /// keeps for reuse for up to a minute (`tributary_allocator`).
    pub fn start_for_memory(command: &[&str], config: &std::path::Path) -> Self {
        let env = [(tributary_allocator::PURGE_DELAY_VAR, "0")];
        Self::start_with_env(command, config, &[], &env)
    }

    /// [`Self::start`] with extra environment variables.
    pub fn start_with_env(
        command: &[&str],
        config: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let log = config.with_extension(format!("{}.log", unique("run")));
        let stdout = log.with_extension("out");
        let child = Command::new(env!("CARGO_BIN_EXE_tributary"))
            .args(command)
            .arg("--config")
            .arg(config)
            .args(extra)
            .env("TRIBUTARY_LOG", "info")
            .envs(env.iter().copied())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        TributaryProcess { child, log, stdout }
    }

    /// A field of the process's `/proc/<pid>/status` in KiB (`VmRSS`: resident
    /// now; `VmHWM`: the peak resident so far).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|kib| kib.trim().strip_suffix("kB")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/<pid>/status:\n{status}"))
    }

    /// Waits until the process has logged `text`; fails after `timeout`, with the log.
    pub async fn wait_for_log(&self, text: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(text) {
            assert!(
                Instant::now() < deadline,
                "no {text:?} within {timeout:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The file the process's stdout goes to.
    pub fn stdout_path(&self) -> PathBuf {
        self.stdout.clone()
    }

    /// SIGKILL: no chance to flush or store a position.
    pub fn kill(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        std::fs::File::open(&self.log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        text
    }

    /// Feeds the process a backlog: lets it settle, notes its resident memory,
    /// stops it (SIGSTOP) while `backlog` is produced, and resumes it. Returns
    /// the resident KiB before.
    pub async fn fed_a_backlog(&self, backlog: impl std::future::Future<Output = ()>) -> u64 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let idle_kib = self.memory_kib("VmRSS");
        self.signal("STOP");
        backlog.await;
        self.signal("CONT");
        idle_kib
    }

    /// MiB the peak resident memory rose above `idle_kib`.
    pub fn peak_growth_mib(&self, idle_kib: u64) -> u64 {
        self.memory_kib("VmHWM").saturating_sub(idle_kib) / 1024
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    /// SIGTERM, then waits for the exit; returns (success, log).
    pub fn terminate(self, timeout: Duration) -> (bool, String) {
        self.signal("TERM");
        self.wait_exit(timeout)
    }

    /// Waits for the process to exit by itself; returns (success, log).
    pub fn wait_exit(mut self, timeout: Duration) -> (bool, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.success(), self.log());
            }
            assert!(
                Instant::now() < deadline,
                "tributary did not exit; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TributaryProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One Kafka record, key and value parsed as JSON.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: serde_json::Value,
    pub value: Option<serde_json::Value>,
}

impl Record {
    /// A change record's key and value parsed as JSON.
    pub fn parse(r: &RawRecord) -> Record {
        Record {
            partition: r.partition,
            offset: r.offset,
            key: serde_json::from_slice(r.key.as_deref().expect("change records are keyed"))
                .unwrap(),
            value: r.value.as_ref().map(|p| serde_json::from_slice(p).unwrap()),
        }
    }
}

/// One Kafka record as it is stored.
#[derive(Debug, Clone)]
pub struct RawRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: std::collections::BTreeMap<String, String>,
}

impl RawRecord {
    /// The value parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(self.value.as_deref().unwrap()).unwrap()
    }
}

/// Reads `topic` from the beginning until `done(records)` or `timeout`.
/// A topic that does not exist reads as empty.
pub async fn read_topic(
    topic: &str,
    timeout: Duration,
    done: impl FnMut(&[Record]) -> bool + Send + 'static,
) -> Vec<Record> {
    read_topic_from(&brokers(), topic, timeout, done).await
}

/// [`read_topic`] on another broker.
pub async fn read_topic_from(
    brokers: &(impl Cluster + ?Sized),
    topic: &str,
    timeout: Duration,
    mut done: impl FnMut(&[Record]) -> bool + Send + 'static,
) -> Vec<Record> {
    let parse = Record::parse;
    let mut parsed: Vec<Record> = Vec::new();
    let raw = read_raw_from(brokers, topic, timeout, move |raw| {
        parsed.extend(raw[parsed.len()..].iter().map(parse));
        done(&parsed)
    })
    .await;
    raw.iter().map(parse).collect()
}

/// Reads `topic` from the beginning, as stored, until `done(records)` or `timeout`.
pub async fn read_raw(
    topic: &str,
    timeout: Duration,
    done: impl FnMut(&[RawRecord]) -> bool + Send + 'static,
) -> Vec<RawRecord> {
    read_raw_from(&brokers(), topic, timeout, done).await
}

/// [`read_raw`] on another broker.
pub async fn read_raw_from(
    brokers: &(impl Cluster + ?Sized),
    topic: &str,
    timeout: Duration,
    mut done: impl FnMut(&[RawRecord]) -> bool + Send + 'static,
) -> Vec<RawRecord> {
    use rdkafka::message::Headers as _;
    let topic = topic.to_owned();
    let kafka = brokers.kafka();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = kafka
            .consumer("test", &unique("test-reader"))
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let deadline = Instant::now() + timeout;
        let mut records = Vec::new();
        let partitions = loop {
            let metadata = consumer
                .fetch_metadata(Some(&topic), Duration::from_secs(5))
                .unwrap();
            let n = metadata
                .topics()
                .first()
                .map_or(0, |t| t.partitions().len());
            if n > 0 {
                break n;
            }
            if Instant::now() > deadline {
                return records;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions as i32 {
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        // `done` may be costly (a replay of everything read): ask it when the reader
        // has caught up, and every thousand records while records keep coming.
        let mut check = true;
        while Instant::now() < deadline && !(check && done(&records)) {
            match consumer.poll(Duration::from_millis(100)) {
                // Transport errors (a broker just starting) are transient: poll again.
                Some(Err(_)) => check = true,
                Some(Ok(msg)) => {
                    let headers = msg
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| {
                                    let value = h.value.map(String::from_utf8_lossy);
                                    (h.key.to_owned(), value.unwrap_or_default().into_owned())
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    records.push(RawRecord {
                        partition: msg.partition(),
                        offset: msg.offset(),
                        key: msg.key().map(<[u8]>::to_vec),
                        value: msg.payload().map(<[u8]>::to_vec),
                        headers,
                    });
                    check = records.len() % 1000 == 0;
                }
                None => check = true,
            }
        }
        records
    })
    .await
    .unwrap()
}

/// Records that are change events (not tombstones), in topic order per partition.
pub fn events(records: &[Record]) -> Vec<&serde_json::Value> {
    records.iter().filter_map(|r| r.value.as_ref()).collect()
}

/// The stack's broker binary (installed by `deploy/local/up.sh`).
pub fn tansu_bin() -> PathBuf {
    std::env::var_os("TANSU_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/tributary/bin/tansu")
        })
}

/// A throw-away Tansu broker on `port`; killed on drop.
pub struct PrivateBroker(Child);

impl PrivateBroker {
    pub fn start_on(port: u16) -> Self {
        Self::start_advertising(port, port)
    }

    /// A broker on `port` that tells clients to connect to `advertised` (a proxy's port).
    pub fn start_advertising(port: u16, advertised: u16) -> Self {
        Self::start_with(&tansu_bin(), port, advertised, "memory://tansu/", &[])
    }

    /// A broker of binary `tansu` on `port`, advertising `advertised`, keeping
    /// its data in `storage`, with `extra` arguments.
    pub fn start_with(
        tansu: &std::path::Path,
        port: u16,
        advertised: u16,
        storage: &str,
        extra: &[&str],
    ) -> Self {
        let child = Command::new(tansu)
            .args([
                "broker",
                "--listener-url",
                &format!("tcp://127.0.0.1:{port}"),
                "--advertised-listener-url",
                &format!("tcp://127.0.0.1:{advertised}"),
                "--storage-engine",
                storage,
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        PrivateBroker(child)
    }

    /// The broker's process id (to pause it with SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// A throw-away MariaDB of the test's own, for server settings the shared stack
/// must not change (binlog format, row metadata). Killed and deleted on drop.
pub struct PrivateMariaDb {
    dir: PathBuf,
    child: Child,
    args: Vec<String>,
    pub port: u16,
}

impl PrivateMariaDb {
    /// Starts a MariaDB with a ROW binlog plus `args`, with root and the capture
    /// user `tributary`/`tributary` reachable over TCP on 127.0.0.1.
    pub fn start(args: &[&str]) -> Self {
        Self::start_on(free_port(), args)
    }

    /// Like [`Self::start`], on a given port.
    pub fn start_on(port: u16, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(unique("tributary-mariadb"));
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", dir.join("data").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "mariadb-install-db failed");
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        // Users exist before the server accepts connections (a capture may be waiting).
        std::fs::write(
            dir.join("init.sql"),
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';\n\
             GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n\
             CREATE USER IF NOT EXISTS 'tributary'@'127.0.0.1' IDENTIFIED BY 'tributary';\n\
             GRANT SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'tributary'@'127.0.0.1';\n",
        )
        .unwrap();
        let child = Self::spawn(&dir, port, &args);
        let server = PrivateMariaDb {
            dir,
            child,
            args,
            port,
        };
        server.wait_until_up();
        server
    }

    fn spawn(dir: &std::path::Path, port: u16, args: &[String]) -> Child {
        let data = dir.join("data");
        Command::new("mariadbd")
            .args([
                "--no-defaults",
                "--user=root",
                "--bind-address=127.0.0.1",
                "--server-id=1",
            ])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
            .arg(format!("--port={port}"))
            .arg(format!("--log-bin={}", data.join("binlog").display()))
            .arg(format!("--log-error={}", dir.join("mysqld.err").display()))
            .arg(format!("--init-file={}", dir.join("init.sql").display()))
            .args([
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--skip-name-resolve",
            ])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Waits until the server answers on its socket.
    fn wait_until_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new("mariadb")
                .args(["--no-defaults", "-uroot", "-e", "SELECT 1"])
                .arg(format!(
                    "--socket={}",
                    self.dir.join("mysqld.sock").display()
                ))
                .output()
                .unwrap();
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "private MariaDB did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills the server (no clean shutdown), leaves it down for `down`, then starts it
    /// again on the same data and port.
    pub fn crash_and_restart(&mut self, down: Duration) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::thread::sleep(down);
        self.child = Self::spawn(&self.dir, self.port, &self.args);
        self.wait_until_up();
    }

    /// A root connection to this server, session time zone UTC.
    pub async fn root_conn(&self) -> mysql_async::Conn {
        let url = format!("mysql://root@127.0.0.1:{}", self.port);
        let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
            .await
            .unwrap();
        conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
        conn
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Creates a topic (compacted, like capture's) on the stack's broker.
pub async fn create_topic(name: &str, partitions: i32) {
    create_topic_with(name, partitions, "compact").await;
}

/// Creates a topic with this `cleanup.policy` (`delete` for event streams).
pub async fn create_topic_with(name: &str, partitions: i32, cleanup: &str) {
    create_topic_on(&brokers(), name, partitions, cleanup).await;
}

/// [`create_topic_with`] on another broker.
pub async fn create_topic_on(
    brokers: &(impl Cluster + ?Sized),
    name: &str,
    partitions: i32,
    cleanup: &str,
) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    use tributary_kafka::AdminClient;
    let admin: AdminClient = brokers.kafka().admin("test").create().unwrap();
    let topic =
        NewTopic::new(name, partitions, TopicReplication::Fixed(1)).set("cleanup.policy", cleanup);
    for result in admin
        .create_topics([&topic], &AdminOptions::new())
        .await
        .unwrap()
    {
        result.unwrap();
    }
}

/// Produces keyed records where Kafka's default partitioner would put them.
/// A `None` value is a tombstone.
pub async fn produce(
    topic: &str,
    partitions: u32,
    records: &[(serde_json::Value, Option<Vec<u8>>)],
) {
    produce_on(&brokers(), topic, partitions, records).await;
}

/// [`produce`] to another broker.
pub async fn produce_on(
    brokers: &(impl Cluster + ?Sized),
    topic: &str,
    partitions: u32,
    records: &[(serde_json::Value, Option<Vec<u8>>)],
) {
    let records: Vec<Produced> = records
        .iter()
        .map(|(key, value)| {
            let key = serde_json::to_vec(key).unwrap();
            let partition = tributary_proto::partition::partition_for_key(&key, partitions);
            (partition, Some(key), value.clone())
        })
        .collect();
    produce_raw_on(brokers, topic, &records).await;
}

/// A record to produce: partition, key, value.
pub type Produced = (i32, Option<Vec<u8>>, Option<Vec<u8>>);

/// Produces records to the given partitions, as they are.
pub async fn produce_raw(topic: &str, records: &[Produced]) {
    produce_raw_on(&brokers(), topic, records).await;
}

/// [`produce_raw`] to another broker.
pub async fn produce_raw_on(brokers: &(impl Cluster + ?Sized), topic: &str, records: &[Produced]) {
    let records = records
        .iter()
        .map(|(partition, key, value)| (Some(*partition), key.as_deref(), value.as_deref()));
    send_all(brokers, None, topic, records).await;
}

/// Produces keyed records without naming their partitions: librdkafka's
/// `partitioner` (`murmur2_random`, `consistent_random`, `fnv1a`, …) picks each,
/// as the client of an application writing the topic would. Returns the
/// partition each record landed on.
pub async fn produce_partitioned(
    topic: &str,
    partitioner: &str,
    records: &[(Vec<u8>, Option<Vec<u8>>)],
) -> Vec<i32> {
    let records = records
        .iter()
        .map(|(key, value)| (None, Some(key.as_slice()), value.as_deref()));
    send_all(&brokers(), Some(partitioner), topic, records).await
}

/// Sends records in order (to their partition, or where `partitioner` puts
/// them) and waits for every delivery; returns their partitions.
async fn send_all<'r>(
    brokers: &(impl Cluster + ?Sized),
    partitioner: Option<&str>,
    topic: &str,
    records: impl Iterator<Item = (Option<i32>, Option<&'r [u8]>, Option<&'r [u8]>)>,
) -> Vec<i32> {
    use rdkafka::producer::FutureRecord;
    use tributary_kafka::FutureProducer;
    let kafka = brokers.kafka();
    let mut config = kafka.producer("test");
    config
        .set("linger.ms", "20")
        .set("enable.idempotence", "true")
        // Tests of multi-megabyte events.
        .set("message.max.bytes", "16777216");
    if let Some(partitioner) = partitioner {
        config.set("partitioner", partitioner);
    }
    let producer: FutureProducer = config.create().unwrap();
    let mut deliveries = Vec::new();
    for (partition, key, value) in records {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic);
        if let Some(partition) = partition {
            record = record.partition(partition);
        }
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(value) = value {
            record = record.payload(value);
        }
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    deliveries.push(delivery);
                    break;
                }
                Err((_, back)) => {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }
    let mut partitions = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        partitions.push(delivery.await.unwrap().unwrap().partition);
    }
    partitions
}

/// The value of a Prometheus sample (summed over label sets matching `name{filter`).
pub fn metric_sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// GET `path` on a loopback port; returns (status, body).
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    try_http_get(port, path)
        .await
        .unwrap_or_else(|| panic!("nothing answers on 127.0.0.1:{port}"))
}

/// [`http_get`], or `None` while nothing listens on the port.
pub async fn try_http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_owned());
    Some((status, body))
}

/// Applies change records, in the order given, to a map of `after` images keyed
/// by the key's `id`: a delete or tombstone removes the row.
pub fn apply_records(
    state: &mut std::collections::BTreeMap<i64, serde_json::Value>,
    records: &[Record],
) {
    for r in records {
        let id = r.key["id"].as_i64().unwrap();
        match r.value.as_ref().map(|v| &v["after"]) {
            Some(after) if !after.is_null() => {
                state.insert(id, after.clone());
            }
            _ => {
                state.remove(&id);
            }
        }
    }
}

/// The table a change topic describes: its records replayed in offset order per partition.
pub fn replay_map(records: &[Record]) -> std::collections::BTreeMap<i64, serde_json::Value> {
    let mut sorted: Vec<Record> = records.to_vec();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut state = std::collections::BTreeMap::new();
    apply_records(&mut state, &sorted);
    state
}

/// A seed for [`next_random`] from the clock, printed so a failure can be replayed.
pub fn random_seed() -> u64 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("seed {seed}");
    seed
}

/// xorshift64: reproducible "random" numbers from a printed seed.
pub fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Mixed changes until `stop`: on tables `(id INT PRIMARY KEY, v INT)` of `db`
/// holding ids 1..=`rows`, updates of a range of ids, deletes, and inserts of
/// new ids, in equal shares, `pause` apart.
pub fn spawn_random_writer(
    db: String,
    tables: Vec<String>,
    rows: i64,
    mut seed: u64,
    pause: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut conn = root_conn().await;
        let mut next_id = rows;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let t = &tables[(next_random(&mut seed) % tables.len() as u64) as usize];
            let id = (next_random(&mut seed) % rows as u64) as i64 + 1;
            let sql = match next_random(&mut seed) % 3 {
                0 => format!(
                    "UPDATE `{db}`.{t} SET v = v + 1 WHERE id BETWEEN {id} AND {}",
                    id + 50
                ),
                1 => format!("DELETE FROM `{db}`.{t} WHERE id = {id}"),
                _ => {
                    next_id += 1;
                    format!("INSERT INTO `{db}`.{t} (id, v) VALUES ({next_id}, 1)")
                }
            };
            conn.query_drop(sql).await.unwrap();
            tokio::time::sleep(pause).await;
        }
    })
}

/// Bytes as upper-case hex, as MariaDB's `HEX()` writes them.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// A base64 JSON string (Debezium's bytes) decoded.
pub fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}
