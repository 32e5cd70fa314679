//! Capture's phases in-process over the in-memory doubles ([`crate::memory`]):
//! the initial snapshot and the stream that follows it, the streaming phase,
//! and DBLog's merge of on-demand snapshots. Whatever the interleaving of
//! writes, snapshot reads, chunk reads and the stream, crashes and restarts
//! included, what the sink received replays to the table's state. Time is
//! paused: a run ends when nothing is left to do.

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tributary_proto::{ChangeEvent, Op, SnapshotMarker, Value};

use super::*;
use crate::config::{CaptureConfig, SnapshotMode};
use crate::incremental_state::IncrementalState;
use crate::memory::{MemoryDatabase, MemoryPosition, MemorySink, Sent, Step, Write};
use crate::source_position::CapturePosition;
use crate::{Start, snapshot};

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
    start: &MemoryPosition,
) -> Result<(), CaptureError> {
    let from = sink.stored.clone().unwrap_or_else(|| CapturePosition {
        incremental: Some(IncrementalState {
            tables: vec!["shop.items".into()],
            after: None,
        }),
        ..CapturePosition::at(*start)
    });
    stream_until_idle(db, sink, from).await
}

/// A run of capture over `db` as `tributary capture` makes it with
/// `snapshot.mode: initial`: from the stored position, or after a snapshot
/// (which `shutdown` may interrupt) from the position it gives; until nothing
/// is left to do (`Ok`) or a call fails (a crash).
async fn capture_once(
    db: &MemoryDatabase,
    sink: &mut MemorySink,
    shutdown: &CancellationToken,
) -> Result<(), CaptureError> {
    let metrics = CaptureMetrics::register(&mut Registry::default());
    let from = match Start::of(sink.stored.clone(), SnapshotMode::Initial) {
        Start::Resume(position) => position,
        Start::Snapshot { interrupted } => {
            let mut tables = db.snapshot();
            let snapshot =
                snapshot::run("shop", &mut tables, sink, &metrics, shutdown, interrupted).await?;
            let Some(position) = snapshot else {
                return Ok(()); // stopped
            };
            let position = CapturePosition::at(position);
            sink.commit(position.clone()).await?;
            position
        }
        Start::Configured => unreachable!("snapshot.mode is initial"),
    };
    stream_until_idle(db, sink, from).await
}

/// Streams `db` into `sink` from `from` until nothing is left to do (`Ok`)
/// or a call fails (a crash).
async fn stream_until_idle(
    db: &MemoryDatabase,
    sink: &mut MemorySink,
    from: CapturePosition<MemoryPosition>,
) -> Result<(), CaptureError> {
    let config = CaptureConfig::parse(CONFIG).unwrap();
    let metrics = CaptureMetrics::register(&mut Registry::default());
    let mut incremental = Incremental::new(&config, db.chunks(16), &metrics, from.incremental);
    let mut reader = db.stream_from(&from.source);
    let mut stream = Stream {
        reader: &mut reader,
        writer: sink,
        incremental: &mut incremental,
        metrics: &metrics,
        at: from.source,
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
    start: &MemoryPosition,
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
        assert_eq!(
            stored.source,
            db.head(),
            "seed {seed}: the stream caught up"
        );
    }
}

