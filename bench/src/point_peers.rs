//! The servers a user would call instead of the lookup API, loaded by their
//! own benchmark tools under the same pinning (server on [`SERVER_CORE`],
//! tool on [`CLIENT_CORE`]): MariaDB point selects with sysbench
//! `oltp_point_select`, and Redis `GET` with `redis-benchmark`.

use std::time::Duration;

use anyhow::Context as _;

use crate::pinning::{CLIENT_CORE, Pinned, SERVER_CORE, on_core};
use crate::redis::Redis;

/// Fails naming the Debian package of each peer tool that is missing.
pub(crate) fn check_tools() -> anyhow::Result<()> {
    let missing: Vec<String> = [
        ("sysbench", "sysbench"),
        ("redis-server", "redis-server"),
        ("redis-benchmark", "redis-tools"),
    ]
    .into_iter()
    .filter(|(tool, _)| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_err()
    })
    .map(|(tool, package)| format!("{tool} (apt-get install {package})"))
    .collect();
    anyhow::ensure!(missing.is_empty(), "missing: {}", missing.join(", "));
    Ok(())
}

/// What a peer's tool reported for one run.
pub(crate) struct PeerRun {
    /// Requests (queries, commands) per second.
    pub(crate) rate: f64,
    /// Mean latency in µs (sysbench has no median).
    pub(crate) mean_us: f64,
    pub(crate) p99_us: f64,
}

/// The stack's MariaDB, reached by sysbench.
pub(crate) struct MariaDb {
    host: String,
    port: u16,
    user: String,
    /// sysbench's options file holding the password (so that it is not on
    /// the command line, which every user of the machine can read).
    password_file: Option<tempfile::NamedTempFile>,
    pid: u32,
}

/// The sysbench database, one table of `ROWS` rows.
const SYSBENCH_DB: &str = "tributary_sysbench";

