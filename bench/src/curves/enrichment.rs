//! The curves of enrichment: events/s and CPU per event against the number
//! of joins (each a local table of its own, 0 to 8), and against the cache
//! hit ratio of one remote MariaDB join; each point beside the raw consume →
//! produce copy of the same events (`bench enrich`'s peer), measured in the
//! same run. The jobs run in this process, as in `bench enrich`.
//!
//! The hit ratio drawn is the one the remote table's `remote_cache` metric
//! counted. It is a little below 1 − products ÷ events: lookups of a key
//! made while its first miss is being fetched count as misses too (they wait
//! for that one fetch, [`RemoteTable`](tributary_tables::remote::RemoteTable)).

use std::path::{Path, PathBuf};

use prometheus_client::registry::Registry;
use tributary_enricher::Bounds;
use tributary_enricher::bounds::{StartAt, StopAt};
use tributary_tables::TablesMetrics;
use tributary_tables::metrics::ResultLabel;

use crate::enrich::{enrich, produce_orders, produce_users, raw_copy};
use crate::stack::load_products;

use super::{Bench, PeakRss, Points, Samples};

/// The tables file of `enrich-joins`.
const TABLES_FILE: &str = "tables.yaml";
/// Join counts of `enrich-joins`, up to one join per table of [`MAX_JOINS`].
const JOIN_COUNTS: [usize; 5] = [0, 1, 2, 4, MAX_JOINS];
/// The most joins of `enrich-joins`, each to a local table of its own.
const MAX_JOINS: usize = 8;
/// Rows of each local table of `enrich-joins`.
const USERS: u64 = 100_000;
/// Distinct products the events of `enrich-hit-ratio` name, as a share of
/// the events: the rest are cache hits.
const DISTINCT_SHARES: [f64; 5] = [1.0, 0.5, 0.2, 0.05, 0.01];
/// Columns of both curves after their own.
const PEER_COLUMNS: [&str; 2] = [
    "events/s|raw consume → produce, the same events",
    "CPU µs per event|raw consume → produce, the same events",
];

/// The bounds of every run: the input topics from their beginning to their end.
const BOUNDS: Bounds = Bounds {
    from: StartAt::Beginning,
    until: StopAt::End,
};

/// One measured run of a job file.
struct Run {
    events_per_s: f64,
    cpu_us: f64,
    peak_rss_mib: f64,
    /// Lookups of remote tables the cache answered, and all of them.
    cache: (u64, u64),
}

impl Bench {
    pub(super) async fn enrich_joins(&self, events: u64) -> anyhow::Result<Points> {
        let mut points = Points::new(
            "enrich-joins",
            "Enrichment against the number of joins (local tables)",
            "joins per event",
            &columns(&[
                "events/s|enrichment",
                "CPU µs per event|enrichment",
                "peak RSS MiB|enrichment",
            ]),
        )
        .linear_x();
        let topic = |what: &str| self.name("curve-enrich", &format!(".{what}"));
        let orders = topic("orders");
        let tables: Vec<String> = (0..MAX_JOINS)
            .map(|i| topic(&format!("users{i}")))
            .collect();
        eprintln!(
            "[bench] producing {} tables of {USERS} users and {events} orders",
            tables.len()
        );
        for users in &tables {
            produce_users(&self.brokers, users, USERS).await?;
        }
        produce_orders(&self.brokers, &orders, events, USERS, 1).await?;
        let dir = tempfile::tempdir()?;
        let declared: Vec<String> = tables
            .iter()
            .enumerate()
            .map(|(i, t)| format!("  - {{ name: users{i}, topic: '{t}' }}\n"))
            .collect();
        std::fs::write(
            dir.path().join(TABLES_FILE),
            format!(
                "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\nrocksdb: {{ row_cache_mb: 64 }}\nbatch_max_records: 5000\ntables:\n{}",
                dir.path().join("data").display(),
                self.brokers,
                declared.concat()
            ),
        )?;
        let job = |joins: usize| -> anyhow::Result<PathBuf> {
            let steps: String = (0..joins)
                .map(|i| {
                    format!(
                        "      - {{ table: users{i}, key: user_id, select: [name, tier], into: user{i} }}\n"
                    )
                })
                .collect();
            let steps = match joins {
                0 => String::new(),
                _ => format!("    joins:\n{steps}"),
            };
            self.job_file(
                dir.path(),
                &format!("joins{joins}"),
                TABLES_FILE,
                &orders,
                &steps,
            )
        };
        eprintln!("[bench] materializing the tables");
        self.run_job(&job(MAX_JOINS)?, events).await?;
        for joins in JOIN_COUNTS {
            let file = job(joins)?;
            let mut samples = Samples::new();
            for run in 0..self.runs {
                eprintln!("[bench] {joins} joins, run {}", run + 1);
                let enriched = self.run_job(&file, events).await?;
                let raw = self
                    .raw_copy(&orders, events, &format!("j{joins}r{run}"))
                    .await?;
                samples.push(vec![
                    Some(enriched.events_per_s),
                    Some(enriched.cpu_us),
                    Some(enriched.peak_rss_mib),
                    Some(raw.0),
                    Some(raw.1),
                ]);
            }
            points.push_median(joins as f64, &samples);
        }
        Ok(points)
    }

