//! One row's change as change events: the key of each, and an update that
//! moves a row to another key split into a delete and a create (Debezium's
//! `__debezium.newkey`/`oldkey`). Shared by the sources: binlog rows events
//! and `pgoutput` changes alike.

use tributary_proto::{KeyChange, Op, Row, Value};

use crate::schema::TableSchema;

/// What one row change is, before its source and transaction are attached.
pub(crate) struct RowChange {
    pub(crate) op: Op,
    pub(crate) key: Row,
    pub(crate) before: Option<Row>,
    pub(crate) after: Option<Row>,
    pub(crate) key_change: Option<KeyChange>,
}

/// The change events of one row: an update that changes the primary key becomes a
/// delete of the old key and a create of the new one, as Debezium does. An
/// update without a before image (PostgreSQL's default replica identity,
/// when the key did not change) is an update whose `before` is null.
pub(crate) fn row_changes(
    schema: &TableSchema,
    op: Op,
    before: Option<Vec<Value>>,
    after: Option<Vec<Value>>,
) -> [Option<RowChange>; 2] {
    let row = |values: Vec<Value>| schema.value_row(values);
    let key_of = |values: &[Value]| Row {
        columns: schema.key_names.clone(),
        values: schema.key.iter().map(|&i| values[i].clone()).collect(),
    };
    let event = |op, key, before, after| {
        Some(RowChange {
            op,
            key,
            before,
            after,
            key_change: None,
        })
    };
    match (op, before, after) {
        (Op::Update, Some(b), Some(a)) => {
            let (old_key, new_key) = (key_of(&b), key_of(&a));
            if old_key == new_key {
                [event(Op::Update, new_key, Some(row(b)), Some(row(a))), None]
            } else {
                let moved = |change, event: Option<RowChange>| {
                    event.map(|e| RowChange {
                        key_change: Some(change),
                        ..e
                    })
                };
                [
                    moved(
                        KeyChange::NewKey(new_key.clone()),
                        event(Op::Delete, old_key.clone(), Some(row(b)), None),
                    ),
                    moved(
                        KeyChange::OldKey(old_key),
                        event(Op::Create, new_key, None, Some(row(a))),
                    ),
                ]
            }
        }
        (Op::Update, None, Some(a)) => [event(Op::Update, key_of(&a), None, Some(row(a))), None],
        (_, Some(b), None) => [event(Op::Delete, key_of(&b), Some(row(b)), None), None],
        (_, None, Some(a)) => [event(Op::Create, key_of(&a), None, Some(row(a))), None],
        _ => [None, None],
    }
}
