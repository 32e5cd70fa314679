//! The stack's private PostgreSQL (`deploy/local/up.sh`: port 5433,
//! `wal_level=logical`): its address, a superuser session, and a table
//! with what capturing it takes ([`PgCapture`]); and a test's own server
//! for settings the stack must not change ([`PrivatePostgres`]).

use anyhow::{Context, Result};
use tokio_postgres::{Client, NoTls};
use tributary_proto::lsn::Lsn;

use super::{brokers, free_port, unique};

/// The stack's PostgreSQL, as its superuser.
pub fn pg_url() -> String {
    std::env::var("TRIBUTARY_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5433/postgres".into())
}

/// The port of the stack's PostgreSQL.
pub fn pg_port() -> u16 {
    std::env::var("TRIBUTARY_PG_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5433)
}

/// A superuser session on the stack's PostgreSQL.
pub async fn pg_connect() -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(&pg_url(), NoTls)
        .await
        .context("connect to the stack's PostgreSQL (deploy/local/up.sh)")?;
    tokio::spawn(connection);
    Ok(client)
}

/// A table, its publication and the names of one capture of it.
pub struct PgCapture {
    pub client: Client,
    pub server_name: String,
    pub table: String,
    pub slot: String,
    pub publication: String,
    pub metrics_port: u16,
    /// The `snapshot:` block's fields.
    pub snapshot: String,
    /// Appended to the configuration.
    pub extra: String,
}

impl PgCapture {
    /// Creates `table` with `columns`, readable by the capture role, and a
    /// publication of it.
    pub async fn new(columns: &str) -> Result<Self> {
        let client = pg_connect().await?;
        let table = unique("pgc_t");
        let publication = unique("pgc_p");
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} ({columns}); GRANT SELECT ON {table} TO tributary; \
                 CREATE PUBLICATION {publication} FOR TABLE {table};"
            ))
            .await?;
        Ok(PgCapture {
            client,
            server_name: unique("pgsrv"),
            table,
            slot: unique("pgc_s"),
            publication,
            metrics_port: free_port(),
            snapshot: "mode: initial, chunk_rows: 3".into(),
            extra: String::new(),
        })
    }

    pub fn yaml(&self) -> String {
        format!(
            "server_name: {}\n\
             source: {{ kind: postgres, host: 127.0.0.1, port: {}, user: tributary, password: tributary, \
               database: postgres, slot.name: {}, publication.name: {}, \
               publication.autocreate.mode: disabled, slot.drop.on.stop: true, heartbeat_s: 1 }}\n\
             include: {{ tables: ['public\\.{}'] }}\n\
             snapshot: {{ {} }}\n\
             kafka: {{ brokers: '{}' }}\n\
             commit_interval_ms: 200\n\
             metrics: {{ listen: '127.0.0.1:{}' }}\n{}",
            self.server_name,
            pg_port(),
            self.slot,
            self.publication,
            self.table,
            self.snapshot,
            brokers(),
            self.metrics_port,
            self.extra
        )
    }

    /// Creates `snapshot.signal_table` (`public.<table>_signals`), which the
    /// capture role may write, in the publication; returns its name.
    pub async fn add_signal_table(&mut self) -> Result<String> {
        let signals = format!("{}_signals", self.table);
        self.client
            .batch_execute(&format!(
                "CREATE TABLE {signals} (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, data text); \
                 GRANT SELECT, INSERT ON {signals} TO tributary; \
                 ALTER PUBLICATION {} ADD TABLE {signals};",
                self.publication
            ))
            .await?;
        self.snapshot
            .push_str(&format!(", signal_table: public.{signals}"));
        Ok(signals)
    }

    pub fn topic(&self) -> String {
        format!("{}.public.{}", self.server_name, self.table)
    }

    /// The slot's confirmed position, if the slot exists.
    pub async fn confirmed(&self) -> Result<Option<Lsn>> {
        let row = self
            .client
            .query_opt(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await?;
        Ok(row
            .and_then(|r| r.get::<_, Option<String>>(0))
            .map(|l| l.parse())
            .transpose()?)
    }

    pub async fn drop(self) -> Result<()> {
        self.client
            .batch_execute(&format!(
                "DROP PUBLICATION {}; DROP TABLE {}; DROP TABLE IF EXISTS {}_signals;",
                self.publication, self.table, self.table
            ))
            .await?;
        Ok(())
    }
}

/// A throw-away PostgreSQL of the test's own (`wal_level=logical`), for server
/// settings the shared stack must not change (TLS, `pg_hba.conf` rules).
/// Stopped and deleted on drop.
pub struct PrivatePostgres {
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    pub port: u16,
}

impl PrivatePostgres {
    /// Initialises and starts a server whose `pg_hba.conf` is `hba` (the
    /// superuser `postgres` is always trusted from 127.0.0.1, last), with
    /// `files` copied into its data directory (certificates, keys: readable
    /// by the server only) and `settings` (`-c name=value`) on its command line.
    pub fn start(hba: &[&str], files: &[&std::path::Path], settings: &[&str]) -> Self {
        use std::process::Command;
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's binaries (deploy/local/up.sh installs them)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .max()
            .expect("a PostgreSQL version");
        let dir = std::env::temp_dir().join(unique("tributary-pg"));
        std::fs::create_dir_all(&dir).unwrap();
        let as_postgres = |args: &[&str]| {
            let out = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let data = dir.join("data");
        Command::new("chown")
            .args(["postgres:", &dir.display().to_string()])
            .status()
            .unwrap();
        as_postgres(&[
            &bin.join("initdb").display().to_string(),
            "-D",
            &data.display().to_string(),
            "-U",
            "postgres",
            "--auth=trust",
        ]);
        let mut rules: Vec<&str> = hba.to_vec();
        rules.push("host all postgres 127.0.0.1/32 trust");
        std::fs::write(data.join("pg_hba.conf"), rules.join("\n") + "\n").unwrap();
        for file in files {
            let copy = data.join(file.file_name().unwrap());
            std::fs::copy(file, &copy).unwrap();
            Command::new("chown")
                .args(["postgres:", &copy.display().to_string()])
                .status()
                .unwrap();
            std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        }
        let port = free_port();
        let mut options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c wal_level=logical \
             -c max_replication_slots=10 -c max_wal_senders=10 -c fsync=off",
            dir.display()
        );
        for setting in settings {
            options.push_str(&format!(" -c {setting}"));
        }
        as_postgres(&[
            &bin.join("pg_ctl").display().to_string(),
            "-D",
            &data.display().to_string(),
            "-l",
            &dir.join("postgres.log").display().to_string(),
            "-w",
            "-t",
            "60",
            "start",
            "-o",
            &options,
        ]);
        PrivatePostgres { dir, bin, port }
    }

    /// A superuser session on this server.
    pub async fn connect(&self) -> Result<Client> {
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        let (client, connection) = tokio_postgres::connect(&url, NoTls)
            .await
            .context("connect to the private PostgreSQL")?;
        tokio::spawn(connection);
        Ok(client)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        std::process::Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "stop"])
            .output()
            .ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
