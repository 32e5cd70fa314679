//! How one `ALTER TABLE` operation changes a table's model, and the column
//! and key helpers `CREATE TABLE` shares with it.

use sqlparser::ast::{
    AlterColumnOperation, AlterTableOperation, ColumnOption, DataType, Expr, Ident, IndexColumn,
    MySQLColumnPosition, TableConstraint,
};

use crate::column_default::DefaultExpr;
use crate::declared_column::{self, Declared, Unmodelled};
use crate::server_rules::ServerRules;
use crate::table_definition::DeclaredType;
use crate::table_model::TableModel;

/// A column declared in `model`'s table.
pub(super) fn declare(
    model: &TableModel,
    name: &Ident,
    data_type: &DataType,
    options: &[&ColumnOption],
    rules: ServerRules,
) -> Result<Declared, Unmodelled> {
    declared_column::declare(
        &name.value,
        data_type,
        options,
        model.charset.as_deref(),
        rules,
    )
}

/// The columns a key lists, as the table names them.
pub(super) fn column_names(
    model: &TableModel,
    columns: &[IndexColumn],
) -> Result<Vec<String>, Unmodelled> {
    columns
        .iter()
        .map(|column| match &column.column.expr {
            Expr::Identifier(ident) => model
                .column_index(&ident.value)
                .map(|i| model.columns[i].name.clone())
                .ok_or_else(|| Unmodelled(format!("a key on a column not seen: {ident}"))),
            other => Err(Unmodelled(format!("a key part {other}"))),
        })
        .collect()
}

/// Primary key columns are NOT NULL.
pub(super) fn key_columns_not_null(model: &mut TableModel) {
    for name in model.primary_key.clone() {
        if let Some(i) = model.column_index(&name) {
            model.columns[i].nullable = false;
        }
    }
}

/// Applies one `ALTER TABLE` operation; `replaced_key`: a later operation of
/// the statement adds a primary key.
pub(super) fn alter(
    model: &mut TableModel,
    operation: &AlterTableOperation,
    replaced_key: bool,
    rules: ServerRules,
) -> Result<(), Unmodelled> {
    let index = |model: &TableModel, name: &Ident| {
        model
            .column_index(&name.value)
            .ok_or_else(|| Unmodelled(format!("no column {name}")))
    };
    match operation {
        AlterTableOperation::AddColumn {
            column_def,
            column_position,
            if_not_exists,
            ..
        } => {
            if model.column_index(&column_def.name.value).is_some() {
                return if *if_not_exists {
                    Ok(())
                } else {
                    Err(Unmodelled(format!("column {} exists", column_def.name)))
                };
            }
            let options: Vec<&ColumnOption> =
                column_def.options.iter().map(|o| &o.option).collect();
            let declared = declare(
                model,
                &column_def.name,
                &column_def.data_type,
                &options,
                rules,
            )?;
            place(model, declared, None, column_position.as_ref())?;
        }
        AlterTableOperation::DropColumn {
            column_names,
            if_exists,
            ..
        } => {
            for name in column_names {
                match model.column_index(&name.value) {
                    Some(i) => {
                        let removed = model.columns.remove(i);
                        model
                            .primary_key
                            .retain(|c| !c.eq_ignore_ascii_case(&removed.name));
                        if model.primary_key.is_empty() {
                            // The server may promote a unique key.
                            return Err(Unmodelled("the primary key's last column dropped".into()));
                        }
                    }
                    None if *if_exists => {}
                    None => return Err(Unmodelled(format!("no column {name}"))),
                }
            }
        }
        AlterTableOperation::ModifyColumn {
            col_name,
            data_type,
            options,
            column_position,
        } => {
            let at = index(model, col_name)?;
            let options: Vec<&ColumnOption> = options.iter().collect();
            let declared = declare(model, col_name, data_type, &options, rules)?;
            place(model, declared, Some(at), column_position.as_ref())?;
        }
        AlterTableOperation::ChangeColumn {
            old_name,
            new_name,
            data_type,
            options,
            column_position,
        } => {
            let at = index(model, old_name)?;
            renamable(model, old_name, new_name)?;
            let options: Vec<&ColumnOption> = options.iter().collect();
            let declared = declare(model, new_name, data_type, &options, rules)?;
            rename_in_key(model, &model.columns[at].name.clone(), &new_name.value);
            place(model, declared, Some(at), column_position.as_ref())?;
        }
        AlterTableOperation::RenameColumn {
            old_column_name,
            new_column_name,
        } => {
            let at = index(model, old_column_name)?;
            renamable(model, old_column_name, new_column_name)?;
            let old = std::mem::replace(&mut model.columns[at].name, new_column_name.value.clone());
            rename_in_key(model, &old, &new_column_name.value);
        }
        AlterTableOperation::AlterColumn { column_name, op } => {
            let at = index(model, column_name)?;
            match op {
                AlterColumnOperation::SetDefault { value } => {
                    let declared = DeclaredType::parse(&model.columns[at].column_type);
                    model.columns[at].default =
                        declared_column::default_expr(value, &declared, rules)?;
                    model.columns[at].default_exact = true;
                }
                AlterColumnOperation::DropDefault => {
                    model.columns[at].default = DefaultExpr::None;
                    model.columns[at].default_exact = true;
                }
                other => return Err(Unmodelled(format!("ALTER COLUMN {other}"))),
            }
        }
        AlterTableOperation::AddConstraint { constraint, .. } => match constraint {
            TableConstraint::PrimaryKey(key) => {
                model.primary_key = column_names(model, &key.columns)?;
                key_columns_not_null(model);
            }
            TableConstraint::Unique(_) if model.primary_key.is_empty() => {
                return Err(Unmodelled("a unique key on a keyless table".into()));
            }
            _ => {}
        },
        AlterTableOperation::DropPrimaryKey { .. } => {
            if !replaced_key {
                // The server may promote a unique index the model does not know.
                return Err(Unmodelled("DROP PRIMARY KEY".into()));
            }
            model.primary_key.clear();
        }
        AlterTableOperation::DropIndex { .. } | AlterTableOperation::DropConstraint { .. } => {
            // It may be the unique index the server took as primary key.
            return Err(Unmodelled("DROP INDEX".into()));
        }
        AlterTableOperation::DropForeignKey { .. }
        | AlterTableOperation::Algorithm { .. }
        | AlterTableOperation::Lock { .. }
        | AlterTableOperation::AutoIncrement { .. } => {}
        other => return Err(Unmodelled(format!("ALTER TABLE … {other}"))),
    }
    Ok(())
}

