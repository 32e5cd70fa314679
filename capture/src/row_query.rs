//! The statement behind each binlog rows event (`source.query`, with
//! `events.include.query`): [`RowQueries`] follows the statements of a
//! stream as the decoder reads it.
//!
//! MySQL sends each statement as a ROWS_QUERY event before the TABLE_MAPs of
//! its rows (`binlog_rows_query_log_events=ON`). MariaDB writes it there as
//! an ANNOTATE_ROWS event (`binlog_annotate_row_events=ON`, the default), but
//! its dump thread sends those only to a replica that asks with the
//! `BINLOG_SEND_ANNOTATE_ROWS_EVENT` flag of COM_BINLOG_DUMP, and
//! `mysql_async` sends no flag but `BINLOG_DUMP_NON_BLOCK` there. So
//! [`Annotations`] lists the binlog's events with `SHOW BINLOG EVENTS` on a
//! pooled connection, a window at a time just ahead of the stream, and
//! answers, for the TABLE_MAP that starts at a position, the statement of the
//! ANNOTATE_ROWS event that ends there. Live, that is one listing per
//! transaction with captured rows; catching up, one per [`WINDOW`] events.
//! As in Debezium, a statement holds for the rows after it until the next
//! one or the end of its transaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool};
use tracing::warn;

use crate::error::CaptureError;
use crate::source;

/// The statement of the rows being decoded.
pub(crate) struct RowQueries<S = Pool> {
    /// MariaDB: its ANNOTATE_ROWS events, listed ahead of the stream.
    annotations: Option<Annotations<S>>,
    /// Where the open transaction starts (where listing starts, after a restart).
    trx_start: u64,
    /// Where the run of consecutive TABLE_MAPs read last starts and ends: a
    /// statement's annotation ends where its first TABLE_MAP starts.
    table_maps: (u64, u64),
    current: Option<Arc<str>>,
}

impl<S: BinlogEvents> RowQueries<S> {
    /// Statements of MySQL's ROWS_QUERY events, or (`annotations`: a pool
    /// on a MariaDB server) of MariaDB's ANNOTATE_ROWS events.
    pub(crate) fn new(annotations: Option<S>) -> Self {
        RowQueries {
            annotations: annotations.map(Annotations::new),
            trx_start: 0,
            table_maps: (0, 0),
            current: None,
        }
    }

    /// A transaction starts at `start`: no statement yet.
    pub(crate) fn begin(&mut self, start: u64) {
        self.trx_start = start;
        self.current = None;
    }

    /// A ROWS_QUERY event (MySQL) at `pos` of `file`.
    pub(crate) fn rows_query(&mut self, text: &[u8], file: &str, pos: u64) {
        self.current = utf8_statement(text, file, pos);
    }

    /// A TABLE_MAP from `start` to `end` of `file`; `captured`: its table's
    /// rows are decoded (only those look their statement up).
    pub(crate) async fn table_map(
        &mut self,
        file: &str,
        (start, end): (u64, u64),
        captured: bool,
    ) -> Result<(), CaptureError> {
        if start != self.table_maps.1 {
            self.table_maps.0 = start; // a statement's first TABLE_MAP
        }
        self.table_maps.1 = end;
        if let (true, Some(annotations)) = (captured, &mut self.annotations)
            && let Some(text) = annotations
                .ending_at(file, self.table_maps.0, self.trx_start)
                .await?
        {
            self.current = Some(text);
        }
        Ok(())
    }

    /// The statement of the rows that follow, if one was read.
    pub(crate) fn current(&self) -> Option<Arc<str>> {
        self.current.clone()
    }
}

/// Before a MariaDB stream opens: whether the capture user may list the
/// binlog's events (an error naming the grant if not), and whether the server
/// writes statements with the rows (logged at WARN if not).
pub(crate) async fn check_annotations(conn: &mut Conn) -> Result<(), CaptureError> {
    conn.query_drop("SHOW BINLOG EVENTS LIMIT 1")
        .await
        .map_err(|e| source::missing_grant(e, "BINLOG MONITOR"))?;
    let annotated: Option<i64> = conn
        .query_first("SELECT @@global.binlog_annotate_row_events")
        .await?;
    if annotated == Some(0) {
        warn!(
            "events.include.query is set but the server logs no statements with its rows \
             (binlog_annotate_row_events=OFF): source.query stays null; \
             SET GLOBAL binlog_annotate_row_events=ON to have them"
        );
    }
    Ok(())
}

/// Events listed per `SHOW BINLOG EVENTS`.
const WINDOW: u32 = 1000;