impl MariaDb {
    /// The MariaDB of `url`, whose server process is `pid`.
    pub(crate) fn new(url: &str, pid: u32) -> anyhow::Result<Self> {
        let opts = mysql_async::Opts::from_url(url)?;
        let password_file = opts
            .pass()
            .map(|password| {
                use std::io::Write;
                // Created readable by its owner only.
                let mut file = tempfile::NamedTempFile::new()?;
                writeln!(file, "mysql-password={password}")?;
                anyhow::Ok(file)
            })
            .transpose()?;
        Ok(MariaDb {
            host: opts.ip_or_hostname().to_owned(),
            port: opts.tcp_port(),
            user: opts.user().unwrap_or("root").to_owned(),
            password_file,
            pid,
        })
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    fn sysbench(&self, rows: u64) -> tokio::process::Command {
        let mut command = on_core(CLIENT_CORE, "sysbench");
        command
            .arg("oltp_point_select")
            .arg(format!("--mysql-host={}", self.host))
            .arg(format!("--mysql-port={}", self.port))
            .arg(format!("--mysql-user={}", self.user))
            .arg(format!("--mysql-db={SYSBENCH_DB}"))
            .args(["--tables=1", "--point-selects=1", "--percentile=99"])
            .arg(format!("--table-size={rows}"));
        if let Some(file) = &self.password_file {
            command.arg(format!("--config-file={}", file.path().display()));
        }
        command
    }

    /// Creates the sysbench table of `rows` rows (again, if it is there).
    pub(crate) async fn prepare(&self, url: &str, rows: u64) -> anyhow::Result<()> {
        use mysql_async::prelude::Queryable;
        let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(url)?).await?;
        conn.query_drop(format!(
            "DROP DATABASE IF EXISTS {SYSBENCH_DB}; CREATE DATABASE {SYSBENCH_DB}"
        ))
        .await?;
        conn.disconnect().await?;
        let out = self.sysbench(rows).arg("prepare").output().await?;
        anyhow::ensure!(
            out.status.success(),
            "sysbench prepare failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// sysbench point selects from `threads` threads for `seconds`, closed
    /// loop, or at `rate` events/s (its own open loop, whose latency includes
    /// the time an event waited in sysbench's queue), MariaDB on the server core.
    pub(crate) async fn point_selects(
        &self,
        rows: u64,
        threads: usize,
        seconds: u64,
        rate: Option<f64>,
    ) -> anyhow::Result<PeerRun> {
        let _pinned = Pinned::pin(self.pid, SERVER_CORE)?;
        let mut command = self.sysbench(rows);
        command
            .arg(format!("--threads={threads}"))
            .arg(format!("--time={seconds}"));
        if let Some(rate) = rate {
            command.arg(format!("--rate={}", rate.round() as u64));
        }
        let out = command.arg("run").output().await?;
        anyhow::ensure!(
            out.status.success(),
            "sysbench run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        parse_sysbench(&String::from_utf8_lossy(&out.stdout))
    }
}

/// The queries/s, mean and 99th percentile of sysbench's report (in ms).
fn parse_sysbench(report: &str) -> anyhow::Result<PeerRun> {
    let field = |name: &str| -> anyhow::Result<&str> {
        report
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(name))
            .map(str::trim)
            .with_context(|| format!("sysbench printed no {name:?}:\n{report}"))
    };
    // "queries:                             123456 (12345.67 per sec.)"
    let rate = field("queries:")?
        .split_once('(')
        .and_then(|(_, r)| r.split_whitespace().next())
        .context("sysbench's queries line has no rate")?
        .parse()?;
    let ms = |name: &str| -> anyhow::Result<f64> { Ok(field(name)?.parse::<f64>()? * 1000.0) };
    Ok(PeerRun {
        rate,
        mean_us: ms("avg:")?,
        p99_us: ms("99th percentile:")?,
    })
}

/// A Redis server of our own on the server core, holding `rows` keys named as
/// `redis-benchmark -r` names them, with values of `value_size` bytes.
pub(crate) struct RedisPeer {
    server: tokio::process::Child,
    port: u16,
    rows: u64,
}

impl RedisPeer {
    pub(crate) async fn start(rows: u64, value_size: usize) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let server = on_core(SERVER_CORE, "redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server (Debian package redis-server)")?;
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let value = vec![b'v'; value_size];
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let loaded = tokio::task::spawn_blocking(move || {
            loop {
                match Redis::connect(addr) {
                    Ok(mut redis) => {
                        return redis.set_all(
                            (0..rows).map(|i| (format!("key:{i:012}"), value.as_slice())),
                        );
                    }
                    Err(e) if std::time::Instant::now() > deadline => return Err(e),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        loaded.await??;
        Ok(RedisPeer { server, port, rows })
    }

    /// `redis-benchmark -t get` from `clients` connections, one request each
    /// in flight (no pipelining), `requests` in all, over random present keys.
    pub(crate) async fn gets(&self, clients: usize, requests: u64) -> anyhow::Result<PeerRun> {
        let out = on_core(CLIENT_CORE, "redis-benchmark")
            .args(["-p", &self.port.to_string(), "-t", "get", "--csv"])
            .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
            .args(["-r", &self.rows.to_string()])
            .output()
            .await
            .context("running redis-benchmark (Debian package redis-tools)")?;
        anyhow::ensure!(
            out.status.success(),
            "redis-benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        parse_redis_benchmark(&String::from_utf8_lossy(&out.stdout))
    }

    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        self.server.kill().await?;
        Ok(())
    }
}

/// The GET line of `redis-benchmark --csv`: `"test","rps","avg_latency_ms",
/// "min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`.
fn parse_redis_benchmark(csv: &str) -> anyhow::Result<PeerRun> {
    let line = csv
        .lines()
        .find(|l| l.starts_with("\"GET\""))
        .with_context(|| format!("redis-benchmark printed no GET line:\n{csv}"))?;
    let fields: Vec<f64> = line
        .split(',')
        .skip(1)
        .map(|f| f.trim_matches('"').parse())
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(fields.len() >= 6, "a short redis-benchmark line: {line}");
    Ok(PeerRun {
        rate: fields[0],
        mean_us: fields[1] * 1000.0,
        p99_us: fields[5] * 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysbench_reports_are_read() {
        let report = "SQL statistics:\n    queries performed:\n        read:                            401234\n\
            \n    queries:                             401234 (40110.52 per sec.)\n\
            Latency (ms):\n         min:                                    0.05\n\
                     avg:                                    1.24\n         max:                                   20.10\n\
                     99th percentile:                        3.02\n";
        let run = parse_sysbench(report).unwrap();
        assert_eq!(run.rate, 40110.52);
        assert!((run.mean_us - 1240.0).abs() < 1e-6);
        assert!((run.p99_us - 3020.0).abs() < 1e-6);
    }

    #[test]
    fn redis_benchmark_lines_are_read() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"GET\",\"98039.22\",\"0.290\",\"0.080\",\"0.279\",\"0.399\",\"0.551\",\"1.823\"\n";
        let run = parse_redis_benchmark(csv).unwrap();
        assert_eq!(run.rate, 98039.22);
        assert!((run.p99_us - 551.0).abs() < 1e-6);
    }
}
