//! Golden tests: SQL → plan (`explain`) for each construct, and each
//! rejection with its line, column and message.

use tributary_config::ConfigError;

use super::*;
use crate::config::{JoinType, MissPolicy};
use crate::explain::explain;

const PREAMBLE: &str = "SET kafka.brokers = 'b:1';
CREATE STREAM orders (id BIGINT, proc_time AS PROCTIME()) WITH (topic = 'shop.orders', format = 'change');
CREATE STREAM clicks WITH (topic = 'clicks');
CREATE STREAM enriched_orders (PRIMARY KEY (id) NOT ENFORCED) WITH (topic = 'orders.enriched');
";

fn keys() -> TableKeys {
    [
        ("users", vec!["id"]),
        ("products", vec!["sku"]),
        ("stock", vec!["sku", "region"]),
    ]
    .into_iter()
    .map(|(t, k)| (t.to_owned(), k.into_iter().map(str::to_owned).collect()))
    .collect()
}

fn compile(job: &str) -> Result<EnrichConfig, SqlError> {
    compile::job_file(&parse(&format!("{PREAMBLE}{job}"))?, &keys(), Map::new())
}

fn plan(job: &str) -> String {
    explain(&compile(job).unwrap_or_else(|e| panic!("{e}\n{job}")))
}