/// A database with 120 rows and a workload of 60 transactions from `seed`,
/// chunk reads lagging.
fn crash_scenario(seed: u64) -> (MemoryDatabase, MemoryPosition) {
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
            assert_eq!(stored.source, db.head());
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

/// Runs capture (snapshot first) and after every crash runs it again, until
/// done; returns how many crashes there were.
async fn capture_to_the_end(db: &MemoryDatabase, sink: &mut MemorySink) -> usize {
    let mut crashes = 0;
    while let Err(e) = capture_once(db, sink, &CancellationToken::new()).await {
        assert!(e.is_transient(), "{e}");
        crashes += 1;
        assert!(crashes < 100, "no progress after {crashes} crashes");
    }
    crashes
}

/// The initial snapshot's `r` events (not on-demand ones).
fn initial_reads(sink: &MemorySink) -> Vec<&ChangeEvent> {
    sink.changes()
        .filter(|e| e.op == Op::Read && e.source.snapshot != SnapshotMarker::Incremental)
        .collect()
}

/// Checks what a finished capture of `db` left: the sink replays to the
/// table, the stream caught up, and the last snapshot row is marked `last`.
fn assert_captured(db: &MemoryDatabase, sink: &MemorySink, case: &str) {
    assert_eq!(replay(sink, db), db.table("items").rows, "{case}");
    let stored = sink.stored.as_ref().expect("positions were committed");
    assert!(!stored.snapshot_incomplete, "{case}");
    assert_eq!(stored.source, db.head(), "{case}: the stream caught up");
    let reads = initial_reads(sink);
    assert_eq!(
        reads.last().map(|e| e.source.snapshot),
        Some(SnapshotMarker::Last),
        "{case}: the last snapshot row is marked"
    );
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_and_the_stream_meet_at_the_snapshot_position() {
    const ROWS: i64 = 100;
    for seed in 1..=20 {
        let db = database(ROWS);
        let before = db.table("items").rows;
        // One write per row read, then more while streaming.
        db.set_workload(workload(160, 130, seed, None));
        let mut sink = MemorySink::default();
        assert_eq!(capture_to_the_end(&db, &mut sink).await, 0);
        assert_captured(&db, &sink, &format!("seed {seed}"));
        let reads = initial_reads(&sink);
        let read: BTreeMap<i64, Vec<Value>> = reads
            .iter()
            .map(|e| match (&e.key.values[0], &e.after) {
                (Value::Int(id), Some(after)) => (*id, after.values.clone()),
                other => panic!("a snapshot row without key or image: {other:?}"),
            })
            .collect();
        assert_eq!(reads.len(), ROWS as usize, "seed {seed}: each row once");
        assert_eq!(read, before, "seed {seed}: the rows as the snapshot began");
        // Every change after the snapshot's position, none before it.
        let at = reads[0].source.binlog().unwrap().pos;
        let streamed: Vec<u64> = sink
            .changes()
            .filter(|e| e.op != Op::Read)
            .map(|e| e.source.binlog().unwrap().pos)
            .collect();
        assert!(
            streamed.iter().all(|&pos| pos > at),
            "seed {seed}: a change from before the snapshot was streamed"
        );
        assert!(
            streamed.len() >= 160,
            "seed {seed}: every write was streamed"
        );
    }
}

/// A database of 40 rows and a workload of 70 transactions from `seed`,
/// which runs during the snapshot and the stream.
fn snapshot_crash_scenario(seed: u64) -> MemoryDatabase {
    let db = database(40);
    db.set_workload(workload(70, 60, seed, None));
    db
}

#[tokio::test(start_paused = true)]
async fn a_crash_at_any_step_of_the_snapshot_or_the_stream_and_a_restart_lose_nothing() {
    for seed in [5, 17] {
        let db = snapshot_crash_scenario(seed);
        capture_to_the_end(&db, &mut MemorySink::default()).await;
        let calls = db.calls();
        assert!(calls > 100, "a full run makes {calls} calls");
        // A crash at every call: the snapshot's start, each row read, its end,
        // and each stream read.
        for crash_after in 0..calls {
            let db = snapshot_crash_scenario(seed);
            db.crash_after(crash_after);
            let mut sink = MemorySink::default();
            let crashes = capture_to_the_end(&db, &mut sink).await;
            let case = format!("seed {seed}, crash after {crash_after} calls");
            assert_eq!(crashes, 1, "{case}");
            assert_captured(&db, &sink, &case);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_stopped_half_way_is_taken_again_and_streaming_starts_at_the_first_start() {
    let db = database(60);
    let first_start = db.head();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    // Writes during the snapshot, deletes among them; the stop after 30 rows.
    let mut steps = workload(80, 60, 9, None);
    steps.insert(
        30,
        Box::new(move |_: &MemoryDatabase| stop.cancel()) as Step,
    );
    db.set_workload(steps);
    let mut sink = MemorySink::default();
    capture_once(&db, &mut sink, &shutdown).await.unwrap();
    let stored = sink
        .stored
        .clone()
        .expect("the snapshot's start was stored");
    assert!(stored.snapshot_incomplete, "{stored:?}");
    assert_eq!(stored.source, first_start);
    assert!(initial_reads(&sink).len() < 60, "the snapshot stopped");
    // The next start snapshots again and streams from the first start: a row
    // the first snapshot sent and a write then deleted gets its delete.
    assert_eq!(capture_to_the_end(&db, &mut sink).await, 0);
    assert_captured(&db, &sink, "after the stop");
    let second_start = initial_reads(&sink)
        .last()
        .unwrap()
        .source
        .binlog()
        .unwrap()
        .pos;
    assert!(second_start > first_start.pos, "written during the first");
    assert!(
        sink.changes()
            .any(|e| e.op != Op::Read && e.source.binlog().unwrap().pos <= second_start),
        "streamed from the first start, not the second"
    );
}

#[test]
fn where_a_run_starts() {
    let at = MemoryPosition { pos: 42 };
    let stored = |incomplete: bool| CapturePosition {
        snapshot_incomplete: incomplete,
        ..CapturePosition::at(at)
    };
    for mode in [
        SnapshotMode::Initial,
        SnapshotMode::InitialOnly,
        SnapshotMode::WhenNeeded,
        SnapshotMode::Never,
    ] {
        assert_eq!(
            Start::of(Some(stored(false)), mode),
            Start::Resume(stored(false)),
            "{mode:?}"
        );
    }
    assert_eq!(
        Start::<MemoryPosition>::of(None, SnapshotMode::Never),
        Start::Configured
    );
    assert_eq!(
        Start::<MemoryPosition>::of(None, SnapshotMode::Initial),
        Start::Snapshot { interrupted: None }
    );
    assert_eq!(
        Start::of(Some(stored(true)), SnapshotMode::WhenNeeded),
        Start::Snapshot {
            interrupted: Some(at)
        }
    );
    // Never snapshot, even to finish one: resume, warning that rows may be missing.
    assert_eq!(
        Start::of(Some(stored(true)), SnapshotMode::Never),
        Start::Resume(stored(true))
    );
}

/// Tables (read in name order) and how many rows each holds.
type Tables<'a> = &'a [(&'a str, i64)];

/// The initial snapshot's markers, in the order they were sent, for tables
/// holding `rows` rows each.
async fn snapshot_markers(rows: Tables<'_>) -> Vec<&'static str> {
    let tables: Vec<(&str, &[&str])> = rows
        .iter()
        .map(|(name, _)| (*name, &["id", "v"][..]))
        .collect();
    let db = MemoryDatabase::new("shop", &tables);
    for (name, count) in rows {
        let writes: Vec<Write> = (0..*count)
            .map(|id| Write::Upsert(id, vec![Value::Int(id)]))
            .collect();
        db.commit(name, &writes);
    }
    let mut sink = MemorySink::default();
    assert_eq!(capture_to_the_end(&db, &mut sink).await, 0);
    initial_reads(&sink)
        .iter()
        .map(|e| e.source.snapshot.as_str())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn snapshot_rows_carry_debeziums_markers() {
    // Debezium's SnapshotMarkerResolver: last > first > last_in > first_in > true;
    // the first table's first row is `first`, the very last event `last`.
    let cases: [(Tables, &[&str]); 4] = [
        (
            &[("a", 2), ("b", 0), ("c", 1), ("d", 3), ("e", 0)],
            &[
                "first",
                "last_in_data_collection",
                "last_in_data_collection",
                "first_in_data_collection",
                "true",
                "last",
            ],
        ),
        (&[("a", 1)], &["last"]),
        (&[("a", 1), ("b", 1)], &["first", "last"]),
        (&[("a", 0), ("b", 2)], &["first_in_data_collection", "last"]),
    ];
    for (tables, expected) in cases {
        assert_eq!(snapshot_markers(tables).await, expected, "{tables:?}");
    }
}
