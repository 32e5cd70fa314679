//! The conformance suite every [`Table`] passes (feature `conformance`), in the
//! manner of TiKV's `engine_traits_tests`: one set of cases, run against each
//! implementation through a [`Fixture`] that builds a table from a list of
//! changes. Expected rows are the changes themselves, never another table's
//! answers.
//!
//! ```ignore
//! struct MyFixture;
//! #[async_trait::async_trait]
//! impl tributary_table_api::conformance::Fixture for MyFixture { /* … */ }
//! // One `#[tokio::test]` per case:
//! tributary_table_api::table_conformance!(MyFixture);
//! ```
//!
//! A table that does not scan (a remote table answers point lookups only)
//! says so in [`Fixture::scans`]; its scan cases then check that a scan is
//! refused with [`LookupError::Unsupported`]. A table that keeps no history
//! builds no [`Fixture::versioned_table`]; its as-of case then checks that an
//! as-of read is refused the same way.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::error::LookupError;
use crate::table::{AsOf, KeyRange, Table};

/// One change a fixture applies to the table it builds.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Store this row (an object holding every key column), replacing the
    /// row with the same key.
    Upsert(Value),
    /// Remove the row with this key (an object of the key columns).
    Delete(Value),
}

/// Builds the tables the suite runs against.
#[async_trait]
pub trait Fixture: Send + Sync {
    /// Whether the tables it builds answer scans.
    fn scans(&self) -> bool;

    /// A table named `name`, keyed by `key_columns` (in key order), holding
    /// what `changes` leave, applied in order.
    async fn table(&self, name: &str, key_columns: &[&str], changes: Vec<Change>)
    -> Arc<dyn Table>;

    /// A table that keeps its history for `history_us` µs, holding what
    /// `changes` leave, applied in order, each valid from its time (µs since
    /// the epoch, whole milliseconds); `None` for a kind of table that keeps
    /// no history.
    async fn versioned_table(
        &self,
        _name: &str,
        _key_columns: &[&str],
        _changes: Vec<(i64, Change)>,
        _history_us: i64,
    ) -> Option<Arc<dyn Table>> {
        None
    }
}

/// Generates one `#[tokio::test]` per conformance case, each run against the
/// fixture `$fixture` (an expression, evaluated once per case).
#[macro_export]
macro_rules! table_conformance {
    ($fixture:expr) => {
        $crate::table_conformance!(@cases $fixture;
            get_finds_rows_by_every_key_form,
            multi_get_answers_in_the_order_asked,
            later_changes_replace_and_delete_rows,
            keys_of_every_value_type_are_found,
            composite_keys_accept_members_in_any_order,
            keys_that_do_not_fit_are_refused,
            get_columns_projects_in_the_order_asked,
            get_shared_answers_as_get_does,
            scans_by_prefix_in_key_order,
            scans_between_bounds,
            scans_stop_at_the_limit,
            describe_names_the_table_and_its_key,
            as_of_reads_answer_the_version_valid_then,
        );
    };
    (@cases $fixture:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                $crate::conformance::$case(&$fixture).await;
            }
        )*
    };
}

/// Rows `{"id": 1..=n, "name": "user-<id>", "tier": …}`.
fn users(n: i64) -> Vec<Value> {
    (1..=n)
        .map(|id| json!({"id": id, "name": format!("user-{id}"), "tier": if id % 2 == 0 { "pro" } else { "free" }}))
        .collect()
}

fn upserts(rows: &[Value]) -> Vec<Change> {
    rows.iter().cloned().map(Change::Upsert).collect()
}

/// Rows keyed by (`region`, `sku`): two regions, three skus each.
fn stock() -> Vec<Value> {
    let mut rows = Vec::new();
    for region in ["eu", "us"] {
        for sku in ["A-1", "B-2", "C-3"] {
            rows.push(json!({"region": region, "sku": sku, "qty": sku.len() + region.len()}));
        }
    }
    rows
}

