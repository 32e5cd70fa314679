//! The expressions of SQL jobs against PostgreSQL's own answers: each
//! expression is evaluated by the job's compiler and by the stack's
//! PostgreSQL (`SELECT to_jsonb(<expression>)`), for the constructs where
//! Tributary follows standard SQL: three-valued logic, NULL in comparisons,
//! `IN`, `BETWEEN` and `CASE`, integer arithmetic, string functions, casts.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::borrow::Cow;

use common::postgres::pg_connect;
use serde_json::Value;
use tributary_enricher::expr::{Names, Ref, Scope, compile_text};

/// Expressions of literals only: no name resolves.
struct NoNames;

impl Names for NoNames {
    fn resolve(&self, parts: &[String]) -> Result<Ref, String> {
        Err(format!("{parts:?}: literals only here"))
    }
}

struct NoValues;

impl Scope for NoValues {
    fn get(&self, _: &Ref) -> Option<Cow<'_, Value>> {
        None
    }
}

const EXPRESSIONS: &[&str] = &[
    // Three-valued logic: every pair of TRUE, FALSE and NULL.
    "TRUE AND TRUE",
    "TRUE AND FALSE",
    "TRUE AND NULL",
    "FALSE AND NULL",
    "NULL AND NULL",
    "NULL AND FALSE",
    "TRUE OR NULL",
    "FALSE OR NULL",
    "NULL OR NULL",
    "NULL OR TRUE",
    "FALSE OR FALSE",
    "NOT NULL",
    "NOT FALSE",
    // NULL in comparisons, IN, BETWEEN, LIKE.
    "1 = NULL",
    "NULL <> NULL",
    "NULL < 1",
    "2 IN (1, NULL)",
    "1 IN (1, NULL)",
    "2 NOT IN (1, NULL)",
    "2 NOT IN (1, 3)",
    "NULL BETWEEN 1 AND 3",
    "0 BETWEEN 1 AND NULL",
    "5 BETWEEN 1 AND NULL",
    "2 BETWEEN 1 AND 3",
    "0 NOT BETWEEN 1 AND 3",
    "NULL LIKE 'a%'",
    "'b' > 'a'",
    "'abc' < 'abd'",
    "2.5 >= 2",
    "TRUE > FALSE",
    "NULL IS NULL",
    "(NULL = 1) IS NOT TRUE",
    "(NULL = 1) IS FALSE",
    "(1 = 1) IS TRUE",
    "(1 = 2) IS NOT FALSE",
    // Arithmetic.
    "7 / 2",
    "-7 / 2",
    "-7 % 3",
    "7 % -3",
    "7.0 / 2",
    "2 * 3 + 4",
    "2 * (3 + 4)",
    "1 + NULL",
    "-(3)",
    "1.5 * 4",
    "10 - 2.25",
    // Conditionals.
    "CASE WHEN 1 > 2 THEN 'a' WHEN 2 > 1 THEN 'b' ELSE 'c' END",
    "CASE WHEN NULL THEN 'a' END",
    "CASE WHEN NULL THEN 'a' ELSE 'b' END",
    "CASE 2 WHEN 1 THEN 'one' WHEN 2 THEN 'two' END",
    "CASE NULL WHEN NULL THEN 'x' ELSE 'y' END",
    "COALESCE(NULL, NULL, 3, 4)",
    "COALESCE(NULL, 'a')",
    "NULLIF(1, 1)",
    "NULLIF(1, 2)",
    // Strings.
    "UPPER('abc')",
    "LOWER('AbC')",
    "'a' || 'b' || 'c'",
    "'a' || NULL",
    "CONCAT_WS('-', 'a', NULL, 'b')",
    "SUBSTRING('héllo' FROM 2 FOR 3)",
    "SUBSTRING('hello' FROM 0 FOR 2)",
    "SUBSTRING('hello' FROM 4)",
    "SUBSTRING('hello' FROM 9)",
    "TRIM('  a b  ')",
    "TRIM(LEADING 'x' FROM 'xxaxx')",
    "TRIM(TRAILING 'x' FROM 'xxaxx')",
    "TRIM(BOTH 'xy' FROM 'xyaxy')",
    "CHAR_LENGTH('héllo')",
    "'abc' LIKE 'a%'",
    "'abc' LIKE '_b_'",
    "'abc' NOT LIKE '%d'",
    "'a%c' LIKE 'a\\%c'",
    "'abc' LIKE 'a\\%c'",
    "'' LIKE '%'",
    // Casts.
    "CAST('42' AS BIGINT)",
    "CAST(12 AS VARCHAR)",
    "CAST('yes' AS BOOLEAN)",
    "CAST('f' AS BOOLEAN)",
    "CAST(' 1.5 ' AS FLOAT)",
    "CAST(2.345 AS DECIMAL(10, 2))",
    "CAST(-2.345 AS DECIMAL(10, 2))",
    "CAST(1.005 AS DECIMAL(10, 2))",
    "CAST(-1.005 AS DECIMAL(10, 2))",
    "CAST(9.995 AS DECIMAL(10, 2))",
    "CAST(0.5 AS DECIMAL(10, 0))",
    "CAST(32767 AS SMALLINT)",
    "CAST(NULL AS BIGINT)",
];

/// Numbers are compared by value (PostgreSQL's numerics keep trailing zeros).
fn same(ours: &Value, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => ours == theirs,
    }
}

#[tokio::test]
async fn expressions_give_what_postgresql_gives() {
    let pg = pg_connect().await.unwrap();
    let mut wrong = Vec::new();
    for text in EXPRESSIONS {
        let expr = compile_text(text, &NoNames).unwrap_or_else(|e| panic!("{text}: {e}"));
        let ours = expr
            .eval(&NoValues)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let row = pg
            .query_one(
                &format!("SELECT COALESCE(to_jsonb({text}), 'null'::jsonb)::text"),
                &[],
            )
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL: {text}: {e}"));
        let theirs: Value = serde_json::from_str(row.get::<_, &str>(0)).unwrap();
        if !same(&ours, &theirs) {
            wrong.push(format!("{text}: ours {ours}, PostgreSQL's {theirs}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
