use super::*;
use crate::column_default::DefaultExpr;

fn model() -> SchemaModel {
    let mut model = SchemaModel::new(ServerRules::mariadb_10_11());
    model.set_database("shop", "utf8mb4");
    model
}

/// (name, COLUMN_TYPE, charset, nullable) of a column.
type Column = (String, String, Option<String>, bool);

/// Each column, and the key.
fn shape(model: &SchemaModel, table: &str) -> (Vec<Column>, Vec<String>) {
    let t = model
        .table("shop", table)
        .unwrap_or_else(|| panic!("{table} is modelled"));
    (
        t.columns
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    c.column_type.clone(),
                    c.charset.clone(),
                    c.nullable,
                )
            })
            .collect(),
        t.primary_key.clone(),
    )
}

fn col(name: &str, column_type: &str, charset: Option<&str>, nullable: bool) -> Column {
    (
        name.into(),
        column_type.into(),
        charset.map(str::to_owned),
        nullable,
    )
}

#[test]
fn alter_table_operations_change_the_table_as_the_server_does() {
    let mut m = model();
    m.apply(
        "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20))",
        "shop",
    );
    assert_eq!(
        shape(&m, "t"),
        (
            vec![
                col("id", "int(11)", None, false),
                col("name", "varchar(20)", Some("utf8mb4"), true)
            ],
            vec!["id".into()]
        )
    );
    m.apply(
        "ALTER TABLE t ADD COLUMN price DECIMAL(10,2) NOT NULL DEFAULT 0 AFTER id, ADD note TEXT FIRST",
        "shop",
    );
    m.apply(
        "ALTER TABLE shop.t MODIFY name VARCHAR(50) CHARACTER SET latin1 NOT NULL",
        "other",
    );
    m.apply(
        "ALTER TABLE t CHANGE id item_id BIGINT UNSIGNED NOT NULL AFTER note",
        "shop",
    );
    assert_eq!(
        shape(&m, "t"),
        (
            vec![
                col("note", "text", Some("utf8mb4"), true),
                col("item_id", "bigint(20) unsigned", None, false),
                col("price", "decimal(10,2)", None, false),
                col("name", "varchar(50)", Some("latin1"), false),
            ],
            vec!["item_id".into()]
        )
    );
    m.apply(
        "ALTER TABLE t ALTER COLUMN price SET DEFAULT 5, RENAME COLUMN note TO memo",
        "shop",
    );
    let t = m.table("shop", "t").unwrap();
    assert_eq!(
        t.columns[2].default,
        DefaultExpr::Literal {
            text: "5.00".into(),
            escaped: false
        }
    );
    assert_eq!(t.columns[0].name, "memo");
    m.apply(
        "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (item_id, name), DROP COLUMN memo",
        "shop",
    );
    assert_eq!(shape(&m, "t").1, ["item_id", "name"]);
    assert_eq!(shape(&m, "t").0.len(), 3);
    m.apply(
        "ALTER TABLE t ALTER price DROP DEFAULT, RENAME TO t2",
        "shop",
    );
    assert!(m.table("shop", "t").is_none());
    assert_eq!(
        m.table("shop", "t2").unwrap().columns[1].default,
        DefaultExpr::None
    );
}

#[test]
fn tables_are_created_renamed_copied_and_dropped() {
    let mut m = model();
    m.apply(
        "CREATE TABLE a (x INT NOT NULL, y CHAR(2), UNIQUE KEY (x)) DEFAULT CHARSET=latin1 COMMENT 'hi'",
        "shop",
    );
    let a = m.table("shop", "a").unwrap().clone();
    assert_eq!(
        (a.charset.as_deref(), a.comment.as_str()),
        (Some("latin1"), "hi")
    );
    assert_eq!(a.primary_key, ["x"], "a unique NOT NULL key is promoted");
    assert_eq!(a.columns[1].charset.as_deref(), Some("latin1"));
    m.apply("CREATE TABLE b LIKE a", "shop");
    assert_eq!(m.table("shop", "b"), Some(&a));
    m.apply("RENAME TABLE a TO c, b TO shop.a", "shop");
    assert_eq!(m.table("shop", "c"), Some(&a));
    assert_eq!(m.table("shop", "a"), Some(&a));
    assert!(m.table("shop", "b").is_none());
    m.apply("DROP TABLE IF EXISTS c, a", "shop");
    assert!(m.table("shop", "a").is_none() && m.table("shop", "c").is_none());
    m.apply("CREATE DATABASE sales CHARACTER SET utf8", "shop");
    m.apply("CREATE TABLE sales.s (v VARCHAR(3))", "shop");
    assert_eq!(
        m.table("sales", "s").unwrap().columns[0].charset.as_deref(),
        Some("utf8mb3")
    );
    m.apply("DROP DATABASE sales", "shop");
    assert!(m.table("sales", "s").is_none() && !m.knows_database("sales"));
}