/// The row of `key`, failing the test on an error.
async fn get(table: &dyn Table, key: Value) -> Option<Value> {
    match table.get(&key).await {
        Ok(row) => row,
        Err(e) => panic!("{}: get {key}: {e}", table.name()),
    }
}

/// A lookup by an object, an array or the bare value finds the same row; an
/// absent key finds nothing.
pub async fn get_finds_rows_by_every_key_form(fixture: &impl Fixture) {
    let rows = users(5);
    let table = fixture.table("users", &["id"], upserts(&rows)).await;
    let table = table.as_ref();
    for (i, row) in rows.iter().enumerate() {
        let id = json!(i + 1);
        assert_eq!(get(table, json!({"id": id})).await.as_ref(), Some(row));
        assert_eq!(get(table, json!([id])).await.as_ref(), Some(row));
        assert_eq!(get(table, id).await.as_ref(), Some(row));
    }
    assert_eq!(get(table, json!(99)).await, None);
    assert_eq!(get(table, json!({"id": 0})).await, None);
}

/// `multi_get` answers each key in the order given, misses included.
pub async fn multi_get_answers_in_the_order_asked(fixture: &impl Fixture) {
    let rows = users(4);
    let table = fixture.table("users", &["id"], upserts(&rows)).await;
    let keys = [json!(4), json!(99), json!({"id": 1}), json!([2]), json!(4)];
    let found = table.multi_get(&keys).await.expect("multi_get");
    let expected = vec![
        Some(rows[3].clone()),
        None,
        Some(rows[0].clone()),
        Some(rows[1].clone()),
        Some(rows[3].clone()),
    ];
    assert_eq!(found, expected);
}

/// A later upsert replaces a row; a delete removes it; a row upserted again
/// after its delete is back.
pub async fn later_changes_replace_and_delete_rows(fixture: &impl Fixture) {
    let changes = vec![
        Change::Upsert(json!({"id": 1, "name": "first"})),
        Change::Upsert(json!({"id": 2, "name": "second"})),
        Change::Upsert(json!({"id": 3, "name": "third"})),
        Change::Upsert(json!({"id": 1, "name": "first, renamed"})),
        Change::Delete(json!({"id": 2})),
        Change::Delete(json!({"id": 3})),
        Change::Upsert(json!({"id": 3, "name": "third, again"})),
        Change::Delete(json!({"id": 42})), // a key never stored
    ];
    let table = fixture.table("users", &["id"], changes).await;
    let table = table.as_ref();
    assert_eq!(
        get(table, json!(1)).await,
        Some(json!({"id": 1, "name": "first, renamed"}))
    );
    assert_eq!(get(table, json!(2)).await, None);
    assert_eq!(
        get(table, json!(3)).await,
        Some(json!({"id": 3, "name": "third, again"}))
    );
    assert_eq!(get(table, json!(42)).await, None);
    if fixture.scans() {
        let keys: Vec<Value> = scan(table, &KeyRange::all(), 10)
            .await
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(keys, vec![json!({"id": 1}), json!({"id": 3})]);
    }
}

/// Key values of every JSON type a key column holds: the extremes of 64-bit
/// integers, floats, empty, NUL-bearing and non-ASCII strings. Each finds its
/// own row, and values close to them find nothing.
pub async fn keys_of_every_value_type_are_found(fixture: &impl Fixture) {
    let keys = [
        json!(i64::MIN),
        json!(-1),
        json!(0),
        json!(1),
        json!(i64::MAX),
        json!(u64::MAX),
        json!(-2.5),
        json!(0.25),
        json!(1e300),
        json!(""),
        json!("a"),
        json!("a\u{0}b"),
        json!("ünïcödé 🙂"),
    ];
    let rows: Vec<Value> = keys
        .iter()
        .enumerate()
        .map(|(n, k)| json!({"k": k, "n": n}))
        .collect();
    let table = fixture.table("values", &["k"], upserts(&rows)).await;
    let table = table.as_ref();
    for (key, row) in keys.iter().zip(&rows) {
        assert_eq!(
            get(table, key.clone()).await.as_ref(),
            Some(row),
            "key {key}"
        );
    }
    for absent in [
        json!(2),
        json!(i64::MAX - 1),
        json!(0.5),
        json!("a\u{0}"),
        json!("ab"),
    ] {
        assert_eq!(get(table, absent.clone()).await, None, "key {absent}");
    }
    if fixture.scans() {
        // `keys` is listed in key order: integers, floats, then strings.
        let found: Vec<Value> = scan(table, &KeyRange::all(), 100)
            .await
            .into_iter()
            .map(|(key, _)| key["k"].clone())
            .collect();
        assert_eq!(found, keys);
    }
}

