//! In-memory doubles of capture's seams, for tests that run the snapshot,
//! streaming and on-demand snapshot rules in-process: a source database
//! ([`MemoryDatabase`]) with its initial snapshot ([`MemorySnapshot`]), change
//! stream ([`MemoryStream`]) and chunk reads ([`MemoryChunks`]), and a sink
//! ([`MemorySink`]).
//!
//! The database holds tables of rows keyed by an integer `id` (the first
//! column). Every transaction appends its changes and its commit position to a
//! log that streams read from any committed position, and keeps the state of
//! the tables as of that position, so that a chunk can be read at an earlier
//! point than the latest (as a server whose commits become visible to readers
//! after replicas saw them). Writes come from a workload the test gives, run
//! one step each time a stream asks for an item or a snapshot reads a row, so
//! that reads, writes and the stream interleave in one deterministic order. Any call can be made to fail
//! once after a number of calls (a crash).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use tributary_proto::{
    BinlogCoordinates, ChangeEvent, LogCoordinates, Op, Row, SnapshotMarker, SourceInfo, Value,
};

use crate::change_stream::ChangeStream;
use crate::change_stream::{ReaderItem, SchemaChange};
use crate::chunk_source::{Begun, ChunkRead, ChunkSource, OpenedTable};
use crate::error::CaptureError;
use crate::incremental_state::{CursorValue, KeyCursor};
use crate::schema_change_record::DescribedChange;
use crate::sink::ChangeSink;
use crate::snapshot_source::{SnapshotRows, SnapshotSource, SnapshotTable, TableRead};
use crate::source_position::{CapturePosition, SourcePosition};

/// The file name events of the memory database name in their `source`.
const FILE: &str = "memory";

/// A position in a [`MemoryDatabase`]'s log: commits are two apart, and a
/// consistent read sees the state at a commit or just after it. The database
/// has no GTIDs: positions alone order it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPosition {
    /// The commit counter.
    pub pos: u64,
}

impl SourcePosition for MemoryPosition {
    fn reached(&self, other: &Self) -> bool {
        self.pos >= other.pos
    }

    fn is_after(&self, other: &Self) -> bool {
        self.pos > other.pos
    }

    fn same_transactions(&self, _other: &Self) -> bool {
        false
    }

    fn ts_ms(&self) -> i64 {
        0
    }

    fn mark_source(&self, source: &mut SourceInfo) {
        let binlog = source.binlog_mut();
        binlog.file = FILE.into();
        binlog.pos = self.pos;
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "pos": self.pos })
    }
}

impl std::fmt::Display for MemoryPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{FILE}:{}", self.pos)
    }
}

/// One table: its columns (the first is the integer key `id`) and rows by key.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryTable {
    /// Column names, in table order.
    pub columns: Arc<[String]>,
    /// Rows by key, each its values in column order.
    pub rows: BTreeMap<i64, Vec<Value>>,
}

/// A change to make in a transaction.
#[derive(Debug, Clone)]
pub enum Write {
    /// Inserts or replaces the row of `id` with these values after `id`.
    Upsert(i64, Vec<Value>),
    /// Deletes the row of `id`, if any.
    Delete(i64),
}

/// One step of a workload: what the database does before a stream reads on.
pub type Step = Box<dyn FnMut(&MemoryDatabase) + Send>;

/// A database of tables in one schema, shared by its streams and chunk readers.
#[derive(Clone)]
pub struct MemoryDatabase {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    db: Arc<str>,
    tables: BTreeMap<String, MemoryTable>,
    /// Every committed item, in commit order.
    log: Vec<ReaderItem<MemoryPosition>>,
    /// The tables as of each commit, by the commit's `pos`.
    history: Vec<(u64, BTreeMap<String, MemoryTable>)>,
    next_pos: u64,
    /// Steps still to run, one per item a stream asks for.
    workload: Vec<Step>,
    /// Calls left before one fails (a crash), if a crash is due.
    calls_until_failure: Option<usize>,
    /// Calls made so far.
    calls: usize,
    /// How many commits back a chunk read may see while writes go on (0: the latest).
    read_lag: usize,
    /// Picks the read lag of each chunk read.
    seed: u64,
}

