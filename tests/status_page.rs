//! `tributary status` and the status page against a running `tributary tables
//! run`: the command prints the component's own Burrow-style evaluation, the
//! page (rendered by headless Chromium, its script fetching `/status`) shows the
//! same table with real numbers, and a stopped component reads as STOPPED.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value as Json, json};

/// The `items` entry of the component's `/status`, once it exists.
async fn item(port: u16) -> Option<Json> {
    let (code, body) = try_http_get(port, "/status").await?;
    if code != 200 {
        return None;
    }
    let report: Json = serde_json::from_str(&body).ok()?;
    report["items"]
        .as_array()?
        .iter()
        .find(|i| i["name"] == "items")
        .cloned()
}

/// Waits until `/status` says `items` has consumed `records` with no lag.
async fn wait_caught_up(port: u16, records: i64) -> Json {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(item) = item(port).await
            && item["position"] == records
            && item["lag"] == 0
        {
            return item;
        }
        assert!(
            Instant::now() < deadline,
            "never caught up with {records}: {:?}",
            item(port).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn rows(from: i64, to: i64) -> Vec<(Json, Option<Vec<u8>>)> {
    (from..to)
        .map(|id| {
            (
                json!({ "id": id }),
                Some(serde_json::to_vec(&json!({ "id": id, "v": id })).unwrap()),
            )
        })
        .collect()
}

/// A table cell's text in Chromium's dump of the page, found by its class.
fn cells<'a>(dom: &'a str, class: &str) -> Vec<&'a str> {
    dom.split(&format!("class=\"{class}\">"))
        .skip(1)
        .filter_map(|rest| rest.split('<').next())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_command_and_page_show_the_components_evaluation() {
    let topic = unique("status_items");
    create_topic(&topic, 2).await;
    produce(&topic, 2, &rows(0, 300)).await;
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(&format!(
        "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\ngroup_id: '{}'\ntables:\n  - {{ name: items, topic: '{topic}', mode: global }}\nmetrics: {{ listen: '127.0.0.1:{port}' }}\n",
        data.path().display(),
        brokers(),
        unique("status")
    ));
    let process = TributaryProcess::start(&["tables", "run"], &config, &[]);
    wait_caught_up(port, 300).await;
    // More records while it runs, so the window sees a rate.
    produce(&topic, 2, &rows(300, 600)).await;
    let item = wait_caught_up(port, 600).await;
    assert_eq!(item["status"], "OK", "{item}");
    assert!(item["rate"].as_f64().unwrap() > 0.0, "{item}");

    // The command prints the component's evaluation.
    let endpoint = format!("http://127.0.0.1:{port}");
    let out = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["status", "--check", "--endpoint", &endpoint])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = printed
        .lines()
        .find(|l| l.contains("| items |"))
        .unwrap_or_else(|| panic!("{printed}"));
    let columns: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(
        columns[2..7],
        ["tables", "table", "items", "OK", "0"],
        "{row}"
    );
    assert!(columns[8].parse::<f64>().unwrap() > 0.0, "a rate: {row}");

    // The dashboard's status panels query metrics this component exports.
    let (_, metrics) = http_get(port, "/metrics").await;
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy/grafana/tributary-dashboard.json"),
    )
    .unwrap();
    let status_metrics: std::collections::BTreeSet<&str> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| t.starts_with("tributary_status_"))
        .collect();
    assert!(!status_metrics.is_empty());
    for name in status_metrics {
        assert!(
            metrics.contains(&format!("\n{name}{{")),
            "{name} is not exported:\n{metrics}"
        );
    }
    assert!(
        metrics.contains(
            "tributary_status_health{component=\"tables\",kind=\"table\",name=\"items\"} 0"
        ),
        "{metrics}"
    );

    // The page, rendered by headless Chromium after its script has fetched /status.
    let profile = tempfile::tempdir().unwrap();
    let rendered = Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("{endpoint}/"))
        .output()
        .expect("Debian's chromium is installed (deploy/local/up.sh installs it)");
    let dom = String::from_utf8_lossy(&rendered.stdout).to_string();
    assert!(
        dom.contains("<td>items</td>"),
        "the page lists the table:\n{dom}"
    );
    assert_eq!(cells(&dom, "OK"), ["OK"], "{dom}");
    assert_eq!(cells(&dom, "num lag"), ["0"], "{dom}");
    let rate: f64 = cells(&dom, "num rate")[0].parse().unwrap();
    assert!(rate > 0.0, "the page shows the rate: {dom}");
    assert_eq!(dom.matches("<canvas").count(), 2, "a lag and a rate chart");
    assert!(
        dom.contains("1 item(s), evaluated over the last 60 s"),
        "{dom}"
    );

    // Stopped: the command says so and fails its check.
    let (clean, log) = process.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    let out = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["status", "--check", "--endpoint", &endpoint])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("| STOPPED |"));
}

