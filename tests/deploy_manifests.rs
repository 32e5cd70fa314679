//! The Kubernetes manifests of `deploy/k8s`: rendered by kustomize (`kubectl
//! kustomize`), validated offline against the Kubernetes OpenAPI schemas
//! (`kubernetes-validate`, installed from PyPI by `deploy/local/up.sh`), checked
//! for what running Tributary needs, and the configs they ship pass
//! `tributary validate`.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value as Json;

mod common;

const KUBERNETES_VERSION: &str = "1.32.0";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn render(dir: &str) -> String {
    let out = Command::new("kubectl")
        .args(["kustomize"])
        .arg(repo().join(dir))
        .output()
        .expect("kubectl (with its built-in kustomize) is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs the schema validator on `yaml`; returns (success, its report).
fn validate(yaml: &str) -> (bool, String) {
    let file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let validator = std::env::var("K8S_VALIDATE_BIN").unwrap_or_else(|_| {
        format!(
            "{}/.cache/tributary/k8s-validate/bin/kubernetes-validate",
            std::env::var("HOME").unwrap()
        )
    });
    let out = Command::new(&validator)
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .arg(file.path())
        .output()
        .unwrap_or_else(|e| panic!("{validator}: {e} (deploy/local/up.sh installs it)"));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && !report.contains("ERROR"), report)
}

fn documents(yaml: &str) -> Vec<Json> {
    yaml.split("\n---\n")
        .map(|doc| serde_norway::from_str(doc).unwrap())
        .collect()
}

fn find<'a>(docs: &'a [Json], kind: &str, name: &str) -> &'a Json {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn every_kustomization_renders_and_passes_the_kubernetes_schemas() {
    for dir in ["deploy/k8s/base", "deploy/k8s/overlays/example"] {
        let yaml = render(dir);
        let (ok, report) = validate(&yaml);
        assert!(ok, "{dir}:\n{report}");
        let passed = report.matches("passed for resource").count();
        assert_eq!(
            passed,
            documents(&yaml).len(),
            "{dir}: every resource validated:\n{report}"
        );
    }
}

#[test]
fn the_validator_rejects_a_broken_manifest() {
    let yaml = render("deploy/k8s/overlays/example");
    let broken = yaml.replacen("replicas: 1\n", "replicas: one\n", 1);
    assert_ne!(broken, yaml);
    let (ok, report) = validate(&broken);
    assert!(!ok, "a string replica count passed:\n{report}");
    assert!(report.contains("spec.replicas"), "{report}");
    let unknown = yaml.replacen("strategy:\n", "stratgy:\n", 1);
    assert!(
        !validate(&unknown).0,
        "strict validation rejects unknown fields"
    );
}

