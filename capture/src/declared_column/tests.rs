use sqlparser::ast::Statement;
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use super::*;

fn declared(column: &str, rules: ServerRules) -> Result<Declared, Unmodelled> {
    let sql = format!("CREATE TABLE t ({column})");
    let Statement::CreateTable(create) =
        Parser::parse_sql(&MySqlDialect {}, &sql).unwrap().remove(0)
    else {
        panic!("{sql}")
    };
    let column = &create.columns[0];
    let options: Vec<&ColumnOption> = column.options.iter().map(|o| &o.option).collect();
    declare(
        &column.name.value,
        &column.data_type,
        &options,
        Some("utf8mb4"),
        rules,
    )
}

fn shown(column: &str) -> (String, Option<String>, bool, DefaultExpr, String) {
    let c = declared(column, ServerRules::mariadb_10_11())
        .unwrap()
        .column;
    (c.column_type, c.charset, c.nullable, c.default, c.extra)
}

/// `COLUMN_TYPE` and `CHARACTER_SET_NAME` of MariaDB 10.11 for each
/// declaration, in a utf8mb4 table (read from its `information_schema`).
#[test]
fn types_are_stored_as_mariadb_stores_them() {
    let cases = [
        ("i INT", "int(11)", None),
        ("i INT UNSIGNED", "int(10) unsigned", None),
        ("i TINYINT", "tinyint(4)", None),
        ("i TINYINT UNSIGNED", "tinyint(3) unsigned", None),
        ("i SMALLINT", "smallint(6)", None),
        ("i MEDIUMINT", "mediumint(9)", None),
        ("i BIGINT", "bigint(20)", None),
        ("i BIGINT UNSIGNED", "bigint(20) unsigned", None),
        ("i INT ZEROFILL", "int(10) unsigned zerofill", None),
        ("i BOOLEAN", "tinyint(1)", None),
        ("i INTEGER", "int(11)", None),
        ("i DECIMAL", "decimal(10,0)", None),
        ("i DECIMAL(5)", "decimal(5,0)", None),
        ("i NUMERIC(6,2)", "decimal(6,2)", None),
        ("i FLOAT", "float", None),
        ("i FLOAT(7,3)", "float(7,3)", None),
        ("i FLOAT(30)", "double", None),
        ("i REAL", "double", None),
        ("i DOUBLE PRECISION", "double", None),
        ("i CHAR", "char(1)", Some("utf8mb4")),
        ("i BINARY", "binary(1)", None),
        ("i BIT", "bit(1)", None),
        ("i YEAR", "year(4)", None),
        ("i TEXT", "text", Some("utf8mb4")),
        ("i TEXT(10)", "tinytext", Some("utf8mb4")),
        ("i LONGTEXT", "longtext", Some("utf8mb4")),
        ("i VARBINARY(5)", "varbinary(5)", None),
        ("i ENUM('a','it''s')", "enum('a','it''s')", Some("utf8mb4")),
        ("i SET('x','y')", "set('x','y')", Some("utf8mb4")),
        ("i DATETIME", "datetime", None),
        ("i DATETIME(3)", "datetime(3)", None),
        ("i TIMESTAMP", "timestamp", None),
        ("i TIME(2)", "time(2)", None),
        ("i DATE", "date", None),
        ("i JSON", "longtext", Some("utf8mb4")),
        ("i BLOB", "blob", None),
        ("i CHAR(3) CHARACTER SET latin1", "char(3)", Some("latin1")),
        (
            "i VARCHAR(4) COLLATE utf8mb4_bin",
            "varchar(4)",
            Some("utf8mb4"),
        ),
        (
            "i VARCHAR(3) CHARACTER SET utf8",
            "varchar(3)",
            Some("utf8mb3"),
        ),
        ("i NCHAR(2)", "char(2)", Some("utf8mb3")),
        ("i POINT", "point", None),
        ("i GEOMETRY", "geometry", None),
    ];
    for (column, column_type, charset) in cases {
        let (t, c, ..) = shown(column);
        assert_eq!(
            (t.as_str(), c.as_deref()),
            (column_type, charset),
            "{column}"
        );
    }
}

#[test]
fn serial_primary_key_and_not_null_columns_are_not_nullable() {
    let serial = declared("sr SERIAL", ServerRules::mariadb_10_11()).unwrap();
    assert_eq!(serial.column.column_type, "bigint(20) unsigned");
    assert_eq!((serial.column.nullable, serial.unique), (false, true));
    assert_eq!(serial.column.extra, "auto_increment");
    let key = declared("id INT PRIMARY KEY", ServerRules::mariadb_10_11()).unwrap();
    assert!(key.primary_key && !key.column.nullable);
    assert!(!shown("n INT NOT NULL").2);
    assert!(shown("n INT NULL").2);
}

