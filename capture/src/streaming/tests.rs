//! The streaming phase and DBLog's merge, in-process over the in-memory
//! doubles ([`crate::memory`]): whatever the interleaving of writes, chunk
//! reads and the stream, crashes included, what the sink received replays to
//! the table's state. Time is paused: a run ends when nothing is left to do.

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tributary_proto::{Op, SnapshotMarker, Value};

use super::*;
use crate::config::CaptureConfig;
use crate::incremental_state::IncrementalState;
use crate::memory::{MemoryDatabase, MemorySink, Sent, Step, Write};

const CONFIG: &str = "
server_name: shop
source: { host: db, user: capture, password: x, server_id: 7 }
include: { databases: [shop] }
kafka: { brokers: 'broker:9092' }
";

/// Rows `0..rows` of `shop.items` (id, v), committed before capture starts.
fn database(rows: i64) -> MemoryDatabase {
    let db = MemoryDatabase::new("shop", &[("items", &["id", "v"])]);
    for chunk in (0..rows).collect::<Vec<_>>().chunks(50) {
        let writes: Vec<Write> = chunk
            .iter()
            .map(|&id| Write::Upsert(id, vec![Value::Int(id * 10)]))
            .collect();
        db.commit("items", &writes);
    }
    db
}

/// `steps` random transactions over keys `0..keys` (upserts and deletes),
/// from `seed`; the DDL step, if any, at step `ddl_at`.
fn workload(steps: usize, keys: u64, seed: u64, ddl_at: Option<usize>) -> Vec<Step> {
    let mut state = seed.max(1);
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..steps)
        .map(|step| -> Step {
            if ddl_at == Some(step) {
                return Box::new(|db: &MemoryDatabase| db.add_column("items", "w"));
            }
            let writes: Vec<Write> = (0..1 + random() % 3)
                .map(|_| {
                    let id = (random() % keys) as i64;
                    match random() % 4 {
                        0 => Write::Delete(id),
                        _ => Write::Upsert(id, vec![Value::Int(random() as i64 % 1000)]),
                    }
                })
                .collect();
            Box::new(move |db: &MemoryDatabase| db.commit("items", &writes))
        })
        .collect()
}

/// Capture's streaming phase over `db`, from the sink's stored position (the
/// first time: from `start`, with an on-demand snapshot of `shop.items`
/// requested), until nothing is left to do (`Ok`) or a call fails (a crash).
async fn run(
    db: &MemoryDatabase,
    sink: &mut MemorySink,
    start: &BinlogPosition,
) -> Result<(), CaptureError> {
    let config = CaptureConfig::parse(CONFIG).unwrap();
    let metrics = CaptureMetrics::register(&mut Registry::default());
    let from = sink.stored.clone().unwrap_or_else(|| BinlogPosition {
        incremental: Some(IncrementalState {
            tables: vec!["shop.items".into()],
            after: None,
        }),
        ..start.clone()
    });
    let mut incremental =
        Incremental::new(&config, db.chunks(16), &metrics, from.incremental.clone());
    let mut reader = db.stream_from(&from);
    let mut stream = Stream {
        reader: &mut reader,
        writer: sink,
        incremental: &mut incremental,
        metrics: &metrics,
        at: from,
        in_transaction: false,
    };
    let shutdown = CancellationToken::new();
    let mut progressed = false;
    // With time paused, the clock jumps to the timeout once everything waits:
    // the stream is caught up and no chunk is left.
    match tokio::time::timeout(
        Duration::from_secs(3600),
        stream.run(&shutdown, &mut progressed),
    )
    .await
    {
        Err(_idle) => Ok(()),
        Ok(Ok(())) => panic!("the stream ended without a shutdown"),
        Ok(Err(e)) => Err(e),
    }
}

/// Runs, and after every crash runs again from the stored position, until
/// done; returns how many crashes there were.
async fn run_to_the_end(
    db: &MemoryDatabase,
    sink: &mut MemorySink,
    start: &BinlogPosition,
) -> usize {
    let mut crashes = 0;
    while let Err(e) = run(db, sink, start).await {
        assert!(e.is_transient(), "{e}");
        crashes += 1;
        assert!(crashes < 100, "no progress after {crashes} crashes");
    }
    crashes
}