impl MemoryDatabase {
    /// A database `db` with one table per `(name, columns)`, empty, at
    /// position 4; commits are two positions apart.
    pub fn new(db: &str, tables: &[(&str, &[&str])]) -> Self {
        let tables: BTreeMap<String, MemoryTable> = tables
            .iter()
            .map(|(name, columns)| {
                let table = MemoryTable {
                    columns: columns.iter().map(|c| (*c).to_owned()).collect(),
                    rows: BTreeMap::new(),
                };
                ((*name).to_owned(), table)
            })
            .collect();
        MemoryDatabase {
            inner: Arc::new(Mutex::new(Inner {
                db: db.into(),
                history: vec![(4, tables.clone())],
                tables,
                log: Vec::new(),
                next_pos: 5,
                workload: Vec::new(),
                calls_until_failure: None,
                calls: 0,
                read_lag: 0,
                seed: 1,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("memory database lock")
    }

    /// The position after the last commit.
    pub fn head(&self) -> MemoryPosition {
        let inner = self.lock();
        position(inner.history.last().expect("an initial state").0)
    }

    /// A table as it is now.
    pub fn table(&self, name: &str) -> MemoryTable {
        self.lock().tables[name].clone()
    }

    /// Commits `writes` to `table` in one transaction.
    pub fn commit(&self, table: &str, writes: &[Write]) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let db = inner.db.clone();
        let state = inner
            .tables
            .get_mut(table)
            .expect("a table of the database");
        let pos = inner.next_pos;
        inner.next_pos += 2;
        for write in writes {
            let (id, after) = match write {
                Write::Upsert(id, rest) => {
                    let mut values = vec![Value::Int(*id)];
                    values.extend(rest.iter().cloned());
                    values.resize(state.columns.len(), Value::Null);
                    (*id, Some(values))
                }
                Write::Delete(id) => (*id, None),
            };
            let before = match &after {
                Some(values) => state.rows.insert(id, values.clone()),
                None => state.rows.remove(&id),
            };
            let op = match (&before, &after) {
                (None, None) => continue,
                (None, Some(_)) => Op::Create,
                (Some(_), Some(_)) => Op::Update,
                (Some(_), None) => Op::Delete,
            };
            let row = |values: Vec<Value>| Row {
                columns: state.columns.clone(),
                values,
            };
            let source = SourceInfo {
                db: db.clone(),
                table: table.into(),
                log: LogCoordinates::Binlog(BinlogCoordinates {
                    file: FILE.into(),
                    pos,
                    ..BinlogCoordinates::default()
                }),
                ..SourceInfo::default()
            };
            inner.log.push(ReaderItem::Change(Box::new(ChangeEvent {
                op,
                key: key_row(id),
                before: before.map(row),
                after: after.map(row),
                source,
                ts_ms: 0,
                transaction: None,
                undecodable: Vec::new(),
                schemas: None,
                key_change: None,
            })));
        }
        inner.log.push(ReaderItem::Commit(position(pos)));
        inner.history.push((pos, inner.tables.clone()));
    }

    /// Adds `column` to `table` (NULL in every row): a DDL statement.
    pub fn add_column(&self, table: &str, column: &str) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let state = inner
            .tables
            .get_mut(table)
            .expect("a table of the database");
        let mut columns = state.columns.to_vec();
        columns.push(column.to_owned());
        state.columns = columns.into();
        for values in state.rows.values_mut() {
            values.push(Value::Null);
        }
        let pos = inner.next_pos;
        inner.next_pos += 2;
        inner
            .log
            .push(ReaderItem::SchemaChange(Box::new(SchemaChange {
                db: inner.db.to_string(),
                ddl: format!("ALTER TABLE {table} ADD COLUMN {column} INT"),
                position: position(pos),
                recorded: true,
                described: None,
            })));
        inner.log.push(ReaderItem::Commit(position(pos)));
        inner.history.push((pos, inner.tables.clone()));
    }

    /// Steps the database runs, one before each item a stream reads (each
    /// step should commit: a read point between transactions waits for the next).
    pub fn set_workload(&self, steps: Vec<Step>) {
        self.lock().workload = steps.into_iter().rev().collect();
    }

    /// The calls (stream reads, chunk reads) made so far.
    pub fn calls(&self) -> usize {
        self.lock().calls
    }

    /// Makes the call after `calls` more calls (stream reads, chunk reads) fail once.
    pub fn crash_after(&self, calls: usize) {
        self.lock().calls_until_failure = Some(calls);
    }

    /// Lets each chunk read, while the workload runs, see the state of up to
    /// `commits` commits ago, at a commit's position or just after it (chosen
    /// by `seed`).
    pub fn lag_reads(&self, commits: usize, seed: u64) {
        let mut inner = self.lock();
        inner.read_lag = commits;
        inner.seed = seed.max(1);
    }

    /// A stream of the items committed after `from`.
    pub fn stream_from(&self, from: &MemoryPosition) -> MemoryStream {
        let inner = self.lock();
        let next = inner
            .log
            .iter()
            .position(|item| matches!(item, ReaderItem::Commit(p) if p.pos > from.pos))
            .map_or(inner.log.len(), |commit| {
                // The first item of the transaction that commits after `from`.
                inner.log[..commit]
                    .iter()
                    .rposition(|item| matches!(item, ReaderItem::Commit(_)))
                    .map_or(0, |previous| previous + 1)
            });
        MemoryStream {
            database: self.clone(),
            next,
        }
    }

    /// The initial snapshot's reads of the tables.
    pub fn snapshot(&self) -> MemorySnapshot {
        MemorySnapshot {
            database: self.clone(),
            begun: None,
        }
    }

    /// Counts a call (failing if it is the one to crash), then runs the next
    /// step of the workload, if any.
    fn step(&self) -> Result<(), CaptureError> {
        let step = {
            let mut inner = self.lock();
            inner.call()?;
            inner.workload.pop()
        };
        if let Some(mut step) = step {
            step(self);
        }
        Ok(())
    }

    /// Chunked reads of the tables, `chunk_rows` rows each.
    pub fn chunks(&self, chunk_rows: usize) -> MemoryChunks {
        MemoryChunks {
            database: self.clone(),
            chunk_rows,
            open: None,
            begun: None,
        }
    }
}

impl Inner {
    /// Counts a call; an error when it is the one to fail.
    fn call(&mut self) -> Result<(), CaptureError> {
        self.calls += 1;
        match &mut self.calls_until_failure {
            Some(0) => {
                self.calls_until_failure = None;
                Err(CaptureError::Unreachable {
                    endpoint: "memory database".into(),
                    detail: "crashed (as the test asked)".into(),
                })
            }
            Some(left) => {
                *left -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A pseudo-random number (xorshift).
    fn random(&mut self) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed
    }
}

fn position(pos: u64) -> MemoryPosition {
    MemoryPosition { pos }
}

fn key_row(id: i64) -> Row {
    Row {
        columns: vec!["id".to_owned()].into(),
        values: vec![Value::Int(id)],
    }
}

/// The items of a [`MemoryDatabase`]'s log from a position on.
pub struct MemoryStream {
    database: MemoryDatabase,
    next: usize,
}

impl ChangeStream for MemoryStream {
    type Position = MemoryPosition;

    async fn next(&mut self) -> Result<Option<ReaderItem<MemoryPosition>>, CaptureError> {
        self.database.step()?;
        let item = {
            let inner = self.database.lock();
            inner.log.get(self.next).cloned()
        };
        match item {
            Some(item) => {
                self.next += 1;
                Ok(Some(item))
            }
            // Caught up with nothing left to do: an idle server.
            None => std::future::pending().await,
        }
    }

    async fn close(self) {}
}

/// The initial snapshot of a [`MemoryDatabase`]: the tables as of the last
/// commit when it begins; each row read is a call (and runs a workload step).
pub struct MemorySnapshot {
    database: MemoryDatabase,
    /// The state the read sees.
    begun: Option<BTreeMap<String, MemoryTable>>,
}

impl SnapshotSource for MemorySnapshot {
    type Position = MemoryPosition;

    async fn begin(&mut self) -> Result<(MemoryPosition, Vec<SnapshotTable>), CaptureError> {
        let mut inner = self.database.lock();
        inner.call()?;
        let (pos, state) = inner.history.last().expect("an initial state").clone();
        let tables = state
            .iter()
            .map(|(name, table)| SnapshotTable {
                db: inner.db.to_string(),
                table: name.clone(),
                estimate: table.rows.len() as u64,
            })
            .collect();
        self.begun = Some(state);
        Ok((position(pos), tables))
    }

    /// The in-memory database has no DDL to describe.
    async fn schema_changes(
        &mut self,
        _tables: &[SnapshotTable],
        _source: &SourceInfo,
    ) -> Result<Vec<DescribedChange>, CaptureError> {
        Ok(Vec::new())
    }

    async fn read_table<R: SnapshotRows>(
        &mut self,
        table: &SnapshotTable,
        source: &SourceInfo,
        rows: &mut R,
    ) -> Result<TableRead, CaptureError> {
        let state = self.begun.as_ref().expect("the snapshot was begun");
        let Some(read) = state.get(&table.table) else {
            return Ok(TableRead::Gone);
        };
        for (id, values) in &read.rows {
            self.database.step()?;
            let event = ChangeEvent {
                op: Op::Read,
                key: key_row(*id),
                before: None,
                after: Some(Row {
                    columns: read.columns.clone(),
                    values: values.clone(),
                }),
                source: SourceInfo {
                    db: table.db.as_str().into(),
                    table: table.table.as_str().into(),
                    ..source.clone()
                },
                ts_ms: source.ts_ms,
                transaction: None,
                undecodable: Vec::new(),
                schemas: None,
                key_change: None,
            };
            if rows.row(event).await?.is_break() {
                return Ok(TableRead::Stopped);
            }
        }
        Ok(TableRead::Read)
    }

    async fn end(&mut self) -> Result<(), CaptureError> {
        self.begun = None;
        self.database.lock().call()
    }
}

/// Chunked, consistent reads of a [`MemoryDatabase`].
pub struct MemoryChunks {
    database: MemoryDatabase,
    chunk_rows: usize,
    /// The open table and its columns when it was opened.
    open: Option<(String, Arc<[String]>)>,
    /// The state a read begun sees.
    begun: Option<BTreeMap<String, MemoryTable>>,
}

impl ChunkSource for MemoryChunks {
    type Position = MemoryPosition;

    async fn open(&mut self, name: &str) -> Result<Option<OpenedTable>, CaptureError> {
        let mut inner = self.database.lock();
        inner.call()?;
        let Some((db, table)) = name.split_once('.') else {
            return Ok(None);
        };
        let Some(state) = inner.tables.get(table).filter(|_| *inner.db == *db) else {
            return Ok(None);
        };
        let opened = OpenedTable {
            db: inner.db.clone(),
            table: table.into(),
            columns: state.columns.clone(),
            key_columns: vec!["id".to_owned()].into(),
            estimate: state.rows.len() as u64,
        };
        self.open = Some((table.to_owned(), state.columns.clone()));
        Ok(Some(opened))
    }

    async fn begin(&mut self) -> Result<Begun<MemoryPosition>, CaptureError> {
        let mut inner = self.database.lock();
        inner.call()?;
        // Once the writes are done, every commit is visible.
        let back = match inner.read_lag {
            lag if lag > 0 && !inner.workload.is_empty() => inner.random() as usize % (lag + 1),
            _ => 0,
        };
        let at = inner.history.len().saturating_sub(1 + back);
        let (pos, state) = inner.history[at].clone();
        // A read point is a commit's position or one between two transactions
        // (commits are two apart), as a server's can be.
        let between = back > 0 || (inner.read_lag > 0 && !inner.workload.is_empty());
        let between = between && inner.random() % 2 == 1;
        self.begun = Some(state);
        Ok(Begun::At(position(pos + u64::from(between))))
    }

    async fn read(
        &mut self,
        after: Option<&KeyCursor>,
        _point: &MemoryPosition,
        source: &SourceInfo,
    ) -> Result<ChunkRead, CaptureError> {
        self.database.lock().call()?;
        let state = self.begun.take().expect("a read was begun");
        let (name, opened_columns) = self.open.as_ref().expect("a table is open");
        let table = &state[name];
        if table.columns != *opened_columns {
            return Ok(ChunkRead::Changed);
        }
        let after = match after.map(|key| &key.values[..]) {
            Some([CursorValue::Int(id)]) => Some(*id),
            _ => None,
        };
        let rows: Vec<(i64, Vec<Value>)> = table
            .rows
            .range(after.map_or(i64::MIN, |id| id + 1)..)
            .take(self.chunk_rows)
            .map(|(id, values)| (*id, values.clone()))
            .collect();
        let complete = rows.len() < self.chunk_rows;
        let last_key = rows.last().map(|(id, _)| KeyCursor {
            columns: vec!["id".to_owned()],
            values: vec![CursorValue::Int(*id)],
        });
        let db = self.database.lock().db.clone();
        let rows = rows
            .into_iter()
            .map(|(id, values)| ChangeEvent {
                op: Op::Read,
                key: key_row(id),
                before: None,
                after: Some(Row {
                    columns: table.columns.clone(),
                    values,
                }),
                source: SourceInfo {
                    db: db.clone(),
                    table: name.as_str().into(),
                    snapshot: SnapshotMarker::Incremental,
                    ..source.clone()
                },
                ts_ms: source.ts_ms,
                transaction: None,
                undecodable: Vec::new(),
                schemas: None,
                key_change: None,
            })
            .collect();
        Ok(ChunkRead::Chunk {
            rows,
            last_key,
            complete,
        })
    }

    async fn abort(&mut self) -> Result<(), CaptureError> {
        self.begun = None;
        Ok(())
    }

    fn close_table(&mut self) {
        self.open = None;
    }
}

/// What a [`MemorySink`] received, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    /// A change event.
    Change(Box<ChangeEvent>),
    /// A DDL statement.
    SchemaChange(SchemaChange<MemoryPosition>),
    /// A heartbeat (its position is committed too).
    Heartbeat(CapturePosition<MemoryPosition>),
    /// A committed position.
    Commit(CapturePosition<MemoryPosition>),
}

/// A sink in memory: everything sent is kept at once (as an at-least-once
/// topic keeps what a crashed producer sent), and a position is stored as soon
/// as it is committed.
#[derive(Debug, Default)]
pub struct MemorySink {
    /// Everything received, in order, across restarts.
    pub sent: Vec<Sent>,
    /// The position a restart resumes from.
    pub stored: Option<CapturePosition<MemoryPosition>>,
}

impl MemorySink {
    /// The change events received, in order.
    pub fn changes(&self) -> impl Iterator<Item = &ChangeEvent> {
        self.sent.iter().filter_map(|s| match s {
            Sent::Change(event) => Some(&**event),
            _ => None,
        })
    }

    /// What a consumer that applies the change events in order holds for
    /// `db.table`: its rows by key (an `r`, `c` or `u` event upserts, a `d`
    /// deletes), each as the values of `columns` (NULL for a column its last
    /// event did not have: one added since, whose default is NULL).
    pub fn replay(&self, db: &str, table: &str, columns: &[String]) -> BTreeMap<i64, Vec<Value>> {
        let mut rows = BTreeMap::new();
        for event in self
            .changes()
            .filter(|e| &*e.source.db == db && &*e.source.table == table)
        {
            let Some(Value::Int(id)) = event.key.values.first() else {
                continue;
            };
            match &event.after {
                Some(after) => {
                    let value_of = |name: &String| {
                        let at = after.columns.iter().position(|c| c == name);
                        at.map_or(Value::Null, |i| after.values[i].clone())
                    };
                    rows.insert(*id, columns.iter().map(value_of).collect())
                }
                None => rows.remove(id),
            };
        }
        rows
    }
}

impl ChangeSink<MemoryPosition> for MemorySink {
    async fn stored_position(
        &self,
    ) -> Result<Option<CapturePosition<MemoryPosition>>, CaptureError> {
        Ok(self.stored.clone())
    }

    async fn send(&mut self, event: &ChangeEvent) -> Result<(), CaptureError> {
        self.sent.push(Sent::Change(Box::new(event.clone())));
        Ok(())
    }

    async fn send_schema_change(
        &mut self,
        change: &SchemaChange<MemoryPosition>,
    ) -> Result<(), CaptureError> {
        self.sent.push(Sent::SchemaChange(change.clone()));
        Ok(())
    }

    async fn send_heartbeat(
        &mut self,
        position: CapturePosition<MemoryPosition>,
    ) -> Result<(), CaptureError> {
        self.sent.push(Sent::Heartbeat(position.clone()));
        self.commit(position).await
    }

    async fn commit(
        &mut self,
        position: CapturePosition<MemoryPosition>,
    ) -> Result<(), CaptureError> {
        self.sent.push(Sent::Commit(position.clone()));
        self.stored = Some(position);
        Ok(())
    }

    fn commit_interval(&self) -> Option<Duration> {
        None
    }

    async fn commit_if_due(&mut self) -> Result<(), CaptureError> {
        Ok(())
    }

    async fn store_now(
        &mut self,
        position: &CapturePosition<MemoryPosition>,
    ) -> Result<(), CaptureError> {
        self.commit(position.clone()).await
    }

    async fn close(self, _timeout: Duration, _failed: bool) -> Result<(), CaptureError> {
        Ok(())
    }
}