/// One event as `SHOW BINLOG EVENTS` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedEvent {
    /// `Event_type` (`Annotate_rows`, `Table_map`, …).
    pub(crate) kind: String,
    /// `End_log_pos`: where the next event starts.
    pub(crate) end: u64,
    /// `Info`: an ANNOTATE_ROWS event's statement.
    pub(crate) info: Vec<u8>,
}

/// A row of `SHOW BINLOG EVENTS`: `Log_name`, `Pos`, `Event_type`,
/// `Server_id`, `End_log_pos`, `Info`.
type ListedRow = (String, u64, String, u64, u64, Option<Vec<u8>>);

/// Where the events of a binlog are listed from.
pub(crate) trait BinlogEvents {
    /// Up to `limit` events of `file` from `from` (where an event starts), in order.
    async fn list(
        &mut self,
        file: &str,
        from: u64,
        limit: u32,
    ) -> Result<Vec<ListedEvent>, CaptureError>;
}

impl BinlogEvents for Pool {
    async fn list(
        &mut self,
        file: &str,
        from: u64,
        limit: u32,
    ) -> Result<Vec<ListedEvent>, CaptureError> {
        let mut conn = self.get_conn().await?;
        // SHOW BINLOG EVENTS takes no placeholders; the file name is the server's own.
        let file = file.replace('\\', "\\\\").replace('\'', "\\'");
        let rows: Vec<ListedRow> = conn
            .query(format!(
                "SHOW BINLOG EVENTS IN '{file}' FROM {from} LIMIT {limit}"
            ))
            .await
            .map_err(|e| source::missing_grant(e, "BINLOG MONITOR"))?;
        Ok(rows
            .into_iter()
            .map(|(_, _, kind, _, end, info)| ListedEvent {
                kind,
                end,
                info: info.unwrap_or_default(),
            })
            .collect())
    }
}

/// The statements of ANNOTATE_ROWS events, read ahead of the stream.
struct Annotations<S> {
    events: S,
    /// The file listed.
    file: String,
    /// Where the first event listed starts.
    from: u64,
    /// Where the event after the last one listed starts.
    to: u64,
    /// Statements by where their ANNOTATE_ROWS event ends (where the
    /// statement's first TABLE_MAP starts), from the last position asked for.
    statements: BTreeMap<u64, Option<Arc<str>>>,
}

impl<S: BinlogEvents> Annotations<S> {
    /// Statements listed from `events`.
    fn new(events: S) -> Self {
        Annotations {
            events,
            file: String::new(),
            from: 0,
            to: 0,
            statements: BTreeMap::new(),
        }
    }

    /// The statement annotated right before `pos` of `file` (where a TABLE_MAP
    /// starts), if any; `trx_start` (where the TABLE_MAP's transaction
    /// starts) is where listing begins when that part of the file was not
    /// listed yet. `None` too for a statement that is not UTF-8 (logged).
    async fn ending_at(
        &mut self,
        file: &str,
        pos: u64,
        trx_start: u64,
    ) -> Result<Option<Arc<str>>, CaptureError> {
        if self.file != file || pos < self.from {
            file.clone_into(&mut self.file);
            let from = trx_start.min(pos);
            (self.from, self.to) = (from, from);
            self.statements.clear();
        }
        while pos > self.to {
            let listed = self.events.list(file, self.to, WINDOW).await?;
            match listed.last() {
                Some(last) if last.end > self.to => self.to = last.end,
                _ => break, // not written yet: nothing annotates it
            }
            for event in listed {
                if event.kind == "Annotate_rows" {
                    let statement = utf8_statement(&event.info, file, event.end);
                    self.statements.insert(event.end, statement);
                }
            }
        }
        // Positions only grow within a file: what ends before `pos` is done with.
        self.statements = self.statements.split_off(&pos);
        Ok(self.statements.get(&pos).cloned().flatten())
    }
}

