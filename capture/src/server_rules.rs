//! How a server stores table definitions ([`ServerRules`]), which
//! `information_schema` shows and DDL replay must reproduce: integer display
//! widths, the name of the 3-byte UTF-8 character set, implicit `TIMESTAMP`
//! attributes, the case of table names. Read once, at preflight.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use crate::error::CaptureError;

/// How the server stores definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerRules {
    /// MariaDB: quoted defaults keep their escapes, expressions are shown.
    pub mariadb: bool,
    /// Integer types show their display width (MariaDB, MySQL before 8.0.19).
    pub int_widths: bool,
    /// The 3-byte UTF-8 character set is shown as `utf8mb3` (MariaDB 10.6+,
    /// MySQL 8.0.30+), else as `utf8`.
    pub utf8mb3_shown: bool,
    /// `explicit_defaults_for_timestamp` is on (else a `TIMESTAMP` column
    /// not declared `NULL` gets implicit attributes).
    pub explicit_defaults_for_timestamp: bool,
    /// `lower_case_table_names` is not 0: names are stored (and compared) in
    /// lower case.
    pub lower_case_table_names: bool,
}

impl ServerRules {
    /// The rules of a server whose `VERSION()` is `version`, with
    /// `explicit_defaults_for_timestamp` on and case-sensitive names.
    pub fn of(version: &str) -> ServerRules {
        let mariadb = version.to_ascii_lowercase().contains("mariadb");
        let mut numbers = version
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let release = (
            numbers.next().unwrap_or(0),
            numbers.next().unwrap_or(0),
            numbers.next().unwrap_or(0),
        );
        ServerRules {
            mariadb,
            int_widths: mariadb || release < (8, 0, 19),
            utf8mb3_shown: if mariadb {
                release >= (10, 6, 1)
            } else {
                release >= (8, 0, 30)
            },
            explicit_defaults_for_timestamp: true,
            lower_case_table_names: false,
        }
    }

    /// The rules of the server `conn` is connected to, whose `VERSION()` is `version`.
    pub async fn read(conn: &mut Conn, version: &str) -> Result<ServerRules, CaptureError> {
        let variables: Vec<(String, String)> = conn
            .query(
                "SHOW VARIABLES WHERE Variable_name IN \
                 ('explicit_defaults_for_timestamp', 'lower_case_table_names')",
            )
            .await?;
        let value = |name: &str| {
            variables
                .iter()
                .find(|(variable, _)| variable == name)
                .map(|(_, value)| value.to_ascii_uppercase())
        };
        Ok(ServerRules {
            explicit_defaults_for_timestamp: value("explicit_defaults_for_timestamp")
                .is_some_and(|v| v == "ON" || v == "1"),
            lower_case_table_names: value("lower_case_table_names").is_some_and(|v| v != "0"),
            ..ServerRules::of(version)
        })
    }

    /// A character set as `information_schema` names it (`utf8` is
    /// `utf8mb3` where [`ServerRules::utf8mb3_shown`]).
    pub fn charset_name(&self, name: &str) -> String {
        let name = name.trim_matches(['`', '\'', '"']).to_ascii_lowercase();
        match name.as_str() {
            "utf8" | "utf8mb3" if self.utf8mb3_shown => "utf8mb3".into(),
            "utf8" | "utf8mb3" => "utf8".into(),
            _ => name,
        }
    }

    /// The character set of a collation (`utf8mb4_bin` is `utf8mb4`'s).
    pub fn charset_of_collation(&self, collation: &str) -> String {
        let collation = collation
            .trim_matches(['`', '\'', '"'])
            .to_ascii_lowercase();
        self.charset_name(collation.split('_').next().unwrap_or_default())
    }

    /// A table's or database's name as the server stores it.
    pub fn name(&self, name: &str) -> String {
        if self.lower_case_table_names {
            name.to_lowercase()
        } else {
            name.to_owned()
        }
    }
}

#[cfg(test)]
impl ServerRules {
    /// The rules of MariaDB 10.11 (the test stack's server) with its defaults.
    pub(crate) fn mariadb_10_11() -> ServerRules {
        ServerRules::of("10.11.19-MariaDB-log")
    }
}