/// A composite key is found whatever the order of its object's members.
pub async fn composite_keys_accept_members_in_any_order(fixture: &impl Fixture) {
    let rows = stock();
    let table = fixture
        .table("stock", &["region", "sku"], upserts(&rows))
        .await;
    let table = table.as_ref();
    for row in &rows {
        let (region, sku) = (&row["region"], &row["sku"]);
        assert_eq!(
            get(table, json!({"region": region, "sku": sku}))
                .await
                .as_ref(),
            Some(row)
        );
        assert_eq!(
            get(table, json!({"sku": sku, "region": region}))
                .await
                .as_ref(),
            Some(row)
        );
        assert_eq!(get(table, json!([region, sku])).await.as_ref(), Some(row));
    }
    assert_eq!(get(table, json!(["eu", "D-4"])).await, None);
    assert_eq!(get(table, json!(["A-1", "eu"])).await, None); // values in the wrong order
}

/// Keys that do not fit the table's key are refused as bad keys.
pub async fn keys_that_do_not_fit_are_refused(fixture: &impl Fixture) {
    let table = fixture
        .table("stock", &["region", "sku"], upserts(&stock()))
        .await;
    let bad = [
        json!({"region": "eu"}),                         // a column missing
        json!({"region": "eu", "sku": "A-1", "qty": 1}), // not a key column
        json!(["eu"]),                                   // too few values
        json!(["eu", "A-1", 1]),                         // too many
        json!("eu"),                                     // a bare value for two columns
        json!(["eu", ["A-1"]]),                          // not a scalar
    ];
    for key in bad {
        match table.get(&key).await {
            Err(LookupError::BadKey { table: name, .. }) => assert_eq!(name, "stock"),
            other => panic!("key {key}: expected a bad key, got {other:?}"),
        }
    }
}

/// `get_columns` hands out the columns asked for, in that order; a column the
/// row lacks has no value; a missing row has no columns.
pub async fn get_columns_projects_in_the_order_asked(fixture: &impl Fixture) {
    let rows = users(3);
    let table = fixture.table("users", &["id"], upserts(&rows)).await;
    let asked = ["tier", "absent", "id", "name"].map(String::from);
    for row in &rows {
        let columns = table
            .get_columns(&row["id"], &asked)
            .await
            .expect("get_columns")
            .expect("the row is there");
        for (i, name) in asked.iter().enumerate() {
            assert_eq!(
                columns.get(i, name).as_deref(),
                row.get(name),
                "column {name} of {row}"
            );
        }
    }
    let missing = table
        .get_columns(&json!(99), &asked)
        .await
        .expect("get_columns");
    assert!(missing.is_none());
}

/// `get_shared` answers what `get` answers.
pub async fn get_shared_answers_as_get_does(fixture: &impl Fixture) {
    let rows = users(3);
    let table = fixture.table("users", &["id"], upserts(&rows)).await;
    for key in [json!(1), json!(3), json!(99)] {
        let shared = table.get_shared(&key).await.expect("get_shared");
        assert_eq!(
            shared.map(|row| (*row).clone()),
            get(table.as_ref(), key).await
        );
    }
}

