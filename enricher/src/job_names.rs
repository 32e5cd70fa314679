//! The names a job's expressions and join keys may use: `<input alias>.field`
//! (or a bare field path) for the event, `<join alias>.column` for a column of
//! the row an aliased join found, `<join alias>` for the whole row. A bare
//! path reads the event as the joins before left it (with the fields an
//! un-aliased join copied into it); once the input is named, a dotted name
//! must start with a name.

use crate::expr::{Names, Ref};
use crate::field_path::FieldPath;

/// An aliased join as names see it: its alias and the columns it selects
/// (every column when `None`).
pub type JoinName<'a> = (&'a str, Option<&'a [String]>);

/// The names of one job, or of its first joins (a join key may read the joins
/// before it only).
#[derive(Debug, Clone)]
pub struct JobNames<'a> {
    input: Option<&'a str>,
    /// Each join (`None` for an un-aliased join).
    joins: Vec<Option<JoinName<'a>>>,
}

impl<'a> JobNames<'a> {
    /// The names of an input with this alias and these joins.
    pub fn new(input: Option<&'a str>, joins: Vec<Option<JoinName<'a>>>) -> Self {
        JobNames { input, joins }
    }

    /// The names before join `i` runs.
    pub fn before(&self, i: usize) -> Self {
        JobNames {
            input: self.input,
            joins: self.joins[..i].to_vec(),
        }
    }

    /// The joins, `None` for an un-aliased one.
    pub fn joins(&self) -> &[Option<JoinName<'a>>] {
        &self.joins
    }

    fn event(parts: &[String]) -> Result<Ref, String> {
        FieldPath::from_segments(parts.to_vec())
            .map(Ref::Event)
            .map_err(|e| e.to_string())
    }
}

impl Names for JobNames<'_> {
    fn resolve(&self, parts: &[String]) -> Result<Ref, String> {
        let (first, rest) = parts.split_first().expect("a name has a part");
        if self.input == Some(first.as_str()) {
            if rest.is_empty() {
                return Err(format!(
                    "`{first}` is the input event: name one of its fields (`{first}.field`)"
                ));
            }
            return Self::event(rest);
        }
        let join = self
            .joins
            .iter()
            .position(|j| j.is_some_and(|(alias, _)| alias == first));
        let Some(join) = join else {
            // With a named input, a dotted name starts with a name: a typo
            // (`ord.qty`) would otherwise read a missing field, NULL.
            if let Some(input) = self.input
                && !rest.is_empty()
            {
                let joins: Vec<&str> = self.joins.iter().flatten().map(|(a, _)| *a).collect();
                return Err(format!(
                    "`{}`: `{first}` names neither the input (`{input}`) nor a join before \
                     this point ({joins:?}); write text in single quotes",
                    parts.join(".")
                ));
            }
            return Self::event(parts);
        };
        let (_, select) = self.joins[join].expect("found an aliased join");
        let Some((column, below)) = rest.split_first() else {
            return Ok(Ref::Row(join));
        };
        if let Some(select) = select
            && !select.contains(column)
        {
            return Err(format!(
                "`{first}.{column}`: the join `{first}` selects only {select:?}"
            ));
        }
        Ok(Ref::Column {
            join,
            column: column.clone(),
            below: below.to_vec(),
        })
    }
}