/// `COLUMN_DEFAULT` and `EXTRA` of MariaDB 10.11 for each declaration.
#[test]
fn defaults_are_shown_as_mariadb_shows_them() {
    let literal = |text: &str, escaped| DefaultExpr::Literal {
        text: text.into(),
        escaped,
    };
    let cases = [
        ("d DECIMAL(10,2) DEFAULT 0", literal("0.00", false)),
        ("d INT DEFAULT '5'", literal("5", false)),
        (
            r"d VARCHAR(9) DEFAULT 'it''s \\ x'",
            literal(r"it''s \\ x", true),
        ),
        ("d DATE DEFAULT '2020-1-2'", literal("2020-01-02", true)),
        (
            "d DATETIME DEFAULT '2020-01-02'",
            literal("2020-01-02 00:00:00", true),
        ),
        ("d FLOAT DEFAULT 1.50", literal("1.5", false)),
        ("d BIT(3) DEFAULT b'101'", DefaultExpr::Bits("101".into())),
        ("d ENUM('a','b') DEFAULT 'b'", literal("b", true)),
        ("d INT DEFAULT (1+2)", DefaultExpr::Expression(None)),
        ("d DATETIME DEFAULT NOW()", DefaultExpr::CurrentTimestamp),
        (
            "d DATE DEFAULT curdate()",
            DefaultExpr::Expression(Some("curdate()".into())),
        ),
        ("d INT DEFAULT NULL", DefaultExpr::None),
        (
            "d VARCHAR(36) DEFAULT uuid()",
            DefaultExpr::Expression(Some("uuid()".into())),
        ),
        ("d VARBINARY(4) DEFAULT 0x41", literal("A", true)),
        ("d INT DEFAULT -5", literal("-5", false)),
        ("d INT DEFAULT 007", literal("7", false)),
        ("d CHAR(2) DEFAULT \"q\"", literal("q", true)),
        // Parentheses MariaDB drops; function names it shows by another.
        ("d INT DEFAULT (1)", literal("1", false)),
        ("d INT DEFAULT (-1)", literal("-1", false)),
        ("d DATETIME DEFAULT (NOW())", DefaultExpr::CurrentTimestamp),
        (
            "d VARCHAR(36) DEFAULT (uuid())",
            DefaultExpr::Expression(Some("uuid()".into())),
        ),
        (
            "d DATE DEFAULT CURRENT_DATE",
            DefaultExpr::Expression(Some("curdate()".into())),
        ),
        (
            "d TIME DEFAULT CURRENT_TIME",
            DefaultExpr::Expression(Some("curtime()".into())),
        ),
        (
            "d DATETIME DEFAULT UTC_TIMESTAMP()",
            DefaultExpr::Expression(Some("utc_timestamp()".into())),
        ),
    ];
    for (column, expected) in cases {
        assert_eq!(shown(column).3, expected, "{column}");
    }
    let (.., default, extra) = shown(
        "d TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)",
    );
    assert_eq!(default, DefaultExpr::CurrentTimestamp);
    assert_eq!(extra, "on update current_timestamp()");
    assert_eq!(shown("g INT AS (1 + 2) VIRTUAL").4, "VIRTUAL GENERATED");
}

#[test]
fn what_the_server_would_round_or_convert_is_not_modelled() {
    for column in [
        "d INT DEFAULT 5.5",
        "d DECIMAL(5,1) DEFAULT 1.25",
        "d DOUBLE DEFAULT 1e3",
        "d DATETIME DEFAULT '0000-00-00 00:00:00'",
        "d BINARY(4) DEFAULT 'a'",
        "d CHAR(2) CHARACTER SET binary",
        "d TEXT(10) CHARACTER SET big5",
        "d VARCHAR(9) DEFAULT concat('a', 'b')",
        "d VARCHAR(9) DEFAULT CURRENT_USER()",
    ] {
        assert!(
            declared(column, ServerRules::mariadb_10_11()).is_err(),
            "{column}"
        );
    }
    let implicit = ServerRules {
        explicit_defaults_for_timestamp: false,
        ..ServerRules::mariadb_10_11()
    };
    assert!(declared("ts TIMESTAMP", implicit).is_err());
    assert!(declared("ts TIMESTAMP NOT NULL", implicit).is_err());
    assert!(declared("ts TIMESTAMP DEFAULT CURRENT_TIMESTAMP", implicit).is_err());
    assert!(declared("ts TIMESTAMP NULL", implicit).is_ok());
    assert!(declared("e ENUM('a','b') DEFAULT 1", ServerRules::mariadb_10_11()).is_err());
}

#[test]
fn mysql_8_drops_integer_display_widths_and_quotes() {
    let rules = ServerRules::of("8.0.36");
    assert!(!rules.mariadb && !rules.int_widths && rules.utf8mb3_shown);
    let stored = |column| declared(column, rules).unwrap().column;
    assert_eq!(stored("i INT UNSIGNED").column_type, "int unsigned");
    assert_eq!(stored("i BOOLEAN").column_type, "tinyint(1)");
    assert_eq!(
        stored("i INT(5) ZEROFILL").column_type,
        "int(5) unsigned zerofill"
    );
    assert_eq!(stored("y YEAR").column_type, "year");
    assert_eq!(
        stored("s VARCHAR(5) DEFAULT 'it''s'").default,
        DefaultExpr::Literal {
            text: "it's".into(),
            escaped: false
        }
    );
    assert_eq!(
        stored("d DATE DEFAULT curdate()").default,
        DefaultExpr::Expression(None)
    );
    assert!(
        declared("t TEXT DEFAULT 'x'", rules).is_err(),
        "MySQL refuses it"
    );
    let old = ServerRules::of("5.7.44-log");
    assert!(old.int_widths && !old.utf8mb3_shown);
    assert_eq!(
        declared("c VARCHAR(3) CHARACTER SET utf8mb3", old)
            .unwrap()
            .column
            .charset
            .as_deref(),
        Some("utf8"),
        "5.7 names it utf8"
    );
    assert!(ServerRules::of("10.11.19-MariaDB-0+deb12u1-log").mariadb);
    assert!(!ServerRules::of("10.5.9-MariaDB").utf8mb3_shown);
}
