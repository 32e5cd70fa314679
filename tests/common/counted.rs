//! A MariaDB table whose readers' statements the server counts: the
//! independent measure of what a rate limit let through.

use mysql_async::prelude::Queryable;

use super::{create_db, root_conn};

/// A database with `products(sku, title, price)` of `rows` rows (`SKU-<i>`),
/// and a user of its own (`<db>_reader`, password `pw`) whose statements
/// MariaDB counts (`userstat`).
pub async fn products(rows: usize) -> (String, String) {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "remote").await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.products (sku VARCHAR(20) PRIMARY KEY, title VARCHAR(60), price DECIMAL(10,2))"
    ))
    .await
    .unwrap();
    let values: Vec<String> = (0..rows)
        .map(|i| format!("('SKU-{i}', 'product {i}', {}.50)", i % 100))
        .collect();
    conn.query_drop(format!(
        "INSERT INTO {db}.products VALUES {}",
        values.join(",")
    ))
    .await
    .unwrap();
    let user = format!("{db}_reader");
    conn.query_drop(format!(
        "CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'; GRANT SELECT ON {db}.* TO '{user}'@'%'; SET GLOBAL userstat = ON"
    ))
    .await
    .unwrap();
    (db, user)
}

/// SELECTs MariaDB counted for `user` (from its `USER_STATISTICS`).
pub async fn selects_by(user: &str) -> u64 {
    let mut conn = root_conn().await;
    let count = conn
        .exec_first(
            "SELECT SELECT_COMMANDS FROM information_schema.USER_STATISTICS WHERE USER = ?",
            (user,),
        )
        .await
        .unwrap()
        .unwrap_or(0);
    conn.disconnect().await.ok();
    count
}