/// `(key, row)` pairs of a scan, failing the test on an error.
async fn scan(table: &dyn Table, range: &KeyRange, limit: usize) -> Vec<(Value, Value)> {
    match table.scan(range, limit).await {
        Ok(rows) => rows,
        Err(e) => panic!("{}: scan {range:?}: {e}", table.name()),
    }
}

/// A table of `rows` to scan; for a fixture whose tables do not scan, none,
/// once a scan of it was refused as unsupported.
async fn scanned(
    fixture: &impl Fixture,
    name: &str,
    key_columns: &[&str],
    rows: &[Value],
) -> Option<Arc<dyn Table>> {
    let table = fixture.table(name, key_columns, upserts(rows)).await;
    if fixture.scans() {
        return Some(table);
    }
    match table.scan(&KeyRange::all(), 10).await {
        Err(LookupError::Unsupported { .. }) => None,
        other => panic!("a table that does not scan answered {other:?}"),
    }
}

/// The `(key, row)` pairs of the rows of [`stock`] at `indexes` (its rows are
/// made in key order: eu A-1, eu B-2, eu C-3, us A-1, us B-2, us C-3).
fn stock_pairs(indexes: impl IntoIterator<Item = usize>) -> Vec<(Value, Value)> {
    let rows = stock();
    indexes
        .into_iter()
        .map(|i| {
            let row = rows[i].clone();
            (json!({"region": row["region"], "sku": row["sku"]}), row)
        })
        .collect()
}

/// A prefix of leading key columns (an object, an array or a bare value)
/// returns exactly its rows, in key order; `null` returns every row.
pub async fn scans_by_prefix_in_key_order(fixture: &impl Fixture) {
    let Some(table) = scanned(fixture, "stock", &["region", "sku"], &stock()).await else {
        return;
    };
    let table = table.as_ref();
    let eu = stock_pairs(0..3);
    for prefix in [json!({"region": "eu"}), json!(["eu"]), json!("eu")] {
        assert_eq!(scan(table, &KeyRange::Prefix(prefix), 100).await, eu);
    }
    let one = stock_pairs([4]);
    assert_eq!(
        scan(table, &KeyRange::Prefix(json!(["us", "B-2"])), 100).await,
        one
    );
    assert_eq!(
        scan(table, &KeyRange::Prefix(json!("asia")), 100).await,
        vec![]
    );
    assert_eq!(scan(table, &KeyRange::all(), 100).await, stock_pairs(0..6));
}

/// `from` is inclusive, `to` exclusive, either may be open, and a bound may
/// name leading key columns only.
pub async fn scans_between_bounds(fixture: &impl Fixture) {
    let Some(table) = scanned(fixture, "stock", &["region", "sku"], &stock()).await else {
        return;
    };
    let table = table.as_ref();
    let between = |from: Option<Value>, to: Option<Value>| KeyRange::Between { from, to };
    let cases = [
        (
            Some(json!(["eu", "B-2"])),
            Some(json!(["us", "B-2"])),
            stock_pairs(1..4),
        ),
        (Some(json!({"region": "us"})), None, stock_pairs(3..6)),
        (None, Some(json!("us")), stock_pairs(0..3)),
        (
            Some(json!(["eu", "A-0"])),
            Some(json!(["eu", "B-3"])),
            stock_pairs(0..2),
        ),
        (Some(json!("us")), Some(json!("eu")), vec![]), // from after to
        (Some(json!("eu")), Some(json!("eu")), vec![]),
    ];
    for (from, to, expected) in cases {
        let range = between(from, to);
        assert_eq!(scan(table, &range, 100).await, expected, "{range:?}");
    }
}

