//! `tributary-bench versions`: a versioned local table's as-of get against
//! its latest get, on the same table and keys (every key with `--versions`
//! versions), side by side; and what a version costs on disk.

use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde_json::json;
use tributary_proto::partition::partition_for_key;
use tributary_table_api::AsOf;
use tributary_tables::{LocalTable, TablesConfig};

use crate::measure::{Series, print_latency_table};
use crate::stack::{create_topic, produce};
use crate::tables::{Keys, row, start, stop, wait_applied};

/// Arguments of `tributary-bench versions`.
#[derive(Args)]
pub(crate) struct VersionsBenchArgs {
    /// Keys in the table.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Versions of each key (changes one minute apart).
    #[arg(long, default_value_t = 10)]
    versions: u64,
    /// Gets per series.
    #[arg(long, default_value_t = 200_000)]
    lookups: usize,
    /// The stack to run against.
    #[command(flatten)]
    stack: crate::stack::Stack,
}

/// When the first version of every key became valid (ms since the epoch).
const FIRST_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const MINUTE_MS: i64 = 60_000;

pub(crate) async fn run(args: VersionsBenchArgs) -> anyhow::Result<()> {
    let (keys, versions) = (args.keys, args.versions);
    let n = keys * versions;
    let topic = format!("bench-versions-{}", std::process::id());
    eprintln!("[bench] producing {versions} versions of {keys} keys to {topic}");
    create_topic(&args.stack.brokers, &topic, 3).await?;
    // Record i is version i / keys of key i % keys: every key's versions in time order.
    produce(&args.stack.brokers, &topic, n, |i| {
        let (id, version) = (i % keys, i / keys);
        let key = format!(r#"{{"id":{id}}}"#);
        let partition = partition_for_key(key.as_bytes(), 3);
        let after: serde_json::Value = serde_json::from_str(&row(id)).expect("a row");
        let event = json!({
            "op": if version == 0 { "c" } else { "u" },
            "after": after,
            "source": { "ts_ms": FIRST_MS + version as i64 * MINUTE_MS },
        });
        (partition, key, event.to_string())
    })
    .await?;

    let dir = tempfile::tempdir()?;
    let config = TablesConfig::parse(&format!(
        "data_dir: '{}'\ngroup_id: bench-versions-{}\nkafka: {{ brokers: '{}' }}\nbatch_max_records: 5000\n\
         tables: [{{ name: kv, topic: '{topic}', versioned: {{ history: 3650d }} }}]\n",
        dir.path().display(),
        std::process::id(),
        args.stack.brokers
    ))?;
    eprintln!("[bench] materializing");
    let started = Instant::now();
    let (materializer, shutdown) = start(&config).await?;
    wait_applied(&materializer, n).await;
    let apply = started.elapsed();
    let store = materializer.store();
    store.flush()?;
    let history = store.history_bytes("kv");
    let (disk, _) = store.size_and_memory();
    let table = materializer.tables()[0].clone();
    let span_ms = versions as i64 * MINUTE_MS;
    let mut series = Vec::new();
    for round in 0..2 {
        series.push(lookups(&table, keys, args.lookups, None, round).await?);
        series.push(lookups(&table, keys, args.lookups, Some(span_ms), round).await?);
    }
    drop(table);
    stop(materializer, shutdown).await?;

    println!(
        "\n## Versioned table: as-of get vs latest get ({keys} keys × {versions} versions, 1 thread, JSON bytes)\n"
    );
    let (latest, as_of) = (&series[2], &series[3]);
    print_latency_table(&[latest], &series.iter().collect::<Vec<_>>());
    println!(
        "\nas-of p50 / latest p50 (second round): {:.2}× (target ≤ 1.5×)",
        as_of.p50().as_secs_f64() / latest.p50().as_secs_f64()
    );
    let rows_bytes = disk.saturating_sub(history);
    println!(
        "disk: history {:.1} MiB = {:.1} bytes per version; latest rows {:.1} MiB = {:.1} bytes per key; \
         applied {n} records in {:.1} s ({:.0}/s)",
        history as f64 / f64::from(1 << 20),
        history as f64 / n as f64,
        rows_bytes as f64 / f64::from(1 << 20),
        rows_bytes as f64 / keys as f64,
        apply.as_secs_f64(),
        n as f64 / apply.as_secs_f64()
    );
    Ok(())
}

/// Gets of random keys from one thread, as the stored JSON bytes: the latest
/// row, or (`span_ms`) the version valid at a random time within the versions.
async fn lookups(
    table: &Arc<LocalTable>,
    keys: u64,
    lookups: usize,
    span_ms: Option<i64>,
    round: u64,
) -> anyhow::Result<Series> {
    let table = table.clone();
    tokio::task::spawn_blocking(move || {
        let mut random = Keys(0x9e37_79b9_7f4a_7c15 + round);
        let mut latencies = Vec::with_capacity(lookups);
        let started = Instant::now();
        for _ in 0..lookups {
            let key = json!({ "id": random.next(keys) });
            let found = match span_ms {
                None => {
                    let t0 = Instant::now();
                    let found = table.get_json_bytes(&key)?.is_some();
                    latencies.push(t0.elapsed());
                    found
                }
                Some(span) => {
                    let at_ms = FIRST_MS + random.next(span as u64) as i64;
                    let t0 = Instant::now();
                    let found = matches!(
                        table.get_json_bytes_as_of(&key, at_ms * 1000)?.answer,
                        AsOf::Row(_)
                    );
                    latencies.push(t0.elapsed());
                    found
                }
            };
            anyhow::ensure!(found, "key {key} missing");
        }
        let name = match span_ms {
            None => format!("latest get (round {})", round + 1),
            Some(_) => format!("as-of get (round {})", round + 1),
        };
        Ok(Series::new(name, latencies, started.elapsed()))
    })
    .await?
}