/// The error for `job`, which starts on line 5 of the file.
fn rejected(job: &str) -> String {
    match compile(job) {
        Ok(_) => panic!("compiled: {job}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_issues_example_compiles_to_joins_a_split_filter_and_computed_fields() {
    let plan = plan(
        "CREATE JOB enrich_orders WITH (delivery = 'exactly_once', dead_letter_topic = 'orders.dlq', p.on_miss = 'dlq') AS
INSERT INTO enriched_orders
SELECT o.id, o.quantity, u.name AS user_name, p.title, p.price * o.quantity AS total
FROM orders AS o
LEFT JOIN users FOR SYSTEM_TIME AS OF o.proc_time AS u ON u.id = o.user_id
JOIN products FOR SYSTEM_TIME AS OF o.proc_time AS p ON p.sku = o.sku
WHERE o.quantity > 0 AND (u.tier <> 'banned' OR u IS NULL);",
    );
    assert_eq!(
        plan,
        "job enrich_orders (consumer group tributary-enrich.enrich_orders)
  delivery: exactly once (Kafka transactions)
  input: shop.orders as o, change events (the row after; deletes skipped)
  filter: o.quantity > 0
  left join users as u
    key: o.user_id
    reads: the latest row
    fetches: name, tier
  filter: u.tier <> 'banned' OR u IS NULL
  inner join (on a miss: dead-letter) products as p
    key: o.sku
    reads: the latest row
    fetches: title, price
  output: orders.enriched (key: id)
    id = o.id
    quantity = o.quantity
    user_name = u.name
    title = p.title
    total = p.price * o.quantity
  dead letters: orders.dlq
"
    );
}

#[test]
fn the_event_passes_through_and_rows_nest_under_a_name() {
    let config = compile(
        "CREATE JOB j WITH (dead_letter_topic = 'dlq') AS INSERT INTO enriched_orders
SELECT o.*, CASE WHEN u IS NOT NULL THEN STRUCT(u.name AS customer, u.tier) END AS user
FROM orders o LEFT JOIN users FOR SYSTEM_TIME AS OF PROCTIME() u ON o.user_id = u.id",
    )
    .unwrap();
    let job = &config.jobs[0];
    assert_eq!(job.input.alias.as_deref(), Some("o"));
    assert_eq!(job.joins[0].alias.as_deref(), Some("u"));
    assert_eq!(
        job.joins[0].select.as_deref(),
        Some(&["name".to_owned(), "tier".to_owned()][..]),
        "`u IS NOT NULL` needs no column"
    );
    let whole = compile(
        "CREATE JOB j WITH (dead_letter_topic = 'dlq') AS INSERT INTO enriched_orders
SELECT o.id, u AS user FROM orders o LEFT JOIN users FOR SYSTEM_TIME AS OF PROCTIME() u ON o.user_id = u.id",
    )
    .unwrap();
    assert_eq!(
        whole.jobs[0].joins[0].select, None,
        "`u` reads the whole row"
    );
    assert!(explain(&config).contains(
        "    fields: the event's own, then
    user = CASE WHEN u IS NOT NULL THEN STRUCT(u.name AS customer, u.tier) END
"
    ));
}

#[test]
fn composite_keys_follow_the_tables_key_order_and_later_joins_read_earlier_rows() {
    let config = compile(
        "CREATE TABLE warehouses (PRIMARY KEY (code) NOT ENFORCED);
CREATE JOB j WITH (dead_letter_topic = 'dlq', retry_topic = 'j.retry', retry_delay_ms = 100, s.on_miss = 'retry') AS
INSERT INTO enriched_orders
SELECT o.id, s.qty, w.city FROM orders o
JOIN stock FOR SYSTEM_TIME AS OF o.proc_time AS s ON s.region = o.region AND s.sku = o.line.sku
LEFT JOIN warehouses FOR SYSTEM_TIME AS OF o.proc_time AS w ON w.code = s.warehouse",
    )
    .unwrap();
    let job = &config.jobs[0];
    assert_eq!(job.joins[0].key.paths(), ["o.line.sku", "o.region"]);
    assert_eq!(job.joins[0].join_type, JoinType::Inner);
    assert_eq!(job.joins[0].on_miss, Some(MissPolicy::Retry));
    assert_eq!(
        job.joins[0].select.as_deref(),
        Some(&["qty".to_owned(), "warehouse".to_owned()][..]),
        "the columns read, keys of later joins included"
    );
    assert_eq!(job.joins[1].key.paths(), ["s.warehouse"]);
    let retry = job.retry.as_ref().unwrap();
    assert_eq!((retry.topic.as_str(), retry.delay_ms), ("j.retry", 100));
}

#[test]
fn as_of_a_time_field_reads_a_versioned_tables_row_at_that_time() {
    let config = compile(
        "CREATE JOB j WITH (dead_letter_topic = 'dlq', u.max_wait_ms = 500, u.time_unit = 's') AS
INSERT INTO enriched_orders SELECT o.id, u.tier FROM orders o
LEFT JOIN users FOR SYSTEM_TIME AS OF o.placed_at AS u ON u.id = o.user_id",
    )
    .unwrap();
    let as_of = config.jobs[0].joins[0].as_of.as_ref().unwrap();
    assert_eq!(as_of.field.as_deref(), Some("placed_at"));
    assert_eq!(as_of.max_wait_ms, 500);
    assert!(explain(&config).contains("reads: the row as of field placed_at"));
}

#[test]
fn settings_streams_and_delivery_reach_the_job_file() {
    let script = parse(
        "SET kafka.brokers = 'k:9';
SET tables = 'tables.yaml';
SET concurrency = 64;
CREATE STREAM a WITH (topic = 'a1;a2', format = 'json');
CREATE STREAM b WITH (topic = 'b');
CREATE JOB first WITH (dead_letter_topic = 'dlq1', group_id = 'g1') AS INSERT INTO b SELECT x.* FROM a x WHERE x.n > 1;
CREATE JOB second WITH (dead_letter_topic = 'dlq2') AS INSERT INTO b SELECT a.n + 1 AS m FROM a;",
    )
    .unwrap();
    let config = compile::job_file(&script, &TableKeys::new(), Map::new()).unwrap();
    assert_eq!(config.kafka.brokers, "k:9");
    assert_eq!(
        config.tables.as_deref(),
        Some(std::path::Path::new("tables.yaml"))
    );
    assert_eq!(config.concurrency, 64);
    assert_eq!(config.jobs.len(), 2);
    assert_eq!(config.jobs[0].input.topics, ["a1", "a2"]);
    assert_eq!(config.jobs[0].group_id(), "g1");
    assert_eq!(config.jobs[0].filter.as_deref(), Some("x.n > 1"));
    assert_eq!(
        config.jobs[1].input.alias.as_deref(),
        Some("a"),
        "the stream's name"
    );
}

#[test]
fn what_is_outside_the_subset_is_refused_with_its_position() {
    let job = |tail: &str| {
        format!(
            "CREATE JOB j WITH (dead_letter_topic = 'dlq') AS INSERT INTO enriched_orders\n{tail}"
        )
    };
    let join = "LEFT JOIN users FOR SYSTEM_TIME AS OF o.proc_time AS u ON u.id = o.user_id";
    let cases: Vec<(String, &str)> = vec![
        (job("SELECT o.user_id, COUNT(*) AS n FROM orders o GROUP BY o.user_id"), "line 6, column 1: GROUP BY: aggregations and windows are not supported"),
        (job("SELECT COUNT(*) AS n FROM orders o"), "line 6, column 8: COUNT: aggregations are not supported"),
        (job("SELECT o.* FROM orders o JOIN clicks FOR SYSTEM_TIME AS OF o.proc_time AS c ON c.id = o.id"), "line 6, column 31: stream–stream joins are not supported"),
        (job(&format!("SELECT o.* FROM orders o {}", join.replace("u.id = o.user_id", "u.name = o.user_name"))), "line 6, column 84: a lookup join is on the table's whole key (id); ON does not give `u.id`"),
        (job(&format!("SELECT o.* FROM orders o {}", join.replace("u.id = o.user_id", "u.id = o.user_id AND u.tier = o.tier"))), "`u.tier` is not a key column of `users` (key: id)"),
        (job("SELECT o.* FROM orders o JOIN stock FOR SYSTEM_TIME AS OF o.proc_time s ON s.sku = o.sku"), "ON does not give `s.region`"),
        (job("SELECT o.* FROM orders o LEFT JOIN users u ON u.id = o.user_id"), "line 6, column 36: a lookup join reads the table FOR SYSTEM_TIME AS OF o.proc_time"),
        (job(&format!("SELECT o.* FROM orders o {}", join.replace("LEFT JOIN", "RIGHT JOIN"))), "only [INNER] JOIN and LEFT [OUTER] JOIN … ON are supported"),
        (job(&format!("SELECT o.* FROM orders o {}", join.replace("o.proc_time AS u", "o.ts + 1 AS u"))), "AS OF names the stream's PROCTIME() column or one of its time fields"),
        (job(&format!("SELECT o.* FROM orders o {}", join.replace("u.id = o.user_id", "u.id = o.user_id + 1"))), "is compared with a field (`s.user_id`), not an expression"),
        (job("SELECT * FROM orders o"), "line 6, column 8: SELECT *: write o.* for the stream's fields"),
        (job(&format!("SELECT u.* FROM orders o {join}")), "`u.*`: name the table's columns"),
        (job("SELECT o.id, o.* FROM orders o"), "line 6, column 14: o.* (the event) comes first"),
        (job("SELECT o.a + 1 FROM orders o"), "line 6, column 8: name this field: `o.a + 1 AS name`"),
        (job("SELECT o.* FROM payments o"), "line 6, column 17: `payments` is not a declared stream"),
        (job("SELECT o.* FROM orders o JOIN carts FOR SYSTEM_TIME AS OF o.proc_time c ON c.id = o.cart"), "the key of table `carts` is not declared"),
        (job("SELECT o.* FROM orders o ORDER BY o.id"), "WITH, ORDER BY, LIMIT and FETCH are not supported"),
        (job("SELECT o.* FROM orders o UNION SELECT o.* FROM orders o"), "UNION, VALUES and nested queries are not supported"),
        (job("SELECT o.* FROM orders o WHERE o.id IN (SELECT 1)"), "line 6, column 32: subqueries is not supported"),
        (job("SELECT DISTINCT o.id FROM orders o"), "DISTINCT, TOP, INTO, WINDOW, QUALIFY and LATERAL VIEW are not supported"),
        (job("SELECT o.* FROM orders o WHERE SOUNDEX(o.name) = 'x'"), "line 6, column 32: the function SOUNDEX is not supported"),
        (job("SELECT o.* FROM orders o WHERE o.qty + 1"), "WHERE needs a condition"),
        (job("SELECT o.* FROM TUMBLE(orders, DESCRIPTOR(ts), INTERVAL '1' MINUTES) o"), "line 6, column 17: FROM names a declared stream: windows, table functions and subqueries are not supported"),
        (job("SELECT o.* FROM (SELECT * FROM orders) o"), "FROM names a declared stream: windows, table functions and subqueries"),
        (job("SELECT o.* FROM orders o, clicks c"), "one stream in FROM, joined with tables"),
        ("CREATE JOB j WITH (dead_letter_topic = 'dlq', u.on_miss = 'dlq') AS INSERT INTO enriched_orders SELECT o.* FROM orders o LEFT JOIN users FOR SYSTEM_TIME AS OF o.proc_time u ON u.id = o.user_id".into(), "line 5, column 47: on_miss applies to inner joins"),
        ("CREATE JOB j WITH (dead_letter_topic = 'dlq', parallelism = 4) AS INSERT INTO enriched_orders SELECT o.* FROM orders o".into(), "line 5, column 47: job option `parallelism` is not supported"),
        ("CREATE JOB j AS INSERT INTO enriched_orders SELECT o.* FROM orders o".into(), "line 5, column 1: job `j` names no dead-letter topic"),
        ("CREATE VIEW v AS SELECT 1".into(), "line 5, column 8: CREATE VIEW is not supported"),
        ("CREATE STREAM s2 WITH (topic = 't', partitions = 3)".into(), "line 5, column 37: stream option `partitions` is not supported (topic, format)"),
        ("CREATE STREAM s3 (total AS price * qty) WITH (topic = 't')".into(), "line 5, column 28: computed columns are written in the query"),
        ("CREATE TABLE users (PRIMARY KEY (email) NOT ENFORCED)".into(), "line 5, column 1: table `users` has the key [\"id\"] in the tables config, not [\"email\"]"),
        ("DELETE FROM orders".into(), "line 5, column 1: `DELETE FROM orders` is not supported"),
        ("SELECT 1".into(), "line 5, column 1: `SELECT 1` is not supported"),
        ("CREATE JOB j WITH (dead_letter_topic = 'dlq') AS INSERT INTO enriched_orders SELECT o.* FROM orders o WHERE".into(), "Expected: an expression"),
        ("CREATE TABLE carts WITH (topic = 'carts')".into(), "line 5, column 1: declare the key of table `carts`"),
        (job("SELECT o.* FROM orders o WHERE ord.qty > 0"), "line 6, column 32: `ord.qty`: `ord` names neither the input (`o`) nor a join before this point ([]); write text in single quotes"),
        (job(&format!("SELECT o.id, u.id FROM orders o {join}")), "line 6, column 14: `id` is written twice: name one of them with AS"),
        (job("SELECT o.id AS order_id FROM orders o"), "line 4, column 1: `enriched_orders`'s key column `id` is not among the fields the job writes ({\"order_id\"})"),
        (job("SELECT o.* FROM clicks c LEFT JOIN users FOR SYSTEM_TIME AS OF c.proc_time u ON u.id = c.user_id"), "the stream declares no processing-time column: CREATE STREAM … (proc_time AS PROCTIME())"),
        (job("SELECT o.* FROM orders o WHERE o.kind IN ('a', 1)"), "line 6, column 32: cannot compare text with a number"),
        ("CREATE STREAM orders WITH (topic = 'again')".into(), "line 5, column 1: `orders` is declared twice"),
        ("SET kafka.brokers = '${TRIBUTARY_SURELY_UNSET}'".into(), "line 5, column 21: environment variable TRIBUTARY_SURELY_UNSET is not set and has no default"),
    ];
    for (sql, expected) in cases {
        let error = rejected(&sql);
        assert!(
            error.contains(expected),
            "{sql}\n  gave: {error}\n  want: {expected}"
        );
    }
}

#[test]
fn job_files_hold_sql_in_a_file_of_their_own_inline_or_in_another_file() {
    let dir = tempfile::tempdir().unwrap();
    let job = "CREATE STREAM a WITH (topic = 'a');
CREATE STREAM b WITH (topic = 'b');
CREATE JOB j WITH (dead_letter_topic = 'dlq') AS INSERT INTO b SELECT a.* FROM a WHERE a.n > 0;
";
    let read = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        JobFile::read(&path)
    };
    let compiled = |file: Result<JobFile, ConfigError>| match file.unwrap() {
        JobFile::Sql(sql) => sql.compile(&TableKeys::new()),
        JobFile::Config(_) => panic!("read as YAML jobs"),
    };
    // A .sql file: its SETs are the settings.
    let own = compiled(read(
        "own.sql",
        &format!("SET kafka.brokers = 'k:1';\n{job}"),
    ))
    .unwrap();
    assert_eq!(own.kafka.brokers, "k:1");
    // YAML settings and the SQL in a file next to it, or inline.
    std::fs::write(dir.path().join("jobs.sql"), job).unwrap();
    let settings = "kafka: { brokers: 'k:2' }\ndelivery: exactly_once\n";
    let in_file = compiled(read(
        "a.yaml",
        &format!("{settings}sql: {{ file: jobs.sql }}\n"),
    ))
    .unwrap();
    assert_eq!(in_file.delivery, crate::config::Delivery::ExactlyOnce);
    assert_eq!(in_file.jobs[0].filter.as_deref(), Some("a.n > 0"));
    let inline = format!(
        "{settings}sql: |\n{}",
        job.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    let inline = compiled(read("b.yaml", &inline)).unwrap();
    assert_eq!(inline.kafka.brokers, "k:2");
    assert_eq!(inline.jobs[0].name, "j");
    // What does not fit.
    let error = |file: Result<JobFile, ConfigError>| file.unwrap_err().to_string();
    let both = error(read(
        "c.yaml",
        &format!("{settings}jobs: []\nsql: {{ file: jobs.sql }}\n"),
    ));
    assert!(both.contains("not both"), "{both}");
    let set = error(read(
        "d.yaml",
        &format!("{settings}sql: \"SET concurrency = 1;\"\n"),
    ));
    assert!(
        set.contains("line 1, column 1: SET concurrency: the YAML job file holds the settings"),
        "{set}"
    );
    let missing = error(read(
        "e.yaml",
        &format!("{settings}sql: {{ file: gone.sql }}\n"),
    ));
    assert!(
        missing.contains("sql.file") && missing.contains("gone.sql"),
        "{missing}"
    );
    let bad = error(read(
        "bad.sql",
        "SET kafka.brokers = 'k';\nCREATE JOB j AS SELECT 1;",
    ));
    assert!(
        bad.contains("bad.sql")
            && bad.contains("line 2, column 17: a job is `INSERT INTO <stream> SELECT …`"),
        "{bad}"
    );
    // YAML jobs stay YAML jobs.
    let yaml = read(
        "f.yaml",
        &format!(
            "{settings}jobs: [{{ name: j, input: {{ topics: [a] }}, output: {{ topic: b }}, dead_letter: {{ topic: d }} }}]\n"
        ),
    );
    assert!(matches!(yaml.unwrap(), JobFile::Config(_)));
}

#[test]
fn tables_declared_with_settings_become_tables_config_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sql");
    std::fs::write(
        &path,
        "CREATE TABLE users (PRIMARY KEY (id) NOT ENFORCED);
CREATE TABLE products (sku STRING, PRIMARY KEY (sku) NOT ENFORCED)
  WITH (mysql.url = 'mysql://r@db', mysql.table = 'shop.products', cache.ttl_s = 60);
CREATE TABLE stock (PRIMARY KEY (sku, region) NOT ENFORCED) WITH (topic = 'shop.stock', mode = 'global');",
    )
    .unwrap();
    let JobFile::Sql(sql) = JobFile::read(&path).unwrap() else {
        panic!("read as YAML jobs")
    };
    let declared = sql.declared_tables().unwrap();
    assert_eq!(declared.len(), 3);
    assert_eq!(
        declared[0].parts(),
        ("users", &["id".to_owned()][..], &Map::new())
    );
    assert_eq!(
        Value::Object(declared[1].entry.clone()),
        serde_json::json!({"mysql": {"url": "mysql://r@db", "table": "shop.products"}, "cache": {"ttl_s": 60}})
    );
    assert_eq!(declared[2].key, ["sku", "region"]);
    assert_eq!(declared[2].entry["mode"], "global");
}
