//! Jobs written in SQL, compiled to the job model (so a SQL job runs, is
//! measured and recovers exactly as the YAML job it compiles to):
//!
//! ```sql
//! SET kafka.brokers = '127.0.0.1:19092';
//! SET tables = 'tables.yaml';
//! CREATE STREAM orders (proc_time AS PROCTIME()) WITH (topic = 'shop.orders', format = 'change');
//! CREATE STREAM enriched_orders (PRIMARY KEY (id) NOT ENFORCED) WITH (topic = 'orders.enriched');
//! CREATE TABLE users (PRIMARY KEY (id) NOT ENFORCED);
//! CREATE JOB enrich_orders WITH (dead_letter_topic = 'orders.dlq') AS
//! INSERT INTO enriched_orders
//! SELECT o.*, u.name AS user_name
//! FROM orders AS o
//! LEFT JOIN users FOR SYSTEM_TIME AS OF o.proc_time AS u ON u.id = o.user_id
//! WHERE o.quantity > 0;
//! ```
//!
//! - [`script`]: the statements (`SET`, `CREATE STREAM`, `CREATE TABLE`,
//!   `CREATE JOB … AS INSERT INTO … SELECT …`), parsed by `sqlparser` in
//!   [`crate::dialect`].
//! - [`compile`]: a job's query to the job model, refusing what is outside the
//!   subset with the line and column and what is supported.

mod compile;
mod script;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use script::{JobDecl, Script, StreamDecl, TableDecl};
use serde::Deserialize;
use serde_json::{Map, Value};
use tributary_config::ConfigError;

use crate::config::EnrichConfig;

/// A SQL job file that cannot be compiled: where, and why (what is
/// supported); the same as an expression's error.
pub type SqlError = crate::expr::CompileError;

/// The key columns of the tables the tables config declares them for.
pub type TableKeys = HashMap<String, Vec<String>>;

/// A table a SQL job file declares (`CREATE TABLE`).
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredTable {
    /// Its name.
    pub name: String,
    /// Its key columns, in key order.
    pub key: Vec<String>,
    /// Its settings, as the tables config's entry for it would hold them
    /// (empty: a table of the tables config, whose key this declares).
    pub entry: Map<String, Value>,
}

impl DeclaredTable {
    /// Its name, key and entry.
    pub fn parts(&self) -> (&str, &[String], &Map<String, Value>) {
        (&self.name, &self.key, &self.entry)
    }
}

/// Parses a SQL job file.
pub fn parse(text: &str) -> Result<Script, SqlError> {
    script::parse(text)
}

/// A job file as read: YAML jobs, or SQL jobs that compile once the keys of
/// their tables are known (from the tables config the file names).
#[derive(Debug)]
pub enum JobFile {
    /// A YAML job file with `jobs:`.
    Config(Box<EnrichConfig>),
    /// A `.sql` file, or a YAML job file with `sql:`.
    Sql(SqlJobFile),
}

/// SQL jobs and the settings around them.
#[derive(Debug)]
pub struct SqlJobFile {
    /// Where the SQL is, for errors (`jobs.sql`, or `jobs.yaml, sql:`).
    origin: String,
    /// The YAML file's settings (empty for a `.sql` file: its SETs give them).
    settings: Map<String, Value>,
    script: Script,
}

/// The `sql:` field of a YAML job file: the SQL, or the file holding it.
#[derive(Deserialize)]
#[serde(untagged)]
enum SqlField {
    Text(String),
    File {
        /// Relative to the job file.
        file: PathBuf,
    },
}

