//! Which tables are captured: include/exclude patterns over databases and `db.table`.

use regex::Regex;

use crate::config::{CaptureConfig, Patterns};

/// Compiled include/exclude rules. System schemas are never captured.
#[derive(Debug, Clone)]
pub struct TableFilter {
    include_dbs: Vec<Regex>,
    include_tables: Vec<Regex>,
    exclude_dbs: Vec<Regex>,
    exclude_tables: Vec<Regex>,
    /// `(db, table)` of the signal table: decoded, never captured.
    signal: Option<(String, String)>,
}

const SYSTEM_SCHEMAS: [&str; 4] = ["mysql", "information_schema", "performance_schema", "sys"];

fn compile(patterns: &[String]) -> Vec<Regex> {
    // Patterns were checked by `CaptureConfig::validate`; anchor them to match whole names.
    patterns
        .iter()
        .filter_map(|p| Regex::new(&format!("^(?:{p})$")).ok())
        .collect()
}

impl TableFilter {
    /// Builds the filter from validated patterns.
    pub fn new(include: &Patterns, exclude: &Patterns) -> Self {
        TableFilter {
            include_dbs: compile(&include.databases),
            include_tables: compile(&include.tables),
            exclude_dbs: compile(&exclude.databases),
            exclude_tables: compile(&exclude.tables),
            signal: None,
        }
    }

    /// The filter a capture config asks for, with its signal table.
    pub fn of(config: &CaptureConfig) -> Self {
        TableFilter {
            signal: config.snapshot.signal_table_name(),
            ..TableFilter::new(&config.include, &config.exclude)
        }
    }

    /// Whether `db.table` is the signal table (`snapshot.signal_table`).
    pub fn is_signal_table(&self, db: &str, table: &str) -> bool {
        self.signal
            .as_ref()
            .is_some_and(|(d, t)| d == db && t == table)
    }

    /// Whether the binlog reader decodes the rows of `db.table`: captured tables
    /// and the signal table.
    pub fn decodes(&self, db: &str, table: &str) -> bool {
        self.captures(db, table) || self.is_signal_table(db, table)
    }

    /// Whether a DDL statement run with default database `db` goes to the schema history:
    /// when `db` may hold captured tables, or is empty (statements that name their tables).
    pub fn records_ddl_of(&self, db: &str) -> bool {
        let any = |rules: &[Regex]| rules.iter().any(|r| r.is_match(db));
        db.is_empty()
            || (!SYSTEM_SCHEMAS.contains(&db)
                && (self.include_dbs.is_empty() || any(&self.include_dbs))
                && !any(&self.exclude_dbs))
    }

    /// Whether changes to `db.table` are captured.
    pub fn captures(&self, db: &str, table: &str) -> bool {
        if SYSTEM_SCHEMAS.contains(&db) || self.is_signal_table(db, table) {
            return false;
        }
        let qualified = format!("{db}.{table}");
        let any = |rules: &[Regex], name: &str| rules.iter().any(|r| r.is_match(name));
        (self.include_dbs.is_empty() || any(&self.include_dbs, db))
            && (self.include_tables.is_empty() || any(&self.include_tables, &qualified))
            && !any(&self.exclude_dbs, db)
            && !any(&self.exclude_tables, &qualified)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(dbs: &[&str], tables: &[&str]) -> Patterns {
        Patterns {
            databases: dbs.iter().map(|s| s.to_string()).collect(),
            tables: tables.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn include_and_exclude() {
        let f = TableFilter::new(
            &patterns(&["shop", "inv.*"], &[]),
            &patterns(&[], &[r"shop\.audit_.*"]),
        );
        assert!(f.captures("shop", "users"));
        assert!(f.captures("inventory", "items"));
        assert!(!f.captures("shop", "audit_log"));
        assert!(
            !f.captures("shopping", "users"),
            "patterns match whole names"
        );
        assert!(!f.captures("mysql", "user"));
        let all = TableFilter::new(&Patterns::default(), &Patterns::default());
        assert!(all.captures("anything", "t"));
        assert!(!all.captures("information_schema", "TABLES"));
        assert!(f.records_ddl_of("shop") && f.records_ddl_of(""));
        assert!(!f.records_ddl_of("other") && !f.records_ddl_of("mysql"));
    }
}
