//! The source's tables as they stand at capture's position in the binlog
//! ([`SchemaModel`]), kept by applying each DDL statement to the definitions
//! before it, as Debezium's schema history does: a capture that reads a
//! table's DDL long after it ran (catching up, or restarted) describes the
//! table as that statement left it, not as it is now.
//!
//! Replayed: `CREATE TABLE` (columns, keys, character set, collation,
//! comment; `LIKE`), `ALTER TABLE` (`ADD`/`DROP`/`MODIFY`/`CHANGE`/`RENAME
//! COLUMN` with `FIRST`/`AFTER`, `ALTER COLUMN … SET`/`DROP DEFAULT`, `ADD`/`DROP
//! PRIMARY KEY`, `RENAME TO`, index and constraint changes), `RENAME TABLE`,
//! `DROP TABLE`, `CREATE`/`DROP DATABASE`. A table a statement changes in a
//! way this module cannot reproduce exactly ([`Unmodelled`]: `CREATE TABLE …
//! SELECT`, `ALTER TABLE … CONVERT TO CHARACTER SET`, a default the server
//! would convert, a table seen for the first time) is forgotten, and the
//! caller reads it from the server: as it is then, which is exact when
//! capture is not behind.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use sqlparser::ast::{
    AlterTableOperation, ColumnOption, CommentDef, CreateTable, CreateTableLikeKind,
    CreateTableOptions, ObjectName, ObjectType, RenameTableNameKind, SqlOption, Statement,
    TableConstraint,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use tracing::debug;

use crate::ddl_statement::{self, qualified};
use crate::declared_column::{ServerRules, Unmodelled, charset_name, charset_of_collation};
use crate::table_model::TableModel;

/// A table's database and name.
pub type TableId = (String, String);

/// The tables and databases known at capture's position.
#[derive(Debug, Clone)]
pub struct SchemaModel {
    rules: ServerRules,
    tables: HashMap<TableId, TableModel>,
    /// Each database's default character set.
    databases: HashMap<String, String>,
}

impl SchemaModel {
    /// An empty model of a server with `rules`.
    pub fn new(rules: ServerRules) -> SchemaModel {
        SchemaModel {
            rules,
            tables: HashMap::new(),
            databases: HashMap::new(),
        }
    }

    /// The table as the model has it.
    pub fn table(&self, db: &str, table: &str) -> Option<&TableModel> {
        self.tables.get(&(db.to_owned(), table.to_owned()))
    }

    /// Sets a table's definition (read from the server, or recorded).
    pub fn set_table(&mut self, db: &str, table: &str, model: TableModel) {
        self.tables.insert((db.to_owned(), table.to_owned()), model);
    }

    /// Forgets a table (dropped).
    pub fn forget(&mut self, db: &str, table: &str) {
        self.tables.remove(&(db.to_owned(), table.to_owned()));
    }

    /// Whether a database's default character set is known.
    pub fn knows_database(&self, db: &str) -> bool {
        self.databases.contains_key(db)
    }

    /// Sets a database's default character set.
    pub fn set_database(&mut self, db: &str, charset: &str) {
        self.databases.insert(db.to_owned(), charset_name(charset));
    }

    /// The databases whose default character set `sql` (run in
    /// `default_db`) needs and the model does not know: those it creates
    /// tables in.
    pub fn databases_needed(&self, sql: &str, default_db: &str) -> Vec<String> {
        let Some(Statement::CreateTable(create)) = ddl_statement::parse(sql) else {
            return Vec::new();
        };
        let (db, _) = qualified(&create.name, default_db);
        if self.knows_database(&db) {
            Vec::new()
        } else {
            vec![db]
        }
    }

    /// Applies `sql`, run in `default_db`. A table the statement changes in
    /// a way the model cannot reproduce is forgotten (and named in the log).
    pub fn apply(&mut self, sql: &str, default_db: &str) {
        match ddl_statement::parse(sql) {
            Some(statement) => {
                if let Err((id, Unmodelled(reason))) = self.apply_statement(&statement, default_db)
                {
                    debug!(db = %id.0, table = %id.1, reason, "a DDL statement not replayed: the table is read from the server");
                    self.tables.remove(&id);
                }
            }
            None => {
                if let Some(id) = altered_table(sql, default_db) {
                    debug!(db = %id.0, table = %id.1, "a DDL statement the parser cannot read: the table is read from the server");
                    self.tables.remove(&id);
                }
            }
        }
    }