impl JobFile {
    /// Reads `path`: SQL when it ends in `.sql`, else YAML (with `jobs:` or
    /// `sql:`). Errors name the file and the field, or the line and column.
    pub fn read(path: &Path) -> Result<JobFile, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("", format!("cannot read {}: {e}", path.display())))?;
        let sql_error = |origin: &str, e: SqlError| ConfigError::new(origin, e.to_string());
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("sql"))
        {
            let origin = path.display().to_string();
            let script = parse(&text).map_err(|e| sql_error(&origin, e))?;
            return Ok(JobFile::Sql(SqlJobFile {
                origin,
                settings: Map::new(),
                script,
            }));
        }
        let mut settings: Map<String, Value> = tributary_config::parse_yaml(&text)?;
        let Some(field) = settings.remove("sql") else {
            return tributary_config::parse(&text).map(|c| JobFile::Config(Box::new(c)));
        };
        if settings.contains_key("jobs") {
            return Err(ConfigError::new(
                "sql",
                "a job file declares its jobs in `jobs:` or in `sql:`, not both",
            ));
        }
        let field: SqlField = serde_json::from_value(field)
            .map_err(|_| ConfigError::new("sql", "the SQL text, or `{ file: jobs.sql }`"))?;
        let (origin, text) = match field {
            SqlField::Text(text) => (format!("{}, sql:", path.display()), text),
            SqlField::File { file } => {
                let file = path.parent().unwrap_or(Path::new(".")).join(file);
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    ConfigError::new("sql.file", format!("cannot read {}: {e}", file.display()))
                })?;
                (file.display().to_string(), text)
            }
        };
        let script = parse(&text).map_err(|e| sql_error(&origin, e))?;
        if let Some((name, _, at)) = script.settings.first() {
            let e = SqlError::new(
                *at,
                format!(
                    "SET {}: the YAML job file holds the settings",
                    name.join(".")
                ),
            );
            return Err(sql_error(&origin, e));
        }
        Ok(JobFile::Sql(SqlJobFile {
            origin,
            settings,
            script,
        }))
    }
}

impl JobFile {
    /// Reads the job file at `path` and the tables config it names, read by
    /// `read_tables` (with the file name as written). SQL jobs are compiled
    /// with the keys `declare` gives after being told the tables the SQL
    /// declares (it adds them to the tables config, or sets their key).
    pub fn load<T>(
        path: &Path,
        read_tables: impl FnOnce(&Path) -> Result<T, ConfigError>,
        declare: impl FnOnce(&mut T, &[DeclaredTable]) -> Result<TableKeys, ConfigError>,
    ) -> Result<(EnrichConfig, Option<T>), ConfigError> {
        match JobFile::read(path)? {
            JobFile::Config(config) => {
                let tables = config.tables.as_deref().map(read_tables).transpose()?;
                Ok((*config, tables))
            }
            JobFile::Sql(sql) => {
                let mut tables = sql.tables().as_deref().map(read_tables).transpose()?;
                let declared = sql.declared_tables()?;
                let keys = match &mut tables {
                    Some(tables) => declare(tables, &declared)?,
                    None if declared.iter().any(|t| !t.entry.is_empty()) => {
                        return Err(ConfigError::new(
                            &sql.origin,
                            "CREATE TABLE … WITH (…) adds a table to the tables config: name \
                             it with SET tables = 'tables.yaml' (its data_dir and kafka)",
                        ));
                    }
                    None => TableKeys::new(),
                };
                Ok((sql.compile(&keys)?, tables))
            }
        }
    }
}

impl SqlJobFile {
    /// The tables config the file names (`tables:` or `SET tables = '…'`).
    pub fn tables(&self) -> Option<PathBuf> {
        let set =
            self.script.settings.iter().find_map(|(name, value, _)| {
                (name.len() == 1 && name[0] == "tables").then_some(value)
            });
        set.or(self.settings.get("tables"))
            .and_then(Value::as_str)
            .map(PathBuf::from)
    }

    /// The job file, compiled with the keys of the tables.
    pub fn compile(&self, keys: &TableKeys) -> Result<EnrichConfig, ConfigError> {
        compile::job_file(&self.script, keys, self.settings.clone())
            .map_err(|e| ConfigError::new(&self.origin, e.to_string()))
    }

    /// The tables the SQL declares (`CREATE TABLE`): each one's name, key
    /// and, for a table it adds to the tables config, its settings as a
    /// tables config entry (empty for a table of the tables config).
    pub fn declared_tables(&self) -> Result<Vec<DeclaredTable>, ConfigError> {
        let mut tables = Vec::with_capacity(self.script.tables.len());
        for table in &self.script.tables {
            let mut entry = Map::new();
            for (name, value) in &table.options {
                compile::set(&mut entry, name, value.clone(), table.at)
                    .map_err(|e| ConfigError::new(&self.origin, e.to_string()))?;
            }
            tables.push(DeclaredTable {
                name: table.name.clone(),
                key: table.key.clone(),
                entry,
            });
        }
        Ok(tables)
    }
}

#[cfg(test)]
mod tests;
