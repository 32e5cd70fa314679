//! `tributary lookup`: a command-line client of the gRPC lookup API, printing JSON.
//!
//! ```sh
//! tributary lookup --endpoint http://127.0.0.1:50051 users 7            # Get
//! tributary lookup --endpoint http://127.0.0.1:50051 users 7 8 '{"id":9}' # BatchGet
//! tributary lookup --endpoint http://127.0.0.1:50051 users 7 --as-of 2026-12-01T09:30:00Z
//! tributary lookup --endpoint http://127.0.0.1:50051 users --scan --prefix 7 --limit 10
//! tributary lookup --endpoint http://127.0.0.1:50051 users --describe
//! tributary lookup --endpoint http://127.0.0.1:50051 --list
//! ```

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value as Json, json};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tributary_proto::event_time::{TimeUnit, format_micros, micros_of};
use tributary_proto::grpc::v1::lookup_client::LookupClient;
use tributary_proto::grpc::v1::{self, scan_request::Range};
use tributary_proto::grpc::{from_json, to_json};

/// Arguments of `tributary lookup`.
#[derive(Args)]
pub(crate) struct LookupArgs {
    /// Server URL (`http://host:port`, or `https://` with TLS).
    #[arg(
        long,
        env = "TRIBUTARY_ENDPOINT",
        default_value = "http://127.0.0.1:50051"
    )]
    endpoint: String,
    /// Bearer token, when the server requires one.
    #[arg(long, env = "TRIBUTARY_GRPC_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM CA bundle to trust (https).
    #[arg(long)]
    ca: Option<PathBuf>,
    /// PEM client certificate (mutual TLS), with --key.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// PEM key of --cert.
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Deadline of the request, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// Read your write: wait until the table has applied this GTID (MariaDB
    /// `domain-server-sequence` or MySQL `source_uuid:transaction`).
    #[arg(long, conflicts_with = "lsn")]
    gtid: Option<String>,
    /// Read your write to PostgreSQL: wait until the table has applied a change
    /// written at or after this LSN (the writer's `pg_current_wal_lsn()` after
    /// its commit) or, with --xid, that transaction.
    #[arg(long)]
    lsn: Option<String>,
    /// With --lsn: the writer's transaction (`pg_current_xact_id()` inside it).
    #[arg(long, requires = "lsn")]
    xid: Option<u64>,
    /// Read the rows as they were at this time (a versioned table): an RFC
    /// 3339 time in UTC (`2026-12-01T09:30:00Z`) or epoch milliseconds.
    #[arg(long, value_parser = as_of_micros)]
    as_of: Option<i64>,
    /// Table name.
    #[arg(required_unless_present = "list")]
    table: Option<String>,
    /// Keys as JSON (`7`, `'"abc"'`, `'{"id":7}'`, `'[1,"a"]'`); text that is not JSON is a string.
    keys: Vec<String>,
    /// Scan the table (by --prefix, or --from/--to) instead of looking keys up.
    #[arg(long, conflicts_with_all = ["describe", "list"])]
    scan: bool,
    /// Scan: leading key values the rows share.
    #[arg(long, requires = "scan", conflicts_with_all = ["from", "to"])]
    prefix: Option<String>,
    /// Scan: first key (inclusive).
    #[arg(long, requires = "scan")]
    from: Option<String>,
    /// Scan: last key (exclusive).
    #[arg(long, requires = "scan")]
    to: Option<String>,
    /// Scan: most rows (0: the server's limit).
    #[arg(long, requires = "scan", default_value_t = 0)]
    limit: u32,
    /// Print the table's partitions, offsets, readiness and lag.
    #[arg(long, conflicts_with = "list")]
    describe: bool,
    /// Print every table the server has.
    #[arg(long)]
    list: bool,
}