#[test]
fn manifests_keep_single_writer_capture_and_stateful_tables() {
    let docs = documents(&render("deploy/k8s/overlays/example"));
    let capture = find(&docs, "Deployment", "tributary-capture");
    assert_eq!(capture["spec"]["replicas"], 1, "one capture writer");
    assert_eq!(
        capture["spec"]["strategy"]["type"], "Recreate",
        "never two at once"
    );
    let capture_config = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"].get("capture.yaml").is_some())
        .unwrap();
    let capture_yaml: Json =
        serde_norway::from_str(capture_config["data"]["capture.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(
        capture_yaml["delivery"], "exactly_once",
        "the broker fences a second writer"
    );

    let enrich = find(&docs, "StatefulSet", "tributary-enrich");
    assert_eq!(enrich["metadata"]["namespace"], "shop");
    let claims = enrich["spec"]["volumeClaimTemplates"].as_array().unwrap();
    assert_eq!(claims[0]["metadata"]["name"], "data", "a volume per pod");
    let headless = enrich["spec"]["serviceName"].as_str().unwrap();
    assert_eq!(
        find(&docs, "Service", headless)["spec"]["clusterIP"],
        "None"
    );
    let pdb = find(&docs, "PodDisruptionBudget", "tributary-enrich");
    assert_eq!(pdb["spec"]["selector"], enrich["spec"]["selector"]);

    for workload in [capture, enrich] {
        let pod = &workload["spec"]["template"];
        assert_eq!(
            pod["metadata"]["annotations"]["prometheus.io/scrape"],
            "true"
        );
        assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
        for container in pod["spec"]["containers"].as_array().unwrap() {
            assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
            assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
            assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
            let http = container["ports"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == "http")
                .unwrap();
            assert_eq!(
                pod["metadata"]["annotations"]["prometheus.io/port"],
                http["containerPort"].to_string(),
                "Prometheus scrapes the metrics port"
            );
            assert!(container["resources"]["requests"].is_object());
        }
    }

    // The pod's grace period covers the job's drain time.
    let config = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"].get("jobs.yaml").is_some())
        .unwrap();
    let jobs: Json = serde_norway::from_str(config["data"]["jobs.yaml"].as_str().unwrap()).unwrap();
    let grace = enrich["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap();
    assert!(grace > jobs["shutdown_grace_s"].as_i64().unwrap());
}

/// Where the workloads mount the `tributary-kafka` Secret.
const KAFKA_SECRETS: &str = "/var/run/secrets/kafka";

#[test]
fn the_shipped_configs_pass_tributary_validate() {
    // The configs read the Kafka client's files from the mounted Secret: here a
    // directory holding real ones (a CA, a client certificate and key, a password).
    let pki = common::Pki::new();
    let secrets = tempfile::tempdir().unwrap();
    for (name, from) in [
        ("ca.crt", "ca.pem"),
        ("tls.crt", "client.pem"),
        ("tls.key", "client.key"),
    ] {
        std::fs::copy(pki.file(from), secrets.path().join(name)).unwrap();
    }
    std::fs::write(
        secrets.path().join("sasl-password"),
        "not-a-real-password\n",
    )
    .unwrap();
    let dir = repo().join("deploy/k8s/base/config");
    let configs = tempfile::tempdir().unwrap();
    for file in ["capture.yaml", "tables.yaml", "jobs.yaml"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(
            text.contains(KAFKA_SECRETS),
            "{file} reads the mounted Kafka secret"
        );
        std::fs::write(
            configs.path().join(file),
            text.replace(KAFKA_SECRETS, &secrets.path().display().to_string()),
        )
        .unwrap();
    }
    for file in ["capture.yaml", "tables.yaml", "jobs.yaml"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tributary"))
            .arg("validate")
            .arg(configs.path().join(file))
            .envs([
                ("TRIBUTARY_MYSQL_PASSWORD", "x"),
                ("TRIBUTARY_GRPC_TOKEN", "t"),
                ("POD_NAME", "tributary-enrich-0"),
                ("POD_NAMESPACE", "shop"),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_workload_mounts_the_kafka_secret_its_config_names() {
    let docs = documents(&render("deploy/k8s/overlays/example"));
    let secret = docs
        .iter()
        .find(|d| {
            d["kind"] == "Secret"
                && d["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("tributary-kafka")
        })
        .expect("the overlay supplies the Kafka secret");
    let keys: Vec<&String> = secret["data"].as_object().unwrap().keys().collect();
    let config_text =
        std::fs::read_to_string(repo().join("deploy/k8s/base/config/capture.yaml")).unwrap();
    for key in &keys {
        assert!(
            config_text.contains(&format!("{KAFKA_SECRETS}/{key}")),
            "capture.yaml uses {key}"
        );
    }
    for (kind, name) in [
        ("Deployment", "tributary-capture"),
        ("StatefulSet", "tributary-enrich"),
    ] {
        let pod = &find(&docs, kind, name)["spec"]["template"]["spec"];
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["secret"]["secretName"] == secret["metadata"]["name"])
            .unwrap_or_else(|| panic!("{name} mounts the Kafka secret"));
        let mount = pod["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume["name"])
            .unwrap();
        assert_eq!(mount["mountPath"], KAFKA_SECRETS, "{name}");
        assert_eq!(mount["readOnly"], true, "{name}");
    }
}

/// Sample names the components export, from the `# TYPE` lines of their
/// registries. A family prints nothing until it holds a label set, so each gets one.
fn exported_samples() -> std::collections::BTreeSet<String> {
    use tributary_capture::metrics as capture;
    use tributary_enricher::metrics as enrich;
    use tributary_tables::metrics as tables;
    let mut registry = prometheus_client::registry::Registry::default();
    let c = tributary_capture::CaptureMetrics::register(&mut registry);
    let t = tributary_tables::TablesMetrics::register(&mut registry);
    let e = tributary_enricher::EnrichMetrics::register(&mut registry);
    let table = capture::TableLabel { table: "t".into() };
    c.events.get_or_create(&table).inc();
    c.error("e");
    c.snapshot_rows_done.get_or_create(&table).set(1);
    c.snapshot_rows_estimated.get_or_create(&table).set(1);
    let partition = tables::PartitionLabel::new("t", 0);
    let table = tables::TableLabel { table: "t".into() };
    let result = tables::ResultLabel {
        table: "t".into(),
        result: "ok".into(),
    };
    let method = tables::MethodLabel { method: "Get" };
    t.applied.get_or_create(&partition).inc();
    t.lag_records.get_or_create(&partition).set(0);
    t.ready.get_or_create(&partition).set(1);
    t.bad_records.get_or_create(&table).inc();
    t.misplaced_records.get_or_create(&partition).inc();
    t.unavailable_values_filled.get_or_create(&table).inc();
    t.unavailable_values_unfilled.get_or_create(&table).inc();
    t.superseded_records.get_or_create(&table).inc();
    t.get_seconds.get_or_create(&table).observe(0.1);
    t.remote_calls.get_or_create(&result).inc();
    t.remote_cache.get_or_create(&result).inc();
    t.remote_batch_keys.get_or_create(&table).observe(1.0);
    t.remote_limiter_waits.get_or_create(&table).inc();
    t.remote_breaker_open.get_or_create(&table).set(0);
    t.remote_get_seconds.get_or_create(&table).observe(0.1);
    t.remote_invalidations.get_or_create(&table).inc();
    let group = tables::GroupLabel { group: "g".into() };
    let reason = tables::ReasonLabel {
        group: "g".into(),
        reason: "http_503".into(),
    };
    t.remote_budget_rate.get_or_create(&group).set(1.0);
    t.remote_budget_share.get_or_create(&group).set(1.0);
    t.remote_budget_members.get_or_create(&group).set(1);
    t.remote_budget_decreases.get_or_create(&reason).inc();
    t.remote_budget_last_decrease.get_or_create(&reason).set(1);
    t.history_bytes.get_or_create(&table).set(0);
    t.versions_removed.get_or_create(&table).inc();
    t.grpc_requests
        .get_or_create(&tables::GrpcLabel {
            method: "Get",
            code: "Ok".into(),
        })
        .inc();
    t.grpc_seconds.get_or_create(&method).observe(0.1);
    t.grpc_forwarded.get_or_create(&method).inc();
    t.grpc_row_cache.get_or_create(&result).inc();
    t.join_row_cache.get_or_create(&result).inc();
    let job = enrich::JobLabel { job: "j".into() };
    e.events_in.get_or_create(&job).inc();
    e.events_out.get_or_create(&job).inc();
    e.dead_lettered.get_or_create(&job).inc();
    e.retried.get_or_create(&job).inc();
    e.skipped
        .get_or_create(&enrich::SkipLabel {
            job: "j".into(),
            reason: "r".into(),
        })
        .inc();
    e.join("j", "t", "hit").inc();
    e.latency_seconds.get_or_create(&job).observe(0.1);
    let input = enrich::InputLabel {
        job: "j".into(),
        topic: "i".into(),
        partition: "0".into(),
    };
    e.lag_records.get_or_create(&input).set(0);
    e.job_lag_records.get_or_create(&job).set(0);
    e.in_flight_bytes.get_or_create(&job).set(0);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let mut samples = std::collections::BTreeSet::new();
    for line in text.lines() {
        let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|t| t.split_once(' '))
        else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        samples.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    let registered = format!("{registry:?}").matches("Descriptor {").count();
    let typed = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(
        typed, registered,
        "every registered metric holds a sample here"
    );
    samples
}

#[test]
fn the_grafana_dashboard_queries_only_exported_metrics() {
    let exported = exported_samples();
    assert!(
        exported.contains("tributary_table_grpc_requests_total"),
        "{exported:?}"
    );
    let text =
        std::fs::read_to_string(repo().join("deploy/grafana/tributary-dashboard.json")).unwrap();
    let dashboard: Json = serde_json::from_str(&text).unwrap();
    let mut queried = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let targets = panel["targets"].as_array().unwrap();
        assert!(
            !targets.is_empty(),
            "panel {} queries nothing",
            panel["title"]
        );
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            let names = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|t| t.starts_with("tributary_"));
            // The binary's own status metrics: checked against a running
            // component in tests/status_page.rs.
            for name in names.filter(|n| !n.starts_with("tributary_status_")) {
                assert!(
                    exported.contains(name),
                    "panel {}: {name} is not exported",
                    panel["title"]
                );
                queried.insert(name.to_owned());
            }
        }
    }
    for part in [
        "tributary_capture_",
        "tributary_table_",
        "tributary_enrich_",
        "tributary_table_grpc_",
    ] {
        assert!(
            queried.iter().any(|q| q.starts_with(part)),
            "nothing of {part}"
        );
    }
}
