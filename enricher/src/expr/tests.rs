use serde_json::json;

use super::*;

/// Event fields by path; `u.<column>` a join's row (join 0), `u` the row.
struct TestNames;

impl Names for TestNames {
    fn resolve(&self, parts: &[String]) -> Result<Ref, String> {
        match parts {
            [alias] if alias == "u" => Ok(Ref::Row(0)),
            [alias, column, below @ ..] if alias == "u" => Ok(Ref::Column {
                join: 0,
                column: column.clone(),
                below: below.to_vec(),
            }),
            [first, ..] if first == "nope" => Err(format!("unknown name `{first}`")),
            _ => FieldPath::from_segments(parts.to_vec())
                .map(Ref::Event)
                .map_err(|e| e.to_string()),
        }
    }
}

struct TestScope {
    event: Value,
    row: Option<Value>,
}

impl Scope for TestScope {
    fn get(&self, name: &Ref) -> Option<Cow<'_, Value>> {
        let descend = |mut value: &Value, path: &[String]| {
            for field in path {
                value = value.get(field)?;
            }
            Some(Cow::Owned(value.clone()))
        };
        match name {
            Ref::Event(path) => descend(&self.event, path.segments()),
            Ref::Row(_) => self.row.clone().map(Cow::Owned),
            Ref::Column { column, below, .. } => descend(self.row.as_ref()?.get(column)?, below),
        }
    }
}

fn eval_in(text: &str, event: Value, row: Option<Value>) -> Result<Value, EvalError> {
    let expr = compile_text(text, &TestNames).unwrap_or_else(|e| panic!("{text}: {e}"));
    expr.eval(&TestScope { event, row })
}