    pub(super) async fn enrich_hit_ratio(&self, events: u64) -> anyhow::Result<Points> {
        let mut points = Points::new(
            "enrich-hit-ratio",
            "Enrichment with a remote MariaDB join against its cache hit ratio",
            "cache hit ratio (%)",
            &columns(&[
                "events/s|enrichment, 1 remote join",
                "CPU µs per event|enrichment, 1 remote join",
            ]),
        )
        .linear_x();
        let dir = tempfile::tempdir()?;
        for share in DISTINCT_SHARES {
            let products = ((events as f64 * share) as u64).max(1);
            let orders = self.name("curve-enrich", &format!(".orders-p{products}"));
            eprintln!("[bench] {events} orders of {products} products");
            produce_orders(&self.brokers, &orders, events, USERS, products).await?;
            let table = load_products(&self.mysql_url, products).await?;
            let name = format!("hits-p{products}");
            let tables_file = format!("{name}.tables.yaml");
            std::fs::write(
                dir.path().join(&tables_file),
                format!(
                    "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\nremote:\n  - {{ name: products, mysql: {{ url: '{}', table: '{table}', key: [sku] }}, cache: {{ ttl_s: 3600, max_entries: {products} }} }}\n",
                    dir.path().join(&name).display(),
                    self.brokers,
                    self.mysql_url
                ),
            )?;
            let file = self.job_file(
                dir.path(),
                &name,
                &tables_file,
                &orders,
                "    joins:\n      - { table: products, key: sku, select: [title, price], into: product }\n",
            )?;
            let mut samples = Samples::new();
            let mut hit_ratios = Vec::new();
            for run in 0..self.runs {
                eprintln!("[bench] {products} products, run {}", run + 1);
                let enriched = self.run_job(&file, events).await?;
                let (hits, lookups) = enriched.cache;
                anyhow::ensure!(lookups > 0, "{name}: no remote lookup counted");
                hit_ratios.push(hits as f64 / lookups as f64);
                let raw = self
                    .raw_copy(&orders, events, &format!("p{products}r{run}"))
                    .await?;
                samples.push(vec![
                    Some(enriched.events_per_s),
                    Some(enriched.cpu_us),
                    Some(raw.0),
                    Some(raw.1),
                ]);
            }
            // The cache starts cold in each run: every run has the same ratio.
            let ratio = hit_ratios.iter().sum::<f64>() / hit_ratios.len() as f64;
            eprintln!(
                "[bench] {products} products: cache hit ratio {:.2}% ({:.2}% if each missed once)",
                ratio * 100.0,
                (1.0 - products as f64 / events as f64) * 100.0
            );
            points.push_median(ratio * 100.0, &samples);
        }
        Ok(points)
    }

    /// Writes `<name>.yaml` in `dir`, a job reading `orders` with `joins`
    /// (its `joins:` section) over the tables of the file `tables` beside it.
    fn job_file(
        &self,
        dir: &Path,
        name: &str,
        tables: &str,
        orders: &str,
        joins: &str,
    ) -> anyhow::Result<PathBuf> {
        let output = self.name("curve-enrich", &format!(".{name}-out"));
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &file,
            format!(
                "kafka: {{ brokers: '{}' }}\ntables: {tables}\njobs:\n  - name: {name}\n    input: {{ topics: ['{orders}'] }}\n{joins}    output: {{ topic: '{output}', key: order_id }}\n    dead_letter: {{ topic: '{output}.dlq' }}\n",
                self.brokers
            ),
        )?;
        Ok(file)
    }

    /// Runs a job file over its `events` input events, measuring it.
    async fn run_job(&self, file: &Path, events: u64) -> anyhow::Result<Run> {
        let metrics = TablesMetrics::register(&mut Registry::default());
        let cpu = crate::series::Stopwatch::start()?;
        PeakRss::reset()?;
        let summary = enrich(file, BOUNDS, &metrics).await?;
        let peak_rss_mib = PeakRss::mib()?;
        let cpu = cpu.own()?.cpu_seconds;
        anyhow::ensure!(
            summary.events_out == events,
            "{}: expected {events} enriched events, got {summary:?}",
            file.display()
        );
        let cached = |result: &str| {
            metrics
                .remote_cache
                .get_or_create(&ResultLabel {
                    table: "products".to_owned(),
                    result: result.to_owned(),
                })
                .get()
        };
        let hits = cached("hit");
        Ok(Run {
            events_per_s: events as f64 / summary.seconds,
            cpu_us: cpu * 1e6 / events as f64,
            peak_rss_mib,
            cache: (hits, hits + cached("miss")),
        })
    }

    /// The raw copy of `events` events of `orders`: events/s and CPU µs per event.
    async fn raw_copy(&self, orders: &str, events: u64, point: &str) -> anyhow::Result<(f64, f64)> {
        let to = self.name("curve-enrich", &format!(".raw-{point}"));
        let cpu = crate::series::Stopwatch::start()?;
        let seconds = raw_copy(&self.brokers, orders, &to, events).await?;
        let cpu = cpu.own()?.cpu_seconds;
        Ok((events as f64 / seconds, cpu * 1e6 / events as f64))
    }
}

/// A curve's own columns, then the raw copy's.
fn columns(own: &[&'static str]) -> Vec<&'static str> {
    own.iter().copied().chain(PEER_COLUMNS).collect()
}