/// The rows a consumer of the sink's events holds, in the table's columns.
fn replay(sink: &MemorySink, db: &MemoryDatabase) -> BTreeMap<i64, Vec<Value>> {
    sink.replay("shop", "items", &db.table("items").columns)
}

fn snapshot_rows(sink: &MemorySink) -> usize {
    sink.changes()
        .filter(|e| e.op == Op::Read && e.source.snapshot == SnapshotMarker::Incremental)
        .count()
}

#[tokio::test(start_paused = true)]
async fn an_on_demand_snapshot_merged_with_concurrent_writes_ends_in_the_tables_state() {
    for seed in 1..=40 {
        let db = database(200);
        let start = db.head();
        db.set_workload(workload(150, 260, seed, None));
        db.lag_reads(3, seed);
        let mut sink = MemorySink::default();
        assert_eq!(run_to_the_end(&db, &mut sink, &start).await, 0);
        assert_eq!(replay(&sink, &db), db.table("items").rows, "seed {seed}");
        assert!(
            snapshot_rows(&sink) > 100,
            "seed {seed}: the snapshot sent rows"
        );
        let stored = sink.stored.as_ref().expect("positions were committed");
        assert_eq!(
            stored.incremental, None,
            "seed {seed}: the snapshot finished"
        );
        assert_eq!(*stored, db.head(), "seed {seed}: the stream caught up");
    }
}

/// A database with 120 rows and a workload of 60 transactions from `seed`,
/// chunk reads lagging.
fn crash_scenario(seed: u64) -> (MemoryDatabase, BinlogPosition) {
    let db = database(120);
    let start = db.head();
    db.set_workload(workload(60, 150, seed, None));
    db.lag_reads(2, seed);
    (db, start)
}

#[tokio::test(start_paused = true)]
async fn a_crash_at_any_step_and_a_restart_from_the_stored_position_lose_nothing() {
    for seed in [3, 11] {
        let (db, start) = crash_scenario(seed);
        run_to_the_end(&db, &mut MemorySink::default(), &start).await;
        let calls = db.calls();
        assert!(calls > 100, "a full run makes {calls} calls");
        // A crash at every call of the run: stream reads and chunk reads alike.
        for crash_after in 0..calls {
            let (db, start) = crash_scenario(seed);
            db.crash_after(crash_after);
            let mut sink = MemorySink::default();
            let crashes = run_to_the_end(&db, &mut sink, &start).await;
            assert_eq!(crashes, 1, "seed {seed}, crash after {crash_after} calls");
            assert_eq!(
                replay(&sink, &db),
                db.table("items").rows,
                "seed {seed}, crash after {crash_after} calls"
            );
            let stored = sink.stored.as_ref().unwrap();
            assert_eq!(stored.incremental, None);
            assert_eq!(*stored, db.head());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_schema_change_during_a_chunk_drops_it_and_the_rows_come_again_with_the_new_column() {
    for (seed, ddl_at) in (1..=20).zip((2..60).step_by(3)) {
        let db = database(200);
        let start = db.head();
        db.set_workload(workload(80, 220, seed, Some(ddl_at)));
        db.lag_reads(2, seed);
        let mut sink = MemorySink::default();
        run_to_the_end(&db, &mut sink, &start).await;
        let table = db.table("items");
        assert_eq!(*table.columns, ["id", "v", "w"]);
        assert_eq!(replay(&sink, &db), table.rows, "seed {seed}");
        assert!(
            sink.sent
                .iter()
                .any(|s| matches!(s, Sent::SchemaChange(c) if c.ddl.contains("ADD COLUMN w"))),
            "the DDL went to the schema history"
        );
        // After the DDL, no snapshot row has the old shape.
        let ddl = sink
            .sent
            .iter()
            .position(|s| matches!(s, Sent::SchemaChange(_)))
            .unwrap();
        let old_shape_after_ddl = sink.sent[ddl..].iter().any(|s| {
            matches!(s, Sent::Change(e) if e.op == Op::Read
                && e.after.as_ref().is_some_and(|r| r.columns.len() == 2))
        });
        assert!(
            !old_shape_after_ddl,
            "seed {seed}: a chunk of the old shape was sent after the DDL"
        );
    }
}