/// Puts a declared column where `position` says: in place of column `at`
/// (MODIFY, CHANGE), or last (ADD) when no position is given.
fn place(
    model: &mut TableModel,
    declared: Declared,
    at: Option<usize>,
    position: Option<&MySQLColumnPosition>,
) -> Result<(), Unmodelled> {
    if declared.unique && model.primary_key.is_empty() {
        return Err(Unmodelled("a unique column in a keyless table".into()));
    }
    let name = declared.column.name.clone();
    match at {
        Some(at) => model.columns[at] = declared.column,
        None => model.columns.push(declared.column),
    }
    if let Some(position) = position {
        let from = model.column_index(&name).expect("just placed");
        let column = model.columns.remove(from);
        let to = match position {
            MySQLColumnPosition::First => 0,
            MySQLColumnPosition::After(after) => {
                model
                    .column_index(&after.value)
                    .ok_or_else(|| Unmodelled(format!("AFTER a column not seen: {after}")))?
                    + 1
            }
        };
        model.columns.insert(to, column);
    }
    if declared.primary_key {
        model.primary_key = vec![name];
    }
    key_columns_not_null(model);
    Ok(())
}

/// A column can be renamed `new` unless another column has that name: the
/// server resolves each operation against the columns before the statement
/// (`RENAME COLUMN a TO b, RENAME COLUMN b TO a` swaps them), the model one
/// operation after the other.
fn renamable(model: &TableModel, old: &Ident, new: &Ident) -> Result<(), Unmodelled> {
    match model.column_index(&new.value) {
        Some(i) if !model.columns[i].name.eq_ignore_ascii_case(&old.value) => Err(Unmodelled(
            format!("{old} renamed to {new}, which names another column"),
        )),
        _ => Ok(()),
    }
}

fn rename_in_key(model: &mut TableModel, old: &str, new: &str) {
    for column in &mut model.primary_key {
        if column.eq_ignore_ascii_case(old) {
            *column = new.to_owned();
        }
    }
}