/// A scan returns at most `limit` rows: the first ones in key order.
pub async fn scans_stop_at_the_limit(fixture: &impl Fixture) {
    let rows = users(30);
    let Some(table) = scanned(fixture, "users", &["id"], &rows).await else {
        return;
    };
    let table = table.as_ref();
    let found = scan(table, &KeyRange::all(), 7).await;
    let expected: Vec<(Value, Value)> = rows[..7]
        .iter()
        .map(|row| (json!({"id": row["id"]}), row.clone()))
        .collect();
    assert_eq!(found, expected);
    assert_eq!(scan(table, &KeyRange::all(), 0).await, vec![]);
}

/// `describe` names the table and its key columns in key order.
pub async fn describe_names_the_table_and_its_key(fixture: &impl Fixture) {
    let table = fixture
        .table("stock", &["region", "sku"], upserts(&stock()))
        .await;
    let description = table.describe().await;
    assert_eq!(description.name, "stock");
    assert_eq!(table.name(), "stock");
    assert_eq!(description.key_columns, ["region", "sku"]);
}

/// An as-of read answers the version valid at its time: versions arriving out
/// of time order, two valid from the same time (the later change wins), a
/// delete and a re-insert, a key not written yet, and times older than the
/// history kept (the newest version of the key's partition minus the
/// history: the suite checks it on the key that holds the newest version).
pub async fn as_of_reads_answer_the_version_valid_then(fixture: &impl Fixture) {
    const S: i64 = 1_000_000; // µs
    let user = |tier: &str| Change::Upsert(json!({"id": 1, "tier": tier}));
    let changes = vec![
        (S, user("free")),
        (3 * S, user("pro")),
        (2 * S, user("plus")),  // arrives after a later version
        (3 * S, user("pro-2")), // same time as "pro", later: wins
        (5 * S, Change::Delete(json!({"id": 1}))),
        (7 * S, user("back")),
        (2 * S, Change::Upsert(json!({"id": 2, "tier": "x"}))),
        (50 * S, Change::Upsert(json!({"id": 3, "tier": "y"}))),
        (100 * S, user("last")),
    ];
    // The newest version is valid from 100 s: reads of key 1 answer from 2 s on.
    let Some(table) = fixture
        .versioned_table("users", &["id"], changes, 98 * S)
        .await
    else {
        let table = fixture.table("users", &["id"], upserts(&users(1))).await;
        assert!(
            matches!(
                table.get_as_of(&json!(1), 0).await,
                Err(LookupError::Unsupported { .. })
            ),
            "a table without history refuses as-of reads"
        );
        return;
    };
    let expected: [(i64, i64, Option<&str>); 14] = [
        (1, 2 * S, Some("plus")),
        (1, 3 * S - 1, Some("plus")),
        (1, 3 * S, Some("pro-2")),
        (1, 5 * S - 1, Some("pro-2")),
        (1, 5 * S, None),
        (1, 7 * S - 1, None),
        (1, 7 * S, Some("back")),
        (1, 100 * S - 1, Some("back")),
        (1, 100 * S, Some("last")),
        (1, i64::MAX, Some("last")),
        (2, 20 * S, Some("x")),
        (3, 50 * S - 1, None),
        (3, 50 * S, Some("y")),
        (4, 50 * S, None),
    ];
    for (id, t, tier) in expected {
        let found = match table.get_as_of(&json!(id), t).await.map(|r| r.answer) {
            Ok(AsOf::Row(row)) => Some(row["tier"].as_str().expect("a tier").to_owned()),
            Ok(AsOf::Absent) => None,
            other => panic!("{}: id {id} as of {t}: {other:?}", table.name()),
        };
        assert_eq!(found.as_deref(), tier, "id {id} as of {t} µs");
    }
    for t in [2 * S - 1, S, 0] {
        assert_eq!(
            table
                .get_as_of(&json!(1), t)
                .await
                .expect("an answer")
                .answer,
            AsOf::BeyondHistory { horizon: 2 * S },
            "id 1 as of {t} µs is older than the history kept"
        );
    }
    assert_eq!(
        get(table.as_ref(), json!(1)).await,
        Some(json!({"id": 1, "tier": "last"})),
        "the latest row is the last change"
    );
}