/// Capture against a broker of its own that stops answering (SIGSTOP) while the
/// database keeps changing: within the window the watchdog fails `/healthz` and
/// `/readyz`, counts the stall, and `tributary status --check` fails with STALLED;
/// then capture, which cannot recover, exits non-zero saying why.
#[tokio::test(flavor = "multi_thread")]
async fn a_capture_that_cannot_commit_fails_its_probes_and_the_status_check() {
    use mysql_async::prelude::Queryable;
    let kafka_port = free_port();
    let broker = PrivateBroker::start_on(kafka_port);
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "stall").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let yaml = setup
        .yaml_on_broker(kafka_port)
        .replace(
            &format!("metrics: {{ listen: '127.0.0.1:{}' }}", setup.metrics_port),
            &format!(
                "metrics: {{ listen: '127.0.0.1:{}', stall_after_s: 10 }}\nrecovery_timeout_s: 60",
                setup.metrics_port
            ),
        )
        .replace("' }\n", "', stall_timeout_s: 3 }\n");
    assert!(yaml.contains("stall_timeout_s: 3"), "{yaml}");
    let capture = TributaryProcess::capture(&yaml);
    let port = setup.metrics_port;
    let endpoint = format!("http://127.0.0.1:{port}");
    // The database changes every 200 ms for the whole test.
    let writer = {
        let db = db.clone();
        tokio::spawn(async move {
            let mut conn = root_conn().await;
            for id in 1.. {
                conn.query_drop(format!("INSERT INTO `{db}`.t VALUES ({id})"))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let datastream = |report: &Json| report["items"].get(0).cloned().unwrap_or(Json::Null);
    let status = || async {
        let (_, body) = try_http_get(port, "/status").await?;
        serde_json::from_str::<Json>(&body).ok()
    };
    // Healthy first.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let report = status().await;
        if report
            .as_ref()
            .is_some_and(|r| datastream(r)["status"] == "OK")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never OK: {report:?}; log:\n{}",
            capture.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(http_get(port, "/healthz").await.0, 200);

    // The broker stops answering; the source keeps moving.
    let paused = Instant::now();
    signal(&broker, "STOP");
    let deadline = paused + Duration::from_secs(55);
    let check = loop {
        let out = Command::new(env!("CARGO_BIN_EXE_tributary"))
            .args(["status", "--check", "--endpoint", &endpoint])
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            break printed;
        }
        assert!(
            Instant::now() < deadline,
            "status --check still passes 55 s after the broker stopped:\n{printed}\nlog:\n{}",
            capture.log()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    println!(
        "status --check failed {:?} after the pause:\n{check}",
        paused.elapsed()
    );
    assert!(check.contains("| STALLED |"), "{check}");
    let (code, body) = http_get(port, "/healthz").await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body, format!("stuck: datastream {}", setup.server_name));
    assert_eq!(http_get(port, "/readyz").await.0, 503);
    let (_, metrics) = http_get(port, "/metrics").await;
    assert!(metric_sum(&metrics, "tributary_status_stalls_total") >= 1.0);
    assert!(
        capture
            .log()
            .contains("no progress although there is work to do"),
        "an ERROR says so; log:\n{}",
        capture.log()
    );
    // Its Kafka side is started again and again, and after recovery_timeout_s it gives up.
    let (clean, log) =
        tokio::task::spawn_blocking(move || capture.wait_exit(Duration::from_secs(120)))
            .await
            .unwrap();
    assert!(!clean, "exits non-zero; log:\n{log}");
    assert!(
        log.contains("after 3s (kafka.stall_timeout_s)"),
        "the cause is logged; log:\n{log}"
    );
    assert!(
        log.contains("capture did not recover within recovery_timeout_s"),
        "log:\n{log}"
    );
    println!("capture exited {:?} after the pause", paused.elapsed());
    signal(&broker, "CONT");
    writer.abort();
}

fn signal(broker: &PrivateBroker, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &broker.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// `metrics.listen` with port 0: the startup log names the port actually bound.
#[tokio::test(flavor = "multi_thread")]
async fn the_startup_log_names_the_port_bound() {
    let topic = unique("status_port");
    create_topic(&topic, 1).await;
    let data = tempfile::tempdir().unwrap();
    let config = write_config(&format!(
        "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\ngroup_id: '{}'\ntables:\n  - {{ name: items, topic: '{topic}', mode: global }}\nmetrics: {{ listen: '127.0.0.1:0' }}\n",
        data.path().display(),
        brokers(),
        unique("status")
    ));
    let process = TributaryProcess::start(&["tables", "run"], &config, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let port: u16 = loop {
        let log = process.log();
        let bound = log
            .lines()
            .find(|l| l.contains("metrics and health endpoints up"))
            .and_then(|l| l.split("listen=127.0.0.1:").nth(1))
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|port| port.parse().ok());
        if let Some(port) = bound {
            break port;
        }
        assert!(Instant::now() < deadline, "log:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(port, 0, "the bound port, not the configured 0");
    assert_eq!(http_get(port, "/healthz").await, (200, "ok".to_owned()));
}
