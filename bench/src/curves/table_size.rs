//! The curve of a local table against its size: get p50/p99, RocksDB's
//! memory, the table files and the process's resident memory, beside MariaDB
//! point selects of the same rows (up to `--table-peer-rows`, as loading
//! MariaDB takes minutes per 10M rows).
//!
//! The test broker keeps its log in memory, so the tables are loaded through
//! the store's own write path instead of a topic: [`Store::batch`], the
//! batch the materializer writes each record's row, key shape and offset in,
//! committed every [`BATCH_ROWS`] rows. Lookups go through [`LocalTable`] as
//! the lookup API's and the enricher's do. The rows are flushed into table
//! files before the gets, as a restart leaves them. The block cache is the
//! default (256 MiB): the larger tables exceed it; a table of 1,000M rows
//! (~30 GiB of files) also exceeds the memory of a 24 GiB machine, so that
//! its gets read the disk.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use serde_json::Value;
use tributary_proto::partition::partition_for_key;
use tributary_table_api::key_codec;
use tributary_tables::local_table::{LocalTable, SharedShape};
use tributary_tables::progress::Progress;
use tributary_tables::record_key::KeyShape;
use tributary_tables::store::Store;
use tributary_tables::{TablesConfig, TablesMetrics};

use crate::measure::Series;
use crate::series::Stopwatch;
use crate::tables::{load_mariadb, local_lookups, mariadb_lookups, resolve, row};

use super::{Bench, PeakRss, Points, Samples, rate};

/// Partitions of the table (as `bench tables`' topic has).
const PARTITIONS: u32 = 3;
/// Rows per write batch.
const BATCH_ROWS: u64 = 10_000;
/// Local gets per run (the first run is preceded by as many, unmeasured).
const LOCAL_LOOKUPS: usize = 200_000;
/// MariaDB point selects per run.
const PEER_LOOKUPS: usize = 20_000;
/// The table's name.
const TABLE: &str = "kv";

impl Bench {
    pub(super) async fn table_size(&self, sizes: &[u64], peer_rows: u64) -> anyhow::Result<Points> {
        let mut points = Points::new(
            "table-size",
            "Local table get against table size, beside MariaDB point selects",
            "rows in the table",
            &[
                "get µs|local get p50",
                "get µs|local get p99",
                "get µs|MariaDB SELECT p50, 1 connection",
                "get µs|MariaDB SELECT p99, 1 connection",
                "memory MiB|RocksDB: memtables + block cache",
                "memory MiB|peak RSS: loading, then gets",
                "disk MiB|table files (SST)",
            ],
        );
        let pool = mysql_async::Pool::new(self.opts.clone());
        let mysql_addr = resolve(&format!("{}:{}", self.host, self.port))?;
        for &n in sizes {
            let dir = tempfile::tempdir()?;
            PeakRss::reset()?;
            let (table, store) = load(dir.path(), n).await?;
            // Out of the memtables into table files, as a restart leaves them.
            store.flush()?;
            settle(&store).await;
            let mut samples = Samples::new();
            let peer = n <= peer_rows;
            if peer {
                eprintln!("[bench] loading {n} rows into MariaDB");
                load_mariadb(&pool, n).await?;
            }
            for run in 0..self.runs {
                if run == 0 {
                    // Warms the block cache and the page cache.
                    local_lookups(&table, n, LOCAL_LOOKUPS, 1, "warm-up").await?;
                }
                let local = local_lookups(&table, n, LOCAL_LOOKUPS, 1, "local get").await?;
                let maria = match peer {
                    true => Some(
                        mariadb_lookups(
                            "MariaDB SELECT, 1 conn",
                            mysql_addr,
                            &self.opts,
                            n,
                            PEER_LOOKUPS,
                            1,
                        )
                        .await?,
                    ),
                    false => None,
                };
                let quantile = |series: Option<&Series>, q: f64| {
                    series.map(|s| s.quantile(q).as_secs_f64() * 1e6)
                };
                let (sst_bytes, memory_bytes) = store.size_and_memory();
                samples.push(vec![
                    quantile(Some(&local), 0.5),
                    quantile(Some(&local), 0.99),
                    quantile(maria.as_ref(), 0.5),
                    quantile(maria.as_ref(), 0.99),
                    Some(memory_bytes as f64 / (1 << 20) as f64),
                    Some(PeakRss::mib()?),
                    Some(sst_bytes as f64 / (1 << 20) as f64),
                ]);
            }
            points.push_median(n as f64, &samples);
        }
        pool.disconnect().await?;
        Ok(points)
    }
}