/// A statement's text, or `None` (logged) if it is not UTF-8.
fn utf8_statement(text: &[u8], file: &str, pos: u64) -> Option<Arc<str>> {
    match std::str::from_utf8(text) {
        Ok(text) => Some(text.into()),
        Err(_) => {
            warn!(
                position = %format!("{file}:{pos}"),
                "the statement of the rows that follow is not UTF-8: source.query is null for them"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binlog file in memory, counting the listings asked of it.
    struct Recorded {
        /// (start, kind, end, info) of each event.
        events: Vec<(u64, &'static str, u64, Vec<u8>)>,
        listings: usize,
    }

    impl BinlogEvents for Recorded {
        async fn list(
            &mut self,
            file: &str,
            from: u64,
            limit: u32,
        ) -> Result<Vec<ListedEvent>, CaptureError> {
            assert_eq!(file, "binlog.000002");
            self.listings += 1;
            assert!(
                from == 4 || self.events.iter().any(|e| e.0 == from),
                "{from} is not where an event starts"
            );
            Ok(self
                .events
                .iter()
                .filter(|e| e.0 >= from)
                .take(limit as usize)
                .map(|(_, kind, end, info)| ListedEvent {
                    kind: (*kind).to_owned(),
                    end: *end,
                    info: info.clone(),
                })
                .collect())
        }
    }

    /// `n` transactions, each a GTID, an ANNOTATE_ROWS (statement `i`), a
    /// TABLE_MAP, a rows event and an XID, 100 bytes apart; then one
    /// transaction whose statement is not UTF-8 and one without annotation.
    fn file(n: u64) -> (Recorded, Vec<(u64, u64, Option<String>)>) {
        let mut events = Vec::new();
        let mut table_maps = Vec::new();
        let mut pos = 4;
        let mut event = |kind, info: &[u8], events: &mut Vec<_>| {
            events.push((pos, kind, pos + 100, info.to_vec()));
            pos += 100;
            pos - 100
        };
        for i in 0..n + 2 {
            let trx = event("Gtid", b"BEGIN GTID 0-1-1", &mut events);
            if i < n {
                event(
                    "Annotate_rows",
                    format!("UPDATE t SET v = {i}").as_bytes(),
                    &mut events,
                );
            } else if i == n {
                event("Annotate_rows", b"UPDATE t SET v = '\xff'", &mut events);
            }
            let table_map = event("Table_map", b"table_id: 18 (db.t)", &mut events);
            event("Update_rows_v1", b"table_id: 18", &mut events);
            event("Xid", b"COMMIT", &mut events);
            let expected = (i < n).then(|| format!("UPDATE t SET v = {i}"));
            table_maps.push((trx, table_map, expected));
        }
        let recorded = Recorded {
            events,
            listings: 0,
        };
        (recorded, table_maps)
    }

    #[tokio::test]
    async fn each_table_map_gets_the_statement_annotated_right_before_it() {
        let n = 3 * u64::from(WINDOW);
        let (recorded, table_maps) = file(n);
        let mut annotations = Annotations::new(recorded);
        for (trx, table_map, expected) in table_maps {
            let found = annotations
                .ending_at("binlog.000002", table_map, trx)
                .await
                .unwrap();
            assert_eq!(found.as_deref(), expected.as_deref(), "at {table_map}");
        }
        // 5 events a transaction, read a window at a time.
        let events = 5 * (n + 2) - 1;
        assert_eq!(
            annotations.events.listings as u64,
            events.div_ceil(u64::from(WINDOW))
        );
        assert!(annotations.statements.len() <= WINDOW as usize);
    }

    #[tokio::test]
    async fn a_statement_holds_for_each_table_it_maps_until_the_transaction_ends() {
        let (recorded, table_maps) = file(4);
        let mut queries = RowQueries::new(Some(recorded));
        let (trx, table_map, expected) = table_maps[2].clone();
        queries.begin(trx);
        // Its first table is not captured, the second (right after it) is.
        let file = "binlog.000002";
        queries
            .table_map(file, (table_map, table_map + 50), false)
            .await
            .unwrap();
        assert_eq!(
            queries.current(),
            None,
            "not looked up for an uncaptured table"
        );
        queries
            .table_map(file, (table_map + 50, table_map + 100), true)
            .await
            .unwrap();
        assert_eq!(queries.current().as_deref(), expected.as_deref());
        // A later TABLE_MAP of the transaction with no annotation of its own.
        queries
            .table_map(file, (table_map + 200, table_map + 300), true)
            .await
            .unwrap();
        assert_eq!(queries.current().as_deref(), expected.as_deref());
        queries.begin(table_maps[3].0);
        assert_eq!(queries.current(), None);
        // MySQL: ROWS_QUERY events in the stream.
        let mut mysql = RowQueries::<Recorded>::new(None);
        mysql.begin(4);
        mysql.rows_query(b"DELETE FROM t", "binlog.000002", 100);
        mysql.table_map(file, (200, 300), true).await.unwrap();
        assert_eq!(mysql.current().as_deref(), Some("DELETE FROM t"));
    }

    #[tokio::test]
    async fn a_restart_mid_file_lists_from_the_transactions_start() {
        let (recorded, table_maps) = file(10);
        let mut annotations = Annotations::new(recorded);
        let (trx, table_map, expected) = table_maps[7].clone();
        let found = annotations
            .ending_at("binlog.000002", table_map, trx)
            .await
            .unwrap();
        assert_eq!(found.as_deref(), expected.as_deref());
        assert_eq!(annotations.from, trx);
        // A second TABLE_MAP of the same statement is not annotated itself.
        let found = annotations
            .ending_at("binlog.000002", table_map + 100, trx)
            .await
            .unwrap();
        assert_eq!(found, None);
    }
}
