//! The source's tables as they stand at capture's position in the binlog
//! ([`SchemaModel`]), kept by applying each DDL statement to the definitions
//! before it, as Debezium's schema history does: a capture that reads a
//! table's DDL long after it ran (catching up, or restarted) describes the
//! table as that statement left it, not as it is now.
//!
//! Replayed: `CREATE TABLE` (columns, keys, character set, collation,
//! comment; `LIKE`), `ALTER TABLE` (`ADD`/`DROP`/`MODIFY`/`CHANGE`/`RENAME
//! COLUMN` with `FIRST`/`AFTER`, `ALTER COLUMN … SET`/`DROP DEFAULT`, `DROP
//! PRIMARY KEY` with `ADD PRIMARY KEY`, `RENAME TO`, added indexes and
//! foreign keys), `RENAME TABLE`, `DROP TABLE`, `CREATE`/`DROP DATABASE`. A
//! table a statement changes in a way this module cannot reproduce exactly
//! ([`Unmodelled`]: `CREATE TABLE … SELECT`, statements the parser cannot
//! read such as `ALTER TABLE … CONVERT TO CHARACTER SET`, a default the
//! server would convert, a dropped index, which may be the unique key the
//! server took as primary key, any `ALTER` of a table without a primary key,
//! a table seen for the first time) is forgotten, and the caller reads it
//! from the server: as it is then, which is exact when capture is not behind.

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
use crate::declared_column::Unmodelled;
use crate::server_rules::ServerRules;
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
        self.tables.get(&self.key(db, table))
    }

    /// Sets a table's definition (read from the server, or recorded).
    pub fn set_table(&mut self, db: &str, table: &str, model: TableModel) {
        self.tables.insert(self.key(db, table), model);
    }

    /// Forgets a table (dropped).
    pub fn forget(&mut self, db: &str, table: &str) {
        self.tables.remove(&self.key(db, table));
    }

    /// Whether a database's default character set is known.
    pub fn knows_database(&self, db: &str) -> bool {
        self.databases.contains_key(&self.rules.name(db))
    }

    /// Sets a database's default character set.
    pub fn set_database(&mut self, db: &str, charset: &str) {
        let charset = self.rules.charset_name(charset);
        self.databases.insert(self.rules.name(db), charset);
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
        let forgotten = match ddl_statement::parse(sql) {
            Some(statement) => match self.apply_statement(&statement, default_db) {
                Ok(()) => return,
                Err((id, Unmodelled(reason))) => (id, reason),
            },
            None => match unreadable_statement(sql, default_db) {
                Some(Unreadable::Table(id)) => (id, "the parser cannot read it".to_owned()),
                Some(Unreadable::Database(db)) => {
                    debug!(
                        db,
                        "a database statement the parser cannot read: its character set is read from the server"
                    );
                    self.databases.remove(&self.rules.name(&db));
                    return;
                }
                None => return,
            },
        };
        let ((db, table), reason) = forgotten;
        debug!(
            db,
            table, reason, "a DDL statement not replayed: the table is read from the server"
        );
        self.forget(&db, &table);
    }

    /// The model's key of a table.
    fn key(&self, db: &str, table: &str) -> TableId {
        (self.rules.name(db), self.rules.name(table))
    }

    /// The key of the table `name` means, run in `default_db`.
    fn id(&self, name: &ObjectName, default_db: &str) -> TableId {
        let (db, table) = qualified(name, default_db);
        self.key(&db, &table)
    }

    fn apply_statement(
        &mut self,
        statement: &Statement,
        default_db: &str,
    ) -> Result<(), (TableId, Unmodelled)> {
        match statement {
            Statement::CreateTable(create) => {
                let id = self.id(&create.name, default_db);
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
                let model = self
                    .created(create, &id, default_db)
                    .map_err(|e| (id.clone(), e))?;
                self.tables.insert(id, model);
            }
            Statement::AlterTable(alter) => {
                let id = self.id(&alter.name, default_db);
                let Some(mut model) = self.tables.remove(&id) else {
                    return Err((id, Unmodelled("a table not seen before".into())));
                };
                if model.primary_key.is_empty() {
                    return Err((
                        id,
                        Unmodelled(
                            "a table without a primary key: the server may promote a unique key"
                                .into(),
                        ),
                    ));
                }
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
                        new_id = self.id(name, default_db);
                        continue;
                    }
                    table_changes::alter(&mut model, operation, replaced_key, self.rules)
                        .map_err(|e| (new_id.clone(), e))?;
                }
                self.tables.insert(new_id, model);
            }
            Statement::CreateIndex(index) => {
                let id = self.id(&index.table_name, default_db);
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
                object_type: ObjectType::Index,
                table: Some(table),
                ..
            } => {
                // It may be the unique index the server took as primary key.
                return Err((self.id(table, default_db), Unmodelled("DROP INDEX".into())));
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                names,
                temporary: false,
                ..
            } => {
                for name in names {
                    self.tables.remove(&self.id(name, default_db));
                }
            }
            Statement::RenameTable(pairs) => {
                // In order: `a TO tmp, b TO a, tmp TO b` swaps a and b.
                for pair in pairs {
                    let from = self.id(&pair.old_name, default_db);
                    let to = self.id(&pair.new_name, default_db);
                    match self.tables.remove(&from) {
                        Some(model) => {
                            self.tables.insert(to, model);
                        }
                        None => {
                            debug!(
                                db = to.0,
                                table = to.1,
                                "renamed from a table not seen before: read from the server"
                            );
                            self.tables.remove(&to);
                        }
                    }
                }
            }
            Statement::CreateDatabase {
                db_name,
                if_not_exists,
                default_charset,
                default_collation,
                ..
            } => {
                let db = self.rules.name(&qualified(db_name, "").1);
                let charset = default_charset
                    .as_deref()
                    .map(|c| self.rules.charset_name(c))
                    .or_else(|| {
                        default_collation
                            .as_deref()
                            .map(|c| self.rules.charset_of_collation(c))
                    });
                match charset {
                    Some(charset) if !if_not_exists => {
                        self.databases.insert(db, charset);
                    }
                    // The server's default, or the existing database's: read from the server.
                    _ => {
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
                    let db = self.rules.name(&qualified(name, "").1);
                    self.databases.remove(&db);
                    self.tables.retain(|(table_db, _), _| *table_db != db);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The table `CREATE TABLE` makes.
    fn created(
        &self,
        create: &CreateTable,
        id: &TableId,
        default_db: &str,
    ) -> Result<TableModel, Unmodelled> {
        if create.query.is_some() {
            return Err(Unmodelled("CREATE TABLE … SELECT".into()));
        }
        if let Some(CreateTableLikeKind::Plain(like) | CreateTableLikeKind::Parenthesized(like)) =
            &create.like
        {
            let source = self.id(&like.name, default_db);
            return self
                .tables
                .get(&source)
                .cloned()
                .ok_or_else(|| Unmodelled("LIKE a table not seen before".into()));
        }
        let options = table_options(create, self.rules);
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

fn table_options(create: &CreateTable, rules: ServerRules) -> TableOptions {
    let mut options = TableOptions {
        charset: None,
        comment: create.comment.as_ref().map(comment_text),
    };
    let mut collation_charset = None;
    let listed: &[SqlOption] = match &create.table_options {
        CreateTableOptions::None => &[],
        CreateTableOptions::With(list)
        | CreateTableOptions::Options(list)
        | CreateTableOptions::Plain(list)
        | CreateTableOptions::TableProperties(list) => list,
    };
    for option in listed {
        match option {
            SqlOption::KeyValue { key, value } => {
                let key = key.to_string().to_ascii_uppercase();
                let value = value.to_string();
                match key.trim_start_matches("DEFAULT ") {
                    "CHARSET" | "CHARACTER SET" => {
                        options.charset = Some(rules.charset_name(&value))
                    }
                    "COLLATE" => collation_charset = Some(rules.charset_of_collation(&value)),
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

/// What a statement the parser cannot read changes.
enum Unreadable {
    /// A table (`ALTER`, `CREATE` or `DROP TABLE`: the first it names).
    Table(TableId),
    /// A database's defaults (`ALTER DATABASE`).
    Database(String),
}

/// The table or database a statement the parser cannot read changes, if
/// the words before the name say.
fn unreadable_statement(sql: &str, default_db: &str) -> Option<Unreadable> {
    static TABLE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?is)^(?:ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?|CREATE\s+(?:OR\s+REPLACE\s+)?|DROP\s+)TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?",
        )
        .expect("a valid pattern")
    });
    static DATABASE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?is)^ALTER\s+(?:DATABASE|SCHEMA)\b\s*").expect("a valid pattern")
    });
    let text = ddl_statement::statement_text(sql);
    let name = |rest: &str| -> Option<ObjectName> {
        Parser::new(&MySqlDialect {})
            .try_with_sql(rest)
            .ok()?
            .parse_object_name(false)
            .ok()
    };
    if let Some(found) = TABLE.find(text) {
        let table = name(&text[found.end()..])?;
        return Some(Unreadable::Table(qualified(&table, default_db)));
    }
    let found = DATABASE.find(text)?;
    let rest = &text[found.end()..];
    // `ALTER DATABASE CHARACTER SET …` changes the default database.
    let named = name(rest).map(|n| qualified(&n, "").1).filter(|n| {
        !["CHARACTER", "CHARSET", "DEFAULT", "COLLATE", "COMMENT"]
            .iter()
            .any(|word| n.eq_ignore_ascii_case(word))
    });
    Some(Unreadable::Database(
        named.unwrap_or_else(|| default_db.to_owned()),
    ))
}

mod table_changes;
#[cfg(test)]
mod tests;