#[test]
fn what_cannot_be_replayed_exactly_is_forgotten() {
    let mut m = model();
    let create = "CREATE TABLE t (id INT PRIMARY KEY, v INT)";
    for sql in [
        "ALTER TABLE t CONVERT TO CHARACTER SET latin1",
        "ALTER TABLE `shop`.`t` COMMENT 'x'",
        "ALTER TABLE t ADD COLUMN w INT DEFAULT 5.5",
        "ALTER TABLE t DROP PRIMARY KEY",
        "ALTER TABLE t ADD COLUMN v INT",
        "ALTER TABLE t MODIFY missing INT",
    ] {
        m.apply(create, "shop");
        m.apply(sql, "shop");
        assert!(m.table("shop", "t").is_none(), "{sql}");
    }
    m.apply("CREATE TABLE IF NOT EXISTS s (x INT)", "shop");
    assert!(m.table("shop", "s").is_none(), "s may exist as it was");
    m.apply("CREATE TABLE t (id INT PRIMARY KEY, v INT)", "shop");
    m.apply("CREATE TABLE IF NOT EXISTS t (other INT)", "shop");
    assert_eq!(
        m.table("shop", "t").unwrap().columns[1].name,
        "v",
        "t exists: unchanged"
    );
    m.apply("CREATE TABLE s AS SELECT 1 AS x", "shop");
    assert!(m.table("shop", "s").is_none());
    m.apply("ALTER TABLE unknown ADD COLUMN x INT", "shop");
    assert!(m.table("shop", "unknown").is_none());
    m.apply("CREATE TABLE other.t (id INT)", "shop");
    assert!(
        m.table("other", "t").is_none(),
        "its database's charset is unknown"
    );
    assert_eq!(
        m.databases_needed("CREATE TABLE other.t (id INT)", "shop"),
        ["other"]
    );
    assert!(
        m.databases_needed("CREATE TABLE t (id INT)", "shop")
            .is_empty()
    );
}

#[test]
fn a_recorded_definition_gives_back_its_model() {
    use crate::table_definition::Flavor;
    let mut m = model();
    m.apply(
        "CREATE TABLE t (id INT UNSIGNED ZEROFILL AUTO_INCREMENT PRIMARY KEY, \
         e ENUM('a','it''s') NOT NULL DEFAULT 'a', d DECIMAL(10,2) DEFAULT 1.5, \
         s VARCHAR(9) DEFAULT 'it''s' COMMENT 'note')",
        "shop",
    );
    let table = m.table("shop", "t").unwrap();
    for mariadb_connector in [false, true] {
        let flavor = Flavor { mariadb_connector };
        let definition = table.definition(flavor);
        let rebuilt = TableModel::from_definition(&definition, true);
        assert_eq!(rebuilt.definition(flavor), definition);
    }
}

#[test]
fn what_the_server_may_resolve_otherwise_is_read_from_it() {
    let mut m = model();
    let create = "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, UNIQUE KEY u (a))";
    for sql in [
        "ALTER TABLE t RENAME COLUMN a TO b, RENAME COLUMN b TO a",
        "ALTER TABLE t CHANGE a b INT, CHANGE b a BIGINT",
        "ALTER TABLE t DROP INDEX u",
        "ALTER TABLE t DROP INDEX `PRIMARY`",
        "DROP INDEX u ON t",
        "ALTER TABLE t DROP COLUMN id",
    ] {
        m.apply(create, "shop");
        m.apply(sql, "shop");
        assert!(m.table("shop", "t").is_none(), "{sql}");
    }
    m.apply("CREATE TABLE k (a INT, b INT)", "shop");
    m.apply("ALTER TABLE k MODIFY a INT NOT NULL", "shop");
    assert!(
        m.table("shop", "k").is_none(),
        "a keyless table may get a promoted key"
    );
}

#[test]
fn renames_follow_each_other_and_names_resolve_as_the_server_does() {
    let mut m = model();
    m.apply("CREATE TABLE a (id INT PRIMARY KEY)", "shop");
    m.apply("CREATE TABLE b (id INT PRIMARY KEY, v INT)", "shop");
    let (a, b) = (m.table("shop", "a").cloned(), m.table("shop", "b").cloned());
    m.apply("RENAME TABLE a TO tmp, b TO a, tmp TO b", "shop");
    assert_eq!(
        (m.table("shop", "a").cloned(), m.table("shop", "b").cloned()),
        (b.clone(), a)
    );
    assert!(m.table("shop", "tmp").is_none());
    m.apply("RENAME TABLE unknown TO a", "shop");
    assert!(
        m.table("shop", "a").is_none(),
        "renamed from a table not seen"
    );
    m.set_database("archive", "latin1");
    m.apply("CREATE TABLE archive.copy LIKE b", "shop");
    assert_eq!(
        m.table("archive", "copy"),
        m.table("shop", "b"),
        "LIKE names a table of the default database"
    );
    m.apply("ALTER TABLE archive.copy RENAME TO moved", "shop");
    assert!(
        m.table("shop", "moved").is_some(),
        "RENAME TO names a table of the default database"
    );
}

#[test]
fn database_character_sets_are_forgotten_when_they_may_have_changed() {
    let mut m = model();
    m.apply(
        "CREATE DATABASE IF NOT EXISTS shop CHARACTER SET latin1",
        "",
    );
    assert!(
        !m.knows_database("shop"),
        "shop existed: its character set is the server's"
    );
    m.apply("CREATE DATABASE sales COLLATE utf8mb4_bin", "");
    assert!(m.knows_database("sales"));
    m.apply("ALTER DATABASE sales CHARACTER SET latin1", "");
    assert!(!m.knows_database("sales"));
    m.set_database("shop", "utf8mb4");
    m.apply("ALTER DATABASE CHARACTER SET latin1", "shop");
    assert!(!m.knows_database("shop"), "the default database");
}

#[test]
fn names_are_compared_as_lower_case_table_names_says() {
    let mut m = SchemaModel::new(ServerRules {
        lower_case_table_names: true,
        ..ServerRules::mariadb_10_11()
    });
    m.set_database("Shop", "utf8mb4");
    m.apply("CREATE TABLE Orders (id INT PRIMARY KEY)", "SHOP");
    m.apply("ALTER TABLE ORDERS ADD COLUMN v INT", "shop");
    assert_eq!(m.table("shop", "orders").unwrap().columns.len(), 2);
}