pub(crate) async fn run(args: LookupArgs) -> anyhow::Result<()> {
    let mut client = LookupClient::new(connect(&args)?);
    let table = args.table.clone().unwrap_or_default();
    let min_position = match (&args.gtid, &args.lsn) {
        (Some(gtid), _) => Some(v1::position::Kind::Gtid(gtid.clone())),
        (None, Some(lsn)) => Some(v1::position::Kind::Wal(v1::WalPosition {
            lsn: lsn.clone(),
            xid: args.xid,
        })),
        (None, None) => None,
    }
    .map(|kind| v1::Position { kind: Some(kind) });
    if args.list {
        let tables = client
            .list_tables(request(&args, v1::ListTablesRequest {})?)
            .await
            .map_err(failed)?
            .into_inner()
            .tables;
        for info in tables {
            println!("{}", table_json(&info));
        }
    } else if args.describe {
        let info = client
            .describe_table(request(&args, v1::DescribeTableRequest { table })?)
            .await
            .map_err(failed)?
            .into_inner();
        println!("{:#}", table_json(&info));
    } else if args.scan {
        let range = match (&args.prefix, &args.from, &args.to) {
            (Some(prefix), _, _) => Some(Range::Prefix(from_json(&key_arg(prefix)))),
            (None, None, None) => None,
            (None, from, to) => Some(Range::Between(v1::KeyRange {
                from: from.as_deref().map(|k| from_json(&key_arg(k))),
                to: to.as_deref().map(|k| from_json(&key_arg(k))),
            })),
        };
        let scan = v1::ScanRequest {
            table,
            range,
            limit: args.limit,
            min_position: None,
        };
        let mut rows = client
            .scan(request(&args, scan)?)
            .await
            .map_err(failed)?
            .into_inner();
        while let Some(row) = rows.message().await.map_err(failed)? {
            println!(
                "{}",
                json!({ "key": json_of(row.key)?, "row": json_of(row.row)? })
            );
        }
    } else {
        let keys: Vec<Json> = args.keys.iter().map(|k| key_arg(k)).collect();
        match keys.as_slice() {
            [] => bail!("give a key (or several), or --scan, --describe or --list"),
            [key] => {
                let get = v1::GetRequest {
                    table,
                    key: Some(from_json(key)),
                    min_position,
                    as_of_us: args.as_of,
                };
                let answer = client
                    .get(request(&args, get)?)
                    .await
                    .map_err(failed)?
                    .into_inner();
                if answer.beyond_history {
                    bail!("{}", beyond_history(&answer));
                }
                println!("{}", json_of(answer.row)?);
            }
            keys => {
                let batch = v1::BatchGetRequest {
                    table,
                    keys: keys.iter().map(from_json).collect(),
                    min_position,
                    as_of_us: args.as_of,
                };
                let answer = client
                    .batch_get(request(&args, batch)?)
                    .await
                    .map_err(failed)?
                    .into_inner();
                for (key, result) in keys.iter().zip(answer.results) {
                    if result.beyond_history {
                        println!(
                            "{}",
                            json!({ "key": key, "error": beyond_history(&result) })
                        );
                    } else {
                        println!("{}", json!({ "key": key, "row": json_of(result.row)? }));
                    }
                }
            }
        }
    }
    Ok(())
}

fn connect(args: &LookupArgs) -> anyhow::Result<Channel> {
    let mut endpoint = Endpoint::from_shared(args.endpoint.clone())
        .with_context(|| format!("--endpoint {:?} is not a URL", args.endpoint))?;
    if args.endpoint.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        if let Some(ca) = &args.ca {
            let pem =
                std::fs::read(ca).with_context(|| format!("reading --ca {}", ca.display()))?;
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
            let read =
                |p: &PathBuf| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    Ok(endpoint.connect_lazy())
}

fn request<T>(args: &LookupArgs, message: T) -> anyhow::Result<tonic::Request<T>> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(Duration::from_millis(args.timeout_ms));
    if let Some(token) = &args.token {
        let value = format!("Bearer {token}")
            .parse()
            .context("--token must be printable ASCII")?;
        request.metadata_mut().insert("authorization", value);
    }
    Ok(request)
}

/// `--as-of`: an RFC 3339 UTC time or epoch milliseconds, as µs since the epoch.
fn as_of_micros(text: &str) -> Result<i64, String> {
    let value = text
        .parse::<i64>()
        .map_or_else(|_| Json::String(text.to_owned()), Json::from);
    micros_of(&value, TimeUnit::Ms).map_err(|e| e.to_string())
}

/// What a read older than the table's history is told.
fn beyond_history(answer: &v1::GetResponse) -> String {
    format!(
        "beyond history: the table answers as-of reads of this key from {} on",
        format_micros(answer.history_horizon_us)
    )
}

/// A key argument: JSON when it parses, else the text as a string.
fn key_arg(text: &str) -> Json {
    serde_json::from_str(text).unwrap_or_else(|_| Json::String(text.to_owned()))
}

fn json_of(value: Option<v1::Value>) -> anyhow::Result<Json> {
    value
        .map(|v| to_json(&v).map_err(anyhow::Error::from))
        .transpose()
        .map(Option::unwrap_or_default)
}

fn failed(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", status.code(), status.message())
}

fn table_json(info: &v1::TableInfo) -> Json {
    let partitions: Vec<Json> = info
        .partitions
        .iter()
        .map(|p| {
            json!({
                "partition": p.partition,
                "next_offset": p.next_offset,
                "end_offset": p.end_offset,
                "ready": p.ready,
                "rows_estimate": p.rows_estimate,
                "lag": p.lag,
                "applied_gtids": p.applied_gtids,
                "applied_lsn": p.applied_lsn,
                "misplaced_records": p.misplaced_records,
            })
        })
        .collect();
    json!({
        "name": info.name,
        "kind": info.kind,
        "topic": info.topic,
        "key_columns": info.key_columns,
        "partition_count": info.partition_count,
        "global": info.global,
        "ready": info.ready,
        "rows_estimate": info.rows_estimate,
        "lag": info.lag,
        "partitions": partitions,
    })
}