/// A table of `n` rows (`bench tables`' [`row`]s, keyed by `{"id": …}` on
/// the partition a producer hashing the key picks) in a new store in `dir`.
async fn load(dir: &std::path::Path, n: u64) -> anyhow::Result<(Arc<LocalTable>, Arc<Store>)> {
    let config = TablesConfig::parse(&format!(
        "data_dir: '{}'\nkafka: {{ brokers: unused }}\ntables: [{{ name: {TABLE}, topic: unused }}]\n",
        dir.display()
    ))?;
    let store = Arc::new(Store::open(dir, &config.rocksdb)?);
    eprintln!("[bench] writing {n} rows into a local table");
    let started = Stopwatch::start()?;
    let writer = store.clone();
    tokio::task::spawn_blocking(move || write_rows(&writer, n)).await??;
    let took = started.own()?;
    eprintln!(
        "[bench] wrote {n} rows in {:.1} s ({:.0} rows/s, {:.2} CPU µs per row)",
        took.wall.as_secs_f64(),
        rate(n, took.wall),
        took.cpu_seconds * 1e6 / n as f64
    );
    let progress = Arc::new(Progress::default());
    for partition in 0..PARTITIONS as i32 {
        progress.assign(TABLE, partition, n as i64, Default::default());
    }
    let table = LocalTable::new(
        &config.tables[0],
        PARTITIONS,
        store.clone(),
        progress,
        TablesMetrics::register(&mut Registry::default()),
        SharedShape::default(),
    );
    Ok((Arc::new(table), store))
}

/// Writes rows `0..n` in batches of [`BATCH_ROWS`], each with its
/// partitions' key shape and (as if the rows were records) offsets.
fn write_rows(store: &Store, n: u64) -> anyhow::Result<()> {
    let shape = KeyShape {
        columns: vec!["id".to_owned()],
        quoted: Vec::new(),
        scalar: false,
        schema: None,
    };
    let mut offsets = [0i64; PARTITIONS as usize];
    for from in (0..n).step_by(BATCH_ROWS as usize) {
        let mut batch = store.batch();
        for id in from..(from + BATCH_ROWS).min(n) {
            let key = format!(r#"{{"id":{id}}}"#);
            let partition = partition_for_key(key.as_bytes(), PARTITIONS);
            if from == 0 && offsets[partition as usize] == 0 {
                batch.key_shape(TABLE, partition, &shape)?;
            }
            let encoded = key_codec::encode([&Value::from(id)])?;
            batch.upsert(TABLE, partition, &encoded, row(id).as_bytes())?;
            offsets[partition as usize] += 1;
        }
        for (partition, &next) in offsets.iter().enumerate() {
            if next > 0 {
                batch.offset(TABLE, partition as i32, next - 1)?;
            }
        }
        batch.commit()?;
    }
    Ok(())
}

/// Waits until the table files stop changing (the load's compactions are
/// done, as on a table that has been serving a while), at most two minutes.
async fn settle(store: &Store) {
    let mut last = (store.size_and_memory().0, 0);
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let size = store.size_and_memory().0;
        last = if size == last.0 {
            (size, last.1 + 1)
        } else {
            (size, 0)
        };
        if last.1 == 5 {
            return;
        }
    }
    eprintln!("[bench] the table files still change after two minutes; measuring anyway");
}
