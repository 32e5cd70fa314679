//! `tributary status`: the health of running components, read from their
//! `/status` endpoints, as one table (Burrow-style: each verdict is judged by the
//! component over the last minute of observations, not from one sample).

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::Value as Json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Arguments of `tributary status`.
#[derive(Args)]
pub(crate) struct StatusArgs {
    /// HTTP endpoints of components (`http://host:port`); default: the default
    /// ports of capture (9100), tables (9101) and enrich (9102) on 127.0.0.1.
    #[arg(long = "endpoint")]
    endpoints: Vec<String>,
    /// Exit with status 2 when anything is STALLED or STOPPED (for scripts and probes).
    #[arg(long)]
    check: bool,
}

pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let endpoints = if args.endpoints.is_empty() {
        ["9100", "9101", "9102"]
            .iter()
            .map(|port| format!("http://127.0.0.1:{port}"))
            .collect()
    } else {
        args.endpoints
    };
    println!(
        "| endpoint | component | kind | name | status | lag | behind (s) | rate (/s) | reason |"
    );
    println!("|---|---|---|---|---|---:|---:|---:|---|");
    let mut bad = false;
    for endpoint in &endpoints {
        match fetch(endpoint).await {
            Ok(report) => {
                let items = report["items"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    println!(
                        "| {endpoint} | {} | | | | | | | nothing observed yet |",
                        report["component"].as_str().unwrap_or("?")
                    );
                }
                for item in items {
                    let status = item["status"].as_str().unwrap_or("?");
                    bad |= matches!(status, "STALLED" | "STOPPED");
                    let lag = if item["unit"] == "ms" {
                        "–".to_owned()
                    } else {
                        item["lag"].to_string()
                    };
                    println!(
                        "| {endpoint} | {} | {} | {} | {status} | {lag} | {:.1} | {:.1} | {} |",
                        report["component"].as_str().unwrap_or("?"),
                        item["kind"].as_str().unwrap_or("?"),
                        item["name"].as_str().unwrap_or("?"),
                        item["lag_seconds"].as_f64().unwrap_or(0.0),
                        item["rate"].as_f64().unwrap_or(0.0),
                        item["reason"].as_str().unwrap_or(""),
                    );
                }
            }
            Err(e) => {
                bad = true;
                println!("| {endpoint} | | | | STOPPED | | | | {e:#} |");
            }
        }
    }
    if args.check && bad {
        bail!("something is STALLED or STOPPED");
    }
    Ok(())
}

/// GET `<endpoint>/status` (plain HTTP/1.0) and parse it.
async fn fetch(endpoint: &str) -> anyhow::Result<Json> {
    let authority = endpoint
        .strip_prefix("http://")
        .with_context(|| format!("{endpoint:?} is not an http:// URL"))?
        .trim_end_matches('/');
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await?;
        stream
            .write_all(format!("GET /status HTTP/1.0\r\nHost: {authority}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .context("no answer within 5 s")?
        .context("unreachable")?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("not an HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("{}", head.lines().next().unwrap_or("no status line"));
    }
    serde_json::from_str(body).context("/status is not JSON")
}