    fn apply_statement(
        &mut self,
        statement: &Statement,
        default_db: &str,
    ) -> Result<(), (TableId, Unmodelled)> {
        match statement {
            Statement::CreateTable(create) => {
                let id = qualified(&create.name, default_db);
                if create.temporary || create.if_not_exists && self.tables.contains_key(&id) {
                    return Ok(());
                }
                if create.if_not_exists {
                    // It may exist already, unchanged by the statement.
                    return Err((
                        id,
                        Unmodelled("CREATE TABLE IF NOT EXISTS of a table not seen before".into()),
                    ));
                }
                let model = self.created(create, &id).map_err(|e| (id.clone(), e))?;
                self.tables.insert(id, model);
            }
            Statement::AlterTable(alter) => {
                let id = qualified(&alter.name, default_db);
                let Some(mut model) = self.tables.remove(&id) else {
                    return Err((id, Unmodelled("a table not seen before".into())));
                };
                let mut new_id = id.clone();
                for (i, operation) in alter.operations.iter().enumerate() {
                    let replaced_key = alter.operations[i + 1..].iter().any(|op| {
                        matches!(
                            op,
                            AlterTableOperation::AddConstraint {
                                constraint: TableConstraint::PrimaryKey(_),
                                ..
                            }
                        )
                    });
                    if let AlterTableOperation::RenameTable {
                        table_name: RenameTableNameKind::As(name) | RenameTableNameKind::To(name),
                    } = operation
                    {
                        new_id = qualified(name, &id.0);
                        continue;
                    }
                    table_changes::alter(&mut model, operation, replaced_key, self.rules)
                        .map_err(|e| (new_id.clone(), e))?;
                }
                self.tables.insert(new_id, model);
            }
            Statement::CreateIndex(index) => {
                let id = qualified(&index.table_name, default_db);
                if index.unique
                    && self
                        .tables
                        .get(&id)
                        .is_some_and(|t| t.primary_key.is_empty())
                {
                    return Err((id, Unmodelled("a unique index on a keyless table".into())));
                }
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                names,
                temporary: false,
                ..
            } => {
                for name in names {
                    self.tables.remove(&qualified(name, default_db));
                }
            }
            Statement::RenameTable(pairs) => {
                for pair in pairs {
                    let from = qualified(&pair.old_name, default_db);
                    let to = qualified(&pair.new_name, default_db);
                    match self.tables.remove(&from) {
                        Some(model) => {
                            self.tables.insert(to, model);
                        }
                        None => return Err((to, Unmodelled("a table not seen before".into()))),
                    }
                }
            }
            Statement::CreateDatabase {
                db_name,
                default_charset,
                default_collation,
                ..
            } => {
                let db = qualified(db_name, "").1;
                let charset = default_charset
                    .as_deref()
                    .map(charset_name)
                    .or_else(|| default_collation.as_deref().map(charset_of_collation));
                match charset {
                    Some(charset) => self.set_database(&db, &charset),
                    // The server's default: read from the server.
                    None => {
                        self.databases.remove(&db);
                    }
                }
            }
            Statement::Drop {
                object_type: ObjectType::Database | ObjectType::Schema,
                names,
                ..
            } => {
                for name in names {
                    let db = qualified(name, "").1;
                    self.databases.remove(&db);
                    self.tables.retain(|(table_db, _), _| *table_db != db);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The table `CREATE TABLE` makes.
    fn created(&self, create: &CreateTable, id: &TableId) -> Result<TableModel, Unmodelled> {
        if create.query.is_some() {
            return Err(Unmodelled("CREATE TABLE … SELECT".into()));
        }
        if let Some(CreateTableLikeKind::Plain(like) | CreateTableLikeKind::Parenthesized(like)) =
            &create.like
        {
            let source = qualified(&like.name, &id.0);
            return self
                .tables
                .get(&source)
                .cloned()
                .ok_or_else(|| Unmodelled("LIKE a table not seen before".into()));
        }
        let options = table_options(create);
        let charset =
            match options.charset {
                Some(charset) => charset,
                None => self.databases.get(&id.0).cloned().ok_or_else(|| {
                    Unmodelled("a database whose character set is unknown".into())
                })?,
            };
        let mut model = TableModel {
            charset: Some(charset),
            comment: options.comment.unwrap_or_default(),
            columns: Vec::new(),
            primary_key: Vec::new(),
        };
        let mut unique: Vec<Vec<String>> = Vec::new();
        for column in &create.columns {
            let options: Vec<&ColumnOption> = column.options.iter().map(|o| &o.option).collect();
            let declared = table_changes::declare(
                &model,
                &column.name,
                &column.data_type,
                &options,
                self.rules,
            )?;
            if declared.primary_key {
                model.primary_key = vec![declared.column.name.clone()];
            }
            if declared.unique {
                unique.push(vec![declared.column.name.clone()]);
            }
            model.columns.push(declared.column);
        }
        for constraint in &create.constraints {
            match constraint {
                TableConstraint::PrimaryKey(key) => {
                    model.primary_key = table_changes::column_names(&model, &key.columns)?;
                }
                TableConstraint::Unique(key) => {
                    unique.push(table_changes::column_names(&model, &key.columns)?)
                }
                _ => {}
            }
        }
        if model.primary_key.is_empty() {
            // The server promotes a unique index on NOT NULL columns.
            let candidates: Vec<&Vec<String>> = unique
                .iter()
                .filter(|key| {
                    key.iter().all(|name| {
                        model
                            .column_index(name)
                            .is_some_and(|i| !model.columns[i].nullable)
                    })
                })
                .collect();
            match candidates.as_slice() {
                [] => {}
                [key] => model.primary_key = (*key).clone(),
                _ => {
                    return Err(Unmodelled(
                        "several unique keys could be the primary key".into(),
                    ));
                }
            }
        }
        table_changes::key_columns_not_null(&mut model);
        Ok(model)
    }
}

/// `CREATE TABLE`'s character set and comment.
struct TableOptions {
    charset: Option<String>,
    comment: Option<String>,
}

fn table_options(create: &CreateTable) -> TableOptions {
    let mut options = TableOptions {
        charset: None,
        comment: create.comment.as_ref().map(comment_text),
    };
    let mut collation_charset = None;
    let listed: &[SqlOption] = match &create.table_options {
        CreateTableOptions::None => &[],
        CreateTableOptions::With(list)
        | sqlparser::ast::CreateTableOptions::Options(list)
        | sqlparser::ast::CreateTableOptions::Plain(list)
        | sqlparser::ast::CreateTableOptions::TableProperties(list) => list,
    };
    for option in listed {
        match option {
            SqlOption::KeyValue { key, value } => {
                let key = key.to_string().to_ascii_uppercase();
                let value = value.to_string();
                match key.trim_start_matches("DEFAULT ") {
                    "CHARSET" | "CHARACTER SET" => options.charset = Some(charset_name(&value)),
                    "COLLATE" => collation_charset = Some(charset_of_collation(&value)),
                    _ => {}
                }
            }
            SqlOption::Comment(comment) => options.comment = Some(comment_text(comment)),
            _ => {}
        }
    }
    options.charset = options.charset.or(collation_charset);
    options
}

fn comment_text(comment: &CommentDef) -> String {
    match comment {
        CommentDef::WithEq(text) | CommentDef::WithoutEq(text) => text.clone(),
    }
}

/// The table an `ALTER TABLE` the parser cannot read changes.
fn altered_table(sql: &str, default_db: &str) -> Option<TableId> {
    static ALTER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?is)^\s*ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?")
            .expect("a valid pattern")
    });
    let text = ddl_statement::statement_text(sql);
    let rest = &text[ALTER.find(text)?.end()..];
    let name: ObjectName = Parser::new(&MySqlDialect {})
        .try_with_sql(rest)
        .ok()?
        .parse_object_name(false)
        .ok()?;
    Some(qualified(&name, default_db))
}

mod table_changes;
#[cfg(test)]
mod tests;
