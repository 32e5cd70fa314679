//! Changes to a MariaDB `users (id, tier)` table, each noted with the
//! server's clock around it and the row the database shows after it: the
//! update log versioned tables and as-of joins are checked against.

use mysql_async::prelude::Queryable;
use serde_json::{Value, json};

/// One change, run by [`run`].
#[derive(Debug, Clone)]
pub struct TimedChange {
    /// The user it changed.
    pub id: i64,
    /// The server's clock before the statement, µs since the epoch.
    pub before_us: i64,
    /// The server's clock after it.
    pub after_us: i64,
    /// The row after it (`None`: deleted).
    pub row: Option<Value>,
}

/// The `users` row of `id`, as the database shows it now.
pub async fn user_row(conn: &mut mysql_async::Conn, db: &str, id: i64) -> Option<Value> {
    let query = format!("SELECT id, tier FROM `{db}`.users WHERE id = {id}");
    let row: Option<(i64, String)> = conn.query_first(query).await.unwrap();
    row.map(|(id, tier)| json!({ "id": id, "tier": tier }))
}

/// The server's clock, µs since the epoch.
pub async fn server_now_us(conn: &mut mysql_async::Conn) -> i64 {
    let now: Option<i64> = conn
        .query_first("SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)")
        .await
        .unwrap();
    now.unwrap()
}

/// The changes so far and the rows the users had before their first.
pub struct ChangeLog {
    pub changes: Vec<TimedChange>,
    pub initial: std::collections::BTreeMap<i64, Option<Value>>,
}

/// Runs `steps` (the user each changes, the statement with `{db}` for the
/// database) 1.2 s apart: a binlog dates changes by the second their
/// statement started, so no two changes share one.
pub async fn run(conn: &mut mysql_async::Conn, db: &str, steps: &[(i64, &str)]) -> ChangeLog {
    let mut log = ChangeLog {
        changes: Vec::new(),
        initial: Default::default(),
    };
    for (id, statement) in steps {
        if let std::collections::btree_map::Entry::Vacant(first) = log.initial.entry(*id) {
            first.insert(user_row(conn, db, *id).await);
        }
        let before_us = server_now_us(conn).await;
        conn.query_drop(statement.replace("{db}", db))
            .await
            .unwrap();
        let after_us = server_now_us(conn).await;
        let row = user_row(conn, db, *id).await;
        log.changes.push(TimedChange {
            id: *id,
            before_us,
            after_us,
            row,
        });
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    }
    log
}

impl ChangeLog {
    /// User `id` as of `t`, for the times [`Self::probe_times`] gives: the
    /// row after its last change that had finished by `t`, else its initial row.
    pub fn state_at(&self, id: i64, t: i64) -> Option<Value> {
        let last = self
            .changes
            .iter()
            .rev()
            .find(|c| c.id == id && c.after_us <= t);
        match last {
            Some(change) => change.row.clone(),
            None => self.initial.get(&id).cloned().flatten(),
        }
    }

    /// For each change, (user, time): one just before the second its
    /// statement started (the state before it), and one right after it (its
    /// row), neither of which a change's one-second date can straddle.
    pub fn probe_times(&self) -> Vec<(i64, i64)> {
        let second = 1_000_000;
        self.changes
            .iter()
            .flat_map(|c| {
                let just_before = c.before_us - c.before_us.rem_euclid(second) - 1;
                [(c.id, just_before), (c.id, c.after_us)]
            })
            .collect()
    }
}