fn eval(text: &str) -> Value {
    eval_in(text, json!({}), None).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn compile_error(text: &str) -> String {
    compile_text(text, &TestNames)
        .err()
        .unwrap_or_else(|| panic!("{text} compiled"))
        .to_string()
}

/// SQL's three-valued logic, as the standard's truth tables give it
/// (`t`, `f`, `n` for TRUE, FALSE, NULL).
#[test]
fn logic_is_three_valued() {
    let sql = |c: char| match c {
        't' => "TRUE",
        'f' => "FALSE",
        _ => "NULL",
    };
    let value = |c: char| match c {
        't' => json!(true),
        'f' => json!(false),
        _ => Value::Null,
    };
    // a, b, a AND b, a OR b
    let table = [
        "tttt", "tfft", "tnnt", "ftft", "ffff", "fnfn", "ntnt", "nffn", "nnnn",
    ];
    for row in table {
        let c: Vec<char> = row.chars().collect();
        let (a, b) = (sql(c[0]), sql(c[1]));
        // CAST keeps the literal NULL a boolean for the compiler.
        let (a, b) = (
            format!("CAST({a} AS BOOLEAN)"),
            format!("CAST({b} AS BOOLEAN)"),
        );
        assert_eq!(eval(&format!("{a} AND {b}")), value(c[2]), "{row}: AND");
        assert_eq!(eval(&format!("{a} OR {b}")), value(c[3]), "{row}: OR");
    }
    assert_eq!(eval("NOT CAST(NULL AS BOOLEAN)"), Value::Null);
    assert_eq!(eval("NOT FALSE"), json!(true));
    // FALSE AND (an error) is FALSE: the right side is not evaluated.
    assert_eq!(eval("FALSE AND 1 / 0 > 1"), json!(false));
    assert_eq!(eval("TRUE OR 1 / 0 > 1"), json!(true));
    // IS tests never give NULL.
    assert_eq!(eval("NULL IS NULL"), json!(true));
    assert_eq!(eval("CAST(NULL AS BOOLEAN) IS NOT TRUE"), json!(true));
    assert_eq!(eval("CAST(NULL AS BOOLEAN) IS FALSE"), json!(false));
}

#[test]
fn comparisons_with_null_are_unknown() {
    for text in [
        "1 = NULL",
        "NULL <> NULL",
        "NULL < 1",
        "2 IN (1, NULL)",
        "NULL BETWEEN 1 AND 3",
        "5 BETWEEN 1 AND NULL",
        "NULL LIKE 'a%'",
    ] {
        assert_eq!(eval(text), Value::Null, "{text}");
    }
    assert_eq!(eval("1 IN (1, NULL)"), json!(true));
    assert_eq!(eval("2 NOT IN (1, NULL)"), Value::Null);
    assert_eq!(eval("2 NOT IN (1, 3)"), json!(true));
    assert_eq!(eval("0 BETWEEN 1 AND NULL"), json!(false), "FALSE AND NULL");
    assert_eq!(eval("0 NOT BETWEEN 1 AND 3"), json!(true));
    assert_eq!(eval("'b' > 'a'"), json!(true));
    assert_eq!(eval("2.5 >= 2"), json!(true));
    assert_eq!(eval("TRUE > FALSE"), json!(true));
}

#[test]
fn arithmetic_keeps_integers_and_says_what_failed() {
    assert_eq!(eval("7 / 2"), json!(3), "integer division truncates");
    assert_eq!(eval("-7 / 2"), json!(-3));
    assert_eq!(eval("-7 % 3"), json!(-1));
    assert_eq!(eval("7.0 / 2"), json!(3.5));
    assert_eq!(eval("2 * 3 + 4"), json!(10));
    assert_eq!(eval("1 + NULL"), Value::Null);
    assert_eq!(eval("-(3)"), json!(-3));
    let err = |text: &str| eval_in(text, json!({}), None).unwrap_err().0;
    assert!(
        err("1 / 0").contains("division by zero"),
        "{}",
        err("1 / 0")
    );
    assert_eq!(
        eval("9223372036854775807 + 1"),
        json!(9223372036854775808u64),
        "u64 holds it"
    );
    assert!(err("18446744073709551615 + 1").contains("overflows"));
    assert!(err("-9223372036854775807 - 2").contains("overflows"));
    assert_eq!(
        eval("18446744073709551615 = 18446744073709551614"),
        json!(false)
    );
    assert_eq!(
        eval("18446744073709551615 - 1"),
        json!(18446744073709551614u64)
    );
    let text = eval_in("a * 2", json!({"a": "x"}), None).unwrap_err().0;
    assert!(text.contains("needs numbers, not text"), "{text}");
    let text = eval_in("a > 1", json!({"a": "x"}), None).unwrap_err().0;
    assert!(text.contains("cannot compare text with a number"), "{text}");
}

#[test]
fn names_read_the_event_and_the_joined_row() {
    let event = json!({"qty": 3, "line": {"sku": "A-1"}});
    let row = json!({"price": 2.5, "meta": {"tax": 0.2}});
    let e = |text: &str, row: Option<Value>| eval_in(text, event.clone(), row).unwrap();
    assert_eq!(e("u.price * qty", Some(row.clone())), json!(7.5));
    assert_eq!(e("line.sku", None), json!("A-1"));
    assert_eq!(e("u.meta.tax", Some(row.clone())), json!(0.2));
    assert_eq!(e("u.price * qty", None), Value::Null, "a miss is NULL");
    assert_eq!(e("u IS NULL", None), json!(true));
    assert_eq!(e("u IS NOT NULL", Some(row.clone())), json!(true));
    assert_eq!(e("missing IS NULL", None), json!(true));
    assert_eq!(
        e("STRUCT(u.price AS cost, qty)", Some(row)),
        json!({"cost": 2.5, "qty": 3})
    );
    assert_eq!(
        e("CASE WHEN u IS NOT NULL THEN STRUCT(u.price) END", None),
        Value::Null
    );
}

#[test]
fn case_coalesce_and_casts() {
    assert_eq!(
        eval("CASE WHEN 1 > 2 THEN 'a' WHEN 2 > 1 THEN 'b' ELSE 'c' END"),
        json!("b")
    );
    assert_eq!(eval("CASE WHEN NULL THEN 'a' END"), Value::Null);
    assert_eq!(
        eval("CASE 2 WHEN 1 THEN 'one' WHEN 2 THEN 'two' END"),
        json!("two")
    );
    assert_eq!(
        eval("CASE NULL WHEN NULL THEN 'x' ELSE 'y' END"),
        json!("y")
    );
    assert_eq!(eval("COALESCE(NULL, NULL, 3, 4)"), json!(3));
    assert_eq!(eval("COALESCE(NULL)"), Value::Null);
    assert_eq!(eval("NULLIF(1, 1)"), Value::Null);
    assert_eq!(eval("NULLIF(1, 2)"), json!(1));
    assert_eq!(eval("CAST('42' AS BIGINT)"), json!(42));
    assert_eq!(
        eval("CAST(-2.7 AS INT)"),
        json!(-2),
        "truncated toward zero"
    );
    assert_eq!(eval("CAST(' 1.5 ' AS DOUBLE)"), json!(1.5));
    assert_eq!(eval("CAST(2.345 AS DECIMAL(10, 2))"), json!(2.35));
    assert_eq!(eval("CAST(-2.345 AS DECIMAL(10, 2))"), json!(-2.35));
    assert_eq!(
        eval("CAST(1.005 AS DECIMAL(10, 2))"),
        json!(1.01),
        "as written, not as stored"
    );
    assert_eq!(eval("CAST(9.995 AS DECIMAL(10, 2))"), json!(10.0));
    assert_eq!(eval("CAST(-0.5 AS DECIMAL(10, 0))"), json!(-1.0));
    assert_eq!(eval("CAST(1.2 AS DECIMAL(10, 3))"), json!(1.2));
    assert_eq!(eval("CAST(32767 AS SMALLINT)"), json!(32767));
    let range = eval_in("CAST(32768 AS SMALLINT)", json!({}), None)
        .unwrap_err()
        .0;
    assert_eq!(range, "cannot CAST 32768 to SMALLINT (out of range)");
    assert_eq!(eval("CAST(12 AS VARCHAR)"), json!("12"));
    assert_eq!(eval("CAST(TRUE AS STRING)"), json!("TRUE"));
    assert_eq!(eval("CAST('yes' AS BOOLEAN)"), json!(true));
    assert_eq!(eval("CAST(NULL AS BIGINT)"), Value::Null);
    let err = eval_in("CAST('x1' AS BIGINT)", json!({}), None)
        .unwrap_err()
        .0;
    assert_eq!(err, r#"cannot CAST "x1" to BIGINT"#);
}

#[test]
fn string_functions() {
    assert_eq!(eval("LOWER('ÀbC')"), json!("àbc"));
    assert_eq!(eval("UPPER('straße')"), json!("STRASSE"));
    assert_eq!(eval("CONCAT('a', 1, TRUE)"), json!("a1TRUE"));
    assert_eq!(eval("CONCAT('a', NULL)"), Value::Null);
    assert_eq!(eval("'a' || 'b' || 'c'"), json!("abc"));
    assert_eq!(eval("CONCAT_WS('-', 'a', NULL, 'b')"), json!("a-b"));
    assert_eq!(eval("SUBSTRING('héllo' FROM 2 FOR 3)"), json!("éll"));
    assert_eq!(eval("SUBSTRING('hello' FROM 4)"), json!("lo"));
    assert_eq!(
        eval("SUBSTRING('hello' FROM 0 FOR 2)"),
        json!("h"),
        "position 0 counts"
    );
    assert_eq!(eval("SUBSTRING('hello', 2, 2)"), json!("el"));
    assert_eq!(eval("TRIM('  a b  ')"), json!("a b"));
    assert_eq!(eval("TRIM(LEADING 'x' FROM 'xxaxx')"), json!("axx"));
    assert_eq!(eval("TRIM(TRAILING 'x' FROM 'xxaxx')"), json!("xxa"));
    assert_eq!(eval("CHAR_LENGTH('héllo')"), json!(5));
    assert_eq!(eval("LOWER(NULL)"), Value::Null);
    assert_eq!(eval("'abc' LIKE 'a%'"), json!(true));
    assert_eq!(eval("'abc' LIKE '_b_'"), json!(true));
    assert_eq!(eval("'abc' NOT LIKE '%d'"), json!(true));
    assert_eq!(eval("'a%c' LIKE 'a\\%c'"), json!(true));
    assert_eq!(eval("'abc' LIKE 'a\\%c'"), json!(false));
}

#[test]
fn json_value_reads_objects_and_json_text() {
    let event =
        json!({"payload": {"items": [{"sku": "A"}], "n": 2}, "text": "{\"a\": {\"b\": 5}}"});
    let e = |text: &str| eval_in(text, event.clone(), None);
    assert_eq!(
        e("JSON_VALUE(payload, '$.items[0].sku')").unwrap(),
        json!("A")
    );
    assert_eq!(e("JSON_VALUE(text, '$.a.b')").unwrap(), json!(5));
    assert_eq!(e("JSON_VALUE(payload, '$.items')").unwrap(), Value::Null);
    assert_eq!(e("JSON_VALUE(payload, '$.gone')").unwrap(), Value::Null);
    assert_eq!(e("JSON_VALUE(missing, '$.a')").unwrap(), Value::Null);
    assert!(
        e("JSON_VALUE(payload, '$.items[*]')").is_ok(),
        "one item selected"
    );
    let bad = eval_in("JSON_VALUE(t, '$.a')", json!({"t": "{oops"}), None)
        .unwrap_err()
        .0;
    assert!(bad.contains("not JSON"), "{bad}");
}

#[test]
fn compile_errors_point_at_the_problem_and_say_what_is_supported() {
    let cases = [
        (
            "'a' * 2",
            "line 1, column 1: an operand of arithmetic must be a number, not text",
        ),
        ("NOT 3", "NOT's operand must be a boolean, not a number"),
        ("1 = 'a'", "cannot compare a number with text"),
        ("LOWER(1)", "LOWER needs text, not a number"),
        ("COUNT(x)", "COUNT: aggregations are not supported"),
        (
            "SOUNDEX(x)",
            "the function SOUNDEX is not supported (supported: ",
        ),
        ("x IN (SELECT 1)", "subqueries is not supported"),
        ("CAST(x AS DATE)", "CAST to DATE is not supported"),
        (
            "CAST(x AS DECIMAL(40, 20))",
            "CAST to DECIMAL(40,20) is not supported",
        ),
        ("x IN (1, 'a')", "cannot compare a number with text"),
        ("x BETWEEN 'a' AND 3", "cannot compare text with a number"),
        (
            "CASE 1 WHEN 'a' THEN 1 END",
            "cannot compare a number with text",
        ),
        (
            "JSON_VALUE(x, y)",
            "JSON_VALUE's path must be a string literal",
        ),
        ("JSON_VALUE(x, '$[')", "is not a JSON path"),
        ("COALESCE()", "COALESCE takes at least 1 argument(s), not 0"),
        ("a +\n  nope.b", "line 2, column 3: unknown name `nope`"),
        ("STRUCT(1 + 2)", "name this STRUCT field"),
        ("a b", "Expected: EOF, found: b at Line: 1, Column: 3"),
    ];
    for (text, expected) in cases {
        let error = compile_error(text);
        assert!(error.contains(expected), "{text}: {error}");
    }
}

#[test]
fn refs_lists_every_name_read() {
    let expr = compile_text("CASE WHEN u.a > qty THEN u END", &TestNames).unwrap();
    assert_eq!(
        expr.refs(),
        [
            &Ref::Column {
                join: 0,
                column: "a".into(),
                below: vec![]
            },
            &Ref::Event(FieldPath::parse("qty").unwrap()),
            &Ref::Row(0)
        ]
    );
}
